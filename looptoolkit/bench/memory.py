"""Memory of one Loader epoch over a memory-mapped dataset (``looptoolkit compare --memmap-gb``).

One subprocess per shuffle mode iterates a ``Loader({"x": memmap})`` epoch and reports the
anonymous memory it gained (a copy of the data would be as large as the file), the
``tracemalloc`` peak and the peak resident size (page cache included). Linux only.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from looptoolkit.bench.tables import Table

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["measure", "table"]

BATCH = 300


def _status_kb(field: str) -> int:
    """A memory field of /proc/self/status (``RssAnon``, ``VmHWM``), in kB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def child(path: str, rows: int, shuffle: str) -> dict[str, Any]:
    """In a subprocess: one epoch of a Loader over the memmap at ``path``; what it allocated."""
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
        "rows": rows,
        "dataset_gb": rows * 64 * 4 / 1e9,
        "epoch_s": seconds,
        "traced_peak_gb": traced / 1e9,
        "anon_rss_growth_gb": (peak - before) * 1024 / 1e9,
        # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec.
        "peak_rss_gb": _status_kb("VmHWM") * 1024 / 1e9,
    }


def measure(gigabytes: float, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Write a memmap of ``gigabytes``; one subprocess epoch per shuffle mode; their figures."""
    rows = max(BATCH, int(gigabytes * 1e9 / (64 * 4)))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.f32")
        if progress is not None:
            progress.stage(f"memory: writing a {rows * 256 / 1e9:.2f} GB memmap")
        x = np.memmap(path, dtype=np.float32, mode="w+", shape=(rows, 64))
        step = 1 << 20
        for start in range(0, rows, step):  # real data on disk, not a sparse file
            stop = min(rows, start + step)
            x[start:stop] = np.arange(start, stop, dtype=np.float32)[:, None]
        x.flush()
        del x
        for shuffle in ("full", "grouped"):
            if progress is not None:
                progress.stage(f"memory: one epoch, shuffle={shuffle!r}, in a subprocess")
            code = (
                "import json, sys\nfrom looptoolkit.bench.memory import child\n"
                "print(json.dumps(child(sys.argv[1], int(sys.argv[2]), sys.argv[3])))"
            )
            argv = [sys.executable, "-c", code, path, str(rows), shuffle]
            out = subprocess.run(argv, capture_output=True, text=True, check=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


def table(results: list[dict[str, Any]]) -> Table:
    """One row per shuffle mode: dataset size, epoch time, memory allocated."""
    formats = {"dataset_gb": ".2f", "epoch_s": ".1f", "anon_rss_growth_gb": ".3f"}
    formats |= {"traced_peak_gb": ".3f", "peak_rss_gb": ".2f"}  # the columns, in order
    rows = [[r["shuffle"], *(format(r[k], f) for k, f in formats.items())] for r in results]
    header = ["shuffle", "data GB", "epoch s", "allocated GB", "traced GB", "peak RSS GB"]
    note = (
        "allocated: anonymous memory the process gained during the epoch (a copy of the data "
        "would be the data's size); peak RSS counts the map's file pages read in."
    )
    return Table("One Loader epoch over a memory-mapped dataset", header, rows, notes=[note])
