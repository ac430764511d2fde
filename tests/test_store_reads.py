"""Reads of store data: a full shuffle streams its batches, and stopping it stops the reads.

A full shuffle reads each batch's rows sorted, touching most chunks of the
store; its first batch must come when it is read (not after a block of batches),
and ``close()``, ``break`` or a dropped iterator must stop the background reads
within one part of a batch's read.
"""

from __future__ import annotations

import itertools
import re
import threading
import time

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest
import zarr

from looptoolkit import Loader
from looptoolkit._rows.store_reads import PART_CHUNKS, read_parts, sorted_take

ROWS, DIM, CHUNK = 60_000, 16, 256


@pytest.fixture(scope="module")
def zstd(tmp_path_factory) -> zarr.Array:
    """A zstd-compressed zarr array: a 256-row random batch touches most of its chunks."""
    path = tmp_path_factory.mktemp("reads") / "x.zarr"
    values = np.random.default_rng(0).standard_normal((ROWS, DIM)).astype(np.float32)
    array = zarr.create_array(
        str(path),
        shape=values.shape,
        chunks=(CHUNK, DIM),
        dtype=values.dtype,
        compressors=zarr.codecs.ZstdCodec(level=3),
    )
    array[:] = values
    return array


def _readers(besides: frozenset[threading.Thread] = frozenset()) -> list[threading.Thread]:
    """The Loader's reading threads alive now, other than ``besides``."""
    return [
        t
        for t in threading.enumerate()
        if t.name == "looptoolkit-loader-prefetch" and t not in besides
    ]


def _no_readers(within: float = 1.0, besides: frozenset[threading.Thread] = frozenset()) -> bool:
    """Whether the reading threads (but ``besides``: another test's, still ending) end in time."""
    deadline = time.perf_counter() + within
    while _readers(besides) and time.perf_counter() < deadline:
        time.sleep(0.01)
    return not _readers(besides)


def test_parts_equal_one_read(zstd):
    rng = np.random.default_rng(1)
    from looptoolkit.stores._zarr import ZarrArray

    leaf = ZarrArray(zstd, "data")
    for size in (1, PART_CHUNKS, 300, 2000):
        idx = rng.choice(ROWS, size, replace=False)
        rows = np.sort(idx)
        np.testing.assert_array_equal(read_parts(leaf, rows), zstd[:][rows])
        np.testing.assert_array_equal(sorted_take(leaf, idx), zstd[:][idx])


def test_first_batch_of_a_full_shuffle_is_one_batch_read(zstd):
    earlier = frozenset(_readers())
    alone = Loader(zstd, 256, shuffle=True, prefetch=0)
    reads, firsts = [], []
    for _ in range(3):  # interleaved: the machine may be shared
        t = time.perf_counter()
        next(iter(alone))
        reads.append(time.perf_counter() - t)
        it = iter(Loader(zstd, 256, shuffle=True, prefetch=2))
        t = time.perf_counter()
        first = next(it)
        firsts.append(time.perf_counter() - t)
        it.close()
    np.testing.assert_array_equal(first, next(iter(alone)))
    assert np.median(firsts) < 2 * np.median(reads) + 0.05, (firsts, reads)
    assert _no_readers(besides=earlier)


def _slow(monkeypatch, seconds: float) -> list[int]:
    """Every sorted read of a zarr array takes ``seconds`` longer; the parts read are counted."""
    from looptoolkit.stores import _zarr

    read = _zarr.ZarrArray.read_rows
    parts: list[int] = []

    def slow(self, rows):
        time.sleep(seconds)
        parts.append(len(rows))
        return read(self, rows)

    monkeypatch.setattr(_zarr.ZarrArray, "read_rows", slow)
    return parts


@pytest.mark.parametrize("how", ["close", "break", "drop"])
def test_stopping_a_full_shuffle_stops_its_reads(zstd, monkeypatch, how):
    earlier = frozenset(_readers())  # an earlier test's pass, dropped but not yet collected
    parts = _slow(monkeypatch, 0.05)  # a batch is ~10 parts: half a second
    loader = Loader(zstd, 256, shuffle=True, prefetch=4)
    it = iter(loader)
    start = time.perf_counter()
    next(it)
    batch = time.perf_counter() - start  # a batch's read on this machine now (and a thread start)
    time.sleep(0.1)  # in the middle of the next batch's read
    t, read = time.perf_counter(), len(parts)
    if how == "close":
        it.close()
    elif how == "break":
        for _ in it:
            # The loop got its batch: the wait for it is the read, not the stop (timed
            # from before the loop, a batch's read under load made this case fail).
            t, read = time.perf_counter(), len(parts)
            break
        it.close()
    else:
        # The last reference: reference counting frees the pass, which stops its thread,
        # with no collection. (A `gc.collect()` here was timed too: a full collection
        # walks the whole heap, 0.5 s with the frameworks imported and over 1 s on a
        # loaded machine late in a full run, which made this case fail once.)
        del it
    stopped = time.perf_counter() - t
    assert _no_readers(0.5, earlier), "a reading thread runs on after the pass stopped"
    # A stop waits for the part being read, not for the rest of the batch (about ten
    # parts) or of a block of batches. Counted, not timed: how long a part takes
    # depends on the machine's load.
    done = len(parts)
    assert done - read <= 1, f"{done - read} parts were read after the stop"
    assert stopped < max(2.0, 2 * batch), (stopped, batch)  # and the stop does not hang
    time.sleep(0.2)
    assert len(parts) == done  # no read after the thread ended
    assert loader.state_dict()["offset"] == 0  # the cursor is where it was


