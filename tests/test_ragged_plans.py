"""The vectorised plans against plain Python loops over the same rows, on random lengths."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looptoolkit.ragged import _plans
from looptoolkit.ragged._layouts import padded_length
from looptoolkit.ragged._units import _FitPieces

lengths_st = st.lists(st.integers(0, 70), min_size=1, max_size=300)


def windows_plain(lengths: list[int], size: int) -> list[list[int]]:
    """Each window's positions in the order, longest first, ties in order."""
    out = []
    for lo in range(0, len(lengths), size):
        idx = list(range(lo, min(lo + size, len(lengths))))
        out.append(sorted(idx, key=lambda i: -lengths[i]))  # sorted() is stable
    return out


def first_fit_plain(
    lengths: list[int], seq_len: int, max_segments: int | None, window: int
) -> list[list[int]]:
    """First fit decreasing within each window: the packed rows, as sorted positions."""
    rows: list[list[int]] = []
    for order in windows_plain(lengths, window):
        room: list[int] = []
        held: list[list[int]] = []
        for i in order:
            for b, r in enumerate(room):
                full = max_segments is not None and len(held[b]) >= max_segments
                if r >= lengths[i] and not full:
                    room[b] -= lengths[i]
                    held[b].append(i)
                    break
            else:
                room.append(seq_len - lengths[i])
                held.append([i])
        rows += [sorted(h) for h in held]
    return rows


def greedy_plain(
    cost: list[int], budget: int, mode: str, window: int, padded=lambda x: x
) -> list[int]:
    """Batch starts of the greedy budget, a batch never crossing a window boundary."""
    starts = []
    for lo in range(0, len(cost), window):
        count = 0
        acc = 0
        for i in range(lo, min(lo + window, len(cost))):
            grown = acc + cost[i] if mode == "sum" else max(acc, padded(cost[i]))
            total = grown if mode == "sum" else (count + 1) * grown
            if count == 0 or total > budget:
                starts.append(i)
                count, acc = 1, (cost[i] if mode == "sum" else padded(cost[i]))
            else:
                count, acc = count + 1, grown
    return [*starts, len(cost)]


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, size=st.integers(1, 40))
def test_sorted_windows_are_a_stable_sort_of_each_window(lengths, size):
    sw = _plans.SortedWindows(np.asarray(lengths, dtype=np.int32), size)
    m = len(lengths)
    want = [i for w in windows_plain(lengths, size) for i in w]
    assert sw.order().tolist() == want
    sorted_lengths = sw.lengths().reshape(-1)
    assert sorted_lengths[:m].tolist() == [lengths[i] for i in want]
    assert (sorted_lengths[m:] == 0).all()


@settings(max_examples=80, deadline=None)
@given(
    lengths=lengths_st,
    extra=st.integers(0, 30),
    max_segments=st.one_of(st.none(), st.integers(1, 5)),
    window=st.sampled_from([1, 2, 3, 7, 16, 128]),
)
def test_first_fit_is_first_fit_decreasing_per_window(lengths, extra, max_segments, window):
    seq_len = max(max(lengths), 1) + extra
    piece, row_first = _plans.fit_rows(
        np.asarray(lengths, dtype=np.int32), seq_len, max_segments, window
    )
    rows = [piece[a:b].tolist() for a, b in itertools.pairwise(row_first)]
    assert rows == first_fit_plain(lengths, seq_len, max_segments, window)


def test_first_fit_in_chunks_of_windows_is_the_same_plan(monkeypatch):
    # Windows are placed in chunks; a plan over several chunks equals one over a single chunk.
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 300, 5_000).astype(np.int32)
    whole = _plans.fit_rows(lengths, 512, 3, 16)
    monkeypatch.setattr(_plans, "_FIT_CHUNK", 7)
    chunked = _plans.fit_rows(lengths, 512, 3, 16)
    np.testing.assert_array_equal(whole[0], chunked[0])
    np.testing.assert_array_equal(whole[1], chunked[1])
    want = first_fit_plain(lengths.tolist(), 512, 3, 16)
    assert len(whole[1]) - 1 == len(want)


