"""The ``bucket`` workload's copies of its rows: local disk, an S3 bucket, and each peer's format.

`BucketData` holds the workload's rows (``{"x": float32 (N, 64), "y": int64 row id}``) and,
from its first use, a zarr v3 group of them on local disk (chunks of ``chunk`` rows, no
compressor, so a chunk's bytes are its rows' bytes) and the same group in a bucket of a
`~looptoolkit.bench.s3local.LocalS3` (moto's S3 server in a child process, behind the
proxy that adds ``latency_s`` to every request and counts requests and bytes). The peers'
formats (Mosaic's MDS shards, litdata's chunks, one Parquet file) are written the first time
a loop asks for them, timed apart (`convert_s`: the time to write the format from the
rows; the uploads go to the server directly, neither delayed nor counted, for every
format alike), then uploaded beside the zarr group.

While it runs it points the S3 clients of this process at the proxy through the
environment (``AWS_*`` and Mosaic's ``S3_ENDPOINT_URL``); `close` stops the server, removes
its files and puts the environment back.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from looptoolkit.bench.s3local import LocalS3

__all__ = ["CHUNK", "LATENCY_S", "SHARD_BYTES", "BucketData", "bucket_rows", "litdata_rows"]

CHUNK = 1024  # rows per zarr chunk (x: 256 KiB, y: 8 KiB a chunk)
LATENCY_S = 0.020  # added to every request by the proxy: a distant bucket
SHARD_BYTES = 4 << 20  # the peers' shard and chunk size (Mosaic's MDS shards, litdata's chunks)
BUCKET = "looptoolkit-compare"


def litdata_rows(block: tuple[str, str, int, int]) -> Iterator[dict[str, Any]]:
    """The function of litdata's ``optimize``: the rows ``start:stop`` of the saved ``x`` and ``y``.

    Module-level so that the worker processes ``optimize`` starts can import it.
    """
    x_path, y_path, start, stop = block
    x, y = np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
    for i in range(start, stop):
        yield {"x": np.array(x[i]), "y": int(y[i])}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Swallow what a peer prints while it converts (progress bars, worker logs)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def bucket_rows(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The workload's kind of rows: ``{"x": float32 (rows, 64) normal, "y": int64 ids}``.

    Examples:
        >>> data = bucket_rows(10)
        >>> data["x"].shape, data["x"].dtype.name, data["y"].tolist()[:3]
        ((10, 64), 'float32', [0, 1, 2])
    """
    x = np.random.default_rng(seed).standard_normal((rows, 64)).astype(np.float32)
    return {"x": x, "y": np.arange(rows, dtype=np.int64)}


