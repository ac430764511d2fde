"""zarr arrays and groups (zarr-python 3, zarr formats 2 and 3) as Loader data.

A zarr array in a bucket (``s3://``, ``gs://``, ``az://`` through fsspec, or zarr's
``ObjectStore`` over obstore's ``S3Store``, ``GCSStore`` or ``AzureStore``) becomes a
[`RemoteZarr`][looptoolkit.stores._zarr.RemoteZarr]:
its chunk objects' keys come from the array's metadata, their sizes and
versions from one LIST per pass (a chunk that is not listed holds the fill
value, as zarr reads it), and their bytes from a
[`Fetcher`][looptoolkit.stores._remote.Fetcher], which the Loader's reads tell
what the order needs next (``prefetch``). A read decodes the fetched bytes with
zarr itself: a second array with the same metadata over an in-memory store that
holds exactly the chunks of that read.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
import zarr
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import MemoryStore, StorePath

from looptoolkit.stores import StoreArray
from looptoolkit.stores._bucket import Bucket, bucket_of
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings, unlisted

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
        remote = remote_array(obj, path)  # in a bucket: chunks fetched ahead of the reads
        return ZarrArray(obj, path) if remote is None else remote
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


def remote_array(
    array: zarr.Array, path: str, settings: Settings | None = None, cache: Any = None
) -> RemoteZarr | None:
    """``array`` as a [`RemoteZarr`][looptoolkit.stores._zarr.RemoteZarr] if in a bucket."""
    bucket = bucket_of(array.store)
    if bucket is None:
        return None
    return RemoteZarr(array, path, bucket, settings or Settings(), cache)


class RemoteZarr(ZarrArray):
    """A zarr array in a bucket, read whole chunk objects at a time through a fetcher.

    Attributes:
        remote: True (the Loader's reads plan fetches ahead for such leaves).
        settings: the fetches' bounds and retry policy.
        cache: the disk cache its objects go through, or None.
    """

    remote = True

    def __init__(
        self,
        array: zarr.Array,
        path: str,
        bucket: Bucket,
        settings: Settings,
        cache: Any = None,
    ) -> None:
        super().__init__(array, path)
        self.settings = settings
        self.cache = cache
        self._bucket: Bucket | None = bucket
        self._proc: tuple[int, Fetcher, Counters, zarr.Array, dict[str, Any]] | None = None
        self._refs: dict[str, ObjectRef] | None = None
        self._listing: Future[list[ObjectRef]] | None = None  # the pass's LIST on its way
        self._lock = threading.Lock()
        layout = array.shards or array.chunks
        self._grid = [
            range(math.ceil(s / c)) for s, c in zip(self.shape[1:], layout[1:], strict=True)
        ]
        self._metadata = array.metadata
        # An object's bytes before its LIST tells them: a chunk decoded (or a shard's).
        self._guess = math.prod(layout) * array.dtype.itemsize
        # The array's objects lie under this key prefix (relative to the bucket's).
        self._root = array.store_path.path.strip("/")

    def __getstate__(self) -> dict[str, Any]:
        # The bucket is found again from the zarr array's store (what the user passed).
        return {
            **self.__dict__,
            "_bucket": None,
            "_proc": None,
            "_refs": None,
            "_listing": None,
            "_lock": None,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def bucket(self) -> Bucket:
        if self._bucket is None:
            self._bucket = bucket_of(self.array.store)
            assert self._bucket is not None
        return self._bucket

    def _process(self) -> tuple[Fetcher, Counters, zarr.Array, dict[str, Any]]:
        """This process's fetcher, counters and decoding array (made anew after a fork)."""
        proc = self._proc
        if proc is not None and proc[0] == os.getpid():
            return proc[1], proc[2], proc[3], proc[4]
        bucket = self.bucket
        counters = Counters()
        fetcher = Fetcher(
            bucket.get, self.settings, counters, self.cache, bucket.where, bucket.get_whole
        )
        served: dict[str, Any] = {}
        metadata: Any = self._metadata
        local: zarr.Array = zarr.Array(
            AsyncArray(
                metadata,
                StorePath(MemoryStore(served, read_only=True)),
                config=self.array.async_array.config,
            )
        )
        self._proc = (os.getpid(), fetcher, counters, local, served)
        self._refs = None
        return fetcher, counters, local, served

    @property
    def counters(self) -> Counters:
        """This process's counts of requests and bytes for this array."""
        return self._process()[1]

    def start_pass(self) -> None:
        """List the array's objects (their sizes and versions): once per pass.

        Without a disk cache the LIST is sent and this returns: the first chunks
        are fetched whole meanwhile (`Fetcher.prefetch_unlisted`); a read before
        the LIST arrives takes them as their GETs answered, one after checks them
        against it. With a cache (whose entries are named by version) the LIST is
        waited for here.
        """
        fetcher = self._process()[0]
        prefix = f"{self._root}/" if self._root else ""
        self._refs = None
        if self.cache is not None:
            self._listing = None
            self._listed(self._list(prefix))
            return
        self._listing = fetcher.listing(lambda: self._list(prefix))

    def _list(self, prefix: str) -> list[ObjectRef]:
        """The objects under ``prefix``, the LIST's requests counted as it returns."""
        refs = self.bucket.list(prefix)
        self.counters.add(requests=max(1, -(-len(refs) // 1000)))
        return refs

    def _listed(self, refs: list[ObjectRef]) -> dict[str, ObjectRef]:
        self._refs = {ref.key: ref for ref in refs}
        return self._refs

    def _listing_pending(self) -> bool:
        return self._refs is None and self._listing is not None and not self._listing.done()

    def _chunk_keys(self, chunk: int) -> list[str]:
        """The keys (relative to the array) of the objects of row chunk ``chunk``."""
        encode = self._metadata.encode_chunk_key
        return [encode((chunk, *rest)) for rest in itertools.product(*self._grid)]

    def _keys(self, chunks: Any) -> list[str]:
        """The object keys (from the bucket's root) of row chunks ``chunks``."""
        bucket, root = self.bucket, self._root
        return [
            bucket.key(f"{root}/{key}" if root else key)
            for chunk in chunks
            for key in self._chunk_keys(int(chunk))
        ]

    def objects(self, chunks: Any) -> list[ObjectRef]:
        """The listed objects of row chunks ``chunks`` (unlisted ones hold the fill value).

        Waits for the pass's LIST if it is on its way (and lists now if no pass started).
        """
        refs = self._refs
        if refs is None:
            listing = self._listing
            if listing is None:
                self.start_pass()
                listing = self._listing
            refs = self._refs if listing is None else self._listed(listing.result())
        assert refs is not None
        return [ref for key in self._keys(chunks) if (ref := refs.get(key)) is not None]

    def prefetch(self, chunks: Any) -> None:
        """Start fetching row chunks ``chunks`` (in that order) ahead of their reads.

        Before the pass's LIST has arrived, their objects are fetched whole, each
        guessed at a chunk's decoded bytes.
        """
        fetcher = self._process()[0]
        if self._listing_pending():
            fetcher.prefetch_unlisted(self._keys(chunks), self._guess)
            return
        fetcher.prefetch(self.objects(chunks))

    def ahead_bytes(self) -> int:
        """Bytes asked for ahead and not read yet."""
        return self._process()[0].ahead_bytes

    def forget(self) -> None:
        """Drop what was fetched ahead and not read (a pass ended)."""
        if self._proc is not None and self._proc[0] == os.getpid():
            self._proc[1].forget()

    def _serve(self, chunks: Any) -> tuple[zarr.Array, dict[str, Any]]:
        """The decoding array with the objects of row chunks ``chunks`` in its store.

        Before the pass's LIST arrives, each object is taken as its whole GET answered it
        (one that is not there holds the fill value, as an unlisted one does); after, by
        its listed size and version.
        """
        fetcher, _, local, served = self._process()
        if self._listing_pending():
            keys = self._keys(chunks)
            datas = fetcher.take([unlisted(key) for key in keys])
            found = [(k, d) for k, d in zip(keys, datas, strict=True) if fetcher.answered(k)]
        else:
            refs = self.objects(chunks)
            found = list(zip([ref.key for ref in refs], fetcher.take(refs), strict=True))
        skip = len(self.bucket.key(f"{self._root}/" if self._root else ""))
        make = default_buffer_prototype().buffer.from_bytes
        for key, data in found:
            served[key[skip:]] = make(data)
        return local, served

    def _chunks_of(self, starts: np.ndarray, stops: np.ndarray) -> list[int]:
        unit = self.chunk_rows or 1
        return sorted(
            {
                c
                for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
                for c in range(a // unit, -(-b // unit))
            }
        )

    def read(self, start: int, stop: int) -> np.ndarray:
        if stop <= start:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        with self._lock:
            local, served = self._serve(self._chunks_of(np.array([start]), np.array([stop])))
            try:
                return np.asarray(local[start:stop])
            finally:
                served.clear()

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        with self._lock:
            local, served = self._serve(self._chunks_of(starts, stops))
            try:
                if _sync is None or not out.flags.c_contiguous:
                    at = 0
                    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
                        out[at : at + b - a] = local[a:b]
                        at += b - a
                    return
                # Every range decoded concurrently on zarr's loop, straight into `out`.
                reads, at = [], 0
                for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
                    into = _nd.from_numpy_array(out[at : at + b - a])
                    reads.append(
                        local.async_array.get_orthogonal_selection((slice(a, b),), out=into)
                    )
                    at += b - a
                _sync(_gather(reads))
            finally:
                served.clear()

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        unit = self.chunk_rows or 1
        with self._lock:
            local, served = self._serve(np.unique(rows // unit).tolist())
            try:
                return np.asarray(local.get_orthogonal_selection((rows,)))
            finally:
                served.clear()
