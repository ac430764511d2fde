"""The full shuffle by position (``_keyed.Keyed``) against ``rng.permutation``: quality and cost.

Run from the repository root (a benchmark, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.keyed_order              # about 2 minutes here
    .venv/bin/python -m benchmarks.keyed_order --reference  # rewrites benchmarks/results/

It writes ``keyed_order-cpu.{json,md}`` to ``./looptoolkit-results/`` (or
``--out``; ``--reference``: the committed ``benchmarks/results/``), and measures:

- quality, at N = 300,000 and batch 300 (the statistics ``docs/order.md``
  reports for the grouped order, from ``benchmarks/order_quality.py``), for
  ``rng.permutation(N)``, the keyed bijection and the default grouped order:
  the probability that neighbouring rows ``(i, i + 1)`` and random pairs share
  a batch (ideal ``B / N``), the mean displacement ``|position - index| / N``
  (1/3 for a uniform permutation), the correlation of a row's position with its
  index, and the pairwise correlations of the rows' positions between every two
  epochs (ideal 0, standard error ``1 / sqrt(N)``); also at N = 2,000,003 (past
  ``KEYED_MIN_ROWS``, cycle-walking over 2**21 words: the Loader's own order);
- cost: ``Order.epoch`` plus iterating every batch (the Loader's path), the
  materialised permutation against the keyed order at several N around
  ``KEYED_MIN_ROWS`` (both forced through ``Order`` by moving the threshold),
  with one rank and with one rank of 8 (which computes only its own positions).

Last measured (2-core AMD EPYC, NumPy 2.4.6, a shared machine): see
``benchmarks/results/keyed_order-cpu.md``; ``docs/order.md`` quotes it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np

from looptoolkit.bench.results import REFERENCE_HELP, results_dir, write_results
from looptoolkit.bench.timing import interleave, machine_info
from looptoolkit.order import Order
from looptoolkit.order import _keyed as keyed_module
from looptoolkit.order._keyed import KEYED_MIN_ROWS, Keyed
from looptoolkit.order._sources import STREAM_FULL, generator


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument("--quality-n", type=int, nargs="+", default=[300_000, 2_000_003])
    parser.add_argument("--quality-epochs", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=1_000_000, help="random pairs per epoch")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[10**5, 300_000, 10**6, 2**20 + 1, 2 * 10**6, 4 * 10**6, 10**7],
    )
    parser.add_argument("--rounds", type=int, default=7, help="timing rounds per size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default=None, help="results directory (default: ./looptoolkit-results)"
    )
    parser.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    return parser.parse_args(argv)


ORDERS: dict[str, Callable[[int, int, int], np.ndarray]] = {
    "rng.permutation": lambda n, seed, e: generator(seed, e, STREAM_FULL).permutation(n),
    "keyed": lambda n, seed, e: Keyed(n, seed, e).materialize(),
    "grouped 8192": lambda n, seed, e: Order(n, 1, shuffle="grouped", seed=seed).global_order(e),
}


def quality(args: argparse.Namespace, n: int) -> list[dict[str, Any]]:
    b = args.batch_size
    rng = np.random.default_rng(12345)
    i = rng.integers(n, size=args.pairs)
    j = (i + rng.integers(1, n, size=args.pairs)) % n  # distinct from i
    index = np.arange(n)
    rows = []
    for name, make in ORDERS.items():
        neighbours, random_pairs, displacement, with_index = [], [], [], []
        positions = []
        for epoch in range(args.quality_epochs):
            g = make(n, args.seed, epoch)
            position = np.empty(n, dtype=np.int64)
            position[g] = index
            batch_of = position // b
            neighbours.append(np.mean(batch_of[:-1] == batch_of[1:]))
            random_pairs.append(np.mean(batch_of[i] == batch_of[j]))
            displacement.append(np.mean(np.abs(position - index)) / n)
            with_index.append(np.corrcoef(position, index)[0, 1])
            positions.append(position.astype(np.float64))
        pairs = [
            np.corrcoef(positions[a], positions[c])[0, 1]
            for a, c in itertools.combinations(range(len(positions)), 2)
        ]
        rows.append(
            {
                "name": name,
                "n": n,
                "batch_size": b,
                "epochs": args.quality_epochs,
                "p_cobatch_neighbours": float(np.mean(neighbours)),
                "p_cobatch_random": float(np.mean(random_pairs)),
                "mean_displacement": float(np.mean(displacement)),
                "corr_position_index_max_abs": float(np.max(np.abs(with_index))),
                "corr_epoch_pairs_mean": float(np.mean(pairs)),
                "corr_epoch_pairs_max_abs": float(np.max(np.abs(pairs))),
                "corr_epoch_pairs_count": len(pairs),
                "ideal_p_cobatch": b / n,
                "corr_stderr": 1 / np.sqrt(n),
            }
        )
        print(f"quality N={n} {name}: {rows[-1]}", flush=True)
    return rows


@contextmanager
def threshold(rows: int) -> Iterator[None]:
    with mock.patch.object(keyed_module, "KEYED_MIN_ROWS", rows):
        yield


def cost(args: argparse.Namespace, n: int) -> list[dict[str, Any]]:
    b = args.batch_size
    epochs = itertools.count()
    cases: list[tuple[str, Callable[[], Any]]] = []
    for world in (1, 8):
        for name, rows in (("permutation", n + 1), ("keyed", 1)):
            order = Order(n, b, seed=args.seed, rank=world - 1, world_size=world)
            with threshold(rows):  # check before timing: a fast wrong order is not a result
                got = np.concatenate(list(order.epoch(0)))
                want = order.global_order(0)
            padded = np.resize(want, order.padded_length)[world - 1 :: world]
            if not np.array_equal(got, padded):
                raise AssertionError(f"{name}: iteration differs from the global order")
            cases.append((f"{name}, world_size={world}", run(order, rows, epochs)))
    timings = interleave(cases, rounds=args.rounds, warmup=1, label=f"full N={n:,}")
    return [
        {"name": t.name, "n": n, "median_s": t.median_s, "min_s": t.min_s, "max_s": t.max_s}
        for t in timings
    ]


def run(order: Order, rows: int, epochs: Iterator[int]) -> Callable[[], None]:
    def epoch() -> None:
        with threshold(rows):
            for _ in order.epoch(next(epochs)):
                pass

    return epoch


def markdown(payload: dict[str, Any]) -> str:
    m = payload["machine"]
    lines = [
        "# The full shuffle by position: quality and cost",
        "",
        f"Command: `{payload['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, "
        f"NumPy {m['versions'].get('numpy', '?')}; {m['date']}  ",
        f"Batch size {payload['batch_size']}; KEYED_MIN_ROWS = {payload['keyed_min_rows']:,}.",
        "",
        "## Quality",
        "",
        "Averaged over epochs; ideal co-batch probability B/N; correlations' "
        "standard error 1/sqrt(N). *epoch pairs*: the correlation of the rows' "
        "positions in two epochs, over every pair of epochs.",
        "",
        "| N | order | P(i, i+1 share a batch) | P(random pair) | ideal B/N "
        "| mean abs(pos - index) / N | max abs corr(pos, index) "
        "| epoch pairs: mean corr | max abs corr | 1/sqrt(N) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in payload["quality"]:
        lines.append(
            f"| {r['n']:,} | {r['name']} | {r['p_cobatch_neighbours']:.2e} "
            f"| {r['p_cobatch_random']:.2e} | {r['ideal_p_cobatch']:.2e} "
            f"| {r['mean_displacement']:.4f} | {r['corr_position_index_max_abs']:.1e} "
            f"| {r['corr_epoch_pairs_mean']:+.1e} | {r['corr_epoch_pairs_max_abs']:.1e} "
            f"| {r['corr_stderr']:.1e} |"
        )
    lines += [
        "",
        "## Cost: `Order.epoch` + iterate every batch (ms per epoch)",
        "",
        "Medians of interleaved rounds (min-max); the keyed order's ratio to the "
        "materialised permutation's in the same run.",
        "",
        "| N | world_size | permutation | keyed | keyed / permutation |",
        "|---:|---:|---:|---:|---:|",
    ]
    for size, rows in payload["cost"].items():
        by = {r["name"]: r for r in rows}
        for world in (1, 8):
            p, k = by[f"permutation, world_size={world}"], by[f"keyed, world_size={world}"]
            lines.append(
                f"| {int(size):,} | {world} | {p['median_s'] * 1e3:.1f} "
                f"[{p['min_s'] * 1e3:.1f}-{p['max_s'] * 1e3:.1f}] "
                f"| {k['median_s'] * 1e3:.1f} [{k['min_s'] * 1e3:.1f}-{k['max_s'] * 1e3:.1f}] "
                f"| {k['median_s'] / p['median_s']:.2f} |"
            )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    quality_rows = [row for n in args.quality_n for row in quality(args, n)]
    cost_rows = {}
    for n in args.sizes:
        cost_rows[str(n)] = cost(args, n)
        for r in cost_rows[str(n)]:
            print(f"N={n:,} {r['name']}: {r['median_s'] * 1e3:.2f} ms", flush=True)
    payload = {
        "suite": "keyed_order",
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
        "machine": machine_info(),
        "batch_size": args.batch_size,
        "keyed_min_rows": KEYED_MIN_ROWS,
        "quality": quality_rows,
        "cost": cost_rows,
        "elapsed_s": time.perf_counter() - started,
    }
    out = results_dir(args.out, reference=args.reference)
    paths = write_results(out, "keyed_order-cpu", payload, markdown(payload))
    print(markdown(payload))
    print("wrote", *map(str, paths))


if __name__ == "__main__":
    main()
