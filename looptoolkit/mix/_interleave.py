"""The interleave of a mixture: which source serves each position of the mixed stream.

Part of the mixture's order ([`looptoolkit.mix`][looptoolkit.mix]): an
[`Interleave`][looptoolkit.mix._interleave.Interleave] maps position ``q`` of the
mixed stream (``0, 1, 2, ...`` across the mixture's epochs) to a source, and
gives each source's count before any position in O(stages), without replaying
the positions before it. The next step turns "the ``k``-th draw of source
``s``" into a row of that source.

The rule is Tijdeman's (the chairman assignment problem): at position ``t``
(counted from 1), among the sources whose deficit ``w_s * t - c_s`` is at least
``1 / (2K - 2)``, the one with the smallest ``(c_s + 1 - 1 / (2K - 2)) / w_s``
serves. Every source's count then stays within ``1 - 1 / (2K - 2)`` of
``w_s * t`` over every prefix: below one sample, for any weights. (Megatron's
"largest deficit first" rule reaches 1.04 on random weights.)

Weights are rationals ``m_s / D`` (``D`` at most ``MAX_PERIOD``): after ``D``
positions every count is exactly ``m_s``, every deficit is zero again and the
sequence repeats. One period is computed once (a table of ``D`` source ids and
each source's count at every ``_CHECKPOINT``-th position), and every position
is then read from it. Weights that are ratios of small integers (0.7 / 0.3,
1 : 2 : 3, thirds) are exact; others are rounded to multiples of ``1 / D``
(``|m_s / D - w_s| < 1 / D``), and the bound holds against the rounded weights.

A weight schedule is a list of stages, each from a position on with its own
weights; a stage starts its period afresh from the counts the stages before it
left. A changed mixture at resume is one more stage, from the resumed position.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from fractions import Fraction

import numpy as np

__all__ = ["MAX_PERIOD", "Interleave", "Stage", "period", "rational_weights"]

MAX_PERIOD = 1 << 18
"""The longest period of an interleave: weights are multiples of ``1 / D``, ``D <= 262144``."""

# Positions between stored counts of a period table (a count is the stored one
# plus a bincount of at most this many source ids).
_CHECKPOINT = 256


def rational_weights(weights: Sequence[float]) -> tuple[int, ...]:
    """Positive weights as integers ``m_s`` whose sum ``D`` is the period.

    Exact where the weights are ratios of small integers (their normalised
    fractions with denominators up to 1000 and a common one up to
    ``MAX_PERIOD``); otherwise ``m_s`` are the largest-remainder shares of
    ``MAX_PERIOD``, at least 1 each.

    Args:
        weights: positive, finite numbers (checked by the caller).
    """
    total = math.fsum(weights)
    exact = [Fraction(w / total).limit_denominator(1000) for w in weights]
    if sum(exact) == 1 and all(
        abs(float(f) - w / total) <= 1e-12 for f, w in zip(exact, weights, strict=True)
    ):
        d = math.lcm(*(f.denominator for f in exact))
        if d <= MAX_PERIOD:
            return tuple(int(f * d) for f in exact)
    shares = [w / total * MAX_PERIOD for w in weights]
    m = [max(1, int(s)) for s in shares]
    # Largest remainders first (ties by position) until the shares sum to the period.
    by_remainder = sorted(range(len(m)), key=lambda i: (-(shares[i] - int(shares[i])), i))
    i = 0
    while sum(m) < MAX_PERIOD:
        m[by_remainder[i % len(m)]] += 1
        i += 1
    while sum(m) > MAX_PERIOD:  # the minimum of 1 pushed it over: take from the largest
        m[max(range(len(m)), key=lambda j: (m[j], -j))] -= 1
    return tuple(m)


@functools.lru_cache(maxsize=32)
def period(m: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One period of the interleave of integer weights ``m`` (sum ``D``).

    Returns:
        ``(ids, counts)``: ``ids[t]`` the source serving position ``t`` of the
        period (``D`` values, ``uint16``), ``counts[s, j]`` source ``s``'s draws
        before position ``j * _CHECKPOINT`` (``int64``).
    """
    k, d = len(m), sum(m)
    ids = np.empty(d, dtype=np.uint16)
    if k == 1:
        ids[:] = 0
    else:
        # Exact integer arithmetic: a = 1 / (2K - 2); with u = 2K - 2 the
        # eligibility w_s t - c_s >= a is u (m_s t - c_s D) >= D, and the
        # deadline (c_s + 1 - a) / w_s compares as (u (c_s + 1) - 1) / m_s.
        u = 2 * k - 2
        c = [0] * k
        order = range(k)
        for t in range(1, d + 1):
            best = -1
            best_num = best_den = 0
            for s in order:
                ms = m[s]
                if u * (ms * t - c[s] * d) >= d:
                    num = u * (c[s] + 1) - 1
                    if best < 0 or num * best_den < best_num * ms:
                        best, best_num, best_den = s, num, ms
            ids[t - 1] = best
            c[best] += 1
    marks = np.arange(0, d + 1, _CHECKPOINT)
    counts = np.zeros((k, len(marks)), dtype=np.int64)
    onehot = np.zeros((k, d + 1), dtype=np.int64)
    onehot[ids, np.arange(1, d + 1)] = 1
    counts[:] = np.cumsum(onehot, axis=1)[:, marks]
    return ids, counts


# Positions a run of sources is read for at once, as a view of a repeated period.
_SPAN = 1 << 17


