"""An array file in a bucket (``.npy``, or raw values of a given dtype): a token file, offsets.

Made by [`bucket`][looptoolkit.stores.bucket] from an ``s3://``, ``gs://`` or ``az://`` address with
``dtype=`` (raw values) or ending in ``.npy``. Opening reads one HEAD (its size
and version) and, for ``.npy``, one GET of its header; nothing else until rows
are read. A [`RemoteFile`][looptoolkit.stores._tokens.RemoteFile] is a
[`StoreArray`][looptoolkit.stores.StoreArray] whose chunks are blocks of
``CHUNK_BYTES`` of rows, fetched ahead of the order as byte ranges of the object
through the [`Fetcher`][looptoolkit.stores._remote.Fetcher]; it is also what a
[`Ragged`][looptoolkit.Ragged] column's values are read from (by byte ranges of
the rows the order needs, ``looptoolkit.ragged._stored``), and ``np.asarray`` of
it fetches the whole file at once (offsets beside a token file).
"""

from __future__ import annotations

import ast
import os
import threading
from typing import Any

import numpy as np

from looptoolkit.stores import StoreArray
from looptoolkit.stores._bucket import Bucket, bucket_at
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings

__all__ = ["RemoteFile", "array_file"]

# Rows per chunk of a file read as rectangular data: this many bytes of them.
CHUNK_BYTES = 1 << 20
# The first GET of a .npy file: its header (a few hundred bytes at most in practice).
HEADER_BYTES = 4096


