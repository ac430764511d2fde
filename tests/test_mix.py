"""Mixtures: exact proportions over every prefix, each source's own order, resume, ranks."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import looptoolkit as lt
from looptoolkit.mix._interleave import Interleave, period, rational_weights
from looptoolkit.order._epochs import state_of


def _sources(sizes, base=1000):
    """Source ``s`` holds ids ``s * base + i``: a row tells its source and its row."""
    return {
        f"s{s}": {
            "id": np.arange(n, dtype=np.int64) + s * base,
            "x": np.full((n, 2), s, np.float32),
        }
        for s, n in enumerate(sizes)
    }


def _ids(batches):
    return np.concatenate([np.asarray(b["id"]) for b in batches])


def _prefix_deviation(which, weights):
    """The largest |count_s(p) - w_s p| over every prefix p of the source sequence ``which``."""
    k = len(weights)
    onehot = np.zeros((len(which), k))
    onehot[np.arange(len(which)), which] = 1
    counts = np.cumsum(onehot, axis=0)
    p = np.arange(1, len(which) + 1)[:, None]
    w = np.asarray(weights, dtype=float) / np.sum(weights)
    return float(np.abs(counts - w * p).max())


# -- the interleave ------------------------------------------------------------------


@pytest.mark.parametrize(
    "weights",
    [[0.7, 0.3], [1, 2, 3], [1, 1, 1], [0.5, 0.25, 0.125, 0.125], [0.4, 0.25, 0.15, 0.12, 0.08]],
)
def test_small_integer_ratios_are_exact_and_within_the_bound(weights):
    m = rational_weights(weights)
    w = np.asarray(weights, float) / sum(weights)
    assert np.allclose(np.asarray(m) / sum(m), w, rtol=0, atol=1e-15)
    il = Interleave([(0, m, None)], len(m))
    which = il.sources(0, 5 * sum(m) + 7)
    k = len(m)
    assert _prefix_deviation(which, w) <= 1 - 1 / (2 * k - 2) + 1e-9


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(st.integers(1, 20), st.floats(1e-4, 1.0, allow_nan=False)),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 10**12),
)
def test_any_weights_stay_within_one_sample_over_every_prefix(weights, q0):
    k = len(weights)
    m = rational_weights(weights)
    il = Interleave([(0, m, None)], k)
    which = il.sources(0, 4000)
    # Within one of the given weights over these prefixes (and below 1 - 1/(2K-2) of the
    # rounded ones everywhere).
    assert _prefix_deviation(which, weights) < 1
    assert _prefix_deviation(il.sources(0, 3 * sum(m) // 2 + 5), m) <= 1 - 1 / max(2, 2 * k - 2)
    # Counts at any position equal the counted ids before it (computed, not replayed).
    counts = il.counts_at(q0)
    run = il.sources(q0, q0 + 500)
    after = il.counts_at(q0 + 500)
    assert np.array_equal(after - counts, np.bincount(run, minlength=k))
    assert counts.sum() == q0


def test_period_tables_stay_below_the_tijdeman_bound_on_random_weights():
    # The greedy "largest deficit" rule exceeds one sample on some weights; the period
    # table uses Tijdeman's rule and stays below 1 - 1/(2K - 2) on the same weights.
    rng = np.random.default_rng(5)
    worst = 0.0
    for _ in range(20):
        w = rng.dirichlet([0.3] * 5)
        m = rational_weights(list(w))
        ids = period(m)[0][:3000]
        worst = max(worst, _prefix_deviation(ids, m))
    assert worst <= 1 - 1 / 8 + 1e-9


# -- the Loader over a mixture ---------------------------------------------------------


def test_every_batch_holds_each_source_in_proportion_and_each_source_its_own_permutation():
    mix = lt.Mix(_sources([70, 30]), {"s0": 0.7, "s1": 0.3}, source_key="src")
    loader = lt.Loader(mix, 10, seed=3)
    assert len(loader) == 10
    batches = list(loader)
    for b in batches:
        assert np.bincount(b["src"], minlength=2).tolist() == [7, 3]
        assert np.array_equal(b["src"], b["id"] // 1000)  # the source leaf names the row's source
        assert np.array_equal(b["x"][:, 0], b["src"])  # rows aligned across leaves
    ids = _ids(batches)
    assert sorted(ids.tolist()) == list(range(70)) + list(range(1000, 1030))
    # The next epoch goes on with a new order of each source.
    again = _ids(loader)
    assert sorted(again.tolist()) == sorted(ids.tolist()) and not np.array_equal(again, ids)


def test_a_source_that_runs_out_starts_its_next_epoch_while_the_others_go_on():
    mix = lt.Mix(_sources([50, 10]), [0.5, 0.5], epoch="all_exhausted")
    # Until the larger source's 50th row (position 98 of 0, 2, 4, ...): the smaller one
    # has given 49 rows by then, four epochs and nine rows of a fifth.
    assert len(mix) == 99
    ids = _ids(lt.Loader(mix, 20, seed=1))
    assert sorted(ids[ids < 1000].tolist()) == list(range(50))
    small = ids[ids >= 1000]
    assert len(small) == 49
    for e in range(4):  # each epoch of the small source is a permutation, in a new order
        assert sorted(small[10 * e : 10 * e + 10].tolist()) == list(range(1000, 1010))
    assert len({tuple(small[10 * e : 10 * e + 10]) for e in range(4)}) > 1
    first = lt.Mix(_sources([50, 10]), [0.5, 0.5], epoch="first_exhausted")
    assert len(first) == 20  # the small source's tenth draw is at position 19 (1, 3, 5, ...)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    raw=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    batch=st.integers(1, 9),
    world=st.integers(1, 4),
    seed=st.integers(0, 2**40),
    shuffle=st.sampled_from([True, "grouped", False]),
)
def test_ranks_together_are_the_mixed_order_and_each_source_a_permutation(
    sizes, raw, batch, world, seed, shuffle
):
    weights = raw[: len(sizes)]
    mix = lt.Mix(_sources(sizes), weights, epoch=sum(sizes) * 2)
    one = lt.Loader(mix, batch * world, seed=seed, shuffle=shuffle, group_size=4)
    order = _ids(one)
    ranks = [
        lt.Loader(mix, batch, seed=seed, shuffle=shuffle, group_size=4, rank=r, world_size=world)
        for r in range(world)
    ]
    per_rank = [[np.asarray(b["id"]) for b in loader] for loader in ranks]
    assert len({len(p) for p in per_rank}) == 1  # equal batch counts
    step = batch * world
    for i in range(len(per_rank[0])):
        window = order[i * step : (i + 1) * step]
        got = np.concatenate([p[i] for p in per_rank])
        # The ranks' batches of one step are that step's window (padding wraps to the start).
        assert set(window.tolist()) <= set(got.tolist())
        assert len(got) <= step
    which = order // 1000
    assert _prefix_deviation(which, weights) < 1
    for s, n_s in enumerate(sizes):  # each source epoch is a permutation of the source
        rows = order[which == s] - s * 1000
        for e in range(len(rows) // n_s):
            assert sorted(rows[e * n_s : (e + 1) * n_s].tolist()) == list(range(n_s))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 30), min_size=2, max_size=4),
    raw=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    batch=st.integers(1, 6),
    worlds=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stop=st.integers(0, 12),
)
def test_resume_at_another_world_size_equals_an_uninterrupted_run(sizes, raw, batch, worlds, stop):
    w0, w1 = worlds
    mix = lt.Mix(_sources(sizes), raw[: len(sizes)])
    full = _ids(lt.Loader(mix, batch * w0, seed=7))
    first = [lt.Loader(mix, batch, seed=7, rank=r, world_size=w0) for r in range(w0)]
    epoch_end = len(first[0])
    stop = min(stop, epoch_end)
    seen = []
    iters = [iter(loader) for loader in first]
    for _ in range(stop):
        seen.append(np.concatenate([np.asarray(next(it)["id"]) for it in iters]))
    state = first[0].state_dict()
    if state[lt.Loader.OFFSET_KEY] % w1 or state[lt.Loader.EPOCH_KEY]:
        return  # not a resumable position for that world size, or the epoch is over
    second = [lt.Loader(mix, batch, seed=7, rank=r, world_size=w1) for r in range(w1)]
    for loader in second:
        loader.load_state_dict(state)
    rest = [[np.asarray(b["id"]) for b in loader] for loader in second]
    offset = state[lt.Loader.OFFSET_KEY]
    n = mix.length
    # The first run consumed positions [0, offset) of the mixed order, the second the rest
    # (each padded by wrapping to the epoch's start, as DistributedSampler pads).
    if seen and offset <= n:
        assert sorted(np.concatenate(seen).tolist()) == sorted(full[:offset].tolist())
    later = np.concatenate([np.concatenate(step) for step in zip(*rest, strict=True)] or [[]])
    if offset < n:
        assert set(full[offset:n].tolist()) <= set(later.tolist()) <= set(full.tolist())
        assert len(later) == -(-(n - offset) // w1) * w1


def test_resume_at_position_ten_to_the_ninth_is_computed_not_replayed():
    mix = lt.Mix(_sources([1000, 3000, 500]), [0.5, 0.3, 0.2], epoch=4 * 10**9)
    loader = lt.Loader(mix, 64, seed=11)
    state = state_of(loader.order, 0, 10**9)
    start = time.perf_counter()
    loader.load_state_dict(state)
    batch = next(iter(loader))
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, elapsed
    # The batch is the one at positions [10^9, 10^9 + 64) of the mixed order.
    expect = loader.order.epoch(0, 10**9).batch(0)
    assert np.array_equal(batch["id"], mix.columns["id"][expect])
    counts = mix.interleave.counts_at(10**9)
    assert abs(counts[0] - 0.5 * 10**9) < 1 and counts.sum() == 10**9


def test_changed_weights_at_resume_apply_from_there_and_count_nothing_again():
    sizes = [200, 200]
    first = lt.Loader(lt.Mix(_sources(sizes), [0.5, 0.5]), 20, seed=2)
    it = iter(first)
    before = _ids([next(it) for _ in range(4)])
    state = first.state_dict()
    second = lt.Loader(lt.Mix(_sources(sizes), [0.9, 0.1]), 20, seed=2)
    second.load_state_dict(state)
    after = _ids(second)
    # The new weights from the resumed position on: every batch 18 / 2.
    for i in range(0, len(after) - 20, 20):
        assert np.bincount(after[i : i + 20] // 1000, minlength=2).tolist() == [18, 2]
    # Each source's first epoch goes on where it stopped: no row drawn again.
    for s in range(2):
        rows = np.concatenate([before, after])
        rows = rows[rows // 1000 == s][: sizes[s]]
        assert len(set(rows.tolist())) == len(rows)
    # A resumed run with unchanged weights is the uninterrupted run.
    same = lt.Loader(lt.Mix(_sources(sizes), [0.5, 0.5]), 20, seed=2)
    same.load_state_dict(state)
    whole = _ids(lt.Loader(lt.Mix(_sources(sizes), [0.5, 0.5]), 20, seed=2))
    assert np.array_equal(np.concatenate([before, _ids(same)]), whole)
    # ... and a state saved after the change resumes the changed run exactly.
    it = iter(second)
    again = lt.Loader(lt.Mix(_sources(sizes), [0.9, 0.1]), 20, seed=2)
    second.load_state_dict(state)
    it = iter(second)
    part = _ids([next(it)])
    later = second.state_dict()
    again.load_state_dict(later)
    assert np.array_equal(np.concatenate([part, _ids(again)]), after)


def test_a_schedule_changes_the_weights_at_its_positions_exactly():
    mix = lt.Mix(_sources([500, 500]), schedule=[(0, [0.8, 0.2]), (100, [0.2, 0.8])], epoch=300)
    ids = _ids(lt.Loader(mix, 10, seed=0, shuffle=False))
    which = ids // 1000
    assert _prefix_deviation(which[:100], [0.8, 0.2]) < 1
    assert _prefix_deviation(which[100:300], [0.2, 0.8]) < 1
    # Resumed in the second stage: the same rows.
    loader = lt.Loader(mix, 10, seed=0, shuffle=False)
    it = iter(loader)
    head = [next(it) for _ in range(15)]
    state = loader.state_dict()
    again = lt.Loader(mix, 10, seed=0, shuffle=False)
    again.load_state_dict(state)
    assert np.array_equal(np.concatenate([_ids(head), _ids(again)]), ids)


def test_stats_count_rows_per_source():
    mix = lt.Mix(_sources([70, 30]), {"s0": 0.7, "s1": 0.3})
    loader = lt.Loader(mix, 10, stats=True)
    for _ in loader:
        pass
    assert loader.stats.source_rows == {"s0": 70, "s1": 30}


def test_mixture_pickles_and_routes_agree():
    mix = lt.Mix(_sources([40, 20]), [2, 1])
    loader = lt.Loader(mix, 8, seed=4)
    it = iter(loader)
    next(it)
    copy = pickle.loads(pickle.dumps(loader))
    reference = list(lt.Loader(mix, 8, seed=4))
    assert np.array_equal(next(iter(copy))["id"], reference[1]["id"])


def test_memmap_sources_read_in_place_give_the_in_memory_batches(tmp_path):
    sizes = [300, 120]
    sources = _sources(sizes)
    mapped = {}
    for name, data in sources.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, data["x"])
        mapped[name] = {"id": data["id"], "x": np.load(path, mmap_mode="r")}
    a = list(lt.Loader(lt.Mix(sources, [3, 1]), 32, seed=9))
    b = list(lt.Loader(lt.Mix(mapped, [3, 1]), 32, seed=9))
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x["id"], y["id"]) and np.array_equal(x["x"], y["x"])


def test_ragged_sources_mix_into_padded_flat_and_packed_batches():
    rng = np.random.default_rng(0)

    def docs(n, value):
        return lt.Ragged.from_rows([np.full(rng.integers(1, 9), value) for _ in range(n)])

    mix = lt.Mix(
        {"web": {"tokens": docs(60, 1)}, "code": {"tokens": docs(20, 2)}},
        {"web": 3, "code": 1},
        source_key="src",
    )
    padded = list(lt.Loader(mix, 8, seed=1, stats=True))
    for b in padded:
        values, mask = np.asarray(b["tokens"].values), np.asarray(b["tokens"].mask)
        # a document's tokens are its source's value; the source leaf says which
        assert np.array_equal(values[:, 0], b["src"] + 1)
        assert np.all(values[mask] == np.repeat(b["src"] + 1, mask.sum(1)))
        assert abs(int((b["src"] == 1).sum()) - 2) < 1 or len(b["src"]) < 8
    flat = lt.Loader(mix, 8, seed=1, layout="flat", stats=True)
    total = sum(int(np.asarray(b["tokens"].cu_seqlens)[-1]) for b in flat)
    assert total == int(mix.columns["tokens"].lengths.sum())
    assert sum(flat.stats.source_tokens.values()) == total
    packed = list(lt.Loader(mix, 2, seed=1, layout=lt.PackLayout(seq_len=16)))
    assert {int(v) for b in packed for v in np.unique(np.asarray(b["tokens"].values))} <= {0, 1, 2}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: lt.Mix(_sources([5, 5]), [1, 0]), "is 0; drop the source"),
        (lambda: lt.Mix(_sources([5, 5]), [1, -1]), "must be > 0"),
        (lambda: lt.Mix(_sources([5, 5]), [1, float("nan")]), "must be finite"),
        (lambda: lt.Mix(_sources([5, 5]), [1]), "one weight per source"),
        (lambda: lt.Mix(_sources([5, 5]), {"s0": 1, "web": 1}), "must name every source"),
        (lambda: lt.Mix({"a": {"x": np.zeros(3)}, "b": {"y": np.zeros(3)}}), "same leaves"),
        (
            lambda: lt.Mix({"a": {"x": np.zeros(3)}, "b": {"x": np.zeros(3, np.int32)}}),
            "cast them alike",
        ),
        (lambda: lt.Mix({"a": {"x": np.zeros(3)}, "b": {"x": np.zeros(0)}}), "is empty"),
        (lambda: lt.Mix(_sources([5, 5]), schedule=[(0, [1, 1]), (0, [1, 2])]), "must increase"),
        (lambda: lt.Mix(_sources([5, 5]), schedule=[(5, [1, 1])]), "start at position 0"),
        (lambda: lt.Mix(_sources([5, 5]), epoch="forever"), "`epoch` must be"),
        (lambda: lt.Mix({}), "at least one source"),
        (lambda: lt.Loader(lt.Mix(_sources([5, 5])), 2, weights=np.ones(10)), "subset or weight"),
    ],
)
def test_bad_mixtures_are_refused_at_construction_with_the_fix(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


_KILLED_RUN = """
import json, os, signal, sys
import numpy as np
import looptoolkit as lt

