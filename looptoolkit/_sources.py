"""Global epoch orders: the permutation of ``[0, n)`` an epoch visits, before sharding.

:class:`~looptoolkit.order.Order` asks one of these sources for segments of the
epoch's global order: :class:`Sequential` (``arange``), :class:`Materialized` (a
full permutation) or :class:`Grouped` (grouped shuffling, generated chunk by
chunk so that any position is computed without an ``n``-long array). Every
random choice comes from :func:`generator`, a pure function of ``(seed, epoch,
stream, ...)``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["STREAM_FULL", "Grouped", "Materialized", "Sequential", "Source", "generator"]

# Positions per chunk of a grouped order: ``max(1, _CHUNK_POSITIONS // group_size)``
# groups are generated together from one random stream. Part of the order's
# definition (changing it changes every grouped order), so it is a constant.
# 2**16 int64 positions are 512 KiB: a chunk is generated and consumed in cache.
_CHUNK_POSITIONS = 1 << 16

# Random streams of one (seed, epoch).
STREAM_FULL = 0
_STREAM_GROUPS = 1
_STREAM_CHUNK = 2


class Source(Protocol):
    """One epoch's global order, readable by position."""

    def segment(self, start: int, stop: int) -> np.ndarray:
        """Positions ``[start, stop)`` (``0 <= start < stop <= n``) as ``np.intp``."""
        ...

    def materialize(self) -> np.ndarray:
        """The whole order as a fresh array."""
        ...


class Sequential:
    def __init__(self, n: int) -> None:
        self.n = n

    def segment(self, start: int, stop: int) -> np.ndarray:
        return np.arange(start, stop, dtype=np.intp)

    def materialize(self) -> np.ndarray:
        return np.arange(self.n, dtype=np.int64)


class Materialized:
    def __init__(self, perm: np.ndarray) -> None:
        self.perm = perm

    def segment(self, start: int, stop: int) -> np.ndarray:
        return self.perm[start:stop]

    def materialize(self) -> np.ndarray:
        return self.perm.copy()


