"""The tokens workload of ``looptoolkit compare``: its hand loops against per-document references,
its plans, its content check, and a quick run in which every row is checked and timed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looptoolkit.bench import compare
from looptoolkit.bench.check_documents import check_documents
from looptoolkit.bench.results import Run
from looptoolkit.bench.variants import Context, Variant
from looptoolkit.bench.variants.epochs import EpochPipeline
from looptoolkit.bench.variants.tokens import (
    LAYOUTS,
    FlatBatch,
    PackedBatch,
    PaddedBatch,
    Settings,
    batch_count,
    budget_starts,
    hand_loop,
    make_corpus,
    plan,
)
from looptoolkit.bench.workloads import make_workload


def _corpus(seed: int, n: int, longest: int = 60) -> dict[str, np.ndarray]:
    """``n`` documents of 8..``longest`` random tokens (0 included: padding proves nothing)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, longest + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return {"values": rng.integers(0, 5, int(offsets[-1]), dtype=np.int32), "offsets": offsets}


def _docs(data: dict[str, np.ndarray]) -> list[list[int]]:
    o = data["offsets"].tolist()
    return [data["values"][a:b].tolist() for a, b in itertools.pairwise(o)]


def _reference(batching: str, data: dict[str, np.ndarray], s: Settings, epoch: int) -> list:
    """Each batch of an epoch built one document, one token at a time, in plain Python."""
    docs = _docs(data)
    batches = plan(batching, np.diff(data["offsets"]), epoch=epoch, s=s)
    if batching == "pack":
        stream, starts = [], []  # (token, position in its document piece)
        for d in batches[0].tolist():
            starts.append(len(stream))
            stream += docs[d]
        out = []
        for p0 in range(0, len(stream), s.seq_len * s.rows):
            rows = []
            for r0 in range(p0, min(p0 + s.seq_len * s.rows, len(stream)), s.seq_len):
                row = stream[r0 : r0 + s.seq_len]
                seg, pos, segs, poss = 0, 0, [], []
                for t in range(r0, r0 + len(row)):
                    if t == r0 or t in starts:
                        seg, pos = seg + 1, 0
                    segs.append(seg)
                    poss.append(pos)
                    pos += 1
                pad = s.seq_len - len(row)
                rows.append((row + [0] * pad, segs + [0] * pad, poss + [0] * pad))
            values, segs, poss = (np.array([r[k] for r in rows]) for k in range(3))
            cuts = [
                i
                for i, (a, b) in enumerate(
                    zip(segs.reshape(-1), [-1, *segs.reshape(-1)][:-1], strict=True)
                )
                if a > 0 and (a != b or i % s.seq_len == 0)
            ]
            real, size = int((segs > 0).sum()), segs.size
            cu = [*cuts, real, size] if real < size else [*cuts, size]  # padding: a piece
            out.append(PackedBatch(values, segs, poss, np.array(cu), int(max(np.diff(cu)))))
        return out
    out = []
    for idx in batches:
        rows = [docs[i] for i in idx.tolist()]
        lengths = np.array([len(r) for r in rows])
        if batching == "flat":
            cu = np.concatenate([[0], np.cumsum(lengths)])
            positions = [p for r in rows for p in range(len(r))]
            values = np.array([t for r in rows for t in r])
            out.append(FlatBatch(values, cu, np.array(positions), int(lengths.max())))
            continue
        width = int(lengths.max())
        values = np.array([r + [0] * (width - len(r)) for r in rows])
        mask = np.array([[j < len(r) for j in range(width)] for r in rows])
        out.append(PaddedBatch(values, mask, lengths))
    return out


def _same(got, want) -> None:
    assert type(got) is type(want)
    for name, a, b in zip(want._fields, got, want, strict=True):
        if name == "max_seqlen":
            assert a == b and type(a) is int
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


SMALL = Settings(batch=5, budget=120, seq_len=32, rows=3, window=2)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 40),
    batching=st.sampled_from(LAYOUTS),
    how=st.sampled_from(["copy", "take"]),
)
def test_hand_loops_equal_a_per_document_reference(seed, n, batching, how):
    data = _corpus(seed, n)
    loop = hand_loop(data, 0, batching=batching, how=how, seed=0, s=SMALL)
    for epoch in range(2):
        got, want = list(loop), _reference(batching, data, SMALL, epoch)
        assert len(got) == len(want) == len(loop)
        for g, w in zip(got, want, strict=True):
            _same(g, w)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 300), budget=st.integers(60, 400))
def test_plans_cover_the_epoch_and_keep_their_bounds(seed, n, budget):
    lengths = np.random.default_rng(seed).integers(8, 61, n)
    s = Settings(batch=7, budget=budget, window=3)
    for batching in ("pad", "group", "budget", "flat"):
        batches = plan(batching, lengths, seed=seed, epoch=1, s=s)
        assert sorted(np.concatenate(batches).tolist()) == list(range(n))
        assert len(batches) == batch_count(batching, lengths, s, seed=seed, epoch=1)
        if batching == "budget":  # padding counted; a document longer than the budget alone
            assert all(len(b) * lengths[b].max() <= budget or len(b) == 1 for b in batches)
        else:
            assert all(len(b) <= 7 for b in batches)
    assert sorted(plan("pack", lengths, seed=seed, s=s)[0].tolist()) == list(range(n))


def test_budget_starts_greedy_within_windows():
    assert budget_starts([5, 3, 2, 2, 9, 1], 4, 10) == [0, 2, 4, 5]
    assert budget_starts([9, 9], 8, 8) == [0, 1]  # too long: alone
    assert budget_starts([2] * 10, 3, 100) == [0, 3, 6, 9]  # never across a window


