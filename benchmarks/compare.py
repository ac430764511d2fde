"""Every loop variant x backend x workload, checked, then timed interleaved.

Run from the repository root (a benchmark, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.compare                  # default, about 2.5 minutes on 2 cores
    .venv/bin/python -m benchmarks.compare --preset classic  # which loop for 1000 epochs
    .venv/bin/python -m benchmarks.compare --reference       # rewrite benchmarks/results/
    .venv/bin/python -m benchmarks.compare --help

It is ``looptoolkit compare`` (:mod:`looptoolkit.bench.compare`, documented in
``docs/compare.md``): the best hand-written NumPy loop (permutation + ``take``,
the baseline of every ratio), the NumPy fancy-index loop, the floors (memcpy of
each batch, sequential take, and each framework's cheapest per-batch wrap), pure
Python, torch DataLoader per-sample (0 and 2 workers) and over
``GetItemsDataset``, torch randperm + ``x[idx]`` and + ``index_select``, JAX
(naive, host gather + ``device_put``, device-resident jitted gather), tf.data
(classic ``shuffle(N).batch``, and the Loader's order with the gather inside
tf.data), and the ``Loader`` on NumPy, torch, JAX and tf data, on the ``index``,
``tabular`` and ``images`` workloads. Results go to ``./looptoolkit-results/``
(or ``--out``); ``--reference`` rewrites ``benchmarks/results/compare-<device>.*``.

Last measured (``benchmarks/results/compare-cpu.md``; 2-core AMD EPYC, shared, no
GPU, 2026-11-22, 9 rounds): on the tabular workload, against the best manual loop,
the Loader on NumPy data 1.03 (grouped shuffle 0.84), on torch data 1.10, on JAX
data 1.95, on tf data 1.52; the floors memcpy 0.30 and sequential take 0.36.
"""

from __future__ import annotations

import sys

from looptoolkit.bench.compare import run

if __name__ == "__main__":
    sys.exit(run())
