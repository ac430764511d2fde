"""The orders DataLoader users bring: weights, replacement, subsets, custom orders, uneven shards.

Statistical tests at fixed seeds (chi-square against the weights), coverage
tests (each row once where that is promised), resume, and the same batches on
every route (Loader, make_dataloader, loader_dataset).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader
from looptoolkit.order import Order

# Upper 0.1% points of the chi-square distribution, by degrees of freedom: a
# correct sampler fails a test at one fixed seed with probability 0.001.
CHI2_999 = {4: 18.467, 9: 27.877, 19: 43.820}


def _chi2(counts: np.ndarray, expected: np.ndarray) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def _rows(n: int = 10) -> dict[str, np.ndarray]:
    return {"x": np.arange(2 * n, dtype=np.float32).reshape(n, 2), "id": np.arange(n)}


def _epoch(loader: Any) -> np.ndarray:
    return np.concatenate([np.asarray(b["id"]) for b in loader])


# -- weights and replacement: the frequencies follow the weights -----------------------


def test_weighted_with_replacement_matches_the_weights():
    w = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=np.float64)
    loader = Loader(_rows(), 50, weights=w, replacement=True, num_samples=5000, seed=3)
    counts = np.zeros(10)
    for _ in range(4):
        counts += np.bincount(_epoch(loader), minlength=10)
    assert len(loader) == 100 and counts.sum() == 20_000
    assert _chi2(counts, counts.sum() * w / w.sum()) < CHI2_999[9]


def test_zero_weight_rows_are_never_drawn():
    w = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1], dtype=np.float32)
    with_ = Loader(_rows(), 7, weights=w, replacement=True, num_samples=500)
    without = Loader(_rows(), 2, weights=w, num_samples=5)
    for loader in (with_, without):
        for epoch in range(5):
            loader.set_epoch(epoch)
            assert set(_epoch(loader).tolist()) <= {1, 3, 5, 7, 9}


def test_weighted_without_replacement_draws_each_row_at_most_once_in_proportion():
    w = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    order = Order(5, 1, weights=w, num_samples=1, seed=8)
    first = np.array([order.epoch(e).indices()[0] for e in range(4000)])
    assert _chi2(np.bincount(first, minlength=5), 4000 * w / w.sum()) < CHI2_999[4]
    whole = Order(5, 2, weights=w, seed=8)  # num_samples = n: every row, in a weighted order
    for epoch in range(20):
        assert sorted(whole.epoch(epoch).indices().tolist()) == [0, 1, 2, 3, 4]
    three = Order(5, 3, weights=w, num_samples=3, seed=8)
    for epoch in range(50):
        rows = three.epoch(epoch).indices()
        assert len(set(rows.tolist())) == 3


def test_replacement_without_weights_is_uniform():
    loader = Loader(_rows(20), 100, replacement=True, num_samples=4000, seed=1)
    counts = np.bincount(_epoch(loader), minlength=20)
    assert _chi2(counts, np.full(20, 200.0)) < CHI2_999[19]
    assert len(np.unique(_epoch(loader))) < 20 or counts.max() > 200  # repeats happen


def test_draws_are_a_pure_function_of_seed_and_epoch():
    w = np.linspace(1, 2, 10)
    a, b = (Loader(_rows(), 3, weights=w, seed=5) for _ in range(2))
    b.set_epoch(1)
    second = _epoch(b)
    np.testing.assert_array_equal(_epoch(a), a.indices(0))
    np.testing.assert_array_equal(_epoch(a), second)
    assert not np.array_equal(a.indices(0), a.indices(1))


# -- subsets -------------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [False, True, "grouped"])
def test_a_subset_visits_each_of_its_rows_once_per_epoch(shuffle):
    subset = np.array([9, 2, 4, 7, 0, 5])
    loader = Loader(_rows(), 4, indices=subset, shuffle=shuffle, group_size=2, seed=2)
    assert len(loader) == 2
    for epoch in range(3):
        rows = _epoch(loader)
        assert sorted(rows.tolist()) == sorted(subset.tolist())
        np.testing.assert_array_equal(rows, loader.indices(epoch))
        if shuffle is False:
            np.testing.assert_array_equal(rows, subset)  # the given order


def test_subsets_split_one_dataset_without_copying_it():
    data = _rows(100)
    rng = np.random.default_rng(0)
    perm = rng.permutation(100)
    train = Loader(data, 16, indices=perm[:80], seed=0)
    val = Loader(data, 16, indices=perm[80:], shuffle=False)
    assert train.data is data and val.data is data
    assert set(_epoch(train).tolist()) | set(_epoch(val).tolist()) == set(range(100))
    assert not set(_epoch(train).tolist()) & set(_epoch(val).tolist())


# -- custom orders ------------------------------------------------------------------------


def _curriculum(seed: int, epoch: int) -> np.ndarray:
    # Easy rows (low ids) first, then more of the data each epoch; repeats allowed.
    rng = np.random.default_rng([seed, epoch])
    return np.concatenate([np.arange(4), rng.integers(0, 10, 8)])


def test_a_custom_order_is_used_sharded_and_resumed():
    loader = Loader(_rows(), 3, order_fn=_curriculum, seed=4)
    assert len(loader) == 4
    for epoch in range(2):
        np.testing.assert_array_equal(_epoch(loader), _curriculum(4, epoch))
    shards = [
        Loader(_rows(), 3, order_fn=_curriculum, seed=4, rank=r, world_size=2) for r in (0, 1)
    ]
    merged = np.empty(12, dtype=np.int64)
    merged[0::2], merged[1::2] = _epoch(shards[0]), _epoch(shards[1])
    np.testing.assert_array_equal(merged, _curriculum(4, 0))
    it = iter(loader)
    head = [next(it)["id"] for _ in range(2)]
    state = loader.state_dict()
    resumed = Loader(_rows(), 3, order_fn=_curriculum, seed=4)
    resumed.load_state_dict(state)
    np.testing.assert_array_equal(np.concatenate([*head, _epoch(resumed)]), _curriculum(4, 2))


@pytest.mark.parametrize(
    ("order_fn", "error", "match"),
    [
        (lambda s, e: np.arange(5 + e), ValueError, r"returned 6 rows, but epoch 0 had 5"),
        (lambda s, e: np.arange(5.0), TypeError, r"must be an integer array, got dtype float64"),
        (lambda s, e: np.array([0, 10]), ValueError, r"must be rows in \[0, 10\), got 10"),
        (lambda s, e: np.array([-1, 2]), ValueError, r"got -1"),
        (lambda s, e: np.zeros((2, 2), int), ValueError, r"must be 1-D, got shape \[2, 2\]"),
        (lambda s, e: np.array([], int), ValueError, r"must not be empty"),
    ],
)
def test_a_bad_custom_order_gets_a_clear_error(order_fn, error, match):
    with pytest.raises(error, match=match):
        loader = Loader(_rows(), 2, order_fn=order_fn)
        loader.set_epoch(1)
        _epoch(loader)


# -- uneven shards -------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 3, 4])
def test_uneven_shards_cover_every_row_once_without_padding(world):
    n, b = 23, 4
    loaders = [
        Loader(_rows(n), b, seed=6, rank=r, world_size=world, pad_shards=False, return_mask=True)
        for r in range(world)
    ]
    rows, lengths = [], []
    for loader in loaders:
        batches = list(loader)
        assert all(mask.all() for _, mask in batches)  # no padding anywhere
        lengths.append(len(batches))
        assert len(batches) == len(loader)
        rows.append(np.concatenate([np.asarray(batch["id"]) for batch, _ in batches]))
    assert sorted(np.concatenate(rows).tolist()) == list(range(n))
    assert max(lengths) - min(lengths) <= 1
    merged = np.concatenate(rows)
    assert len(merged) == n  # padded shards would hold ceil(n / world) * world rows


def test_uneven_shards_resume_mid_epoch():
    n, b = 23, 4
    a = Loader(_rows(n), b, seed=6, rank=1, world_size=2, pad_shards=False)
    it = iter(a)
    head = [next(it)["id"] for _ in range(2)]
    state = a.state_dict()
    resumed = Loader(_rows(n), b, seed=6, rank=1, world_size=2, pad_shards=False)
    resumed.load_state_dict(state)
    np.testing.assert_array_equal(np.concatenate([*head, _epoch(resumed)]), a.indices(0))
    with pytest.raises(ValueError, match="`pad_shards` False"):
        Loader(_rows(n), b, seed=6, rank=1, world_size=2).load_state_dict(state)


def test_a_rank_with_no_rows_is_refused():
    with pytest.raises(ValueError, match="rank 3 of 4 gets no rows"):
        Loader(_rows(3), 2, rank=3, world_size=4, pad_shards=False)


# -- state --------------------------------------------------------------------------------


def test_a_weighted_state_resumes_at_another_world_size_and_refuses_other_weights():
    w = np.linspace(1, 3, 10)
    one = Loader(_rows(), 2, weights=w, replacement=True, num_samples=24, seed=1)
    it = iter(one)
    head = np.concatenate([next(it)["id"] for _ in range(4)])  # 8 of 24 samples
    state = one.state_dict()
    parts = []
    for r in range(2):
        shard = Loader(
            _rows(), 2, weights=w, replacement=True, num_samples=24, seed=1, rank=r, world_size=2
        )
        shard.load_state_dict(state)
        parts.append(_epoch(shard))
    merged = np.empty(16, dtype=np.int64)
    merged[0::2], merged[1::2] = parts
    np.testing.assert_array_equal(np.concatenate([head, merged]), one.indices(0))
    other = Loader(_rows(), 2, weights=w[::-1], replacement=True, num_samples=24, seed=1)
    with pytest.raises(ValueError, match="`fingerprint`"):
        other.load_state_dict(state)


# -- bad arguments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"weights": -np.ones(10)}, ValueError, r"`weights` must be >= 0"),
        ({"weights": np.zeros(10)}, ValueError, r"must not be all zero"),
        ({"weights": np.full(10, np.nan)}, ValueError, r"must be finite"),
        ({"weights": np.ones(9)}, ValueError, r"must have shape \(10,\)"),
        ({"weights": ["a"] * 10}, TypeError, r"1-D array of numbers"),
        ({"weights": np.ones(10), "num_samples": 11}, ValueError, r"more than the 10 rows"),
        ({"weights": np.ones(10), "shuffle": "grouped"}, ValueError, r"needs `shuffle=True`"),
        ({"weights": np.ones(10), "indices": [1]}, ValueError, r"`weights` and `indices`"),
        ({"weights": np.ones(10), "order_fn": _curriculum}, ValueError, r"`weights` and `order_"),
        ({"order_fn": _curriculum, "indices": [1]}, ValueError, r"`indices` and `order_fn`"),
        ({"replacement": True, "indices": [1]}, ValueError, r"`replacement` and `indices`"),
        ({"num_samples": 5}, ValueError, r"needs `weights` or `replacement=True`"),
        ({"indices": [1, 10]}, ValueError, r"`indices` must be rows in \[0, 10\), got 10"),
        ({"indices": [True, False]}, TypeError, r"integer array, got dtype bool"),
        ({"indices": []}, ValueError, r"must not be empty"),
        ({"order_fn": 3}, TypeError, r"`order_fn` must be callable"),
        ({"order_fn": _curriculum, "shuffle": "grouped"}, ValueError, r"cannot be `shuffle='gr"),
        ({"pad_shards": 1}, TypeError, r"`pad_shards` must be a bool"),
        ({"replacement": "yes"}, TypeError, r"`replacement` must be a bool"),
    ],
)
def test_bad_order_arguments_raise_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        Loader(_rows(), 2, **kwargs)


# -- the same batches on every route ------------------------------------------------------

ORDERS = {
    "weights": {"weights": np.linspace(0.5, 2, 30), "num_samples": 40, "replacement": True},
    "weights-without": {"weights": np.linspace(0.5, 2, 30), "num_samples": 20},
    "replacement": {"replacement": True},
    "indices": {"indices": np.arange(3, 30, 2)},
    "order_fn": {"order_fn": _curriculum},
    "uneven": {"rank": 1, "world_size": 4, "pad_shards": False},
}


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_make_dataloader_and_loader_dataset_yield_the_loaders_batches(name):
    kwargs = ORDERS[name]
    loader = Loader(_rows(30), 4, seed=9, **kwargs)
    want = [_epoch(loader) for _ in range(2)]
    torch = pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    dl = make_dataloader(_rows(30), 4, seed=9, **kwargs)
    assert len(dl) == len(loader)
    for epoch in range(2):
        got = torch.cat([b["id"] for b in dl]).numpy()
        np.testing.assert_array_equal(got, want[epoch])
    pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    ds = loader_dataset(Loader(_rows(30), 4, seed=9, **kwargs))
    for epoch in range(2):
        np.testing.assert_array_equal(np.concatenate([b["id"].numpy() for b in ds]), want[epoch])


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_make_dataloader_resumes_these_orders_mid_epoch(name):
    torch = pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    kwargs = ORDERS[name]
    dl = make_dataloader(_rows(30), 2, seed=9, **kwargs)
    it = iter(dl)
    head = [next(it)["id"] for _ in range(2)]
    resumed = make_dataloader(_rows(30), 2, seed=9, **kwargs)
    resumed.load_state_dict(dl.state_dict())
    rest = torch.cat([b["id"] for b in resumed]).numpy()
    want = Loader(_rows(30), 2, seed=9, **kwargs).indices(0)
    np.testing.assert_array_equal(np.concatenate([*head, rest]), want)
