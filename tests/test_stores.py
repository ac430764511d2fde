"""Chunked stores as Loader data: zarr, HDF5 and Arrow / HF datasets.

Each format is checked against the same data in memory: a full shuffle yields
the same batches, the grouped order yields the rows ``indices(e)`` names with
every row once per epoch and each chunk read once, rows stay aligned across
leaves, and the errors name what went wrong.
"""

from __future__ import annotations

import pickle
import threading
import time

import datasets
import h5py
import hypothesis
import hypothesis.strategies as st
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import zarr

from looptoolkit import Loader
from looptoolkit.order import Order

N = 1000  # not a multiple of any chunk size below


@pytest.fixture(scope="module")
def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((N, 3)).astype(np.float32),
        "y": np.arange(N, dtype=np.int64),
        "m": rng.integers(0, 255, (N, 2, 2)).astype(np.uint8),
    }


def _zarr3(path, arrays):
    group = zarr.open_group(str(path / "v3.zarr"), mode="w")
    for name, chunk in (("x", 64), ("y", 128), ("m", 64)):
        a = arrays[name]
        group.create_array(name, shape=a.shape, chunks=(chunk, *a.shape[1:]), dtype=a.dtype)
        group[name][:] = a
    return group


def _zarr2(path, arrays):
    group = zarr.open_group(str(path / "v2.zarr"), mode="w", zarr_format=2)
    for name in arrays:
        a = arrays[name]
        group.create_array(name, shape=a.shape, chunks=(100, *a.shape[1:]), dtype=a.dtype)
        group[name][:] = a
    return group


def _hdf5(path, arrays, chunked=True):
    name = path / ("c.h5" if chunked else "flat.h5")
    with h5py.File(name, "w") as f:
        for key, a in arrays.items():
            if chunked:
                f.create_dataset(key, data=a, chunks=(50, *a.shape[1:]), compression="gzip")
            else:
                f.create_dataset(key, data=a)
    return h5py.File(name, "r")


def _arrow(arrays):
    x, m = arrays["x"], arrays["m"]
    return pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 3),
            "y": pa.chunked_array([arrays["y"][:300], arrays["y"][300:]]),
            "m": pa.FixedSizeListArray.from_arrays(
                pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1)), 2), 2
            ),
        }
    )


def _hf(path, arrays):
    ds = datasets.Dataset.from_dict(dict(arrays))
    ds.save_to_disk(str(path / "hf"))
    return datasets.load_from_disk(str(path / "hf")).with_format("numpy")


FORMATS = ["zarr3", "zarr2", "hdf5", "hdf5-contiguous", "arrow", "hf"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory, arrays):
    path = tmp_path_factory.mktemp("stores")
    made = {
        "zarr3": _zarr3(path, arrays),
        "zarr2": _zarr2(path, arrays),
        "hdf5": _hdf5(path, arrays),
        "hdf5-contiguous": _hdf5(path, arrays, chunked=False),
        "arrow": _arrow(arrays),
        "hf": _hf(path, arrays),
    }
    yield made
    made["hdf5"].close()
    made["hdf5-contiguous"].close()


def _check_batch(batch, arrays):
    """Rows aligned across leaves: every leaf holds the rows its ids name."""
    for key in ("x", "m"):
        np.testing.assert_array_equal(batch[key], arrays[key][batch["y"]])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shuffle", [False, "full"])