class Grouped:
    """A grouped order, computed chunk by chunk in O(n / group + chunk) memory.

    Virtual index ``q`` stands for sample ``(rotation + q) % n``, with a rotation
    drawn per epoch so that group membership changes between epochs. Groups are
    ``[j * g, (j + 1) * g)`` of the virtual range (the last one may be short).
    Slot ``t`` of the grouped stream holds group ``group_perm[t]``; chunk ``c``
    covers slots ``[c * per_chunk, (c + 1) * per_chunk)`` and draws the in-group
    orders of its groups from its own stream ``(seed, epoch, _STREAM_CHUNK, c)``,
    so any chunk can be computed on its own.

    With ``run_size`` r > 1 the order inside a group is a shuffle of runs of r
    consecutive positions rather than of single positions: rows of a run are
    gathered together (memory locality reaches the gather), at the price of
    neighbouring rows sharing a batch far more often. r = 1 is a shuffle of
    positions, the same order as before runs existed.

    Position ``t`` of the epoch's order is position ``(t + shift) % n`` of the
    grouped stream, with ``shift`` drawn per epoch in ``[1, g)`` (0 when
    ``g == 1``). Without it, a batch size that is a multiple of ``g`` (with
    ``g`` dividing ``n``) would make every batch a union of whole groups, and two
    epochs with the same ``rotation % g`` would have the same batches; with it
    batch boundaries never coincide with group boundaries, so every batch holds
    a random part of a group, different in each epoch.
    """

    def __init__(self, n: int, group_size: int, seed: int, epoch: int, run_size: int = 1) -> None:
        self.n = n
        self.seed = seed
        self.epoch = epoch
        g = self.g = min(group_size, n)
        self.run_size = min(run_size, g)
        k = self.k = -(-n // g)
        self.last_size = n - (k - 1) * g  # size of the last (possibly short) group
        self.short = g - self.last_size
        self.per_chunk = max(1, _CHUNK_POSITIONS // g)
        self.num_chunks = -(-k // self.per_chunk)
        rng = generator(seed, epoch, _STREAM_GROUPS)
        self.group_perm = rng.permutation(k)
        self.rotation = int(rng.integers(n))
        self.shift = 1 + int(rng.integers(g - 1)) if g > 1 else 0
        # Slot of the short group; slots after it start `short` positions earlier.
        self.short_slot = int(np.flatnonzero(self.group_perm == k - 1)[0]) if self.short else k
        self._cache: dict[int, np.ndarray] = {}

    def slot_start(self, t: int) -> int:
        return t * self.g - (self.short if t > self.short_slot else 0)

    def chunk_of(self, position: int) -> int:
        g = self.g
        if position < self.short_slot * g + self.last_size:
            slot = position // g
        else:
            slot = (position + self.short) // g
        return slot // self.per_chunk

    def chunk_start(self, c: int) -> int:
        return self.slot_start(min(c * self.per_chunk, self.k)) if c < self.num_chunks else self.n

    def chunk(self, c: int) -> np.ndarray:
        cached = self._cache.get(c)
        if cached is not None:
            return cached
        values = self._generate(c)
        if len(self._cache) >= 2:  # sequential reads need at most two chunks at once
            del self._cache[next(iter(self._cache))]
        self._cache[c] = values
        return values

    def _generate(self, c: int) -> np.ndarray:
        n, g = self.n, self.g
        t0 = c * self.per_chunk
        t1 = min(t0 + self.per_chunk, self.k)
        rows = t1 - t0
        rng = generator(self.seed, self.epoch, _STREAM_CHUNK, c)
        r = self.run_size
        runs = -(-g // r)
        block = np.empty((rows, runs), dtype=np.intp)
        block[...] = np.arange(runs, dtype=np.intp)
        # Fisher-Yates on each row, in C; measured faster than argsort of random keys.
        rng.permuted(block, axis=1, out=block)
        if r > 1:
            # Runs of `r` consecutive positions, in shuffled run order; a last short
            # run leaves the same number of positions past the group in every row.
            block = (block[:, :, None] * r + np.arange(r, dtype=np.intp)).reshape(rows, -1)
            if runs * r != g:
                block = block[block < g].reshape(rows, g)
        short_row = self.short_slot - t0 if self.short and t0 <= self.short_slot < t1 else -1
        if short_row >= 0:
            # A uniform permutation of [0, g) restricted to [0, last_size) is a
            # uniform permutation of [0, last_size).
            keep = block[short_row] < self.last_size
        base = (self.rotation + self.group_perm[t0:t1] * g) % n
        block += base[:, None]
        # At most one group straddles n in rotated space; only its row wraps.
        for row in np.flatnonzero(base > n - g):
            values = block[row]
            values[values >= n] -= n
        if short_row < 0:
            return block.reshape(-1)
        return np.concatenate(
            (
                block[:short_row].reshape(-1),
                block[short_row][keep],
                block[short_row + 1 :].reshape(-1),
            )
        )

    def segment(self, start: int, stop: int) -> np.ndarray:
        n, u = self.n, self.shift
        start, stop = start + u, stop + u
        if stop <= n:
            return self._stream(start, stop)
        if start >= n:
            return self._stream(start - n, stop - n)
        return np.concatenate((self._stream(start, n), self._stream(0, stop - n)))

    def _stream(self, start: int, stop: int) -> np.ndarray:
        """Positions ``[start, stop)`` of the grouped stream (before the shift)."""
        c0, c1 = self.chunk_of(start), self.chunk_of(stop - 1)
        if c0 == c1:
            s = self.chunk_start(c0)
            return self.chunk(c0)[start - s : stop - s]
        pieces = []
        for c in range(c0, c1 + 1):
            s = self.chunk_start(c)
            values = self.chunk(c)
            lo = max(start, s) - s
            hi = min(stop, s + len(values)) - s
            pieces.append(values[lo:hi])
        return np.concatenate(pieces)

    def materialize(self) -> np.ndarray:
        n, u = self.n, self.shift
        out = np.empty(n, dtype=np.int64)
        for c in range(self.num_chunks):
            values = self._generate(c)
            s = self.chunk_start(c) - u  # where the chunk lands after the shift
            if s < 0:
                s += n
            head = min(len(values), n - s)
            out[s : s + head] = values[:head]
            out[: len(values) - head] = values[head:]
        return out


def generator(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """The random generator of ``(seed, epoch, *stream)``, distinct for distinct tuples.

    Each value is written as its word count followed by its 32-bit words, so the
    entropy list is an injective, prefix-free encoding of the tuple: ``[seed,
    epoch]`` itself is not (``SeedSequence`` splits a large int into words, and
    ``(2**32 + 5, 0)`` and ``(5, 1)`` both become ``[5, 1, 0]`` = ``[5, 1]``).
    """
    words: list[int] = []
    for value in (seed, epoch, *stream):
        parts = [value & 0xFFFFFFFF]
        value >>= 32
        while value:
            parts.append(value & 0xFFFFFFFF)
            value >>= 32
        words.append(len(parts))
        words.extend(parts)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


# -- the orders DataLoader users bring: subsets, weights, replacement, custom orders ---

_STREAM_DRAW = 3


class Mapped:
    """A source over positions of a subset: ``subset[inner]``, for ``indices=``."""

    def __init__(self, inner: Source, subset: np.ndarray) -> None:
        self.inner = inner
        self.subset = subset

    def segment(self, start: int, stop: int) -> np.ndarray:
        return self.subset[self.inner.segment(start, stop)]

    def materialize(self) -> np.ndarray:
        return self.subset[self.inner.materialize()].astype(np.int64, copy=False)


def draw(
    seed: int, epoch: int, weights: np.ndarray | None, k: int, n: int, replacement: bool
) -> np.ndarray:
    """``k`` rows of ``[0, n)`` drawn for ``(seed, epoch)``, in the order they were drawn.

    With ``weights`` a row is drawn with probability proportional to its weight:
    with replacement by inverting the cumulative weights at sorted uniforms
    (``searchsorted``), then shuffling,
    without it by the exponential race (Efraimidis and Spirakis: each row draws
    ``E / w``, ``E`` exponential; the ``k`` smallest, in increasing order, are a
    weighted draw without replacement). Without weights, with replacement, rows
    are uniform. O(n) memory either way.
    """
    rng = generator(seed, epoch, _STREAM_DRAW)
    if weights is None:
        return rng.integers(0, n, size=k, dtype=np.intp)
    if replacement:
        cdf = np.cumsum(weights, dtype=np.float64)
        # k sorted uniforms (normalised sums of exponentials), so that searchsorted
        # walks the cumulative weights in order instead of jumping at random: the
        # sorted draws, shuffled, are k independent draws.
        spacings = np.cumsum(rng.standard_exponential(k + 1))
        u = spacings[:k] * (cdf[-1] / spacings[k])
        # side="right": a zero-weight row (an empty interval) is never chosen.
        rows = np.minimum(np.searchsorted(cdf, u, side="right"), n - 1).astype(np.intp)
        rng.shuffle(rows)
        return rows
    with np.errstate(divide="ignore"):
        race = rng.standard_exponential(n) / weights  # zero weight: never before the rest
    if k < n:
        first = np.argpartition(race, k - 1)[:k]
        return first[np.argsort(race[first], kind="stable")].astype(np.intp, copy=False)
    return np.argsort(race, kind="stable").astype(np.intp, copy=False)
