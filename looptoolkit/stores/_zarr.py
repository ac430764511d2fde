"""zarr arrays and groups (zarr-python 3, zarr formats 2 and 3) as Loader data."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import zarr

try:  # runs a coroutine on zarr's own event loop, as zarr's synchronous API does
    from zarr.core.sync import sync as _sync
except ImportError:  # pragma: no cover - another zarr layout
    _sync = None

from looptoolkit.stores import StoreArray


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

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        if len(starts) == 1:
            return self.read(int(starts[0]), int(stops[0]))
        if _sync is None:  # zarr without its sync helper: one orthogonal selection
            rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops, strict=True)])
            return self.read_rows(rows)
        # The ranges as slices, read concurrently on zarr's event loop (its chunks
        # fetched and decoded in parallel): faster than an orthogonal selection,
        # which maps every row to its chunk and scatters it.
        array = self.array.async_array
        reads = [
            array.getitem((slice(int(a), int(b)),)) for a, b in zip(starts, stops, strict=True)
        ]
        parts = _sync(_gather(reads))
        return np.concatenate([np.asarray(p) for p in parts])

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.array.get_orthogonal_selection((rows,)))
