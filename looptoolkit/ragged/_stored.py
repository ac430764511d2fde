"""Ragged values kept in a chunked store (zarr, HDF5): read whole chunks, through a bounded cache.

A corpus larger than memory as a token array in a store and offsets beside it: the layouts copy
each row's elements from here as slices, and each slice reads the store's chunks it covers, whole,
keeping the last ``cache_chunks`` decoded. With the grouped order (``shuffle="grouped"``) the rows
of a batch come from a few chunks and each chunk is decoded about once per epoch; with a full
shuffle, about once per row that touches it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from looptoolkit.stores import StoreArray

__all__ = ["StoredValues"]

DEFAULT_CACHE_CHUNKS = 64


class StoredValues:
    """The values of a ragged column read from a store, sliced like an array.

    Args:
        array: the store's array, wrapped (``looptoolkit.stores.wrap``).
        cache_chunks: decoded chunks kept (least recently used dropped first).
    """

    def __init__(self, array: StoreArray, cache_chunks: int = DEFAULT_CACHE_CHUNKS) -> None:
        self.array = array
        self.shape = tuple(array.shape)
        self.dtype = np.dtype(array.dtype)
        self.ndim = len(self.shape)
        self.chunk = array.block_rows()
        self.cache_chunks = cache_chunks
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0  # chunks read from the store (decoded) so far

    def arrays_read(self, pitch: float | None, offsets: bool) -> Iterator[tuple[Any, float | None]]:
        """The store's array, read at ``pitch`` bytes a document (read advice)."""
        yield self.array, pitch

    def __len__(self) -> int:
        return self.shape[0]

    def _span(self, key: Any) -> tuple[int, int]:
        """``(start, stop)`` of ``key``, a contiguous slice (what the Loader reads by)."""
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("stored ragged values are read by contiguous slices.")
        start, stop, _ = key.indices(self.shape[0])
        return start, stop

    def _read_chunk(self, c: int) -> np.ndarray:
        start = c * self.chunk
        return np.asarray(self.array.read(start, min(start + self.chunk, self.shape[0])))

    def _chunk(self, c: int) -> np.ndarray:
        """Chunk ``c``, from the chunks kept (least recently used out) or read now."""
        with self._lock:
            found = self._cache.get(c)
            if found is not None:
                self._cache.move_to_end(c)
                return found
        block = self._read_chunk(c)
        with self._lock:
            self.reads += 1
            self._cache[c] = block
            while len(self._cache) > self.cache_chunks:
                self._cache.popitem(last=False)
        return block

    def __getitem__(self, key: Any) -> np.ndarray:
        start, stop = self._span(key)
        if stop <= start:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        first, last = start // self.chunk, (stop - 1) // self.chunk
        if first == last:
            base = first * self.chunk
            return self._chunk(first)[start - base : stop - base]
        parts = []
        for c in range(first, last + 1):
            base = c * self.chunk
            parts.append(
                self._chunk(c)[max(start, base) - base : min(stop, base + self.chunk) - base]
            )
        return np.concatenate(parts)

    def take(self, idx: np.ndarray, axis: int = 0) -> np.ndarray:
        """Elements ``idx`` (a gather through the chunks they fall in)."""
        out = np.empty((len(idx), *self.shape[1:]), dtype=self.dtype)
        chunk = idx // self.chunk
        for c in np.unique(chunk).tolist():
            at = chunk == c
            out[at] = self._chunk(c).take(idx[at] - c * self.chunk, axis=0)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (StoredValues, (self.array, self.cache_chunks))


# A remote column's chunk: the rows whose values take about this many bytes.
REMOTE_CHUNK_BYTES = 1 << 20


