"""The Loader over chunked stores: read speed and order quality, per store and group size.

Run from the repository root (a benchmark, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.stores                   # 100,000 rows: about a minute
    .venv/bin/python -m benchmarks.stores --rows 1000000    # the figures in docs/stores.md

It builds, in a temporary directory, the same table (``--rows`` x ``--dim``
float32 features and int64 ids) as zarr v3 (zstd and uncompressed, chunks of
``--chunk`` rows), HDF5 (gzip, chunks of ``--chunk`` rows; and contiguous), an
HF ``datasets`` dataset (Arrow, memory-mapped) and a ``.npy`` memmap, then times
one epoch of batch ``--batch``, all variants of a store interleaved (median of
``--rounds`` rounds after a warm-up), warm page cache:

- ``memory take``: the best in-memory loop, ``take`` of a permutation's batches
  on the arrays in RAM (the unit of the ratios);
- ``sequential read``: the store read from start to end a chunk at a time
  through its own library (``z[a:b]``, ``ds[a:b]``, ``dataset[a:b]`` in numpy
  format), the floor of any order that reads every row;
- ``Loader sequential`` and ``Loader grouped k`` (groups of ``k`` whole chunks,
  ``--group-chunks``), and for memmaps and contiguous HDF5 the in-memory
  ``Loader full`` beside them;
- ``Loader full (sorted reads)``: a full shuffle, each batch read sorted and
  deduplicated; timed over its first ``--full-batches`` batches and scaled to
  the epoch (a whole epoch takes minutes on compressed stores; Arrow's is timed
  whole); for ``hf-arrow`` (``datasets`` saves record batches of 1,000 rows:
  1,000 of them for 1,000,000 rows) beside the same Arrow data in one record
  batch.

And for a full shuffle with background reads (``prefetch=2``): the time to its
first batch against one batch read in the loop's thread (``prefetch=0``), the
time ``close()`` takes in the middle of the next batch's read, and the time
until the reading thread has ended (median of ``--rounds``).

Beside the speed, for each group size, the order's quality over an epoch:
chunks touched per batch and per window of 8 batches, the probability that
neighbouring rows share a batch (ideal ``batch / rows``), and the lag-1
autocorrelation of a label stored sorted (ideal 0, sequential 1). And the
memory of one epoch of ``Loader grouped`` at the default group size:
the cache's budget and peak, what iterating the order takes alone, and the
peak of traced allocations (the epoch's, to compare with budget + batches + order).

Results: ``stores-cpu.{json,md}`` in ``./looptoolkit-results/`` (or ``--out``;
``--reference`` writes ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from looptoolkit import Loader
from looptoolkit.bench.results import REFERENCE_HELP, results_dir, write_results
from looptoolkit.bench.timing import interleave, machine_info
from looptoolkit.order import Order


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--group-chunks", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--quality-chunks", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--full-batches", type=int, default=20)
    parser.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    parser.add_argument("--out", default=None, help="results directory")
    parser.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    return parser.parse_args(argv)


# -- the stores -------------------------------------------------------------------

STORES = (
    "zarr-zstd", "zarr-raw", "hdf5-gzip", "hdf5-lzf", "hdf5-contiguous", "hf-arrow", "npy-memmap",
)  # fmt: skip


def build(kind: str, root: Path, x: np.ndarray, ids: np.ndarray, chunk: int) -> Any:
    """The table as store ``kind``: data for the Loader, and its sequential reader."""
    if kind.startswith("zarr"):
        import zarr

        codecs = {"compressors": None} if kind == "zarr-raw" else {}
        group = zarr.open_group(str(root / f"{kind}.zarr"), mode="w")
        for name, a in (("x", x), ("ids", ids)):
            chunks = (chunk, *a.shape[1:])
            group.create_array(name, shape=a.shape, chunks=chunks, dtype=a.dtype, **codecs)
            group[name][:] = a
        return {"x": group["x"], "ids": group["ids"]}
    if kind.startswith("hdf5"):
        import h5py

        path = root / f"{kind}.h5"
        with h5py.File(path, "w") as f:
            for name, a in (("x", x), ("ids", ids)):
                if kind in ("hdf5-gzip", "hdf5-lzf"):
                    chunks = (chunk, *a.shape[1:])
                    f.create_dataset(name, data=a, chunks=chunks, compression=kind[5:])
                else:
                    f.create_dataset(name, data=a)
        f = h5py.File(path, "r")
        return {"x": f["x"], "ids": f["ids"]}
    if kind == "hf-arrow":
        import datasets
        import pyarrow as pa

        vectors = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
        table = pa.table({"x": vectors, "ids": ids})
        datasets.Dataset(table).save_to_disk(str(root / "hf"))
        return datasets.load_from_disk(str(root / "hf")).with_format("numpy")
    if kind == "npy-memmap":
        np.save(root / "x.npy", x)
        np.save(root / "ids.npy", ids)
        return {name: np.load(root / f"{name}.npy", mmap_mode="r") for name in ("x", "ids")}
    raise ValueError(f"unknown store {kind!r}")


def sequential(data: Any, n: int, chunk: int) -> Callable[[], None]:
    """Read ``data`` from start to end, a chunk at a time, through its own library."""
    if isinstance(data, dict):
        leaves = list(data.values())

        def read() -> None:
            for start in range(0, n, chunk):
                for leaf in leaves:
                    np.asarray(leaf[start : start + chunk])

        return read

    def read_dataset() -> None:  # datasets: rows of all columns, numpy format
        for start in range(0, n, chunk):
            data[start : start + chunk]

    return read_dataset


def epoch(loader: Loader, limit: int | None = None) -> Callable[[], None]:
    """One pass of ``loader`` (its first ``limit`` batches)."""

    def run() -> None:
        for i, _ in enumerate(loader):
            if limit is not None and i + 1 >= limit:
                break

    return run


def memory_take(x: np.ndarray, ids: np.ndarray, batch: int) -> Callable[[], None]:
    perm = np.random.default_rng(0).permutation(len(x))

    def run() -> None:
        for start in range(0, len(x), batch):
            idx = perm[start : start + batch]
            x.take(idx, axis=0)
            ids.take(idx)

    return run


def one_record_batch(dataset: Any) -> Any:
    """The table of a ``datasets.Dataset`` as one record batch in a memory-mapped Arrow file."""
    import datasets
    import pyarrow as pa

    path = str(Path(dataset.cache_files[0]["filename"]).parent / "one.arrow")
    table = dataset.data.table.combine_chunks()
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=len(table))
    return datasets.Dataset(pa.ipc.open_file(pa.memory_map(path)).read_all())


def _readers() -> int:
    return sum(t.name == "looptoolkit-loader-prefetch" for t in threading.enumerate())


def latency(data: Any, batch: int, rounds: int) -> dict[str, float]:
    """A full shuffle's first batch and ``close()``, against one batch read in the loop's thread.

    Each round reads the same batch both ways (one seed per round), then closes
    the background pass half a batch's read into its next batch.
    """
    reads, firsts, closes, ends = [], [], [], []
    for _ in Loader(data, batch, shuffle="full", seed=rounds, prefetch=2):  # warm-up
        break
    for r in range(rounds):
        alone = iter(Loader(data, batch, shuffle="full", seed=r, prefetch=0))
        t = time.perf_counter()
        next(alone)
        reads.append(time.perf_counter() - t)
        alone.close()
        it = iter(Loader(data, batch, shuffle="full", seed=r, prefetch=2))
        t = time.perf_counter()
        next(it)
        firsts.append(time.perf_counter() - t)
        time.sleep(reads[-1] / 2)
        t = time.perf_counter()
        it.close()
        closes.append(time.perf_counter() - t)
        while _readers():
            time.sleep(0.001)
        ends.append(time.perf_counter() - t)
    read = float(np.median(reads))
    return {
        "batch_read_s": read,
        "first_batch_s": float(np.median(firsts)),
        "first_x_read": float(np.median(firsts)) / read,
        "close_s": float(np.median(closes)),
        "thread_end_s": float(np.median(ends)),
    }


# -- order quality ----------------------------------------------------------------


def quality(n: int, batch: int, chunk: int, k: int | None) -> dict[str, float]:
    """How an epoch of the grouped order with ``k``-chunk groups mixes (None: a full shuffle)."""
    if k is None:
        order = Order(n, batch, shuffle="full", seed=1)
    else:
        order = Order(n, batch, shuffle="grouped", seed=1, group_size=k * chunk, chunk_rows=chunk)
    idx = order.global_order(0)
    usable = len(idx) // batch * batch
    batches = idx[:usable].reshape(-1, batch)
    chunks = batches // chunk
    per_batch = np.mean([len(np.unique(c)) for c in chunks])
    windows = chunks[: len(chunks) // 8 * 8].reshape(-1, 8 * batch)
    per_window = np.mean([len(np.unique(w)) for w in windows]) if len(windows) else float("nan")
    position = np.empty(n, dtype=np.int64)
    position[idx] = np.arange(n)
    batch_of = position // batch
    neighbours = float(np.mean(batch_of[:-1] == batch_of[1:]))
    label = (idx * 10) // n  # ten classes, stored sorted
    autocorrelation = float(np.corrcoef(label[:-1], label[1:])[0, 1])
    return {
        "chunks_per_batch": float(per_batch),
        "chunks_per_8_batches": float(per_window),
        "p_neighbours_share_batch": neighbours,
        "label_lag1_autocorrelation": autocorrelation,
    }


def _traced(run: Callable[[], Any]) -> int:
    """Peak of the memory traced while ``run()`` runs, above what was traced before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def memory(data: Any, batch: int) -> dict[str, Any]:
    """Cache budget and peak, the order's own memory, and the traced peak, over one epoch."""
    loader = Loader(data, batch, shuffle="grouped", seed=2)
    for _ in loader:  # warm: the codecs' first buffers
        pass
    order = _traced(lambda: [None for _ in loader.order.epoch(1)])
    # The warm pass left its arrays for the next one to read into (untraced): drop
    # them, so that the traced epoch allocates all the memory it holds.
    store = loader._rows.store
    if store is not None:
        store._left = []
    peak = _traced(lambda: [None for _ in loader])
    store = loader._rows.store
    cache = None if store is None else store.last
    row = sum(np.asarray(leaf[:1]).nbytes for leaf in loader._rows.leaves)
    # Batches in flight: blocks handed over (the queue's, the thread's, the loop's,
    # and the one the loop's last batch, a view of its block, keeps alive).
    block = 1 if store is None else store.block
    flight = (-(-loader.prefetch // block) + 3) * block if store is not None else 1
    return {
        "cache_budget_bytes": None if cache is None else cache.budget,
        "cache_peak_bytes": None if cache is None else cache.peak,
        "traced_peak_bytes": peak,
        "batch_bytes": row * batch,
        "batches_in_flight": flight,
        "order_bytes": order,
        "bound_bytes": (0 if cache is None else cache.budget) + flight * row * batch + order,
        "prefetch": loader.prefetch,
    }


# -- the run ----------------------------------------------------------------------


def run_store(
    kind: str,
    data: Any,
    args: argparse.Namespace,
    base: Callable[[], None],
    ram: dict[str, np.ndarray],
) -> dict[str, Any]:
    n, b = args.rows, args.batch
    variants: list[tuple[str, Callable[[], None]]] = [("memory take", base)]
    variants.append(("sequential read", sequential(data, n, args.chunk)))
    variants.append(("Loader sequential", epoch(Loader(data, b, shuffle=False))))
    for k in args.group_chunks:
        loader = Loader(data, b, shuffle="grouped", seed=1, group_size=k * args.chunk)
        variants.append((f"Loader grouped {k}", epoch(loader)))
    if kind in ("npy-memmap", "hdf5-contiguous"):
        variants.append(("in-memory Loader full", epoch(Loader(ram, b, shuffle="full", seed=1))))
    arrow = kind.startswith("hf-arrow")  # cheap sorted reads: a whole epoch
    full_limit = -(-n // b) if arrow else min(args.full_batches, -(-n // b))
    # In the loop's thread: a pass left after `full_limit` batches leaves no read
    # running in a background thread to slow the next variant down.
    full = Loader(data, b, shuffle="full", seed=1, prefetch=0)
    variants.append(("Loader full (sorted reads)", epoch(full, full_limit)))
    extra: dict[str, Any] = {}
    if kind == "hf-arrow":  # the same Arrow data in one record batch, memory-mapped too
        extra["record_batches"] = data.data.table.column("x").num_chunks
        one = one_record_batch(data)
        loader = Loader(one, b, shuffle="full", seed=1, prefetch=0)
        variants.append(("Loader full, 1 record batch", epoch(loader)))
    timings = interleave(variants, rounds=args.rounds, warmup=1, label=kind)
    epochs = {t.name: t.median_s for t in timings}
    epochs["Loader full (sorted reads)"] *= len(full) / full_limit
    unit = epochs["memory take"]
    floor = epochs["sequential read"]
    rows = [
        {
            "variant": name,
            "epoch_s": seconds,
            "x_memory_take": seconds / unit,
            "x_sequential": seconds / floor,
        }
        for name, seconds in epochs.items()
    ]
    for row in rows:
        ratios = f"{row['x_memory_take']:9.1f}x take {row['x_sequential']:6.2f}x seq"
        print(f"{kind:16} {row['variant']:28} {row['epoch_s']:9.3f} s {ratios}", flush=True)
    stats = latency(data, b, args.rounds)
    print(
        f"{kind:16} full shuffle: first batch {stats['first_batch_s'] * 1e3:.1f} ms "
        f"({stats['first_x_read']:.2f}x one batch read, {stats['batch_read_s'] * 1e3:.1f} ms), "
        f"close {stats['close_s'] * 1e3:.1f} ms, thread ended {stats['thread_end_s'] * 1e3:.1f} ms",
        flush=True,
    )
    return {"store": kind, "rows": rows, "latency": stats, "memory": memory(data, b), **extra}


def markdown(payload: dict[str, Any]) -> str:
    a = payload["args"]
    lines = [
        f"# The Loader over stores ({a['rows']:,} x {a['dim']} float32 + int64 ids, "
        f"batch {a['batch']}, chunks of {a['chunk']} rows)",
        "",
        f"Command: `{payload['command']}`. Machine: {payload['machine'].get('cpu', '?')}.",
        "",
        "| store | variant | epoch (s) | x memory take | x sequential read |",
        "|---|---|---:|---:|---:|",
    ]
    for store in payload["stores"]:
        for row in store["rows"]:
            lines.append(
                f"| {store['store']} | {row['variant']} | {row['epoch_s']:.3f} | "
                f"{row['x_memory_take']:.1f} | {row['x_sequential']:.2f} |"
            )
    lines += ["", "A full shuffle with background reads (`prefetch=2`): its first batch, and "]
    lines[-1] += "`close()` half a batch's read into the next batch:"
    lines += ["", "| store | one batch read (loop's thread) | first batch | x one read "]
    lines[-1] += "| close() | reading thread ended |"
    lines += ["|---|---:|---:|---:|---:|---:|"]
    for store in payload["stores"]:
        t = store["latency"]
        cells = [
            f"{t['batch_read_s'] * 1e3:.1f} ms",
            f"{t['first_batch_s'] * 1e3:.1f} ms",
            f"{t['first_x_read']:.2f}",
            f"{t['close_s'] * 1e3:.1f} ms",
            f"{t['thread_end_s'] * 1e3:.1f} ms",
        ]
        lines.append(f"| {store['store']} | " + " | ".join(cells) + " |")
    lines += ["", "Memory over one epoch of `Loader grouped` (default group size):", ""]
    lines += ["| store | cache budget | cache peak | batches in flight | order alone "]
    lines[-1] += "| budget + batches + order | traced peak |"
    lines += ["|---|---:|---:|---:|---:|---:|---:|"]
    for store in payload["stores"]:
        m = store["memory"]
        cells = [
            _mib(m["cache_budget_bytes"]),
            _mib(m["cache_peak_bytes"]),
            f"{m['batches_in_flight']} x {m['batch_bytes'] / 1024:.0f} KiB",
            _mib(m["order_bytes"]),
            _mib(m["bound_bytes"]),
            _mib(m["traced_peak_bytes"]),
        ]
        lines.append(f"| {store['store']} | " + " | ".join(cells) + " |")
    lines += ["", "Order quality over an epoch (groups of k whole chunks; full: a full shuffle):"]
    lines += ["", "| order | chunks / batch | chunks / 8 batches | P(neighbours share a batch) "]
    lines[-1] += "| label lag-1 autocorrelation |"
    lines += ["|---|---:|---:|---:|---:|"]
    for row in payload["quality"]:
        cells = [
            f"{row['chunks_per_batch']:.1f}",
            f"{row['chunks_per_8_batches']:.1f}",
            f"{row['p_neighbours_share_batch']:.4f}",
            f"{row['label_lag1_autocorrelation']:.4f}",
        ]
        lines.append(f"| {row['order']} | " + " | ".join(cells) + " |")
    lines.append(f"\nIdeal P(neighbours share a batch): {a['batch'] / a['rows']:.4f}.")
    return "\n".join(lines) + "\n"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / (1 << 20):.1f} MiB"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.dim), dtype=np.float32)
    ids = np.arange(args.rows, dtype=np.int64)
    ram = {"x": x, "ids": ids}
    base = memory_take(x, ids, args.batch)
    root = Path(tempfile.mkdtemp(prefix="looptoolkit-stores-"))
    results = []
    try:
        for kind in args.stores:
            data = build(kind, root, x, ids, args.chunk)
            results.append(run_store(kind, data, args, base, ram))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    orders = [("full", None)] + [(f"grouped {k}", k) for k in args.quality_chunks]
    quality_rows = [
        {"order": name, **quality(args.rows, args.batch, args.chunk, k)} for name, k in orders
    ]
    payload = {
        "command": " ".join(
            ["python -m benchmarks.stores", *(sys.argv[1:] if argv is None else argv)]
        ),
        "args": vars(args),
        "machine": machine_info(),
        "stores": results,
        "quality": quality_rows,
        "seconds": time.perf_counter() - started,
    }
    out = results_dir(args.out, reference=args.reference)
    text = markdown(payload)
    paths = write_results(out, "stores-cpu", payload, text)
    print(text)
    print("wrote", *map(str, paths))


if __name__ == "__main__":
    main()
