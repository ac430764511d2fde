"""The workloads of ``looptoolkit compare``: NumPy pytrees with a row-id leaf, and documents.

The id leaf holds each row's own index, so any batch can be checked (right rows, each once). The
``tokens`` workload is variable-length documents (``{"values", "offsets"}``), checked by content.
The ``mix`` workload is the tabular rows cut into sources by weight (the id says the source): its
mixture loops are checked per source and their batches' counts against the weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from looptoolkit.device import _tree as _tree
from looptoolkit.order._order import batch_count

__all__ = [
    "ALL_WORKLOADS",
    "DEFAULT_WORKLOADS",
    "SHARED",
    "WORKLOADS",
    "Workload",
    "host_array",
    "make_workload",
]

# name -> (description, rows, rows in --quick, batch size, batch size in --quick)
# What `looptoolkit compare` (and `make compare`) runs unless told: the rectangular workloads.
DEFAULT_WORKLOADS = ("index", "tabular", "images")
WORKLOADS: dict[str, tuple[str, int, int, int, int]] = {
    "index": ("arange(N): sample ids", 300_000, 3_000, 300, 30),
    "tabular": ('{"x": float32 (N, 64), "y": int64 row id}', 300_000, 3_000, 300, 30),
    "images": ('{"image": uint8 (N, 3, 64, 64), "label": int64 row id}', 50_000, 512, 256, 32),
    "tokens": ("N documents, lognormal lengths, median 250, int32", 20_000, 600, 32, 32),
    "mix": (
        '{"x": float32 (N, 64), "y": int64 row id} in sources by weight',
        300_000,
        3_000,
        300,
        30,
    ),
    "augment": ('{"image": uint8 (N, 3, 256, 256), "label": int64 row id}', 2_048, 128, 128, 32),
    "bucket": (
        '{"x": float32 (N, 64), "y": int64 row id} as zarr v3 in an S3 bucket (20 ms a request)',
        100_000,
        4_096,
        256,
        64,
    ),
}
# What `--workload all` runs: every loop workload. `augment` answers another question (where to
# augment, not which loop) with 400 MB of images and its own peers, `bucket` (reading from an S3
# bucket) starts a server of its own: they run when named.
ALL_WORKLOADS = tuple(name for name in WORKLOADS if name not in ("augment", "bucket"))
# The workload-agnostic row loops that a workload of another kind runs too (a "rows" one runs all).
SHARED = {"mix": ("numpy-take", "floor-memcpy", "floor-seq-take", "loader-numpy")}


@dataclass
class Workload:
    """The data of one workload (a NumPy pytree), its batches, the key path of its row-id leaf."""

    name: str
    description: str
    data: Any
    batch_size: int
    id_path: str
    n: int
    num_batches: int  # per epoch, the last partial batch counted
    nbytes: int
    # "documents": variable-length rows, checked by content; "mixture": rows in sources by
    # weight, checked per source with each batch's counts against the weights; "augment":
    # augmented images, checked by shape, id and (the Loader's) against the keyed reference;
    # "bucket": rows read from an S3 bucket (``resource``), checked for coverage and measured
    kind: str = "rows"
    info: dict[str, Any] = field(default_factory=dict)
    resource: Any = None  # what the workload's loops share beyond its data (a server); close()

    def close(self) -> None:
        """Release the workload's ``resource`` (stop its server, remove its files), if any."""
        if self.resource is not None and hasattr(self.resource, "close"):
            self.resource.close()

    def runs(self, variant: Any) -> bool:
        """Whether ``variant`` applies: named for this workload, or a row loop it shares."""
        if variant.workloads is not None:
            return self.name in variant.workloads
        return self.kind == "rows" or variant.name in SHARED.get(self.name, ())


def make_workload(
    name: str, *, quick: bool = False, seed: int = 0, rows: int | None = None
) -> Workload:
    """Build the ``name`` workload (its default size, a tiny one with ``quick``, or ``rows``)."""
    description, default, quick_rows, batch, quick_batch = WORKLOADS[name]
    n, size = (quick_rows, quick_batch) if quick else (default, batch)
    n = rows or n
    if name == "tokens":
        return _documents(description, n, seed)
    rng, ids = np.random.default_rng(seed), np.arange(n, dtype=np.int64)
    data: Any = ids
    if name in ("tabular", "mix", "bucket"):
        data = {"x": rng.standard_normal((n, 64), dtype=np.float32), "y": ids}
    elif name in ("images", "augment"):
        side = 256 if name == "augment" else 64
        data = {"image": rng.integers(0, 256, (n, 3, side, side), dtype=np.uint8), "label": ids}
    paths = {
        "index": "batch",
        "tabular": "batch['y']",
        "images": "batch['label']",
        "mix": "batch['y']",
        "augment": "batch['label']",
        "bucket": "batch['y']",
    }
    id_path = paths[name]
    nbytes = sum(int(leaf.nbytes) for leaf in _tree.flatten(data)[0])
    description = f"{description}, N = {n:_}, batch {size}"
    kind = {"mix": "mixture", "augment": "augment", "bucket": "bucket"}.get(name, "rows")
    w = Workload(name, description, data, size, id_path, n, batch_count(n, size), nbytes, kind)
    if name == "bucket":  # the copies on disk and in the bucket, made on first use
        from looptoolkit.bench.bucket_data import CHUNK, BucketData

        chunk = CHUNK if not quick else CHUNK // 4
        w.resource = BucketData(data, chunk=min(chunk, n))
        w.info = {"rows": n, "chunk": chunk, "row_bytes": w.resource.row_bytes}
        w.info["latency_s"] = w.resource.latency_s
    return w


def _documents(description: str, n: int, seed: int) -> Workload:
    """The tokens workload: ``n`` documents as one token array and offsets."""
    from looptoolkit.bench.variants.tokens import SETTINGS, batch_count, make_corpus

    data = make_corpus(n, seed)
    tokens, lengths = len(data["values"]), np.diff(data["offsets"])
    nbytes = int(data["values"].nbytes + data["offsets"].nbytes)
    description = description.replace("N", f"{n:_}") + f", {tokens / 1e6:.2f}M tokens"
    info = {"tokens": tokens, "documents": n}
    batches = batch_count("pad", lengths)
    return Workload(
        "tokens", description, data, SETTINGS.batch, "", n, batches, nbytes, "documents", info
    )


def host_array(x: Any) -> np.ndarray:
    """A NumPy copy (or view) of an array of any framework, on any device (host data back).

    Examples:
        >>> host_array([1, 2]).tolist()
        [1, 2]
    """
    if type(x).__module__.startswith("torch"):
        return np.asarray(x.detach().cpu().numpy())
    return np.asarray(x)
