"""HDF5 datasets, files and groups (h5py) as Loader data."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h5py
import numpy as np

from looptoolkit.stores import StoreArray, _done


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
        # Where such chunks lie in the file: chunk -> (file offset, bytes, filter mask).
        self._stored: dict[int, tuple[int, int, int]] = {}
        # HDF5's descriptor of the file once checked (`_descriptor`), to read stored
        # chunks with `os.preadv`: no GIL held, a run of chunks in one call. None
        # before the first read, False where the file cannot be read that way.
        self._fd: int | bool | None = None
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
            self._stored = {}  # the file opened by name may not be the one read before
            self._fd = None
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
        state.update(_dataset=None, _file=None, _pid=None, _map=None, _fd=None)
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

    def reads_later(self) -> bool:
        # Chunks stored as they are, read from the file directly once that was checked.
        return (
            self.offset is None
            and self.filters is not None
            and type(self._fd) is int
            and self._pid == os.getpid()
        )

    def read_ranges_later(
        self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray
    ) -> Callable[[], None]:
        """The chunks stored as they are read in a background thread; the rest now."""
        later: list[tuple[int, np.ndarray, int]] = []
        self._ranges(starts, stops, out, later)
        if not later:
            return _done
        return _reader().submit(_pread_all, later, self.filename).result

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        self._ranges(starts, stops, out, None)

    def _ranges(
        self,
        starts: np.ndarray,
        stops: np.ndarray,
        out: np.ndarray,
        later: list[tuple[int, np.ndarray, int]] | None,
    ) -> None:
        """Read the ranges into ``out``; direct file reads go to ``later`` where it is a list."""
        if self.offset is not None:
            super().read_ranges(starts, stops, out)
            return
        if not len(out):
            return
        dataset = self.dataset
        if self.filters is not None and out.flags.c_contiguous:
            starts, stops, at = self._read_stored(dataset, starts, stops, out, later)
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
        self,
        dataset: h5py.Dataset,
        starts: np.ndarray,
        stops: np.ndarray,
        out: np.ndarray,
        later: list[tuple[int, np.ndarray, int]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Read the whole chunks of the ranges stored as they are into ``out``.

        Chunks next to each other in the file and in ``out`` are read in one
        ``os.preadv`` (without the GIL) where the file can be read directly, else
        one ``read_direct_chunk`` each. ``later``: a list that takes the direct reads
        ``(descriptor, bytes of out, offset)`` to make, instead of making them.

        Returns:
            The ranges left to read, and where their rows go in ``out``.
        """
        assert self.filters is not None and self.chunk_rows is not None
        unit, row = self.chunk_rows, self.row_bytes
        skipped = (1 << self.filters) - 1  # a chunk's filter mask when none was applied
        flat = out.reshape(-1).view(np.uint8)
        rest: list[tuple[int, int, int]] = []  # (start, stop, place in out)
        runs: list[tuple[int, int, int, list[int]]] = []  # (file offset, place, bytes, chunks)
        at = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            for c in range(a // unit * unit, b, unit):
                lo, hi = max(a, c), min(b, c + unit)
                if lo == c and hi == c + unit:  # a whole chunk of the range
                    offset, size, mask = self._chunk(dataset, c // unit)
                    if mask & skipped == skipped and size == unit * row:
                        place = (at + c - a) * row
                        last = runs[-1] if runs else None
                        if last and last[0] + last[2] == offset and last[1] + last[2] == place:
                            last[3].append(c)
                            runs[-1] = (last[0], last[1], last[2] + size, last[3])
                        else:
                            runs.append((offset, place, size, [c]))
                        continue
                if rest and rest[-1][1] == lo:
                    rest[-1] = (rest[-1][0], hi, rest[-1][2])
                else:
                    rest.append((lo, hi, at + lo - a))
            at += b - a
        if runs:
            fd = self._descriptor(dataset, runs[0][3][0])
            zeros = (0,) * (len(self.shape) - 1)
            for offset, place, size, chunks in runs:
                if fd is not None and later is not None:
                    later.append((fd, flat[place : place + size], offset))
                    continue
                if fd is not None:
                    _pread(fd, flat[place : place + size], offset, self.filename)
                    continue
                for k, c in enumerate(chunks):
                    a = place + k * unit * row
                    dataset.id.read_direct_chunk((c, *zeros), out=flat[a : a + unit * row])
        left = np.array(rest, dtype=np.int64).reshape(-1, 3)
        return left[:, 0], left[:, 1], left[:, 2]

    def _chunk(self, dataset: h5py.Dataset, k: int) -> tuple[int, int, int]:
        """Chunk ``k``'s place in the file: ``(offset, bytes, filter mask)``."""
        stored = self._stored.get(k)
        if stored is None:
            assert self.chunk_rows is not None
            zeros = (0,) * (len(self.shape) - 1)
            info = dataset.id.get_chunk_info_by_coord((k * self.chunk_rows, *zeros))
            offset = -1 if info.byte_offset is None else int(info.byte_offset)
            stored = self._stored[k] = (offset, int(info.size), int(info.filter_mask))
        return stored

    def _descriptor(self, dataset: h5py.Dataset, first: int) -> int | None:
        """HDF5's descriptor of the file, to read stored chunks from directly; or None.

        Taken from the open file at each call (a file reopened has another one) and
        checked once per descriptor: chunk ``first`` (a row) read through it must
        equal HDF5's own read of that chunk. None where the file is not a plain
        file (a driver other than the default ``sec2``), is open for SWMR (a writer
        may move chunks), the platform has no ``os.preadv``, or the check fails.
        """
        if self._fd is False or not hasattr(os, "preadv"):
            return None
        try:
            fd = int(h5py.h5i.get_file_id(dataset.id).get_vfd_handle())
        except (TypeError, ValueError, RuntimeError):
            self._fd = False
            return None
        if fd == self._fd:
            return fd
        file = dataset.file
        if file.driver != "sec2" or file.swmr_mode:
            self._fd = False
            return None
        assert self.chunk_rows is not None
        offset, size, _ = self._chunk(dataset, first // self.chunk_rows)
        theirs = np.empty(size, dtype=np.uint8)
        dataset.id.read_direct_chunk((first, *(0,) * (len(self.shape) - 1)), out=theirs)
        ours = np.empty(size, dtype=np.uint8)
        try:
            _pread(fd, ours, offset, self.filename)
        except OSError:
            same = False
        else:
            same = bool(np.array_equal(ours, theirs))
        if not same:
            self._fd = False
            return None
        self._fd = fd
        return fd

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        if self.offset is not None:
            self.dataset  # noqa: B018  # raises if the file was closed
            return self.mapped.take(rows, axis=0)
        # h5py takes increasing indices only: the reader passes them sorted and distinct.
        return np.asarray(self.dataset[rows])


def _pread(fd: int, out: np.ndarray, offset: int, filename: str) -> None:
    """Fill ``out`` (contiguous bytes) from file ``fd`` at ``offset``.

    Raises:
        OSError: the file ended first (it was cut short since it was opened).
    """
    view = out.data.cast("B")
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise OSError(
                f"{filename!r} ended {len(view) - done} bytes short of a chunk at byte "
                f"{offset}: the file changed since it was opened."
            )
        done += got


def _pread_all(reads: list[tuple[int, np.ndarray, int]], filename: str) -> None:
    for fd, out, offset in reads:
        _pread(fd, out, offset, filename)


_READER: tuple[int, ThreadPoolExecutor] | None = None


def _reader() -> ThreadPoolExecutor:
    """This process's thread for direct file reads in the background (made on first use)."""
    global _READER
    if _READER is None or _READER[0] != os.getpid():  # a fork has no thread of its parent's
        _READER = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="looptoolkit-read"))
    return _READER[1]
