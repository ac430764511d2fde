"""The Loader's bound on requests in flight, chosen by measurement: epochs at each bound.

The ``bucket`` workload's zarr group (``--rows`` x 64 float32 and the int64 ids, chunks of
1,024 rows: 196 chunk objects) on the local S3 server with ``--latency`` added to every
request (`looptoolkit.bench.bucket_data.BucketData`). For each bound N the Loader reads it
through ``looptoolkit.stores.bucket(array, in_flight=N)``: a grouped and a sequential
epoch, no disk cache, rounds interleaved (N1 N2 ... N1 N2 ...); medians and ranges of the
epoch and of its first batch. Run from the repository root (a study, not a test: it
times, never asserts)::

    .venv/bin/python -m benchmarks.bucket_in_flight              # about a minute here
    .venv/bin/python -m benchmarks.bucket_in_flight --reference  # rewrite benchmarks/results/
    .venv/bin/python -m benchmarks.bucket_in_flight --latency 0.05 --in-flight 16 32 64 128 \
        --rounds 3 --reference                                   # bucket-in-flight-50ms-cpu

Last measured: ``benchmarks/results/bucket-in-flight-cpu.md`` and
``bucket-in-flight-50ms-cpu.md`` (quoted in docs/stores.md, "Object storage", where the
default bound is set from them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from benchmarks.bucket_clients import write_reference


def epoch(loader: Any) -> tuple[float, float]:
    """Seconds of one whole epoch of ``loader`` and to its first batch."""
    start = time.perf_counter()
    iterator = iter(loader)
    next(iterator)
    first = time.perf_counter() - start
    for _ in iterator:
        pass
    return time.perf_counter() - start, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args()

    from looptoolkit import Loader
    from looptoolkit.bench.bucket_data import BucketData, bucket_rows
    from looptoolkit.stores import bucket

    data = bucket_rows(args.rows)
    store = BucketData(data, latency_s=args.latency)
    times: dict[tuple[int, str], list[tuple[float, float]]] = {}
    orders = {"grouped": "grouped", "sequential": False}
    try:
        remote = store.remote()
        trees = {n: {k: bucket(a, in_flight=n) for k, a in remote.items()} for n in args.in_flight}
        for n in args.in_flight:  # a warm-up epoch each
            epoch(Loader(trees[n], 256, shuffle="grouped", seed=0))
        for _ in range(args.rounds):
            for n in args.in_flight:
                for name, shuffle in orders.items():
                    loader = Loader(trees[n], 256, shuffle=shuffle, seed=0)
                    times.setdefault((n, name), []).append(epoch(loader))
    finally:
        store.close()

    rows: list[dict[str, Any]] = []
    for (n, name), runs in times.items():
        epochs, firsts = [r[0] * 1e3 for r in runs], [r[1] * 1e3 for r in runs]
        rows.append(
            {
                "in_flight": n,
                "order": name,
                "epoch_ms": statistics.median(epochs),
                "epoch_min_ms": min(epochs),
                "epoch_max_ms": max(epochs),
                "first_ms": statistics.median(firsts),
            }
        )
    lines = [
        "# The Loader's bound on requests in flight (the bucket workload)",
        "",
        f"Command: `python -m benchmarks.bucket_in_flight` ({args.rows:,} rows, 196 chunk "
        f"objects, {args.latency * 1e3:.0f} ms a request, batch 256, no disk cache); "
        f"{args.rounds} interleaved rounds after a warm-up, medians with min-max; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
        f"{os.getloadavg()[0]:.2f} at the end; {os.cpu_count()} cores.",
        "",
        "| in flight | order | epoch ms | min-max | first batch ms |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["order"], r["in_flight"])):
        lines.append(
            f"| {r['in_flight']} | {r['order']} | {r['epoch_ms']:.0f} "
            f"| {r['epoch_min_ms']:.0f}-{r['epoch_max_ms']:.0f} | {r['first_ms']:.0f} |"
        )
    print("\n".join(lines))
    if args.reference:  # another latency than the default's: a file of its own
        suffix = "" if args.latency == 0.02 else f"-{args.latency * 1e3:.0f}ms"
        write_reference(f"bucket-in-flight{suffix}", lines, args, rows)


if __name__ == "__main__":
    main()