class RowChunked(StoredValues):
    """The values of a ragged column in a bucket, read by the byte ranges of whole rows.

    Chunk ``c`` is the values of rows ``c * chunk_rows`` to ``(c + 1) * chunk_rows``
    (about ``REMOTE_CHUNK_BYTES`` of them): one range of the file, fetched ahead of the
    order (``prefetch``) through the file's fetcher. The order's groups are whole chunks
    of rows (``chunk_rows``), so a grouped epoch fetches each range about once.

    Args:
        array: the values' file in the bucket (``looptoolkit.stores._tokens.RemoteFile``).
        offsets: the column's ``n + 1`` offsets (checked by the `Ragged` that holds them).
        chunk_rows: rows per chunk (None: from ``REMOTE_CHUNK_BYTES`` and the mean row).
    """

    def __init__(self, array: Any, offsets: np.ndarray, chunk_rows: int | None = None) -> None:
        super().__init__(array)
        self.file: Any = array  # a RemoteFile: its parts are fetched by byte range
        n = max(0, len(offsets) - 1)
        total = int(offsets[-1]) if len(offsets) else 0
        if chunk_rows is None:
            per_row = total * array.row_bytes / max(1, n)
            chunk_rows = max(1, int(REMOTE_CHUNK_BYTES // max(1.0, per_row)))
        self.chunk_rows = chunk_rows
        self.rows = n
        bounds = np.asarray(offsets[::chunk_rows], dtype=np.int64)
        if n % chunk_rows:
            bounds = np.concatenate((bounds, [total]))
        # Where each chunk's values start, clipped into the file (bad offsets are refused
        # by the Ragged, after this).
        self.bounds = np.clip(bounds, 0, self.shape[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_row_chunked, (self.array, self.chunk_rows, self.rows, self.bounds))

    def _part(self, c: int) -> Any:
        return self.file.part(int(self.bounds[c]), int(self.bounds[c + 1]))

    def _read_chunk(self, c: int) -> np.ndarray:
        (block,) = self.file.take_parts([self._part(c)])
        return block

    def __getitem__(self, key: Any) -> np.ndarray:
        start, stop = self._span(key)
        if stop <= start:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        bounds = self.bounds
        first = int(np.searchsorted(bounds, start, side="right")) - 1
        last = int(np.searchsorted(bounds, stop, side="left")) - 1
        if first == last:
            base = int(bounds[first])
            return self._chunk(first)[start - base : stop - base]
        parts = []
        for c in range(first, last + 1):
            base, end = int(bounds[c]), int(bounds[c + 1])
            if end > base:
                parts.append(self._chunk(c)[max(start, base) - base : min(stop, end) - base])
        return np.concatenate(parts)

    def take(self, idx: np.ndarray, axis: int = 0) -> np.ndarray:
        out = np.empty((len(idx), *self.shape[1:]), dtype=self.dtype)
        chunk = np.searchsorted(self.bounds, idx, side="right") - 1
        for c in np.unique(chunk).tolist():
            at = chunk == c
            out[at] = self._chunk(c).take(idx[at] - self.bounds[c], axis=0)
        return out

    # -- what the Loader's read-ahead asks (``store_reads.announced``), in rows --------------

    def prefetch(self, chunks: Any) -> None:
        """Start fetching the values of row chunks ``chunks``, in that order."""
        self.file.prefetch_parts([self._part(int(c)) for c in np.asarray(chunks).tolist()])

    def ahead_bytes(self) -> int:
        return int(self.file.ahead_bytes())

    def start_pass(self) -> None:
        self.file.start_pass()

    def forget(self) -> None:
        self.file.forget()
        with self._lock:
            self._cache.clear()


def _row_chunked(array: Any, chunk_rows: int, rows: int, bounds: np.ndarray) -> RowChunked:
    """A [`RowChunked`][looptoolkit.ragged._stored.RowChunked] as pickled (its bounds kept)."""
    out = RowChunked.__new__(RowChunked)
    StoredValues.__init__(out, array)
    out.file = array
    out.chunk_rows, out.rows, out.bounds = chunk_rows, rows, bounds
    return out


class RowChunks:
    """A remote column's chunks as ``store_reads.announced`` sees a leaf: rows, not values."""

    def __init__(self, values: RowChunked) -> None:
        self.values = values
        self.chunk_rows = values.chunk_rows
        self.settings = values.file.settings

    def __len__(self) -> int:
        return self.values.rows

    def prefetch(self, chunks: Any) -> None:
        self.values.prefetch(chunks)

    def ahead_bytes(self) -> int:
        return self.values.ahead_bytes()
