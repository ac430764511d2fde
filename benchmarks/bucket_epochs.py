"""Epochs of a zarr array in a bucket against the same array on local disk, by order.

Run from the repository root (a study, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.bucket_epochs               # about a minute here
    .venv/bin/python -m benchmarks.bucket_epochs --reference   # rewrites benchmarks/results/

100,000 rows x 64 float32 (random normals) in a zarr v3 array of chunks of 1,024
rows (98 chunks, about 256 KiB each), written to a local directory and to a moto
S3 server on 127.0.0.1 behind the latency proxy of ``benchmarks.bucket_clients``
(``--latency`` added per request, 20 ms), both in a process of their own. A
full shuffle is timed over its first ``--shuffle-batches`` batches (20). Batch
256. For each order (grouped, sequential, full shuffle through a disk cache) one
Loader over each copy; per
epoch: its time, the time to its first batch, the requests the proxy saw, and
the bytes fetched and used (``Loader.stats.remote_reads``). Epochs 0 and 1 of
each Loader (the second from the disk cache where there is one); best of
``--repeat`` Loaders, each timed epoch checked equal to the local copy's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bucket_clients import KEY, REGION, SECRET, RemoteProxy, write_reference
from looptoolkit import Loader
from looptoolkit.stores import bucket

BUCKET = "epochs"


def epoch(loader: Loader, e: int, limit: int = 0) -> tuple[float, float, np.ndarray]:
    """One epoch's time (its first ``limit`` batches' if not 0), its first batch's, its rows."""
    loader.set_epoch(e)
    start = time.perf_counter()
    first = 0.0
    out = []
    for b in loader:
        if not first:
            first = time.perf_counter() - start
        out.append(b["x"])
        if len(out) == limit:
            break
    return time.perf_counter() - start, first, np.concatenate(out)


