"""The full shuffle computed by position (looptoolkit.order._keyed): a keyed bijection of [0, n).

Above ``KEYED_MIN_ROWS`` rows the ``"full"`` order is a Feistel network with
cycle-walking. These tests check that it is a permutation for awkward ``n``
(1, primes, powers of two and their neighbours, just above 2**32), that the
order machinery (padding, sharding, resume, world-size changes) gives the
same results as with the materialised permutation (the definitions of
``test_order.py``, rerun with the threshold lowered to 1), and that one rank of
thousands computes only its own positions.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from unittest import mock

import numpy as np
import pytest
import test_order as definitions
from hypothesis import given, settings
from hypothesis import strategies as st

from looptoolkit.order import Order
from looptoolkit.order import _keyed as keyed_module
from looptoolkit.order._keyed import KEYED_MIN_ROWS, Keyed, KeyedDraws, KeyedWeightedDraws
from looptoolkit.order._sources import STREAM_FULL, Materialized, draw, generator

SMALL_N = sorted(
    {1, 2, 3, 4, 5, 7, 13, 97, 251, 1009, 65_521}
    | {2**k + d for k in range(1, 17) for d in (-1, 0, 1)}
)


@pytest.fixture
def keyed_everywhere() -> Iterator[None]:
    """Every full shuffle is the keyed one, whatever its length."""
    with mock.patch.object(keyed_module, "KEYED_MIN_ROWS", 1):
        yield


@pytest.mark.parametrize("n", SMALL_N)
def test_keyed_is_a_permutation(n):
    for seed, epoch in ((0, 0), (3, 1)):
        values = Keyed(n, seed, epoch).materialize()
        assert values.dtype == np.int64
        assert np.array_equal(np.sort(values), np.arange(n))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 20_000), seed=definitions.SEEDS, epoch=definitions.EPOCHS)
def test_keyed_is_a_permutation_for_any_n(n, seed, epoch):
    keyed = Keyed(n, seed, epoch)
    values = keyed.materialize()
    assert np.array_equal(np.sort(values), np.arange(n))
    # Any segment and any set of positions read on their own agree with the whole.
    a, b = sorted((n * 3 // 7, n - n // 5))
    assert np.array_equal(keyed.segment(a, max(a + 1, b)), values[a : max(a + 1, b)])
    positions = np.arange(n)[::-3]
    assert np.array_equal(keyed.at(positions), values[positions])


@pytest.mark.parametrize("n", [2**32 + 1, 2**32 + 15, 2**33 - 1, 10**10, 2**40 + 3])
def test_keyed_beyond_two_to_the_32(n):
    keyed = Keyed(n, 7, 2)
    rng = np.random.default_rng(0)
    # Random positions, both ends of the range and a run of consecutive ones.
    ends = (np.arange(64), n - 1 - np.arange(64), 2**32 + np.arange(9))
    positions = np.unique(np.concatenate((rng.integers(0, n, 200_000), *ends)))
    positions = positions[positions < n]
    values = keyed.at(positions)
    assert values.dtype == np.intp
    assert values.min() >= 0 and values.max() < n
    assert len(np.unique(values)) == len(values)  # injective over the sample
    # Values spread over the whole range, the high words included.
    assert values.max() > n * 0.99 and values.min() < n * 0.01
    assert abs((values >= n // 2).mean() - 0.5) < 0.01  # 200,000 draws: sd 0.0011


def test_keyed_differs_between_seeds_and_epochs():
    n = 5000
    seen = {tuple(Keyed(n, s, e).materialize()) for s in (0, 1, 2**40) for e in (0, 1, 2**33)}
    assert len(seen) == 9
    # The pairs that a naive seed + epoch would make equal differ.
    a, b = Keyed(n, 1, 1).materialize(), Keyed(n, 2, 0).materialize()
    assert not np.array_equal(a, b)


def test_orders_choose_by_n_alone():
    below, at = KEYED_MIN_ROWS - 1, KEYED_MIN_ROWS
    for w, r in ((1, 0), (8, 5)):
        small = Order(below, 10, seed=4, rank=r, world_size=w).epoch(2)._source
        large = Order(at, 10, seed=4, rank=r, world_size=w).epoch(2)._source
        assert isinstance(small, Materialized) and isinstance(large, Keyed)
    # Below the threshold the order is the materialised permutation it always was.
    want = generator(4, 2, STREAM_FULL).permutation(below)
    assert np.array_equal(Order(below, 10, seed=4).global_order(2), want)
    assert np.array_equal(Order(at, 10, seed=4).global_order(2), Keyed(at, 4, 2).materialize())


@pytest.mark.parametrize(
    "definition",
    [
        definitions.test_batches_follow_the_definition,
        definitions.test_resume_with_the_same_world_size_yields_the_rest,
        definitions.test_resplit_at_another_world_size_delivers_the_rest_once,
        definitions.test_global_order_is_a_permutation,
        definitions.test_orders_differ_between_epochs,
    ],
    ids=lambda f: f.__name__,
)
def test_keyed_orders_follow_the_order_definitions(keyed_everywhere, definition):
    # Padding, sharding, resume and world-size changes as test_order.py defines them,
    # with every full shuffle keyed (each rank then computes its own positions alone).
    assert isinstance(Order(3, 1).epoch(0)._source, Keyed)
    definition()


@pytest.mark.parametrize("world", [1, 3, 64])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_rank_reads_its_own_positions_with_padding_by_position(world, drop_last):
    n, b = KEYED_MIN_ROWS + 5, 1000  # padding at world sizes that do not divide n
    g = Keyed(n, 1, 3)
    positions = np.arange(0, -(-n // world) * world)
    p = g.at(positions % n)  # the padded order: wraps from its start, position by position
    if drop_last:
        p = p[: (n // world) * world]
    for r in {0, world // 2, world - 1}:
        order = Order(n, b, seed=1, rank=r, world_size=world, drop_last=drop_last)
        epoch = order.epoch(3)
        got = epoch.indices()
        assert np.array_equal(got, p[r::world][: len(got)])
        last = len(epoch) - 1
        assert np.array_equal(epoch.batch(last), list(epoch)[last])
        k = 3  # resumed after k batches on every rank
        rest = order.epoch(3, k * b * world).indices()
        assert np.array_equal(rest, got[k * b :])


def test_a_subset_is_shuffled_by_position(keyed_everywhere):
    subset = np.arange(10_000)[::-1] * 3
    order = Order(30_000, 7, seed=2, indices=subset, rank=2, world_size=5)
    g = subset[Keyed(len(subset), 2, 1).materialize()]
    assert np.array_equal(order.global_order(1), g)
    assert np.array_equal(order.epoch(1).indices(), g[2::5])


def test_one_rank_of_thousands_at_ten_billion_rows():
    # A rank's first batch and a resumed epoch, with no n-long or n/W-long array.
    n, b, w = 10**10, 256, 4096
    order = Order(n, b, seed=0, rank=4095, world_size=w)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        epoch = order.epoch(5)
        first = next(iter(epoch))
        resumed = order.epoch(5, 1000 * b * w).batch(0)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(order) == -(-n // w // b) and len(first) == len(resumed) == b
    assert peak < 32 * 2**20  # a block of a rank's own positions, not n / W of them
    assert elapsed < 5  # well under a second here; generous for a shared machine
    keyed = Keyed(n, 0, 5)
    assert np.array_equal(first, keyed.at(np.arange(4095, b * w, w)))
    assert np.array_equal(resumed, keyed.at(1000 * b * w + np.arange(4095, b * w, w)))


@pytest.mark.parametrize("m", [16, 17, 20])
def test_keyed_bits_look_random(m):
    # On a power of two (no cycle-walking), every output bit agrees with every input
    # bit half the time, and flipping one input bit flips each output bit half the
    # time (avalanche): a weak round function or a half that is never fully mixed
    # fails this.
    n = 2**m
    x = np.arange(n)
    y = Keyed(n, 9, 4).at(x)
    bits = np.arange(m)
    same = ((x[:, None] >> bits) & 1) == ((y[:, None] >> bits) & 1)
    assert np.abs(same.mean(axis=0) - 0.5).max() < 0.02  # sd 0.002 or less
    for j in (0, m // 2 - 1, m // 2, m - 1):
        flipped = Keyed(n, 9, 4).at(x ^ (1 << j))
        changed = (((y ^ flipped)[:, None] >> bits) & 1).mean(axis=0)
        assert np.abs(changed - 0.5).max() < 0.02, (j, changed)
    # Neighbouring positions are not correlated.
    assert abs(np.corrcoef(y[:-1], y[1:])[0, 1]) < 0.02


def test_a_state_names_the_full_order_it_resumes():
    from looptoolkit import Loader

    big = Loader(np.zeros(KEYED_MIN_ROWS, np.uint8), 1000, seed=1, rank=1, world_size=2)
    it = iter(big)
    for _ in range(3):
        next(it)
    state = big.state_dict()
    assert state["full_order"] == "keyed"
    again = Loader(np.zeros(KEYED_MIN_ROWS, np.uint8), 1000, seed=1, rank=1, world_size=2)
    again.load_state_dict(state)
    assert np.array_equal(next(iter(again)), next(it))
    # A state saved before the keyed order existed described a materialised permutation.
    old = {k: v for k, v in state.items() if k != "full_order"}
    with pytest.raises(ValueError, match=r"`full_order` 'permutation' \(this loader: 'keyed'\)"):
        again.load_state_dict(old)
    small = Loader(np.zeros(1000, np.uint8), 10, seed=1)
    state = small.state_dict()
    assert state["full_order"] == "permutation"
    del state["full_order"]
    small.load_state_dict(state)  # an old state of a small order still resumes
    grouped = Loader(np.zeros(1000, np.uint8), 10, shuffle="grouped").state_dict()
    assert "full_order" not in grouped


def test_uniform_draws_with_replacement_by_position(keyed_everywhere):
    n, k, w = 100, 200_000, 3
    orders = [
        Order(n, 7, seed=2, replacement=True, num_samples=k, rank=r, world_size=w) for r in range(w)
    ]
    assert isinstance(orders[0].epoch(1)._source, KeyedDraws)
    g = KeyedDraws(n, k, 2, 1).materialize()
    assert np.array_equal(orders[0].global_order(1), g)
    assert g.min() >= 0 and g.max() < n
    counts = np.bincount(g, minlength=n)
    assert np.abs(counts - k / n).max() < 5 * np.sqrt(k / n)  # uniform: within 5 sd
    assert np.corrcoef(g[:-1], g[1:])[0, 1] < 0.02  # successive draws independent
    padded = np.resize(g, orders[0].padded_length)
    for r, order in enumerate(orders):
        assert np.array_equal(order.epoch(1).indices(), padded[r::w])
        rest = order.epoch(1, 70 * w).indices()  # resumed after 10 batches of 7
        assert np.array_equal(rest, padded[70 * w + r :: w])
    assert not np.array_equal(g, KeyedDraws(n, k, 2, 2).materialize())
    assert not np.array_equal(g, KeyedDraws(n, k, 3, 1).materialize())
    assert orders[0].full_order == "keyed"


def test_draws_below_the_threshold_are_unchanged():
    order = Order(50, 7, seed=2, replacement=True, num_samples=300)
    want = generator(2, 1, 3).integers(0, 50, size=300, dtype=np.intp)  # _STREAM_DRAW
    assert np.array_equal(order.global_order(1), want)
    assert order.full_order == "permutation"


# -- weighted draws with replacement, by position ---------------------------------------


def _weights(n: int) -> np.ndarray:
    """Weights 1, 2, 3 by row, every 7th row and the first and last rows zero, three heavy rows."""
    w = 1.0 + np.arange(n) % 3
    w[::7] = 0
    w[[0, n - 1]] = 0
    w[[3, n // 2 + 1, n - 2]] = 5000.0
    return w


def test_weighted_draws_by_position_follow_the_weights():
    n = k = KEYED_MIN_ROWS  # the threshold itself: draws by position
    w = _weights(n)
    order = Order(n, 256, seed=5, weights=w, replacement=True)
    assert isinstance(order.epoch(1)._source, KeyedWeightedDraws)
    g = order.global_order(1)
    counts = np.bincount(g, minlength=n)
    assert counts[w == 0].sum() == 0  # a row of zero weight is never drawn
    p = w / w.sum()

    def within(observed: np.ndarray, prob: np.ndarray) -> None:
        # Binomial counts: each within 5 standard errors of k * prob.
        z = (observed - k * prob) / np.sqrt(k * prob * (1 - prob))
        assert np.abs(z).max() < 5, z

    heavy = [3, n // 2 + 1, n - 2]  # 5,700 draws each expected: sd 75
    within(counts[heavy], p[heavy])
    # The light rows by their weight (1, 2 or 3: an off-by-one row in the inversion
    # moves draws between these classes) and by where they lie (64 blocks of rows).
    light = np.ones(n, dtype=bool)
    light[heavy] = False
    for mask in (light & (w == 1), light & (w == 2), light & (w == 3)):
        within(np.array([counts[mask].sum()]), np.array([p[mask].sum()]))
    blocks = np.where(light, np.arange(n) // (n // 64), 64)
    within(np.bincount(blocks, counts, 65)[:64], np.bincount(blocks, p, 65)[:64])
    assert abs(np.corrcoef(g[:-1], g[1:])[0, 1]) < 0.01  # successive draws independent


def test_weighted_draws_invert_the_cumulative_weights_at_their_boundaries():
    # A uniform that falls on a boundary of the cumulative weights belongs to the row
    # starting there (intervals [cdf[i - 1], cdf[i])): a row of zero weight, an empty
    # interval, never holds one. The total is a power of two, so u * total is exact.
    w = np.array([0.0, 1, 0, 0, 2, 1, 0, 4, 0])
    cdf = np.cumsum(w)
    draws = KeyedWeightedDraws(cdf, 10, 0, 0)
    boundaries = np.concatenate(([0.0], cdf[w > 0][:-1]))  # 0, 1, 3, 4
    words = (boundaries / 8 * 2**53).astype(np.uint64) << np.uint64(11)
    words = np.append(words, np.uint64(2**64 - 1))  # u just below 1
    with mock.patch.object(draws, "words", lambda positions: words.copy()):
        rows = draws.at(np.arange(len(words)))
    assert rows.tolist() == [1, 4, 5, 7, 7]


def test_weighted_draws_by_position_split_between_ranks_and_resume(keyed_everywhere):
    n, k = 1000, 30_000
    w = _weights(n)
    options = {"seed": 2, "weights": w, "replacement": True, "num_samples": k}
    g = KeyedWeightedDraws(np.cumsum(w), k, 2, 1).materialize()
    assert np.array_equal(Order(n, 7, **options).global_order(1), g)
    for world in (1, 3, 8):
        padded = np.resize(g, -(-k // world) * world)
        for r in range(world):
            order = Order(n, 7, rank=r, world_size=world, **options)
            epoch = order.epoch(1)
            # Global positions: rank r's are r, r + world, ... of the one-rank draws.
            assert np.array_equal(epoch.indices(), padded[r::world])
            assert np.array_equal(np.concatenate(list(epoch)), padded[r::world])
            rest = order.epoch(1, 70 * world).indices()  # resumed after 10 batches of 7
            assert np.array_equal(rest, padded[70 * world + r :: world])
    assert not np.array_equal(g, KeyedWeightedDraws(np.cumsum(w), k, 2, 2).materialize())
    # A segment longer than the blocks it is computed in: the draws at its positions.
    long = KeyedWeightedDraws(np.cumsum(w), KEYED_MIN_ROWS + 100, 2, 1)
    a, b = 50, KEYED_MIN_ROWS + 100
    assert np.array_equal(long.segment(a, b), long.at(np.arange(a, b)))
    assert np.array_equal(long.segment(0, k), g)
    assert not np.array_equal(g, KeyedWeightedDraws(np.cumsum(w), k, 3, 1).materialize())


def test_a_rank_draws_its_weighted_batch_without_a_long_array():
    n = KEYED_MIN_ROWS * 4
    w = np.linspace(1.0, 2.0, n)
    order = Order(n, 256, seed=1, weights=w, replacement=True, rank=7, world_size=64)
    first = order.epoch(0).batch(0)  # computes the cumulative weights, once
    tracemalloc.start()
    try:
        later = [order.epoch(e).batch(3) for e in (1, 2, 3)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20  # a batch's draws; no cumulative weights again, no n-long array
    assert order._source(1).cdf is order._source(2).cdf  # the same, for every epoch
    cdf = np.cumsum(w)
    assert np.array_equal(first, KeyedWeightedDraws(cdf, n, 1, 0).at(np.arange(7, 256 * 64, 64)))
    want = KeyedWeightedDraws(cdf, n, 1, 2).at(3 * 256 * 64 + np.arange(7, 256 * 64, 64))
    assert np.array_equal(later[1], want)


def test_weighted_draws_below_the_threshold_and_without_replacement_are_unchanged():
    w = _weights(1000)
    order = Order(1000, 7, seed=2, weights=w, replacement=True, num_samples=KEYED_MIN_ROWS - 1)
    want = draw(2, 1, w, KEYED_MIN_ROWS - 1, 1000, True)
    assert np.array_equal(order.global_order(1), want)
    assert order.full_order == "permutation"
    race = Order(KEYED_MIN_ROWS, 7, seed=2, weights=np.ones(KEYED_MIN_ROWS))
    assert isinstance(race.epoch(1)._source, Materialized)
    assert race.full_order is None


def test_a_state_of_weighted_draws_names_their_order():
    from looptoolkit import Loader

    n = KEYED_MIN_ROWS
    data, w = np.arange(n, dtype=np.int32), _weights(n)
    big = Loader(data, 1000, seed=1, weights=w, replacement=True, rank=1, world_size=2)
    it = iter(big)
    for _ in range(3):
        next(it)
    state = big.state_dict()
    assert state["full_order"] == "keyed"
    # Resumed on one rank: rank 1 of 2 had the odd positions of each global batch.
    again = Loader(data, 1000, seed=1, weights=w, replacement=True)
    again.load_state_dict(state)
    rest = next(iter(again))
    want = KeyedWeightedDraws(np.cumsum(w), n, 1, 0).at(6000 + np.arange(1000))
    assert np.array_equal(rest, want) and np.array_equal(rest[1::2], next(it)[:500])
    # A state saved before weighted draws were computed by position described the
    # materialised draw: it is refused rather than resumed into other draws.
    old = {key: value for key, value in state.items() if key != "full_order"}
    with pytest.raises(ValueError, match=r"`full_order` 'permutation' \(this loader: 'keyed'\)"):
        again.load_state_dict(old)
    small = Loader(data[:1000], 10, seed=1, weights=w[:1000], replacement=True)
    state = small.state_dict()
    assert state["full_order"] == "permutation"
    del state["full_order"]
    small.load_state_dict(state)  # an old state of fewer draws still resumes
    race = Loader(data[:1000], 10, seed=1, weights=w[:1000], num_samples=100).state_dict()
    assert "full_order" not in race
