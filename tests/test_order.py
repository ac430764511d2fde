"""Epoch orders: permutations, padding, sharding, resume, validation (looptoolkit.order).

The expected batches are computed here from the formal definition (global order
-> np.resize padding -> rank r takes every world_size-th position from offset + r,
as DistributedSampler does -> cut into batches) and compared with what
Order/EpochOrder produce.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looptoolkit.order import (
    DEFAULT_GROUP_SIZE,
    SHUFFLE_MODES,
    EpochOrder,
    Order,
    normalize_shuffle,
    resolve_rank,
)
from looptoolkit.order import _sources as sources_module

MODES = st.sampled_from(SHUFFLE_MODES)
GROUP_SIZES = st.one_of(st.integers(1, 600), st.sampled_from([1024, 4096, 10_000]))
SEEDS = st.one_of(st.integers(0, 2**16), st.integers(0, 2**70))
EPOCHS = st.one_of(st.integers(0, 5), st.integers(0, 2**40))
FAST = settings(max_examples=100, deadline=None)


def padded(global_order: np.ndarray, world_size: int, drop_last: bool) -> np.ndarray:
    n = len(global_order)
    if drop_last:
        return global_order[: (n // world_size) * world_size]
    return np.resize(global_order, -(-n // world_size) * world_size)


def expected_batches(
    global_order: np.ndarray,
    batch_size: int,
    rank: int,
    world_size: int,
    drop_last: bool,
    offset: int,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(indices, padding positions mask) of each batch of `rank`, from the definition."""
    n = len(global_order)
    p = padded(global_order, world_size, drop_last)
    stream = p[offset + rank :: world_size]
    positions = np.arange(offset + rank, len(p), world_size)
    per_rank = (len(p) - offset) // world_size
    assert len(stream) == per_rank
    full, last = divmod(per_rank, batch_size)
    out = []
    for k in range(full + (1 if last and not drop_last else 0)):
        sl = slice(k * batch_size, (k + 1) * batch_size)
        out.append((stream[sl], positions[sl] >= n))
    return out


def make(n: int, batch_size: int, **kwargs: object) -> Order:
    return Order(n, batch_size, **kwargs)  # type: ignore[arg-type]


# -- global order ------------------------------------------------------------


@FAST
@given(n=st.integers(1, 5000), mode=MODES, group=GROUP_SIZES, seed=SEEDS, epoch=EPOCHS)
def test_global_order_is_a_permutation(n, mode, group, seed, epoch):
    g = Order(n, 1, shuffle=mode, group_size=group, seed=seed).global_order(epoch)
    assert g.dtype == np.int64
    assert np.array_equal(np.sort(g), np.arange(n))