@functools.lru_cache(maxsize=32)
def _repeated(m: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The period's source ids repeated past ``_SPAN`` positions, and each one's draw.

    ``draw[i]`` is how many positions of the same source come before position ``i`` of the
    repeated period: the draw of its source that position ``i`` is, from the period's start.
    """
    ids = period(m)[0]
    d, k = len(ids), len(m)
    laps = -(-(d + _SPAN) // d)
    rank = np.empty(d, dtype=np.int64)
    for s in range(k):
        where = np.flatnonzero(ids == s)
        rank[where] = np.arange(len(where))
    ext = np.tile(ids, laps)
    per_lap = np.asarray(m, dtype=np.int64)[ids]
    draw = (rank[None, :] + np.arange(laps, dtype=np.int64)[:, None] * per_lap[None, :]).ravel()
    return ext, draw


class Stage:
    """Positions ``[start, ...)`` served by one period of weights ``m``, from counts ``base``."""

    def __init__(self, start: int, m: tuple[int, ...], base: np.ndarray) -> None:
        self.start = start
        self.m = m
        self.d = sum(m)
        self.base = base
        self.per_period = np.asarray(m, dtype=np.int64)
        self.ids, self.counts = period(m)
        # The period repeated to past _SPAN positions: any run of up to _SPAN is a view.
        self.ext, self.draw = _repeated(m)

    def counts_at(self, q: int) -> np.ndarray:
        """Each source's draws before position ``q`` (``q >= start``)."""
        laps, j = divmod(q - self.start, self.d)
        mark, rest = divmod(j, _CHECKPOINT)
        out = self.base + laps * self.per_period + self.counts[:, mark]
        if rest:
            a = mark * _CHECKPOINT
            out = out + np.bincount(self.ids[a : a + rest], minlength=len(self.m))
        return out

    def draws(self, q0: int, q1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which draw of which source each position in ``[q0, q1)`` is.

        Returns:
            ``(ids, first, draw)``: position ``i``'s source ``ids[i]`` and its draw of that
            source, ``first[ids[i]] + draw[i]`` (``first`` has one entry per source).
        """
        laps, j0 = divmod(q0 - self.start, self.d)
        n = q1 - q0
        first = self.base + laps * self.per_period  # each source's draws before the lap
        if j0 + n <= len(self.ext):
            return self.ext[j0 : j0 + n], first, self.draw[j0 : j0 + n]
        x = j0 + np.arange(n, dtype=np.int64)
        j = x % self.d
        ids = self.ids[j]
        return ids, first, (x // self.d) * self.per_period[ids] + self.draw[j]

    def sources(self, q0: int, q1: int) -> np.ndarray:
        """The source of each position in ``[q0, q1)`` (``start <= q0 <= q1``)."""
        j0 = (q0 - self.start) % self.d
        n = q1 - q0
        if j0 + n <= len(self.ext):
            return self.ext[j0 : j0 + n]
        return self.ids[(j0 + np.arange(n, dtype=np.int64)) % self.d]


class Interleave:
    """The sources of the mixed stream, stage by stage.

    Args:
        stages: ``(start, m, base)`` triples, ``start`` increasing from 0, ``m``
            integer weights (see
            [`rational_weights`][looptoolkit.mix._interleave.rational_weights]), ``base``
            the counts the stage starts from, or None to go on from the stage before.
        k: the number of sources.
    """

    def __init__(
        self, stages: Sequence[tuple[int, tuple[int, ...], np.ndarray | None]], k: int
    ) -> None:
        self.k = k
        self.specs = list(stages)
        self.stages: list[Stage] = []
        for start, m, base in self.specs:
            if base is None:
                base = self.stages[-1].counts_at(start) if self.stages else np.zeros(k, np.int64)
            self.stages.append(Stage(start, m, np.asarray(base, dtype=np.int64)))
        self._starts = [s.start for s in self.stages]

    def restarted(self, q: int, m: tuple[int, ...], counts: np.ndarray) -> Interleave:
        """This interleave with a stage of weights ``m`` from position ``q`` and ``counts`` on.

        The stages that started before ``q`` stay, as do those after it (going on from
        the new one's counts).
        """
        specs = [spec for spec in self.specs if spec[0] < q]
        specs.append((q, m, np.asarray(counts, dtype=np.int64)))
        specs += [(start, mm, None) for start, mm, _ in self.specs if start > q]
        return Interleave(specs, self.k)

    def stage_at(self, q: int) -> Stage:
        """The stage serving position ``q``."""
        lo, hi = 0, len(self._starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._starts[mid] <= q:
                lo = mid
            else:
                hi = mid
        return self.stages[lo]

    def counts_at(self, q: int) -> np.ndarray:
        """Each source's draws before position ``q`` (a fresh ``int64`` array of ``k``)."""
        return self.stage_at(q).counts_at(q)

    def pieces(self, q0: int, q1: int) -> Iterator[tuple[Stage, int, int]]:
        """``(stage, a, b)``: the stages serving ``[q0, q1)``, each over its part ``[a, b)``."""
        i = self.stages.index(self.stage_at(q0))
        while q0 < q1:
            stop = self._starts[i + 1] if i + 1 < len(self._starts) else q1
            end = min(q1, stop)
            yield self.stages[i], q0, end
            q0, i = end, i + 1

    def sources(self, q0: int, q1: int) -> np.ndarray:
        """The source of each position in ``[q0, q1)``, as ``uint16``."""
        parts = [stage.sources(a, b) for stage, a, b in self.pieces(q0, q1)]
        if not parts:
            return np.empty(0, dtype=np.uint16)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def position_of(self, s: int, count: int) -> int:
        """The first position ``q`` with ``count`` draws of source ``s`` before it."""
        lo, hi = 0, 1
        while self.counts_at(hi)[s] < count:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.counts_at(mid)[s] >= count:
                hi = mid
            else:
                lo = mid
        return hi
