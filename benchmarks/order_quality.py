"""Shuffle quality and cost of looptoolkit's epoch orders: full vs grouped.

Run from the repository root (a benchmark, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.order_quality          # default, under 30 seconds here
    .venv/bin/python -m benchmarks.order_quality --large  # adds N = 10**8: ~2 minutes, 1.6 GB

It writes ``order_quality-cpu.{json,md}`` to ``./looptoolkit-results/`` (or
``--out``); ``--reference`` rewrites the committed ``benchmarks/results/`` ones
(``docs/order.md`` quotes their tables). For ``shuffle="full"`` and ``"grouped"`` at several group
sizes it measures, with batch 300:

- quality, averaged over epochs at N = 300_000: the probability that two
  samples share a batch, for neighbouring pairs ``(i, i + 1)`` and for random
  pairs (ideal ``B / N`` for both), and the mean displacement
  ``|position - index| / N`` (about 1/3 for a uniform permutation);
- beside it, the bytes each order fetches from a chunked store per byte it uses
  (the same N rows of 64 float32 in chunks of ``--chunk-rows`` 1,024 rows, each
  batch reading its chunks once through a least-recently-used cache of each
  ``--cache-mib`` budget: 0, 4, 16, 64 MiB): the price in bytes of the quality;
- order generation at N = 10**6, 10**7 (and 10**8 with ``--large``): epoch setup
  (``Order.epoch``, all that is paid before the first batch), materialising the
  whole order (``Order.global_order``), and iterating every batch's indices
  (the Loader's path), against one full NumPy permutation ``rng.permutation(N)``;
- the per-batch overhead of iterating a built epoch;
- the time per epoch to gather every batch of a (300_000, 64) float32 array with
  ``take`` in each order, with the order's own cost and without it.

Variants run interleaved (A B C A B C ...) after a warm-up; medians, min and max.

Last measured (``--large``; 2-core AMD EPYC, NumPy 2.4.6, a shared machine; all
figures in ``benchmarks/results/order_quality-cpu.md``), grouped at the default
group size 8192 against ``rng.permutation(N)``: setup 0.013 / 0.021 / 0.030 ms vs
13 / 537 / 3903 ms at N = 10**6 / 10**7 / 10**8 (1033x / 25524x / 128918x);
materialise 11.9 / 94 / 1115 ms (1.1x / 5.7x / 3.5x). Neighbours share a batch
with probability 0.037 (B/G; full: 0.00098, ideal B/N = 0.001), random pairs
0.00099; mean displacement 0.33. Order + gather per 300_000-row epoch: full
11.1 ms, grouped 8192 10.4 ms; iterating a built epoch costs 0.04 us per batch.
Bytes fetched per byte used from chunks of 1,024 rows: full 642x with up to 16 MiB
of cache, 150x with 64 MiB; grouped 8192 32x with none, 2.2x / 1.11x / 1.04x with
4 / 16 / 64 MiB.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from looptoolkit.bench.results import REFERENCE_HELP, Row, results_dir, write_results
from looptoolkit.bench.timing import interleave, machine_info
from looptoolkit.order import DEFAULT_GROUP_SIZE, Order


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument(
        "--groups",
        type=int,
        nargs="+",
        default=[256, 1024, 4096, 8192, 16384, 65536],
        help="group sizes of the grouped variants",
    )
    parser.add_argument(
        "--runs",
        type=int,
        nargs="+",
        default=[8, 16, 32],
        help="run sizes of grouped variants with runs (at the default group size)",
    )
    parser.add_argument("--quality-n", type=int, default=300_000)
    parser.add_argument(
        "--chunk-rows", type=int, default=1024, help="rows per chunk of the fetch model (1024)"
    )
    parser.add_argument(
        "--cache-mib",
        type=float,
        nargs="+",
        default=[0, 4, 16, 64],
        help="chunk cache budgets of the fetch model, MiB of 64 float32 rows (0: a batch's own)",
    )
    parser.add_argument("--quality-epochs", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=1_000_000, help="random pairs per epoch")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument(
        "--large",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also time order generation at N = 10**8 (800 MB per order)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds per size")
    parser.add_argument("--large-rounds", type=int, default=3, help="timing rounds at 10**8")
    parser.add_argument("--gather-rounds", type=int, default=51)
    parser.add_argument("--gather-n", type=int, default=300_000)
    parser.add_argument(
        "--out", default=None, help="results directory (default: ./looptoolkit-results)"
    )
    parser.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def variants(groups: list[int], runs: list[int]) -> list[tuple[str, str, int | None, int]]:
    """(name, shuffle, group_size, run_size) of every order compared."""
    out: list[tuple[str, str, int | None, int]] = [("full", "full", None, 1)]
    out += [(f"grouped {g}", "grouped", g, 1) for g in groups]
    g = DEFAULT_GROUP_SIZE
    out += [(f"grouped {g} runs {r}", "grouped", g, r) for r in runs if r > 1]
    return out


# -- quality ----------------------------------------------------------------


def quality(args: argparse.Namespace) -> list[dict[str, Any]]:
    n, b = args.quality_n, args.batch_size
    rng = np.random.default_rng(12345)
    i = rng.integers(n, size=args.pairs)
    j = (i + rng.integers(1, n, size=args.pairs)) % n  # distinct from i
    rows = []
    for name, shuffle, group, run in variants(args.groups, args.runs):
        order = Order(n, b, shuffle=shuffle, group_size=group, run_size=run, seed=args.seed)
        neighbours, random_pairs, displacement = [], [], []
        for epoch in range(args.quality_epochs):
            g = order.global_order(epoch)
            position = np.empty(n, dtype=np.int64)
            position[g] = np.arange(n)
            batch_of = position // b
            neighbours.append(np.mean(batch_of[:-1] == batch_of[1:]))
            random_pairs.append(np.mean(batch_of[i] == batch_of[j]))
            displacement.append(np.mean(np.abs(position - np.arange(n))) / n)
        rows.append(
            {
                "name": name,
                "n": n,
                "batch_size": b,
                "epochs": args.quality_epochs,
                "p_cobatch_neighbours": float(np.mean(neighbours)),
                "p_cobatch_random": float(np.mean(random_pairs)),
                "p_cobatch_random_stderr": float(np.std(random_pairs) / np.sqrt(len(random_pairs))),
                "mean_displacement": float(np.mean(displacement)),
                "ideal_p_cobatch": b / n,
                "rough_neighbours_b_over_g": (b / group if group else b / n),
            }
        )
        print(f"quality {name}: {rows[-1]}", flush=True)
    return rows


# -- bytes fetched from a chunked store --------------------------------------


def fetched(order: Order, epoch: int, chunk: int, capacity: int) -> int:
    """Chunks fetched in an epoch of ``order`` through an LRU cache of ``capacity`` chunks.

    Each batch reads the chunks its rows lie in, each once; a chunk in the cache is not
    fetched again. ``capacity`` 0 keeps nothing between batches.
    """
    from collections import OrderedDict

    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for idx in order.epoch(epoch):
        for c in np.unique(idx // chunk).tolist():
            if c in cache:
                cache.move_to_end(c)
                continue
            misses += 1
            if capacity:
                cache[c] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return misses


def fetch_model(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Bytes fetched per byte used of each order, reading chunks through a cache budget.

    A (quality-n, 64) float32 array in chunks of ``--chunk-rows`` rows (the layout of the
    bucket workload's zarr array), epoch 0; every chunk but the last is whole.
    """
    n, b, chunk = args.quality_n, args.batch_size, args.chunk_rows
    chunk_bytes = chunk * 64 * 4
    sizes = np.minimum(chunk, n - np.arange(0, n, chunk))
    rows = []
    for name, shuffle, group, run in variants(args.groups, args.runs):
        order = Order(n, b, shuffle=shuffle, group_size=group, run_size=run, seed=args.seed)
        row: dict[str, Any] = {"name": name, "n": n, "chunk_rows": chunk, "by_budget": {}}
        for mib in args.cache_mib:
            capacity = int(mib * 2**20 // chunk_bytes)
            misses = fetched(order, 0, chunk, capacity)
            # every chunk but the last is whole: the misses times a whole chunk, a bound
            row["by_budget"][f"{mib:g}"] = misses * chunk / n
        row["chunks"] = len(sizes)
        rows.append(row)
        print(f"fetch {name}: {row['by_budget']}", flush=True)
    return rows


# -- order generation -------------------------------------------------------


def check_permutation(g: np.ndarray, n: int) -> None:
    if len(g) != n or not np.all(np.bincount(g, minlength=n) == 1):
        raise AssertionError("order is not a permutation")


def generation(args: argparse.Namespace, n: int, rounds: int) -> list[Row]:
    b = args.batch_size
    epochs = iter(range(10**9))

    def full_permutation() -> None:
        np.random.default_rng([args.seed, next(epochs)]).permutation(n)

    cases: list[tuple[str, Callable[[], Any]]] = [("NumPy rng.permutation(N)", full_permutation)]
    full = Order(n, b, shuffle="full", seed=args.seed)
    cases.append(("full: epoch + iterate batches", lambda: consume(full.epoch(next(epochs)))))
    for g in args.groups:
        order = Order(n, b, shuffle="grouped", group_size=g, seed=args.seed)
        # Check the output before timing it: a fast wrong order is not a result.
        materialised = order.global_order(0)
        check_permutation(materialised, n)
        if n <= 10**7 and not np.array_equal(order.epoch(0).indices(), materialised):
            raise AssertionError("iteration differs from the materialised order")
        del materialised
        cases.append((f"grouped {g}: setup (epoch)", bind(lambda o: o.epoch(next(epochs)), order)))
        cases.append(
            (
                f"grouped {g}: materialise (global_order)",
                bind(lambda o: o.global_order(next(epochs)), order),
            )
        )
        cases.append(
            (
                f"grouped {g}: epoch + iterate batches",
                bind(lambda o: consume(o.epoch(next(epochs))), order),
            )
        )
    timings = interleave(cases, rounds=rounds, warmup=1, label=f"orders N={n:.0e}")
    for t in timings:
        t.extra["n"] = n
    return timings


def bind(fn: Callable[[Order], Any], order: Order) -> Callable[[], Any]:
    return lambda: fn(order)


def consume(epoch: Any) -> None:
    for _ in epoch:
        pass


def overhead(args: argparse.Namespace) -> list[Row]:
    """Iterating a prepared full-order epoch: the per-batch cost of the order step itself."""
    n, b = args.gather_n, args.batch_size
    cases: list[tuple[str, Callable[[], Any]]] = []
    for world in (1, 4):
        ep = Order(n, b, shuffle="full", seed=args.seed, world_size=world).epoch(0)
        cases.append((f"iterate {len(ep)} batches, world_size={world}", bind_epoch(ep)))
    timings = interleave(cases, rounds=args.gather_rounds, warmup=2, label="overhead")
    for t in timings:
        t.extra["batches"] = int(t.name.split()[1])
    return timings


def bind_epoch(ep: Any) -> Callable[[], None]:
    return lambda: consume(ep)


# -- gather -----------------------------------------------------------------


def gather(args: argparse.Namespace) -> list[Row]:
    n, b = args.gather_n, args.batch_size
    x = np.random.default_rng(0).random((n, 64), dtype=np.float32)
    cases: list[tuple[str, Callable[[], Any]]] = []
    specs: list[tuple[str, str, int | None, int]] = [("sequential", "none", None, 1)]
    specs += variants(args.groups, args.runs)
    for name, shuffle, group, run in specs:
        order = Order(n, b, shuffle=shuffle, group_size=group, run_size=run, seed=args.seed)
        ep = order.epoch(0)
        fixed = list(ep)
        # Check the rows: each batch's gather equals fancy indexing of those rows.
        probe = fixed[len(fixed) // 2]
        if not np.array_equal(x.take(probe, axis=0), x[probe]):
            raise AssertionError("gather returned the wrong rows")
        if not np.array_equal(np.sort(np.concatenate(fixed)), np.arange(n)):
            raise AssertionError("an epoch does not visit every row once")
        counter = iter(range(1, 10**9))
        cases.append((f"{name}: order + gather", bind(make_epoch(x, counter), order)))
        cases.append((f"{name}: gather only", make_fixed(x, fixed)))
    timings = interleave(cases, rounds=args.gather_rounds, warmup=2, label="gather")
    return timings


def make_epoch(x: np.ndarray, counter: Any) -> Callable[[Order], None]:
    def run(order: Order) -> None:
        for idx in order.epoch(next(counter)):
            x.take(idx, axis=0)

    return run


def make_fixed(x: np.ndarray, batches: list[np.ndarray]) -> Callable[[], None]:
    def run() -> None:
        for idx in batches:
            x.take(idx, axis=0)

    return run


# -- report -----------------------------------------------------------------


def rough(p: float) -> str:
    # B/G approximates the neighbour co-batch probability only for G >= B.
    return f"{p:.2e}" if p <= 1 else "-"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}" if seconds < 1 else f"{seconds * 1e3:,.0f}"


def markdown(payload: dict[str, Any]) -> str:
    m = payload["machine"]
    lines = [
        "# Epoch orders: shuffle quality and cost",
        "",
        f"Command: `{payload['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, "
        f"NumPy {m['versions'].get('numpy', '?')}; {m['date']}  ",
        f"Batch size {payload['batch_size']}; "
        f"DEFAULT_GROUP_SIZE = {payload['default_group_size']}.",
        "Times are medians over interleaved rounds (min-max in brackets); "
        "the machine is shared, so ratios taken in one run are the result.",
        "",
        "## Quality",
        "",
        f"N = {payload['quality'][0]['n']:,}, averaged over "
        f"{payload['quality'][0]['epochs']} epochs; ideal co-batch probability "
        f"B/N = {payload['quality'][0]['ideal_p_cobatch']:.2e}.",
        "",
        "| order | P(i, i+1 share a batch) | vs ideal | B/G (B/N for full) "
        "| P(random pair shares a batch) | mean abs(pos - index) / N |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in payload["quality"]:
        lines.append(
            f"| {row['name']} | {row['p_cobatch_neighbours']:.2e} "
            f"| {row['p_cobatch_neighbours'] / row['ideal_p_cobatch']:,.0f}x "
            f"| {rough(row['rough_neighbours_b_over_g'])} "
            f"| {row['p_cobatch_random']:.2e} ± {row['p_cobatch_random_stderr']:.0e} "
            f"| {row['mean_displacement']:.4f} |"
        )
    if payload.get("fetch"):
        first = payload["fetch"][0]
        budgets = list(first["by_budget"])
        chunk_kib = first["chunk_rows"] * 64 * 4 // 1024
        lines += [
            "",
            "## Bytes fetched from a chunked store, by cache budget",
            "",
            f"The same N = {first['n']:,} rows of 64 float32 in {first['chunks']} chunks of "
            f"{first['chunk_rows']:,} rows ({chunk_kib} KiB, the bucket workload's layout), "
            "epoch 0: each batch reads the chunks its rows lie in, once, through a "
            "least-recently-used cache of the budget (0: nothing kept between batches). "
            "Bytes fetched per byte used (1 = each chunk once); beside the quality above.",
            "",
            "| order | P(i, i+1 share a batch) vs ideal | "
            + " | ".join(f"{b} MiB" for b in budgets)
            + " |",
            "|---|---:|" + "---:|" * len(budgets),
        ]
        quality_of = {r["name"]: r for r in payload["quality"]}
        for row in payload["fetch"]:
            q = quality_of.get(row["name"])
            vs = f"{q['p_cobatch_neighbours'] / q['ideal_p_cobatch']:,.0f}x" if q else ""
            cells = " | ".join(f"{row['by_budget'][b]:.2f}" for b in budgets)
            lines.append(f"| {row['name']} | {vs} | {cells} |")
    lines += [
        "",
        "## Order generation (ms per epoch)",
        "",
        "Setup is what `Order.epoch()` costs before the first batch; materialise "
        "builds the whole n-long order (`global_order`); iterate walks every batch "
        "of 300 (what the Loader does, chunk by chunk). Speed-up is the NumPy "
        "permutation's median over the variant's median.",
        "",
    ]
    for size, timings in payload["generation"].items():
        base = next(t for t in timings if t["name"].startswith("NumPy"))["median_s"]
        lines += [
            f"### N = {int(size):,}",
            "",
            "| variant | median ms | min-max ms | speed-up vs permutation |",
            "|---|---:|---:|---:|",
        ]
        for t in timings:
            lines.append(
                f"| {t['name']} | {ms(t['median_s'])} | {ms(t['min_s'])}-{ms(t['max_s'])} "
                f"| {base / t['median_s']:,.1f}x |"
            )
        lines.append("")
    lines += [
        "## Per-batch overhead of the order step",
        "",
        'Iterating an already built `"full"` epoch (each batch a row view of the '
        "permutation): what the order step adds per batch beyond generating the order.",
        "",
        "| case | median ms | min-max ms | us per batch |",
        "|---|---:|---:|---:|",
    ]
    for t in payload["overhead"]:
        lines.append(
            f"| {t['name']} | {ms(t['median_s'])} | {ms(t['min_s'])}-{ms(t['max_s'])} "
            f"| {t['median_s'] / t['batches'] * 1e6:.2f} |"
        )
    lines += [
        "",
        "## Gather per epoch",
        "",
        f"`x.take(idx, axis=0)` for every batch of a ({payload['gather_n']:,}, 64) float32 "
        "array. *order + gather* includes building the epoch's order (a new epoch "
        "each round); *gather only* reuses precomputed batches.",
        "",
        "| order | order + gather ms | gather only ms | order + gather vs full |",
        "|---|---:|---:|---:|",
    ]
    gathers = {t["name"]: t for t in payload["gather"]}
    full = gathers["full: order + gather"]["median_s"]
    names = [t["name"].split(":")[0] for t in payload["gather"] if "order + gather" in t["name"]]
    for name in names:
        both = gathers[f"{name}: order + gather"]
        only = gathers[f"{name}: gather only"]
        lines.append(
            f"| {name} | {ms(both['median_s'])} [{ms(both['min_s'])}-{ms(both['max_s'])}] "
            f"| {ms(only['median_s'])} [{ms(only['min_s'])}-{ms(only['max_s'])}] "
            f"| {both['median_s'] / full:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)


def summary(row: Row) -> dict[str, Any]:
    """Name, median, min, max (seconds), the rounds and any extra fields of a timed row."""
    times = {"median_s": row.median_s, "min_s": row.min_s, "max_s": row.max_s}
    return {"name": row.name, **times, "rounds_s": row.rounds_s, **row.extra}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    quality_rows = quality(args)
    fetch_rows = fetch_model(args)
    sizes = list(args.sizes) + ([10**8] if args.large else [])
    generation_rows = {}
    for n in sizes:
        rounds = args.large_rounds if n >= 10**8 else args.rounds
        timings = generation(args, n, rounds)
        generation_rows[str(n)] = [summary(t) for t in timings]
        for t in timings:
            print(f"N={n:.0e} {t.name}: {t.median_s * 1e3:.2f} ms", flush=True)
    overhead_rows = [summary(t) for t in overhead(args)]
    gather_rows = [summary(t) for t in gather(args)]
    for row in gather_rows:
        print(f"gather {row['name']}: {row['median_s'] * 1e3:.2f} ms", flush=True)
    payload = {
        "suite": "order_quality",
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
        "machine": machine_info(),
        "batch_size": args.batch_size,
        "default_group_size": DEFAULT_GROUP_SIZE,
        "quality": quality_rows,
        "fetch": fetch_rows,
        "generation": generation_rows,
        "overhead": overhead_rows,
        "gather_n": args.gather_n,
        "gather": gather_rows,
        "elapsed_s": time.perf_counter() - started,
    }
    out = results_dir(args.out, reference=args.reference)
    paths = write_results(out, "order_quality-cpu", payload, markdown(payload))
    print(markdown(payload))
    print("wrote", *map(str, paths))


if __name__ == "__main__":
    main()
