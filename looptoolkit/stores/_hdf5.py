"""HDF5 datasets, files and groups (h5py) as Loader data."""

from __future__ import annotations

import os
from typing import Any

import h5py
import numpy as np

from looptoolkit.stores import StoreArray


def wrap(obj: Any, path: str) -> StoreArray | dict[str, Any] | None:
    """A dataset as an [`HDF5Array`][looptoolkit.stores._hdf5.HDF5Array]; a group as a dict."""
    if isinstance(obj, h5py.Dataset):
        return HDF5Array(obj, path)
    if isinstance(obj, h5py.Group):
        if not obj.id.valid:
            raise ValueError(f"`data` cannot hold {path}: its HDF5 file is closed.")
        out: dict[str, Any] = {}
        for name in sorted(obj):
            member = obj.get(name)
            if isinstance(member, h5py.Dataset | h5py.Group):
                out[name] = wrap(member, f"{path}[{name!r}]")
        return out
    return None


def refusal(obj: Any) -> str:
    return (
        f"a {type(obj).__qualname__} from h5py is not a dataset, group or file; "
        "pass an `h5py.Dataset`, `h5py.Group` or `h5py.File`"
    )


class HDF5Array(StoreArray):
    """An HDF5 dataset: its chunks (chunked layout) or fixed blocks (contiguous) are read at once.

    A chunked dataset is read into arrays the Loader owns, one HDF5 read per span of rows. A
    contiguous one stored in the file as plain bytes (no filter, allocated, not
    external) is read through a read-only ``np.memmap`` of those bytes, as a
    ``.npy`` memmap is: a read is a view, a gather reads the rows' pages.

    An h5py handle can be neither pickled nor used across a fork, so this array
    pickles as its file name and dataset name, and a process other than the one
    that made it (a worker, forked or spawned) opens the file itself, read-only.
    """

    kind = "HDF5"

    def __init__(self, dataset: h5py.Dataset, path: str) -> None:
        if not dataset.id.valid:
            raise ValueError(f"`data` cannot hold {path}: its HDF5 file is closed.")
        self.path = path
        self.filename = dataset.file.filename
        self.name = dataset.name
        self.shape = tuple(int(s) for s in dataset.shape)
        dtype = dataset.dtype
        if dtype.kind not in "biufc":
            raise TypeError(
                f"`data` cannot hold {path}: an HDF5 dataset of dtype {dtype} "
                "(the Loader reads numeric and boolean arrays)."
            )
        self.dtype = dtype
        self.chunk_rows = int(dataset.chunks[0]) if dataset.chunks and self.shape else None
        self._dataset: h5py.Dataset | None = dataset
        self._file: h5py.File | None = None
        self._pid = os.getpid()
        # Where the bytes of a plain contiguous dataset start in the file (else None).
        self.offset: int | None = None
        if self.chunk_rows is None and dataset.external is None and self.shape:
            try:
                self.offset = dataset.id.get_offset()
            except (TypeError, ValueError, RuntimeError):  # virtual or unallocated
                self.offset = None
        self._map: np.ndarray | None = None
        # Filters of a chunked dataset whose chunks are whole rows of a native numeric
        # dtype: a chunk whose filters were all skipped (an incompressible chunk under
        # lzf) is its rows' bytes, copied straight into the Loader's array. Else None.
        self.filters: int | None = None
        if (
            self.chunk_rows is not None
            and tuple(dataset.chunks[1:]) == self.shape[1:]
            and dtype.kind in "iuf"
            and dtype.isnative
            and dataset.id.get_type().get_size() == dtype.itemsize
            and hasattr(dataset.id, "get_chunk_info_by_coord")
        ):
            self.filters = dataset.id.get_create_plist().get_nfilters()

    @property
    def mapped(self) -> np.ndarray:
        """The plain contiguous dataset's bytes as a read-only array (a view of a memmap)."""
        if self._map is None:
            assert self.offset is not None
            mapped = np.memmap(
                self.filename, dtype=self.dtype, mode="r", offset=self.offset, shape=self.shape
            )
            self._map = mapped.view(np.ndarray)  # gathers give ndarrays, not memmaps
        return self._map

    @property
    def dataset(self) -> h5py.Dataset:
        """The dataset, opened by this process if it did not make this array."""
        if self._dataset is None or self._pid != os.getpid():
            try:
                self._file = h5py.File(self.filename, "r")
            except OSError as e:
                raise OSError(
                    f"{self.path} cannot be read in process {os.getpid()}: HDF5 could not open "
                    f"{self.filename!r} ({e}). A file open for writing is locked: open it "
                    "read-only (`h5py.File(path, 'r')`) before handing it to the Loader."
                ) from e
            self._dataset = self._file[self.name]
            self._pid = os.getpid()
        dataset = self._dataset
        if not dataset.id.valid:
            raise ValueError(
                f"{self.path} cannot be read: its HDF5 file {self.filename!r} was closed "
                "(keep it open while the Loader reads it)."
            )
        return dataset

    def view(self) -> np.ndarray | None:
        if self.offset is None:
            return None
        self.dataset  # noqa: B018  # raises if the file was closed
        return self.mapped

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_dataset=None, _file=None, _pid=None, _map=None)
        return state

    def length_now(self) -> int:
        return int(self.dataset.shape[0])

    def read(self, start: int, stop: int) -> np.ndarray:
        if self.offset is not None:
            self.dataset  # noqa: B018  # raises if the file was closed
            return self.mapped[start:stop]
        out = np.empty((stop - start, *self.shape[1:]), dtype=self.dtype)
        if stop > start:
            self.read_ranges(np.array([start]), np.array([stop]), out)
        return out

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        if self.offset is not None:
            super().read_ranges(starts, stops, out)
            return
        if not len(out):
            return
        dataset = self.dataset
        if self.filters is not None and out.flags.c_contiguous:
            starts, stops, at = self._read_stored(dataset, starts, stops, out)
        else:
            at = np.concatenate(([0], np.cumsum(stops - starts)[:-1]))
        if not len(starts):
            return
        # One HDF5 read per range, into a contiguous block of rows (HDF5 reads a union
        # of ranges of a compressed dataset several times slower than the ranges alone).
        tail = self.shape[1:]
        zeros = (0,) * len(tail)
        space = dataset.id.get_space()
        target = out if out.flags.c_contiguous else np.empty_like(out, order="C")
        for a, b, o in zip(starts.tolist(), stops.tolist(), at.tolist(), strict=True):
            space.select_hyperslab((a, *zeros), (b - a, *tail))
            rows = target[o : o + b - a]
            dataset.id.read(h5py.h5s.create_simple(rows.shape), space, rows)
        if target is not out:
            out[...] = target

    def _read_stored(
        self, dataset: h5py.Dataset, starts: np.ndarray, stops: np.ndarray, out: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Read the whole chunks of the ranges stored as they are into ``out``.

        Returns:
            The ranges left to read, and where their rows go in ``out``.
        """
        assert self.filters is not None and self.chunk_rows is not None
        unit, row = self.chunk_rows, self.row_bytes
        skipped = (1 << self.filters) - 1  # a chunk's filter mask when none was applied
        flat = out.reshape(-1).view(np.uint8)
        zeros = (0,) * (len(self.shape) - 1)
        rest: list[tuple[int, int, int]] = []  # (start, stop, place in out)
        at = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            for c in range(a // unit * unit, b, unit):
                lo, hi = max(a, c), min(b, c + unit)
                if lo == c and hi == c + unit:  # a whole chunk of the range
                    info = dataset.id.get_chunk_info_by_coord((c, *zeros))
                    if info.filter_mask & skipped == skipped and info.size == unit * row:
                        place = (at + c - a) * row
                        dataset.id.read_direct_chunk(
                            (c, *zeros), out=flat[place : place + info.size]
                        )
                        continue
                if rest and rest[-1][1] == lo:
                    rest[-1] = (rest[-1][0], hi, rest[-1][2])
                else:
                    rest.append((lo, hi, at + lo - a))
            at += b - a
        left = np.array(rest, dtype=np.int64).reshape(-1, 3)
        return left[:, 0], left[:, 1], left[:, 2]

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        if self.offset is not None:
            self.dataset  # noqa: B018  # raises if the file was closed
            return self.mapped.take(rows, axis=0)
        # h5py takes increasing indices only: the reader passes them sorted and distinct.
        return np.asarray(self.dataset[rows])
