"""The mixed order: position of the mixed stream -> a row of one source.

The step after the interleave ([`looptoolkit.mix._interleave`][looptoolkit.mix._interleave]):
position ``q`` is served by source ``s``, as its ``k``-th draw (``k`` its count
before ``q``); the draw is row ``order_s(k // n_s)[k % n_s]`` of that source,
``order_s(E)`` the source's own order of its epoch ``E`` (the Loader's
``shuffle`` over the source's rows, from the source's own stream of the seed).
A source that runs out starts its next epoch, a new order, while the others
go on. The row is handed on as a row of the mixture's columns (the sources'
rows one after the other), which the Loader gathers as it gathers any data.

[`MixedOrder`][looptoolkit.mix._order.MixedOrder] is what the
[`Order`][looptoolkit.Order] of a mixture reads its epochs from (as an
``order_fn`` that computes positions): the mixture's epoch ``e`` is positions
``[e * N, (e + 1) * N)`` of the stream, so sharding, padding, batching and
resume are the Order's own.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from looptoolkit.mix._interleave import Interleave
from looptoolkit.order._order import Order

__all__ = ["MixedOrder", "MixedSource"]

# The stream of the seed that each source's orders come from (source s: [_STREAM_MIX, s]).
_STREAM_MIX = 0x4D4958


def source_seed(seed: int, s: int) -> int:
    """Source ``s``'s own seed, derived from the Loader's: a distinct stream per source."""
    words = np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32, _STREAM_MIX, s])
    return int(words.generate_state(2, np.uint32).astype(np.uint64) @ [1, 1 << 31])


class MixedSource:
    """The global order of one mixture epoch, readable by position (an Order's source)."""

    def __init__(self, mixed: MixedOrder, epoch: int) -> None:
        self.mixed = mixed
        self.first = epoch * mixed.length  # stream position of the epoch's position 0

    def segment(self, start: int, stop: int) -> np.ndarray:
        return self.mixed.rows(self.first + start, self.first + stop)

    def materialize(self) -> np.ndarray:
        return self.segment(0, self.mixed.length).astype(np.int64)


class MixedOrder:
    """A mixture's order of every epoch, as an ``order_fn`` whose positions are computed.

    Args:
        sizes: rows of each source.
        bases: where each source's rows start in the mixture's columns.
        interleave: which source serves each position.
        length: positions per epoch of the mixture.
        shuffle, group_size, run_size, seed: the Loader's order options, applied to
            each source's rows with the source's own seed.
        chunk_rows: rows per chunk of each source that is a store (None otherwise).
        options: each source's ``indices``/``weights``/``replacement``/``num_samples``.
        fingerprint: a checksum of what the positions' rows depend on besides the weights
            (a state saved with other weights still loads: they apply from its position on).
    """

    kind = "mixture"

    def __init__(
        self,
        sizes: Sequence[int],
        bases: Any,
        interleave: Interleave,
        length: int,
        *,
        shuffle: Any,
        group_size: int | None,
        run_size: int,
        seed: int,
        chunk_rows: Sequence[int | None],
        fingerprint: int,
        options: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self.sizes = [int(n) for n in sizes]
        self.bases = np.asarray(bases, dtype=np.intp)
        self.interleave = interleave
        self.length = int(length)
        self.fingerprint = fingerprint
        self.orders = [
            Order(
                n,
                1,
                shuffle=shuffle,
                seed=source_seed(seed, s),
                group_size=group_size,
                run_size=run_size,
                chunk_rows=chunk_rows[s],
                **({} if options is None else options[s]),
            )
            for s, n in enumerate(self.sizes)
        ]
        # Draws per epoch of each source (its rows, subset or weighted draw).
        self.epoch_sizes = [order.length for order in self.orders]
        self._epochs: list[dict[int, Any]] = [{} for _ in self.sizes]

    def __call__(self, seed: int, epoch: int) -> np.ndarray:
        """The epoch's rows as one array (what an ``order_fn`` returns)."""
        return self.source(seed, epoch).materialize()

    def source(self, seed: int, epoch: int) -> MixedSource:
        """The epoch's global order, computed by position (``seed`` is fixed at construction)."""
        return MixedSource(self, epoch)

    def _source_order(self, s: int, e: int) -> Any:
        """Source ``s``'s order of its epoch ``e`` (the last two kept)."""
        cache = self._epochs[s]
        found = cache.get(e)
        if found is None:
            if len(cache) >= 2:
                cache.pop(min(cache))
            found = cache[e] = self.orders[s]._source(e)
        return found

    def draws(self, s: int, k0: int, k1: int) -> np.ndarray:
        """Rows of source ``s`` for its draws ``[k0, k1)``, crossing its epochs."""
        n = self.epoch_sizes[s]
        pieces = []
        while k0 < k1:
            e, i = divmod(k0, n)
            j = min(n, i + k1 - k0)
            pieces.append(self._source_order(s, e).segment(i, j))
            k0 += j - i
        if not pieces:
            return np.empty(0, dtype=np.intp)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def rows(self, q0: int, q1: int) -> np.ndarray:
        """Rows of the mixture's columns at stream positions ``[q0, q1)``.

        Each source's draws there are consecutive: they are read as one run of the source's
        own orders each, into one pool, and every position then takes its draw from the pool
        (one gather, whatever the number of sources).
        """
        out = []
        for stage, a, b in self.interleave.pieces(q0, q1):
            ids, lap, draw = stage.draws(a, b)
            first = stage.counts_at(a)
            last = stage.counts_at(b)
            runs = [
                self.draws(s, int(first[s]), int(last[s])) + self.bases[s]
                for s in range(len(self.sizes))
            ]
            pool = np.concatenate(runs) if len(runs) > 1 else runs[0]
            # Draw k of source s is pool[at[s] + k - first[s]]; k is lap[s] + draw.
            at = np.cumsum([0] + [len(r) for r in runs[:-1]]) - first + lap
            index = at.take(ids)
            index += draw
            out.append(pool.take(index))
        if not out:
            return np.empty(0, dtype=np.intp)
        return out[0] if len(out) == 1 else np.concatenate(out)

    def sources_of(self, rows: np.ndarray) -> np.ndarray:
        """The source of each row of the mixture's columns."""
        return np.searchsorted(self.bases, rows, side="right") - 1

    def key(self) -> str:
        """The stages of weights this order follows (what planned batches' states record)."""
        return repr([(int(s.start), s.m) for s in self.interleave.stages])

    def state(self, epoch: int, offset: int) -> dict[str, Any]:
        """What a saved state records of the mixture at ``(epoch, offset)``.

        The position in the stream, each source's draws before it, and the stage
        serving it (its start, weights and starting counts): enough to go on exactly
        with the same weights, or to start the new weights there.
        """
        q = epoch * self.length + offset
        stage = self.interleave.stage_at(q)
        return {
            "position": int(q),
            "counts": [int(c) for c in self.interleave.counts_at(q)],
            "stage_start": int(stage.start),
            "stage_weights": [int(m) for m in stage.m],
            "stage_base": [int(c) for c in stage.base],
        }

    def load(self, saved: dict[str, Any], epoch: int, offset: int) -> None:
        """Go on from a saved mixture state at ``(epoch, offset)`` of this order.

        With the saved stage's weights, the saved stage goes on as it was (the
        batches of an uninterrupted run). With other weights (a changed mixture or
        schedule), they apply from the resumed position on, from the saved counts:
        nothing already drawn is drawn again.

        Raises:
            ValueError: the state is for another number of sources.
        """
        try:
            counts = np.asarray(saved["counts"], dtype=np.int64)
            start = int(saved["stage_start"])
            m = tuple(int(x) for x in saved["stage_weights"])
            base = np.asarray(saved["stage_base"], dtype=np.int64)
        except (KeyError, TypeError) as e:
            raise ValueError(f"`state` has no usable mixture state: {e!r}.") from None
        if counts.shape != (len(self.sizes),) or len(m) != len(self.sizes):
            raise ValueError(
                f"`state` was saved for a mixture of {len(counts)} sources, "
                f"this one has {len(self.sizes)}."
            )
        q = epoch * self.length + offset
        mine = self.interleave.stage_at(q)
        if m == mine.m:  # the saved stage goes on (started afresh where it started)
            if start != mine.start or not np.array_equal(base, mine.base):
                self.interleave = self.interleave.restarted(start, m, base)
        else:  # other weights: from the saved counts at the resumed position on
            self.interleave = self.interleave.restarted(q, mine.m, counts)


def fingerprint(*parts: Any) -> int:
    """A checksum of a mixture's definition (what a saved state must agree with)."""
    return zlib.crc32(repr(parts).encode()) & 0xFFFFFFFF
