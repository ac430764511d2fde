"""Check before timing: every variant's batches against a NumPy gather of the same rows.

A fast wrong loop is not a result. Variants that reproduce the Loader's order
must yield, batch for batch, the NumPy gather of that order (values and
dtypes); loops with their own order must yield full batches (the last may be
partial), every row at most once (exactly once over a whole epoch), and each
leaf's rows matching the row ids.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from looptoolkit import tree as _tree
from looptoolkit.bench.epochs import split_batches
from looptoolkit.bench.variants import Variant
from looptoolkit.bench.workloads import Context
from looptoolkit.order import epoch_indices

__all__ = ["Check", "check_batches", "host_array", "host_leaves", "ready_fn"]


def ready_fn(backend: str) -> Callable[[Any], None]:
    """Blocks until a batch of ``backend`` is computed (JAX dispatches asynchronously)."""
    if backend == "jax":
        import jax

        def ready(batch: Any) -> None:
            jax.block_until_ready(batch)

        return ready
    return _nothing


def _nothing(batch: Any = None) -> None:
    return None


def host_array(x: Any) -> np.ndarray:
    """A NumPy copy (or view) of an array of any framework, on any device."""
    if type(x).__module__.startswith("torch"):
        return np.asarray(x.detach().cpu().numpy())
    return np.asarray(x)


def host_leaves(tree: Any) -> dict[str, np.ndarray]:
    """The leaves of a batch as NumPy arrays, by key path."""
    leaves, spec = _tree.flatten(tree)
    return dict(zip(_tree.leaf_paths(spec), map(host_array, leaves), strict=True))


@dataclass
class Check:
    """The result of checking a variant's batches before timing it."""

    ok: bool
    how: str
    batches: int
    seconds: float
    detail: str = ""


def check_batches(
    variant: Variant,
    pipeline: Iterable[Any],
    ctx: Context,
    reference: dict[str, np.ndarray],
    *,
    limit: int | None = None,
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of ``pipeline``.

    Exact variants must yield the NumPy gather of their Loader order, epoch 0,
    batch for batch (values and dtypes). Loops with their own order must yield
    full batches (the last may be partial), every row at most once (every row
    exactly once over a whole epoch), each leaf's rows matching the row ids.
    """
    ready = ready_fn(variant.backend)
    convert = variant.convert
    got: list[dict[str, np.ndarray]] = []
    start = time.perf_counter()
    iterator = iter(pipeline)
    for batch in iterator:
        ready(batch)
        got.append(host_leaves(convert(batch) if convert else batch))
        if limit is not None and len(got) >= limit:
            break
    seconds = time.perf_counter() - start
    with contextlib.suppress(Exception):
        iterator.close()  # type: ignore[attr-defined]
    whole = limit is None or len(got) < limit
    batch_size = ctx.batch_size
    n = ctx.workload.n
    id_path = ctx.workload.id_path

    def fail(detail: str, how: str) -> Check:
        return Check(False, how, len(got), seconds, detail)

    if variant.shuffle is not None:
        how = f"exact: the Loader's batches (shuffle={variant.shuffle!r}, epoch 0)"
        expected = split_batches(epoch_indices(ctx.order(variant.shuffle), 0), batch_size)
        if whole and len(got) != len(expected):
            return fail(f"{len(got)} batches, expected {len(expected)}", how)
        for b, (batch, idx) in enumerate(zip(got, expected, strict=False)):
            if set(batch) != set(reference):
                return fail(f"batch {b} has leaves {sorted(batch)}, expected "
                            f"{sorted(reference)}", how)  # fmt: skip
            for path, leaf in reference.items():
                want = leaf[idx]
                have = batch[path]
                if have.dtype != want.dtype or not np.array_equal(have, want):
                    return fail(f"batch {b}: {path} differs from the reference "
                                f"({have.dtype}{list(have.shape)} vs "
                                f"{want.dtype}{list(want.shape)})", how)  # fmt: skip
        if not whole:
            how += f", first {len(got)} batches"
        return Check(True, how, len(got), seconds)

    how = "coverage: every row once, rows aligned with their ids"
    seen = np.zeros(n, dtype=bool)
    for b, batch in enumerate(got):
        if set(batch) != set(reference):
            return fail(f"batch {b} has leaves {sorted(batch)}, expected {sorted(reference)}", how)
        ids = batch[id_path].astype(np.int64)
        last = b == len(got) - 1 and whole
        if len(ids) != batch_size and not (last and 0 < len(ids) <= batch_size):
            return fail(f"batch {b} has {len(ids)} rows, batch size {batch_size}", how)
        if ids.min() < 0 or ids.max() >= n or seen[ids].any() or len(np.unique(ids)) != len(ids):
            return fail(f"batch {b} repeats rows or has rows out of range", how)
        seen[ids] = True
        for path, leaf in reference.items():
            have = batch[path]
            if have.dtype != leaf.dtype or not np.array_equal(have, leaf[ids]):
                return fail(f"batch {b}: {path} is not aligned with {id_path}", how)
    if whole and not seen.all():
        return fail(f"{int((~seen).sum())} rows never appeared in the epoch", how)
    if not whole:
        how += f", first {len(got)} batches"
    return Check(True, how, len(got), seconds)
