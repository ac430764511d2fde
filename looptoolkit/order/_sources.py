"""Global epoch orders: the permutation of ``[0, n)`` an epoch visits, before sharding.

[`Order`][looptoolkit.Order] asks one of these sources for segments of the
epoch's global order: [`Sequential`][looptoolkit.order._sources.Sequential] (``arange``),
[`Materialized`][looptoolkit.order._sources.Materialized] (a permutation held whole: the full
shuffle below ``KEYED_MIN_ROWS`` rows, a weighted draw without replacement, fewer draws with
replacement, a custom order) or
[`Grouped`][looptoolkit.order._sources.Grouped] (grouped shuffling, generated chunk by chunk so
that any position is computed without an ``n``-long array); the full shuffle from
``KEYED_MIN_ROWS`` rows on is [`Keyed`][looptoolkit.order._keyed.Keyed], whose every position is
computed on its own, and draws with replacement from ``KEYED_MIN_ROWS`` draws on are
[`KeyedDraws`][looptoolkit.order._keyed.KeyedDraws] or their weighted kind. A source
with ``positional = True`` also has ``at(positions)``: a rank then reads only its own positions.
Every random choice comes from [`generator`][looptoolkit.order._sources.generator], a pure function
of ``(seed, epoch, stream, ...)``.
"""

from __future__ import annotations

from typing import Protocol, cast

import numpy as np

__all__ = [
    "STREAM_FULL",
    "STREAM_KEYED_DRAWS",
    "ChunkGrouped",
    "Grouped",
    "Materialized",
    "Positional",
    "Sequential",
    "Source",
    "chunk_shards",
    "generator",
]

# Positions per chunk of a grouped order: ``max(1, _CHUNK_POSITIONS // group_size)``
# groups are generated together from one random stream. Part of the order's
# definition (changing it changes every grouped order), so it is a constant.
# 2**16 int64 positions are 512 KiB: a chunk is generated and consumed in cache.
_CHUNK_POSITIONS = 1 << 16

# Random streams of one (seed, epoch).
STREAM_FULL = 0
_STREAM_GROUPS = 1
_STREAM_CHUNK = 2
STREAM_KEYED_DRAWS = 6  # the keys of uniform draws with replacement computed by position


class Source(Protocol):
    """One epoch's global order, readable by position."""

    def segment(self, start: int, stop: int) -> np.ndarray:
        """Positions ``[start, stop)`` (``0 <= start < stop <= n``) as ``np.intp``."""
        ...

    def materialize(self) -> np.ndarray:
        """The whole order as a fresh array."""
        ...


class Positional(Source, Protocol):
    """A source whose values at any positions are computed on their own (``positional`` True)."""

    positional: bool

    def at(self, positions: np.ndarray) -> np.ndarray:
        """Values at ``positions`` (integers in ``[0, n)``) as ``np.intp``."""
        ...


class Sequential:
    def __init__(self, n: int) -> None:
        self.n = n

    def segment(self, start: int, stop: int) -> np.ndarray:
        return np.arange(start, stop, dtype=np.intp)

    def materialize(self) -> np.ndarray:
        return np.arange(self.n, dtype=np.int64)


class Materialized:
    # fresh: ``perm`` was made for this source alone (materialize hands it over, no copy).
    def __init__(self, perm: np.ndarray, fresh: bool = False) -> None:
        self.perm = perm
        self.fresh = fresh

    def segment(self, start: int, stop: int) -> np.ndarray:
        return self.perm[start:stop]

    def materialize(self) -> np.ndarray:
        return self.perm if self.fresh else self.perm.copy()


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

    @property
    def positional(self) -> bool:
        """Whether ``at`` computes positions on their own (a keyed inner order)."""
        return getattr(self.inner, "positional", False)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self.subset[cast(Positional, self.inner).at(positions)]

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
    are uniform. O(n) memory either way, on every rank and every epoch.

    An order draws its epoch this way without replacement at any size, and with
    replacement below ``KEYED_MIN_ROWS`` draws; from there on each draw is
    computed from its position ([`looptoolkit.order._keyed`][looptoolkit.order._keyed]), a
    different sequence.
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


# -- the grouped order of a chunked store: groups of whole chunks --------------------

_STREAM_STORE_CHUNKS = 4
_STREAM_STORE_GROUP = 5


