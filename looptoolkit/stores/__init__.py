"""Chunked stores as data: zarr, HDF5 (h5py) and Arrow (pyarrow, HF ``datasets``).

A store array in the Loader's data is wrapped in a [`StoreArray`][looptoolkit.stores.StoreArray]:
one small protocol (its length, its chunk layout, a read of a row range, a read
of sorted rows) that the Loader's reads (`looptoolkit._rows.store_reads`) use
whatever the format. A store container is a dict of its arrays: a zarr group or
an HDF5 file or group (nested groups as nested dicts), an Arrow table, a HF
``datasets.Dataset`` (its columns). Each format lives in its own module,
imported only when such an object appears in the data (the formats' libraries
are optional extras: ``looptoolkit[zarr]``, ``[hdf5]``, ``[arrow]``).

Objects of these libraries, and of other table and lazy-array libraries
(pandas, polars, dask, xarray), are never walked into as containers: the
Loader's tree sees them as leaves, and one that is not supported is refused at
once with a message naming what to pass instead.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "BLOCK_BYTES",
    "BLOCK_ROWS",
    "StoreArray",
    "bucket",
    "is_store_type",
    "refusal",
    "wrap",
]

# Rows per block of a store without chunks of its own (contiguous HDF5, Arrow):
# BLOCK_ROWS, or fewer so that a block of the widest leaf stays within BLOCK_BYTES.
BLOCK_ROWS = 4096
BLOCK_BYTES = 1 << 22

# Top-level module of an object's type -> the looptoolkit module that wraps it.
_FORMATS = {
    "zarr": "looptoolkit.stores._zarr",
    "h5py": "looptoolkit.stores._hdf5",
    "pyarrow": "looptoolkit.stores._arrow",
    "datasets": "looptoolkit.stores._arrow",
}
# Libraries whose objects are refused with a hint (never walked into).
_OTHERS = {
    "pandas": "pass NumPy arrays: `df.to_numpy()` or `{c: df[c].to_numpy() for c in df}`",
    "polars": "pass NumPy arrays: `df.to_numpy()` or `{c: df[c].to_numpy() for c in df.columns}`",
    "dask": "compute it first (`x.compute()`), or write it to zarr (`x.to_zarr(path)`) "
    "and pass the zarr array",
    "xarray": "pass its values (`da.values`), or the zarr store it was read from",
}


def is_store_type(cls: type) -> bool:
    """Whether instances of ``cls`` come from a store, table or lazy-array library.

    Such objects are leaves of the Loader's tree, never containers; decided by
    the module of the type, without importing anything.
    """
    top = cls.__module__.partition(".")[0]
    return top in _FORMATS or top in _OTHERS


class StoreArray:
    """One array of a store, as the Loader reads it.

    Subclasses implement [`read`][looptoolkit.stores.StoreArray.read] and may
    override the multi-range and sorted-row reads where their library does
    better than a loop. Batches read from a store are NumPy arrays.

    Attributes:
        kind: the format's name, for messages.
        path: where the array is (a file and a name, a column), for messages.
        shape: the array's shape; ``shape[0]`` rows.
        dtype: its NumPy dtype.
        chunk_rows: rows per chunk of the store's own layout (zarr chunks or
            shards, chunked HDF5), or None for a store without chunks of its own.

    Examples:
        A format of one's own: set ``shape`` and ``dtype``, implement ``read``;
        the Loader takes an instance as it takes a zarr array.

        >>> import numpy as np
        >>> from looptoolkit import Loader
        >>> class Blocks(StoreArray):
        ...     kind, path = "blocks", "data['x']"
        ...
        ...     def __init__(self, values):
        ...         self.values, self.shape, self.dtype = values, values.shape, values.dtype
        ...
        ...     def read(self, start, stop):
        ...         return self.values[start:stop].copy()
        >>> loader = Loader({"x": Blocks(np.arange(10.0))}, 4, shuffle=False)
        >>> [batch["x"].tolist() for batch in loader]
        [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    """

    kind = "store"
    path = ""
    shape: tuple[int, ...] = ()
    dtype: np.dtype = np.dtype("float64")
    chunk_rows: int | None = None

    @property
    def ndim(self) -> int:
        """Dimensions of the array."""
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row once read."""
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def block_rows(self) -> int:
        """Rows per block a reader reads at once: the store's chunk, or a fixed block."""
        if self.chunk_rows is not None:
            return self.chunk_rows
        return max(1, min(BLOCK_ROWS, BLOCK_BYTES // max(1, self.row_bytes)))

    def __getitem__(self, key: int | slice) -> np.ndarray:
        """Row ``key``, or the rows of a slice with step 1 (as a NumPy array)."""
        n = self.shape[0]
        if isinstance(key, slice) and key.step in (None, 1):
            start, stop, _ = key.indices(n)
            return self.read(start, max(start, stop))
        if isinstance(key, int | np.integer) and -n <= key < n:
            i = int(key) % n
            return self.read(i, i + 1)[0]
        raise IndexError(f"{self.path} takes a row number or a slice with step 1, got {key!r}.")

    def view(self) -> np.ndarray | None:
        """The whole array as a zero-copy NumPy array (a memmap, an Arrow buffer), if it is one.

        A leaf with a view is gathered from it directly, as a ``.npy`` memmap is:
        reading it costs nothing, so there is nothing to cache.
        """
        return None

    def gather(self, idx: np.ndarray) -> np.ndarray | None:
        """Rows ``idx`` (any order, repeats allowed) in one call where the format can, else None.

        None (the default): the reader reads the rows sorted and deduplicated
        ([`read_rows`][looptoolkit.stores.StoreArray.read_rows]) and puts them in order.
        """
        return None

    def length_now(self) -> int:
        """The array's rows as the store says now (a store can change under the Loader)."""
        return self.shape[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)``."""
        raise NotImplementedError

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        """Rows of the ranges ``[starts[i], stops[i])`` (increasing, disjoint) into ``out``."""
        at = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            out[at : at + b - a] = self.read(a, b)
            at += b - a

    def reads_later(self) -> bool:
        """Whether this store's reads can run in the background (see `read_ranges_later`)."""
        return False

    def read_ranges_later(
        self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray
    ) -> Callable[[], None]:
        """Start reading the ranges into ``out``; returns a function that waits for the read.

        The waiting function raises what the read raised. A store whose reads can run
        in a background thread without the GIL (plain file reads) overrides this and
        [`reads_later`][looptoolkit.stores.StoreArray.reads_later]; this one reads now.
        """
        self.read_ranges(starts, stops, out)
        return _done

    def transient_bytes(self) -> int:
        """Memory a read of ranges may hold besides ``out`` (buffers being decoded)."""
        return 0

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (sorted, distinct), in that order."""
        return np.concatenate([self.read(int(r), int(r) + 1) for r in rows])

    def read_one_range(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` through ``read_ranges`` (the ``read`` of range-read arrays)."""
        out = np.empty((max(0, stop - start), *self.shape[1:]), dtype=self.dtype)
        if stop > start:
            self.read_ranges(np.array([start]), np.array([stop]), out)
        return out

    def start_pass(self) -> None:
        """Called at the start of each pass over the data (a remote store lists its objects)."""

    def __repr__(self) -> str:
        return f"<{self.kind} array {self.path} shape={self.shape} dtype={self.dtype}>"


def refusal(obj: Any) -> str | None:
    """The message refusing ``obj``, a store-like object the Loader does not take; else None."""
    cls = type(obj)
    top = cls.__module__.partition(".")[0]
    hint = _OTHERS.get(top)
    if hint is None:
        return None
    return f"a {cls.__module__}.{cls.__qualname__} is not data the Loader reads; {hint}."


def wrap(obj: Any, path: str) -> StoreArray | dict[str, Any]:
    """``obj`` as the Loader reads it: a [`StoreArray`][looptoolkit.stores.StoreArray] or a dict.

    Args:
        obj: an object of a store library ([`is_store_type`][looptoolkit.stores.is_store_type]).
        path: where ``obj`` is in the data (``data['x']``), for messages.

    Raises:
        TypeError: ``obj`` is not supported (its type named, with what to pass instead).
        ValueError: a closed file, a column with missing values or ragged rows.
    """
    cls = type(obj)
    message = refusal(obj)
    if message is None:
        module = importlib.import_module(_FORMATS[cls.__module__.partition(".")[0]])
        wrapped = module.wrap(obj, path)
        if wrapped is not None:
            return wrapped
        message = module.refusal(obj)
    raise TypeError(f"`data` cannot hold {path}: {message}")


def bucket(
    obj: Any,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_bytes: int | None = None,
    in_flight: int | None = None,
    ahead_bytes: int | None = None,
    attempts: int | None = None,
    deadline_s: float | None = None,
    columns: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    dtype: Any = None,
) -> StoreArray | dict[str, Any]:
    """A zarr array or group, or a file, in a bucket (``s3://``, ``gs://``, ``az://``), as set.

    A zarr array in a bucket passed to the Loader as it is reads with the
    defaults; wrap it to set where its chunks are cached on disk (needed by a
    full shuffle) and how they are fetched. See docs/stores.md, "Object storage".

    Args:
        obj: a ``zarr.Array`` or ``zarr.Group`` opened over a bucket: an S3 API
            (fsspec's ``s3://``, or ``zarr.storage.ObjectStore`` over obstore's ``S3Store``),
            Google Cloud Storage (``gs://``: gcsfs, or a ``GCSStore``) or Azure Blob
            (``az://`` or ``abfs://``: adlfs, or an ``AzureStore``); or the URL
            (``s3://bucket/key``, ``gs://bucket/key``, ``az://container/key``) of a
            Parquet file (its row groups are the chunks), of a prefix with Parquet files
            under it (an Arrow dataset, one table), of an Arrow IPC file or stream
            (``.arrow``, ``.feather``, ``.ipc``: its record batches are the chunks), of a
            prefix where HF ``datasets`` saved a dataset (``save_to_disk``: its files in
            ``state.json``'s order, one table) or with IPC files under it (in key order),
            or of an array file: a ``.npy`` file, or raw values of ``dtype`` (a token
            file, the values of a [`Ragged`][looptoolkit.Ragged] column: read by the byte
            ranges of the rows the order needs; ``np.asarray`` of it fetches it whole).
        cache_dir: a directory for a chunk cache on local disk, shared by the
            processes that name it (the ranks of a node, workers); None: no disk cache.
        cache_bytes: the most bytes the disk cache keeps (least recently used out).
        in_flight: the most requests in flight at once, per process and bucket (default
            64).
        ahead_bytes: the most bytes fetched ahead of the reads (default 64 MiB).
        attempts: tries of each request before a read fails (default 6).
        deadline_s: seconds after which a request still running is restarted, plus
            its bytes at 8 MiB/s (default 5).
        columns: a table file's columns to read (default: all; numbers, booleans and
            vectors of them).
        storage_options: a URL's endpoint and credentials, as the scheme's fsspec client
            takes them: s3fs (``endpoint_url``, ``key``, ``secret``, ``anon``), gcsfs
            (``endpoint_url``, ``token``), adlfs (``connection_string``, ``account_name``,
            ``account_key``, ``sas_token``, ``anon``). Default: where the cloud's clients
            find them (the environment, a profile, the metadata server).
        dtype: an array file's dtype when it holds raw values (a ``.npy`` file states its own).

    Returns:
        The array as the Loader reads it (a dict of them for a group; of the columns
        for a Parquet file).

    Raises:
        TypeError: ``obj`` is not a zarr array or group in a bucket or a URL; a Parquet
            column that is not numeric or boolean.
        ValueError: ``cache_dir`` without ``cache_bytes`` (or the reverse), a bad bound.

    Examples:
        A zarr array in a bucket of the local S3 server (moto on 127.0.0.1), read
        through a chunk cache on disk:

        >>> import tempfile
        >>> import numpy as np, zarr
        >>> from looptoolkit import Loader
        >>> from looptoolkit.bench.s3local import LocalS3
        >>> folder = tempfile.mkdtemp()
        >>> local = zarr.create_array(f"{folder}/x.zarr", shape=(1000, 4), chunks=(250, 4),
        ...                           dtype="f4")
        >>> local[:] = np.arange(4000, dtype="f4").reshape(1000, 4)
        >>> with LocalS3() as s3:
        ...     name = s3.make_bucket("looptoolkit-docs")
        ...     s3.upload_dir(f"{folder}/x.zarr", name, "x.zarr")
        ...     remote = zarr.open_array(f"s3://{name}/x.zarr",
        ...                              storage_options=s3.storage_options())
        ...     x = bucket(remote, cache_dir=f"{folder}/cache", cache_bytes=1 << 26)
        ...     loader = Loader({"x": x}, 100, shuffle="grouped", seed=0, stats=True)
        ...     rows = sum(len(b["x"]) for b in loader)
        ...     reads = loader.stats.remote_reads
        >>> rows, reads["requests"], reads["cache_hits"]  # one LIST, 4 chunk objects
        (1000, 5, 0)
    """
    from looptoolkit.stores._disk_cache import DiskCache
    from looptoolkit.stores._remote import Settings

    if (cache_dir is None) != (cache_bytes is None):
        raise ValueError("`cache_dir` and `cache_bytes` go together: pass both, or neither.")
    if cache_bytes is not None and (
        not isinstance(cache_bytes, int) or isinstance(cache_bytes, bool) or cache_bytes < 1
    ):
        raise ValueError(f"`cache_bytes` must be an int >= 1, got {cache_bytes!r}.")
    given: dict[str, Any] = {
        "in_flight": in_flight,
        "ahead_bytes": ahead_bytes,
        "attempts": attempts,
        "deadline_s": deadline_s,
    }
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    if isinstance(obj, str):  # a Parquet file's URL
        from looptoolkit.stores._parquet import parquet_columns

        def cache_of(place: Any) -> Any:
            if cache_dir is None:
                return None
            assert cache_bytes is not None
            return DiskCache(cache_dir, cache_bytes, place.where)

        if dtype is not None or obj.endswith(".npy"):  # an array file (a token file)
            from looptoolkit.stores._tokens import array_file

            return array_file(obj, storage_options, columns, dtype, settings, cache_of)
        if obj.endswith((".arrow", ".feather", ".ipc")):  # an Arrow IPC file or stream
            from looptoolkit.stores._arrow_ipc import arrow_columns

            return arrow_columns(obj, storage_options, columns, settings, cache_of)
        if not obj.endswith(".parquet"):  # a prefix: the Parquet files under it, if any
            from looptoolkit.stores._arrow_ipc import arrow_dataset
            from looptoolkit.stores._parquet_dataset import parquet_dataset

            found = parquet_dataset(obj, storage_options, columns, settings, cache_of)
            if found is None:  # else its Arrow IPC files (an HF dataset saved there)
                found = arrow_dataset(obj, storage_options, columns, settings, cache_of)
            if found is not None:
                return found
        return parquet_columns(obj, storage_options, columns, settings, cache_of)
    if dtype is not None:
        raise ValueError("`dtype` is for an array file's URL; a zarr array states its own.")
    if columns is not None or storage_options is not None:
        raise ValueError(
            "`columns` and `storage_options` are for a Parquet file's URL; a zarr array "
            "was opened with its own."
        )
    if type(obj).__module__.partition(".")[0] != "zarr":
        raise TypeError(
            "`obj` must be a zarr array or group in a bucket, or the s3://, gs:// or az:// URL "
            f"of a Parquet file or an array file, got {type(obj).__name__}."
        )
    from looptoolkit.stores._zarr import remote_array

    def wrap_one(item: Any, path: str) -> StoreArray | dict[str, Any]:
        if hasattr(item, "members"):  # a group: its arrays, nested groups as dicts
            members = dict(item.members())
            return {name: wrap_one(members[name], f"{path}[{name!r}]") for name in sorted(members)}
        cache = None
        if cache_dir is not None:
            assert cache_bytes is not None
            found = remote_array(item, path)
            space = "" if found is None else found.bucket.where
            cache = DiskCache(cache_dir, cache_bytes, space)
        remote = remote_array(item, path, settings, cache)
        if remote is None:
            raise TypeError(
                f"{path} is a zarr array that is not in a bucket (s3://, gs://, az://)."
            )
        return remote

    return wrap_one(obj, "data")


def _done() -> None:
    """Wait for a read that has already ended."""
