"""Check before timing: every variant's batches against a NumPy gather of the same rows.

A fast wrong loop is not a result: exact variants must yield the Loader's batches, the others
every row at most once (exactly once over an epoch), each leaf aligned with the row ids.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from looptoolkit import tree as _tree
from looptoolkit.bench.variants import Context, Variant, kit, split_batches
from looptoolkit.bench.workloads import host_array
from looptoolkit.order import epoch_indices

__all__ = ["Check", "check_batches", "host_array", "host_leaves"]


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


Leaves = dict[str, np.ndarray]


def _exact_problem(batch: Leaves, idx: np.ndarray | None, reference: Leaves) -> str | None:
    """Why ``batch`` is not the reference's rows ``idx``, or None."""
    if idx is None:
        return "is one batch too many"
    if set(batch) != set(reference):
        return f"has leaves {sorted(batch)}, expected {sorted(reference)}"
    for path, leaf in reference.items():
        want, have = leaf.take(idx, axis=0), batch[path]
        if have.dtype != want.dtype or not np.array_equal(have, want):
            return (
                f"{path} differs from the reference ({have.dtype}{list(have.shape)} vs "
                f"{want.dtype}{list(want.shape)})"
            )
    return None


class _Coverage:
    """Every row at most once, full batches but the last, leaves aligned with the row ids."""

    def __init__(self, ctx: Context, reference: Leaves) -> None:
        self.n, self.batch_size, self.id_path = ctx.workload.n, ctx.batch_size, ctx.workload.id_path
        self.reference, self.seen, self.partial = reference, np.zeros(self.n, dtype=bool), False

    def problem(self, batch: Leaves) -> str | None:
        """Why ``batch`` breaks coverage, or None."""
        if set(batch) != set(self.reference):
            return f"has leaves {sorted(batch)}, expected {sorted(self.reference)}"
        if self.partial:
            return "follows a partial batch"
        ids = batch[self.id_path].astype(np.int64)
        if len(ids) != self.batch_size:
            if not 0 < len(ids) <= self.batch_size:
                return f"has {len(ids)} rows, batch size {self.batch_size}"
            self.partial = True
        out_of_range = ids.min() < 0 or ids.max() >= self.n
        if out_of_range or self.seen[ids].any() or len(np.unique(ids)) != len(ids):
            return "repeats rows or has rows out of range"
        self.seen[ids] = True
        for path, leaf in self.reference.items():
            have = batch[path]
            if have.dtype != leaf.dtype or not np.array_equal(have, leaf.take(ids, axis=0)):
                return f"{path} is not aligned with {self.id_path}"
        return None


def check_batches(
    variant: Variant, loop: Iterable[Any], ctx: Context, reference: Leaves, limit: int | None = None
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of ``loop``, batch by batch.

    Exact variants (with a ``shuffle``) must yield the NumPy gather of their Loader order, epoch
    0, batch for batch (values and dtypes); the others must pass the coverage check. Batches are
    not kept; ``seconds`` counts the loop's ``next()`` and the batch's conversion to NumPy, not
    the comparisons.
    """
    ready, convert, shuffle = kit(variant.backend).ready, variant.convert, variant.shuffle
    coverage, expected = _Coverage(ctx, reference), []
    if shuffle is not None:
        how = f"exact: the Loader's batches (shuffle={shuffle!r}, epoch 0)"
        expected = split_batches(epoch_indices(ctx.order(shuffle), 0), ctx.batch_size)
    else:
        how = "coverage: every row once, rows aligned with their ids"
    count, seconds, iterator = 0, 0.0, iter(loop)
    try:
        while limit is None or count < limit:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                seconds += time.perf_counter() - start
                break
            if ready is not None:
                ready(batch)
            leaves = host_leaves(convert(batch) if convert else batch)
            seconds += time.perf_counter() - start
            if shuffle is not None:
                idx = expected[count] if count < len(expected) else None
                problem = _exact_problem(leaves, idx, reference)
            else:
                problem = coverage.problem(leaves)
            if problem is not None:
                return Check(False, how, count + 1, seconds, f"batch {count} {problem}")
            count += 1
    finally:
        with contextlib.suppress(Exception):
            iterator.close()  # type: ignore[attr-defined]
    if limit is not None and count >= limit:
        return Check(True, how + f", first {count} batches", count, seconds)
    if shuffle is not None and count != len(expected):
        return Check(False, how, count, seconds, f"{count} batches, expected {len(expected)}")
    if shuffle is None and not coverage.seen.all():
        missing = int((~coverage.seen).sum())
        return Check(False, how, count, seconds, f"{missing} rows never appeared in the epoch")
    return Check(True, how, count, seconds)
