"""Arrow IPC files and streams in a bucket, and HF datasets saved to one, as Loader data.

Against the local S3 server behind the fault proxy: batches equal the local
table's (the same orders over the same rows), each record batch's buffers of the
columns read fetched once a grouped epoch as one range with no request for
metadata, a stream's index built once, faults retried, resume, workers.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("obstore")
pytest.importorskip("moto")

from s3_fixtures import resumed_epoch  # noqa: E402

from looptoolkit import Loader  # noqa: E402
from looptoolkit.stores import StoreArray, _ipc_index  # noqa: E402
from looptoolkit.stores import bucket as in_bucket  # noqa: E402

ROWS, UNIT, BATCH = 12_000, 1000, 200
BATCHES = ROWS // UNIT
READ = ("x", "v", "e")


pytestmark = pytest.mark.usefixtures("settled")  # no request left open after a test


@pytest.fixture(autouse=True)
def _fresh_indexes() -> None:
    _ipc_index._MEMORY.clear()  # each test builds its indexes (a process keeps them)


@pytest.fixture(scope="module")
def columns() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal(ROWS).astype(np.float32),
        "v": rng.integers(0, 1000, ROWS).astype(np.int16),
        "e": rng.standard_normal((ROWS, 3)).astype(np.float32),  # a vector per row
        "y": np.arange(ROWS, dtype=np.int64),  # never read: its bytes must not be fetched
    }


def table(columns: dict[str, np.ndarray]) -> Any:
    e = columns["e"]
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(e.ravel()), e.shape[1])
    return pa.table({"x": columns["x"], "v": columns["v"], "e": vectors, "y": columns["y"]})


def ipc(t: Any, kind: str, compression: str | None = None, sizes: Any = None) -> bytes:
    """``t`` as an IPC file or stream of record batches of ``UNIT`` rows (or ``sizes``)."""
    sink = pa.BufferOutputStream()
    new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with new(sink, t.schema, options=options) as writer:
        at = 0
        for n in sizes or [UNIT] * -(-t.num_rows // UNIT):
            writer.write_batch(t.slice(at, n).combine_chunks().to_batches()[0])
            at += n
    return sink.getvalue().to_pybytes()


@pytest.fixture(params=[("file", None), ("stream", None), ("file", "lz4"), ("stream", "zstd")])
def stored(request: Any, s3: Any, bucket: str, columns: dict[str, np.ndarray]) -> Any:
    kind, compression = request.param
    data = ipc(table(columns), kind, compression)
    s3.put(bucket, "data/rows.arrow", data)
    s3.reset_stats()
    return kind, f"s3://{bucket}/data/rows.arrow", data


def local(data: bytes, kind: str) -> Any:
    """The same bytes read on this machine (the local counterpart: record batches as chunks)."""
    reader = pa.ipc.open_file(data) if kind == "file" else pa.ipc.open_stream(data)
    return reader.read_all().select(list(READ))


def open_(s3: Any, url: str, **kwargs: Any) -> Any:
    return in_bucket(url, columns=list(READ), storage_options=s3.storage_options(), **kwargs)


def expected(columns: dict[str, np.ndarray], loader: Loader, epoch: int = 0) -> dict[str, Any]:
    idx = loader.indices(epoch)
    return {k: columns[k][idx] for k in READ}


def epoch_of(loader: Loader, epoch: int = 0, keys: tuple[str, ...] = READ) -> dict[str, Any]:
    loader.set_epoch(epoch)
    got = list(loader)
    return {k: np.concatenate([b[k] for b in got]) for k in keys}


def equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def gets(s3: Any) -> int:
    return s3.stats.snapshot()["by_method"].get("GET", 0)


def used_bytes(data: bytes, names: tuple[str, ...]) -> int:
    """Bytes of the body buffers of the columns ``names`` in an IPC object (what reads need)."""
    reader = _ipc_index._Reader(_Local(data), _ipc_index.ObjectRef("k", len(data)))
    index = _ipc_index.index_of(reader.fetcher, reader.ref, "local", None, False)
    schema = pa.ipc.read_schema(pa.py_buffer(index.schema))
    per_column = {"x": 2, "v": 2, "e": 3, "y": 2}  # buffers of each column in a body
    total = 0
    for meta in index.metadata:
        buffers = _ipc_index.batch_buffers(meta)[1]
        at = 0
        for name in schema.names:
            mine = buffers[at : at + per_column[name]]
            at += per_column[name]
            if name in names:
                total += sum(n for _, n in mine)
    _ipc_index._MEMORY.clear()
    return total


class _Local:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def take(self, refs: list[Any]) -> list[bytes]:
        return [self.data[r.start : r.start + r.size] for r in refs]


def test_opening_reads_the_end_and_the_batches_headers_only(s3, stored):
    kind, url, data = stored
    opened = open_(s3, url)
    assert sorted(opened) == ["e", "v", "x"]
    assert opened["v"].shape == (ROWS,) and opened["v"].dtype == np.int16
    assert opened["e"].shape == (ROWS, 3) and opened["e"].dtype == np.float32
    assert opened["x"].chunk_rows == UNIT
    seen = s3.stats.snapshot()
    # The end (a file's footer; a stream has none), then the batches' metadata: the file's
    # 12 headers lie within 4 MiB (one range); the stream's start (its schema, the first
    # batch's header), then its small messages read through in one range.
    assert seen["by_method"] == {"HEAD": 1, "GET": 2 if kind == "file" else 3}
    assert seen["body_bytes"] <= len(data) + 2 * (1 << 16)


def test_epochs_equal_the_local_tables_and_fetch_each_batch_once(s3, stored, columns):
    kind, url, data = stored
    opened = open_(s3, url)
    assert opened["x"].counters.requests == (2 if kind == "file" else 3)  # the opening's
    for shuffle in ("grouped", False):
        before = opened["x"].counters.as_dict()
        s3.reset_stats()
        loader = Loader(opened, BATCH, shuffle=shuffle, stats=True)
        got = epoch_of(loader, 1)
        assert equal(got, epoch_of(Loader(local(data, kind), BATCH, shuffle=shuffle), 1))
        assert equal(got, expected(columns, loader, 1))
        seen = s3.stats.snapshot()
        # One range a batch (x, v and e adjacent), no request for metadata; y never fetched.
        assert seen["by_method"] == {"GET": BATCHES, "HEAD": 1}
        need = used_bytes(data, READ)
        assert need <= seen["body_bytes"] <= 1.05 * need
        assert seen["body_bytes"] < need + used_bytes(data, ("y",)) // 2
        reads = loader.stats.remote_reads  # the file's counters: the epoch's part of them
        assert reads["requests"] - before["requests"] == BATCHES + 1
        assert reads["bytes_fetched"] - before["bytes_fetched"] == seen["body_bytes"]
        assert reads["bytes_used"] - before["bytes_used"] == seen["body_bytes"]


def test_full_shuffle_through_the_disk_cache(s3, stored, columns, tmp_path):
    kind, url, data = stored
    with pytest.raises(ValueError, match="x the bytes"):
        Loader(open_(s3, url), BATCH, shuffle=True)
    opened = open_(s3, url, cache_dir=tmp_path / "cache", cache_bytes=1 << 26)
    loader = Loader(opened, BATCH, shuffle=True)
    local_ = Loader(local(data, kind), BATCH, shuffle=True)
    s3.reset_stats()
    assert equal(epoch_of(loader, 0), epoch_of(local_, 0))
    assert gets(s3) == BATCHES
    s3.reset_stats()
    assert equal(epoch_of(loader, 1), expected(columns, loader, 1))
    assert s3.stats.snapshot()["by_method"] == {"HEAD": 1}  # every range from the disk


@pytest.mark.parametrize(("kind", "extra"), [("503", {}), ("truncate", {"after_bytes": 1000})])
def test_faults_are_retried_and_batches_stay_exact(s3, stored, columns, kind, extra):
    _, url, _ = stored
    opened = open_(s3, url, deadline_s=0.5, attempts=4)
    s3.faults.add(kind, times=3, match="rows.arrow", **extra)
    loader = Loader(opened, BATCH, shuffle="grouped", stats=True)
    assert equal(epoch_of(loader), expected(columns, loader))
    assert s3.faults.pending() == 0
    assert loader.stats.remote_reads["retries"] >= 3


def test_resume_gives_the_rest_exactly(s3, stored, columns):
    _, url, _ = stored
    opened = open_(s3, url)
    got = resumed_epoch(opened, BATCH, 2, READ)
    assert equal(got, expected(columns, Loader(opened, BATCH, shuffle="grouped"), 2))


def test_a_batch_of_another_length_is_refused(s3, bucket, columns):
    options = s3.storage_options()
    for kind in ("file", "stream"):
        s3.put(bucket, f"odd.{kind}.arrow", ipc(table(columns), kind, sizes=[UNIT, 500, 10_500]))
        with pytest.raises(ValueError, match=r"odd\.\w+\.arrow has record batches of \[500, 1000"):
            in_bucket(f"s3://{bucket}/odd.{kind}.arrow", storage_options=options)
    s3.put(bucket, "ids.arrow", ipc(pa.table({"ids": pa.array([[1, 2], [3]] * 600)}), "file"))
    with pytest.raises(ValueError, match=r"data\['ids'\]: its rows are lists of different"):
        in_bucket(f"s3://{bucket}/ids.arrow", storage_options=options)
    s3.put(bucket, "s.arrow", ipc(pa.table({"s": [str(i) for i in range(1200)]}), "stream"))
    with pytest.raises(TypeError, match=r"data\['s'\]: a column of type string"):
        in_bucket(f"s3://{bucket}/s.arrow", storage_options=options)
    s3.put(bucket, "not.arrow", b"PAR1" + bytes(100))
    with pytest.raises(ValueError, match=r"not\.arrow is not an Arrow IPC"):
        in_bucket(f"s3://{bucket}/not.arrow", storage_options=options)
    with pytest.raises(ValueError, match="has no column 'z'"):
        in_bucket(f"s3://{bucket}/odd.file.arrow", columns=["z"], storage_options=options)


def test_a_stream_of_large_batches_is_indexed_header_by_header(s3, bucket, tmp_path):
    # Batches of 1.5 MiB: a GET of each header (4 KiB), not of the bytes between them.
    big = np.arange(6 * 400_000, dtype=np.float32)
    data = ipc(pa.table({"x": big}), "stream", sizes=[400_000] * 6)
    s3.put(bucket, "big.arrow", data)
    url, options = f"s3://{bucket}/big.arrow", s3.storage_options()
    s3.reset_stats()
    cache = {"cache_dir": tmp_path / "cache", "cache_bytes": 1 << 26}
    opened = in_bucket(url, storage_options=options, **cache)
    seen = s3.stats.snapshot()
    # The end, the start (the schema and the first header, 64 KiB), then one GET a header.
    assert seen["by_method"] == {"HEAD": 1, "GET": 2 + 5}
    assert seen["body_bytes"] == 2 * (1 << 16) + 5 * (1 << 12)
    got = [b["x"] for b in Loader(opened, 50_000, shuffle=False)]
    assert np.array_equal(np.concatenate(got), big)
    # Kept in this process's memory, and in the disk cache for other processes.
    s3.reset_stats()
    in_bucket(url, storage_options=options, **cache)
    assert s3.stats.snapshot()["by_method"] == {"HEAD": 1}
    _ipc_index._MEMORY.clear()
    s3.reset_stats()
    in_bucket(url, storage_options=options, **cache)
    assert s3.stats.snapshot()["by_method"] == {"HEAD": 1}


def test_a_prefix_of_ipc_files_is_one_table_in_key_order(s3, bucket, columns):
    t = table(columns)
    bounds = [0, 4 * UNIT, 9 * UNIT, ROWS]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        s3.put(bucket, f"ds/part-{i}.arrow", ipc(t.slice(a, b - a), "file"))
    s3.put(bucket, "ds/_SUCCESS", b"")
    opened = in_bucket(f"s3://{bucket}/ds", storage_options=s3.storage_options())
    assert sorted(opened) == ["e", "v", "x", "y"] and len(opened["x"]) == ROWS
    loader = Loader(opened, BATCH, shuffle="grouped")
    assert equal(epoch_of(loader, 1, ("x", "y")), {k: columns[k][loader.indices(1)] for k in "xy"})


def hf_dataset(columns: dict[str, np.ndarray], rows: int) -> Any:
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "x": datasets.Value("float32"),
            "v": datasets.Value("int16"),
            "e": datasets.Sequence(datasets.Value("float32"), length=3),
        }
    )
    return datasets.Dataset.from_dict({k: columns[k][:rows] for k in READ}, features=features)


def test_a_hf_dataset_saved_to_the_bucket(s3, bucket, columns, tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = ROWS - 500  # two shards of 5750 rows: each ends in a batch of 750
    ds = hf_dataset(columns, rows)
    url, options = f"s3://{bucket}/hf/train", s3.storage_options()
    ds.save_to_disk(url, num_shards=2, storage_options=options)
    ds.save_to_disk(tmp_path / "hf", num_shards=2)
    saved = datasets.load_from_disk(tmp_path / "hf")  # the local counterpart
    s3.reset_stats()
    opened = in_bucket(url, storage_options=options)
    assert sorted(opened) == ["e", "v", "x"] and len(opened["x"]) == rows
    assert opened["x"].chunk_rows == UNIT
    # Two LISTs (no Parquet, then the Arrow files), state.json, then each stream's start
    # (64 KiB) and the rest of its small messages in one range.
    assert s3.stats.snapshot()["by_method"] == {"GET": 2 + 1 + 2 * 2}
    want = {k: columns[k][:rows] for k in READ}
    for shuffle in ("grouped", False):
        s3.reset_stats()
        loader = Loader(opened, BATCH, shuffle=shuffle)
        got = epoch_of(loader, 1)
        assert equal(got, epoch_of(Loader(saved, BATCH, shuffle=shuffle), 1))
        assert equal(got, {k: v[loader.indices(1)] for k, v in want.items()})
        assert gets(s3) == 1 + 2 * 6  # the LIST, each of the 12 batches once
    cached = in_bucket(url, storage_options=options, cache_dir=tmp_path / "c", cache_bytes=1 << 26)
    loader = Loader(cached, BATCH, shuffle=True)
    assert equal(epoch_of(loader, 2), epoch_of(Loader(saved, BATCH, shuffle=True), 2))
    # Ranks read their own rows, and the dataset's files in the order state.json lists them.
    halves = [Loader(opened, BATCH, shuffle="grouped", rank=r, world_size=2) for r in (0, 1)]
    for half in halves:
        assert equal(epoch_of(half), {k: v[half.indices(0)] for k, v in want.items()})


def test_a_hf_dataset_dict_names_its_splits(s3, bucket, columns):
    datasets = pytest.importorskip("datasets")
    ds = hf_dataset(columns, 2000)
    splits = datasets.DatasetDict({"train": ds, "test": ds.select(range(100))})
    url, options = f"s3://{bucket}/dd", s3.storage_options()
    splits.save_to_disk(url, storage_options=options)
    with pytest.raises(ValueError, match=rf"pass one of its splits: {url}/test, {url}/train"):
        in_bucket(url, storage_options=options)
    assert len(in_bucket(f"{url}/test", storage_options=options)["x"]) == 100


def test_dataloader_workers_read_the_hf_dataset(s3, bucket, columns):
    pytest.importorskip("torch")
    from looptoolkit import make_dataloader

    ds = hf_dataset(columns, ROWS)
    url, options = f"s3://{bucket}/hf", s3.storage_options()
    ds.save_to_disk(url, num_shards=2, storage_options=options)
    opened = in_bucket(url, storage_options=options)
    loader = make_dataloader(
        opened, BATCH, shuffle="grouped", num_workers=2, multiprocessing_context="spawn"
    )
    got = [{k: np.asarray(b[k]) for k in READ} for b in loader]
    mine = Loader(opened, BATCH, shuffle="grouped")  # the same Loader in this process
    want = list(mine)
    assert len(got) == len(want)
    assert all(equal(a, b) for a, b in zip(got, want, strict=True))
    idx = mine.indices(0)
    assert equal({k: np.concatenate([b[k] for b in got]) for k in READ}, expected(columns, mine))
    assert len(idx) == ROWS


class _Chunked(StoreArray):
    """Values in memory read as a store of ``UNIT``-row chunks (a mixture's local reference)."""

    kind, path = "chunked", "reference"

    def __init__(self, values: np.ndarray) -> None:
        self.values, self.shape, self.dtype = values, values.shape, values.dtype
        self.chunk_rows = UNIT

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.values[start:stop].copy()


def test_a_mixture_of_a_stream_in_the_bucket_and_local_arrays(s3, bucket, columns):
    import looptoolkit as lt

    s3.put(bucket, "mix.arrow", ipc(table(columns), "stream", "lz4"))
    other = {k: v[:3000][::-1].copy() for k, v in columns.items() if k in READ}
    remote = open_(s3, f"s3://{bucket}/mix.arrow")
    reference = {k: _Chunked(columns[k]) for k in READ}  # chunks of the same rows
    for shuffle in ("grouped", False):
        mixed = lt.Mix({"web": remote, "code": other}, {"web": 0.7, "code": 0.3})
        plain = lt.Mix({"web": reference, "code": other}, {"web": 0.7, "code": 0.3})
        got = list(Loader(mixed, BATCH, shuffle=shuffle))
        want = list(Loader(plain, BATCH, shuffle=shuffle))
        assert len(got) == len(want) > 0
        assert all(equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_column_of_lists_of_one_length(s3, bucket, columns):
    # What HF writes for a 2-D array without a declared length: lists (not fixed-size).
    e = columns["e"]
    lists = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 3 * ROWS + 1, 3, dtype=np.int32)), pa.array(e.ravel())
    )
    s3.put(bucket, "lists.arrow", ipc(pa.table({"e": lists, "x": columns["x"]}), "stream"))
    options = s3.storage_options()
    opened = in_bucket(f"s3://{bucket}/lists.arrow", storage_options=options)
    assert opened["e"].shape == (ROWS, 3) and opened["e"].dtype == np.float32
    loader = Loader(opened, BATCH, shuffle="grouped")
    assert np.array_equal(np.concatenate([b["e"] for b in loader]), e[loader.indices(0)])
    # A batch of other widths: refused when read, naming the batch and both shapes.
    wide = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 2 * ROWS + 1, 2, dtype=np.int32)), pa.array(e.ravel()[: 2 * ROWS])
    )
    mixed = pa.Table.from_batches(
        [
            *pa.table({"e": lists}).slice(0, UNIT).to_batches(),
            *pa.table({"e": wide}).slice(UNIT, UNIT).to_batches(),
        ]
    )
    s3.put(bucket, "mixed.arrow", ipc(mixed, "file"))
    opened = in_bucket(f"s3://{bucket}/mixed.arrow", storage_options=options)
    with pytest.raises(ValueError, match=r"record batch 1 rows of data\['e'\] of shape \(2,\)"):
        list(Loader(opened, BATCH, shuffle=False))
