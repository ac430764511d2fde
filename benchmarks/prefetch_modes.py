"""Prefetch on the host: the Loader's two prefetch modes against the plain Loader.

Run from the repository root::

    .venv/bin/python benchmarks/prefetch_modes.py [--rounds 15] [--step-ms 0.3] [--batches 300]

On the tabular workload of ``looptoolkit compare`` ({"x": float32 (N, 64), "y":
int64}, N = 300,000, batch 300, full shuffle), in-memory NumPy, it times three
loops in interleaved rounds: the plain ``Loader(data, B)``, ``Loader(data, B,
device="cpu", prefetch=2)`` (``prefetch_mode="auto"``: the loop's thread) and the
same with ``prefetch_mode="thread"`` (a background thread). Two sections: whole
epochs with no step; and ``--batches`` batches a round with a step that holds
the GIL for ``--step-ms`` (a Python spin, as eager PyTorch's dispatch holds it),
timing each batch's wait (inside ``next()``) and its total. Each round starts
with the next loop in turn. It prints medians over the rounds and their ratios to
the plain Loader. Last measured: see
docs/benchmarks.md ("Prefetch on the host").
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from looptoolkit import Loader

N, WIDTH, BATCH = 300_000, 64, 300


def spin(seconds: float) -> None:
    """Hold the GIL for ``seconds``: a busy loop of Python bytecode."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def epoch_s(loader: Loader) -> float:
    """Seconds of one whole epoch with no step."""
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


def stepped(loader: Loader, batches: int, step_s: float) -> tuple[float, float]:
    """Median seconds per batch (wait + step) and median wait over ``batches`` steps.

    The first batch (binding the epoch) is left out, as ``compare``'s step section does.
    """
    it = iter(loader)
    next(it)
    spin(step_s)
    waits, totals = [], []
    clock = time.perf_counter
    for _ in range(batches):
        start = clock()
        next(it)
        got = clock()
        spin(step_s)
        waits.append(got - start)
        totals.append(clock() - start)
    it.close()
    return statistics.median(totals), statistics.median(waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (15)")
    parser.add_argument("--step-ms", type=float, default=0.3, help="GIL-holding step (0.3)")
    parser.add_argument("--batches", type=int, default=300, help="stepped batches a round")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = {
        "x": rng.standard_normal((N, WIDTH)).astype(np.float32),
        "y": np.arange(N, dtype=np.int64),
    }
    loops: dict[str, Callable[[], Loader]] = {
        "plain Loader(data, B)": lambda: Loader(data, BATCH),
        "device='cpu', prefetch=2 (auto)": lambda: Loader(data, BATCH, device="cpu", prefetch=2),
        "device='cpu', prefetch=2, thread": lambda: Loader(
            data, BATCH, device="cpu", prefetch=2, prefetch_mode="thread"
        ),
    }
    loaders = {name: make() for name, make in loops.items()}
    modes = {name: loader.prefetch_mode for name, loader in loaders.items()}
    epochs: dict[str, list[float]] = {name: [] for name in loaders}
    steps: dict[str, list[tuple[float, float]]] = {name: [] for name in loaders}
    step_s = args.step_ms / 1e3
    for loader in loaders.values():  # warm-up
        epoch_s(loader)
        stepped(loader, 10, step_s)
    names = list(loaders)
    for r in range(args.rounds):
        # Each round starts with another loop, so no loop always runs after the same one.
        turn = names[r % len(names) :] + names[: r % len(names)]
        for name in turn:
            epochs[name].append(epoch_s(loaders[name]))
        for name in turn:
            steps[name].append(stepped(loaders[name], args.batches, step_s))
    plain = next(iter(loaders))
    base = statistics.median(epochs[plain])
    print(f"tabular {N:,} x {WIDTH} float32 + int64 ids, batch {BATCH}, full shuffle;")
    print(f"medians of {args.rounds} interleaved rounds")
    print(f"\nno step: ms per epoch ({len(loaders[plain])} batches)")
    for name, times in epochs.items():
        m = statistics.median(times)
        print(f"  {name:36} [{modes[name]:6}] {m * 1e3:8.2f} ms  {m / base:5.2f}x")
    print(f"\nGIL-holding step of {args.step_ms:g} ms: per batch, {args.batches} batches a round")
    totals = {name: statistics.median(t for t, _ in v) for name, v in steps.items()}
    waits = {name: statistics.median(w for _, w in v) for name, v in steps.items()}
    for name in loaders:
        print(
            f"  {name:36} [{modes[name]:6}] {totals[name] * 1e3:6.3f} ms/batch "
            f"{totals[name] / totals[plain]:5.3f}x  wait {waits[name] * 1e6:6.1f} us "
            f"({waits[name] / waits[plain]:4.2f}x)"
        )


if __name__ == "__main__":
    main()
