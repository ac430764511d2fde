"""The memory one Loader epoch allocates over a memory-mapped dataset. Linux only.

Run from the repository root (a study, not a test: it measures, never asserts)::

    .venv/bin/python benchmarks/memmap_memory.py --gb 2

It writes a float32 ``(rows, 64)`` ``np.memmap`` of ``--gb`` GB to a temporary file, then runs
one ``Loader({"x": memmap})`` epoch per shuffle mode, each in a fresh subprocess, and reports the
anonymous memory the process gained (a copy of the data would be as large as the file), the
``tracemalloc`` peak and the peak resident size (the map's file pages read in count there).

Last measured (AMD EPYC, 2 cores, 2 GB; docs/loader.md): full shuffle 0.9 s, 0.064 GB
allocated (the index array, 8 bytes per row), grouped 0.5 s, 0.005 GB; peak RSS 2.10 / 2.04 GB.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 300
ROOT = Path(__file__).resolve().parent.parent


def _status_kb(field: str) -> int:
    """A memory field of /proc/self/status (``RssAnon``, ``VmHWM``), in kB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def child(path: str, rows: int, shuffle: str) -> dict[str, Any]:
    """In a fresh process: one epoch of a Loader over the memmap at ``path``; what it allocated."""
    import tracemalloc

    from looptoolkit import Loader

    x = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, 64))
    loader = Loader({"x": x}, BATCH, shuffle=shuffle, seed=0)
    gc.collect()
    before = peak = _status_kb("RssAnon")
    tracemalloc.start()
    count, start = 0, time.perf_counter()
    for i, batch in enumerate(loader):
        count += len(batch["x"])
        if i % 500 == 0:
            peak = max(peak, _status_kb("RssAnon"))
    seconds = time.perf_counter() - start
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = max(peak, _status_kb("RssAnon"))
    if count != rows:
        raise AssertionError(f"one epoch yielded {count} rows, expected {rows}.")
    return {
        "shuffle": shuffle,
        "rows": count,
        "dataset_gb": rows * 64 * 4 / 1e9,
        "epoch_s": seconds,
        "traced_peak_gb": traced / 1e9,
        "anon_rss_growth_gb": (peak - before) * 1024 / 1e9,
        # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec.
        "peak_rss_gb": _status_kb("VmHWM") * 1024 / 1e9,
    }


def measure(gigabytes: float) -> list[dict[str, Any]]:
    """Write a memmap of ``gigabytes``; one subprocess epoch per shuffle mode; their figures."""
    rows = max(BATCH, int(gigabytes * 1e9 / (64 * 4)))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.f32")
        x = np.memmap(path, dtype=np.float32, mode="w+", shape=(rows, 64))
        for start in range(0, rows, 1 << 20):  # real data on disk, not a sparse file
            stop = min(rows, start + (1 << 20))
            x[start:stop] = np.arange(start, stop, dtype=np.float32)[:, None]
        x.flush()
        del x
        for shuffle in ("full", "grouped"):
            print(f"one epoch, shuffle={shuffle!r}, in a subprocess", file=sys.stderr, flush=True)
            argv = [sys.executable, "-m", "benchmarks.memmap_memory", "--child", path, str(rows)]
            out = subprocess.run(
                [*argv, shuffle], capture_output=True, text=True, check=True, cwd=ROOT
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


def table(results: list[dict[str, Any]]) -> Any:
    """One row per shuffle mode: dataset size, epoch time, memory allocated."""
    from looptoolkit.bench.tables import Table

    formats = {"dataset_gb": ".2f", "epoch_s": ".1f", "anon_rss_growth_gb": ".3f"}
    formats |= {"traced_peak_gb": ".3f", "peak_rss_gb": ".2f"}  # the columns, in order
    rows = [[r["shuffle"], *(format(r[k], f) for k, f in formats.items())] for r in results]
    header = ["shuffle", "data GB", "epoch s", "allocated GB", "traced GB", "peak RSS GB"]
    note = (
        "allocated: anonymous memory the process gained during the epoch (a copy of the data "
        "would be the data's size); peak RSS counts the map's file pages read in."
    )
    return Table("One Loader epoch over a memory-mapped dataset", header, rows, notes=[note])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="size of the memmap (2)")
    parser.add_argument("--child", nargs=3, metavar=("PATH", "ROWS", "SHUFFLE"), help="internal")
    args = parser.parse_args(argv)
    if args.child:
        path, rows, shuffle = args.child
        print(json.dumps(child(path, int(rows), shuffle)))
    else:
        print(table(measure(args.gb)).text())


if __name__ == "__main__":
    main()
