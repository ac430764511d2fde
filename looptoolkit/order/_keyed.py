"""The full shuffle computed by position: a keyed bijection of ``[0, n)`` per ``(seed, epoch)``.

Part of the order step ([`looptoolkit.order`][looptoolkit.order]): above
``KEYED_MIN_ROWS`` rows the ``"full"`` order is
[`Keyed`][looptoolkit.order._keyed.Keyed], a source of
[`looptoolkit.order._sources`][looptoolkit.order._sources] whose value at any position is
computed on its own, so a rank computes only its own positions, a block at a
time, in O(block) memory, and a resumed epoch starts in O(1).

The bijection is a Feistel network on ``m``-bit words (``2**m`` the next power
of two of ``n``, at least 4), cut into a high half of ``m // 2`` bits and a low
half of ``m - m // 2`` bits. Round ``i`` replaces one half ``h`` by
``h ^ F(k_i, other half)``, alternating halves (an unbalanced Feistel network:
every round is its own inverse given the other half, so the whole network is a
permutation of ``[0, 2**m)``). ``F`` is the 64-bit finaliser of MurmurHash3
(``fmix64``, a bijective multiply-xorshift mixer) of the other half xored with
the round key, cut to the half's width. Values that land at or above ``n`` are
encrypted again (cycle-walking) until they are below ``n``: the walk from a
position inside ``[0, n)`` meets another one of its cycle, so the result is a
permutation of ``[0, n)``. Fewer than half the words of ``[0, 2**m)`` lie
outside ``[0, n)``, so a position needs fewer than two encryptions on average;
only the positions still outside are walked again.

Draws with replacement of ``KEYED_MIN_ROWS`` or more per epoch are computed by
position too: [`KeyedDraws`][looptoolkit.order._keyed.KeyedDraws] (uniform: a keyed
64-bit hash of the position, modulo ``n``) and
[`KeyedWeightedDraws`][looptoolkit.order._keyed.KeyedWeightedDraws] (weighted: the
same hash as a uniform in ``[0, 1)``, inverted through the cumulative weights).
"""

from __future__ import annotations

import numpy as np

from looptoolkit.order._sources import STREAM_FULL, STREAM_KEYED_DRAWS, generator

__all__ = ["KEYED_MIN_ROWS", "KEYED_ROUNDS", "Keyed", "KeyedDraws", "KeyedWeightedDraws"]

KEYED_MIN_ROWS: int = 1 << 20
"""Rows from which the ``"full"`` order is the keyed bijection; below it, ``rng.permutation(n)``.

Draws with replacement (uniform or weighted) are computed by position from this
many draws per epoch on. Part of the order's definition (it depends on sizes
alone, so a resumed run and a run on another number of ranks choose the same
order). Below it a materialised permutation is faster to build and iterate, and
costs at most 8 MiB; ``docs/order.md`` has the measurements.
"""

KEYED_ROUNDS: int = 8
"""Feistel rounds, alternating halves: four of each half, keys drawn per ``(seed, epoch)``."""

# fmix64's multipliers (MurmurHash3).
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S11 = np.uint64(11)  # 64 - 53: a hash's top 53 bits are a double's mantissa

# Weighted draws computed together by segment(): about 48 MiB of temporaries.
_SEGMENT_BLOCK = 1 << 20


def _mix(z: np.ndarray, t: np.ndarray) -> np.ndarray:
    """fmix64 of ``z``, in place, ``t`` a scratch array (uint64 arithmetic wraps)."""
    for m in (_M1, _M2):
        z ^= np.right_shift(z, _S33, out=t)
        z *= m
    z ^= np.right_shift(z, _S33, out=t)
    return z


