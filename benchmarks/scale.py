"""One rank of thousands: its first batch and its extra memory, at 10**9 and 10**10 rows.

Run from the repository root (a benchmark, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.scale               # about a minute here
    .venv/bin/python -m benchmarks.scale --reference   # rewrites benchmarks/results/

Every case runs in a fresh process: a ``uint8`` column memory-mapped from a
sparse file in a temporary directory (no disk space used, every row reads as
0), ``Loader(data, 256, ..., rank=0, world_size=4096)``; the time from building
the Loader to its first batch, the peak of Python/NumPy allocations over that
(``tracemalloc``) and the peak resident memory over the process's before
(``VmHWM - VmRSS``, which also counts the pages of the file the batch touched and
the threads' stacks), after a warm-up Loader of 100 rows of the same kind
(imports, lazy ones included, are not counted); the order alone (this rank's
indices of the first batch of a new epoch, no reads); then ``len(loader)``, a state saved and
loaded half-way through the epoch and the next batch from it (a resume). Cases:

- ``shuffle=True`` at 10**10 rows (the keyed full shuffle), also with the
  mapping advised ``MADV_RANDOM`` (``data._mmap.madvise``: no read-ahead around
  each of the 256 scattered rows, which on a sparse file costs most of the first
  batch), ``replacement=True`` (uniform draws, by position) at 10**10, and
  ``"grouped"`` (also advised) and ``shuffle=False`` at 10**9;
- weighted orders: without replacement (``weights=``), whose epoch is drawn
  whole on every rank (the exponential race: O(n) memory, O(n log n) time), at
  10**7 and 3 * 10**7 rows (``--weighted-n``; its cost grows linearly, so 10**9
  rows would take about 33x the larger one); with replacement (``weights=...,
  replacement=True``), computed by position, at 10**7 and 10**8 rows
  (``--weighted-replacement-n``): the first batch pays the cumulative weights
  once (O(n) time, 8 bytes a row, kept for every epoch), the order alone and a
  resume only the batch's draws (10**9 rows needs 16 GB for the weights and
  their cumulative sums, more than this machine can spare);
- the ragged layouts ``"pad"`` and ``"flat"`` over documents whose ``n + 1``
  int64 offsets are memory-mapped from a sparse file (every document empty:
  a valid column whose values take no space), at 10**6, 10**7 and 10**8
  documents (``--ragged-n``; 10**9 needs 8 GB of memory for the lengths that
  ``Ragged`` computes, more than this machine can spare).

Last measured (2-core AMD EPYC, a shared machine): ``benchmarks/results/scale-cpu.md``;
``docs/distributed.md`` quotes it.
"""

from __future__ import annotations

import argparse
import json
import mmap
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from looptoolkit.bench.results import REFERENCE_HELP, results_dir, write_results
from looptoolkit.bench.timing import machine_info

BATCH, WORLD = 256, 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", type=int, default=WORLD)
    parser.add_argument("--full-n", type=int, default=10**10)
    parser.add_argument("--n", type=int, default=10**9, help="rows of the grouped case")
    parser.add_argument("--weighted-n", type=int, nargs="+", default=[10**7, 3 * 10**7])
    parser.add_argument("--weighted-replacement-n", type=int, nargs="+", default=[10**7, 10**8])
    parser.add_argument(
        "--cases", nargs="+", default=None, help="run only the cases whose names start so"
    )
    parser.add_argument("--ragged-n", type=int, nargs="+", default=[10**6, 10**7, 10**8])
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # one case, in a child
    parser.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", default=None, help="results directory (default: ./looptoolkit-results)"
    )
    parser.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    return parser.parse_args(argv)


def memory_kib() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def sparse(path: Path, nbytes: int) -> None:
    if not path.exists():
        with open(path, "wb") as f:
            f.truncate(nbytes)


def loader_of(case: str, n: int, directory: Path, world: int, weights: Any) -> Any:
    from looptoolkit import Loader, Ragged

    kwargs: dict[str, Any] = {"rank": 0, "world_size": world}
    if case.startswith("ragged"):
        path = directory / f"offsets-{n}.i8"
        offsets = np.memmap(path, dtype=np.int64, mode="r", shape=(n + 1,))
        column = Ragged(np.zeros(0, dtype=np.int32), offsets)
        return Loader({"tokens": column}, BATCH, shuffle=True, layout=case.split()[1], **kwargs)
    data = np.memmap(directory / f"u8-{n}.bin", dtype=np.uint8, mode="r", shape=(n,))
    if case == "full, MADV_RANDOM":  # no read-ahead around each row the batch touches
        data._mmap.madvise(mmap.MADV_RANDOM)  # type: ignore[attr-defined]
        return Loader(data, BATCH, shuffle=True, **kwargs)
    if case == "replacement":  # uniform draws with replacement, by position
        return Loader(data, BATCH, replacement=True, **kwargs)
    if case == "full":
        return Loader(data, BATCH, shuffle=True, **kwargs)
    if case.startswith("grouped"):
        if case.endswith("MADV_RANDOM"):
            data._mmap.madvise(mmap.MADV_RANDOM)  # type: ignore[attr-defined]
        return Loader(data, BATCH, shuffle="grouped", **kwargs)
    if case == "sequential":
        return Loader(data, BATCH, shuffle=False, **kwargs)
    replacement = case == "weighted, replacement"
    return Loader(data, BATCH, weights=weights, replacement=replacement, **kwargs)