class BucketData:
    """The workload's rows on local disk and in a bucket, started on first use.

    Args:
        data: the rows, ``{"x": float32 (N, 64), "y": int64 (N,)}``.
        chunk: rows per zarr chunk.
        latency_s: seconds the proxy adds to every request.

    Attributes:
        convert_s: seconds each format took to write from the rows (``"zarr"``, ``"mds"``,
            ``"litdata"``, ``"parquet"``), the upload apart.
        resumes: whether each loop's resume was exact, by the loop's resume key (a check
            runs once per key).
    """

    def __init__(
        self, data: dict[str, np.ndarray], *, chunk: int = CHUNK, latency_s: float = LATENCY_S
    ) -> None:
        self.data, self.chunk, self.latency_s = data, chunk, latency_s
        self.convert_s: dict[str, float] = {}
        self.resumes: dict[str, tuple[str, str]] = {}
        self._s3: LocalS3 | None = None
        self._tmp: Path | None = None
        self._env: dict[str, str | None] = {}
        self._urls: dict[str, str] = {}
        self._local: Any = None
        self._made = 0

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of every leaf (what a loop uses of a row)."""
        return sum(leaf.itemsize * int(np.prod(leaf.shape[1:])) for leaf in self.data.values())

    @property
    def s3(self) -> LocalS3:
        """The server (started on first use)."""
        self._start()
        assert self._s3 is not None
        return self._s3

    def tmpdir(self, name: str) -> Path:
        """A new, empty directory under the workload's own (a cache, a peer's local copy)."""
        self._start()
        assert self._tmp is not None
        self._made += 1
        path = self._tmp / f"{name}-{self._made}"
        path.mkdir()
        return path

    def _start(self) -> None:
        if self._s3 is not None:
            return
        import zarr

        tmp = self._tmp = Path(tempfile.mkdtemp(prefix="looptoolkit-bucket-"))
        s3 = LocalS3(latency_s=self.latency_s, subprocess=True).start()
        self._s3 = s3
        try:
            s3.make_bucket(BUCKET)
            env = {**s3.env(), "S3_ENDPOINT_URL": s3.endpoint}  # Mosaic's endpoint variable
            self._env = {name: os.environ.get(name) for name in env}
            os.environ.update(env)

            def write() -> None:
                group = zarr.open_group(tmp / "rows.zarr", mode="w", zarr_format=3)
                for name, leaf in self.data.items():
                    chunks = (self.chunk, *leaf.shape[1:])
                    array = group.create_array(
                        name, shape=leaf.shape, chunks=chunks, dtype=leaf.dtype, compressors=None
                    )
                    array[:] = leaf

            self._timed("zarr", write)
            s3.upload_dir(tmp / "rows.zarr", BUCKET, "rows.zarr")
            self._local = zarr.open_group(tmp / "rows.zarr", mode="r")
        except BaseException:
            self.close()
            raise

    def _timed(self, name: str, write: Callable[[], None]) -> None:
        start = time.perf_counter()
        write()
        self.convert_s[name] = time.perf_counter() - start

    def local(self) -> dict[str, Any]:
        """The zarr arrays on local disk, by leaf name."""
        self._start()
        return {name: self._local[name] for name in self.data}

    def remote(self) -> dict[str, Any]:
        """The zarr arrays in the bucket (fsspec's ``s3://`` through the proxy), by leaf name."""
        import zarr

        group = zarr.open_group(
            f"s3://{BUCKET}/rows.zarr", storage_options=self.s3.storage_options(), mode="r"
        )
        return {name: group[name] for name in self.data}

    def boto3_options(self) -> dict[str, Any]:
        """Keyword arguments of ``boto3.client("s3", ...)`` for the proxy (litdata's)."""
        s3 = self.s3
        return {
            "endpoint_url": s3.endpoint,
            "aws_access_key_id": s3.access_key,
            "aws_secret_access_key": s3.secret_key,
            "region_name": s3.region,
        }

    def url(self, name: str) -> str:
        """The ``s3://`` address of format ``name`` (``mds``, ``litdata``, ``parquet``).

        The format is written (timed) and uploaded the first time it is asked for.
        """
        if name not in self._urls:
            folder = self.tmpdir(name)
            write = {"mds": self._mds, "litdata": self._litdata, "parquet": self._parquet}[name]
            with _quiet():
                self._timed(name, lambda: write(folder))
            self.s3.upload_dir(folder, BUCKET, name)
            key = "rows.parquet" if name == "parquet" else ""
            self._urls[name] = f"s3://{BUCKET}/{name}" + (f"/{key}" if key else "")
        return self._urls[name]

    def _mds(self, folder: Path) -> None:
        from streaming import MDSWriter

        x, y = self.data["x"], self.data["y"]
        columns = {"x": f"ndarray:{x.dtype.name}:{x.shape[1]}", "y": "int64"}
        with MDSWriter(out=str(folder), columns=columns, size_limit=SHARD_BYTES) as writer:
            for i in range(len(y)):
                writer.write({"x": x[i], "y": int(y[i])})

    def _litdata(self, folder: Path) -> None:
        import litdata

        assert self._tmp is not None
        saved = [str(self._tmp / f"{name}.npy") for name in ("x", "y")]
        for path, name in zip(saved, ("x", "y"), strict=True):
            np.save(path, self.data[name])
        n = len(self.data["y"])
        blocks = [(*saved, a, min(a + 8 * self.chunk, n)) for a in range(0, n, 8 * self.chunk)]
        litdata.optimize(
            fn=litdata_rows,
            inputs=blocks,
            output_dir=str(folder),
            chunk_bytes=SHARD_BYTES,
            num_workers=1,
            mode="overwrite",
        )

    def _parquet(self, folder: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        x, y = self.data["x"], self.data["y"]
        rows = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
        table = pa.table({"x": rows, "y": y})
        path = folder / "rows.parquet"
        pq.write_table(table, path, row_group_size=self.chunk, compression="none")

    def close(self) -> None:
        """Stop the server, remove the files, restore the environment; safe to call twice."""
        if self._s3 is not None:
            self._s3.stop()
            self._s3 = None
        for name, value in self._env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._env = {}
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._local, self._urls = None, {}
