"""Many ranks, simulated: one epoch of 4,096 ranks at n = 10**7 (looptoolkit.order).

Every rank's order comes from its own [`Order`][looptoolkit.Order], as each
process of a job builds it. The full shuffle runs all 4,096 ranks through the
per-rank path (each computes only its own positions); the grouped and weighted
orders, whose per-rank cost is the whole epoch's order by definition, check the
split of the global order for every rank and the per-rank path on a sample of
ranks; draws with replacement are computed by position (uniform ones checked
for every rank, weighted ones on a sample of ranks: each rank's Order checks all
the weights). ``benchmarks/scale.py`` times one rank at 10**10 rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from looptoolkit.order import Order
from looptoolkit.order._keyed import Keyed, KeyedDraws, KeyedWeightedDraws

pytestmark = pytest.mark.slow  # about 15 s in all on the project machine

N, W, B = 10**7, 4096, 256
PER_RANK = -(-N // W)  # 2442: the last 2,432 positions of the padded order are padding
# Ranks checked through their own Order where one costs a whole epoch's order.
SAMPLED = (0, 1, 1663, 1664, 2047, W - 1)


def test_full_shuffle_of_4096_ranks_covers_every_row_once():
    seen = np.zeros(N, dtype=np.uint8)
    firsts = np.empty(W, dtype=np.intp)
    padding: dict[int, np.ndarray] = {}
    for r in range(W):
        order = Order(N, B, seed=3, rank=r, world_size=W)
        epoch = order.epoch(1)
        values = epoch.indices()
        assert len(values) == PER_RANK and len(epoch) == -(-PER_RANK // B)
        positions = r + W * np.arange(PER_RANK)
        pad = positions >= N
        seen[values[~pad]] += 1
        firsts[r] = values[0]
        if pad.any():
            padding[r] = values[pad]
            assert epoch.padding_mask(len(epoch) - 1) is not None
    assert seen.min() == 1 and seen.max() == 1  # every row exactly once: ranks disjoint
    # Padding wraps around from the start of the epoch's order: position p is p - N.
    assert len(padding) == W * PER_RANK - N
    for r, values in padding.items():
        assert values.tolist() == [firsts[r + W * PER_RANK - W - N]]
    assert np.array_equal(firsts[:8], Keyed(N, 3, 1).at(np.arange(8)))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shuffle": "grouped"},
        # Without replacement: each row at most once (a quarter of them drawn: sorting
        # the race of all N rows would cost seconds per rank).
        {"weights": np.linspace(1.0, 2.0, N), "num_samples": N // 4},
    ],
    ids=["grouped", "weighted"],
)
def test_4096_ranks_split_the_global_order(kwargs):
    root = Order(N, B, seed=5, world_size=W, **kwargs)
    g = root.global_order(2)
    m = len(g)
    counts = np.bincount(g, minlength=N)
    assert len(counts) == N and counts.max() == 1  # each row at most once
    assert m == (N // 4 if "weights" in kwargs else N)  # grouped: every row once
    # Column r: rank r's share. The padded order's first m positions are g itself,
    # so the shares are disjoint apart from the padding wrapped from g's start.
    p = np.resize(g, root.padded_length).reshape(-1, W)
    assert p.shape == (-(-m // W), W)  # equal counts
    # Each rank's own Order (a weighted one draws the whole epoch: two ranks only).
    whole = (0, W - 1) if "weights" in kwargs else (0, 1664, W - 1)
    for r in SAMPLED:
        order = Order(N, B, seed=5, rank=r, world_size=W, **kwargs)
        assert len(order) == len(root)
        epoch = order.epoch(2)
        last = len(epoch) - 1
        assert np.array_equal(epoch.batch(0), p[:B, r])
        assert np.array_equal(epoch.batch(last), p[last * B :, r])
        if r in whole:  # what the Loader iterates, and the whole share at once
            assert np.array_equal(np.concatenate(list(epoch)), p[:, r])
            assert np.array_equal(epoch.indices(), p[:, r])
        if "weights" in kwargs and r not in whole:
            break


def test_uniform_draws_of_4096_ranks_split_the_draws():
    # Draws with replacement by position (10**7 of them, past KEYED_MIN_ROWS): each
    # rank computes its own, equal counts, together the epoch's draws once each.
    got = np.empty((PER_RANK, W), dtype=np.intp)
    for r in range(W):
        order = Order(N, B, seed=7, rank=r, world_size=W, replacement=True)
        got[:, r] = order.epoch(0).indices()
    draws = KeyedDraws(N, N, 7, 0).materialize()
    assert np.array_equal(got.reshape(-1), np.resize(draws, W * PER_RANK))
    counts = np.bincount(draws, minlength=N)
    assert counts.max() < 15  # uniform: Poisson(1) counts, never many draws of a row
    assert abs((counts == 0).mean() - np.exp(-1)) < 0.001  # rows never drawn: 1/e


def test_weighted_draws_with_replacement_of_sampled_ranks():
    # Weighted draws by position (10**7 of them): each rank computes its own from the
    # cumulative weights, the global draws' positions r, r + W, ... (ranks sampled: each
    # Order checks the N weights).
    w = np.linspace(1.0, 2.0, N)
    draws = KeyedWeightedDraws(np.cumsum(w), N, 9, 0)
    for r in SAMPLED:
        order = Order(N, B, seed=9, rank=r, world_size=W, weights=w, replacement=True)
        positions = (r + W * np.arange(PER_RANK)) % N  # padding wraps by position
        assert np.array_equal(order.epoch(0).indices(), draws.at(positions))
    # In proportion: the upper half of the rows holds 7/12 of the weight.
    upper = (draws.at(np.arange(0, N, 10)) >= N // 2).mean()
    assert abs(upper - 7 / 12) < 0.003  # 10**6 draws: sd 0.0005
