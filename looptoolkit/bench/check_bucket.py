"""Check a bucket loop before timing it, and measure what its first epoch fetched.

On the ``bucket`` workload every loop yields ``{"x", "y"}`` batches in an order of its own:
each batch must hold full batches but the last, every row once in the epoch and each ``x`` row
equal to the workload's row of its id ``y``. The same epoch is measured as it is checked:
the time from ``iter()`` to its first batch, the requests the server's proxy saw and the bytes
of their bodies against the bytes of the rows handed out. Then, where the loop offers one,
its resume: an epoch stopped part-way and resumed in a new loop must yield exactly the rows
an epoch run whole does, in the same order (checked once per resume key).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sized
from itertools import islice
from typing import Any

import numpy as np

from looptoolkit.bench.bucket_data import BucketData
from looptoolkit.bench.check import Check, _coverage, _differs, host_leaves
from looptoolkit.bench.variants import Context, Variant, kit

__all__ = ["check_bucket", "check_resume"]


def check_resume(loop: Any, batches: int, limit: int | None = None) -> tuple[str, str]:
    """Whether ``loop``'s resume is exact (``"yes"``, ``"no"``, ``"not offered"``), and why not.

    Stops an epoch after a third of its ``batches`` (at least one), resumes it in a new loop
    and compares the row ids with an epoch run whole; with a ``limit``, a third of it and
    the first ``limit`` batches of each.
    """
    resume = getattr(loop, "resume", None)
    if resume is None:
        return "not offered", ""
    stop = max(1, min(batches, limit or batches) // 3)
    try:
        whole, resumed = resume(stop, limit)
    except Exception as e:
        return "no", f"resuming raised {type(e).__name__}: {str(e)[:200]}"
    a, b = np.concatenate(whole or [np.empty(0, np.int64)]), np.concatenate(resumed or [[]])
    if len(a) == len(b) and np.array_equal(a, b.astype(a.dtype)):
        return "yes", ""
    missing, extra = len(np.setdiff1d(a, b)), len(b) - len(np.unique(b))
    return "no", (
        f"stopped after {stop} batches and resumed: {len(b)} rows against {len(a)} "
        f"({missing} missing, {extra} repeated, same order: {bool(np.array_equal(a, b))})"
    )


def check_bucket(
    variant: Variant, loop: Iterable[Any], ctx: Context, limit: int | None = None
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of a bucket loop, measuring it.

    The check's ``extra``: ``first_ms``, ``requests``, ``fetched_bytes``, ``used_bytes``,
    ``fetched_per_used`` (None for a local loop), ``convert_s`` (its format's writing time),
    ``resume`` (one of ``"yes"``, ``"no"``, ``"not offered"``), ``resume_detail`` and
    ``first_chunks`` (the chunks of rows its first batch needs, where the loop says).
    """
    data = ctx.workload.resource
    if not isinstance(data, BucketData):
        raise TypeError(f"the {ctx.workload.name} workload holds no bucket data.")
    ready, convert = kit(variant.backend).ready, variant.convert
    size, id_path, seen = ctx.batch_size, ctx.workload.id_path, np.zeros(ctx.workload.n, bool)
    reference = host_leaves(ctx.workload.data)
    how = "coverage: every row once, rows aligned with their ids"
    s3 = data.s3
    s3.reset_stats()
    count, rows, first, problem = 0, 0, 0.0, None
    start = time.perf_counter()
    iterator = iter(loop)
    try:
        for batch in islice(iterator, limit):
            if ready is not None:
                ready(batch)
            if not count:
                first = time.perf_counter() - start
            leaves = host_leaves(convert(batch) if convert else batch)
            if set(leaves) != set(reference):
                problem = f"has leaves {sorted(leaves)}, expected {sorted(reference)}"
            else:
                ids = leaves[id_path].astype(np.int64)
                problem = _coverage(ids, seen, size, rows == count * size) or _differs(
                    leaves, reference, ids, id_path
                )
                rows += len(ids)
            if problem is not None:
                return Check(False, how, count + 1, f"batch {count} {problem}")
            count += 1
    finally:
        with contextlib.suppress(Exception):
            iterator.close()  # type: ignore[attr-defined]
    seen_by_proxy = s3.stats.snapshot()
    bounded = limit is not None and count >= limit
    if not bounded and not seen.all():
        return Check(False, how, count, f"{int((~seen).sum())} rows never appeared in the epoch")
    fetched, used = int(seen_by_proxy["body_bytes"]), rows * data.row_bytes
    key = getattr(loop, "resume_key", variant.name)
    if key not in data.resumes:
        batches = len(loop) if isinstance(loop, Sized) else count
        data.resumes[key] = check_resume(loop, batches, limit)
    resume, why = data.resumes[key]
    extra: dict[str, Any] = {
        "first_ms": first * 1e3,
        "requests": int(seen_by_proxy["requests"]),
        "fetched_bytes": fetched,
        "used_bytes": used,
        "fetched_per_used": fetched / used if fetched and used else None,
        "convert_s": data.convert_s.get(getattr(loop, "form", ""), None),
        "resume": resume,
        "resume_detail": why,
        "first_chunks": getattr(loop, "first_chunks", None),
    }
    return Check(True, how + (f", first {count} batches" if bounded else ""), count, extra=extra)
