"""Packed batches made a block at a time against a plain per-element reference.

The block's pieces (where each goes, where it comes from, how long) are drawn at random
(hypothesis): rows filled or not, pieces of any length (0 included, as the construction
probe makes for empty rows), short and long rows (both copies of the values), short last
batches, features, pad values and dtypes.
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from looptoolkit.ragged._layouts import Packed, packed_batches

SOURCE = 256  # elements of the column the pieces are read from


def packed_plain(
    values: np.ndarray,
    pieces: list[tuple[int, int, int]],
    per: int,
    rows: list[int],
    seq_len: int,
    pad_value: int,
) -> list[Packed]:
    """Each batch element by element: pieces ``(dst, src, length)``, rows of ``seq_len``."""
    out = []
    for j, r in enumerate(rows):
        base, size = j * per * seq_len, r * seq_len
        vals = np.full((size, *values.shape[1:]), pad_value, dtype=values.dtype)
        seg, pos, cu = [0] * size, [0] * size, []
        for row in range(r):
            row_start, filled, number = row * seq_len, 0, 0
            for d, x, k in pieces:
                if not base + row_start <= d < base + row_start + seq_len:
                    continue
                number += 1
                cu.append(d - base)
                for t in range(k):
                    at = d - base + t
                    vals[at] = values[x + t]
                    seg[at], pos[at] = number, t
                filled = d - base - row_start + k
            if filled < seq_len:  # the padding: a segment of its own, numbered 0
                cu.append(row_start + filled)
        cu.append(size)
        shape = (r, seq_len)
        out.append(
            Packed(
                vals.reshape(r, seq_len, *values.shape[1:]),
                np.asarray(seg, dtype=np.int32).reshape(shape),
                np.asarray(pos, dtype=np.int64).reshape(shape),
                np.asarray(cu, dtype=np.int32),
                max(b - a for a, b in itertools.pairwise(cu)),
            )
        )
    return out


@st.composite
def blocks(draw: st.DrawFn) -> tuple:
    # Short rows (pieces gathered with one index) and long ones (mostly copied as slices).
    seq_len = draw(st.one_of(st.integers(1, 9), st.integers(24, 64)))
    per = draw(st.integers(1, 4))
    nb = draw(st.integers(1, 4))
    rows = [per] * (nb - 1) + [draw(st.integers(1, per))]
    pieces = []
    for j, r in enumerate(rows):
        for row in range((j * per), j * per + r):
            at, full = 0, draw(st.booleans())
            while at < seq_len and (full or draw(st.booleans())):
                k = draw(st.integers(0 if at == 0 else 1, seq_len - at))
                pieces.append((row * seq_len + at, draw(st.integers(0, SOURCE - k)), k))
                at += k
                if k == 0:
                    break
    feature = draw(st.sampled_from([(), (2,)]))
    dtype = draw(st.sampled_from([np.int32, np.int64, np.float32]))
    pad_value = draw(st.sampled_from([0, -1]))
    return seq_len, per, rows, pieces, feature, dtype, pad_value


@settings(max_examples=300, deadline=None)
@given(block=blocks())
def test_packed_batches_match_the_plain_reference(block):
    seq_len, per, rows, pieces, feature, dtype, pad_value = block
    values = (np.arange(SOURCE * max(1, np.prod(feature, dtype=int))) + 1).astype(dtype)
    values = values.reshape(SOURCE, *feature)
    dst, src, lens = (np.asarray([p[i] for p in pieces], dtype=np.int64) for i in range(3))
    got = list(packed_batches(values, src, lens, dst, per, rows, seq_len, pad_value))
    want = packed_plain(values, pieces, per, rows, seq_len, pad_value)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for name, a, b in zip(Packed._fields, g, w, strict=True):
            if isinstance(b, np.ndarray):
                assert a.dtype == b.dtype and a.shape == b.shape, name
                np.testing.assert_array_equal(a, b, err_msg=name)
            else:
                assert type(a) is int and a == b, name


def test_long_pieces_are_copied_as_slices_and_short_ones_gathered():
    # Both copies of the values: pieces of 30 elements (slices) and of 2 (one gather).
    values = np.arange(1000, dtype=np.int32)
    for k in (30, 2):
        dst = np.arange(0, 60, k, dtype=np.int64)
        src = dst[::-1] + 100
        lens = np.full(len(dst), k, dtype=np.int64)
        pieces = list(zip(dst.tolist(), src.tolist(), lens.tolist(), strict=True))
        (got,) = packed_batches(values, src, lens, dst, 2, [2], 30, 0)
        (want,) = packed_plain(values, pieces, 2, [2], 30, 0)
        np.testing.assert_array_equal(got.values, want.values)
        np.testing.assert_array_equal(got.position_ids, want.position_ids)