def floor_fetch(endpoint: str, keys: list[str]) -> int:
    """Bytes of ``keys`` fetched with obstore, 16 requests in flight, nothing decoded."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        endpoint=endpoint,
        access_key_id=KEY,
        secret_access_key=SECRET,
        region=REGION,
        client_options={"allow_http": True},
    )
    sizes = [meta["size"] for page in obstore.list(store, "x.zarr/c/") for meta in page]

    async def go() -> int:
        gate = asyncio.Semaphore(16)

        async def one(key: str) -> int:
            async with gate:
                return len(await (await obstore.get_async(store, key)).bytes_async())

        return sum(await asyncio.gather(*map(one, keys)))

    total = asyncio.run(go())
    assert total == sum(sizes)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shuffle-batches", type=int, default=20, help="batches of a full shuffle")
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args()

    import boto3
    import zarr

    proxy = RemoteProxy(args.latency)
    boto3.client(
        "s3",
        endpoint_url=proxy.target,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
    ).create_bucket(Bucket=BUCKET)
    options = {
        "key": KEY,
        "secret": SECRET,
        "client_kwargs": {"endpoint_url": proxy.endpoint, "region_name": REGION},
    }
    x = np.random.default_rng(0).standard_normal((args.rows, 64)).astype(np.float32)
    tmp = Path(tempfile.mkdtemp())
    local = zarr.create_array(tmp / "x.zarr", shape=x.shape, chunks=(1024, 64), dtype="f4")
    local[:] = x
    remote = zarr.create_array(
        f"s3://{BUCKET}/x.zarr",
        shape=x.shape,
        chunks=(1024, 64),
        dtype="f4",
        storage_options=options,
    )
    remote[:] = x
    remote = zarr.open_array(f"s3://{BUCKET}/x.zarr", storage_options=options, mode="r")

    made = iter(range(1 << 30))

    def cached(i: int) -> Any:  # a new, empty cache for each Loader
        return bucket(remote, cache_dir=tmp / f"cache{next(made)}", cache_bytes=1 << 30)

    variants: list[tuple[str, str, Any, Any]] = [
        ("grouped", "local", lambda i: local, "grouped"),
        ("grouped", "s3", lambda i: remote, "grouped"),
        ("sequential", "local", lambda i: local, False),
        ("sequential", "s3", lambda i: remote, False),
        ("grouped, disk cache", "s3", cached, "grouped"),
        ("full shuffle", "local", lambda i: local, True),
        ("full shuffle, disk cache", "s3", cached, True),
    ]
    rows: list[dict[str, Any]] = []
    results: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    keys = [f"x.zarr/c/{i}/0" for i in range(-(-args.rows // 1024))]
    for i in range(args.repeat):
        for e in (0, 1):  # the server's floor: every chunk object fetched, nothing decoded
            proxy.reset()
            start = time.perf_counter()
            got_bytes = floor_fetch(proxy.endpoint, keys)
            seconds = time.perf_counter() - start
            proxy.read()
            results.setdefault(("floor: fetch every chunk, 16 in flight", "s3", e), []).append(
                {
                    "seconds": seconds,
                    "first_s": 0.0,
                    "requests": proxy.requests,
                    "by_method": dict(proxy.by_method),
                    "max_in_flight": proxy.max_in_flight,
                    "fetched": got_bytes,
                    "used": 0,
                }
            )
        for order, where, make, shuffle in variants:
            loader = Loader({"x": make(i)}, 256, shuffle=shuffle, stats=True)
            for e in (0, 1):
                proxy.reset()
                before = dict(loader.stats.remote_reads)
                seconds, first, got = epoch(
                    loader, e, args.shuffle_batches if shuffle is True else 0
                )
                proxy.read()
                assert np.array_equal(got, x[loader.indices(e)[: len(got)]]), (order, where, e)
                after = loader.stats.remote_reads
                fetched = after.get("bytes_fetched", 0) - before.get("bytes_fetched", 0)
                used = after.get("bytes_used", 0) - before.get("bytes_used", 0)
                results.setdefault((order, where, e), []).append(
                    {
                        "seconds": seconds,
                        "first_s": first,
                        "requests": proxy.requests,
                        "by_method": dict(proxy.by_method),
                        "max_in_flight": proxy.max_in_flight,
                        "fetched": fetched,
                        "used": used,
                    }
                )
    base = {
        (order, e): min(r["seconds"] for r in results[(order.split(",")[0], "local", e)])
        for order, _, _, _ in variants
        for e in (0, 1)
    }
    for e in (0, 1):
        base[("floor: fetch every chunk, 16 in flight", e)] = base[("grouped", e)]
    for (order, where, e), runs in results.items():
        best = min(runs, key=lambda r: r["seconds"])
        rows.append(
            {
                "order": order,
                "where": where,
                "epoch": e,
                **best,
                "median_s": float(np.median([r["seconds"] for r in runs])),
                "vs_local": best["seconds"] / base[(order, e)],
            }
        )
        print(json.dumps(rows[-1]))
    lines = [
        f"# A zarr array in a bucket against local disk ({args.rows:,} x 64 float32, chunks of "
        f"1,024 rows, batch 256, {args.latency * 1000:.0f} ms added per request)",
        "",
        f"`python -m benchmarks.bucket_epochs`; best of {args.repeat} Loaders; requests seen "
        "by the proxy; bytes from `Loader.stats.remote_reads`.",
        "",
        "| order | data | epoch | s | vs local | first batch s | requests | fetched MiB | "
        "used MiB | most in flight |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        methods = ", ".join(f"{k} {v}" for k, v in sorted(r["by_method"].items())) or "0"
        lines.append(
            f"| {r['order']} | {r['where']} | {r['epoch']} | {r['seconds']:.3f} | "
            f"{r['vs_local']:.2f} | {r['first_s']:.3f} | {methods} | "
            f"{r['fetched'] / 2**20:.1f} | {r['used'] / 2**20:.1f} | {r['max_in_flight']} |"
        )
    print("\n".join(lines))
    if args.reference:
        write_reference("bucket-epochs", lines, args, rows)
    proxy.stop()


if __name__ == "__main__":
    main()
