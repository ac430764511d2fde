"""`group_size_for`: the largest group of a grouped order whose chunk cache fits a budget."""

from __future__ import annotations

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

from looptoolkit import Loader, group_size_for  # noqa: E402

ROWS, WIDTH, CHUNK = 40_000, 16, 500


@pytest.fixture
def data(tmp_path):
    values = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)
    x = zarr.create_array(
        tmp_path / "x.zarr", shape=values.shape, chunks=(CHUNK, WIDTH), dtype="f4"
    )
    x[:] = values
    y = zarr.create_array(tmp_path / "y.zarr", shape=(ROWS,), chunks=(CHUNK,), dtype="i8")
    y[:] = np.arange(ROWS)
    return {"x": x, "y": y}


def _default_cache(data, group: int) -> int:
    """The chunk cache the Loader sizes for groups of ``group`` rows (two groups and more)."""
    loader = Loader(data, 100, shuffle="grouped", group_size=group)
    assert loader.order.group_size == group
    return loader._rows.store.cache_bytes


@pytest.mark.parametrize("budget", [3 << 20, 4 << 20, 5 << 20])
def test_the_group_is_the_largest_whose_cache_fits_the_budget(data, budget):
    group = group_size_for(data, budget)
    assert group % CHUNK == 0 and CHUNK <= group < ROWS
    assert _default_cache(data, group) <= budget < _default_cache(data, group + CHUNK)
    loader = Loader(data, 100, shuffle="grouped", group_size=group, cache_bytes=budget, seed=3)
    ids = np.concatenate([np.asarray(b["y"]) for b in loader])
    assert np.array_equal(np.sort(ids), np.arange(ROWS))  # every row once


def test_a_budget_past_the_data_gives_one_group_of_everything(data):
    assert group_size_for(data, 1 << 34) == ROWS


def test_what_has_no_group_or_no_room_is_refused(data):
    with pytest.raises(TypeError, match="no store leaf"):
        group_size_for({"x": np.zeros((10, 2))}, 1 << 20)
    with pytest.raises(ValueError, match="cannot hold two groups of one chunk"):
        group_size_for(data, 1 << 10)
    with pytest.raises(TypeError, match="must be an int"):
        group_size_for(data, 1.5e6)
