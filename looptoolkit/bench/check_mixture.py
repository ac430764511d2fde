"""Check a mixture's batches before timing them, and measure how far they stray from the weights.

On the ``mix`` workload a row's id says its source (`looptoolkit.bench.variants.mix.bounds`).
A mixture loop is checked for real rows with their leaves aligned, full batches, and every
source's rows once per pass over that source (each source has its own epochs); the largest
deviation of any batch's count of a source from ``weight * rows in the batch`` goes beside its
speed. The shared row loops (the baseline, the floors, the plain Loader) are checked as on
``tabular``, and a plain shuffle's deviation from the first mixture's weights is measured too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import numpy as np

from looptoolkit.bench.check import Check, Leaves, _differs, check_batches, host_leaves
from looptoolkit.bench.variants import Context, Variant, kit
from looptoolkit.bench.variants.mix import MIXES, bounds, source_of, weights_of

__all__ = ["Deviation", "SourcePasses", "check_mixture"]


class Deviation:
    """The largest ``|count - weight * rows|`` of any source in any batch seen.

    Examples:
        >>> d = Deviation(np.array([0, 7, 10]), (0.7, 0.3))
        >>> d.add(np.array([0, 1, 2, 3, 4, 5, 7, 8, 9, 6]))  # 7 of source 0 and 3 of source 1
        0.0
        >>> round(d.add(np.array([0, 1, 2, 3, 4, 5, 6, 0, 7, 8])), 6)  # 8 and 2: off by 1 each
        1.0
        >>> d.batches, round(d.max, 6)
        (2, 1.0)
    """

    def __init__(self, edges: np.ndarray, weights: tuple[float, ...]) -> None:
        self.edges, self.weights = edges, np.asarray(weights, dtype=np.float64)
        self.max, self.batches = 0.0, 0

    def add(self, ids: np.ndarray) -> float:
        """Count a batch of row ids; return its own largest deviation."""
        counts = np.bincount(source_of(ids, self.edges), minlength=len(self.weights))
        worst = float(np.abs(counts - self.weights * len(ids)).max())
        self.max, self.batches = max(self.max, worst), self.batches + 1
        return worst


class SourcePasses:
    """Every source's rows once per pass over it: no row again before all of its source's have come.

    Examples:
        >>> p = SourcePasses(np.array([0, 2, 3]))
        >>> p.add(np.array([1, 2, 0])), p.add(np.array([2, 0])), p.add(np.array([0]))
        (None, None, 'repeats row 0 of source 0 within one pass over it')
    """

    def __init__(self, edges: np.ndarray) -> None:
        self.edges, self.seen = edges, np.zeros(int(edges[-1]), bool)

    def add(self, ids: np.ndarray) -> str | None:
        """Take a batch of row ids; why it breaks a pass, or None."""
        for s in np.unique(source_of(ids, self.edges)).tolist():
            a, b = int(self.edges[s]), int(self.edges[s + 1])
            rows = ids[(ids >= a) & (ids < b)]
            seen = self.seen[a:b]
            for row in rows.tolist():  # a pass may end, and the next begin, inside a batch
                if seen[row - a]:
                    return f"repeats row {row} of source {s} within one pass over it"
                seen[row - a] = True
                if seen.all():
                    seen[:] = False
        return None


def _counted(loop: Iterable[Any], deviation: Deviation, id_path: str) -> Iterator[Any]:
    """The batches of ``loop`` (NumPy) as they are, each one's row ids counted by ``deviation``."""
    iterator = iter(loop)
    try:
        for batch in iterator:
            deviation.add(host_leaves(batch)[id_path].astype(np.int64))
            yield batch
    finally:
        with contextlib.suppress(Exception):
            iterator.close()  # type: ignore[attr-defined]


def _batches(variant: Variant, loop: Iterable[Any]) -> Iterator[Leaves]:
    """The batches of ``loop`` as NumPy leaves by key path."""
    ready, convert = kit(variant.backend).ready, variant.convert
    iterator = iter(loop)
    try:
        for batch in iterator:
            if ready is not None:
                ready(batch)
            yield host_leaves(convert(batch) if convert else batch)
    finally:
        with contextlib.suppress(Exception):
            iterator.close()  # type: ignore[attr-defined]


def check_mixture(
    variant: Variant, loop: Iterable[Any], ctx: Context, reference: Leaves, limit: int | None = None
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of ``loop`` on the ``mix`` workload.

    A mixture loop (``variant.mix``): real rows, leaves aligned with the ids, full batches, each
    source's rows once per pass over it; a Loader's (``loader-*``) also every source's count in
    every batch within 1 of ``weight * rows``. The shared row loops: `check_batches`. Both
    measure the largest deviation from the weights (the first mixture's for a loop that mixes
    nothing) into ``Check.extra``: ``max_deviation`` over ``deviation_batches`` batches, ``mix``.
    """
    w, n = ctx.workload, ctx.workload.n
    mix = variant.mix or next(iter(MIXES))
    edges = bounds(n, weights_of(mix))
    deviation = Deviation(edges, weights_of(mix))
    if variant.mix is None:  # a floor's order is no shuffle: no deviation measured
        batches = loop if variant.is_floor else _counted(loop, deviation, w.id_path)
        check = check_batches(variant, batches, ctx, reference, limit)
        if check.ok and not variant.is_floor:
            check.extra = _extra(deviation, mix)
        return check
    how = "mixture: real rows aligned with their ids, each source's rows once per pass over it"
    exact = variant.name.startswith("loader-")  # the Loader's mixture: within 1 in every batch
    how += ", every batch within 1 row of the weights" if exact else ""
    passes, count, problem = SourcePasses(edges), 0, None
    for leaves in islice(_batches(variant, loop), limit or w.num_batches):
        if set(leaves) != set(reference):
            problem = f"has leaves {sorted(leaves)}, expected {sorted(reference)}"
        else:
            ids = leaves[w.id_path].astype(np.int64)
            if len(ids) != min(w.batch_size, n - count * w.batch_size):
                problem = f"has {len(ids)} rows, batch size {w.batch_size}"
            elif ids.min() < 0 or ids.max() >= n:
                problem = "has rows out of range"
            else:
                problem = _differs(leaves, reference, ids, w.id_path) or passes.add(ids)
                off = deviation.add(ids)
                if problem is None and exact and off >= 1:
                    problem = f"strays {off:g} rows from the weights (exact: under 1)"
        if problem is not None:
            return Check(False, how, count + 1, f"batch {count} {problem}")
        count += 1
    if count < (limit or w.num_batches):
        return Check(False, how, count, f"{count} batches, expected {limit or w.num_batches}")
    if limit is not None:
        how += f", first {count} batches"
    return Check(True, how, count, extra=_extra(deviation, mix))


def _extra(deviation: Deviation, mix: str) -> dict[str, Any]:
    return {"max_deviation": deviation.max, "deviation_batches": deviation.batches, "mix": mix}