def chunk_shards(n: int, chunk_rows: int, world_size: int) -> tuple[int, ...]:
    """Rows each rank gets from a [`ChunkGrouped`][looptoolkit.order._sources.ChunkGrouped] order.

    The same every epoch.

    The ``F`` full chunks are dealt round-robin (rank ``r`` gets ``len(range(r, F,
    W))`` of them) and a short last chunk goes to rank ``F % W``.
    """
    chunks = -(-n // chunk_rows)
    last = n - (chunks - 1) * chunk_rows
    full = chunks if last == chunk_rows else chunks - 1
    rows = [len(range(r, full, world_size)) * chunk_rows for r in range(world_size)]
    if full < chunks:
        rows[full % world_size] += last
    return tuple(rows)


class ChunkGrouped:
    """The grouped order of a chunked store: groups of whole chunks, in O(n / chunk) memory.

    The data is cut into chunks of ``chunk_rows`` rows (the store's own chunks;
    the last one may be short). Each epoch draws a permutation of the full
    chunks and deals it round-robin to the ``world_size`` ranks; the short chunk,
    if any, goes to rank ``F % world_size`` (``F`` full chunks) at a random
    place in its list. A rank's chunks, in their drawn order, are cut into groups
    of ``group_chunks``; a rank's stream is its groups one after the other, each
    group's rows shuffled (stream ``(seed, epoch, _STREAM_STORE_GROUP, rank,
    group)``). So every chunk belongs to one group of one rank, and a reader that
    keeps a group's chunks while its rows are used reads each chunk once per epoch.

    Position ``p`` of the global order is position ``p // W`` of rank ``p % W``'s
    stream, so [`EpochOrder`][looptoolkit.order._order.EpochOrder]'s strided split gives
    each rank its own groups. The global order has ``W * m`` positions: ``m`` the
    longest rank's rows (shorter ranks wrap around their own stream: padding), or
    with ``cut`` the shortest's (longer ranks' last rows are left out).
    """

    def __init__(
        self,
        n: int,
        chunk_rows: int,
        group_chunks: int,
        seed: int,
        epoch: int,
        world_size: int = 1,
        cut: bool = False,
    ) -> None:
        self.n, self.r, self.w = n, chunk_rows, world_size
        self.seed, self.epoch = seed, epoch
        chunks = -(-n // chunk_rows)
        self.last = n - (chunks - 1) * chunk_rows
        full = chunks if self.last == chunk_rows else chunks - 1
        rng = generator(seed, epoch, _STREAM_STORE_CHUNKS)
        perm = rng.permutation(full).astype(np.intp)
        self.lists = [perm[r::world_size] for r in range(world_size)]
        if full < chunks:
            home = full % world_size
            at = int(rng.integers(len(self.lists[home]) + 1))
            self.lists[home] = np.insert(self.lists[home], at, chunks - 1)
        self.chunks = chunks
        self.group_chunks = group_chunks
        self.rows = chunk_shards(n, chunk_rows, world_size)
        self.m = min(self.rows) if cut else max(self.rows)
        self.length = world_size * self.m
        # Where each group of each rank starts in that rank's stream.
        self.starts: list[np.ndarray] = []
        for chunk_list in self.lists:
            sizes = np.where(chunk_list == chunks - 1, self.last, chunk_rows)
            group_rows = np.add.reduceat(sizes, np.arange(0, len(sizes), group_chunks))
            self.starts.append(np.concatenate(([0], np.cumsum(group_rows))).astype(np.intp))
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def group(self, rank: int, j: int) -> np.ndarray:
        """Rows of group ``j`` of ``rank``, in their shuffled order."""
        key = (rank, j)
        rows = self._cache.get(key)
        if rows is not None:
            return rows
        r, k = self.r, self.group_chunks
        chunk_list = np.sort(self.lists[rank][j * k : (j + 1) * k])
        rows = np.concatenate(
            [np.arange(c * r, min(self.n, (c + 1) * r), dtype=np.intp) for c in chunk_list]
        )
        generator(self.seed, self.epoch, _STREAM_STORE_GROUP, rank, j).shuffle(rows)
        if len(self._cache) >= 2 * self.w + 2:  # a block of positions needs a few at once
            del self._cache[next(iter(self._cache))]
        self._cache[key] = rows
        return rows

    def _stream(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Positions ``[start, stop)`` of ``rank``'s stream, wrapping around its rows."""
        size = self.rows[rank]
        starts = self.starts[rank]
        pieces = []
        while start < stop:
            lap = start - start % size
            lo, hi = start - lap, min(stop - lap, size)
            j = int(np.searchsorted(starts, lo, side="right")) - 1
            while lo < hi:
                g0, g1 = int(starts[j]), int(starts[j + 1])
                end = min(hi, g1)
                pieces.append(self.group(rank, j)[lo - g0 : end - g0])
                lo = end
                j += 1
            start = lap + hi
        if not pieces:
            return np.empty(0, dtype=np.intp)
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    def segment(self, start: int, stop: int) -> np.ndarray:
        w = self.w
        if w == 1:
            return self._stream(0, start, stop)
        out = np.empty(stop - start, dtype=np.intp)
        for rank in range(w):
            first = (rank - start) % w  # first offset in [start, stop) of this rank
            if first >= stop - start:
                continue
            t0 = (start + first) // w
            count = len(range(first, stop - start, w))
            out[first::w] = self._stream(rank, t0, t0 + count)
        return out

    def materialize(self) -> np.ndarray:
        return self.segment(0, self.length).astype(np.int64)