def test_a_full_shuffle_streams(zstd, monkeypatch):
    # Each batch is handed over as it is read: the consumer never waits for many.
    _slow(monkeypatch, 0.002)
    gaps = []
    it = iter(Loader(zstd, 256, shuffle=True, prefetch=2))
    t = time.perf_counter()
    for k, _ in enumerate(it):
        now = time.perf_counter()
        gaps.append(now - t)
        t = now
        if k == 12:
            break
    it.close()
    assert max(gaps) < 4 * np.median(gaps) + 0.05, gaps


@pytest.mark.parametrize("shuffle", [False, "grouped"])
def test_one_chunk_at_a_time_reads_ahead(zstd, shuffle):
    # Sequential and one-chunk groups read several chunks per call, each chunk once.
    rng = np.random.default_rng(2)
    values = zstd[:]
    chunks = -(-ROWS // CHUNK)
    for cache_bytes in (None, "least"):
        kw: dict = {"shuffle": shuffle, "seed": 3, "prefetch": int(rng.integers(0, 3))}
        if shuffle == "grouped":
            kw["group_size"] = CHUNK
        if cache_bytes == "least":  # the least cache taken: no room to read ahead
            with pytest.raises(ValueError, match="must hold one group") as error:
                Loader(zstd, 100, cache_bytes=1, **kw)
            kw["cache_bytes"] = int(re.search(r"\((\d+) bytes", str(error.value))[1])
        loader = Loader(zstd, 100, **kw)
        store = loader._rows.store
        got = np.concatenate(list(loader))
        np.testing.assert_array_equal(got, values[loader.indices(0)])
        assert store.last.chunks_read == [chunks]
        if cache_bytes is None:
            assert store.ahead >= 4 * CHUNK
            assert store.last.reads <= chunks // 4
        else:
            assert store.ahead == 0


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    sizes=st.lists(st.integers(0, 40), min_size=2, max_size=30),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["float32x3", "int64", "uint8x2x2", "bool"]),
)
def test_arrow_rows_over_many_record_batches(sizes, seed, kind):
    # One gather over all record batches equals the plain per-batch reads.
    import pyarrow as pa

    from looptoolkit.stores._arrow import ArrowColumn

    hypothesis.assume(sum(sizes) > 0)
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    if kind == "float32x3":
        values = rng.standard_normal((n, 3)).astype(np.float32)
    elif kind == "int64":
        values = rng.integers(-(2**40), 2**40, n)
    elif kind == "uint8x2x2":
        values = rng.integers(0, 255, (n, 2, 2)).astype(np.uint8)
    else:
        values = rng.random(n) < 0.5

    def arrow(part: np.ndarray) -> pa.Array:
        if part.ndim == 1:
            return pa.array(part)
        inner = arrow(part.reshape(len(part) * part.shape[1], *part.shape[2:]))
        return pa.FixedSizeListArray.from_arrays(inner, part.shape[1])

    # Batches made apart (their buffers anywhere in memory), some of them slices.
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    chunks = []
    for a, b in itertools.pairwise(bounds.tolist()):
        pad = int(rng.integers(0, 3))
        whole = arrow(np.concatenate((values[a:b], values[:pad]))) if pad and b > a else None
        chunks.append(whole.slice(0, b - a) if whole is not None else arrow(values[a:b]))
    column = ArrowColumn(pa.chunked_array(chunks, type=chunks[0].type), "data")
    plain = ArrowColumn(pa.chunked_array(chunks, type=chunks[0].type), "data")
    plain._rows_at = None  # the per-record-batch loop
    for size in (1, int(rng.integers(1, n + 1)), n):
        rows = np.sort(rng.choice(n, size, replace=False))
        got = column.read_rows(rows)
        np.testing.assert_array_equal(got, values[rows])
        np.testing.assert_array_equal(got, plain.read_rows(rows))
        assert got.dtype == plain.read_rows(rows).dtype
        idx = rng.integers(0, n, size)
        np.testing.assert_array_equal(sorted_take(column, idx), values[idx])


