"""Parquet files in a bucket: row groups as chunks, each fetched as one byte range.

A Parquet file at ``s3://``, ``gs://`` or ``az://`` ([`bucket`][looptoolkit.stores.bucket]
given its URL) becomes a dict of
[`RemoteParquetColumn`][looptoolkit.stores._parquet.RemoteParquetColumn]s, one per
numeric column read. The file's size and version come from one HEAD (again at each pass),
its footer from one ranged GET; a row group is a chunk of the Loader's reads,
and the bytes of the chosen columns in it (adjacent in the file) are one range,
fetched ahead of the order by a [`Fetcher`][looptoolkit.stores._remote.Fetcher]
shared by the file's columns, and decoded by pyarrow from those bytes alone.
Row groups must have one size (the last may be shorter).
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from looptoolkit.stores import StoreArray
from looptoolkit.stores._arrow import _view, layout_of
from looptoolkit.stores._bucket import Bucket, bucket_at
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings

__all__ = ["RemoteParquetColumn", "parquet_columns"]

# Bytes of the file's end fetched first: the footer, in one request for most files.
FOOTER_GUESS = 1 << 16
# Chosen columns' chunks of a row group this close are fetched as one range (the bytes
# between fetched too); farther apart, as ranges of their own (another column between).
GAP_BYTES = 1 << 12
# A row group's ranges, taken by its first column read, are kept for the file's other
# columns until each has read them (least recently taken out past this many bytes).
KEPT_BYTES = 1 << 28


class _Sparse(io.RawIOBase):
    """A file of ``size`` bytes of which only some ranges are known (for pyarrow to decode)."""

    def __init__(self, size: int, parts: list[tuple[int, bytes]]) -> None:
        self._size, self.parts, self.pos = size, parts, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self.pos, self._size)[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._size - self.pos)
        for start, data in self.parts:
            if start <= self.pos and self.pos + n <= start + len(data):
                at = self.pos - start
                buffer[:n] = data[at : at + n]
                self.pos += n
                return n
        raise OSError(f"bytes {self.pos} to {self.pos + n} of the file were not fetched")


class _Kept:
    """The fetched ranges of row groups, kept for the columns that have not read them yet.

    Without it each column would take its row group's ranges from the fetcher, and
    the ones after the first would find them only while the fetcher's memory of
    recent objects (``RECENT_BYTES``) still holds them: row groups larger than that
    would be fetched once per column.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: OrderedDict[int, tuple[list[tuple[int, bytes]], set[str]]] = OrderedDict()
        self._bytes = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Kept, ())  # pickled empty: what a process keeps is its own

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()
            self._bytes = 0

    def take(
        self, file: Any, chunks: list[int], name: str, columns: list[str]
    ) -> dict[int, list[tuple[int, bytes]]]:
        """The ranges (``(start, bytes)``) of row groups ``chunks`` for column ``name``."""
        out: dict[int, list[tuple[int, bytes]]] = {}
        with self._lock:
            for c in chunks:
                kept = self._groups.get(c)
                if kept is not None and name in kept[1]:
                    kept[1].discard(name)
                    out[c] = kept[0]
                    if not kept[1]:  # every column has read it
                        del self._groups[c]
                        self._bytes -= sum(len(d) for _, d in kept[0])
        missing = [c for c in chunks if c not in out]
        parts = [file.parts(c) for c in missing]
        datas = iter(file.process()[0].take([ref for refs in parts for ref in refs]))
        others = set(columns) - {name}
        for c, refs in zip(missing, parts, strict=True):
            out[c] = [(ref.start, next(datas)) for ref in refs]
            if others:
                with self._lock:
                    if c not in self._groups:
                        self._groups[c] = (out[c], set(others))
                        self._bytes += sum(len(d) for _, d in out[c])
                    while self._bytes > KEPT_BYTES and len(self._groups) > 1:
                        _, (old, _) = self._groups.popitem(last=False)
                        self._bytes -= sum(len(d) for _, d in old)
        return out


