"""tf.data's view of the Loader: epochs of any length the order gives."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from looptoolkit.tf_data import loader_dataset


def test_an_order_function_returning_a_subset_sets_the_epoch_length():
    ds = loader_dataset({"x": np.arange(6)}, 2, order=lambda e: np.arange(4)[::-1])
    assert int(ds.cardinality()) == 2
    for _ in range(2):  # every iteration, not only the first
        assert [b["x"].numpy().tolist() for b in ds] == [[3, 2], [1, 0]]


def test_an_order_function_with_a_partial_last_batch_and_drop_last():
    order = lambda e: np.array([5, 0, 4, 1, 3])  # noqa: E731
    ds = loader_dataset({"x": np.arange(10) * 10}, 2, order=order)
    assert [b["x"].numpy().tolist() for b in ds] == [[50, 0], [40, 10], [30]]
    cut = loader_dataset({"x": np.arange(10) * 10}, 2, order=order, drop_last=True)
    assert int(cut.cardinality()) == 2
    assert [b["x"].numpy().tolist() for b in cut] == [[50, 0], [40, 10]]
