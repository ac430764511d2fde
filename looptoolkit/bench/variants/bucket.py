"""The ``bucket`` workload's loops: rows from an S3 bucket, against local disk and the peers.

Every loop yields ``{"x": (b, 64) float32, "y": (b,) int64}`` batches of the workload's rows
(`looptoolkit.bench.bucket_data.BucketData`), in an order of its own, and is checked for
every row once with each row aligned with its id (`looptoolkit.bench.check_bucket`). A loop
is a `BucketLoop`: an iterable over epochs that may also say how to check its resume.

- The Loader on the local zarr copy (``floor-local-*``: grouped, sequential, full shuffle):
  what the bucket's rows are set against.
- The Loader on the bucket: grouped and sequential with no disk cache (every epoch fetched),
  and through a disk cache: ``-e1`` starts each epoch with an empty cache (a first epoch),
  ``-e2`` with one a first epoch filled (every later epoch).
- ``floor-s3-seq``: the hand-written loop that fetches every chunk object of the epoch with
  obstore (as many requests in flight as the Loader's default bound), in order, and cuts
  each chunk's bytes into batches (no LIST, no decode, no cache): the most any loop can
  take from this server.
- zarr read directly over ``s3://`` (fsspec), with no read-ahead: the same grouped order,
  each batch read with ``get_orthogonal_selection`` (a hand loop).
- Peers, where installed: Mosaic streaming (MDS shards), litdata (``optimize``'s chunks),
  both ``-e1`` (an empty local cache each epoch) and ``-e2`` (the cache of a finished
  epoch), and HF datasets streaming one Parquet file (no cache: every epoch fetched).

Peers' quirks met on the local server: Mosaic's package imports torchvision's datasets,
whose CUDA wheel does not load beside a CPU torch (`allow_torchvision` lets its pure-Python
modules import, as the augment workload does); litdata fetches chunks with obstore under
client options of its own that refuse ``http://`` endpoints (`allow_http_in_litdata` adds
``allow_http`` to them; a real bucket is ``https://``).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from looptoolkit.bench.bucket_data import BucketData
from looptoolkit.bench.results import Group
from looptoolkit.bench.variants import Context, Variant
from looptoolkit.bench.variants.epochs import EpochPipeline, batch_slices
from looptoolkit.order._order import batch_count
from looptoolkit.stores._remote import IN_FLIGHT

__all__ = ["BUCKET_BASELINE", "BucketLoop", "bucket_values", "bucket_variants", "first_bound"]
__all__ += ["stacked"]

BUCKET_BASELINE = "floor-local-grp"
"""The row every other is set against: the Loader's grouped epoch on the local zarr copy."""
CACHE_BYTES = 1 << 30  # a disk cache that holds the whole array
Resume = Callable[[int, "int | None"], tuple[list[np.ndarray], list[np.ndarray]]]


class BucketLoop(EpochPipeline):
    """An epoch pipeline of the bucket workload: how its resume is checked, its format's name.

    Args:
        epoch_fn: ``epoch -> batches``.
        length: batches per epoch.
        name: the loop's name.
        form: the format it reads (a key of ``BucketData.convert_s``).
        resume: ``(stop_after, limit) -> (ids of an epoch run whole, ids of the same epoch
            stopped after stop_after batches and resumed in a new loop)``, each of its first
            ``limit`` batches (None: all), or None: the loop offers no resume.
        resume_key: loops that share it resume alike (checked once).
    """

    def __init__(
        self,
        epoch_fn: Callable[[int], Iterable[Any]],
        length: int,
        *,
        name: str,
        form: str,
        resume: Resume | None = None,
        resume_key: str = "",
    ) -> None:
        super().__init__(epoch_fn, length, name=name)
        self.form, self.resume, self.resume_key = form, resume, resume_key or name
        self.first_chunks: int | None = None  # chunks of rows the first batch needs


def _data(ctx: Context) -> BucketData:
    data = ctx.workload.resource
    if not isinstance(data, BucketData):
        raise TypeError(f"the {ctx.workload.name} workload holds no bucket data.")
    return data


