"""Weighted sampling at scale: one epoch's draw against ``torch.multinomial``.

Run from the repository root::

    .venv/bin/python benchmarks/weighted_sampling.py [--n 10000000] [--repeat 5]

Draws ``n`` samples from ``n`` weights, with and without replacement, with the
Loader's order (``Order(n, ..., weights=w).epoch(e).indices()``, the whole
epoch on one rank: without replacement every rank computes it so; with
replacement, from 2**20 draws on, a rank of many computes only its own) and
with ``torch.multinomial`` on the same weights, interleaved, and prints the
median times, their ratio and the peak extra memory of the Loader's draw
(tracemalloc: NumPy's allocations). Last measured: see docs/benchmarks.md
("Weighted sampling").
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np
import torch

from looptoolkit.order import Order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="rows and samples per epoch")
    parser.add_argument("--repeat", type=int, default=5, help="timed draws of each")
    args = parser.parse_args()
    n = args.n
    weights = np.random.default_rng(0).random(n) + 0.01
    tensor = torch.from_numpy(weights)
    print(f"{n:,} samples from {n:,} weights; median of {args.repeat} interleaved draws")
    for replacement in (True, False):
        order = Order(n, 1024, weights=weights, replacement=replacement)
        ours, theirs = [], []
        for epoch in range(args.repeat):
            t = time.perf_counter()
            order.epoch(epoch).indices()
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            torch.multinomial(tensor, n, replacement=replacement)
            theirs.append(time.perf_counter() - t)
        tracemalloc.start()
        order.epoch(args.repeat).indices()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        a, b = statistics.median(ours), statistics.median(theirs)
        print(
            f"replacement={replacement!s:5}  looptoolkit {a:6.3f} s  torch.multinomial {b:6.3f} s  "
            f"ratio {a / b:4.2f}x  peak {peak / n:4.1f} bytes/row"
        )


if __name__ == "__main__":
    main()
