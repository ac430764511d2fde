"""Check an augmentation loop's batches before timing them: shapes, rows, and the keyed rule.

On the ``augment`` workload every loop yields ``{"image": float32 (b, 3, 224, 224), "label"}``
with the labels the rows' ids. Each batch must have that shape and dtype, values that are
normalised uint8 levels (``x * 64 + 127.5`` within ``[0, 255]``), full batches but the last,
and every row once in the epoch. The Loader's loops (a variant with a ``shuffle``) draw each
row's parameters from its keys, so each row must also equal the keyed reference
(`looptoolkit.bench.variants.augment.reference`) within one level: the same crop, the same
flip, on whichever arrays and in whichever process it ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from itertools import islice
from typing import Any

import numpy as np

from looptoolkit.bench.check import Check, _coverage, host_leaves
from looptoolkit.bench.variants import Context, Variant, kit
from looptoolkit.bench.variants.augment import SIZE, levels, order_positions, reference, threads

__all__ = ["TOLERANCE", "check_augment"]

TOLERANCE = 1.0  # levels: torch's and NumPy's kernels round a half level apart
_IMAGE, _LABEL = "batch['image']", "batch['label']"


def _problem(leaves: dict[str, np.ndarray], size: int) -> str | None:
    """Why a batch's leaves are not normalised crops of ``size`` rows at most, or None."""
    if set(leaves) != {_IMAGE, _LABEL}:
        return f"has leaves {sorted(leaves)}, expected {[_IMAGE, _LABEL]}"
    image = leaves[_IMAGE]
    want = (len(leaves[_LABEL]), 3, SIZE, SIZE)
    if image.dtype != np.float32 or image.shape != want:
        return f"has images {image.dtype}{list(image.shape)}, expected float32{list(want)}"
    low, high = float(levels(image).min()), float(levels(image).max())
    if low < -TOLERANCE or high > 255 + TOLERANCE:
        return f"has levels {low:.1f}..{high:.1f}, not normalised uint8 (0..255)"
    return None


def check_augment(
    variant: Variant, loop: Iterable[Any], ctx: Context, limit: int | None = None
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of an augmentation loop.

    Every loop: shape, dtype, levels, every row once (by the id leaf). The Loader's loops
    (``variant.shuffle`` set): each row within `TOLERANCE` levels of the keyed reference. The
    check's ``extra`` holds the threads the loop runs on and the largest difference seen.
    """
    ready, convert, data = kit(variant.backend).ready, variant.convert, ctx.workload.data
    size, seen = ctx.batch_size, np.zeros(ctx.workload.n, bool)
    keyed = variant.shuffle is not None
    positions = order_positions(ctx.order("full")) if keyed else None
    how = "augment: float32 crops of 224, every row once"
    how += f", each within {TOLERANCE:g} level of the keyed reference" if keyed else ""
    count, rows, worst, iterator = 0, 0, 0.0, iter(loop)
    try:
        for batch in islice(iterator, limit):
            if ready is not None:
                ready(batch)
            leaves = host_leaves(convert(batch) if convert else batch)
            problem = _problem(leaves, size)
            if problem is None:
                ids = leaves[_LABEL].astype(np.int64)
                problem = _coverage(ids, seen, size, rows == count * size)
                rows += len(ids)
            if problem is None and positions is not None:
                want = reference(data, ids, positions[ids], ctx.seed).astype(np.float32)
                diff = float(np.abs(levels(leaves[_IMAGE]) - want).max())
                worst = max(worst, diff)
                if diff > TOLERANCE + 1e-3:
                    problem = f"differs from the keyed reference by {diff:.1f} levels"
            if problem is not None:
                return Check(False, how, count + 1, f"batch {count} {problem}")
            count += 1
    finally:
        with contextlib.suppress(Exception):
            iterator.close()  # type: ignore[attr-defined]
    extra: dict[str, Any] = {"threads": threads(variant.name)}
    if keyed:
        extra["max_level_diff"] = worst
    if limit is not None and count >= limit:
        return Check(True, how + f", first {count} batches", count, extra=extra)
    if not seen.all():
        return Check(False, how, count, f"{int((~seen).sum())} rows never appeared in the epoch")
    return Check(True, how, count, extra=extra)