class RemoteFile(StoreArray):
    """An array stored as one object in a bucket: rows of a fixed shape, one after another.

    Attributes:
        remote: True (the Loader's reads plan fetches ahead for such leaves).
        ref: the object (key, size, version) as opened; a pass that finds it changed raises.
        start: the byte at which the values start (after a ``.npy`` header).
    """

    kind = "file"
    remote = True

    def __init__(
        self,
        bucket: Bucket,
        ref: ObjectRef,
        start: int,
        dtype: np.dtype,
        shape: tuple[int, ...],
        settings: Settings,
        cache: Any,
        path: str,
    ) -> None:
        self.bucket = bucket
        self.ref = ref
        self.start = start
        self.dtype = dtype
        self.shape = shape
        self.settings = settings
        self.cache = cache
        self.path = path
        self.chunk_rows = max(1, CHUNK_BYTES // max(1, self.row_bytes))
        self._proc: tuple[int, Fetcher, Counters] | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_proc": None, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _process(self) -> tuple[Fetcher, Counters]:
        proc = self._proc
        if proc is not None and proc[0] == os.getpid():
            return proc[1], proc[2]
        counters = Counters()
        bucket = self.bucket
        fetcher = Fetcher(bucket.get, self.settings, counters, self.cache, bucket.where)
        self._proc = (os.getpid(), fetcher, counters)
        return fetcher, counters

    @property
    def counters(self) -> Counters:
        """This process's counts of requests and bytes for this file."""
        return self._process()[1]

    def part(self, a: int, b: int) -> ObjectRef:
        """The byte range of rows ``a:b`` as a ref (a part of the object)."""
        width = self.row_bytes
        return ObjectRef(self.ref.key, (b - a) * width, self.ref.version, self.start + a * width)

    def prefetch_parts(self, refs: list[ObjectRef]) -> None:
        """Start fetching ``refs`` (parts of this file), in that order."""
        self._process()[0].prefetch([ref for ref in refs if ref.size])

    def take_parts(self, refs: list[ObjectRef]) -> list[np.ndarray]:
        """The rows of ``refs`` (parts of this file): fetched ahead, or fetched now."""
        nonempty = [ref for ref in refs if ref.size]
        datas = iter(self._process()[0].take(nonempty))
        feature = self.shape[1:]
        return [
            np.frombuffer(next(datas), dtype=self.dtype).reshape(-1, *feature)
            if ref.size
            else np.empty((0, *feature), dtype=self.dtype)
            for ref in refs
        ]

    def start_pass(self) -> None:
        """Check the object is the one opened (one HEAD): a changed file is refused."""
        now = self.bucket.head(self.ref.key)
        self.counters.add(requests=1)
        if (now.size, now.version) != (self.ref.size, self.ref.version):
            raise RuntimeError(
                f"{self.bucket.url(self.ref.key)} changed since the Loader was made; "
                "make a new Loader for the new file."
            )

    def _chunk_parts(self, chunks: Any) -> list[ObjectRef]:
        unit, n = self.chunk_rows or 1, self.shape[0]
        return [
            self.part(c * unit, min((c + 1) * unit, n))
            for c in np.asarray(chunks, dtype=np.int64).tolist()
        ]

    def prefetch(self, chunks: Any) -> None:
        """Start fetching chunks ``chunks`` (blocks of ``chunk_rows`` rows) ahead of their reads."""
        self.prefetch_parts(self._chunk_parts(chunks))

    def ahead_bytes(self) -> int:
        return self._process()[0].ahead_bytes

    def forget(self) -> None:
        if self._proc is not None and self._proc[0] == os.getpid():
            self._proc[1].forget()

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.read_one_range(start, stop)

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        # Whole chunks, as announced ahead (a part of a chunk would be another object).
        unit = self.chunk_rows or 1
        at = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            chunks = list(range(a // unit, -(-b // unit)))
            for c, rows in zip(chunks, self.take_parts(self._chunk_parts(chunks)), strict=True):
                lo = c * unit
                x, y = max(a, lo), min(b, lo + len(rows))
                out[at : at + y - x] = rows[x - lo : y - lo]
                at += y - x

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        unit = self.chunk_rows or 1
        chunk = rows // unit
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        wanted = np.unique(chunk)
        for c, block in zip(
            wanted.tolist(), self.take_parts(self._chunk_parts(wanted)), strict=True
        ):
            at = chunk == c
            out[at] = block.take(rows[at] - c * unit, axis=0)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The whole file, fetched at once (one GET, retried): offsets beside a token file."""
        (whole,) = self.take_parts([self.part(0, self.shape[0])])
        return whole if dtype is None else whole.astype(dtype)


def _npy_header(data: bytes, where: str) -> tuple[np.dtype, tuple[int, ...], int]:
    """The dtype, shape and data offset a ``.npy`` file's first bytes state."""
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{where} is not a .npy file (no magic at its start).")
    major = data[6]
    size_bytes = 2 if major == 1 else 4
    length = int.from_bytes(data[8 : 8 + size_bytes], "little")
    start = 8 + size_bytes + length
    if start > len(data):
        raise ValueError(f"{where} has a .npy header longer than {len(data)} bytes.")
    header = ast.literal_eval(data[8 + size_bytes : start].decode("latin1"))
    if header.get("fortran_order"):
        raise ValueError(f"{where} is a Fortran-ordered .npy file; save it C-ordered.")
    return np.dtype(header["descr"]), tuple(int(s) for s in header["shape"]), start


def array_file(
    url: str,
    storage_options: dict[str, Any] | None,
    columns: Any,
    dtype: Any,
    settings: Settings,
    cache_of: Any,
) -> RemoteFile:
    """The array file at ``url`` (``s3://bucket/key``, ``gs://``, ``az://``): .npy or raw values.

    One HEAD (its size and version) and, for a ``.npy`` file, one GET of its header.

    Raises:
        FileNotFoundError: nothing at ``url``.
        ValueError: not a bucket's URL; ``columns`` (a Parquet file's); a raw file without
            ``dtype``, or whose size is not whole values; a ``dtype`` a ``.npy`` file contradicts.
    """
    bucket, key = bucket_at(url, storage_options, "an array file")
    if columns is not None:
        raise ValueError("`columns` is for a Parquet file's URL, not an array file's.")
    ref = bucket.head(key)
    cache = cache_of(bucket)
    if key.endswith(".npy"):
        fetcher = Fetcher(bucket.get, settings, Counters(), None, bucket.where)
        size = min(ref.size, HEADER_BYTES)
        (first,) = fetcher.take([ObjectRef(ref.key, size, ref.version, 0)])
        found, whole, start = _npy_header(first, url)
        if dtype is not None and np.dtype(dtype) != found:
            raise ValueError(f"`dtype` is {np.dtype(dtype)}, and {url} holds {found}.")
        return RemoteFile(bucket, ref, start, found, whole, settings, cache, url)
    if dtype is None:
        raise ValueError(f"{url} is a raw file: pass its `dtype` (a .npy file states its own).")
    kind = np.dtype(dtype)
    if ref.size % kind.itemsize:
        raise ValueError(f"{url} holds {ref.size} bytes, not whole values of {kind}.")
    return RemoteFile(bucket, ref, 0, kind, (ref.size // kind.itemsize,), settings, cache, url)
