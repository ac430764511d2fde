"""Epochs of a Parquet file and of a token file in a bucket, against the same data in memory.

Run from the repository root (a study, not a test: it times, never asserts)::

    .venv/bin/python -m benchmarks.bucket_formats            # about half a minute here

The local S3 server of the tests (``looptoolkit.bench.s3local``: moto in a child
process, behind the latency proxy, ``--latency`` added per request, 20 ms). Two
data sets, each also held in memory to check every epoch against:

- Parquet: 200,000 rows of a vector of 32 float32 (a fixed-size list) and an
  int64 label, row groups of 4,096 rows, uncompressed (about 26 MiB); read with
  the grouped and the sequential order, batch 256.
- Token file: 20,000 documents of 1 to 1,000 uint16 tokens (about 19 MiB of
  values, offsets beside them in a ``.npy``), read as a `Ragged` column with
  the grouped order, padded batches of 32 rows and packed rows of 1,024 tokens.

Per epoch: its time, the MiB/s of the values it used, the requests the proxy
saw and the bytes it sent, against the bytes of the data read. Best of
``--repeat`` epochs (each on a new Loader). Beside the Parquet epochs, the
server's floor: the file's row-group ranges fetched with 16 in flight and
nothing decoded (moto reads the whole object for each ranged GET, so ranges of
one large object cost it more than whole small objects do).

Last run (2 cores, 20 ms a request): see docs/stores.md, "Object storage".
"""

from __future__ import annotations

import argparse
import io
import time
from typing import Any

import numpy as np

from looptoolkit import Loader, PackLayout, Ragged
from looptoolkit.bench.s3local import LocalS3
from looptoolkit.stores import bucket


def parquet_bytes(rows: int, group: int) -> tuple[bytes, dict[str, np.ndarray]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((rows, 32)).astype(np.float32)
    labels = rng.integers(0, 1000, rows)
    table = pa.table(
        {"v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 32), "label": labels}
    )
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=group, compression="none")
    return out.getvalue(), {"v": vectors, "label": labels}


def tokens(docs: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    offsets = np.concatenate(([0], np.cumsum(rng.integers(1, 1001, docs)))).astype(np.int64)
    return rng.integers(0, 50_000, int(offsets[-1])).astype(np.uint16), offsets


def floor(s3: LocalS3, name: str, key: str, ranges: list[tuple[int, int]]) -> float:
    """Seconds to fetch ``ranges`` of ``key`` with 16 requests in flight, nothing decoded."""
    import asyncio

    import obstore
    from obstore.store import S3Store

    store = S3Store(name, **s3.obstore_options())

    async def go() -> None:
        gate = asyncio.Semaphore(16)

        async def one(a: int, b: int) -> None:
            async with gate:
                await obstore.get_range_async(store, key, start=a, end=b)

        await asyncio.gather(*(one(a, b) for a, b in ranges))

    start = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - start


def row_groups(blob: bytes) -> list[tuple[int, int]]:
    """The byte range of each row group of a Parquet file (all its columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    md = pq.read_metadata(pa.BufferReader(blob))
    out = []
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        columns = [group.column(i) for i in range(group.num_columns)]
        starts = [
            min(c.data_page_offset, c.dictionary_page_offset or c.data_page_offset) for c in columns
        ]
        ends = [a + c.total_compressed_size for a, c in zip(starts, columns, strict=True)]
        out.append((min(starts), max(ends)))
    return out


def timed(s3: LocalS3, make: Any, check: Any, repeat: int) -> dict[str, float]:
    best: dict[str, float] | None = None
    for _ in range(repeat):
        loader = make()
        s3.reset_stats()
        start = time.perf_counter()
        got = list(loader)
        seconds = time.perf_counter() - start
        check(loader, got)
        seen = s3.stats.snapshot()
        row = {"s": seconds, "requests": seen["requests"], "bytes": seen["body_bytes"]}
        if best is None or seconds < best["s"]:
            best = row
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per request")
    parser.add_argument("--repeat", type=int, default=3, help="epochs timed per case")
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    blob, columns = parquet_bytes(200_000, 4096)
    values, offsets = tokens(20_000)
    table = Table(title=f"Epochs from a bucket ({args.latency * 1000:.0f} ms a request)")
    for name in ("data", "order", "epoch s", "MiB/s used", "requests", "fetched / data"):
        table.add_column(name, justify="right" if name != "data" else "left")
    with LocalS3(subprocess=True) as s3:
        name = s3.make_bucket("formats")
        s3.put(name, "rows.parquet", blob)
        s3.put(name, "tok/values.bin", values.tobytes())
        npy = io.BytesIO()
        np.save(npy, offsets)
        s3.put(name, "tok/offsets.npy", npy.getvalue())
        s3.latency_s = args.latency
        options = s3.storage_options()
        data = bucket(f"s3://{name}/rows.parquet", storage_options=options)
        size = columns["v"].nbytes + columns["label"].nbytes

        def check_rows(loader: Loader, got: list[Any]) -> None:
            idx = loader.indices(0)
            for key in ("v", "label"):
                assert np.array_equal(np.concatenate([b[key] for b in got]), columns[key][idx])

        seconds = min(floor(s3, name, "rows.parquet", row_groups(blob)) for _ in range(args.repeat))
        table.add_row("Parquet", "floor: ranges only", f"{seconds:.2f}", "", "", "")
        for order in ("grouped", False):
            row = timed(s3, lambda o=order: Loader(data, 256, shuffle=o), check_rows, args.repeat)
            table.add_row(
                "Parquet",
                str(order),
                f"{row['s']:.2f}",
                f"{size / row['s'] / 2**20:.0f}",
                str(row["requests"]),
                f"{row['bytes'] / len(blob):.2f}",
            )
        column = Ragged(
            bucket(f"s3://{name}/tok/values.bin", dtype="uint16", storage_options=options),
            bucket(f"s3://{name}/tok/offsets.npy", storage_options=options),
        )
        local = Ragged(values, offsets)
        for label, kwargs in (
            ("pad, 32 rows", {"batch_size": 32}),
            ("pack 1,024", {"batch_size": 16, "layout": PackLayout(seq_len=1024)}),
        ):

            def make(kw: dict[str, Any] = kwargs) -> Loader:
                return Loader({"t": column}, shuffle="grouped", **kw)

            def check_tokens(loader: Loader, got: list[Any], kw: dict[str, Any] = kwargs) -> None:
                if "layout" in kw:  # packed: every token of the epoch once
                    counts = sum(int((b["t"].segment_ids > 0).sum()) for b in got)
                    assert counts == len(values)
                    return
                order = loader.indices(0)
                mine = Loader({"t": local}, order_fn=lambda seed, epoch: order, **kw)
                for a, b in zip(got, mine, strict=True):
                    assert np.array_equal(a["t"].values, b["t"].values)

            row = timed(s3, make, check_tokens, args.repeat)
            table.add_row(
                "tokens",
                f"grouped, {label}",
                f"{row['s']:.2f}",
                f"{values.nbytes / row['s'] / 2**20:.0f}",
                str(row["requests"]),
                f"{row['bytes'] / values.nbytes:.2f}",
            )
    Console().print(table)


if __name__ == "__main__":
    main()
