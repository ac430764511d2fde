"""Batch layouts of ragged columns: padded, padding-free (flat) and packed rows.

The last step of the variable-length path before the transfer: given the rows (or row pieces)
a plan chose for one batch (for packed rows: for a block of batches, made one at a time),
these functions copy their values out of the column's host array, once per leaf per batch,
and build the batch's layout as NumPy arrays:
[`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat] or
[`Packed`][looptoolkit.Packed]. The output types are NamedTuples, so every framework's tree
utilities (``to_device``, ``jax.jit``, ``tf.nest``, ``torch.compile``) see pytrees.

Copies: rows of at least ``_SLICE_MIN`` elements on average are copied as slices (one
``memcpy`` each, and a memory-mapped column reads only their pages); shorter rows are gathered
with one fancy index over all their elements.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "Flat",
    "Packed",
    "Padded",
    "copy_pieces",
    "flat_batch",
    "packed_batches",
    "pad_batch",
]

# Mean elements per piece above which slice copies beat one fancy-index gather.
_SLICE_MIN = 24


class Padded(NamedTuple):
    """A batch of a ragged column padded to a rectangle (``layout="pad"``).

    Attributes:
        values: ``(B, L, *feature)``: row ``i``'s elements, then ``pad_value``.
        mask: ``(B, L)`` bool, True at real elements.
        lengths: ``(B,)`` int64, each row's length.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, Ragged
        >>> col = Ragged.from_rows([np.array([1, 2, 3]), np.array([4])])
        >>> batch = next(iter(Loader(col, 2, shuffle=False)))
        >>> batch.values.tolist(), batch.mask.tolist(), batch.lengths.tolist()
        ([[1, 2, 3], [4, 0, 0]], [[True, True, True], [True, False, False]], [3, 1])
    """

    values: Any
    mask: Any
    lengths: Any


class Flat(NamedTuple):
    """A batch of a ragged column concatenated without padding (``layout="flat"``).

    What flash-attention's varlen kernels and HF's padding-free path take.

    Attributes:
        values: ``(T, *feature)``, the batch's rows one after another.
        cu_seqlens: ``(B + 1,)`` int32, where each row starts in ``values``, then ``T``.
        position_ids: ``(T,)`` int64, each element's position in its row (restarts at 0).
        max_seqlen: the longest row's length, a Python int.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, Ragged
        >>> col = Ragged.from_rows([np.array([1, 2, 3]), np.array([4])])
        >>> flat = next(iter(Loader(col, 2, layout="flat", shuffle=False)))
        >>> flat.values.tolist(), flat.cu_seqlens.tolist(), flat.position_ids.tolist()
        ([1, 2, 3, 4], [0, 3, 4], [0, 1, 2, 0])
        >>> flat.max_seqlen
        3
    """

    values: Any
    cu_seqlens: Any
    position_ids: Any
    max_seqlen: int


class Packed(NamedTuple):
    """A batch of fixed-length rows packed with documents (the pack and fit layouts).

    The batches of [`PackLayout`][looptoolkit.PackLayout] and [`FitLayout`][looptoolkit.FitLayout].

    Attributes:
        values: ``(R, seq_len, *feature)``, the rows; padding (only where a row is not full)
            holds ``pad_value``.
        segment_ids: ``(R, seq_len)`` int32, the documents (pieces) of each row numbered from 1;
            0 at padding.
        position_ids: ``(R, seq_len)`` int64, each element's position in its piece (0 at
            padding).
        cu_seqlens: int32 boundaries of the pieces in the flattened batch (``R * seq_len``
            elements), each row's padding counted as a piece of its own, so the last entry is
            ``R * seq_len``.
        max_seqlen: the longest piece, a Python int.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, PackLayout, Ragged
        >>> col = Ragged.from_rows([np.array([1, 2, 3]), np.array([4, 5])])
        >>> packed = next(iter(Loader(col, 2, layout=PackLayout(seq_len=4), shuffle=False)))
        >>> packed.values.tolist()
        [[1, 2, 3, 4], [5, 0, 0, 0]]
        >>> packed.segment_ids.tolist(), packed.position_ids.tolist()
        ([[1, 1, 1, 2], [1, 0, 0, 0]], [[0, 1, 2, 0], [0, 0, 0, 0]])
        >>> packed.cu_seqlens.tolist()
        [0, 3, 4, 5, 8]
    """

    values: Any
    segment_ids: Any
    position_ids: Any
    cu_seqlens: Any
    max_seqlen: int


def copy_pieces(
    out: np.ndarray, dst: np.ndarray, src: np.ndarray, lens: np.ndarray, values: np.ndarray
) -> None:
    """``out[dst[k]:dst[k] + lens[k]] = values[src[k]:src[k] + lens[k]]`` for every piece ``k``."""
    total = int(lens.sum())
    if not total:
        return
    if total >= _SLICE_MIN * len(lens):
        for d, s, n in zip(dst.tolist(), src.tolist(), lens.tolist(), strict=True):
            out[d : d + n] = values[s : s + n]
        return
    within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    out[np.repeat(dst, lens) + within] = values.take(np.repeat(src, lens) + within, axis=0)


def padded_length(longest: Any, multiple: int | None, buckets: np.ndarray | None) -> Any:
    """``L`` of a batch whose longest row has ``longest`` elements (an int, or an array of them).

    The smallest of ``buckets`` that holds it (the largest bucket for longer rows, refused at
    construction), else ``longest`` rounded up to a multiple of ``multiple``, else ``longest``.
    """
    if buckets is not None:
        return buckets[np.minimum(np.searchsorted(buckets, longest), len(buckets) - 1)]
    if multiple:
        return -(-longest // multiple) * multiple
    return longest


def _filled(shape: tuple[int, ...], pad_value: Any, dtype: np.dtype) -> np.ndarray:
    # Zeros come from the allocator already zeroed (calloc): no pass over the memory.
    if pad_value == 0:
        return np.zeros(shape, dtype=dtype)
    return np.full(shape, pad_value, dtype=dtype)


def pad_batch(
    values: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    length: int,
    pad_value: Any,
) -> Padded:
    """Rows ``values[starts[i]:starts[i] + lens[i]]`` padded to ``length``.

    ``lens`` becomes the batch's ``lengths`` (not copied: pass an array of the batch's own).
    """
    b = len(lens)
    feature = values.shape[1:]
    out = _filled((b, length, *feature), pad_value, values.dtype)
    counts = lens.tolist()
    if sum(counts) >= _SLICE_MIN * b:
        for i, (s, n) in enumerate(zip(starts.tolist(), counts, strict=True)):
            out[i, :n] = values[s : s + n]
    else:
        flat = out.reshape(b * length, *feature)
        copy_pieces(flat, np.arange(b, dtype=np.int64) * length, starts, lens, values)
    mask = np.arange(length) < lens[:, None]
    return Padded(out, mask, lens.astype(np.int64, copy=False))


def flat_batch(values: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> Flat:
    """Rows ``values[starts[i]:starts[i] + lens[i]]`` one after another."""
    cu = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cu[1:])
    total = int(cu[-1])
    if total >= _SLICE_MIN * len(lens):
        pieces = zip(starts.tolist(), lens.tolist(), strict=True)
        out = np.concatenate([values[s : s + n] for s, n in pieces])
    else:
        out = np.empty((total, *values.shape[1:]), dtype=values.dtype)
        copy_pieces(out, cu[:-1], starts, lens, values)
    positions = np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lens)
    longest = int(lens.max()) if len(lens) else 0
    return Flat(out, cu.astype(np.int32), positions, longest)


def packed_batches(
    values: np.ndarray,
    src: np.ndarray,
    lens: np.ndarray,
    dst: np.ndarray,
    per: int,
    rows: list[int],
    seq_len: int,
    pad_value: Any,
) -> Iterator[Packed]:
    """The packed batches of a block, one at a time: rows ``[j * per, j * per + rows[j])`` each.

    Piece ``k`` is ``values[src[k]:src[k] + lens[k]]`` at flat position ``dst[k]`` of the block's
    rows of ``seq_len`` (``dst`` increasing, no piece crossing a row boundary, the pieces of a
    row following each other from its start); the rest of each row is padding, a segment of
    its own. The block's segments are planned at once, in arrays of one entry per piece; then
    each batch's arrays are made on their own, a few passes over its elements (the values, the
    segment ids, the positions), so one batch's memory is reused by the next.
    """
    s, span, nb = seq_len, per * seq_len, len(rows)
    dst, lens = dst.astype(np.int64, copy=False), lens.astype(np.int64, copy=False)
    n = len(dst)
    counts = np.asarray(rows, dtype=np.int64)
    firsts = np.arange(nb, dtype=np.int64) * per  # each batch's first row in the block
    row_of = dst // s
    # Each row's elements: the end of its last piece (0 without one); the rest is padding.
    filled = np.zeros(nb * per, dtype=np.int64)
    if n:
        last = np.flatnonzero(np.append(row_of[1:] != row_of[:-1], True))
        filled[row_of[last]] = (dst + lens)[last] - row_of[last] * s
    all_rows = np.arange(nb * per, dtype=np.int64)
    live = all_rows - firsts.repeat(per) < counts.repeat(per)  # the rows of a batch
    pad_rows = all_rows[(filled < s) & live]
    # The segments in order: each row's pieces, then its padding (numbered 0).
    piece_at = np.arange(n, dtype=np.int64) + np.searchsorted(pad_rows, row_of)
    pad_at = np.searchsorted(row_of, pad_rows, side="right") + np.arange(len(pad_rows))
    m = n + len(pad_rows)
    start = np.empty(m, dtype=np.int64)
    length = np.empty(m, dtype=np.int64)
    number = np.zeros(m, dtype=np.int32)
    start[piece_at], length[piece_at] = dst, lens
    start[pad_at] = pad_rows * s + filled[pad_rows]
    length[pad_at] = s - filled[pad_rows]
    number[piece_at] = np.arange(n) - np.searchsorted(row_of, row_of) + 1
    # Each batch's segments, pieces and paddings, and its longest segment.
    a, b = firsts * s, (firsts + counts) * s
    s0, s1 = np.searchsorted(start, a), np.searchsorted(start, b)
    ends = np.column_stack([s0, s1]).reshape(-1)  # reduceat: the max of [s0, s1), then junk
    longest = np.maximum.reduceat(np.append(length, 0), ends)[::2]
    longest[s1 <= s0] = 0
    local = start - start // span * span  # positions within the batch
    cu = np.insert(local, s1, counts * s).astype(np.int32)  # batch j: [s0 + j, s1 + j]
    p0, p1 = np.searchsorted(dst, a), np.searchsorted(dst, b)
    q0 = np.searchsorted(pad_rows, firsts)
    q1 = np.searchsorted(pad_rows, firsts + counts)
    pads = zip(local[pad_at].tolist(), length[pad_at].tolist(), strict=True)
    pad_spans = [slice(x, x + k) for x, k in pads]
    ramp = np.arange(span, dtype=np.int64)
    feature, dtype = values.shape[1:], values.dtype
    slices = n > 0 and int(lens.sum()) >= _SLICE_MIN * n
    dst_local = dst - dst // span * span
    dst_l, src_l, lens_l = dst_local.tolist(), src.tolist(), lens.tolist()
    bounds_l = zip(
        rows,
        s0.tolist(),
        s1.tolist(),
        p0.tolist(),
        p1.tolist(),
        q0.tolist(),
        q1.tolist(),
        longest.tolist(),
        strict=True,
    )
    for j, (r, i0, i1, k0, k1, pad0, pad1, top) in enumerate(bounds_l):
        size = r * s
        out = _filled((size, *feature), pad_value, dtype)
        if slices:
            for d, x, k in zip(dst_l[k0:k1], src_l[k0:k1], lens_l[k0:k1], strict=True):
                out[d : d + k] = values[x : x + k]
        else:
            copy_pieces(out, dst_local[k0:k1], src[k0:k1], lens[k0:k1], values)
        seg = length[i0:i1]
        segment_ids = number[i0:i1].repeat(seg)
        positions = local[i0:i1].repeat(seg)
        np.subtract(ramp[:size], positions, out=positions)
        for x in pad_spans[pad0:pad1]:
            positions[x] = 0
        yield Packed(
            out.reshape(r, s, *feature),
            segment_ids.reshape(r, s),
            positions.reshape(r, s),
            cu[i0 + j : i1 + j + 1],
            top,
        )
