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
        # One HDF5 read for all ranges: their union in the file, all of ``out`` in memory
        # (the selection's rows come in file order, the ranges' own order).
        dataset = self.dataset
        space = dataset.id.get_space()
        tail = self.shape[1:]
        zeros = (0,) * len(tail)
        op = h5py.h5s.SELECT_SET
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            space.select_hyperslab((a, *zeros), (b - a, *tail), op=op)
            op = h5py.h5s.SELECT_OR
        target = out if out.flags.c_contiguous else np.empty_like(out, order="C")
        dataset.id.read(h5py.h5s.create_simple(out.shape), space, target)
        if target is not out:
            out[...] = target

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        if self.offset is not None:
            self.dataset  # noqa: B018  # raises if the file was closed
            return self.mapped.take(rows, axis=0)
        # h5py takes increasing indices only: the reader passes them sorted and distinct.
        return np.asarray(self.dataset[rows])