class Keyed:
    """A keyed permutation of ``[0, n)``, any position computed on its own.

    Args:
        n: positions, ``>= 1``.
        seed: the order's seed.
        epoch: the epoch; with ``seed`` it draws the round keys
            (``generator(seed, epoch, STREAM_FULL)``).
    """

    # EpochOrder may read a rank's positions alone (``at``), not whole global batches.
    positional = True

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        self.n = n
        m = max(2, (n - 1).bit_length())
        self.low_bits = m - m // 2
        self._low_mask = np.uint64((1 << self.low_bits) - 1)
        self._high_mask = np.uint64((1 << (m // 2)) - 1)
        self._shift = np.uint64(self.low_bits)
        rng = generator(seed, epoch, STREAM_FULL)
        self.keys = rng.integers(0, 1 << 64, size=KEYED_ROUNDS, dtype=np.uint64, endpoint=False)

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        """One pass of the network over ``x`` (uint64 words of ``m`` bits): fresh uint64."""
        high = x >> self._shift
        low = x & self._low_mask
        z, t = np.empty_like(x), np.empty_like(x)
        for i, key in enumerate(self.keys):
            if i % 2 == 0:  # the high half takes F of the low one
                np.bitwise_xor(low, key, out=z)
                high ^= np.bitwise_and(_mix(z, t), self._high_mask, out=z)
            else:
                np.bitwise_xor(high, key, out=z)
                low ^= np.bitwise_and(_mix(z, t), self._low_mask, out=z)
        high <<= self._shift
        high |= low
        return high

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The order's values at ``positions`` (integers in ``[0, n)``) as ``np.intp``."""
        x = self._encrypt(np.asarray(positions).astype(np.uint64))
        n = np.uint64(self.n)
        out = np.flatnonzero(x >= n)
        while len(out):  # cycle-walking: only the values still outside [0, n) go round again
            values = self._encrypt(x[out])
            x[out] = values
            out = out[values >= n]
        return x.view(np.int64).astype(np.intp, copy=False)

    def segment(self, start: int, stop: int) -> np.ndarray:
        return self.at(np.arange(start, stop, dtype=np.uint64))

    def materialize(self) -> np.ndarray:
        out = np.empty(self.n, dtype=np.int64)
        step = 1 << 20
        for start in range(0, self.n, step):
            stop = min(self.n, start + step)
            out[start:stop] = self.segment(start, stop)
        return out


class KeyedDraws:
    """``k`` uniform draws from ``[0, n)`` with replacement, each computed from its position.

    Draw ``p`` is ``fmix64(fmix64(p ^ a) ^ b) mod n`` for two 64-bit keys ``a, b`` drawn
    per ``(seed, epoch)``: distinct positions hash to distinct 64-bit words (fmix64
    is a bijection), reduced modulo ``n`` (a bias of at most ``n / 2**64`` per value:
    5e-10 at 10**10 rows).

    Args:
        n: rows to draw from.
        k: draws per epoch.
        seed: the order's seed.
        epoch: the epoch.
    """

    positional = True

    def __init__(self, n: int, k: int, seed: int, epoch: int) -> None:
        self.n, self.k = n, k
        rng = generator(seed, epoch, STREAM_KEYED_DRAWS)
        self.keys = rng.integers(0, 1 << 64, size=2, dtype=np.uint64, endpoint=False)

    def words(self, positions: np.ndarray) -> np.ndarray:
        """The keyed 64-bit hash of each position: fresh uint64, distinct for distinct positions."""
        z = np.asarray(positions).astype(np.uint64)
        t = np.empty_like(z)
        for key in self.keys:
            z ^= key
            _mix(z, t)
        return z

    def at(self, positions: np.ndarray) -> np.ndarray:
        z = self.words(positions)
        z %= np.uint64(self.n)
        return z.view(np.int64).astype(np.intp, copy=False)

    def segment(self, start: int, stop: int) -> np.ndarray:
        return self.at(np.arange(start, stop, dtype=np.uint64))

    def materialize(self) -> np.ndarray:
        return self.segment(0, self.k).astype(np.int64, copy=False)


class KeyedWeightedDraws(KeyedDraws):
    """``k`` weighted draws with replacement, each computed from its position.

    Draw ``p`` inverts the cumulative weights at a uniform of its own: the top 53
    bits of [`KeyedDraws`][looptoolkit.order._keyed.KeyedDraws]' hash of ``p`` make
    ``u`` in ``[0, 1)``, and the draw is the first row whose cumulative weight
    exceeds ``u * total`` (``searchsorted(cdf, u * total, side="right")``: a row
    of zero weight, an empty interval, is never chosen). O(log n) a draw; the
    cumulative weights are the caller's, computed once for every epoch.

    Args:
        cdf: ``np.cumsum(weights, dtype=np.float64)``, non-decreasing, its last
            value positive.
        k: draws per epoch.
        seed: the order's seed.
        epoch: the epoch.
    """

    def __init__(self, cdf: np.ndarray, k: int, seed: int, epoch: int) -> None:
        super().__init__(len(cdf), k, seed, epoch)
        self.cdf = cdf
        total = float(cdf[-1])
        self._scale = total * 2.0**-53  # a power of two: u * total rounded once
        # The last row of positive weight: the first whose cumulative weight is the total.
        self._last = np.intp(np.searchsorted(cdf, total, side="left"))

    def at(self, positions: np.ndarray) -> np.ndarray:
        u = (self.words(positions) >> _S11).astype(np.float64)
        u *= self._scale
        # Sorted, the uniforms walk the cumulative weights in order: the same rows,
        # measured 2-7x faster than searching at random for 256 to 65,536 of them.
        order = np.argsort(u)
        rows = np.empty(len(u), dtype=np.intp)
        rows[order] = np.searchsorted(self.cdf, u[order], side="right")
        # A guard: u * total < total in binary64, so the search stays in the positive rows.
        return np.minimum(rows, self._last, out=rows)

    def segment(self, start: int, stop: int) -> np.ndarray:
        # In blocks: a whole epoch (indices(), global_order()) costs its 8 bytes a draw
        # and one block's temporaries, not ~48 bytes a draw at once.
        out = np.empty(stop - start, dtype=np.intp)
        for a in range(start, stop, _SEGMENT_BLOCK):
            b = min(stop, a + _SEGMENT_BLOCK)
            out[a - start : b - start] = self.at(np.arange(a, b, dtype=np.uint64))
        return out