def test_grouped_batches_are_sorted_within_windows_and_shuffled():
    lengths = np.random.default_rng(0).integers(8, 4000, 3200)
    batches = plan("group", lengths)
    spread = [lengths[b].max() / lengths[b].min() for b in batches[:-1]]
    assert np.median(spread) < 1.2  # sorted within windows of 50 batches
    firsts = [int(lengths[b].max()) for b in batches]
    assert firsts != sorted(firsts, reverse=True)  # whole batches shuffled


def test_the_corpus_is_seeded_and_shaped():
    a, b = make_corpus(3000, seed=1), make_corpus(3000, seed=1)
    np.testing.assert_array_equal(a["values"], b["values"])
    lengths = np.diff(a["offsets"])
    assert lengths.min() >= 8 and lengths.max() <= 4000 and 200 < np.median(lengths) < 300
    assert a["offsets"].dtype == np.int64 and a["values"].dtype == np.int32


def _check(batching: str, batches: list, data) -> object:
    w = make_workload("tokens", quick=True)
    w.data = data
    v = Variant("x", "numpy", "", lambda _: [], None, batching=batching)
    return check_documents(
        v, EpochPipeline(lambda e: iter(batches), len(batches)), Context(w, data, "cpu")
    )


@pytest.mark.parametrize("batching", LAYOUTS)
def test_the_check_passes_the_hand_loops_and_fails_broken_batches(batching):
    data = _corpus(3, 60, longest=600)
    good = list(hand_loop(data, 0, batching=batching, how="copy"))
    assert _check(batching, good, data).ok
    dropped = _check(batching, good[:-1], data)
    assert not dropped.ok and (
        "never appeared" in dropped.detail or "ends inside" in dropped.detail
    )
    first = good[0]
    values = np.array(first.values, copy=True)
    values.reshape(-1)[3] += 1  # a token changed
    broken = _check(batching, [first._replace(values=values), *good[1:]], data)
    assert not broken.ok and broken.detail.startswith("batch 0 ")
    twice = _check(batching, [good[0], *good], data)
    assert not twice.ok


def test_the_check_reports_padding_efficiency():
    data = _corpus(4, 100, longest=300)
    pad = _check("pad", list(hand_loop(data, 0, batching="pad", how="take")), data)
    flat = _check("flat", list(hand_loop(data, 0, batching="flat", how="take")), data)
    total = int(data["offsets"][-1])
    assert pad.extra["checked_tokens"] == flat.extra["checked_tokens"] == total
    assert 0 < pad.extra["padding_efficiency"] < 1 and flat.extra["padding_efficiency"] == 1.0


def test_position_and_segment_ids_are_checked():
    data = _corpus(5, 80, longest=100)
    good = list(hand_loop(data, 0, batching="pack", how="copy"))
    positions = np.array(good[0].position_ids, copy=True)
    positions[0, 1] = 0
    assert not _check("pack", [good[0]._replace(position_ids=positions), *good[1:]], data).ok
    segments = np.array(good[0].segment_ids, copy=True)
    segments[0] = 1  # one piece for the whole row
    assert not _check("pack", [good[0]._replace(segment_ids=segments), *good[1:]], data).ok


@pytest.fixture(scope="module")
def tokens_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tokens")
    assert (
        compare.run(
            ["--quick", "--workload", "tokens", "--device", "cpu", "--no-plot", "--out", str(out)]
        )
        == 0
    )
    return Run.load(out / "compare-cpu.json")


def test_a_quick_tokens_run_checks_and_times_every_row(tokens_run):
    group = tokens_run.group("tokens")
    names = {r.name for r in group.rows}
    floors = {f"floor-{b}-{how}" for b in LAYOUTS for how in ("copy", "take")}
    loaders = {
        "loader-pad",
        "loader-group",
        "loader-budget",
        "loader-pack",
        "loader-flat",
    }
    assert floors | loaders <= names
    for row in group.rows:
        assert row.status == "ok" and row.timed, (row.name, row.detail)
        assert row.check.startswith("documents"), row
        assert 0 < row.extra["padding_efficiency"] <= 1
        assert group.ratio(row, row.floor) is not None
    assert group.baseline is None and group.info["tokens"] > 0
    keys = {v.key: v for v in tokens_run.verdicts}
    for key in ("tokens-pad", "tokens-group", "tokens-budget", "tokens-pack", "tokens-flat"):
        assert keys[key].value is not None and keys[key].status == "not judged at --quick"


def test_each_row_is_judged_against_the_faster_of_its_floors(tokens_run):
    group = tokens_run.group("tokens")
    rows = group.timed()
    copy, take = rows["floor-pad-copy"], rows["floor-pad-take"]
    faster = min(copy.median_s, take.median_s)
    loader = rows["loader-pad"]
    assert group.ratio(loader, loader.floor) == pytest.approx(loader.median_s / faster)
    value = next(v for v in tokens_run.verdicts if v.key == "tokens-pad").value
    assert value == pytest.approx(loader.median_s / faster)


def test_the_planning_study_times_every_batching():
    from benchmarks.ragged_plan import BATCHINGS, REFERENCE, column, plan_times

    data = column(3000)
    assert len(data) == 3000 and data.values.strides == (0,)  # no tokens in memory
    times = plan_times(3000, 2, ["pad", "budget", "pack"])
    assert list(times) == [REFERENCE, "pad", "budget", "pack"]
    assert all(len(t) == 2 and min(t) > 0 for t in times.values())
    assert {"pad", "group", "budget", "pack", "flat"} <= set(BATCHINGS)
