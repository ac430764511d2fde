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

    def _chunk(self, c: int) -> np.ndarray:
        with self._lock:
            found = self._cache.get(c)
            if found is not None:
                self._cache.move_to_end(c)
                return found
        start = c * self.chunk
        block = np.asarray(self.array.read(start, min(start + self.chunk, self.shape[0])))
        with self._lock:
            self.reads += 1
            self._cache[c] = block
            while len(self._cache) > self.cache_chunks:
                self._cache.popitem(last=False)
        return block

    def __getitem__(self, key: Any) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("stored ragged values are read by contiguous slices.")
        start, stop, _ = key.indices(self.shape[0])
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
