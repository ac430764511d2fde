"""Parquet files (one, or a directory of them: an Arrow dataset) in a bucket, row groups as chunks.

Made by [`bucket`][looptoolkit.stores.bucket] from an ``s3://`` address. At
construction the files are listed (one LIST, or a HEAD for one file: keys,
sizes, versions) and each
file's footer is read once (one ranged GET of its last bytes); the footers say
where every row group's column chunks lie. A
[`ParquetSource`][looptoolkit.stores._parquet.ParquetSource] holds that plan;
each column read is a
[`ParquetColumn`][looptoolkit.stores._parquet.ParquetColumn] leaf, whose chunks
are the rows of the row groups. The byte ranges of a row group's chunks of the
columns read, adjacent ones coalesced, are fetched ahead of the reads through
the [`Fetcher`][looptoolkit.stores._remote.Fetcher] (bounded in flight, retried,
length-checked) and decoded by pyarrow from those bytes alone: a ``ParquetFile``
over a file-like object that holds only the footer and the fetched ranges.

The columns of one row group share its ranges: the first leaf that reads the row
group takes its bytes from the fetcher, and the others find them kept beside the
source until each has read (``KEPT_BYTES`` at most), so a row group is fetched
once for all its columns.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from looptoolkit.stores import StoreArray
from looptoolkit.stores._arrow import _view
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings
from looptoolkit.stores._s3 import S3Bucket, head, split_url

__all__ = ["ParquetColumn", "ParquetSource", "open_parquet"]

# A footer is read with one GET of the file's last TAIL_BYTES (a second one only for a
# footer larger than that: thousands of row groups or columns).
TAIL_BYTES = 1 << 16
# Column chunks of a row group this close are fetched as one range (the bytes between
# them fetched too): fewer requests for a few bytes more.
GAP_BYTES = 1 << 12
# Fetched row groups kept for the source's other columns until each has read them.
KEPT_BYTES = 1 << 28


class _Held(io.RawIOBase):
    """A file of ``size`` bytes of which only ``pieces`` (``(offset, bytes)``) are held.

    What pyarrow reads a row group through: a read outside the pieces is a bug of
    the plan, raised, never served as zeros.
    """

    def __init__(self, size: int, pieces: list[tuple[int, bytes]], where: str) -> None:
        self._size, self._pieces, self._where, self._pos = size, pieces, where, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n, at = len(buffer), self._pos
        n = min(n, self._size - at)
        if n <= 0:
            return 0
        for offset, data in self._pieces:
            if offset <= at and at + n <= offset + len(data):
                buffer[:n] = memoryview(data)[at - offset : at - offset + n]
                self._pos += n
                return n
        raise OSError(f"{self._where}: bytes {at}:{at + n} were not fetched.")


def _footer(tail: bytes, size: int, where: str) -> int:
    """The length of the footer (metadata, its length and the magic) that ``tail`` ends with."""
    if size < 12 or tail[-4:] != b"PAR1":
        raise ValueError(f"{where} is not a Parquet file (no PAR1 at its end).")
    return int.from_bytes(tail[-8:-4], "little") + 8


def _dtype_of(kind: pa.DataType, path: str) -> tuple[np.dtype, tuple[int, ...]]:
    """The NumPy dtype and row shape of an Arrow type (fixed-width numbers, fixed-size lists)."""
    shape: list[int] = []
    while pa.types.is_fixed_size_list(kind):
        shape.append(kind.list_size)
        kind = kind.value_type
    if pa.types.is_boolean(kind):
        return np.dtype(bool), tuple(shape)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind):
        return np.dtype(kind.to_pandas_dtype()), tuple(shape)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        raise TypeError(
            f"`data` cannot hold {path}: a Parquet column of variable-length lists ({kind}); "
            "a column of vectors of one length is read when written as a fixed-size list "
            "(`pa.list_(type, size)`), and token rows as a token file "
            "(`looptoolkit.stores.bucket(values_url, offsets=...)`)."
        )
    raise TypeError(
        f"`data` cannot hold {path}: a Parquet column of type {kind} "
        "(the Loader reads numbers, booleans and fixed-size lists of them)."
    )


class ParquetSource:
    """Parquet files in a bucket, as a plan: where each row group's column chunks lie.

    Args:
        bucket: the bucket and how to reach it.
        files: the files, in order (the dataset's rows are theirs one after another).
        tails: each file's last bytes, its footer among them.
        columns: the columns read (None: every column).
        settings: the fetches' bounds and retry policy.
        cache: a disk cache (``DiskCache``) for the fetched ranges, or None.
        where: the address for messages (``s3://bucket/key``, never credentials).
    """

    def __init__(
        self,
        bucket: S3Bucket,
        files: list[ObjectRef],
        tails: list[bytes],
        columns: list[str] | None,
        settings: Settings,
        cache: Any,
        where: str,
    ) -> None:
        self.bucket = bucket
        self.files = files
        self.tails = tails
        self.settings = settings
        self.cache = cache
        self.where = where
        self._parse()
        schema = self.metadata[0].schema.to_arrow_schema()
        names = schema.names if columns is None else list(columns)
        missing = [c for c in names if c not in schema.names]
        if missing:
            raise ValueError(
                f"{where} has no column {missing[0]!r}; its columns are {', '.join(schema.names)}."
            )
        for md, ref in zip(self.metadata, files, strict=True):
            other = md.schema.to_arrow_schema()
            for name in names:
                if name not in other.names or other.field(name).type != schema.field(name).type:
                    raise ValueError(
                        f"s3://{bucket.bucket}/{ref.key} does not have the column {name!r} "
                        f"of type {schema.field(name).type} that the first file has."
                    )
        self.columns = names
        self.types = {name: schema.field(name).type for name in names}
        # Row groups of all files, in order: (file, row group in the file).
        self.groups = [
            (f, g) for f, md in enumerate(self.metadata) for g in range(md.num_row_groups)
        ]
        rows = [self.metadata[f].row_group(g).num_rows for f, g in self.groups]
        self.starts = np.concatenate(([0], np.cumsum(rows, dtype=np.int64)))
        self.n = int(self.starts[-1])
        self.unit = max(1, max(rows, default=1))
        self.refs = [self._ranges(f, g) for f, g in self.groups]
        self._proc: tuple[int, Fetcher, Counters] | None = None
        self._kept: OrderedDict[int, tuple[list[tuple[int, bytes]], set[str]]] = OrderedDict()
        self._kept_bytes = 0
        self._lock = threading.Lock()

    def _parse(self) -> None:
        self.metadata = []
        for tail in self.tails:
            self.metadata.append(pq.read_metadata(pa.BufferReader(tail)))
        self._tail_at = [
            ref.size - len(tail) for ref, tail in zip(self.files, self.tails, strict=True)
        ]

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "_proc": None, "_kept": OrderedDict(), "_kept_bytes": 0}
        del state["_lock"], state["metadata"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._parse()

    def _ranges(self, f: int, g: int) -> list[ObjectRef]:
        """The byte ranges of row group ``g`` of file ``f`` that the columns read, coalesced."""
        group = self.metadata[f].row_group(g)
        spans = []
        for i in range(group.num_columns):
            column = group.column(i)
            if column.path_in_schema.partition(".")[0] not in self.columns:
                continue
            start = column.data_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset is not None:
                start = min(start, column.dictionary_page_offset)
            spans.append((start, start + column.total_compressed_size))
        spans.sort()
        merged: list[list[int]] = []
        for a, b in spans:
            if merged and a - merged[-1][1] <= GAP_BYTES:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        ref = self.files[f]
        return [ObjectRef(ref.key, b - a, ref.version, a) for a, b in merged]

    def process(self) -> tuple[Fetcher, Counters]:
        """This process's fetcher and counters (made anew after a fork or in a worker)."""
        proc = self._proc
        if proc is not None and proc[0] == os.getpid():
            return proc[1], proc[2]
        counters = Counters()
        fetcher = Fetcher(self.bucket.get, self.settings, counters, self.cache, self.bucket.where)
        self._proc = (os.getpid(), fetcher, counters)
        with self._lock:
            self._kept.clear()
            self._kept_bytes = 0
        return fetcher, counters

    def start_pass(self) -> None:
        """List the files once (a pass starts): a file that changed is refused, not misread."""
        _, counters = self.process()
        _, key = split_url(self.where)
        if len(self.files) == 1 and self.files[0].key == key:  # one file: its HEAD
            found = head(self.bucket, key)
            listed = {} if found is None else {found.key: found}
        else:
            listed = {ref.key: ref for ref in _files(self.bucket, key)}
        counters.add(requests=max(1, -(-len(listed) // 1000)))
        for ref in self.files:
            now = listed.get(ref.key)
            if now is None or now.size != ref.size or now.version != ref.version:
                raise RuntimeError(
                    f"s3://{self.bucket.bucket}/{ref.key} changed under the Loader (it is "
                    f"{'gone' if now is None else 'another version'}); make a new Loader "
                    "(`looptoolkit.stores.bucket(...)` again) for the new data."
                )

    def groups_of(self, chunks: Any) -> list[int]:
        """The row groups holding rows of the order's chunks ``chunks`` (``unit`` rows each)."""
        out: list[int] = []
        starts, unit = self.starts, self.unit
        for c in np.asarray(chunks, dtype=np.int64).tolist():
            a = int(np.searchsorted(starts, c * unit, side="right")) - 1
            b = int(np.searchsorted(starts, min((c + 1) * unit, self.n), side="left"))
            out.extend(range(a, b))
        return list(dict.fromkeys(out))

    def prefetch(self, chunks: Any) -> None:
        """Start fetching the ranges of the order's chunks ``chunks``, in that order."""
        fetcher = self.process()[0]
        fetcher.prefetch([ref for g in self.groups_of(chunks) for ref in self.refs[g]])

    def ahead_bytes(self) -> int:
        return self.process()[0].ahead_bytes

    def forget(self) -> None:
        """Drop what was fetched ahead and not read (a pass ended)."""
        if self._proc is not None and self._proc[0] == os.getpid():
            self._proc[1].forget()
        with self._lock:
            self._kept.clear()
            self._kept_bytes = 0

    def _pieces(self, g: int, name: str) -> list[tuple[int, bytes]]:
        """The fetched ranges of row group ``g``, for column ``name``."""
        with self._lock:
            kept = self._kept.get(g)
            if kept is not None:
                kept[1].discard(name)
                if not kept[1]:  # every column has read it
                    del self._kept[g]
                    self._kept_bytes -= sum(len(d) for _, d in kept[0])
                return kept[0]
        refs = self.refs[g]
        datas = self.process()[0].take(refs)
        pieces = [(ref.offset, data) for ref, data in zip(refs, datas, strict=True)]
        others = set(self.columns) - {name}
        if others:
            with self._lock:
                if g not in self._kept:
                    self._kept[g] = (pieces, others)
                    self._kept_bytes += sum(map(len, datas))
                while self._kept_bytes > KEPT_BYTES and len(self._kept) > 1:
                    _, (old, _) = self._kept.popitem(last=False)
                    self._kept_bytes -= sum(len(d) for _, d in old)
        return pieces

    def decode(self, g: int, name: str) -> pa.Array:
        """Column ``name`` of row group ``g``, decoded from its fetched bytes."""
        f, local = self.groups[g]
        ref = self.files[f]
        pieces = [*self._pieces(g, name), (self._tail_at[f], self.tails[f])]
        where = f"s3://{self.bucket.bucket}/{ref.key}"
        held = pa.PythonFile(_Held(ref.size, pieces, where), mode="r")
        table = pq.ParquetFile(held, metadata=self.metadata[f]).read_row_group(
            local, columns=[name]
        )
        return table.column(0).combine_chunks()


class ParquetColumn(StoreArray):
    """One column of Parquet files in a bucket; its chunks are the rows of row groups.

    Attributes:
        remote: True (the Loader's reads plan fetches ahead for such leaves).
        source: the files' plan, shared by the columns read from them.
    """

    kind = "Parquet"
    remote = True

    def __init__(self, source: ParquetSource, name: str, path: str, lists: bool) -> None:
        self.source = source
        self.name = name
        self.path = path
        self.lists = lists  # this leaf lists the files at the start of a pass (one per source)
        dtype, shape = _dtype_of(source.types[name], path)
        self.dtype = dtype
        self.shape = (source.n, *shape)
        self.chunk_rows = source.unit

    @property
    def settings(self) -> Settings:
        return self.source.settings

    @property
    def cache(self) -> Any:
        return self.source.cache

    @property
    def counters(self) -> Counters:
        """This process's counts of requests and bytes (for the whole source: count it once)."""
        return self.source.process()[1] if self.lists else Counters()

    def start_pass(self) -> None:
        if self.lists:
            self.source.start_pass()

    def prefetch(self, chunks: Any) -> None:
        self.source.prefetch(chunks)

    def ahead_bytes(self) -> int:
        return self.source.ahead_bytes()

    def forget(self) -> None:
        self.source.forget()

    def transient_bytes(self) -> int:
        return 2 * self.source.unit * self.row_bytes

    def _group(self, g: int) -> np.ndarray:
        return _view(self.source.decode(g, self.name), self.path)

    def read(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((max(0, stop - start), *self.shape[1:]), dtype=self.dtype)
        if stop > start:
            self.read_ranges(np.array([start]), np.array([stop]), out)
        return out

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        bounds = self.source.starts
        at = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            first = int(np.searchsorted(bounds, a, side="right")) - 1
            last = int(np.searchsorted(bounds, b, side="left"))
            for g in range(first, last):
                lo, hi = int(bounds[g]), int(bounds[g + 1])
                x, y = max(a, lo), min(b, hi)
                out[at : at + y - x] = self._group(g)[x - lo : y - lo]
                at += y - x

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        bounds = self.source.starts
        group = np.searchsorted(bounds, rows, side="right") - 1
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        for g in np.unique(group).tolist():
            at = group == g
            out[at] = self._group(g).take(rows[at] - bounds[g], axis=0)
        return out


def _files(bucket: S3Bucket, key: str) -> list[ObjectRef]:
    """The Parquet files at ``key``: those under it (a LIST), else the object itself (a HEAD)."""
    listed = bucket.list(key) if key else bucket.list("")
    files = sorted((ref for ref in listed if ref.key.endswith(".parquet")), key=lambda ref: ref.key)
    if files or not key:
        return files
    found = head(bucket, key)
    return [] if found is None else [found]


def open_parquet(
    url: str,
    bucket: S3Bucket,
    columns: list[str] | None,
    settings: Settings,
    cache_of: Any,
) -> dict[str, ParquetColumn]:
    """The columns of the Parquet file (or directory of files) at ``url``, as leaves.

    One LIST (the files' sizes and versions) and one GET of each file's last bytes
    (its footer); nothing else is read until the Loader reads rows.

    Raises:
        FileNotFoundError: nothing at ``url``.
        ValueError: not Parquet; files whose columns differ; a column not there.
        TypeError: a column the Loader does not read (its type named).
    """
    _, key = split_url(url)
    files = _files(bucket, key)
    if not files:
        raise FileNotFoundError(f"{url}: no Parquet file there (nor *.parquet under it).")
    cache = cache_of(bucket.where)
    counters = Counters()
    fetcher = Fetcher(bucket.get, settings, counters, None, bucket.where)
    tails_refs = [
        ObjectRef(
            ref.key, min(ref.size, TAIL_BYTES), ref.version, ref.size - min(ref.size, TAIL_BYTES)
        )
        for ref in files
    ]
    tails = fetcher.take(tails_refs)
    for i, (ref, tail) in enumerate(zip(files, tails, strict=True)):
        need = _footer(tail, ref.size, f"s3://{bucket.bucket}/{ref.key}")
        if need > len(tail):  # a footer larger than the tail read: the rest of it
            (tails[i],) = fetcher.take([ObjectRef(ref.key, need, ref.version, ref.size - need)])
    source = ParquetSource(bucket, files, tails, columns, settings, cache, url)
    return {
        name: ParquetColumn(source, name, f"data[{name!r}]", lists=(i == 0))
        for i, name in enumerate(source.columns)
    }
