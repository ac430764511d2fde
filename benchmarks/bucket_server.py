"""What the local S3 server itself costs: the floor under every bucket figure on this machine.

The ``bucket`` workload's server (moto in a child process, behind the project's proxy in
this one: `looptoolkit.bench.s3local.LocalS3`) holds the workload's chunk objects (98 of
256 KiB and 98 of 8 KiB: ``--rows`` x 64 float32 and the int64 ids, chunks of 1,024
rows). A hand loop fetches every object once with obstore (asyncio, N requests in flight,
nothing decoded) at each added latency; the server's CPU time (its process, from
``/proc``) and this process's (the client and the proxy) are divided by the requests.
Also timed: a LIST of one array's 98 objects. Run from the repository root (a study, not
a test: it times, never asserts; Linux only)::

    .venv/bin/python -m benchmarks.bucket_server             # about 30 seconds here
    .venv/bin/python -m benchmarks.bucket_server --reference # rewrite benchmarks/results/

Last measured (2026-11-29, 2-core AMD EPYC; ``benchmarks/results/bucket-server-cpu.md``):
see that file; the docs quote it in docs/stores.md ("Object storage") and
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from benchmarks.bucket_clients import write_reference


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def fetch_all(store: Any, keys: list[str], in_flight: int) -> int:
    """Every object of ``keys`` once, ``in_flight`` at a time; returns the bytes."""
    import obstore

    gate = asyncio.Semaphore(in_flight)

    async def one(key: str) -> int:
        async with gate:
            result = await obstore.get_async(store, key)
            return len(await result.bytes_async())

    return sum(await asyncio.gather(*(one(k) for k in keys)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.02])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args()

    import obstore
    from obstore.store import S3Store

    from looptoolkit.bench.bucket_data import BUCKET, BucketData, bucket_rows

    data = bucket_rows(args.rows)
    bucket = BucketData(data, latency_s=0.0)
    rows: list[dict[str, Any]] = []
    try:
        s3 = bucket.s3
        server = s3._server._process.pid  # type: ignore[union-attr]
        store = S3Store(BUCKET, **s3.obstore_options())
        keys = [m["path"] for page in obstore.list(store, "rows.zarr/") for m in page]
        keys = [k for k in keys if "/c/" in k]
        for latency in args.latency:
            s3.latency_s = latency
            for n in args.in_flight:
                walls, server_ms, here_ms = [], [], []
                for _ in range(args.repeat):
                    s0, h0, t0 = cpu_s(server), cpu_s(os.getpid()), time.perf_counter()
                    fetched = asyncio.run(fetch_all(store, keys, n))
                    walls.append(time.perf_counter() - t0)
                    server_ms.append((cpu_s(server) - s0) * 1e3 / len(keys))
                    here_ms.append((cpu_s(os.getpid()) - h0) * 1e3 / len(keys))
                rows.append(
                    {
                        "what": "fetch every object",
                        "latency_ms": latency * 1e3,
                        "in_flight": n,
                        "requests": len(keys),
                        "mib": fetched / 2**20,
                        "wall_ms": min(walls) * 1e3,
                        "server_cpu_ms_per_request": statistics.median(server_ms),
                        "client_proxy_cpu_ms_per_request": statistics.median(here_ms),
                    }
                )
            lists = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                listed = [m for page in obstore.list(store, "rows.zarr/x/") for m in page]
                lists.append(time.perf_counter() - t0)
            rows.append(
                {
                    "what": f"LIST of {len(listed)} objects",
                    "latency_ms": latency * 1e3,
                    "in_flight": 1,
                    "requests": 1,
                    "wall_ms": min(lists) * 1e3,
                }
            )
    finally:
        bucket.close()

    lines = [
        "# The local S3 server's cost (moto in a child process, the proxy in this one)",
        "",
        f"Command: `python -m benchmarks.bucket_server` ({args.rows:,} rows: "
        f"{len(keys)} chunk objects); best wall time of {args.repeat}, CPU medians; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"load average {os.getloadavg()[0]:.2f} at the end; {os.cpu_count()} cores.",
        "",
        "| what | latency ms | in flight | requests | wall ms | server CPU ms/request "
        "| client + proxy CPU ms/request |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        server_cpu = r.get("server_cpu_ms_per_request")
        here_cpu = r.get("client_proxy_cpu_ms_per_request")
        lines.append(
            f"| {r['what']} | {r['latency_ms']:.0f} | {r['in_flight']} | {r['requests']} "
            f"| {r['wall_ms']:.0f} | {'' if server_cpu is None else f'{server_cpu:.2f}'} "
            f"| {'' if here_cpu is None else f'{here_cpu:.2f}'} |"
        )
    print("\n".join(lines))
    if args.reference:
        write_reference("bucket-server", lines, args, rows)


if __name__ == "__main__":
    main()
