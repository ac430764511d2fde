"""Sequential reads of chunked stores: batches are views of freshly read spans.

A sequential order (and groups of one chunk) reads several chunks per call
into a new array and hands out its batches as views of it. These tests check
that the batches equal the in-memory Loader's in values and order (last partial
batch, resume, ranks, a pass closed early) and that no batch handed out is ever
written again by a later read.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import zarr

from looptoolkit import Loader
from looptoolkit._store_reads import ChunkCache
from looptoolkit.stores import wrap

ROWS, DIM, CHUNK = 5_000, 8, 512


@pytest.fixture(scope="module")
def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((ROWS, DIM)).astype(np.float32),
        "y": rng.permutation(ROWS).astype(np.int64),
    }


@pytest.fixture(scope="module")
def stores(tmp_path_factory, arrays) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("sequential")
    out: dict[str, dict] = {}
    for codec in ("lzf", "gzip"):
        with h5py.File(root / f"{codec}.h5", "w") as f:
            for name, a in arrays.items():
                f.create_dataset(name, data=a, chunks=(CHUNK, *a.shape[1:]), compression=codec)
        f = h5py.File(root / f"{codec}.h5", "r")
        out[f"hdf5-{codec}"] = {name: f[name] for name in arrays}
    group = zarr.open_group(str(root / "z.zarr"), mode="w")
    for name, a in arrays.items():
        group.create_array(name, shape=a.shape, chunks=(CHUNK, *a.shape[1:]), dtype=a.dtype)
        group[name][:] = a
    out["zarr"] = {name: group[name] for name in arrays}
    return out


STORES = ["hdf5-lzf", "hdf5-gzip", "zarr"]


def _same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for name in w:
            np.testing.assert_array_equal(g[name], w[name])


@pytest.mark.parametrize("fmt", STORES)
@pytest.mark.parametrize("mode", ["thread", "inline"])
@pytest.mark.parametrize("batch", [100, 256, 700])
@pytest.mark.parametrize("world_size", [1, 3])
def test_sequential_batches_equal_memory(stores, arrays, fmt, mode, batch, world_size):
    # Batches of 100 and 700 straddle chunks (and read spans); 256 divides a chunk.
    for rank in range(world_size):
        kw = {"shuffle": False, "rank": rank, "world_size": world_size}
        loader = Loader(stores[fmt], batch, prefetch_mode=mode, **kw)
        got = list(loader)  # every batch kept until the end: none may change meanwhile
        want = list(Loader(dict(arrays), batch, **kw))
        assert len(got[-1]["y"]) == len(want[-1]["y"])  # the last, partial batch too
        _same(got, want)
        np.testing.assert_array_equal(
            np.concatenate([b["y"] for b in got]), arrays["y"][loader.indices(0)]
        )


@pytest.mark.parametrize("fmt", STORES)
def test_one_chunk_groups_equal_memory(stores, arrays, fmt):
    kw = {"shuffle": "grouped", "seed": 5, "group_size": CHUNK}
    got = list(Loader(stores[fmt], 100, **kw))
    loader = Loader(stores[fmt], 100, **kw)
    order = loader.indices(0)
    np.testing.assert_array_equal(np.concatenate([b["y"] for b in got]), arrays["y"][order])
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), arrays["x"][order])


@pytest.mark.parametrize("fmt", STORES)
@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_sequential_resume_mid_epoch(stores, arrays, fmt, mode):
    loader = Loader(stores[fmt], 100, shuffle=False, prefetch_mode=mode)
    it = iter(loader)
    for _ in range(17):
        next(it)
    state = loader.state_dict()
    rest = list(it)
    fresh = Loader(stores[fmt], 100, shuffle=False, prefetch_mode=mode)
    fresh.load_state_dict(state)
    again = list(fresh)
    want = list(Loader(dict(arrays), 100, shuffle=False))[17:]
    _same(rest, want)
    _same(again, want)


@pytest.mark.parametrize("fmt", STORES)
def test_sequential_close_mid_epoch(stores, arrays, fmt):
    loader = Loader(stores[fmt], 100, shuffle=False)
    it = iter(loader)
    first = [next(it) for _ in range(7)]
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    want = list(Loader(dict(arrays), 100, shuffle=False))
    _same(first, want[:7])
    _same(list(loader), want)  # a closed pass leaves the next one whole


def test_spans_are_views_of_fresh_reads_never_overwritten(stores, arrays):
    # Random spans through a cache that evicts often: each equals the data, also
    # after every later read (a span handed out as a view is never written again).
    rng = np.random.default_rng(1)
    leaves = [wrap(stores["hdf5-lzf"]["x"], "x"), wrap(stores["zarr"]["y"], "y")]
    cache = ChunkCache(leaves, budget=3 * CHUNK * DIM * 4, unit=CHUNK)
    kept = []
    for _ in range(300):
        j = int(rng.integers(2))
        start = int(rng.integers(ROWS))
        stop = int(rng.integers(start + 1, min(ROWS, start + 2 * CHUNK) + 1))
        rows = cache.span(j, start, stop)
        want = arrays["xy"[j]][start:stop]
        np.testing.assert_array_equal(rows, want)
        # The general gather of the same rows agrees with the span.
        np.testing.assert_array_equal(cache.take(j, np.arange(start, stop)), want)
        kept.append((j, start, stop, rows))
    for j, start, stop, rows in kept:
        np.testing.assert_array_equal(rows, arrays["xy"[j]][start:stop])
