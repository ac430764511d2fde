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


def _leaf_problem(batch: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> str | None:
    if set(batch) != set(reference):
        return f"has leaves {sorted(batch)}, expected {sorted(reference)}"
    return None


def _exact_problem(
    batch: dict[str, np.ndarray], idx: np.ndarray | None, reference: dict[str, np.ndarray]
) -> str | None:
    if idx is None:
        return "is one batch too many"
    problem = _leaf_problem(batch, reference)
    if problem is not None:
        return problem
    for path, leaf in reference.items():
        want = leaf.take(idx, axis=0)
        have = batch[path]
        if have.dtype != want.dtype or not np.array_equal(have, want):
            return (
                f"{path} differs from the reference ({have.dtype}{list(have.shape)} vs "
                f"{want.dtype}{list(want.shape)})"
            )
    return None


class _Coverage:
    """Every row at most once, full batches but the last, leaves aligned with the row ids."""

    def __init__(self, ctx: Context, reference: dict[str, np.ndarray]) -> None:
        self.n = ctx.workload.n
        self.batch_size = ctx.batch_size
        self.id_path = ctx.workload.id_path
        self.reference = reference
        self.seen = np.zeros(self.n, dtype=bool)
        self.partial = False

    def problem(self, batch: dict[str, np.ndarray]) -> str | None:
        problem = _leaf_problem(batch, self.reference)
        if problem is not None:
            return problem
        if self.partial:
            return "follows a partial batch"
        ids = batch[self.id_path].astype(np.int64)
        if len(ids) != self.batch_size:
            if not 0 < len(ids) <= self.batch_size:
                return f"has {len(ids)} rows, batch size {self.batch_size}"
            self.partial = True
        seen = self.seen
        if (
            ids.min() < 0
            or ids.max() >= self.n
            or seen[ids].any()
            or len(np.unique(ids)) != len(ids)
        ):
            return "repeats rows or has rows out of range"
        seen[ids] = True
        for path, leaf in self.reference.items():
            have = batch[path]
            if have.dtype != leaf.dtype or not np.array_equal(have, leaf.take(ids, axis=0)):
                return f"{path} is not aligned with {self.id_path}"
        return None


def check_batches(
    variant: Variant,
    pipeline: Iterable[Any],
    ctx: Context,
    reference: dict[str, np.ndarray],
    *,
    limit: int | None = None,
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of ``pipeline``, batch by batch.

    Exact variants must yield the NumPy gather of their Loader order, epoch 0,
    batch for batch (values and dtypes). Loops with their own order must yield
    full batches (the last may be partial), every row at most once (every row
    exactly once over a whole epoch), each leaf's rows matching the row ids.
    Batches are compared as they come and not kept; ``seconds`` counts the
    loop's own time (its ``next()`` and the batch's conversion to NumPy), not
    the comparisons.
    """
    ready = kit(variant.backend).ready
    convert = variant.convert
    shuffle = variant.shuffle
    exact = shuffle is not None
    expected: list[np.ndarray] = []
    coverage = _Coverage(ctx, reference)
    if shuffle is not None:
        how = f"exact: the Loader's batches (shuffle={shuffle!r}, epoch 0)"
        expected = split_batches(epoch_indices(ctx.order(shuffle), 0), ctx.batch_size)
    else:
        how = "coverage: every row once, rows aligned with their ids"
    count, seconds, problem = 0, 0.0, None
    iterator = iter(pipeline)
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
            if exact:
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
    whole = limit is None or count < limit
    if whole and exact and count != len(expected):
        return Check(False, how, count, seconds, f"{count} batches, expected {len(expected)}")
    if whole and not exact and not coverage.seen.all():
        missing = int((~coverage.seen).sum())
        return Check(False, how, count, seconds, f"{missing} rows never appeared in the epoch")
    if not whole:
        how += f", first {count} batches"
    return Check(True, how, count, seconds)