@pytest.mark.parametrize("group", [1, 2, 3, 7, 64, 255, 256, 1024])
@pytest.mark.parametrize(
    "n_of",
    [
        lambda g: 1,
        lambda g: 2,
        lambda g: max(1, g - 1),
        lambda g: g,
        lambda g: g + 1,
        lambda g: 2 * g + 1,
        lambda g: 2**16 + 1,  # one position past a chunk
        lambda g: 2**17 - 1,
        lambda g: 65_537 + g,
        lambda g: 7919,  # prime
        lambda g: 104_729,  # prime, several chunks
    ],
)
def test_grouped_awkward_sizes(group, n_of):
    n = n_of(group)
    order = Order(n, 300, shuffle="grouped", group_size=group, seed=11)
    g = order.global_order(3)
    assert np.array_equal(np.sort(g), np.arange(n))
    epoch = order.epoch(3)
    assert np.array_equal(epoch.indices(), g)
    batches = list(epoch)
    assert all(b.dtype == np.intp for b in batches)
    assert np.array_equal(np.concatenate(batches), g)
    for i in (0, len(epoch) // 2, len(epoch) - 1):  # random access matches iteration
        assert np.array_equal(epoch.batch(i), batches[i])


def test_none_is_arange_and_full_is_seeded():
    assert Order(7, 2, shuffle=False).global_order(5).tolist() == list(range(7))
    a = Order(1000, 10, shuffle=True, seed=3).global_order(2)
    b = Order(1000, 10, shuffle="full", seed=3).global_order(2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(1000))


def test_orders_are_pinned():
    # The order is part of the contract: the same on every run and machine.
    # If this fails, every saved resume point and reported order has changed.
    assert Order(10, 3, seed=0).global_order(0).tolist() == PINNED_FULL
    grouped = Order(10, 3, shuffle="grouped", group_size=4, seed=0)
    assert grouped.global_order(1).tolist() == PINNED_GROUPED


PINNED_FULL = [3, 5, 9, 7, 1, 6, 2, 4, 8, 0]
PINNED_GROUPED = [9, 8, 0, 5, 4, 3, 6, 2, 1, 7]


@pytest.mark.parametrize("mode", ["full", "grouped"])
def test_seed_epoch_pairs_do_not_collide(mode):
    def order(seed: int, epoch: int) -> list[int]:
        return Order(500, 10, shuffle=mode, group_size=32, seed=seed).global_order(epoch).tolist()

    assert order(1, 1) != order(2, 0)  # `seed + epoch` would make these equal
    assert order(0, 1) != order(1, 0)
    # SeedSequence([seed, epoch]) would make these equal: both are words [5, 1].
    assert order(2**32 + 5, 0) != order(5, 1)
    assert order(3, 2**32) != order(3 + 2**32, 0)
    seen = {tuple(order(s, e)) for s in range(6) for e in range(6)}
    assert len(seen) == 36


@FAST
@given(
    n=st.integers(50, 3000),
    mode=st.sampled_from(["full", "grouped"]),
    group=GROUP_SIZES,
    seed=SEEDS,
    epoch=st.integers(0, 1000),
)
def test_orders_differ_between_epochs(n, mode, group, seed, epoch):
    order = Order(n, 7, shuffle=mode, group_size=group, seed=seed)
    assert not np.array_equal(order.global_order(epoch), order.global_order(epoch + 1))


@pytest.mark.parametrize("group", [256, 1024, DEFAULT_GROUP_SIZE])
def test_grouped_batches_are_not_fixed_sets_across_epochs(group):
    # Keras 3's shuffle="batch" shuffles whole fixed batches; here composition changes.
    order = Order(20_000, 300, shuffle="grouped", group_size=group, seed=1)
    sets = [{frozenset(b.tolist()) for b in order.epoch(e)} for e in range(3)]
    assert not sets[0] & sets[1]
    assert not sets[1] & sets[2]
    # Group membership itself moves: the rows that share a batch with row 0 change.
    partners = []
    for e in range(3):
        batch = next(b for b in order.epoch(e) if 0 in b)
        partners.append(set(batch.tolist()))
    assert partners[0] != partners[1] != partners[2]


def test_grouped_groups_are_contiguous_index_ranges():
    # Each group holds `group_size` consecutive indices (mod n, after the epoch's
    # rotation), in shuffled order: this is what makes grouped gathers local. The
    # epoch's order is the grouped stream shifted by `shift` positions.
    n, group = 100 * 1024, 1024
    order = Order(n, 300, shuffle="grouped", group_size=group, seed=4)
    rotations, shifts = set(), set()
    for epoch in range(3):
        shift = sources_module.Grouped(n, group, order.seed, epoch).shift
        assert 0 < shift < group
        shifts.add(shift)
        g = np.roll(order.global_order(epoch), shift)  # undo the shift
        for slot in (0, 37, 99):
            values = g[slot * group : (slot + 1) * group]
            present = set(values.tolist())
            starts = [x for x in present if (x - 1) % n not in present]
            assert len(starts) == 1
            assert present == {(starts[0] + i) % n for i in range(group)}
            assert not np.array_equal(values, np.sort(values))  # shuffled inside
            rotations.add(starts[0] % group)
    assert len(rotations) > 1  # group boundaries move between epochs
    assert len(shifts) > 1  # and so do batch boundaries relative to them


@pytest.mark.parametrize(("n", "batch", "group"), [(16_384, 256, 256), (16_384, 512, 256)])
def test_grouped_batch_partitions_differ_between_epochs(n, batch, group):
    # Regression: with batch a multiple of group and group dividing n, a batch was a
    # union of whole groups, so two epochs with the same rotation % group (1 in 256)
    # had exactly the same batches (N=102400, B=G=256, seed 0: epochs 1 and 2).
    order = Order(n, batch, shuffle="grouped", group_size=group, seed=0)
    partitions = [frozenset(frozenset(b.tolist()) for b in order.epoch(e)) for e in range(20)]
    assert len(set(partitions)) == len(partitions)
    for a in range(len(partitions)):
        for c in range(a + 1, len(partitions)):
            assert not partitions[a] & partitions[c]  # not a single batch repeats
    big = Order(102_400, 256, shuffle="grouped", group_size=256, seed=0)
    first, second = ({frozenset(b.tolist()) for b in big.epoch(e)} for e in (1, 2))
    assert not first & second


@FAST
@given(
    n=st.integers(1, 3000),
    group=st.integers(1, 600),
    seed=SEEDS,
    epoch=EPOCHS,
)
def test_grouped_shift_is_never_a_multiple_of_the_group(n, group, seed, epoch):
    source = sources_module.Grouped(n, group, seed, epoch)
    g = min(group, n)
    assert (source.shift == 0) if g == 1 else (0 < source.shift < g)
    # Random access matches the materialised order around the wrap of the shift.
    whole = source.materialize()
    for start, stop in ((0, n), (max(0, n - source.shift - 3), n), (n // 3, n // 3 + 1)):
        assert np.array_equal(source.segment(start, stop), whole[start:stop])


# -- padding, sharding, resume -----------------------------------------------


@st.composite
def layouts(draw):
    n = draw(st.integers(1, 5000))
    batch = draw(st.one_of(st.integers(1, 16), st.integers(1, 700)))
    world = draw(st.integers(1, 8))
    drop_last = draw(st.booleans())
    order = Order(
        n,
        batch,
        shuffle=draw(MODES),
        group_size=draw(GROUP_SIZES),
        seed=draw(SEEDS),
        world_size=world,
        drop_last=drop_last,
    )
    full_global = order.padded_length // (batch * world)
    k = draw(st.integers(0, full_global))
    return order, draw(st.integers(0, 3)), k * batch * world


def rank_order(order: Order, rank: int, world_size: int | None = None) -> Order:
    return Order(
        order.n,
        order.batch_size,
        shuffle=order.shuffle,
        seed=order.seed,
        group_size=order.group_size,
        rank=rank,
        world_size=order.world_size if world_size is None else world_size,
        drop_last=order.drop_last,
    )


@settings(max_examples=150, deadline=None)
@given(layouts())
def test_batches_follow_the_definition(layout):
    order, epoch, offset = layout
    g = order.global_order(epoch)
    w, b = order.world_size, order.batch_size
    counts = set()
    everything = []
    for r in range(w):
        shard = rank_order(order, r)
        ep = shard.epoch(epoch, offset)
        assert isinstance(ep, EpochOrder)
        expected = expected_batches(g, b, r, w, order.drop_last, offset)
        got = list(ep)
        assert len(ep) == len(got) == len(expected) == shard.num_batches(offset)
        counts.add(len(got))
        for i, (batch, (want, pad)) in enumerate(zip(got, expected, strict=True)):
            assert batch.dtype == np.intp
            assert np.array_equal(batch, want)
            assert np.array_equal(ep.batch(i), want)
            mask = ep.padding_mask(i)
            if pad.any():
                assert mask is not None and mask.dtype == bool
                assert np.array_equal(mask, pad)
            else:
                assert mask is None
            assert len(batch) in (b, (ep.samples_per_rank % b))
        assert np.array_equal(ep.indices(), np.concatenate([x for x, _ in expected] or [[]]))
        assert ep.global_batch == b * w
        everything.extend(got)
    assert len(counts) == 1  # every rank the same number of batches
    p = padded(g, w, order.drop_last)
    delivered = np.concatenate(everything) if everything else np.empty(0, np.intp)
    if order.drop_last:
        # Ranks are disjoint and only whole global batches are delivered.
        assert len(np.unique(delivered)) == len(delivered)
        per_rank = (order.padded_length - offset) // w
        assert len(delivered) == (per_rank // b) * b * w
        assert set(delivered.tolist()) <= set(p[offset:].tolist())
    else:
        assert np.array_equal(np.sort(delivered), np.sort(p[offset:]))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", ["none", "full", "grouped"])
@pytest.mark.parametrize("n", [1, 7, 1001, 70_001])
def test_rank_order_does_not_depend_on_batch_size(world, mode, n):
    # The order of a shard is a function of (seed, epoch, N, shuffle, group_size,
    # rank, world_size) only, as with DistributedSampler.
    for rank in range(world):
        kwargs = {"shuffle": mode, "group_size": 64, "seed": 5, "rank": rank, "world_size": world}
        small, large = Order(n, 10, **kwargs), Order(n, 32, **kwargs)  # type: ignore[arg-type]
        for epoch in (0, 3):
            a, c = small.epoch(epoch).indices(), large.epoch(epoch).indices()
            assert np.array_equal(a, c)
            assert np.array_equal(np.concatenate(list(small.epoch(epoch))), a)
            assert np.array_equal(np.concatenate(list(large.epoch(epoch))), a)
            p = padded(small.global_order(epoch), world, drop_last=False)
            assert np.array_equal(a, p[rank::world])
            # With drop_last the shard is a prefix of the same stream.
            cut = Order(n, 32, **kwargs, drop_last=True).epoch(epoch).indices()  # type: ignore[arg-type]
            assert np.array_equal(
                cut, padded(small.global_order(epoch), world, True)[rank::world][: len(cut)]
            )


def test_consumed_prefix_is_whole_global_batches():
    # After k batches on every rank the ranks have consumed exactly P[o : o + k*B*W].
    n, b, w = 1003, 7, 3
    orders = [Order(n, b, seed=2, rank=r, world_size=w) for r in range(w)]
    g = padded(orders[0].global_order(1), w, drop_last=False)
    for o in (0, b * w * 4):
        epochs = [x.epoch(1, o) for x in orders]
        for k in range(len(epochs[0]) + 1):
            taken = [epochs[r].batch(i) for r in range(w) for i in range(k)]
            got = np.sort(np.concatenate(taken)) if taken else np.empty(0, np.intp)
            assert np.array_equal(got, np.sort(g[o : min(len(g), o + k * b * w)]))


@settings(max_examples=100, deadline=None)
@given(layouts())
def test_resume_with_the_same_world_size_yields_the_rest(layout):
    order, epoch, offset = layout
    k = offset // (order.batch_size * order.world_size)
    for r in {0, order.world_size - 1}:
        shard = rank_order(order, r)
        whole = list(shard.epoch(epoch))
        rest = list(shard.epoch(epoch, offset))
        assert len(rest) == len(whole) - k
        for a, c in zip(whole[k:], rest, strict=True):
            assert np.array_equal(a, c)
        for i in range(len(rest)):
            m0, m1 = (
                shard.epoch(epoch).padding_mask(i + k),
                shard.epoch(epoch, offset).padding_mask(i),
            )
            assert (m0 is None) == (m1 is None)
            assert m0 is None or np.array_equal(m0, m1)


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 3000),
    batch=st.integers(1, 50),
    w1=st.integers(1, 8),
    w2=st.integers(1, 8),
    mode=MODES,
    group=GROUP_SIZES,
    seed=SEEDS,
    data=st.data(),
)
def test_resplit_at_another_world_size_delivers_the_rest_once(
    n, batch, w1, w2, mode, group, seed, data
):
    # Ranks at world size w1 consumed k global batches, then the job resumed at w2.
    first = Order(n, batch, shuffle=mode, group_size=group, seed=seed, world_size=w1)
    step = batch * w1 * w2 // np.gcd(w1, w2)  # an offset valid for both world sizes
    limit = min(first.padded_length, Order(n, 1, world_size=w2).padded_length, n)
    o = data.draw(st.integers(0, limit // step)) * step
    g = first.global_order(2)
    before = [
        x for r in range(w1) for x in list(rank_order(first, r).epoch(2))[: o // (batch * w1)]
    ]
    consumed = np.concatenate(before) if before else np.empty(0, np.intp)
    assert np.array_equal(np.sort(consumed), np.sort(g[:o]))
    after = []
    for r in range(w2):
        ep = rank_order(first, r, world_size=w2).epoch(2, o)
        for i, x in enumerate(ep):
            mask = ep.padding_mask(i)
            after.append(x if mask is None else x[~mask])
    rest = np.concatenate(after) if after else np.empty(0, np.intp)
    assert np.array_equal(np.sort(rest), np.sort(g[o:]))  # each remaining sample once


@settings(max_examples=100, deadline=None)
@given(layouts(), st.sampled_from([1, 5, 64, 300]))
def test_grouped_chunk_boundaries(layout, chunk):
    # Small chunks put chunk boundaries inside batches and groups at small n.
    order, epoch, offset = layout
    order = Order(
        order.n,
        order.batch_size,
        shuffle="grouped",
        group_size=order.group_size % 97 + 1,
        seed=order.seed,
        rank=order.world_size - 1,
        world_size=order.world_size,
        drop_last=order.drop_last,
    )
    with mock.patch.object(sources_module, "_CHUNK_POSITIONS", chunk):
        g = order.global_order(epoch)
        assert np.array_equal(np.sort(g), np.arange(order.n))
        ep = order.epoch(epoch, offset)
        expected = expected_batches(
            g, order.batch_size, order.rank, order.world_size, order.drop_last, offset
        )
        got = list(ep)
        assert len(got) == len(expected)
        for i, (batch, (want, _)) in enumerate(zip(got, expected, strict=True)):
            assert np.array_equal(batch, want)
            assert np.array_equal(ep.batch(i), want)


def test_padding_cycles_when_world_size_exceeds_n():
    order = Order(3, 1, shuffle=False, world_size=8, rank=7)
    assert order.padded_length == 8
    ep = order.epoch(0)
    assert [b.tolist() for b in ep] == [[1]]  # position 7 of [0, 1, 2, 0, 1, 2, 0, 1]
    assert ep.padding_mask(0).tolist() == [True]
    dropped = Order(3, 1, shuffle=False, world_size=8, rank=7, drop_last=True)
    assert len(dropped) == 0 and list(dropped.epoch(0)) == []
    assert dropped.epoch(0).indices().tolist() == []


def test_offset_at_the_end_gives_an_empty_epoch():
    order = Order(10, 3, world_size=2)
    ep = order.epoch(0, order.padded_length)
    assert len(ep) == 0 and list(ep) == [] and ep.indices().size == 0
    with pytest.raises(IndexError, match="out of range"):
        ep.batch(0)


def test_batch_random_access():
    ep = Order(10, 4, shuffle=False).epoch(0)
    assert ep.batch(-1).tolist() == [8, 9]
    assert ep.padding_mask(-1) is None
    with pytest.raises(IndexError, match="batch 3 out of range"):
        ep.batch(3)
    with pytest.raises(IndexError, match="batch -4 out of range for an epoch of 3 batches"):
        ep.padding_mask(-4)
    with pytest.raises(TypeError, match="batch index must be an int"):
        ep.batch(1.0)  # type: ignore[arg-type]


def test_grouped_iteration_needs_no_n_long_array():
    n = 10_000_000
    order = Order(n, 300, shuffle="grouped", seed=1)
    tracemalloc.start()
    try:
        it = iter(order.epoch(5, offset=300 * 20_000))
        for _ in range(500):
            next(it)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000  # an n-long int64 array would be 80 MB


# -- validation -------------------------------------------------------------


def test_normalize_shuffle():
    assert normalize_shuffle(False) == "none"
    assert normalize_shuffle(True) == "full"
    assert normalize_shuffle(np.bool_(True)) == "full"
    for mode in SHUFFLE_MODES:
        assert normalize_shuffle(mode) == mode
    with pytest.raises(
        ValueError, match=r"`shuffle` must be False, True, 'full' or 'grouped', got 'x'\."
    ):
        normalize_shuffle("x")
    with pytest.raises(TypeError, match=r"`shuffle` must be .* got int\."):
        normalize_shuffle(1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n": 0}, ValueError, r"`n` must be >= 1, got 0\."),
        ({"n": 2.0}, TypeError, r"`n` must be an int, got float\."),
        ({"batch_size": 0}, ValueError, r"`batch_size` must be >= 1, got 0\."),
        ({"batch_size": True}, TypeError, r"`batch_size` must be an int, got bool\."),
        ({"seed": -1}, ValueError, r"`seed` must be >= 0, got -1\."),
        ({"seed": "1"}, TypeError, r"`seed` must be an int, got str\."),
        ({"group_size": 0}, ValueError, r"`group_size` must be >= 1, got 0\."),
        ({"shuffle": "batch"}, ValueError, r"`shuffle` must be False, True, 'full' or 'grouped'"),
        ({"world_size": 0}, ValueError, r"`world_size` must be >= 1, got 0\."),
        (
            {"rank": 2, "world_size": 2},
            ValueError,
            r"`rank` must be in \[0, world_size\), got rank=2, world_size=2\.",
        ),
        (
            {"rank": -1},
            ValueError,
            r"`rank` must be in \[0, world_size\), got rank=-1, world_size=1\.",
        ),
        ({"rank": None}, TypeError, r"`rank` must be an int, got NoneType\."),
        ({"drop_last": 1}, TypeError, r"`drop_last` must be a bool, got int\."),
    ],
)
def test_order_validation(kwargs, error, message):
    args = {"n": 10, "batch_size": 3, **kwargs}
    with pytest.raises(error, match=message):
        make(**args)


def test_epoch_and_offset_validation():
    order = Order(10, 3, world_size=2)
    with pytest.raises(ValueError, match=r"`epoch` must be >= 0, got -1\."):
        order.epoch(-1)
    with pytest.raises(TypeError, match=r"`epoch` must be an int, got float\."):
        order.global_order(1.5)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"`offset` must be a multiple of `world_size` \(2\), got 3\."
    ):
        order.epoch(0, 3)
    with pytest.raises(
        ValueError, match=r"`offset` must be <= the padded epoch length \(10\), got 12\."
    ):
        order.num_batches(12)
    with pytest.raises(ValueError, match=r"`offset` must be >= 0, got -2\."):
        order.epoch(0, -2)


def test_numpy_integers_are_accepted():
    order = Order(
        np.int64(10), np.int32(3), seed=np.uint64(2**63), rank=np.int64(1), world_size=np.int8(2)
    )
    assert (order.n, order.batch_size, order.rank, order.world_size) == (10, 3, 1, 2)
    assert type(order.n) is int and type(order.seed) is int


def test_attributes_and_repr():
    order = Order(10, 3, shuffle="grouped", seed=5, rank=1, world_size=2, drop_last=True)
    assert order.shuffle == "grouped" and order.group_size == DEFAULT_GROUP_SIZE
    assert order.drop_last is True and len(order) == order.num_batches(0) == 1
    assert repr(order) == (
        "Order(n=10, batch_size=3, shuffle='grouped', seed=5, "
        f"group_size={DEFAULT_GROUP_SIZE}, run_size=1, rank=1, world_size=2, drop_last=True)"
    )
    assert repr(order.epoch(2, 6)).startswith("EpochOrder(Order(n=10") and "offset=6" in repr(
        order.epoch(2, 6)
    )
    ep = order.epoch(0)
    assert ep.samples_per_rank == 5 and ep.global_batch == 6


def test_default_group_size_is_sane():
    assert isinstance(DEFAULT_GROUP_SIZE, int) and DEFAULT_GROUP_SIZE >= 1
    assert Order(10, 3, group_size=None).group_size == DEFAULT_GROUP_SIZE


# -- resolve_rank -----------------------------------------------------------


def test_resolve_rank_without_a_process_group():
    assert resolve_rank(None, None) == (0, 1)
    assert resolve_rank(2, 4) == (2, 4)
    assert resolve_rank(np.int64(0), np.int64(1)) == (0, 1)


def test_resolve_rank_does_not_import_torch():
    code = (
        "import sys\nfrom looptoolkit.order import resolve_rank\n"
        "assert resolve_rank(None, None) == (0, 1)\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True, timeout=60)


def test_resolve_rank_takes_the_callers_process_group():
    assert resolve_rank(None, None, group=(3, 4)) == (3, 4)
    assert resolve_rank(0, 2, group=(3, 4)) == (0, 2)  # explicit values win
    assert resolve_rank(None, None, group=None) == (0, 1)
    with pytest.raises(ValueError, match=r"got rank=4, world_size=4"):
        resolve_rank(None, None, group=(4, 4))


def test_orders_ask_no_backend_registry():
    # Orders are framework-free: the rank is resolved where a Loader or an
    # integration is built (tests/test_loader.py).
    import ast
    import pathlib

    import looptoolkit.order

    source = ast.parse(pathlib.Path(looptoolkit.order._order.__file__).read_text())
    imported = {node.module for node in ast.walk(source) if isinstance(node, ast.ImportFrom)} | {
        a.name for node in ast.walk(source) if isinstance(node, ast.Import) for a in node.names
    }
    assert not any(name and name.startswith("looptoolkit.adapters") for name in imported)


@pytest.mark.parametrize(
    ("rank", "world_size", "error", "message"),
    [
        (
            None,
            2,
            ValueError,
            r"`rank` and `world_size` must both be given or both be None, "
            r"got rank=None, world_size=2\.",
        ),
        (1, None, ValueError, r"must both be given or both be None, got rank=1, world_size=None\."),
        (0, 0, ValueError, r"`world_size` must be >= 1, got 0\."),
        (4, 4, ValueError, r"`rank` must be in \[0, world_size\), got rank=4, world_size=4\."),
        (-1, 4, ValueError, r"got rank=-1, world_size=4\."),
        (True, 4, TypeError, r"`rank` must be an int, got bool\."),
        (0, 2.0, TypeError, r"`world_size` must be an int, got float\."),
    ],
)
def test_resolve_rank_validation(rank, world_size, error, message):
    with pytest.raises(error, match=message):
        resolve_rank(rank, world_size)


# -- runs inside the groups ------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 600),
    group_size=st.integers(1, 80),
    run_size=st.integers(1, 20),
    seed=st.integers(0, 3),
    epoch=st.integers(0, 3),
)
def test_runs_keep_every_index_once_and_stay_consecutive(n, group_size, run_size, seed, epoch):
    order = Order(n, 7, shuffle="grouped", seed=seed, group_size=group_size, run_size=run_size)
    g = order.global_order(epoch)
    assert sorted(g.tolist()) == list(range(n))  # every index once
    # The epoch's order read back from its batches is the same.
    np.testing.assert_array_equal(np.concatenate(list(order.epoch(epoch))), g)
    # In the grouped stream (before the shift) a group is a sequence of runs of
    # consecutive rows (modulo n, after the rotation): it breaks at most between runs.
    source = sources_module.Grouped(n, group_size, seed, epoch, run_size)
    stream = np.concatenate([source.chunk(c) for c in range(source.num_chunks)])
    r, gs = source.run_size, source.g
    start = 0
    for t in range(source.k):
        size = source.last_size if t == source.short_slot else gs
        members = stream[start : start + size]
        breaks = int(np.count_nonzero(np.diff(members) % n != 1))
        assert breaks <= -(-gs // r) - 1, (t, members)
        start += size
    assert start == n


def test_grouped_orders_without_runs_are_unchanged():
    # Grouped orders are a documented pure function of their arguments: these
    # positions were produced before runs existed, and run_size=1 must keep them.
    order = Order(1000, 30, shuffle="grouped", seed=0, group_size=64, run_size=1)
    assert order.global_order(0)[:12].tolist() == [
        798, 783, 781, 738, 743, 735, 756, 795, 759, 789, 787, 739,
    ]  # fmt: skip
    other = Order(1000, 30, shuffle="grouped", seed=2, group_size=64)
    assert other.global_order(5)[500:510].tolist() == [
        171, 187, 168, 170, 146, 149, 195, 193, 185, 173,
    ]  # fmt: skip


def test_runs_change_batches_every_epoch_and_are_gathered_together():
    order = Order(4096, 64, shuffle="grouped", seed=1, group_size=512, run_size=16)
    first = [frozenset(b.tolist()) for b in order.epoch(0)]
    second = {frozenset(b.tolist()) for b in order.epoch(1)}
    assert not set(first) & second  # no batch repeats in the next epoch
    # Each batch is made of a few runs of consecutive rows, not 64 scattered ones.
    breaks = [int(np.count_nonzero(np.diff(np.sort(list(b))) != 1)) for b in first]
    assert max(breaks) <= 64 // 16 + 1


def test_run_size_is_validated():
    with pytest.raises(ValueError, match="`run_size` must be >= 1, got 0"):
        Order(10, 2, shuffle="grouped", run_size=0)
    with pytest.raises(TypeError, match="`run_size`"):
        Order(10, 2, shuffle="grouped", run_size=2.0)


def test_a_loader_with_runs_resumes_exactly_and_saves_its_run_size():
    from looptoolkit import Loader

    data = {"x": np.arange(3000.0), "y": np.arange(3000)}
    loader = Loader(data, 50, shuffle="grouped", group_size=256, run_size=8, seed=3)
    it = iter(loader)
    first = [next(it)["y"] for _ in range(9)]
    state = loader.state_dict()
    it.close()
    assert state[Loader.RUN_SIZE_KEY] == 8
    resumed = Loader(data, 50, shuffle="grouped", group_size=256, run_size=8, seed=3)
    resumed.load_state_dict(state)
    rest = [b["y"] for b in resumed]
    np.testing.assert_array_equal(np.concatenate(first + rest), loader.indices(0))
    other = Loader(data, 50, shuffle="grouped", group_size=256, seed=3)
    with pytest.raises(ValueError, match="`run_size` 8 \\(this loader: 1\\)"):
        other.load_state_dict(state)
    # A state saved before runs existed (no key) resumes a loader without runs.
    older = {k: v for k, v in other.state_dict().items() if k != Loader.RUN_SIZE_KEY}
    other.load_state_dict(older)


# -- the last batch, and what needs no permutation ---------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 400),
    batch=st.integers(1, 40),
    world=st.integers(1, 5),
    drop_last=st.booleans(),
    data=st.data(),
)
def test_last_batch_size_is_the_short_last_batch_of_a_resumed_epoch(
    n, batch, world, drop_last, data
):
    order = Order(n, batch, shuffle="none", world_size=world, drop_last=drop_last)
    offset = data.draw(st.integers(0, order.padded_length // world)) * world
    sizes = [len(b) for b in order.epoch(0, offset)]
    short = sizes[-1] if sizes and sizes[-1] < batch else 0
    assert order.last_batch_size(offset) == short
    assert all(size == batch for size in sizes[:-1])


def test_length_and_padding_masks_build_no_permutation():
    order = Order(10, 4, shuffle="full", rank=2, world_size=3)
    with mock.patch.object(Order, "_source", side_effect=AssertionError("permuted")):
        schedule = order.epoch(5)
        assert len(schedule) == 1
        assert schedule.padding_mask(0).tolist() == [False, False, False, True]
    assert sorted(np.concatenate(list(Order(10, 4, world_size=1).epoch(5))).tolist()) == list(
        range(10)
    )
