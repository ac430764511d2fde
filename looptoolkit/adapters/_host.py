"""Host gather kernels: batch-sized gathers of rows of host (NumPy) arrays.

Shared by the backends whose leaves live on the host, or can be viewed there
without a copy: [`row_gather`][looptoolkit.adapters.row_gather] picks the cheapest
gather for an array's layout (``aligned_gather``: into memory that a framework
adopts without a copy), [`zip_gathers`][looptoolkit.adapters.zip_gathers] runs
a batch stream through several of them in C, and
[`host_chunks`][looptoolkit.adapters.host_chunks] /
[`split_chunks`][looptoolkit.adapters.split_chunks] gather many batches at once, so
that a framework wraps each chunk once and splits it, instead of paying its
per-call cost per batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "ALIGN",
    "CHUNK_BYTES",
    "CHUNK_MAX_BATCHES",
    "aligned_gather",
    "chunked",
    "gather_rows",
    "host_chunks",
    "row_gather",
    "split_chunks",
    "zip_gathers",
]

_T = TypeVar("_T")


def row_gather(view: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The cheapest batch-sized gather of rows of a host array, for in-range indices >= 0.

    ``take`` on a C-contiguous array copies whole rows (``mode="clip"`` skips its
    bounds-error path: the epoch orders only hold valid indices). On any other
    layout (Fortran order, a column slice, a transposed view, a sliced memmap)
    ``take`` first copies the whole array, every call; fancy indexing then costs
    one batch.
    """
    if view.flags.c_contiguous:
        take = view.take
        # Positional arguments: keyword ones cost a dict per call, as much as a
        # small gather.
        return lambda idx: take(idx, 0, None, "clip")
    return view.__getitem__


# The buffer alignment that tf and XLA assume (Eigen's): arrays that start
# elsewhere (NumPy's large ones start 16 bytes past it) are copied on the way in.
ALIGN = 64


def aligned_gather(view: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``row_gather(view)``, into new arrays that start on an ``ALIGN``-byte boundary.

    For a framework that adopts aligned host memory without a copy; a view that
    is not C-contiguous gets ``row_gather`` (fancy indexing, not aligned).
    """
    if not view.flags.c_contiguous:
        return row_gather(view)
    take, dtype, tail = view.take, view.dtype, view.shape[1:]
    row_bytes = dtype.itemsize * int(np.prod(tail))

    def gather(idx: np.ndarray) -> np.ndarray:
        nbytes = len(idx) * row_bytes
        raw = np.empty(nbytes + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        out = raw[start : start + nbytes].view(dtype).reshape(len(idx), *tail)
        take(idx, 0, out, "clip")
        return out

    return gather


def gather_rows(view: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` (negative ones counting from the end) of a host array, at a batch's cost."""
    return view.take(idx, axis=0) if view.flags.c_contiguous else view[idx]


def zip_gathers(
    gathers: Sequence[Callable[[np.ndarray], Any]], batches: Iterable[np.ndarray]
) -> Iterator[tuple[Any, ...]]:
    """For each index batch, the tuple of every gather's result: a C-level iterator.

    ``map`` and ``zip`` over copies of the batch stream (``itertools.tee``) run
    the whole per-batch loop in C; Python only runs the gathers themselves.
    """
    copies = itertools.tee(batches, len(gathers))
    return zip(*(map(g, c) for g, c in zip(gathers, copies, strict=True)), strict=True)


# Bytes of rows gathered at once by `host_chunks`, and at most this many batches:
# enough batches to amortise a framework's per-call cost (a tf op, a JAX
# transfer and dispatch) over dozens of batches, few enough bytes to stay in cache.
CHUNK_BYTES = 4 << 20
CHUNK_MAX_BATCHES = 64


def host_chunks(
    views: Sequence[np.ndarray],
    batches: Iterable[np.ndarray],
    gather: Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]] = row_gather,
    counts: Iterable[int] | None = None,
) -> Iterator[tuple[list[int], list[np.ndarray]]]:
    """Gather consecutive batches together: ``(batch sizes, one gathered array per view)``.

    Each chunk is one batch-sized-cost gather per view (``gather(view)``, by
    default [`row_gather`][looptoolkit.adapters.row_gather]) of the concatenated
    indices of up to ``CHUNK_MAX_BATCHES`` batches and about ``CHUNK_BYTES``
    bytes, or of ``counts``' batches in turn where given (a stream of chunk
    lengths, e.g. growing 1, 2, 4, ...). A backend wraps each chunk once and
    splits it into its batches in one call, instead of paying its per-call cost
    per batch.
    """
    gathers = [gather(v) for v in views]
    row_bytes = sum(v.itemsize * int(np.prod(v.shape[1:])) for v in views) or 1
    stream = iter(batches)
    first = next(stream, None)
    if first is None:
        return
    stream = itertools.chain([first], stream)
    chunks: Iterator[list[np.ndarray]]
    if counts is None:
        count = max(1, min(CHUNK_MAX_BATCHES, CHUNK_BYTES // max(1, len(first) * row_bytes)))
        chunks = chunked(stream, count)
    else:
        chunks = itertools.takewhile(bool, (list(itertools.islice(stream, n)) for n in counts))
    for chunk in chunks:
        flat = chunk[0] if len(chunk) == 1 else np.concatenate(chunk)
        yield [len(idx) for idx in chunk], [g(flat) for g in gathers]


def split_chunks(
    views: Sequence[np.ndarray],
    batches: Iterable[np.ndarray],
    wrap: Callable[[list[np.ndarray]], _T],
    split: Callable[[_T, list[int]], Iterable[Any]],
    gather: Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]] = row_gather,
    counts: Iterable[int] | None = None,
) -> Iterator[Any]:
    """The batches of ``host_chunks``: each chunk wrapped once, then split into batches.

    ``wrap`` turns a chunk's gathered rows (one array per view) into the
    framework's arrays in one go; ``split(arrays, sizes)`` cuts them into one
    sequence of leaves per batch (a list or a tuple: the backend's batches). A
    chunk of one batch is yielded as wrapped. ``gather`` and ``counts`` as in
    ``host_chunks``. Python runs once per chunk; ``chain`` steps through each
    chunk's batches in C.
    """

    def batches_of(chunk: tuple[list[int], list[np.ndarray]]) -> Iterable[Any]:
        sizes, rows = chunk
        wrapped = wrap(rows)
        return (wrapped,) if len(sizes) == 1 else split(wrapped, sizes)

    chunks = host_chunks(views, batches, gather, counts)
    return itertools.chain.from_iterable(map(batches_of, chunks))


def chunked(items: Iterable[np.ndarray], size: int) -> Iterator[list[np.ndarray]]:
    """Consecutive lists of ``size`` items (the last one shorter), each built in C."""
    stream = iter(items)
    return iter(lambda: list(itertools.islice(stream, size)), [])
