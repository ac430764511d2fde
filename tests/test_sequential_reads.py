"""Sequential reads of chunked stores: batches are views of the spans read.

A sequential order (and groups of one chunk) reads several chunks per call
into an array of the cache's and hands out its batches as views of it (an
evicted span's array is read into again only once no batch holds it:
`test_span_reuse.py`). These tests check that the batches equal the in-memory
Loader's in values and order (last partial batch, resume, ranks, a pass closed
early), that no batch handed out is ever written again by a later read, and
that HDF5 chunks stored as they are, read from the file directly, equal HDF5's
own reads."""

from __future__ import annotations

import itertools
import multiprocessing
import os

import h5py
import numpy as np
import pytest
from chunked import chunked_stores, random_table

from looptoolkit import Loader
from looptoolkit._rows.store_reads import ChunkCache, _cut
from looptoolkit.stores import wrap

ROWS, DIM, CHUNK = 5_000, 8, 512


@pytest.fixture(scope="module")
def arrays() -> dict[str, np.ndarray]:
    return random_table(ROWS, DIM)


@pytest.fixture(scope="module")
def stores(tmp_path_factory, arrays) -> dict[str, dict]:
    return chunked_stores(tmp_path_factory.mktemp("sequential"), arrays, CHUNK, ("lzf", "gzip"))


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