def child(args: argparse.Namespace) -> None:
    """Measure one case in this process; print its JSON."""
    case, n, directory = args.case, args.rows, Path(args.dir)
    for rows in (n, 100, 1000):
        if case.startswith("ragged"):
            sparse(directory / f"offsets-{rows}.i8", 8 * (rows + 1))
        else:
            sparse(directory / f"u8-{rows}.bin", rows)
    # Imports, lazy ones included, before measuring: a small Loader of the same kind, one batch.
    warm = loader_of(case, 1000 if case == "full" else 100, directory, 4, np.ones(100))
    next(iter(warm))
    del warm

    # A weighted order's weights are the caller's: made before measuring.
    weights = np.linspace(1.0, 2.0, n) if case.startswith("weighted") else None
    before = memory_kib()["VmRSS"]
    tracemalloc.start()
    start = time.perf_counter()
    loader = loader_of(case, n, directory, args.world_size, weights)
    built = time.perf_counter()
    iterator = iter(loader)
    next(iterator)
    first = time.perf_counter()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after = memory_kib()
    batches = len(loader)
    del iterator
    # The order alone: the indices of this rank's first batch of a new epoch.
    t = time.perf_counter()
    loader._order.epoch(1).batch(0)
    order_s = time.perf_counter() - t
    # A resume half-way through the epoch: a saved state moved to batch len // 2.
    state = loader.state_dict()
    state["offset"] = (batches // 2) * BATCH * args.world_size
    t = time.perf_counter()
    loader.load_state_dict(state)
    next(iter(loader))
    resume = time.perf_counter() - t
    print(
        json.dumps(
            {
                "case": case,
                "n": n,
                "world_size": args.world_size,
                "batch_size": BATCH,
                "build_s": built - start,
                "first_batch_s": first - start,
                "order_first_batch_s": order_s,
                "traced_peak_mib": peak / 2**20,
                "rss_peak_extra_mib": (after["VmHWM"] - before) / 1024,
                "batches": batches,
                "resume_s": resume,
            }
        )
    )


def run_case(case: str, n: int, directory: str, world: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.scale", "--case", case, "--rows", str(n)]
    cmd += ["--dir", directory, "--world-size", str(world)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        return {"case": case, "n": n, "error": proc.stderr.strip().splitlines()[-1]}
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    print(row, flush=True)
    return row


def markdown(payload: dict[str, Any]) -> str:
    m = payload["machine"]
    lines = [
        "# One rank of thousands: first batch and extra memory",
        "",
        f"Command: `{payload['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, "
        f"NumPy {m['versions'].get('numpy', '?')}; {m['date']}  ",
        f"Rank 0 of {payload['world_size']}, batch {BATCH}, a `uint8` column memory-mapped "
        "from a sparse file (ragged: int64 offsets memory-mapped); each case in a fresh process.",
        "",
        "| case | rows | first batch s | order alone s | traced peak MiB | RSS peak extra MiB "
        "| batches per rank | resume half-way + next batch s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in payload["cases"]:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['n']:.0e} | error: {r['error']} | | | | | |")
            continue
        lines.append(
            f"| {r['case']} | {r['n']:.0e} | {r['first_batch_s']:.3f} "
            f"| {r['order_first_batch_s']:.4f} "
            f"| {r['traced_peak_mib']:,.1f} | {r['rss_peak_extra_mib']:,.1f} "
            f"| {r['batches']:,} | {r['resume_s']:.3f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.case:
        child(args)
        return
    started = time.perf_counter()
    cases = [("full", args.full_n), ("full, MADV_RANDOM", args.full_n)]
    cases += [("replacement", args.full_n)]
    cases += [("grouped", args.n), ("grouped, MADV_RANDOM", args.n), ("sequential", args.n)]
    cases += [("weighted", n) for n in args.weighted_n]
    cases += [("weighted, replacement", n) for n in args.weighted_replacement_n]
    cases += [(f"ragged {layout}", n) for n in args.ragged_n for layout in ("pad", "flat")]
    if args.cases:  # a part of the suite: never the reference's results
        if args.reference:
            raise SystemExit("`--cases` runs a part of the suite; it cannot be `--reference`.")
        cases = [(c, n) for c, n in cases if c.startswith(tuple(args.cases))]
    with tempfile.TemporaryDirectory() as directory:
        rows = [run_case(c, n, directory, args.world_size) for c, n in cases]
    payload = {
        "suite": "scale",
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
        "machine": machine_info(),
        "world_size": args.world_size,
        "cases": rows,
        "elapsed_s": time.perf_counter() - started,
    }
    out = results_dir(args.out, reference=args.reference)
    paths = write_results(out, "scale-cpu", payload, markdown(payload))
    print(markdown(payload))
    print("wrote", *map(str, paths))


if __name__ == "__main__":
    main()
