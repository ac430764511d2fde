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

- ``shuffle=True`` at 10**10 rows (the keyed full shuffle), ``replacement=True``
  (uniform draws, by position) at 10**10, and ``"grouped"`` and ``shuffle=False``
  at 10**9. The Loader advises the mapping ``MADV_RANDOM`` itself for the
  scattered orders (``docs/loader.md``, "Memory-mapped data"): without it, the
  kernel's read-ahead around each of the 256 scattered rows cost most of the
  first batch (0.45 s full, 1.18 s replacement, 1.50 s grouped, against
  0.01-0.02 s advised by hand, in the results before the Loader did it);
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
  a valid column whose values take no space), at 10**6, 10**8 and 10**9
  documents (``--ragged-n``): a batch reads its rows' offsets, never all of them;
  and ``group_by_length`` over the same, whose batches a rank of 64 or more
  makes one at a time from their window of 50 batches (the offsets of 12,800
  documents a batch);
- the planned layouts (``PLANNED``: pad with lengths 1-63, ``group_by_length``,
  ``batch_tokens``, ``"pack"`` and ``"fit"`` into rows of 1,024) over documents
  of 1 to 63 tokens whose offsets are written to a file (8 bytes a document) and
  dropped from the page cache before the case (its reads go to the disk), at
  10**7 and 10**8 documents (``--planned-n``): every plan but length grouping
  reads every length and plans the whole epoch on every rank (O(n) time and
  memory; 10**9 documents would take about 10x the larger); and
  ``group_by_length`` at 10**9 (``--windowed-n``), made by window, its 12,800
  offsets a batch read from the disk.

Last measured (2-core AMD EPYC, a shared machine): ``benchmarks/results/scale-cpu.md``;
``docs/distributed.md`` quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from looptoolkit import FitLayout, PackLayout
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
    parser.add_argument("--ragged-n", type=int, nargs="+", default=[10**6, 10**8, 10**9])
    parser.add_argument(
        "--planned-n",
        type=int,
        nargs="+",
        default=[10**7, 10**8],
        help="documents of the planned layouts (offsets written: 8 bytes a document)",
    )
    parser.add_argument(
        "--windowed-n",
        type=int,
        nargs="+",
        default=[10**9],
        help="documents of the length-grouped case alone (made a batch at a time by a rank)",
    )
    parser.add_argument("--tmp", default=None, help="where the files go (default: the temp dir)")
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


# Documents of 1 to 63 tokens (32 on average), their int64 offsets written whole.
MEAN_TOKENS, SEQ_LEN = 32, 1024
# The planned layouts (`docs/ragged.md`): each epoch planned whole, then dealt to the ranks.
PLANNED: dict[str, dict[str, Any]] = {
    "pad, lengths 1-63": {"batch_size": BATCH},
    "group_by_length": {"batch_size": BATCH, "group_by_length": True},
    "batch_tokens": {"batch_size": None, "batch_tokens": BATCH * MEAN_TOKENS},
    "pack": {"batch_size": 8, "layout": PackLayout(seq_len=SEQ_LEN)},
    "fit": {"batch_size": 8, "layout": FitLayout(seq_len=SEQ_LEN)},
}


def written_offsets(path: Path, n: int) -> None:
    """Write the ``n + 1`` offsets of documents of 1 to 63 tokens, not sparse.

    Dropped from the page cache so that the case reads them from the disk.
    """
    if not path.exists():
        rng = np.random.default_rng(0)
        end, block = 0, 1 << 24
        with open(path, "wb") as f:
            f.write(np.zeros(1, dtype=np.int64).tobytes())
            for lo in range(0, n, block):
                lengths = rng.integers(1, 2 * MEAN_TOKENS, min(block, n - lo), dtype=np.int64)
                ends = np.cumsum(lengths) + end
                end = int(ends[-1])
                f.write(ends.tobytes())
            f.flush()
            os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def ragged_column(path: Path, n: int) -> Any:
    """The ragged column of ``path``'s offsets, its uint16 values a sparse file."""
    from looptoolkit import Ragged

    offsets = np.memmap(path, dtype=np.int64, mode="r", shape=(n + 1,))
    total = int(offsets[-1])
    if not total:
        return Ragged(np.zeros(0, dtype=np.uint16), offsets)
    values_path = path.with_suffix(".u2")
    sparse(values_path, 2 * total)
    return Ragged(np.memmap(values_path, dtype=np.uint16, mode="r", shape=(total,)), offsets)