@settings(max_examples=80, deadline=None)
@given(
    lengths=lengths_st,
    extra=st.integers(0, 200),
    window=st.integers(1, 50),
    mode=st.sampled_from(["sum", "max"]),
    multiple=st.one_of(st.none(), st.integers(1, 8)),
)
def test_greedy_budgets_match_the_plain_greedy(lengths, extra, window, mode, multiple):
    def pad(x):
        return padded_length(x, multiple, None)

    budget = int(pad(max(lengths))) + extra if mode == "max" else max(lengths) + extra
    budget = max(budget, 1)
    cost = np.asarray(lengths, dtype=np.int32)
    got = _plans.greedy_bounds(cost, budget, mode=mode, window=window, padded=pad)
    assert got.tolist() == greedy_plain(lengths, budget, mode, window, pad)
    if mode == "max":  # windows sorted longest first: the first row of a batch is its longest
        ordered = [lengths[i] for w in windows_plain(lengths, window) for i in w]
        cost = np.asarray(ordered, dtype=np.int32)
        got = _plans.greedy_bounds(
            cost, budget, mode="max", window=window, padded=pad, sorted_desc=True
        )
        assert got.tolist() == greedy_plain(ordered, budget, "max", window, pad)


@settings(max_examples=50, deadline=None)
@given(lengths=lengths_st, batch=st.integers(1, 9), shuffle=st.booleans())
def test_length_grouped_batches_match_the_plain_grouping(lengths, batch, shuffle):
    rng = np.random.default_rng(5) if shuffle else None
    sw, starts, stops = _plans.length_grouped(np.asarray(lengths, np.int32), batch, rng)
    order = sw.order()
    got = [order[a:b].tolist() for a, b in zip(starts, stops, strict=True)]
    order = [i for w in windows_plain(lengths, batch * 50) for i in w]
    plain = [order[k : k + batch] for k in range(0, len(order), batch)]
    full = len(lengths) // batch
    if shuffle:
        perm = np.random.default_rng(5).permutation(full)
        plain = [plain[p] for p in perm] + plain[full:]
    assert got == plain


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 60), min_size=1, max_size=80), seq_len=st.integers(1, 20))
def test_fit_pieces_cut_long_rows_in_place(lengths, seq_len):
    pieces = _FitPieces(np.asarray(lengths, np.int32), seq_len, split=True)
    plain = [
        (doc, start, min(seq_len, n - start))
        for doc, n in enumerate(lengths)
        for start in range(0, n, seq_len)
    ]
    doc, start = pieces.locate(np.arange(len(plain)))
    got = list(zip(doc.tolist(), start.tolist(), pieces.length.tolist(), strict=True))
    assert got == plain


@pytest.mark.parametrize("split", [True, False])
def test_fit_pieces_without_long_rows_are_the_rows(split):
    lens = np.array([3, 5, 1], np.int32)
    pieces = _FitPieces(lens, 5, split)
    doc, start = pieces.locate(np.arange(3))
    assert doc.tolist() == [0, 1, 2] and start.tolist() == [0, 0, 0]
    assert pieces.length.tolist() == [3, 5, 1]


@pytest.mark.parametrize("scale", [1_000, 100_000, 50_000_000])
def test_plans_of_long_rows_use_wide_keys_and_rooms(scale):
    # Lengths past 2**14 (int32 rooms) and past 2**25 (64-bit sort keys) plan the same.
    rng = np.random.default_rng(scale)
    lengths = (rng.integers(0, 60, 400) * scale).astype(np.int64)
    seq_len = int(lengths.max()) + scale
    piece, row_first = _plans.fit_rows(lengths, seq_len, 3, 16)
    rows = [piece[a:b].tolist() for a, b in itertools.pairwise(row_first)]
    assert rows == first_fit_plain(lengths.tolist(), seq_len, 3, 16)
    sw = _plans.SortedWindows(lengths, 32)
    assert sw.order().tolist() == [i for w in windows_plain(lengths.tolist(), 32) for i in w]
    budget = int(lengths.max()) * 3
    got = _plans.greedy_bounds(lengths, budget, mode="sum", window=50)
    assert got.tolist() == greedy_plain(lengths.tolist(), budget, "sum", 50)
