"""Mixtures of documents against one source of the same documents, per ragged layout.

Run from the repository root::

    .venv/bin/python -m benchmarks.mix_ragged [--docs 20000] [--rounds 7]
    .venv/bin/python -m benchmarks.mix_ragged --docs 20000 --rounds 9 --reference  # rewrites
                                                                  # benchmarks/results/

Builds ``--docs`` documents of the ``tokens`` workload (lognormal lengths, median 250, in
[8, 4000], int32 tokens), split into two and five sources. Per layout (padded batches of 32,
padding-free flat batches of 32, packed rows of 2,048, and a token budget of 8,192), times one
epoch of the Loader over the single source and over the mixtures of the same documents
(weights in proportion to the sources' documents, so the epochs hold the same documents),
interleaved round by round after a warm-up epoch, and prints the median ms per epoch with its
min-max and the ratio to the single source. The target: every mixture within 1.1x of the single
source. Writes ``mix_ragged-cpu.json`` and ``.md`` to ``--out`` (default
``./looptoolkit-results``; ``--reference``: the committed ``benchmarks/results/``).
Last measured: see docs/benchmarks.md ("Mixtures").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

import looptoolkit as lt
from looptoolkit.bench.results import results_dir, write_results
from looptoolkit.bench.timing import machine_info

LAYOUTS: dict[str, dict[str, Any]] = {
    "pad": {"batch_size": 32},
    "flat": {"batch_size": 32, "layout": "flat"},
    "pack": {"batch_size": 4, "layout": lt.PackLayout(seq_len=2048)},
    "budget": {"batch_tokens": 8192, "batch_size": None},
}
TARGET = 1.1


def documents(n: int, seed: int = 0) -> lt.Ragged:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(250), 0.9, n), 8, 4000).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    return lt.Ragged(values, offsets)


def split(col: lt.Ragged, k: int) -> dict[str, dict[str, lt.Ragged]]:
    cuts = np.linspace(0, len(col), k + 1).astype(int)
    offsets = np.asarray(col.offsets)
    values = np.asarray(col.values)
    out = {}
    for s in range(k):
        a, b = cuts[s], cuts[s + 1]
        part = values[offsets[a] : offsets[b]]
        out[f"s{s}"] = {"tokens": lt.Ragged(part, offsets[a : b + 1] - offsets[a])}
    return out


def epoch_ms(loader: lt.Loader) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return (time.perf_counter() - start) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=None, help="results folder (./looptoolkit-results)")
    parser.add_argument(
        "--reference", action="store_true", help="write to the committed benchmarks/results/"
    )
    args = parser.parse_args(argv)
    col = documents(args.docs)
    data = {
        "single": {"tokens": col},
        "mix-2": lt.Mix(split(col, 2)),
        "mix-5": lt.Mix(split(col, 5)),
    }
    rows = []
    for layout, options in LAYOUTS.items():
        loaders = {name: lt.Loader(d, seed=0, **options) for name, d in data.items()}
        for loader in loaders.values():  # warm-up: the plans' first epoch, caches
            epoch_ms(loader)
        times: dict[str, list[float]] = {name: [] for name in loaders}
        for _ in range(args.rounds):
            for name, loader in loaders.items():
                times[name].append(epoch_ms(loader))
        base = statistics.median(times["single"])
        for name, ts in times.items():
            med = statistics.median(ts)
            rows.append(
                {
                    "layout": layout,
                    "data": name,
                    "batches": len(loaders[name]),
                    "median_ms": round(med, 2),
                    "min_ms": round(min(ts), 2),
                    "max_ms": round(max(ts), 2),
                    "ratio": round(med / base, 3),
                }
            )
    lines = [
        "| layout | data | batches | ms/epoch (median) | min-max | vs single source |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['data']} | {r['batches']} | {r['median_ms']:.1f} | "
            f"{r['min_ms']:.1f}-{r['max_ms']:.1f} | {r['ratio']:.2f}x |"
        )
    table = "\n".join(lines)
    print(table)
    payload = {
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
        "machine": machine_info(),
        "docs": args.docs,
        "rounds": args.rounds,
        "target": TARGET,
        "rows": rows,
    }
    text = (
        f"# Ragged mixtures against one source\n\n`{payload['command']}` ({args.docs} "
        f"documents, medians of {args.rounds} interleaved rounds)\n\n{table}\n"
    )
    out = results_dir(args.out, reference=args.reference)
    print("wrote", *map(str, write_results(out, "mix_ragged-cpu", payload, text)))
    worst = max(r["ratio"] for r in rows if r["data"] != "single")
    print(f"worst mixture ratio: {worst:.2f}x (target {TARGET}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