def loader_of(case: str, n: int, directory: Path, world: int, weights: Any) -> Any:
    from looptoolkit import Loader

    kwargs: dict[str, Any] = {"rank": 0, "world_size": world}
    if case.startswith("planned"):
        options = dict(PLANNED[case.partition(" ")[2]])
        column = ragged_column(directory / f"written-{n}.i8", n)
        return Loader(
            {"tokens": column}, options.pop("batch_size"), shuffle=True, **options, **kwargs
        )
    if case.startswith("ragged"):
        column = ragged_column(directory / f"offsets-{n}.i8", n)
        layout = case.split()[1]
        if layout == "group_by_length":
            return Loader({"tokens": column}, BATCH, shuffle=True, group_by_length=True, **kwargs)
        return Loader({"tokens": column}, BATCH, shuffle=True, layout=layout, **kwargs)
    data = np.memmap(directory / f"u8-{n}.bin", dtype=np.uint8, mode="r", shape=(n,))
    if case == "replacement":  # uniform draws with replacement, by position
        return Loader(data, BATCH, replacement=True, **kwargs)
    if case == "full":
        return Loader(data, BATCH, shuffle=True, **kwargs)
    if case == "grouped":
        return Loader(data, BATCH, shuffle="grouped", **kwargs)
    if case == "sequential":
        return Loader(data, BATCH, shuffle=False, **kwargs)
    replacement = case == "weighted, replacement"
    return Loader(data, BATCH, weights=weights, replacement=replacement, **kwargs)


def child(args: argparse.Namespace) -> None:
    """Measure one case in this process; print its JSON."""
    case, n, directory = args.case, args.rows, Path(args.dir)
    for rows in (n, 100, 1000):
        if case.startswith("planned"):
            written_offsets(directory / f"written-{rows}.i8", rows)
        elif case.startswith("ragged"):
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
    # Planned batches' offsets count batches; the others' rows.
    per = 1 if case.startswith("planned") or case.endswith("group_by_length") else BATCH
    state["offset"] = (batches // 2) * per * args.world_size
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
        "from a sparse file (ragged: int64 offsets memory-mapped); each case in a fresh process. "
        "*Planned*: documents of 1-63 tokens, their offsets written and dropped from the page "
        f"cache (read from the disk); `pack`/`fit` batches of 8 rows of {SEQ_LEN}, "
        f"`batch_tokens` {BATCH * MEAN_TOKENS}; a batch per rank counts planned batches.",
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
    cases = [("full", args.full_n), ("replacement", args.full_n)]
    cases += [("grouped", args.n), ("sequential", args.n)]
    cases += [("weighted", n) for n in args.weighted_n]
    cases += [("weighted, replacement", n) for n in args.weighted_replacement_n]
    layouts = ("pad", "flat", "group_by_length")
    cases += [(f"ragged {layout}", n) for n in args.ragged_n for layout in layouts]
    cases += [(f"planned {name}", n) for n in args.planned_n for name in PLANNED]
    cases += [("planned group_by_length", n) for n in args.windowed_n]
    if args.cases:  # a part of the suite: never the reference's results
        if args.reference:
            raise SystemExit("`--cases` runs a part of the suite; it cannot be `--reference`.")
        cases = [(c, n) for c, n in cases if c.startswith(tuple(args.cases))]
    with tempfile.TemporaryDirectory(dir=args.tmp) as directory:
        planned = {n for c, n in cases if c.startswith("planned")}
        for n in sorted(planned):  # written once, before the cases' clocks
            written_offsets(Path(directory) / f"written-{n}.i8", n)
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