out, weights, kill_at = sys.argv[1], [float(w) for w in sys.argv[2].split(",")], int(sys.argv[3])
sources = {
    f"s{s}": {"id": np.arange(n, dtype=np.int64) + s * 1000} for s, n in enumerate([90, 60, 30])
}
loader = lt.Loader(lt.Mix(sources, weights), 8, seed=5)
if os.path.exists(out + ".state"):
    with open(out + ".state") as f:
        loader.load_state_dict(json.load(f))
for epoch in range(2):
    for i, batch in enumerate(loader):
        with open(out, "a") as f:
            f.write(" ".join(map(str, batch["id"].tolist())) + "\\n")
        with open(out + ".tmp", "w") as f:
            json.dump(loader.state_dict(), f)
        os.replace(out + ".tmp", out + ".state")
        if kill_at == i:
            os.kill(os.getpid(), signal.SIGKILL)
"""


def test_resume_after_a_sigkill_equals_an_uninterrupted_run(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(_KILLED_RUN)

    def run(out, weights, kill_at):
        return subprocess.run(
            [sys.executable, str(script), str(out), weights, str(kill_at)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    whole = tmp_path / "whole"
    assert run(whole, "3,2,1", -1).returncode == 0
    killed = tmp_path / "killed"
    first = run(killed, "3,2,1", 7)
    assert first.returncode == -9, first.stderr  # killed mid-epoch, state on disk
    # A new process: the saved state puts its first pass in the middle of epoch 0, and
    # its second pass runs epoch 1, as the uninterrupted run's did.
    second = run(killed, "3,2,1", -1)
    assert second.returncode == 0, second.stderr
    lines = killed.read_text().split("\n")
    expect = whole.read_text().split("\n")
    assert lines == expect and len(expect) > 20


def test_a_source_can_be_a_subset_or_a_weighted_draw_of_its_rows():
    keep = np.arange(0, 100, 10)
    mix = lt.Mix(
        _sources([100, 50]),
        [1, 1],
        source_options={
            "s0": {"indices": keep},
            "s1": {"weights": np.r_[np.zeros(25), np.ones(25)], "num_samples": 25},
        },
        epoch=40,
    )
    ids = _ids(lt.Loader(mix, 10, seed=0))
    first = ids[ids < 1000]
    assert sorted(first[:10].tolist()) == keep.tolist()  # a permutation of the subset
    assert sorted(first[10:20].tolist()) == keep.tolist()  # and its next epoch
    assert np.all(ids[ids >= 1000] >= 1025)  # rows of zero weight never drawn
    with pytest.raises(ValueError, match="`source_options` of 's1'"):
        lt.Mix(_sources([10, 10]), source_options={"s1": {"indices": [50]}})


def test_store_sources_keep_their_chunk_aware_grouped_order(tmp_path):
    zarr = pytest.importorskip("zarr")
    sources = _sources([640, 320])
    stored = {}
    for name, data in sources.items():
        group = zarr.open_group(str(tmp_path / f"{name}.zarr"), mode="w")
        for key, a in data.items():
            group.create_array(key, shape=a.shape, chunks=(64, *a.shape[1:]), dtype=a.dtype)
            group[key][:] = a
        stored[name] = {key: group[key] for key in data}
    kw = {"seed": 3, "shuffle": "grouped", "group_size": 128}
    got = list(lt.Loader(lt.Mix(stored, [2, 1]), 30, **kw))
    for b in got:  # rows read from their own source, aligned across leaves, 20 / 10
        assert np.array_equal(b["x"][:, 0], b["id"] // 1000)
        assert np.bincount(b["id"] // 1000, minlength=2).tolist() == [20, 10]
    ids = _ids(got)
    assert sorted(ids.tolist()) == list(range(640)) + list(range(1000, 1320))
    # Each source's grouped order takes whole chunks: its first 128 rows are two chunks.
    first = ids[ids < 1000][:128]
    assert len(np.unique(first // 64)) == 2
    # The same mixture in memory: the same proportions, an order grouped by rows.
    in_memory = _ids(lt.Loader(lt.Mix(sources, [2, 1]), 30, **kw))
    assert sorted(in_memory.tolist()) == sorted(ids.tolist())


def test_token_weights_hold_on_average():
    rng = np.random.default_rng(1)
    short = lt.Ragged.from_rows([np.ones(rng.integers(1, 5)) for _ in range(400)])
    long = lt.Ragged.from_rows([np.ones(rng.integers(20, 40)) for _ in range(400)])
    mix = lt.Mix({"a": {"t": short}, "b": {"t": long}}, [0.5, 0.5], by="tokens", epoch=400)
    loader = lt.Loader(mix, 16, layout="flat", stats=True)
    for _ in loader:
        pass
    tokens = loader.stats.source_tokens
    assert 0.4 < tokens["a"] / (tokens["a"] + tokens["b"]) < 0.6
    rows = loader.stats.source_rows
    assert rows["a"] > 5 * rows["b"]  # many more short documents than long ones


def test_planned_ragged_batches_of_a_mixture_resume_exactly_and_refuse_new_weights():
    def sources():
        r = np.random.default_rng(3)
        return {
            name: {"t": lt.Ragged.from_rows([np.full(r.integers(1, 12), v) for _ in range(80)])}
            for name, v in (("a", 1), ("b", 2))
        }

    kw = {"layout": lt.PackLayout(seq_len=16), "seed": 4}
    whole = [np.asarray(b["t"].values) for b in lt.Loader(lt.Mix(sources(), [3, 1]), 3, **kw)]
    loader = lt.Loader(lt.Mix(sources(), [3, 1]), 3, **kw)
    it = iter(loader)
    head = [np.asarray(next(it)["t"].values) for _ in range(4)]
    state = loader.state_dict()
    again = lt.Loader(lt.Mix(sources(), [3, 1]), 3, **kw)
    again.load_state_dict(state)
    rest = [np.asarray(b["t"].values) for b in again]
    assert len(head + rest) == len(whole)
    assert all(np.array_equal(x, y) for x, y in zip(head + rest, whole, strict=True))
    other = lt.Loader(lt.Mix(sources(), [1, 1]), 3, **kw)
    with pytest.raises(ValueError, match="planned with"):
        other.load_state_dict(state)


@pytest.mark.parametrize("layout", ["pad", "flat", lt.PackLayout(seq_len=32)])
def test_memory_mapped_token_sources_are_read_in_place(tmp_path, layout):
    mapped, in_memory = {}, {}
    for s in range(2):
        values = np.arange(1000 * (s + 1), dtype=np.int32) + s * 100_000
        np.save(tmp_path / f"v{s}.npy", values)
        offsets = np.r_[0, np.cumsum(np.random.default_rng(s).integers(1, 20, 200))]
        offsets = offsets[offsets < len(values)]
        offsets = np.r_[offsets, len(values)]
        mapped[f"s{s}"] = {"t": lt.Ragged(np.load(tmp_path / f"v{s}.npy", mmap_mode="r"), offsets)}
        in_memory[f"s{s}"] = {"t": lt.Ragged(values, offsets)}
    kw = {"seed": 0, "layout": layout}
    a = list(lt.Loader(lt.Mix(mapped, [2, 1]), 8, **kw))
    b = list(lt.Loader(lt.Mix(in_memory, [2, 1]), 8, **kw))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(np.asarray(x["t"].values), np.asarray(y["t"].values))


def test_hf_datasets_and_array_weights():
    datasets = pytest.importorskip("datasets")
    a = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6]] * 10, "label": range(30)})
    b = datasets.Dataset.from_dict(
        {"input_ids": [[7, 8], [9, 9, 9]] * 10, "label": range(100, 120)}
    )
    mix = lt.Mix({"a": a, "b": b}, np.array([3, 2]), source_key="src")
    batches = list(lt.Loader(mix, 10, seed=0))
    labels = np.concatenate([np.asarray(x["label"]) for x in batches])
    assert sorted(labels.tolist()) == list(range(30)) + list(range(100, 120))
    for x in batches:
        assert np.array_equal(np.asarray(x["src"]), (np.asarray(x["label"]) >= 100).astype(int))


def test_a_loader_over_hdf5_sources_pickles(tmp_path):
    h5py = pytest.importorskip("h5py")
    sources = {}
    for s in range(2):
        with h5py.File(tmp_path / f"{s}.h5", "w") as f:
            f.create_dataset("id", data=np.arange(100) + 1000 * s, chunks=(10,))
        sources[f"s{s}"] = h5py.File(tmp_path / f"{s}.h5", "r")
    loader = lt.Loader(lt.Mix(sources, [1, 1]), 10, seed=0)
    it = iter(loader)
    next(it)
    copy = pickle.loads(pickle.dumps(loader))  # as spawned workers and ddp_spawn get it
    reference = list(lt.Loader(lt.Mix(sources, [1, 1]), 10, seed=0))
    assert np.array_equal(next(iter(copy))["id"], reference[1]["id"])