class _PerProcess:
    """Keeps a fetcher per process for its ``bucket``, ``settings`` and ``cache``.

    Pickled (to a worker) without it: a process makes its own, and again after a fork.
    """

    bucket: Bucket
    settings: Settings
    cache: Any
    _proc: tuple[int, Fetcher, Counters] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_proc": None}

    def process(self) -> tuple[Fetcher, Counters]:
        """This process's fetcher and counters (made anew after a fork)."""
        proc = self._proc
        if proc is not None and proc[0] == os.getpid():
            return proc[1], proc[2]
        counters = Counters()
        fetcher = Fetcher(self.bucket.get, self.settings, counters, self.cache, self.bucket.where)
        self._proc = (os.getpid(), fetcher, counters)
        return fetcher, counters


class _File(_PerProcess):
    """One Parquet file of a bucket, shared by the columns read from it."""

    def __init__(
        self, bucket: Bucket, key: str, columns: list[str] | None, settings: Settings, cache: Any
    ) -> None:
        self.bucket, self.key, self.settings, self.cache = bucket, key, settings, cache
        self._proc: tuple[int, Fetcher, Counters] | None = None
        self.kept = _Kept()
        self.ref = self._listed()
        self.footer = self._footer()
        import pyarrow.parquet as pq

        self.metadata = pq.read_metadata(_Sparse(self.ref.size, [self.footer]))
        schema = self.metadata.schema.to_arrow_schema()
        self.columns = list(schema.names) if columns is None else list(columns)
        meta = self.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if not sizes or any(s != sizes[0] for s in sizes[:-1]) or sizes[-1] > sizes[0]:
            raise ValueError(
                f"{bucket.url(key)} has row groups of {sorted(set(sizes))} rows; the "
                "Loader reads row groups of one size (the last may be shorter) as chunks."
            )
        self.unit, self.rows = sizes[0], sum(sizes)
        self.schema = schema
        where = [schema.get_field_index(name) for name in self.columns]
        if -1 in where:
            missing = self.columns[where.index(-1)]
            raise ValueError(f"{bucket.url(key)} has no column {missing!r}.")
        leaf = meta.schema
        names = [leaf.column(j).path.split(".")[0] for j in range(meta.num_columns)]
        self.leaf_columns = [j for j, name in enumerate(names) if name in self.columns]

    def _listed(self) -> ObjectRef:
        return self.bucket.head(self.key)

    def _footer(self) -> tuple[int, bytes]:
        """The file's end, holding its footer (``(offset, bytes)``)."""
        fetcher = self.process()[0]
        size = self.ref.size
        start = max(0, size - FOOTER_GUESS)
        data = fetcher.take([ObjectRef(self.ref.key, size - start, self.ref.version, start)])[0]
        length = int.from_bytes(data[-8:-4], "little") + 8
        if length > len(data):  # a footer larger than the guess: fetch the whole of it
            start = size - length
            part = ObjectRef(self.ref.key, length, self.ref.version, start)
            data = fetcher.take([part])[0]
        return start, data

    def relist(self) -> None:
        """Look at the file again (its size and version: a rewritten file is refused)."""
        ref = self._listed()
        self.process()[1].add(requests=1)
        if (ref.size, ref.version) != (self.ref.size, self.ref.version):
            raise RuntimeError(
                f"{self.bucket.url(ref.key)} changed since the Loader was made; "
                "make a new Loader for the new file."
            )

    def objects(self, chunks: Any) -> list[ObjectRef]:
        """The byte ranges of the chosen columns in each row group of ``chunks``."""
        return [ref for chunk in chunks for ref in self.parts(int(chunk))]

    def parts(self, chunk: int) -> list[ObjectRef]:
        """The byte ranges of the chosen columns in row group ``chunk``: adjacent ones as one."""
        group = self.metadata.row_group(chunk)
        spans = []
        for j in self.leaf_columns:
            column = group.column(j)
            start = column.data_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset:
                start = min(start, column.dictionary_page_offset)
            spans.append((start, start + column.total_compressed_size))
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            if merged and a - merged[-1][1] <= GAP_BYTES:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [ObjectRef(self.ref.key, b - a, self.ref.version, a) for a, b in merged]

    def decode(self, chunk: int, name: str, pieces: list[tuple[int, bytes]]) -> np.ndarray:
        """Column ``name`` of row group ``chunk`` from the fetched ``(start, bytes)`` ranges."""
        import pyarrow.parquet as pq

        source = _Sparse(self.ref.size, [*pieces, self.footer])
        table = pq.ParquetFile(source, metadata=self.metadata).read_row_group(chunk, columns=[name])
        return _view(table.column(0).combine_chunks(), name)


