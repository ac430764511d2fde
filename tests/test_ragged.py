"""Variable-length data: every layout's batches against a plain per-row reference.

Values encode their row and position (``row * K + position``), so any batch can be decoded
back to the elements it holds: each property below is checked on random lengths, batch sizes,
budgets and world sizes (hypothesis), never on a hand-picked result.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import looptoolkit as lt
from looptoolkit.ragged import _plans

K = 100_000  # values: row * K + position within the row


def corpus(lengths: list[int]) -> tuple[lt.Ragged, np.ndarray]:
    lens = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    row = np.repeat(np.arange(len(lens)), lens)
    pos = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lens)
    return lt.Ragged((row * K + pos).astype(np.int64), offsets), lens


def decode(out: object) -> tuple[np.ndarray, list[int]]:
    """The elements a batch holds (as codes), and the row of each of its rows or pieces."""
    if isinstance(out, lt.Padded):
        values, mask, lengths = map(np.asarray, out)
        assert mask.shape == values.shape[:2]
        np.testing.assert_array_equal(mask.sum(1), lengths)
        assert (values[~mask] == 0).all()
        rows = [int(v[0]) // K if n else -1 for v, n in zip(values, lengths, strict=True)]
        return values[mask], rows
    if isinstance(out, lt.Flat):
        values, cu, pos = (
            np.asarray(out.values),
            np.asarray(out.cu_seqlens),
            np.asarray(out.position_ids),
        )
        assert cu.dtype == np.int32 and cu[0] == 0 and cu[-1] == len(values)
        lens = np.diff(cu)
        assert out.max_seqlen == (int(lens.max()) if len(lens) else 0)
        np.testing.assert_array_equal(pos, values % K)
        rows = [int(values[a]) // K if b > a else -1 for a, b in itertools.pairwise(cu)]
        return values, rows
    assert isinstance(out, lt.Packed)
    values, seg, pos, cu = (np.asarray(x) for x in out[:4])
    real = seg > 0
    flat_seg, flat_val = seg.reshape(-1), values.reshape(-1)
    assert cu[-1] == flat_val.size and (np.diff(cu) > 0).all()
    # Each piece is consecutive elements of one row, positions restarting at 0.
    rows = []
    for a, b in itertools.pairwise(cu):
        piece = flat_val[a:b]
        if flat_seg[a] == 0:
            assert (flat_seg[a:b] == 0).all() and (piece == 0).all()
            continue
        assert (piece // K == piece[0] // K).all() and (np.diff(piece) == 1).all()
        np.testing.assert_array_equal(pos.reshape(-1)[a:b], np.arange(b - a))
        assert (flat_seg[a:b] == flat_seg[a]).all()
        rows.append(int(piece[0]) // K)
    assert out.max_seqlen == int(np.diff(cu).max())
    return values[real], rows


def assert_aligned(fixed: list[int], rows: list[int]) -> None:
    """Fixed leaves hold one row per ragged row (or piece), the same rows in the same order.

    A row of length 0 decodes as -1 (nothing says which row it was): it matches any.
    """
    assert len(fixed) == len(rows)
    assert all(f == r for f, r in zip(fixed, rows, strict=True) if r >= 0)


CONFIGS = [
    ("pad", dict(layout="pad")),
    ("flat", dict(layout="flat")),
    ("pad-grouped", dict(layout="pad", group_by_length=True)),
    ("pad-budget", dict(layout="pad", batch_tokens=None)),
    ("flat-budget", dict(layout="flat", batch_tokens=None)),
    ("flat-budget-grouped", dict(layout="flat", batch_tokens=None, group_by_length=True)),
    ("pack", dict(layout=(lt.PackLayout, {}))),
    ("fit-split", dict(layout=(lt.FitLayout, dict(long_rows="split")))),
    (
        "fit-truncate",
        dict(layout=(lt.FitLayout, dict(long_rows="truncate", max_segments=3))),
    ),
]


def make_args(
    name: str, batch: int, budget: int, seq_len: int, lens: np.ndarray
) -> tuple[int | None, dict]:
    kwargs = dict(dict(CONFIGS)[name])
    if "batch_tokens" in kwargs:
        longest = int(lens.max()) if len(lens) else 1
        kwargs["batch_tokens"] = max(budget, longest, 1)
        return None, kwargs
    if isinstance(kwargs["layout"], tuple):  # a packing layout, given its seq_len here
        layout, options = kwargs["layout"]
        kwargs["layout"] = layout(seq_len=seq_len, **options)
    return batch, kwargs


def epoch_batches(loader: lt.Loader) -> list[dict]:
    return list(loader)


lengths_st = st.lists(st.integers(0, 40), min_size=1, max_size=60).filter(lambda x: sum(x) > 0)


@settings(max_examples=25, deadline=None)
@given(
    lengths=lengths_st,
    name=st.sampled_from([c[0] for c in CONFIGS]),
    batch=st.integers(1, 7),
    budget=st.integers(1, 120),
    seq_len=st.integers(1, 30),
    world=st.integers(1, 4),
    seed=st.integers(0, 3),
    shuffle=st.sampled_from([True, False, "grouped"]),
)
def test_every_element_once_rows_aligned_ranks_disjoint(
    lengths, name, batch, budget, seq_len, world, seed, shuffle
):
    col, lens = corpus(lengths)
    bs, kwargs = make_args(name, batch, budget, seq_len, lens)
    data = {"ids": col, "row": np.arange(len(lens))}
    loaders = [
        lt.Loader(
            data, bs, rank=r, world_size=world, seed=seed, shuffle=shuffle, group_size=5, **kwargs
        )
        for r in range(world)
    ]
    counts = {len(loader) for loader in loaders}
    assert len(counts) == 1, "ranks get the same number of batches"
    seen: list[np.ndarray] = []
    for loader in loaders:
        epoch = loader._order.epoch(0)
        for i, batch_out in enumerate(loader):
            values, rows = decode(batch_out["ids"])
            # Fixed leaves come out one row per row (pad/flat) or per piece (pack/fit), aligned.
            fixed = np.asarray(batch_out["row"]).tolist()
            assert_aligned(fixed, rows)
            mask = epoch.padding_mask(i)
            if "budget" in name and kwargs.get("batch_tokens"):
                ids = batch_out["ids"]
                size = int(np.asarray(ids.values).shape[0]) * (
                    int(np.asarray(ids.values).shape[1]) if ids.values.ndim > 1 else 1
                )
                assert size <= kwargs["batch_tokens"]
            if mask is None:
                seen.append(values)
            elif not isinstance(loader._order, lt.Order):  # a whole batch repeated to even ranks
                assert mask.all()
            else:  # rows repeated to even the ranks
                keep = [r for r, pad in zip(rows, mask, strict=True) if not pad]
                seen.append(values[np.isin(values // K, keep)])
    got = np.sort(np.concatenate(seen)) if seen else np.zeros(0, np.int64)
    expect = np.sort(np.asarray(col.values))
    if name == "fit-truncate":
        keep = (expect % K) < seq_len
        expect = expect[keep]
    np.testing.assert_array_equal(got, expect)


def test_fixed_leaves_align_with_rows_and_pieces():
    col, _lens = corpus([5, 0, 12, 3, 7, 9, 1, 4])
    data = {"ids": col, "row": np.arange(8) * 10}
    for bs, kwargs in [
        (3, dict(layout="pad")),
        (3, dict(layout="flat")),
        (2, dict(layout=lt.PackLayout(seq_len=6))),
        (2, dict(layout=lt.FitLayout(seq_len=12))),
    ]:
        for b in lt.Loader(data, bs, seed=1, **kwargs):
            _, rows = decode(b["ids"])
            assert_aligned([x // 10 for x in b["row"].tolist()], rows)


@settings(max_examples=20, deadline=None)
@given(
    lengths=lengths_st,
    name=st.sampled_from([c[0] for c in CONFIGS]),
    batch=st.integers(1, 5),
    budget=st.integers(1, 90),
    seq_len=st.integers(1, 25),
    world=st.integers(1, 3),
    new_world=st.integers(1, 3),
    data=st.data(),
)
def test_resume_at_any_batch_gives_the_rest(
    lengths, name, batch, budget, seq_len, world, new_world, data
):
    col, lens = corpus(lengths)
    bs, kwargs = make_args(name, batch, budget, seq_len, lens)
    make = lambda r, w: lt.Loader({"ids": col}, bs, rank=r, world_size=w, seed=5, **kwargs)  # noqa: E731
    loaders = [make(r, world) for r in range(world)]
    n = len(loaders[0])
    k = data.draw(st.integers(0, n - 1))
    full = [[decode(b["ids"])[0] for b in make(r, world)] for r in range(world)]
    its = [iter(loader) for loader in loaders]
    for it in its:
        for _ in range(k):
            next(it)
    state = loaders[0].state_dict()
    assert state["offset"] == k * world * (
        1 if not isinstance(loaders[0].order, lt.Order) else loaders[0].order.batch_size
    )
    # The same world size: each rank's rest is exactly its remaining batches.
    for r in range(world):
        resumed = make(r, world)
        resumed.load_state_dict(state)
        rest = [decode(b["ids"])[0] for b in resumed]
        assert len(rest) == n - k
        for a, b in zip(rest, full[r][k:], strict=True):
            np.testing.assert_array_equal(a, b)
    # Another world size: the ranks together yield what was left, each element once.
    if state["offset"] % new_world == 0 and not isinstance(loaders[0].order, lt.Order):
        left = [
            full[r][i]
            for r in range(world)
            for i in range(k, n)
            if loaders[r].order.epoch(0).padding_mask(i) is None
        ]
        others = []
        for r in range(new_world):
            resumed = make(r, new_world)
            resumed.load_state_dict(state)
            epoch = resumed.order.epoch(0, state["offset"])
            others += [
                decode(b["ids"])[0] for i, b in enumerate(resumed) if epoch.padding_mask(i) is None
            ]
        flat_left = np.sort(np.concatenate(left)) if left else np.zeros(0)
        flat_others = np.sort(np.concatenate(others)) if others else np.zeros(0)
        np.testing.assert_array_equal(flat_left, flat_others)


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=80),
    budget=st.integers(50, 300),
    layout=st.sampled_from(["pad", "flat"]),
    grouped=st.booleans(),
    multiple=st.sampled_from([None, 8]),
)
def test_batch_tokens_is_never_exceeded(lengths, budget, layout, grouped, multiple):
    col, lens = corpus(lengths)
    rounded = layout == "pad" and multiple is not None
    spec = lt.PadLayout(pad_to_multiple_of=multiple) if rounded else layout
    longest = int(lens.max())
    budget = max(budget, -(-longest // multiple) * multiple if rounded else longest)
    loader = lt.Loader({"ids": col}, layout=spec, batch_tokens=budget, group_by_length=grouped)
    total = 0
    for b in loader:
        values = np.asarray(b["ids"].values)
        assert values.size <= budget
        total += int(np.asarray(b["ids"].lengths).sum()) if layout == "pad" else len(values)
        if multiple and layout == "pad":
            assert values.shape[1] % multiple == 0
    assert total == lens.sum()


def test_data_without_elements_is_refused_when_packing():
    col, _ = corpus([0, 0])
    with pytest.raises(ValueError, match="no batch"):
        lt.Loader({"ids": col}, 2, layout=lt.PackLayout(seq_len=4))


def test_a_row_over_the_budget_is_refused_at_construction():
    col, _ = corpus([3, 50, 2])
    with pytest.raises(ValueError, match=r"row 1 has 50 elements.*`batch_tokens` \(40\)"):
        lt.Loader({"ids": col}, layout="flat", batch_tokens=40)
    with pytest.raises(ValueError, match=r"more than `seq_len` \(10\).*long_rows"):
        lt.Loader({"ids": col}, 2, layout=lt.FitLayout(seq_len=10))
    with pytest.raises(ValueError, match="largest of `buckets`"):
        lt.Loader({"ids": col}, 2, layout=lt.PadLayout(buckets=[8, 16]))


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.integers(1, 64), min_size=1, max_size=80), batch=st.integers(1, 9))
def test_buckets_bound_the_shapes(lengths, batch):
    col, _ = corpus(lengths)
    buckets = [16, 32, 64]
    loader = lt.Loader({"ids": col}, batch, layout=lt.PadLayout(buckets=buckets))
    shapes = {b["ids"].values.shape[1] for b in loader}
    assert shapes <= set(buckets)


def test_truncated_tokens_and_padding_efficiency_are_counted():
    col, lens = corpus([30, 5, 12, 40, 3])
    loader = lt.Loader(
        {"ids": col}, 2, layout=lt.FitLayout(seq_len=16, long_rows="truncate"), stats=True
    )
    batches = list(loader)
    stats = loader.stats
    assert stats.truncated_tokens == int(np.maximum(lens - 16, 0).sum())
    real = sum(int((np.asarray(b["ids"].segment_ids) > 0).sum()) for b in batches)
    slots = sum(int(np.asarray(b["ids"].values).size) for b in batches)
    assert stats.tokens == real and stats.token_slots == slots
    assert stats.padding_efficiency == pytest.approx(real / slots)
    assert stats.rows_per_batch == pytest.approx(slots / 16 / len(batches))
    assert "padding_efficiency" in stats.as_dict()


def test_pack_is_concat_then_split_in_the_epoch_order():
    col, _lens = corpus([4, 7, 1, 9, 3, 6])
    loader = lt.Loader({"ids": col}, 2, layout=lt.PackLayout(seq_len=5), seed=2)
    order = loader.order.global_order(0)
    stream = np.concatenate([np.asarray(col[int(i)]) for i in order])
    rows = np.concatenate([np.asarray(b["ids"].values).reshape(-1, 5) for b in loader])
    flat = rows.reshape(-1)
    np.testing.assert_array_equal(flat[: len(stream)], stream)
    assert (flat[len(stream) :] == 0).all() and len(flat) - len(stream) < 5


def test_fit_rows_hold_whole_documents_within_seq_len():
    rng = np.random.default_rng(0)
    col, lens = corpus(rng.integers(1, 30, 300).tolist())
    loader = lt.Loader({"ids": col}, 4, layout=lt.FitLayout(seq_len=32, max_segments=4))
    seen = []
    for b in loader:
        seg = np.asarray(b["ids"].segment_ids)
        assert seg.max() <= 4
        _values, rows = decode(b["ids"])
        seen += rows
    assert sorted(seen) == list(range(300)), "every document whole, once"
    eff = lens.sum() / (
        32
        * sum(
            np.asarray(b["ids"].values).shape[0]
            for b in lt.Loader({"ids": col}, 4, layout=lt.FitLayout(seq_len=32, max_segments=4))
        )
    )
    assert eff > 0.8


def test_length_grouped_batches_are_sorted_windows_shuffled_whole():
    rng = np.random.default_rng(1)
    col, _lens = corpus(rng.integers(1, 500, 2000).tolist())
    grouped = [
        np.asarray(b["ids"].lengths) for b in lt.Loader({"ids": col}, 16, group_by_length=True)
    ]
    plain = [np.asarray(b["ids"].lengths) for b in lt.Loader({"ids": col}, 16)]
    eff = lambda bs: sum(b.sum() for b in bs) / sum(b.max() * len(b) for b in bs)  # noqa: E731
    assert eff(grouped) > 0.9 > eff(plain)
    firsts = [int(b.max()) for b in grouped]
    assert firsts != sorted(firsts, reverse=True), (
        "whole batches are shuffled, lengths do not cycle"
    )


def test_planning_ten_million_documents_is_vectorised():
    # A shortened version of the 10M-document study (benchmarks): 1M documents here.
    rng = np.random.default_rng(0)
    lens = np.clip(rng.lognormal(np.log(250), 0.9, 1_000_000), 8, 4000).astype(np.int64)
    cost = _plans.greedy_bounds(lens, 8192, mode="sum", window=_plans.window_size(len(lens)))
    sums = np.add.reduceat(lens, cost[:-1])
    assert sums.max() <= 8192 and cost[-1] == len(lens)
    assert sums.mean() > 0.9 * 8192 - lens.mean()
