"""Read-ahead or ``MADV_RANDOM`` on a memory-mapped file, per order: what the Loader advises.

Linux only. Run from the repository root (a study, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.read_advice               # about two minutes here
    .venv/bin/python -m benchmarks.read_advice --reference   # rewrites benchmarks/results/

It writes ``--gb`` GB of random bytes to a real (not sparse) file, then for each case
(an order, a row size, rank 0 of a world size) builds a ``Loader`` over an
``np.memmap`` of it, notes the advice the Loader chose (``rr`` in the mapping's
``VmFlags``, ``/proc/self/smaps``), sets each advice in turn by hand
(``MADV_NORMAL``: the kernel's read-ahead; ``MADV_RANDOM``: the faulting page only)
and times the first batch and the first ``batches`` batches with the file's pages
dropped from the page cache first (``posix_fadvise(POSIX_FADV_DONTNEED)`` after a
``sync``: a cold read, as a job's first epoch). Best of ``--repeat``.

Last measured (2-core AMD EPYC, a virtual disk; a shared machine):
``benchmarks/results/read-advice-cpu.md``; ``docs/loader.md`` quotes it.
"""

from __future__ import annotations

import argparse
import gc
import mmap
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from looptoolkit import Loader
from looptoolkit._rows.mapped import mapping_of
from looptoolkit.bench.results import REFERENCE_HELP, results_dir, write_results
from looptoolkit.bench.timing import machine_info

BATCH = 256
# (label, shuffle, bytes per row, world size, batches timed)
CASES: list[tuple[str, Any, int, int, int]] = [
    ("grouped", "grouped", 1, 4096, 20),
    ("grouped", "grouped", 256, 1, 320),
    ("grouped", "grouped", 256, 8, 320),
    ("grouped", "grouped", 256, 64, 100),
    ("grouped", "grouped", 4096, 1, 100),
    ("grouped", "grouped", 4096, 4, 100),
    ("full", True, 256, 1, 40),
    ("full", True, 4096, 1, 20),
    ("full", True, 16384, 1, 10),
    ("full", True, 65536, 1, 5),
    ("full", True, 262144, 1, 3),
    ("sequential", False, 256, 1, 320),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="size of the file")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temp dir)")
    parser.add_argument(
        "--out", default=None, help="results directory (default: ./looptoolkit-results)"
    )
    parser.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    return parser.parse_args(argv)


def write_file(path: Path, nbytes: int) -> None:
    rng = np.random.default_rng(0)
    block = 2**26
    with open(path, "wb") as f:
        for start in range(0, nbytes, block):
            f.write(rng.integers(0, 256, min(block, nbytes - start), dtype=np.uint8).tobytes())
    os.sync()


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def random_advice(path: Path) -> bool:
    """Whether this process's mappings of ``path`` have random-read advice (``rr``)."""
    target, mapped, flags = os.path.realpath(path), False, []
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
            mapped = len(head) == 6 and head[5] == target
        elif mapped and line.startswith("VmFlags:"):
            flags.append("rr" in line.split())
    return bool(flags) and all(flags)


def timed(path: Path, nbytes: int, case: tuple[str, Any, int, int, int], advice: int) -> Any:
    """(first batch s, batches s, the Loader's own choice) with ``advice`` set by hand."""
    _, shuffle, row, world, batches = case
    drop_cache(path)
    data = np.memmap(path, dtype=np.uint8, mode="r", shape=(nbytes // row, row))
    start = time.perf_counter()
    loader = Loader(data, BATCH, shuffle=shuffle, rank=0, world_size=world, seed=1)
    chose = random_advice(path)
    mapping = mapping_of(data)
    assert mapping is not None
    mapping.madvise(advice)
    iterator = iter(loader)
    next(iterator)
    first = time.perf_counter() - start
    for _ in range(batches - 1):
        next(iterator)
    total = time.perf_counter() - start
    del iterator, loader, data, mapping
    gc.collect()  # unmapped, so that the next case's drop empties the cache
    return first, total, chose


def markdown(payload: dict[str, Any]) -> str:
    m = payload["machine"]
    lines = [
        "# Read-ahead or MADV_RANDOM on a memory-mapped file, cold cache",
        "",
        f"Command: `{payload['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, "
        f"NumPy {m['versions'].get('numpy', '?')}; {m['date']}  ",
        f"A {payload['gb']:g} GB file of random bytes, `np.memmap` rows of the given size, rank 0 "
        f"of the world size, batch {BATCH}; the file's pages dropped before each run; "
        f"best of {payload['repeat']}. *Loader* is the advice the Loader chose.",
        "",
        "| order | row bytes | world size | batches | read-ahead: first batch s | "
        "read-ahead: batches s | MADV_RANDOM: first batch s | MADV_RANDOM: batches s | Loader |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in payload["cases"]:
        lines.append(
            f"| {r['order']} | {r['row_bytes']:,} | {r['world_size']:,} | {r['batches']} "
            f"| {r['normal_first_s']:.4f} | {r['normal_total_s']:.3f} "
            f"| {r['random_first_s']:.4f} | {r['random_total_s']:.3f} "
            f"| {'MADV_RANDOM' if r['loader_random'] else 'read-ahead'} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    nbytes = int(args.gb * 2**30) // 2**18 * 2**18  # whole rows of every size
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = Path(directory) / "bytes.bin"
        write_file(path, nbytes)
        rows = []
        for case in CASES:
            runs = {
                name: [timed(path, nbytes, case, advice) for _ in range(args.repeat)]
                for name, advice in (("normal", mmap.MADV_NORMAL), ("random", mmap.MADV_RANDOM))
            }
            row = {
                "order": case[0],
                "row_bytes": case[2],
                "world_size": case[3],
                "batches": case[4],
                "loader_random": runs["normal"][0][2],
            }
            for name, got in runs.items():
                row[f"{name}_first_s"] = min(g[0] for g in got)
                row[f"{name}_total_s"] = min(g[1] for g in got)
            print(row, flush=True)
            rows.append(row)
    payload = {
        "suite": "read-advice",
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
        "machine": machine_info(),
        "gb": args.gb,
        "repeat": args.repeat,
        "cases": rows,
    }
    out = results_dir(args.out, reference=args.reference)
    paths = write_results(out, "read-advice-cpu", payload, markdown(payload))
    print(markdown(payload))
    print("wrote", *map(str, paths))


if __name__ == "__main__":
    main()
