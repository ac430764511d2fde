"""Check before timing (a fast wrong loop is not a result): batches against a NumPy gather."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np

from looptoolkit.bench.variants import Context, Variant, kit, split_batches
from looptoolkit.bench.workloads import host_array
from looptoolkit.device import _tree as _tree
from looptoolkit.order._order import epoch_indices

__all__ = ["Check", "check_batches", "host_array", "host_leaves"]

Leaves = dict[str, np.ndarray]


def host_leaves(tree: Any) -> Leaves:
    """The leaves of a batch as NumPy arrays, by key path."""
    leaves, spec = _tree.flatten(tree)
    return dict(zip(_tree.leaf_paths(spec), map(host_array, leaves), strict=True))


@dataclass
class Check:
    """The result of checking a variant's batches before timing it."""

    ok: bool
    how: str
    batches: int
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # figures the check measured


def _coverage(ids: np.ndarray, seen: np.ndarray, size: int, full: bool) -> str | None:
    """Why a batch of rows ``ids`` breaks coverage (``full``: the batches before were), or None."""
    if not full:
        return "follows a partial batch"
    if not 0 < len(ids) <= size:
        return f"has {len(ids)} rows, batch size {size}"
    outside = ids.min() < 0 or ids.max() >= len(seen)
    if outside or len(np.unique(ids)) != len(ids) or seen[ids].any():
        return "repeats rows or has rows out of range"
    seen[ids] = True
    return None


def _differs(batch: Leaves, reference: Leaves, idx: np.ndarray, id_path: str | None) -> str | None:
    """Why ``batch`` is not ``reference``'s rows ``idx`` (rows of ``id_path``), or None."""
    for path, leaf in reference.items():
        want, have = leaf.take(idx, axis=0), batch[path]
        if have.dtype != want.dtype or not np.array_equal(have, want):
            if id_path is not None:
                return f"{path} is not aligned with {id_path}"
            shapes = f"{have.dtype}{list(have.shape)} vs {want.dtype}{list(want.shape)}"
            return f"{path} differs from the reference ({shapes})"
    return None


def check_batches(
    variant: Variant, loop: Iterable[Any], ctx: Context, reference: Leaves, limit: int | None = None
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of ``loop``, batch by batch.

    Exact variants (with a ``shuffle``): the Loader's batches of epoch 0 (values and dtypes). The
    others, coverage: every row once, full batches but the last, leaves aligned with the row ids.
    """
    ready, convert, shuffle = kit(variant.backend).ready, variant.convert, variant.shuffle
    size, id_path, seen = ctx.batch_size, ctx.workload.id_path, np.zeros(ctx.workload.n, bool)
    problem: str | None
    how, expected = "coverage: every row once, rows aligned with their ids", None
    if shuffle is not None:
        how = f"exact: the Loader's batches (shuffle={shuffle!r}, epoch 0)"
        expected = split_batches(epoch_indices(ctx.order(shuffle), 0), size)
    count, rows, iterator = 0, 0, iter(loop)
    try:
        for batch in islice(iterator, limit):
            if ready is not None:
                ready(batch)
            leaves = host_leaves(convert(batch) if convert else batch)
            if set(leaves) != set(reference):
                problem = f"has leaves {sorted(leaves)}, expected {sorted(reference)}"
            elif expected is None:
                ids = leaves[id_path].astype(np.int64)
                problem = _coverage(ids, seen, size, rows == count * size) or _differs(
                    leaves, reference, ids, id_path
                )
                rows += len(ids)
            elif count < len(expected):
                problem = _differs(leaves, reference, expected[count], None)
            else:
                problem = "is one batch too many"
            if problem is not None:
                return Check(False, how, count + 1, f"batch {count} {problem}")
            count += 1
    finally:
        with contextlib.suppress(Exception):
            iterator.close()  # type: ignore[attr-defined]
    if limit is not None and count >= limit:
        return Check(True, how + f", first {count} batches", count)
    if expected is not None and count != len(expected):
        return Check(False, how, count, f"{count} batches, expected {len(expected)}")
    if expected is None and not seen.all():
        return Check(False, how, count, f"{int((~seen).sum())} rows never appeared in the epoch")
    return Check(True, how, count)
