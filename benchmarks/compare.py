"""Every loop variant x backend x workload, checked, then timed interleaved.

Run from the repository root (a benchmark, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.compare                 # default, about 2 minutes on 2 cores
    .venv/bin/python -m benchmarks.compare --workload index --epochs 1000   # the seed talk
    .venv/bin/python -m benchmarks.compare --help

It is ``looptoolkit compare`` (:mod:`looptoolkit.bench.compare`, documented in
``docs/compare.md``): the seed talk's pure Python and NumPy loops, torch
DataLoader per-sample (0 and 2 workers) and over ``GetItemsDataset``, torch
randperm + index, JAX (naive, host gather + ``device_put``, device-resident
jitted gather), tf.data (classic ``shuffle(N).batch``, and the Loader's order
with the gather inside tf.data), and the ``Loader`` on NumPy, torch, JAX and tf
data, on the ``index``, ``tabular`` and ``images`` workloads. Every variant's
batches are checked before it is timed. It writes
``benchmarks/results/compare-<device>.{json,md,png}`` and
``compare-<device>-transfer.png``; ``docs/benchmarks.md`` shows them.

Last measured: see ``benchmarks/results/compare-cpu.md`` (2 cores, AMD EPYC,
shared machine) for the tables and the ratios against the BENCHMARKS.md targets.
"""

from __future__ import annotations

import sys

from looptoolkit.bench.compare import run

if __name__ == "__main__":
    sys.exit(run())