def test_arrow_rows_of_a_memory_mapped_file(tmp_path):
    import pyarrow as pa

    from looptoolkit.stores._arrow import ArrowColumn

    rng = np.random.default_rng(4)
    values = rng.standard_normal((5000, 8)).astype(np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 8)
    table = pa.table({"x": column})
    with (
        pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as writer,
    ):
        for batch in table.to_batches(max_chunksize=37):
            writer.write_batch(batch)
    mapped = pa.ipc.open_stream(pa.memory_map(str(tmp_path / "t.arrow"))).read_all()
    leaf = ArrowColumn(mapped.column("x"), "data['x']")
    assert len(leaf.views) > 100 and leaf._rows_at is not None
    for _ in range(5):
        idx = rng.integers(0, 5000, 256)
        np.testing.assert_array_equal(sorted_take(leaf, idx), values[idx])
    loader = Loader(mapped, 256, shuffle=True, seed=2)
    np.testing.assert_array_equal(
        np.concatenate([b["x"] for b in loader]), values[loader.indices(0)]
    )


def _ranks(data, world_size: int, n: int, **kw) -> None:
    """Each rank's grouped epoch: disjoint rows, together every row, equal batch counts."""
    loaders = [
        Loader(data, 64, shuffle="grouped", seed=5, rank=r, world_size=world_size, **kw)
        for r in range(world_size)
    ]
    assert len({len(loader) for loader in loaders}) == 1
    for epoch in (0, 1):
        seen = [np.unique(loader.indices(epoch)) for loader in loaders]
        every = np.concatenate(seen)
        assert len(np.unique(every)) == len(every), "ranks share rows"
        np.testing.assert_array_equal(np.sort(every), np.arange(n))
        for loader in loaders:
            loader.set_epoch(epoch)
            assert len(list(loader)) == len(loader)


@pytest.mark.parametrize("world_size", [3, 8])
def test_small_chunkless_stores_on_several_ranks(tmp_path, world_size):
    import datasets
    import h5py
    import pyarrow as pa

    n = 5000
    values = np.random.default_rng(6).standard_normal((n, 4)).astype(np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 4)
    table = pa.table({"x": column, "i": np.arange(n)})
    datasets.Dataset(table).save_to_disk(str(tmp_path / "hf"))
    hf = datasets.load_from_disk(str(tmp_path / "hf"))
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f.create_dataset("x", data=values)  # contiguous
    contiguous = h5py.File(tmp_path / "c.h5", "r")
    many = pa.Table.from_batches(table.to_batches(max_chunksize=97))
    for data in (hf, contiguous, many):
        _ranks(data, world_size, n)
    batch = next(iter(Loader(hf, 64, shuffle="grouped", rank=1, world_size=world_size)))
    np.testing.assert_array_equal(batch["x"], values[batch["i"]])


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(n=st.integers(1, 300), world_size=st.integers(1, 12), drop=st.booleans())
def test_chunkless_grouped_order_for_any_world_size(n, world_size, drop):
    import pyarrow as pa

    hypothesis.assume(world_size <= n)
    table = pa.table({"i": np.arange(n)})
    if drop:
        loaders = [
            Loader(table, 1, shuffle="grouped", rank=r, world_size=world_size, drop_last=True)
            for r in range(world_size)
        ]
        assert len({len(loader) for loader in loaders}) == 1
        rows = np.concatenate([loader.indices(0) for loader in loaders])
        assert len(np.unique(rows)) == len(rows)
    else:
        _ranks(table, world_size, n)


def test_a_deleted_zarr_chunk_reads_as_fill_value_and_the_check_finds_it(tmp_path):
    # What docs/stores.md tells users: zarr's rule, and the check they can run.
    import os

    array = zarr.create_array(str(tmp_path / "d.zarr"), shape=(40,), chunks=(10,), dtype="int64")
    array[:] = np.arange(40) + 1
    assert array.nchunks_initialized == array.nchunks
    os.remove(tmp_path / "d.zarr" / "c" / "2")
    reopened = zarr.open_array(str(tmp_path / "d.zarr"), mode="r")
    batch = np.concatenate(list(Loader(reopened, 8, shuffle=False)))
    np.testing.assert_array_equal(batch[20:30], np.zeros(10))  # the fill value, no error
    assert reopened.nchunks_initialized == reopened.nchunks - 1


def test_arrow_gather_in_any_order_equals_the_sorted_read():
    import pyarrow as pa

    from looptoolkit.stores._arrow import ArrowColumn

    rng = np.random.default_rng(9)
    values = rng.standard_normal((3000, 5)).astype(np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 5)
    table = pa.Table.from_batches(pa.table({"x": column}).to_batches(max_chunksize=31))
    leaf = ArrowColumn(table.column("x"), "data['x']")
    idx = rng.integers(0, 3000, 700)  # repeats, any order
    np.testing.assert_array_equal(leaf.gather(idx), values[idx])
    np.testing.assert_array_equal(sorted_take(leaf, idx), values[idx])
    loader = Loader(table, 64, shuffle=True, seed=3, prefetch=0)
    np.testing.assert_array_equal(
        np.concatenate([b["x"] for b in loader]), values[loader.indices(0)]
    )