def stacked(samples: Iterator[dict[str, Any]], batch_size: int) -> Iterator[dict[str, Any]]:
    """Per-sample dicts (a streaming peer's rows) as batches of ``batch_size`` stacked rows."""
    while True:
        rows = [row for _, row in zip(range(batch_size), samples, strict=False)]
        if not rows:
            return
        yield {
            "x": np.stack([np.asarray(r["x"]) for r in rows]),
            "y": np.array([int(r["y"]) for r in rows], np.int64),
        }


def _ids(batches: Iterable[Any], limit: int | None = None) -> list[np.ndarray]:
    return [np.asarray(b["y"]).astype(np.int64) for b in itertools.islice(batches, limit)]


def _rest(limit: int | None, done: int) -> int | None:
    return None if limit is None else max(limit - done, 0)


def _close(iterator: Any) -> None:
    with contextlib.suppress(Exception):
        iterator.close()


# -- the Loader ---------------------------------------------------------------------------------


def _loader_loop(ctx: Context, *, where: str, shuffle: Any, cache: str = "") -> BucketLoop:
    """The Loader on the local copy or the bucket; ``cache``: ``""``, ``"cold"`` or ``"warm"``."""
    from looptoolkit import Loader
    from looptoolkit.stores import bucket

    data, size, seed = _data(ctx), ctx.batch_size, ctx.seed

    def arrays() -> dict[str, Any]:
        if where == "local":
            return data.local()
        remote = data.remote()
        if not cache:
            return remote
        folder = data.tmpdir("cache")  # a new, empty disk cache
        return {k: bucket(a, cache_dir=folder, cache_bytes=CACHE_BYTES) for k, a in remote.items()}

    def make(tree: dict[str, Any] | None = None) -> Loader:
        return Loader(tree or arrays(), size, shuffle=shuffle, seed=seed)

    if cache == "warm":  # a first epoch fills the cache; the loop's epochs read from it
        tree = arrays()
        for _ in make(tree):
            pass
        loader = make(tree)
    else:
        loader = make()

    def epoch(e: int) -> Iterator[Any]:
        nonlocal loader
        if cache == "cold":  # each epoch from an empty cache: a first epoch
            loader = make()
        loader.set_epoch(e)
        return iter(loader)

    def resume(stop_after: int, limit: int | None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        whole = _ids(make(), limit)
        first = make()
        iterator = iter(first)
        got = _ids(iterator, stop_after)
        state = first.state_dict()
        _close(iterator)
        second = make()
        second.load_state_dict(state)
        return whole, got + _ids(second, _rest(limit, stop_after))

    key = f"loader-{where}-{shuffle}"
    name = f"loader-{where}"
    loop = BucketLoop(epoch, len(loader), name=name, form="zarr", resume=resume, resume_key=key)
    loop.first_chunks = len(np.unique(loader.indices(0)[:size] // data.chunk))
    return loop


def floor_s3_seq(ctx: Context) -> BucketLoop:
    """The hand-written sequential loop over the bucket: every chunk object fetched, in order.

    obstore's ``S3Store`` from a pool of `IN_FLIGHT` threads, the next `IN_FLIGHT` chunks'
    objects (``x`` and ``y``) asked for ahead of the one being cut; each chunk's bytes viewed
    with ``np.frombuffer`` and cut into batches. It knows the layout (no LIST, no metadata)
    and has no cache and no resume.
    """
    import obstore
    from obstore.store import S3Store

    from looptoolkit.bench.bucket_data import BUCKET

    data, size, n = _data(ctx), ctx.batch_size, ctx.workload.n
    if data.chunk % size:
        raise ValueError(f"the hand loop cuts chunks of {data.chunk} rows into batches of {size}.")
    store = S3Store(BUCKET, **data.s3.obstore_options())
    chunks = -(-n // data.chunk)
    keys = [(f"rows.zarr/x/c/{c}/0", f"rows.zarr/y/c/{c}") for c in range(chunks)]
    width = data.data["x"].shape[1]

    def fetch(key: str) -> bytes:
        return bytes(obstore.get(store, key).bytes())

    def epoch(e: int) -> Iterator[dict[str, Any]]:
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            pending: deque[tuple[Future[bytes], Future[bytes]]] = deque()
            for c in range(chunks):
                while len(pending) < IN_FLIGHT // 2 and len(pending) + c < chunks:
                    kx, ky = keys[c + len(pending)]
                    pending.append((pool.submit(fetch, kx), pool.submit(fetch, ky)))
                fx, fy = pending.popleft()
                rows = min(data.chunk, n - c * data.chunk)
                x = np.frombuffer(fx.result(), np.float32)[: rows * width].reshape(rows, width)
                y = np.frombuffer(fy.result(), np.int64)[:rows]
                for a in range(0, rows, size):
                    yield {"x": x[a : a + size], "y": y[a : a + size]}

    loop = BucketLoop(epoch, batch_count(n, size), name="floor-s3-seq", form="zarr")
    loop.first_chunks = 1
    return loop


def zarr_direct(ctx: Context) -> BucketLoop:
    """The zarr array over ``s3://``, no read-ahead: the Loader's grouped order read batch by batch.

    Each batch's rows sorted, then ``x`` and ``y`` read with ``get_orthogonal_selection``
    (zarr fetches the chunks a read touches, concurrently, every time).
    """
    from looptoolkit import Loader

    data, size = _data(ctx), ctx.batch_size
    remote = data.remote()
    order = Loader(data.local(), size, shuffle="grouped", seed=ctx.seed)

    def epoch(e: int) -> Iterator[dict[str, Any]]:
        for idx in batch_slices(order.indices(e), size):
            rows = np.sort(idx)
            yield {k: a.get_orthogonal_selection((rows,)) for k, a in remote.items()}

    return BucketLoop(epoch, len(order), name="zarr-direct", form="zarr")


# -- the peers ----------------------------------------------------------------------------------


def allow_torchvision() -> None:
    """Let Mosaic's package import torchvision's pure-Python modules (see the module's notes)."""
    name = "torchvision._meta_registrations"
    sys.modules.setdefault(name, types.ModuleType(name))


def allow_http_in_litdata() -> None:
    """Add ``allow_http`` to litdata's obstore client options (the local server is http)."""
    import litdata.streaming.downloader as downloader

    options = downloader._OBSTORE_CLIENT_OPTIONS
    downloader._OBSTORE_CLIENT_OPTIONS = {**options, "allow_http": True}


def _streaming_loop(ctx: Context, peer: str, cache: str) -> BucketLoop:
    """Mosaic's or litdata's dataset over the bucket; ``cache``: ``"cold"`` or ``"warm"``."""
    data, size, seed, n = _data(ctx), ctx.batch_size, ctx.seed, ctx.workload.n
    if peer == "mosaic":
        allow_torchvision()
        from streaming import StreamingDataset

        url = data.url("mds")

        def make(folder: Any = None) -> Any:
            local = str(folder or data.tmpdir("local"))
            return StreamingDataset(
                remote=url, local=local, batch_size=size, shuffle=True, shuffle_seed=seed
            )

        def batches(loop: Any) -> Iterator[Any]:
            return stacked(iter(loop), size)

        def state(loop: Any, done: int) -> Any:
            return loop.state_dict(done * size, True)

    else:
        import litdata

        allow_http_in_litdata()
        url = data.url("litdata")

        def make(folder: Any = None) -> Any:
            dataset = litdata.StreamingDataset(
                url,
                cache_dir=str(folder or data.tmpdir("local")),
                storage_options=data.boto3_options(),
                shuffle=True,
                seed=seed,
            )
            return litdata.StreamingDataLoader(dataset, batch_size=size, num_workers=0)

        def batches(loop: Any) -> Iterator[Any]:
            return iter(loop)

        def state(loop: Any, done: int) -> Any:
            return loop.state_dict()

    loop = make()
    if cache == "warm":
        for _ in batches(loop):
            pass

    def epoch(e: int) -> Iterator[Any]:
        nonlocal loop
        if cache == "cold":
            loop = make()
        return batches(loop)

    def resume(stop_after: int, limit: int | None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        whole = _ids(batches(make()), limit)
        folder = data.tmpdir("local")
        first = make(folder)
        iterator = batches(first)
        got = _ids(iterator, stop_after)
        saved = state(first, stop_after)
        _close(iterator)
        # A restarted job: a new loop over the same cache (litdata checks it is the same;
        # Mosaic refuses a local directory another live dataset holds, so it gets its own).
        second = make(data.tmpdir("local") if peer == "mosaic" else folder)
        second.load_state_dict(saved)
        return whole, got + _ids(batches(second), _rest(limit, stop_after))

    form = "mds" if peer == "mosaic" else "litdata"
    name = f"{peer}-{'e1' if cache == 'cold' else 'e2'}"
    length = batch_count(n, size)
    return BucketLoop(epoch, length, name=name, form=form, resume=resume, resume_key=peer)


def hf_parquet(ctx: Context) -> BucketLoop:
    """HF datasets streaming the Parquet file from the bucket, in its order, as NumPy batches."""
    import datasets

    data, size = _data(ctx), ctx.batch_size
    url, options = data.url("parquet"), data.s3.storage_options()

    def make() -> Any:
        ds = datasets.load_dataset(
            "parquet", data_files=url, split="train", streaming=True, storage_options=options
        )
        return ds.with_format("numpy")

    stream = make()

    def epoch(e: int) -> Iterator[Any]:
        return iter(stream.iter(batch_size=size))

    def resume(stop_after: int, limit: int | None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        whole = _ids(make().iter(batch_size=size), limit)
        first = make()
        rows = iter(first)  # the state follows the examples iterated
        got = [int(row["y"]) for row in itertools.islice(rows, stop_after * size)]
        saved = first.state_dict()
        _close(rows)
        second = make()
        second.load_state_dict(saved)
        rest = _rest(limit, stop_after)
        more = itertools.islice(second, None if rest is None else rest * size)
        ids = np.array(got + [int(row["y"]) for row in more], np.int64)
        return whole, [ids[i : i + size] for i in range(0, len(ids), size)]

    length = batch_count(ctx.workload.n, size)
    return BucketLoop(epoch, length, name="hf-parquet", form="parquet", resume=resume)


def first_bound(latency_s: float, first_bytes: int, bytes_per_s: float) -> float:
    """The first-batch target: 3 request latencies plus its bytes at ``bytes_per_s``.

    Examples:
        >>> round(first_bound(0.02, 1 << 20, 64 << 20), 4)
        0.0756
    """
    return 3 * latency_s + first_bytes / bytes_per_s


def bucket_values(group: Group) -> dict[str, float]:
    """The bucket group's figures the targets read, besides the rows' medians.

    ``bucket:amp:<row>``: bytes fetched per byte used; ``bucket:first:<row>``: seconds to the
    first batch; ``bucket:first-bound``: `first_bound` of the chunks of rows the first batch
    of ``loader-s3-grouped`` needs (a group's, 16 here) at the rate ``loader-s3-seq`` fetched
    its epoch.
    """
    out: dict[str, float] = {}
    for r in group.rows:
        if r.timed and "first_ms" in r.extra:
            out[f"bucket:first:{r.name}"] = r.extra["first_ms"] / 1e3
            if r.extra.get("fetched_per_used") is not None:
                out[f"bucket:amp:{r.name}"] = r.extra["fetched_per_used"]
    timed, info = group.timed(), group.info
    seq, grouped = timed.get("loader-s3-seq"), timed.get("loader-s3-grouped")
    if seq is not None and seq.extra.get("fetched_bytes") and "row_bytes" in info:
        rate = seq.extra["fetched_bytes"] / seq.median_s
        chunks = (grouped.extra.get("first_chunks") if grouped is not None else None) or 1
        first = chunks * info["chunk"] * info["row_bytes"]
        out["bucket:first-bound"] = first_bound(info["latency_s"], first, rate)
    return out


# -- the variants -------------------------------------------------------------------------------

_LABELS = {
    BUCKET_BASELINE: "Loader on the local zarr copy, grouped (chunk-aligned groups)",
    "floor-local-seq": "Loader on the local zarr copy, sequential",
    "floor-local-shuf": "Loader on the local zarr copy, full shuffle",
    "floor-s3-seq": "hand loop on the bucket: every chunk object fetched in order (obstore, "
    "64 in flight, no LIST), each cut into batches",
    "loader-s3-grouped": "Loader on the bucket, grouped, no disk cache: every epoch fetched",
    "loader-s3-seq": "Loader on the bucket, sequential, no disk cache",
    "loader-s3-grp-e2": "Loader on the bucket, grouped, disk cache a first epoch filled",
    "loader-s3-shuf-e1": "Loader on the bucket, full shuffle, an empty disk cache each epoch",
    "loader-s3-shuf-e2": "Loader on the bucket, full shuffle, disk cache a first epoch filled",
    "zarr-direct": "zarr over s3:// (fsspec), no read-ahead: the grouped order, each batch "
    "read with get_orthogonal_selection (x, then y)",
    "mosaic-e1": "Mosaic streaming StreamingDataset (MDS shards of 4 MiB, shuffle), rows stacked "
    "into batches; an empty local cache each epoch",
    "mosaic-e2": "Mosaic streaming, its local cache of a finished epoch",
    "litdata-e1": "litdata StreamingDataset + StreamingDataLoader (chunks of 4 MiB, shuffle, "
    "0 workers); an empty cache each epoch",
    "litdata-e2": "litdata, its cache of a finished epoch",
    "hf-parquet": "HF datasets streaming the Parquet file (row groups of 1,024 rows, in order), "
    "iter(batch_size)",
}


def _loader(where: str, shuffle: Any, cache: str = "") -> Callable[[Context], BucketLoop]:
    return lambda ctx: _loader_loop(ctx, where=where, shuffle=shuffle, cache=cache)


def _peer(peer: str, cache: str) -> Callable[[Context], BucketLoop]:
    return lambda ctx: _streaming_loop(ctx, peer, cache)


def bucket_variants(backend: str) -> tuple[Variant, ...]:
    """The ``bucket`` workload's variants (all on NumPy batches), in table order.

    Each is checked for coverage (``shuffle=None``); the peers are ``listed`` (a "not
    installed" row where their module is missing).
    """
    if backend != "numpy":
        return ()
    grp, seq, shuf = BUCKET_BASELINE, "floor-local-seq", "floor-local-shuf"
    rows: list[tuple[str, Callable[[Context], BucketLoop], dict[str, Any]]] = [
        (grp, _loader("local", "grouped"), {}),
        (seq, _loader("local", False), {}),
        (shuf, _loader("local", True), {"slow": True}),  # decodes most chunks every batch
        ("floor-s3-seq", floor_s3_seq, {"needs": ("obstore",)}),
        ("loader-s3-grouped", _loader("s3", "grouped"), {"floor": "floor-s3-seq"}),
        ("loader-s3-seq", _loader("s3", False), {"floor": "floor-s3-seq"}),
        ("loader-s3-grp-e2", _loader("s3", "grouped", "warm"), {"floor": grp}),
        ("loader-s3-shuf-e1", _loader("s3", True, "cold"), {"floor": shuf}),
        ("loader-s3-shuf-e2", _loader("s3", True, "warm"), {"floor": shuf}),
        ("zarr-direct", zarr_direct, {"slow": True, "needs": ("s3fs",)}),
        ("mosaic-e1", _peer("mosaic", "cold"), {"needs": ("streaming",), "listed": True}),
        ("mosaic-e2", _peer("mosaic", "warm"), {"needs": ("streaming",), "listed": True}),
        ("litdata-e1", _peer("litdata", "cold"), {"needs": ("litdata",), "listed": True}),
        ("litdata-e2", _peer("litdata", "warm"), {"needs": ("litdata",), "listed": True}),
        ("hf-parquet", hf_parquet, {"needs": ("datasets",), "listed": True}),
    ]
    return tuple(
        Variant(name, backend, _LABELS[name], fn, shuffle=None, workloads=("bucket",), **kw)
        for name, fn, kw in rows
    )
