"""The columns of a mixture: every source's rows one after the other, per leaf.

The data side of a mixture ([`looptoolkit.mix`][looptoolkit.mix]): the mixed
order hands out rows of these columns, and the Loader gathers them as it
gathers any data. Sources in memory are concatenated once, so that a batch is
one gather per leaf whatever the sources it draws from; memory-mapped and
store sources stay where they are, read through one
[`Concatenated`][looptoolkit.mix._columns.Concatenated] store array that sends
each row to its source.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from looptoolkit.adapters import backend_of
from looptoolkit.ragged._column import Ragged
from looptoolkit.ragged._stored import StoredValues
from looptoolkit.stores import StoreArray

__all__ = ["Concatenated", "concatenate"]


class Concatenated(StoreArray):
    """Several arrays (memmaps or store arrays) read as one, row ``bases[s] + i`` of part ``s``.

    Args:
        parts: the sources' arrays, of one dtype and one row shape.
        path: where the leaf is, for messages.
    """

    kind = "mixture"

    def __init__(self, parts: Sequence[Any], path: str) -> None:
        self.parts = list(parts)
        self.path = path
        sizes = [len(p) for p in self.parts]
        self.bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp)
        first = self.parts[0]
        self.shape = (int(self.bases[-1]), *tuple(first.shape[1:]))
        self.dtype = np.dtype(first.dtype)
        self.chunk_rows = None

    def arrays_read(self, pitch: float | None, offsets: bool) -> Iterator[tuple[Any, float | None]]:
        """The sources' parts, read in place (read advice)."""
        for part in self.parts:
            yield part, pitch

    def _read_part(self, s: int, rows: np.ndarray) -> np.ndarray:
        part = self.parts[s]
        if isinstance(part, StoreArray):
            view = part.view()
            if view is not None:
                return view[rows]
            got = part.gather(rows)
            if got is not None:
                return got
            order = np.argsort(rows, kind="stable")
            ordered = rows[order]
            distinct, inverse = np.unique(ordered, return_inverse=True)
            read = part.read_rows(distinct)[inverse]
            out = np.empty_like(read)
            out[order] = read
            return out
        return np.asarray(part[rows])

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """Rows ``idx`` of the mixture, each read from its source."""
        idx = np.asarray(idx, dtype=np.intp)
        which = np.searchsorted(self.bases, idx, side="right") - 1
        out = np.empty((len(idx), *self.shape[1:]), dtype=self.dtype)
        for s in np.unique(which).tolist():
            where = np.flatnonzero(which == s)
            out[where] = self._read_part(s, idx[where] - self.bases[s])
        return out

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)``: a slice of each source it spans."""
        pieces = []
        s = int(np.searchsorted(self.bases, start, side="right")) - 1
        while start < stop:
            base, end = int(self.bases[s]), int(self.bases[s + 1])
            a, b = start - base, min(stop, end) - base
            part = self.parts[s]
            pieces.append(
                part.read(a, b) if isinstance(part, StoreArray) else np.asarray(part[a:b])
            )
            start, s = base + b, s + 1
        if not pieces:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (sorted, distinct), in that order."""
        return self.gather(rows)


def _stored(values: Any) -> Any:
    """A ragged column's values as a part: a store's values as their store array."""
    return values.array if isinstance(values, StoredValues) else values


def _in_memory(x: Any) -> bool:
    return not isinstance(x, np.memmap | StoreArray)


def _concat_ragged(parts: Sequence[Ragged], path: str) -> Ragged:
    values = concatenate([_stored(p.values) for p in parts], path + ".values")
    if isinstance(values, Concatenated):  # tokens read in place, whole blocks through a cache
        values = StoredValues(values)
    shifts = np.cumsum([0] + [int(p.offsets[-1]) for p in parts[:-1]])
    offsets = np.concatenate(
        [np.asarray(p.offsets[:-1], dtype=np.int64) + d for p, d in zip(parts, shifts, strict=True)]
        + [np.asarray([int(shifts[-1]) + int(parts[-1].offsets[-1])], dtype=np.int64)]
    )
    return Ragged(values, offsets)


def concatenate(parts: Sequence[Any], path: str) -> Any:
    """One leaf of the mixture: the sources' leaves at ``path``, rows one after the other.

    In-memory arrays (NumPy, torch, JAX, tf) are concatenated by their backend; memmaps
    and store arrays are read in place through a
    [`Concatenated`][looptoolkit.mix._columns.Concatenated]; ragged columns get one values
    array and one offsets array.
    """
    if all(isinstance(p, Ragged) for p in parts):
        return _concat_ragged(parts, path)
    if not all(map(_in_memory, parts)):
        return Concatenated(parts, path)
    backend = backend_of(parts[0])
    if backend is None or backend.name == "numpy":
        return np.concatenate([np.asarray(p) for p in parts])
    join = getattr(backend, "concatenate", None)
    if join is None:
        raise TypeError(f"a mixture cannot join {backend.name} arrays at {path}.")
    return join(list(parts))
