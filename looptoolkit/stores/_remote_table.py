"""Tables in a bucket read chunk by chunk: what Parquet and Arrow IPC files share.

A table file of a bucket (a Parquet file, an Arrow IPC file or stream) is one
object shared by the columns read from it: it knows its chunks (row groups,
record batches), the byte ranges of the chosen columns in each, and decodes a
column of a chunk from those bytes alone. The columns are
[`RemoteColumn`][looptoolkit.stores._remote_table.RemoteColumn]s, reading
through the file's [`Fetcher`][looptoolkit.stores._remote.Fetcher] (one per
process); a directory of such files is one table
([`Files`][looptoolkit.stores._remote_table.Files]) read as one file.

A file has chunks of ``unit`` rows, the last maybe shorter, so the Loader's
chunk ``k`` (rows ``k * unit`` to ``(k + 1) * unit``) is the file's chunk ``k``.
A table of several files whose chunks do not line up with ``unit`` (a file
ending in a short chunk before another file) is read all the same: a Loader
chunk is then the one or two of the files' chunks holding its rows.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from looptoolkit.stores import StoreArray
from looptoolkit.stores._arrow import layout_of
from looptoolkit.stores._bucket import Bucket
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings

__all__ = ["Files", "Kept", "PerProcess", "RemoteColumn", "Sparse"]

# A chunk's ranges, taken by its first column read, are kept for the file's other
# columns until each has read them (least recently taken out past this many bytes).
KEPT_BYTES = 1 << 28


class Sparse(io.RawIOBase):
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


class Kept:
    """The fetched ranges of chunks, kept for the columns that have not read them yet.

    Without it each column would take its chunk's ranges from the fetcher, and
    the ones after the first would find them only while the fetcher's memory of
    recent objects (``RECENT_BYTES``) still holds them: chunks larger than that
    would be fetched once per column.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: OrderedDict[int, tuple[list[tuple[int, bytes]], set[str]]] = OrderedDict()
        self._bytes = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (Kept, ())  # pickled empty: what a process keeps is its own

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()
            self._bytes = 0

    def take(
        self, file: Any, chunks: list[int], name: str, columns: list[str]
    ) -> dict[int, list[tuple[int, bytes]]]:
        """The ranges (``(start, bytes)``) of chunks ``chunks`` for column ``name``."""
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


class PerProcess:
    """Keeps a fetcher per process for its ``bucket``, ``settings`` and ``cache``.

    Pickled (to a worker) without it: a process makes its own, and again after a fork.
    """

    bucket: Bucket
    settings: Settings
    cache: Any
    key: str  # a file's key and its object as first seen (a directory relists its own way)
    ref: ObjectRef
    _proc: tuple[int, Fetcher, Counters] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_proc": None, "_looking": None}

    _looking: Any = None  # the pass's look at the file(s), on its way (`start_looking`)

    def start_looking(self) -> None:
        """Send the pass's look at the file(s) (`relist`) and return.

        The fetches go out meanwhile; a read waits for it (`looked`) before it decodes.
        """
        self._looking = self.process()[0].listing(self.relist)

    def looked(self) -> None:
        """Wait for the pass's look (raising what it raised: a file changed since)."""
        looking = self._looking
        if looking is not None:
            looking.result()

    def process(self) -> tuple[Fetcher, Counters]:
        """This process's fetcher and counters (made anew after a fork)."""
        proc = self._proc
        if proc is not None and proc[0] == os.getpid():
            return proc[1], proc[2]
        counters = Counters()
        fetcher = Fetcher(self.bucket.get, self.settings, counters, self.cache, self.bucket.where)
        self._proc = (os.getpid(), fetcher, counters)
        return fetcher, counters

    def relist(self) -> None:
        """Look at the file (``key``) again: its size and version (a rewritten file is refused)."""
        ref = self.bucket.head(self.key)
        self.process()[1].add(requests=1)
        if (ref.size, ref.version) != (self.ref.size, self.ref.version):
            raise RuntimeError(
                f"{self.bucket.url(ref.key)} changed since the Loader was made; "
                "make a new Loader for the new file."
            )

    def objects(self, chunks: Any) -> list[ObjectRef]:
        """The byte ranges of the chosen columns in each of the file's chunks ``chunks``."""
        return [ref for chunk in chunks for ref in self.parts(int(chunk))]

    def parts(self, chunk: int) -> list[ObjectRef]:
        raise NotImplementedError