class RemoteParquetColumn(StoreArray):
    """One numeric column of a Parquet file in a bucket; its row groups are the chunks."""

    kind = "parquet"
    remote = True

    def __init__(self, file: _File, name: str, path: str) -> None:
        self.file, self.name, self.path = file, name, path
        kind = file.schema.field(name).type
        # Numbers, booleans, and fixed-size lists of them (a vector per row); else TypeError.
        self.dtype, feature = layout_of(kind, path, "Parquet column")
        self.shape = (file.rows, *feature)
        self.chunk_rows = file.unit
        self.settings, self.cache = file.settings, file.cache
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def counters(self) -> Counters:
        """This process's counts of requests and bytes for the file (shared by its columns)."""
        return self.file.process()[1]

    def start_pass(self) -> None:
        self.file.relist()

    def prefetch(self, chunks: Any) -> None:
        """Start fetching row groups ``chunks`` (in that order) ahead of their reads."""
        self.file.process()[0].prefetch(self.file.objects(chunks))

    def ahead_bytes(self) -> int:
        """Bytes asked for ahead and not read yet."""
        return self.file.process()[0].ahead_bytes

    def forget(self) -> None:
        """Drop what was fetched ahead and not read (a pass ended)."""
        self.file.process()[0].forget()
        self.file.kept.clear()

    def _groups(self, chunks: list[int]) -> dict[int, np.ndarray]:
        pieces = self.file.kept.take(self.file, chunks, self.name, self.file.columns)
        return {c: self.file.decode(c, self.name, pieces[c]) for c in chunks}

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.read_one_range(start, stop)

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        unit = self.file.unit
        bounds = list(zip(starts.tolist(), stops.tolist(), strict=True))
        chunks = sorted({c for a, b in bounds for c in range(a // unit, -(-b // unit))})
        with self._lock:
            groups = self._groups(chunks)
        at = 0
        for a, b in bounds:
            for c in range(a // unit, -(-b // unit)):
                lo, hi = max(a, c * unit), min(b, (c + 1) * unit)
                out[at : at + hi - lo] = groups[c][lo - c * unit : hi - c * unit]
                at += hi - lo

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        unit = self.file.unit
        chunk = rows // unit
        with self._lock:
            groups = self._groups(np.unique(chunk).tolist())
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        for c, values in groups.items():
            at = chunk == c
            out[at] = values[rows[at] - c * unit]
        return out


def parquet_columns(
    url: str,
    storage_options: dict[str, Any] | None,
    columns: list[str] | None,
    settings: Settings,
    cache_of: Any,
) -> dict[str, StoreArray]:
    """The numeric columns of the Parquet file at ``url`` (``s3://bucket/key``, ``gs://``, ``az://``).

    Raises:
        ValueError: not a bucket's URL; row groups of several sizes; a column not there.
        TypeError: a column that is not numeric or boolean.
    """
    bucket, key = bucket_at(url, storage_options, "a Parquet file")
    file = _File(bucket, key, columns, settings, cache_of(bucket))
    return {c: RemoteParquetColumn(file, c, f"data[{c!r}]") for c in file.columns}
