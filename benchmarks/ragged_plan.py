"""Planning an epoch of variable-length documents: the Loader's plan per layout, at 10M documents.

Run from the repository root::

    .venv/bin/python benchmarks/ragged_plan.py [--docs 10000000] [--rounds 5]

Builds a ``Ragged`` column of ``--docs`` documents of the ``tokens`` workload's lengths (lognormal,
median 250, in [8, 4000]) over values that take no memory (one int32 broadcast over the tokens:
planning reads only the lengths), then times, per batching, ``loader.order.epoch(e)`` for a new
epoch ``e`` each round (the whole plan of the epoch, as each rank computes it at its start; for
batches of ``batch_size`` documents the epoch's order, ``.indices()``),
the batchings interleaved with one NumPy permutation of the documents (what any shuffle costs:
a load-independent yardstick on a shared machine), and prints the median seconds with their
min-max and their ratio to the permutation's. The target: every batching under 1 s. Last
measured: see docs/benchmarks.md ("tokens").
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from looptoolkit import FitLayout, Loader, Order, PackLayout, Ragged

# name -> the Loader's options; the tokens workload's batchings, and first-fit packing.
BATCHINGS: dict[str, dict[str, Any]] = {
    "pad": {"batch_size": 32, "layout": "pad"},
    "group": {"batch_size": 32, "layout": "pad", "group_by_length": True},
    "budget": {"layout": "pad", "batch_tokens": 8192, "group_by_length": True},
    "pad-budget": {"layout": "pad", "batch_tokens": 8192},
    "pack": {"batch_size": 4, "layout": PackLayout(seq_len=2048)},
    "flat": {"batch_size": 32, "layout": "flat"},
    "flat-budget": {"layout": "flat", "batch_tokens": 8192},
    "fit": {"batch_size": 4, "layout": FitLayout(seq_len=2048, long_rows="split")},
}
TARGET_S = 1.0
REFERENCE = "numpy permutation"  # one permutation of the documents: what any shuffle costs


def column(docs: int, seed: int = 0) -> Ragged:
    """``docs`` documents of the tokens workload's lengths over values that take no memory."""
    rng = np.random.default_rng([seed, 33])
    lengths = np.clip(np.rint(rng.lognormal(np.log(250.0), 0.9, docs)), 8, 4000).astype(np.int64)
    offsets = np.zeros(docs + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.broadcast_to(np.int32(0), (int(offsets[-1]),))  # no tokens in memory
    return Ragged(values, offsets)


def plan_times(
    docs: int, rounds: int, names: list[str] | None = None, seed: int = 0
) -> dict[str, list[float]]:
    """Seconds of each round's ``loader.order.epoch(e)`` per batching, the batchings interleaved."""
    data = column(docs, seed)
    loaders = {name: Loader(data, seed=seed, **BATCHINGS[name]) for name in names or BATCHINGS}
    times: dict[str, list[float]] = {REFERENCE: []} | {name: [] for name in loaders}
    for epoch in range(1, rounds + 1):  # epoch 0 was planned at construction
        start = time.perf_counter()
        np.random.default_rng([seed, epoch]).permutation(docs)
        times[REFERENCE].append(time.perf_counter() - start)
        for name, loader in loaders.items():
            start = time.perf_counter()
            plan = loader.order.epoch(epoch)
            if isinstance(loader.order, Order):  # rows in batches of batch_size: the order, lazy
                plan.indices()
            times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    """Time the plans and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000_000, help="documents (10,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="epochs planned per batching (5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the lengths and orders (0)")
    args = parser.parse_args()
    times = plan_times(args.docs, args.rounds, seed=args.seed)
    print(f"Planning one epoch of {args.docs:,} documents, median of {args.rounds} rounds\n")
    print("| batching | Loader options | s (median) | min-max | vs permutation | under 1 s |")
    print("|---|---|---:|---:|---:|---|")
    reference = statistics.median(times[REFERENCE])
    for name, seconds in times.items():
        what = BATCHINGS.get(name)
        options = ", ".join(f"{k}={v!r}" for k, v in what.items()) if what else "(n)"
        median, spread = statistics.median(seconds), f"{min(seconds):.3f}-{max(seconds):.3f}"
        row = f"| {name} | `{options}` | {median:.3f} | {spread} | {median / reference:.2f} |"
        print(f"{row} {median < TARGET_S} |")


if __name__ == "__main__":
    main()
