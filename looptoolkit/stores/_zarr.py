"""zarr arrays and groups (zarr-python 3, zarr formats 2 and 3) as Loader data."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import zarr

from looptoolkit.stores import StoreArray

_sync: Any
_nd: Any
try:  # runs a coroutine on zarr's own event loop, as zarr's synchronous API does
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync as _sync

    _nd = default_buffer_prototype().nd_buffer  # wraps an array zarr decodes into
except ImportError:  # pragma: no cover - another zarr layout
    _sync = _nd = None


def wrap(obj: Any, path: str) -> StoreArray | dict[str, Any] | None:
    """A zarr array as a [`ZarrArray`][looptoolkit.stores._zarr.ZarrArray]; a group as a dict."""
    if isinstance(obj, zarr.Array):
        return ZarrArray(obj, path)
    if isinstance(obj, zarr.Group):
        members = dict(obj.members())
        return {name: wrap(members[name], f"{path}[{name!r}]") for name in sorted(members)}
    return None


def refusal(obj: Any) -> str:
    return (
        f"a {type(obj).__qualname__} from zarr is not an array or a group; "
        "pass a `zarr.Array` or a `zarr.Group`"
    )


# Ranges read concurrently in one wave (zarr decodes their chunks in parallel).
_WAVE = 4


async def _gather(reads: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*reads))


class ZarrArray(StoreArray):
    """A zarr array: its chunks (or shards, when sharded) are the blocks read at once.

    Reads of several ranges are one orthogonal selection, whose chunks zarr
    fetches and decodes concurrently. The array pickles as zarr arrays do (its
    store and path), so each worker process reads through its own handle.
    """

    kind = "zarr"

    def __init__(self, array: zarr.Array, path: str) -> None:
        self.array = array
        self.path = path
        self.shape = tuple(int(s) for s in array.shape)
        dtype = array.dtype
        if not isinstance(dtype, np.dtype) or dtype.kind not in "biufcmM":
            raise TypeError(
                f"`data` cannot hold {path}: a zarr array of dtype {dtype} "
                "(the Loader reads numeric and boolean arrays)."
            )
        self.dtype = dtype
        if self.shape:
            layout = array.shards or array.chunks
            self.chunk_rows = int(layout[0])

    def length_now(self) -> int:
        return int(self.array.shape[0])

    def read(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.array[start:stop])

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        if _sync is None or not out.flags.c_contiguous:
            super().read_ranges(starts, stops, out)
            return
        # Up to _WAVE ranges at a time, as slices read concurrently on zarr's event
        # loop (the chunks of each fetched and decoded in parallel) straight into
        # their place in `out`: no buffer of the whole range besides `out`.
        array = self.array.async_array
        bounds = list(zip(starts.tolist(), stops.tolist(), strict=True))
        at = 0
        for w in range(0, len(bounds), _WAVE):
            reads = []
            for a, b in bounds[w : w + _WAVE]:
                into = _nd.from_numpy_array(out[at : at + b - a])
                reads.append(array.get_orthogonal_selection((slice(a, b),), out=into))
                at += b - a
            _sync(_gather(reads))

    def transient_bytes(self) -> int:
        # A wave's chunks as stored, as decoded and in zarr's buffers between
        # (four copies of each, measured with tracemalloc).
        return 4 * _WAVE * (self.chunk_rows or 1) * self.row_bytes

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.array.get_orthogonal_selection((rows,)))
