"""What ``to_device`` costs on top of the copies it has to make, checked, then timed interleaved.

Run from the repository root (a benchmark, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.transfer               # default, about half a minute on 2 cores
    .venv/bin/python -m benchmarks.transfer --rounds 200  # steadier medians on a noisy machine
    .venv/bin/python -m benchmarks.transfer --reference   # rewrite benchmarks/results/
    .venv/bin/python -m benchmarks.transfer --help

It is ``looptoolkit transfer`` (:mod:`looptoolkit.bench.transfer`, documented in
``docs/benchmarks.md``). On the ``nested`` workload (a dict of lists of
namedtuples, 1000 small leaves) it times the traversal of ``to_device(tree, dev)``
against bare ``optree.tree_map``, ``torch.utils._pytree.tree_map``, a hand-written
recursive ``move_to`` and ``TensorDict.to``, every one doing the same cheap move per
leaf on the host; on the ``images`` workload (uint8 (256, 3, 64, 64) + int64
labels) it times casts and copies. With CUDA it also times pinned, packed and
cast-on-device transfers against one large pinned copy. Results go to
``./looptoolkit-results/`` (or ``--out``); ``--reference`` rewrites
``benchmarks/results/transfer-<device>.*``.

Last measured (``benchmarks/results/transfer-cpu.md``; 2-core AMD EPYC, shared, no
GPU, 2026-11-22): to_device / optree.tree_map = 0.74 and to_device / move_to =
0.66 on torch leaves; 1.19 and 1.09 on NumPy leaves going to torch. The GPU rows
have not been measured yet.
"""

from __future__ import annotations

import sys

from looptoolkit.bench.transfer import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