def test_pieces_are_views_one_per_segment(stores, arrays):
    # Random ranges over a cache holding several segments: the pieces are views, back to
    # back, in row order, and together the rows of the range.
    rng = np.random.default_rng(2)
    leaves = [wrap(stores["hdf5-lzf"]["x"], "x"), wrap(stores["zarr"]["y"], "y")]
    cache = ChunkCache(leaves, budget=6 * CHUNK * DIM * 4, unit=CHUNK)
    for _ in range(200):
        j = int(rng.integers(2))
        if rng.random() < 0.5:  # a read of a few chunks first: ranges then span segments
            c = int(rng.integers(ROWS // CHUNK))
            cache.span(j, c * CHUNK, min(ROWS, (c + 2) * CHUNK))
        start = int(rng.integers(ROWS))
        stop = int(rng.integers(start + 1, min(ROWS, start + 3 * CHUNK) + 1))
        parts = cache.pieces(j, start, stop)
        firsts = [first for first, _ in parts]
        assert firsts[0] == start
        assert firsts == sorted(firsts)
        for (first, rows), nxt in zip(parts, [*firsts[1:], stop], strict=True):
            assert first + len(rows) == nxt
            assert rows.base is not None  # a view of a segment, not a copy
        np.testing.assert_array_equal(
            np.concatenate([rows for _, rows in parts]), arrays["xy"[j]][start:stop]
        )


@pytest.mark.parametrize("uniform", [False, True])
def test_cut_equals_slices_views_where_one_part_holds_them(uniform):
    # Batches of random lengths, or of one length (cut by a reshape of each part).
    rng = np.random.default_rng(3)
    data = np.arange(2_000).reshape(1_000, 2)
    for _ in range(300):
        if uniform:
            size = int(rng.integers(1, 80))
            count = int(rng.integers(1, 1_000 // size + 1))
            start = int(rng.integers(0, 1_000 - size * count + 1))
            stop = start + size * count
            bounds = list(range(0, stop - start + 1, size))
        else:
            size = 0
            start = int(rng.integers(0, 500))
            stop = int(rng.integers(start + 1, 1_001))
            ends = np.cumsum(rng.integers(1, 80, size=400))
            bounds = [0, *ends[ends < stop - start].tolist(), stop - start]
        cuts = int(rng.integers(0, 6)) if stop > start + 1 else 0
        firsts = [start, *np.unique(rng.integers(start + 1, stop, size=cuts)).tolist()]
        parts = [(a, data[a:b]) for a, b in zip(firsts, [*firsts[1:], stop], strict=True)]
        got = _cut(parts, bounds, start, size)
        assert len(got) == len(bounds) - 1
        for batch, a, b in zip(got, bounds[:-1], bounds[1:], strict=True):
            np.testing.assert_array_equal(batch, data[start + a : start + b])
            inside = any(f <= start + a and start + b <= f + len(r) for f, r in parts)
            assert np.shares_memory(batch, data) == inside  # a view, else a copy


@pytest.mark.parametrize("fmt", STORES)
def test_sequential_batches_of_a_span_are_views_of_one_read(stores, fmt):
    # The batches of a read-ahead span share its array: no copy per batch or per chunk.
    batches = list(Loader(stores[fmt], 128, shuffle=False, prefetch=0))
    x = [b["x"] for b in batches]
    shared = sum(a.base is not None and a.base is b.base for a, b in itertools.pairwise(x))
    assert shared >= len(x) // 2


def _hdf5_cases(root) -> dict[str, tuple[h5py.Dataset, np.ndarray]]:
    """Datasets whose chunks are partly stored as they are (incompressible under lzf)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3_000, 6)).astype(np.float32)
    x[512:1024] = 0  # compresses: lzf applied to these chunks
    y = rng.integers(0, 2**62, size=3_000)
    y[1500:2600] = 7
    cases = {
        "lzf": (x, {"chunks": (256, 6), "compression": "lzf"}),
        "lzf-1d": (y, {"chunks": (256,), "compression": "lzf"}),
        "gzip": (x, {"chunks": (256, 6), "compression": "gzip"}),
        "plain-chunked": (x, {"chunks": (256, 6)}),
        "big-endian": (x.astype(">f4"), {"chunks": (256, 6), "compression": "lzf"}),
        "part-rows": (x, {"chunks": (256, 3), "compression": "lzf"}),
        "shuffle-lzf": (x, {"chunks": (256, 6), "compression": "lzf", "shuffle": True}),
        # Bytes shuffled, not compressed: chunks of the rows' size, but not their bytes.
        "shuffle-only": (x, {"chunks": (256, 6), "shuffle": True}),
    }
    out = {}
    with h5py.File(root / "cases.h5", "w") as f:
        for name, (a, kw) in cases.items():
            f.create_dataset(name, data=a, **kw)
        f.create_dataset("sparse", shape=(3_000, 6), dtype=np.float32, chunks=(256, 6))
        f["sparse"][700:900] = 1.5  # other chunks never written: fill value
    f = h5py.File(root / "cases.h5", "r")
    for name in [*cases, "sparse"]:
        out[name] = (f[name], f[name][:])
    return out


def test_hdf5_read_ranges_equal_h5py(tmp_path):
    # Ranges aligned on chunks and not, chunks stored as they are and compressed, the last
    # partial chunk, unwritten chunks, dtypes and chunk shapes that take HDF5's own read.
    rng = np.random.default_rng(5)
    cases = _hdf5_cases(tmp_path)
    x = cases["lzf"][0]
    masks = [x.id.get_chunk_info(i).filter_mask for i in range(x.id.get_num_chunks())]
    assert 0 in masks and 1 in masks  # both kinds of chunk are there
    for name, (dataset, data) in cases.items():
        leaf = wrap(dataset, name)
        own_read = name in ("big-endian", "part-rows")
        assert (leaf.filters is None) == own_read, name
        for k in range(60):
            cuts = np.sort(
                rng.choice(len(data) + 1, size=2 * int(rng.integers(1, 5)), replace=False)
            )
            if k % 3 == 0:  # on chunk boundaries (and the end)
                cuts = np.unique(np.minimum(cuts // 256 * 256, len(data)))
                cuts = cuts[: len(cuts) // 2 * 2]
            starts, stops = cuts[0::2], cuts[1::2]
            keep = stops > starts
            starts, stops = starts[keep], stops[keep]
            want = np.concatenate(
                [data[a:b] for a, b in zip(starts, stops, strict=True)] or [data[:0]]
            )
            out = np.empty((len(want), *data.shape[1:]), dtype=leaf.dtype)
            leaf.read_ranges(starts, stops, out)
            np.testing.assert_array_equal(out, want, err_msg=name)
            # Into an array that is not contiguous: HDF5's own read, then a copy.
            wide = np.zeros((len(want), *data.shape[1:], 2), dtype=leaf.dtype)
            leaf.read_ranges(starts, stops, wide[..., 0])
            np.testing.assert_array_equal(wide[..., 0], want, err_msg=name)
        np.testing.assert_array_equal(leaf.read(250, 2_999), data[250:2_999])


@pytest.mark.parametrize("fmt", STORES)
@pytest.mark.parametrize("chunks_ahead", [1, 2])
@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_sequential_small_cache_spans_end_inside_batches(stores, arrays, fmt, chunks_ahead, mode):
    # A cache that holds one or two chunks ahead: many spans, whose ends fall inside
    # batches of 100 rows (those batches are joined from two spans).
    default = Loader(stores[fmt], 100, shuffle=False)._rows.store
    row_bytes = sum(leaf.row_bytes for leaf in default.leaves)
    background = (CHUNK + default.ahead) * row_bytes  # the default's room for one more span
    cache_bytes = default.cache_bytes - background - 2 * (8 - chunks_ahead) * CHUNK * row_bytes
    loader = Loader(stores[fmt], 100, shuffle=False, cache_bytes=cache_bytes, prefetch_mode=mode)
    assert loader._rows.store.ahead == chunks_ahead * CHUNK
    got = list(loader)  # every batch kept until the end: none may change meanwhile
    assert loader._rows.store.last.reads >= 2 * len(arrays)  # two spans or more per leaf
    _same(got, list(Loader(dict(arrays), 100, shuffle=False)))


# -- raw chunks read from the file directly -----------------------------------------


def _incompressible(path, userblock: int = 0, rows: int = 4_000) -> np.ndarray:
    """An HDF5 file of random floats in lzf chunks (stored as they are) and compressible ids."""
    x = np.random.default_rng(6).standard_normal((rows, 5)).astype(np.float32)
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f.create_dataset("x", data=x, chunks=(128, 5), compression="lzf")
        f.create_dataset("y", data=np.arange(rows), chunks=(128,), compression="lzf")
    return x


def _epoch(data: dict, **kw) -> list[dict]:
    return list(Loader(data, 100, shuffle=False, **kw))


@pytest.mark.parametrize("userblock", [0, 512, 4096])
@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_raw_chunks_are_read_through_hdf5s_own_descriptor(tmp_path, monkeypatch, userblock, mode):
    # Chunks lzf left as they are: read with `os.preadv` from the descriptor HDF5 has
    # open, a run of chunks next to each other in the file per call; the same rows.
    x = _incompressible(tmp_path / "a.h5", userblock)
    calls = []
    preadv = os.preadv

    def counting(fd, buffers, offset):
        calls.append(sum(memoryview(b).nbytes for b in buffers))
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", counting)
    f = h5py.File(tmp_path / "a.h5", "r")
    loader = Loader({"x": f["x"], "y": f["y"]}, 100, shuffle=False, prefetch_mode=mode)
    got = list(loader)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), x)
    np.testing.assert_array_equal(np.concatenate([b["y"] for b in got]), np.arange(4_000))
    leaf = next(leaf for leaf in loader._rows.store.leaves if leaf.name == "/x")
    assert leaf._fd == f.id.get_vfd_handle()
    chunks = -(-4_000 // 128)
    # All whole chunks of x came through preadv (the check of the descriptor is one
    # more call), most of them several to a call.
    whole = 4_000 // 128 * 128 * 5 * 4
    assert sum(calls) == whole + 128 * 5 * 4
    assert len(calls) <= chunks // 4


@pytest.mark.parametrize("how", ["core driver", "bytes differ"])
def test_files_that_cannot_be_read_directly_go_through_hdf5(tmp_path, monkeypatch, how):
    # An in-memory file (the `core` driver) has no descriptor to read; a descriptor
    # whose bytes differ from HDF5's read of a chunk (here: offsets planted one row
    # off) fails its check. Both read each raw chunk through HDF5: the same rows.
    from looptoolkit.stores._hdf5 import HDF5Array

    x = _incompressible(tmp_path / "a.h5")
    if how == "core driver":
        f = h5py.File(tmp_path / "a.h5", "r", driver="core")
    else:
        f = h5py.File(tmp_path / "a.h5", "r")
        chunk = HDF5Array._chunk

        def shifted(self, dataset, k):
            offset, size, mask = chunk(self, dataset, k)
            return offset + self.row_bytes, size, mask

        monkeypatch.setattr(HDF5Array, "_chunk", shifted)
    loader = Loader({"x": f["x"]}, 100, shuffle=False)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in _epoch({"x": f["x"]})]), x)
    for _ in loader:
        pass
    assert loader._rows.store.leaves[0]._fd is False


def test_a_file_cut_short_while_open_raises_naming_it(tmp_path):
    # A file truncated under the Loader: a clear error naming it, never a signal.
    _incompressible(tmp_path / "a.h5")
    f = h5py.File(tmp_path / "a.h5", "r")
    loader = Loader({"x": f["x"]}, 100, shuffle=False, prefetch=0)
    it = iter(loader)
    next(it)
    os.truncate(tmp_path / "a.h5", os.path.getsize(tmp_path / "a.h5") // 2)
    with pytest.raises(OSError, match=r"a\.h5.*short.*changed since it was opened"):
        for _ in it:
            pass


def test_a_forked_process_reads_through_its_own_handle(tmp_path):
    # A fork inherits the Loader as it is (no pickling): its first read reopens the file
    # (HDF5 handles do not survive a fork) and checks that handle's descriptor again.
    x = _incompressible(tmp_path / "a.h5")
    f = h5py.File(tmp_path / "a.h5", "r")
    loader = Loader({"x": f["x"]}, 100, shuffle=False)
    next(iter(loader))  # the parent's descriptor checked and kept
    leaf = loader._rows.store.leaves[0]
    assert type(leaf._fd) is int
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()

    def child():
        got = np.concatenate([b["x"] for b in loader])
        results.put((got, leaf._pid == os.getpid(), type(leaf._fd).__name__))

    process = ctx.Process(target=child)
    process.start()
    got, reopened, fd = results.get(timeout=60)
    process.join(60)
    assert process.exitcode == 0
    np.testing.assert_array_equal(got, x)
    assert reopened and fd == "int"
    assert leaf._pid == os.getpid()  # the parent's array is its own still


def test_chunks_written_out_of_order_read_in_place(tmp_path):
    # Chunks written 0, 2, 1, 4, 3, ...: chunks next to each other in the file are not
    # always next to each other in the rows asked for (a partial chunk between them).
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2_048, 4)).astype(np.float32)
    order = [0, 2, 1, 4, 3, 6, 5, 7]
    with h5py.File(tmp_path / "a.h5", "w") as f:
        d = f.create_dataset("x", shape=x.shape, dtype=x.dtype, chunks=(256, 4), compression="lzf")
        for c in order:
            d[c * 256 : (c + 1) * 256] = x[c * 256 : (c + 1) * 256]
    f = h5py.File(tmp_path / "a.h5", "r")
    offsets = [f["x"].id.get_chunk_info_by_coord((c * 256, 0)).byte_offset for c in range(8)]
    assert offsets[2] < offsets[1]  # the layout this test is about
    leaf = wrap(f["x"], "x")
    for starts, stops in [([0, 512], [300, 768]), ([0, 512, 1024], [256, 1000, 1536])]:
        starts, stops = np.array(starts), np.array(stops)
        out = np.empty((int((stops - starts).sum()), 4), dtype=np.float32)
        leaf.read_ranges(starts, stops, out)
        want = np.concatenate([x[a:b] for a, b in zip(starts, stops, strict=True)])
        np.testing.assert_array_equal(out, want)
    assert type(leaf._fd) is int


# -- the next span read in the background ---------------------------------------------


def test_the_next_span_is_read_in_the_background_and_waited_for(tmp_path, monkeypatch):
    # A sequential order over chunks read from the file directly: the spans after the
    # first are read by the reading thread of their own while the loop cuts the one
    # before. Each read is slowed down here: a batch must still hold its rows, that is,
    # its span's read was waited for.
    import threading
    import time

    from looptoolkit.stores import _hdf5

    x = _incompressible(tmp_path / "a.h5", rows=20_000)
    threads: list[str] = []
    pread_all = _hdf5._pread_all

    def slow(reads, filename):
        threads.append(threading.current_thread().name)
        time.sleep(0.02)
        pread_all(reads, filename)

    monkeypatch.setattr(_hdf5, "_pread_all", slow)
    f = h5py.File(tmp_path / "a.h5", "r")
    data = {"x": f["x"], "y": f["y"]}
    # Room for a span being read besides the one cut (the default budget has it where
    # the other leaves are narrower than the one read in the background).
    cache_bytes = 2 * Loader(data, 100, shuffle=False)._rows.store.cache_bytes
    loader = Loader(data, 100, shuffle=False, cache_bytes=cache_bytes)
    assert loader.prefetch_mode == "thread"
    assert loader._rows.store.ahead  # chunks of 128 rows: spans of several chunks
    for _ in range(2):
        got = list(loader)  # kept: no span read into while its batches live
        np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), x)
        np.testing.assert_array_equal(np.concatenate([b["y"] for b in got]), np.arange(20_000))
    assert len(threads) >= 20
    assert all(name.startswith("looptoolkit-read") for name in threads)
    assert sum(loader._rows.store.last.chunks_read) == 2 * -(-20_000 // 128)  # each once


def test_an_error_of_a_background_read_is_raised_in_the_loop(tmp_path, monkeypatch):
    # The file cut short while the next span is read in the background: the loop gets
    # the read's error, naming the file, when it comes to that span.
    from looptoolkit.stores import _hdf5

    _incompressible(tmp_path / "a.h5", rows=20_000)
    later = []
    pread_all = _hdf5._pread_all

    def recording(reads, filename):
        later.append(len(reads))
        pread_all(reads, filename)

    monkeypatch.setattr(_hdf5, "_pread_all", recording)
    f = h5py.File(tmp_path / "a.h5", "r")
    loader = Loader({"x": f["x"]}, 100, shuffle=False)
    it = iter(loader)
    next(it)
    os.truncate(tmp_path / "a.h5", 4096)
    with pytest.raises(OSError, match=r"a\.h5.*changed since it was opened"):
        for _ in it:
            pass
    assert later  # the failing read was one in the background


@pytest.mark.parametrize("kw", [{"prefetch": 0}, {"prefetch_mode": "inline"}])
def test_nothing_is_read_in_the_background_with_prefetch_0_or_inline(tmp_path, monkeypatch, kw):
    # `prefetch=0` makes nothing ahead; "inline" runs no thread at all.
    from looptoolkit.stores import _hdf5

    x = _incompressible(tmp_path / "a.h5", rows=20_000)
    monkeypatch.setattr(_hdf5, "_reader", None)  # a background read would fail
    f = h5py.File(tmp_path / "a.h5", "r")
    got = np.concatenate([b["x"] for b in Loader({"x": f["x"]}, 100, shuffle=False, **kw)])
    np.testing.assert_array_equal(got, x)