def test_same_batches_as_in_memory(stores, arrays, fmt, shuffle):
    store = Loader(stores[fmt], 96, shuffle=shuffle, seed=5)
    memory = Loader(dict(arrays), 96, shuffle=shuffle, seed=5)
    assert len(store) == len(memory)
    for epoch in range(2):
        count = 0
        for a, b in zip(store, memory, strict=True):
            assert sorted(a) == sorted(b)
            for key in b:
                np.testing.assert_array_equal(a[key], b[key])
                assert type(a[key]) is np.ndarray
            count += 1
        assert count == len(memory), epoch


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("group_size", [None, 1, 300])
def test_grouped_reads_each_chunk_once(stores, arrays, fmt, group_size):
    loader = Loader(stores[fmt], 64, shuffle="grouped", seed=1, group_size=group_size)
    reads = loader._rows.store
    for epoch in range(3):
        ids = []
        for batch in loader:
            _check_batch(batch, arrays)
            ids.append(batch["y"])
        got = np.concatenate(ids)
        np.testing.assert_array_equal(got, loader.indices(epoch))
        np.testing.assert_array_equal(np.sort(got), np.arange(N))
        cache = reads.last
        # A leaf read through a zero-copy view (a plain contiguous HDF5 dataset, a
        # one-chunk Arrow column) is gathered from it, not cached.
        chunks = [
            0 if leaf.view() is not None else -(-N // unit)
            for leaf, unit in zip(cache.leaves, cache.units, strict=True)
        ]
        assert cache.chunks_read == chunks, (epoch, cache.units)
        assert cache.peak <= cache.budget


def test_grouped_groups_are_whole_chunks(stores):
    loader = Loader(stores["zarr3"], 32, shuffle="grouped", seed=3, group_size=256)
    order = loader.order
    assert order.chunk_rows == 128  # the largest chunk of the leaves
    assert order.group_size == 256  # two whole chunks
    idx = loader.indices(0)
    # The order is a run of groups, each the rows of two whole chunks (one group
    # holds the short last chunk), shuffled together.
    pos, groups = 0, 0
    while pos < N:
        chunks: set[int] = set()
        count = 0
        while True:
            chunks.add(int(idx[pos]) // 128)
            pos += 1
            count += 1
            assert len(chunks) <= 2
            whole = sum(min(N, (c + 1) * 128) - c * 128 for c in chunks)
            if count == whole and (len(chunks) == 2 or pos == N):
                break
        groups += 1
    assert groups == 4
    # Not the identity, and another epoch is another order.
    assert not np.array_equal(idx, np.arange(N))
    assert not np.array_equal(idx, loader.indices(1))


def test_mixed_stores_and_memory(stores, arrays):
    data = {"x": stores["zarr3"]["x"], "y": arrays["y"], "m": stores["hdf5"]["m"]}
    loader = Loader(data, 50, shuffle="grouped", seed=2)
    assert loader._rows.chunk_rows == 64
    for epoch in range(2):
        got = []
        for batch in loader:
            _check_batch(batch, arrays)
            got.append(batch["y"])
        np.testing.assert_array_equal(np.concatenate(got), loader.indices(epoch))


def test_nested_groups_are_nested_dicts(tmp_path, arrays):
    root = zarr.open_group(str(tmp_path / "n.zarr"), mode="w")
    sub = root.create_group("inputs")
    sub.create_array("x", shape=(N, 3), chunks=(100, 3), dtype="float32")
    sub["x"][:] = arrays["x"]
    root.create_array("y", shape=(N,), chunks=(100,), dtype="int64")
    root["y"][:] = arrays["y"]
    batch = next(iter(Loader(root, 10, shuffle=False)))
    assert sorted(batch) == ["inputs", "y"]
    np.testing.assert_array_equal(batch["inputs"]["x"], arrays["x"][:10])

    with h5py.File(tmp_path / "n.h5", "w") as f:
        f.create_dataset("g/x", data=arrays["x"])
        f.create_dataset("y", data=arrays["y"])
        batch = next(iter(Loader(f, 10, shuffle=False)))
        assert sorted(batch) == ["g", "y"]
        np.testing.assert_array_equal(batch["g"]["x"], arrays["x"][:10])


@pytest.mark.parametrize("fmt", ["zarr3", "hdf5", "hf"])
def test_resume_mid_epoch(stores, fmt):
    loader = Loader(stores[fmt], 64, shuffle="grouped", seed=4)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    rest = [b["y"] for b in it]
    fresh = Loader(stores[fmt], 64, shuffle="grouped", seed=4)
    fresh.load_state_dict(state)
    again = [b["y"] for b in fresh]
    assert len(again) == len(rest) == len(loader) - 5
    for a, b in zip(again, rest, strict=True):
        np.testing.assert_array_equal(a, b)


def test_state_records_the_chunk_order(stores, arrays):
    memory = Loader(dict(arrays), 64, shuffle="grouped", seed=4, group_size=128)
    store = Loader(stores["zarr3"], 64, shuffle="grouped", seed=4, group_size=128)
    assert store.state_dict()["chunk_rows"] == 128
    assert memory.state_dict()["chunk_rows"] is None
    with pytest.raises(ValueError, match="chunk_rows"):
        store.load_state_dict(memory.state_dict())
    # A state from before store orders existed (no key) still loads in memory.
    old = memory.state_dict()
    del old["chunk_rows"]
    memory.load_state_dict(old)
    # A full shuffle over a store is the in-memory order: states are interchangeable.
    full = Loader(stores["zarr3"], 64, shuffle="full", seed=4)
    full.load_state_dict(Loader(dict(arrays), 64, shuffle="full", seed=4).state_dict())


@pytest.mark.parametrize("drop_last", [False, True])
def test_sharding_by_whole_chunks(stores, drop_last):
    world = 3
    loaders = [
        Loader(stores["hdf5"], 40, shuffle="grouped", seed=6, rank=r, world_size=world,
               drop_last=drop_last)
        for r in range(world)
    ]  # fmt: skip
    lengths = {len(loader) for loader in loaders}
    assert len(lengths) == 1
    rows, chunks = [], []
    for loader in loaders:
        got = []
        for i, batch in enumerate(loader):
            mask = loader.padding_mask(0, i)
            got.append(batch["y"] if mask is None else batch["y"][~mask])
        ids = np.concatenate(got)
        rows.append(ids)
        chunks.append(set((ids // 50).tolist()))
        assert loader._rows.store.last.chunks_read[0] <= len(chunks[-1]) + 1
    for a in range(world):
        for b in range(a + 1, world):
            assert not chunks[a] & chunks[b]  # each rank decodes only its own chunks
    every = np.concatenate(rows)
    assert len(np.unique(every)) == len(every)
    if not drop_last:
        np.testing.assert_array_equal(np.sort(every), np.arange(N))
    with pytest.raises(ValueError, match="world_size"):
        Loader(stores["hdf5"], 40, shuffle="grouped", rank=0, world_size=21)


def test_store_order_properties():
    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(
        n=st.integers(1, 3000),
        chunk=st.integers(1, 400),
        chunks_per_group=st.integers(1, 5),
        batch=st.integers(1, 300),
        world=st.integers(1, 4),
        drop_last=st.booleans(),
        seed=st.integers(0, 2**40),
    )
    def check(n, chunk, chunks_per_group, batch, world, drop_last, seed):
        hypothesis.assume(-(-n // chunk) >= world)
        orders = [
            Order(n, batch, shuffle="grouped", seed=seed, group_size=chunk * chunks_per_group,
                  chunk_rows=chunk, rank=r, world_size=world, drop_last=drop_last)
            for r in range(world)
        ]  # fmt: skip
        assert len({len(o) for o in orders}) == 1
        real = []
        for o in orders:
            ep = o.epoch(1)
            batches = list(ep)
            assert len(batches) == len(ep)
            for i, b in enumerate(batches):
                mask = ep.padding_mask(i)
                real.append(b if mask is None else b[~mask])
            if len(batches) > 2:  # resume after two batches: the same rest
                rest = np.concatenate(list(o.epoch(1, offset=2 * batch * world)))
                np.testing.assert_array_equal(rest, np.concatenate(batches[2:]))
        every = np.concatenate(real) if real else np.empty(0, int)
        assert len(np.unique(every)) == len(every)
        if not drop_last:
            np.testing.assert_array_equal(np.sort(every), np.arange(n))

    check()


def test_background_reads_without_device(stores, monkeypatch):
    from looptoolkit.stores import _zarr

    threads = set()
    read = _zarr.ZarrArray.read_ranges

    def recording(self, starts, stops, out):
        threads.add(threading.get_ident())
        return read(self, starts, stops, out)

    monkeypatch.setattr(_zarr.ZarrArray, "read_ranges", recording)
    for _ in Loader(stores["zarr3"], 64, shuffle="grouped", prefetch=2):
        pass
    assert threads and threading.get_ident() not in threads
    threads.clear()
    for _ in Loader(stores["zarr3"], 64, shuffle="grouped", prefetch=0):
        pass
    assert threads == {threading.get_ident()}


def test_pickles_and_reopens(stores):
    loader = Loader(stores["hdf5"], 64, shuffle="grouped", seed=8)
    copy = pickle.loads(pickle.dumps(loader))
    for a, b in zip(loader, copy, strict=True):
        np.testing.assert_array_equal(a["y"], b["y"])
        np.testing.assert_array_equal(a["x"], b["x"])
    for fmt in ("zarr3", "hf", "arrow"):
        loader = Loader(stores[fmt], 64, shuffle="grouped", seed=8)
        copy = pickle.loads(pickle.dumps(loader))
        np.testing.assert_array_equal(next(iter(copy))["y"], loader.indices(0)[:64])


def test_make_dataloader_workers_spawn(stores):
    pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    loader = Loader(stores["hdf5"], 64, shuffle="grouped", seed=9)
    dl = make_dataloader(
        stores["hdf5"], 64, shuffle="grouped", seed=9, num_workers=2,
        multiprocessing_context="spawn", tensors=False,
    )  # fmt: skip
    for epoch in range(2):
        got = np.concatenate([b["y"] for b in dl])
        np.testing.assert_array_equal(got, loader.indices(epoch))


def test_loader_dataset_reads_stores(stores, arrays):
    pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    loader = Loader(stores["zarr3"], 64, shuffle="grouped", seed=10)
    ds = loader_dataset(loader)
    for epoch in range(2):
        got = []
        for batch in ds:
            batch = {k: v.numpy() for k, v in batch.items()}
            _check_batch(batch, arrays)
            got.append(batch["y"])
        np.testing.assert_array_equal(np.concatenate(got), loader.indices(epoch))


# -- errors -----------------------------------------------------------------------


def test_refuses_a_datasets_column_at_once(tmp_path):
    big = datasets.Dataset.from_dict({"y": np.arange(200_000)}).with_format("numpy")
    start = time.perf_counter()
    with pytest.raises(TypeError, match=r"Column.*pass the dataset itself"):
        Loader({"y": big["y"]}, 10)
    assert time.perf_counter() - start < 1.0


def test_refuses_table_libraries():
    frame = pd.DataFrame({"a": np.arange(5)})
    with pytest.raises(TypeError, match=r"DataFrame.*to_numpy"):
        Loader(frame, 2)
    with pytest.raises(TypeError, match=r"data\['a'\].*Series.*to_numpy"):
        Loader({"a": frame["a"]}, 2)


def test_refuses_an_indices_mapping(arrays):
    ds = datasets.Dataset.from_dict({"y": arrays["y"]}).select([3, 1, 2])
    with pytest.raises(TypeError, match="flatten_indices"):
        Loader(ds, 2)


def test_file_open_for_writing_in_a_worker(tmp_path, arrays):
    f = h5py.File(tmp_path / "w.h5", "w")
    f.create_dataset("y", data=arrays["y"])
    pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    dl = make_dataloader(f, 10, num_workers=1, multiprocessing_context="spawn", tensors=False)
    with pytest.raises(OSError, match=r"open it read-only"):
        next(iter(dl))
    f.close()


def test_closed_hdf5_file(tmp_path, arrays):
    f = h5py.File(tmp_path / "a.h5", "w")
    f.create_dataset("y", data=arrays["y"], chunks=(100,))
    ds = f["y"]
    loader = Loader({"y": ds}, 10, shuffle="grouped")
    f.close()
    with pytest.raises(ValueError, match="was closed"):
        next(iter(loader))
    with pytest.raises(ValueError, match="closed"):
        Loader({"y": ds}, 10)


def test_store_that_changes_under_the_loader(tmp_path, arrays):
    z = zarr.create_array(str(tmp_path / "g.zarr"), shape=(N,), chunks=(100,), dtype="int64")
    z[:] = arrays["y"]
    loader = Loader({"y": z}, 100, shuffle=False)
    assert len(list(loader)) == 10
    z.resize((N + 100,))
    with pytest.raises(RuntimeError, match=r"changed under the Loader.*1000 rows.*1100"):
        next(iter(loader))


def test_unreadable_dtypes_and_columns(tmp_path):
    strings = zarr.create_array(str(tmp_path / "s.zarr"), shape=(4,), dtype=str)
    with pytest.raises(TypeError, match="dtype"):
        Loader({"s": strings}, 2)
    with pytest.raises(TypeError, match="string"):
        Loader(pa.table({"s": ["a", "b"]}), 1)
    # A list column of different lengths is a ragged column (docs/ragged.md).
    batch = next(iter(Loader(pa.table({"v": [[1.0], [1.0, 2.0]]}), 2, shuffle=False)))
    assert batch["v"].values.tolist() == [[1.0, 0.0], [1.0, 2.0]]
    with pytest.raises(ValueError, match="missing values"):
        Loader(pa.table({"v": [1.0, None]}), 1)


def test_leaves_of_different_lengths(tmp_path, arrays):
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(N - 1,), chunks=(100,), dtype="int64")
    with pytest.raises(ValueError, match=r"data\['a'\] has 999 rows and data\['y'\] has 1000"):
        Loader({"a": z, "y": arrays["y"]}, 2)


def test_cache_bytes(stores):
    # Groups of two chunks: no read-ahead, the default is twice the minimum.
    loader = Loader(stores["zarr3"], 64, shuffle="grouped", group_size=256)
    need = loader._rows.store.cache_bytes // 2
    Loader(stores["zarr3"], 64, shuffle="grouped", group_size=256, cache_bytes=need)
    with pytest.raises(ValueError, match="must hold one group"):
        Loader(stores["zarr3"], 64, shuffle="grouped", group_size=256, cache_bytes=need - 1)
    with pytest.raises(ValueError, match="sorted rows"):
        Loader(stores["zarr3"], 64, shuffle="full", cache_bytes=need)
    with pytest.raises(ValueError, match="store data"):
        Loader({"y": np.arange(5)}, 2, cache_bytes=10)
    with pytest.raises(ValueError, match="resident"):
        Loader(stores["zarr3"], 64, device="cpu", resident=True)
    with pytest.raises(ValueError, match="not offered"):
        Loader(stores["zarr3"], 64, shuffle="grouped", indices=np.arange(10))


def test_row_access_and_probe(stores, arrays):
    from looptoolkit import GetItemsDataset

    ds = GetItemsDataset(stores["hdf5"])
    np.testing.assert_array_equal(ds[7]["x"], arrays["x"][7])
    np.testing.assert_array_equal(ds.__getitems__([9, 2, 9])["y"], [9, 2, 9])
    loader = Loader(stores["zarr3"], 64, device="cpu", dtype="float16")
    batch = next(iter(loader))
    assert batch["x"].dtype == np.float16


@pytest.mark.parametrize("framework", ["torch", "jax", "tf"])
def test_same_order_on_every_backend(stores, arrays, framework):
    if framework == "torch":
        torch = pytest.importorskip("torch")
        device, to_numpy = torch.device("cpu"), lambda t: t.numpy()
    elif framework == "jax":
        jax = pytest.importorskip("jax")
        device, to_numpy = jax.devices("cpu")[0], np.asarray
    else:
        pytest.importorskip("tensorflow")
        device, to_numpy = "/CPU:0", lambda t: t.numpy()
    loader = Loader(stores["zarr3"], 64, shuffle="grouped", seed=11, device=device)
    host = Loader(stores["zarr3"], 64, shuffle="grouped", seed=11)
    for a, b in zip(loader, host, strict=True):
        for key in b:
            np.testing.assert_array_equal(to_numpy(a[key]), b[key])


def test_store_benchmark_runs_small(tmp_path):
    """benchmarks/stores.py at a tiny size: every store, every variant, the tables written."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    args = ["--rows", "3000", "--chunk", "256", "--batch", "64", "--rounds", "1"]
    args += ["--full-batches", "2", "--quality-chunks", "1", "4", "--out", str(tmp_path)]
    subprocess.run(
        [sys.executable, "-m", "benchmarks.stores", *args], cwd=root, check=True,
        capture_output=True, timeout=300,
    )  # fmt: skip
    payload = json.loads((tmp_path / "stores-cpu.json").read_text())
    stores = {s["store"]: s for s in payload["stores"]}
    assert set(stores) == {
        "zarr-zstd", "zarr-raw", "hdf5-gzip", "hdf5-lzf", "hdf5-contiguous", "hf-arrow",
        "npy-memmap",
    }  # fmt: skip
    for store in stores.values():
        names = [row["variant"] for row in store["rows"]]
        assert names[:3] == ["memory take", "sequential read", "Loader sequential"]
        assert "Loader grouped 16" in names and "Loader full (sorted reads)" in names
        assert all(row["epoch_s"] > 0 for row in store["rows"])
    assert (
        stores["zarr-zstd"]["memory"]["cache_peak_bytes"]
        <= (stores["zarr-zstd"]["memory"]["cache_budget_bytes"])
    )
    assert [row["order"] for row in payload["quality"]] == ["full", "grouped 1", "grouped 4"]
    text = (tmp_path / "stores-cpu.md").read_text()
    assert "| hdf5-gzip | Loader grouped 16 |" in text
    assert "| hf-arrow | Loader full, 1 record batch |" in text
    for store in stores.values():  # a full shuffle's first batch and close(), timed
        latency = store["latency"]
        assert latency["first_batch_s"] > 0 and latency["close_s"] >= 0
        assert latency["thread_end_s"] >= latency["close_s"]


@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "arrow"])
def test_epoch_memory_within_cache_and_batches_in_flight(tmp_path, fmt):
    """Traced allocations over an epoch stay within cache_bytes plus the batches in flight.

    Beyond, that is, what iterating the epoch's order takes by itself (blocks of
    positions, the groups' rows), measured alone.
    """
    n, dim, chunk, batch = 40_000, 32, 500, 100
    x = np.random.default_rng(0).standard_normal((n, dim), dtype=np.float32)
    if fmt == "zarr":
        data = {"x": zarr.create_array(str(tmp_path / "m.zarr"), shape=x.shape,
                                       chunks=(chunk, dim), dtype="float32")}  # fmt: skip
        data["x"][:] = x
    elif fmt == "hdf5":
        with h5py.File(tmp_path / "m.h5", "w") as f:
            f.create_dataset("x", data=x, chunks=(chunk, dim), compression="gzip")
        data = {"x": h5py.File(tmp_path / "m.h5", "r")["x"]}
    else:
        column = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), dim)
        data = pa.Table.from_batches(pa.table({"x": column}).to_batches(max_chunksize=700))
    loader = Loader(data, batch, shuffle="grouped", group_size=4 * chunk, seed=1)
    store = loader._rows.store
    for _ in loader:  # warm: imports, the codecs' first buffers
        pass
    from benchmarks.stores import _traced as traced  # the benchmark's own measure

    order = traced(lambda: [None for _ in loader.order.epoch(1)])
    peak = traced(lambda: [None for _ in loader])
    # Blocks in the queue, the one being made, the one being handed out, and the
    # one the loop's last batch (a view of its block) keeps alive.
    in_flight = (-(-loader.prefetch // store.block) + 3) * store.block * batch * dim * 4
    assert store.last.chunks_read == [-(-n // store.last.units[0])]
    bound = store.cache_bytes + in_flight + order
    assert peak <= bound, (peak, store.cache_bytes, in_flight, order)
    assert store.cache_bytes < x.nbytes  # the cache holds a part of the data


def test_make_dataloader_fits_a_small_chunkless_store_to_the_ranks():
    pytest.importorskip("torch")
    from looptoolkit import make_dataloader

    table = pa.table({"x": np.arange(50, dtype=np.int64)})
    seen = []
    counts = set()
    for rank in range(3):
        dl = make_dataloader(table, 4, shuffle="grouped", rank=rank, world_size=3, drop_last=True)
        batches = [b["x"].tolist() for b in dl]
        counts.add(len(batches))
        seen += [x for b in batches for x in b]
    assert len(counts) == 1 and len(seen) == len(set(seen))