class Files(PerProcess):
    """The files of a directory as one file of chunks (what the columns read through).

    Args:
        bucket: the bucket.
        prefix: the directory's key (listed again at each pass).
        files: its files, in the table's order (each with ``schema``, ``columns``,
            ``unit``, ``rows``, ``starts``, ``parts``, ``decode``, ``key``, ``ref`` and
            ``chunk_name``, what its chunks are called in messages).
        settings: how chunks are fetched.
        cache: a disk cache, or None.
        whole: every file but the last must hold whole chunks of ``unit`` rows (else
            each file's last chunk may be shorter).
    """

    def __init__(
        self,
        bucket: Bucket,
        prefix: str,
        files: list[Any],
        settings: Settings,
        cache: Any,
        *,
        whole: bool,
    ) -> None:
        self.bucket, self.prefix, self.settings, self.cache = bucket, prefix, settings, cache
        self.files = files
        first = files[0]
        self.schema, self.columns, self.unit = first.schema, first.columns, first.unit
        where, chunks = bucket.url(""), first.chunk_name
        for file in files[1:]:
            for name in self.columns:
                if file.schema.get_field_index(name) == -1 or not file.schema.field(
                    name
                ).type.equals(first.schema.field(name).type):
                    raise ValueError(
                        f"{where}{file.key} has no column {name!r} of type "
                        f"{first.schema.field(name).type}, which {where}{first.key} has: a "
                        "dataset's files share their columns."
                    )
        for file in files[:-1] if whole else []:
            if file.unit != self.unit or file.rows % self.unit:
                raise ValueError(
                    f"{where}{file.key} has {file.rows} rows in {chunks} of {file.unit}; the "
                    f"Loader reads a dataset's {chunks} as chunks of one size ({self.unit} rows, "
                    f"as the first file's): every file but the last holds whole {chunks} of "
                    "that size."
                )
        for file in files:
            # A file of one chunk may hold fewer rows; of more, its first is the unit.
            if file.unit > self.unit or (file.unit < self.unit and len(file.starts) > 2):
                raise ValueError(
                    f"{where}{file.key} has {chunks} of {file.unit} rows where {first.key} has "
                    f"{self.unit}; the Loader reads a dataset's {chunks} as chunks of one size "
                    "(the last may be shorter)."
                )
        firsts = np.cumsum([0] + [len(file.starts) - 1 for file in files])
        self.first_chunk = firsts
        offsets = np.cumsum([0] + [file.rows for file in files])
        self.starts = np.concatenate(
            [file.starts[:-1] + offsets[i] for i, file in enumerate(files)] + [offsets[-1:]]
        )
        self.rows = int(offsets[-1])
        self._proc: tuple[int, Fetcher, Counters] | None = None
        self.kept = Kept()

    def relist(self) -> None:
        """List the files again (one LIST): one rewritten or gone since is refused."""
        listed = {ref.key: ref for ref in self.bucket.list(self.prefix)}
        self.process()[1].add(requests=max(1, -(-len(listed) // 1000)))
        for file in self.files:
            now = listed.get(file.key)
            if now is None or (now.size, now.version) != (file.ref.size, file.ref.version):
                raise RuntimeError(
                    f"{self.bucket.url(file.key)} changed since the Loader was made; "
                    "make a new Loader for the new files."
                )

    def _locate(self, chunk: int) -> tuple[Any, int]:
        f = int(np.searchsorted(self.first_chunk, chunk, side="right")) - 1
        return self.files[f], chunk - int(self.first_chunk[f])

    def parts(self, chunk: int) -> list[ObjectRef]:
        file, inner = self._locate(chunk)
        return list(file.parts(inner))

    def decode(self, chunk: int, name: str, pieces: list[tuple[int, bytes]]) -> np.ndarray:
        file, inner = self._locate(chunk)
        return np.asarray(file.decode(inner, name, pieces))

    def probe(self, name: str, path: str) -> tuple[np.dtype, tuple[int, ...]] | None:
        """The dtype and row shape of column ``name`` from the first file's first chunk."""
        first = self.files[0]
        found = first.probe(name, path) if hasattr(first, "probe") else None
        if found is not None:
            for file in self.files[1:]:
                file.features[name] = found[1]  # every file's batches are checked against it
        return found


class RemoteColumn(StoreArray):
    """One column of a table file (or directory) in a bucket, read by the file's chunks.

    Its ``chunk_rows`` is the file's ``unit``; the file's chunks start at rows
    ``file.starts`` (``unit`` apart within a file).
    """

    kind = "table"
    what = "column"  # for the message refusing a column's type
    remote = True

    def __init__(self, file: Any, name: str, path: str) -> None:
        self.file, self.name, self.path = file, name, path
        kind = file.schema.field(name).type
        # Numbers, booleans, and fixed-size lists of them (a vector per row); else TypeError,
        # unless the file can tell the row shape from its first chunk (lists of one length).
        try:
            self.dtype, feature = layout_of(kind, path, self.what)
        except TypeError:
            found = file.probe(name, path) if hasattr(file, "probe") else None
            if found is None:
                raise
            self.dtype, feature = found
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
        self.file.start_looking()

    def _chunks_of(self, lo: np.ndarray, hi: np.ndarray) -> list[int]:
        """The file's chunks holding rows ``lo[i]`` to ``hi[i] - 1``, in order of first use."""
        starts = self.file.starts
        first = np.searchsorted(starts, lo, side="right") - 1
        last = np.searchsorted(starts, np.maximum(lo, hi - 1), side="right") - 1
        pairs = zip(first.tolist(), last.tolist(), strict=True)
        return list(dict.fromkeys(c for a, b in pairs for c in range(a, b + 1)))

    def prefetch(self, chunks: Any) -> None:
        """Start fetching the Loader's chunks ``chunks`` (in that order) ahead of their reads."""
        unit, rows = self.file.unit, self.file.rows
        lo = np.asarray(chunks, dtype=np.int64) * unit
        mine = self._chunks_of(lo, np.minimum(lo + unit, rows))
        self.file.process()[0].prefetch(self.file.objects(mine))

    def ahead_bytes(self) -> int:
        """Bytes asked for ahead and not read yet."""
        return self.file.process()[0].ahead_bytes

    def forget(self) -> None:
        """Drop what was fetched ahead and not read (a pass ended)."""
        self.file.process()[0].forget()
        self.file.kept.clear()

    def _groups(self, chunks: list[int]) -> dict[int, np.ndarray]:
        self.file.looked()  # a file changed since is refused before anything is decoded
        pieces = self.file.kept.take(self.file, chunks, self.name, self.file.columns)
        return {c: self.file.decode(c, self.name, pieces[c]) for c in chunks}

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.read_one_range(start, stop)

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        at_row = self.file.starts
        chunks = sorted(self._chunks_of(np.asarray(starts), np.asarray(stops)))
        with self._lock:
            groups = self._groups(chunks)
        at = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            c = int(np.searchsorted(at_row, a, side="right")) - 1
            while a < b:
                base, end = int(at_row[c]), int(at_row[c + 1])
                hi = min(b, end)
                out[at : at + hi - a] = groups[c][a - base : hi - base]
                at += hi - a
                a, c = hi, c + 1

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        at_row = self.file.starts
        chunk = np.searchsorted(at_row, rows, side="right") - 1
        with self._lock:
            groups = self._groups(np.unique(chunk).tolist())
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        for c, values in groups.items():
            at = chunk == c
            out[at] = values[rows[at] - at_row[c]]
        return out
