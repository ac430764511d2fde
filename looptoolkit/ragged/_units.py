"""Planned batches: each epoch cut into whole batches, dealt to the ranks one per step.

For token budgets, length-grouped batches and packed rows the Loader's batches are not slices
of a row order: [`UnitOrder`][looptoolkit.ragged._units.UnitOrder] plans each epoch with
[`looptoolkit.ragged._plans`][looptoolkit.ragged._plans] (from the epoch's row order) into
numbered batches, and a rectangular [`Order`][looptoolkit.Order] of one batch per step deals
them to the ranks (in turn, the last ones repeated to even the ranks unless ``drop_last``). A
state is ``(epoch, batches consumed)``: resumed in O(1), under any world size.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from looptoolkit._common.errors import check_int
from looptoolkit.order._order import Order
from looptoolkit.order._sources import generator
from looptoolkit.ragged import _plans
from looptoolkit.ragged._options import Options

__all__ = ["Block", "Pieces", "UnitEpoch", "UnitOrder", "Units"]

_STREAM_BATCHES = 7  # random stream of the shuffle of whole batches


class Pieces(NamedTuple):
    """One packed batch: pieces of rows and where they go in its ``rows * seq_len`` elements."""

    row: np.ndarray  # the piece's row of the data
    start: np.ndarray  # its first element within that row
    length: np.ndarray
    dst: np.ndarray  # its first position in the flattened batch
    rows: int


class Block(NamedTuple):
    """Several packed batches planned as one: their pieces found at once, each batch then made.

    Batch ``j`` is rows ``[j * per, j * per + rows[j])`` of the block's ``pieces``.
    """

    pieces: Pieces
    per: int  # rows between the starts of two batches
    rows: list[int]
    truncated: list[int]


# Ranks from which length-grouped batches are made one at a time (`UnitOrder.windowed`): a
# window holds 50 batches, so a rank of 64 or more reads fewer lengths than the whole plan.
WINDOWED_MIN_RANKS = 64

# Packed batches planned together: one vectorised pass over the pieces of this many batches.
BLOCK_BATCHES = 16


class Units:
    """The batches of one epoch's plan; ``batch(u)`` is what ``RaggedRows`` gathers for ``u``.

    ``block(us)``, where given, lays out the batches ``us`` as one ``Block``. ``positions(u)``
    numbers the rows of batch ``u`` as it is delivered (data rows, or packed rows) within the
    epoch's plan, ``0 .. extent - 1``, each once: what keyed transforms draw by.
    """

    def __init__(
        self,
        count: int,
        batch: Callable[[int], Any],
        rows: Callable[[int], np.ndarray],
        positions: Callable[[int], np.ndarray],
        extent: int,
        block: Callable[[np.ndarray], Block] | None = None,
    ) -> None:
        self.count = count
        self.batch = batch
        self.rows = rows  # the data rows of batch u, in order
        self.positions = positions
        self.extent = extent
        self.block = block


class UnitEpoch:
    """One epoch of a [`UnitOrder`][looptoolkit.ragged._loader.UnitOrder] for one rank."""

    def __init__(self, units: Units, inner: Any) -> None:
        self.units = units
        self._inner = inner
        self.epoch = inner.epoch
        self.offset = inner.offset
        self.global_batch = inner.global_batch
        self.samples_per_rank = inner.samples_per_rank

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        batch, block = self.units.batch, self.units.block
        # This rank's batches of the epoch, one number each: made at once, a few per rank.
        units = self._inner.indices()
        if block is None:
            return map(batch, units.tolist())
        return (block(units[k : k + BLOCK_BATCHES]) for k in range(0, len(units), BLOCK_BATCHES))

    def batch(self, i: int) -> Any:
        """What batch ``i`` of this rank gathers."""
        return self.units.batch(int(self._inner.batch(i)[0]))

    def padding_mask(self, i: int) -> np.ndarray | None:
        """``[True]`` when batch ``i`` repeats an earlier batch to even the ranks, else None."""
        return self._inner.padding_mask(i)

    def positions(self, i: int) -> np.ndarray:
        """The plan's numbers of the rows of this rank's batch ``i`` (``Units.positions``).

        The same at any world size and resume offset, as the plan is; a batch repeated to
        even the ranks numbers its rows past the plan's end, so it draws other parameters.
        """
        slot = int(self._inner.positions(i)[0])
        u = int(self._inner.batch(i)[0])
        return self.units.positions(u) + (slot // self.units.count) * self.units.extent

    def indices(self) -> np.ndarray:
        """The data rows of this rank's batches, in order, concatenated."""
        units = self._inner.indices()
        parts = [self.units.rows(int(u)) for u in units]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class UnitOrder:
    """Epoch orders of whole planned batches, dealt to the ranks one per step.

    Presents the interface of [`Order`][looptoolkit.Order] that the Loader, its state and its
    sampler use; offsets count batches (``batch_size`` is 1 here), so ``(epoch, offset)`` resumes
    in O(1) and a state loads under another world size.
    """

    def __init__(
        self,
        lengths: Callable[[], np.ndarray],
        padded: Callable[[np.ndarray], np.ndarray],
        opts: Options,
        docs: Order,
        rank: int,
        world_size: int,
        drop_last: bool,
        length_at: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self._all_lengths = lengths
        self.length_at = length_at
        self.padded = padded
        self.opts = opts
        self.docs = docs
        self.n = docs.n
        self.seed = docs.seed
        self.shuffle = docs.shuffle
        self.group_size = docs.group_size
        self.run_size = docs.run_size
        self.sampling = docs.sampling
        self.length = docs.length
        self.pad_shards = True
        self.chunk_rows = None
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.batch_size = 1  # offsets count whole batches
        self.plan_params = self.opts.params()
        self.current_epoch: Callable[[], int] = lambda: 0
        self._plans: dict[int, tuple[Units, Order]] = {}
        self._lock = threading.Lock()

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """Every row's length (read whole when a plan first needs it)."""
        return self._all_lengths()

    @functools.cached_property
    def _compact(self) -> np.ndarray:
        # The lengths the plans gather in the epoch's order: 4 bytes a row where they fit.
        lengths = self.lengths
        small = not len(lengths) or int(lengths.max()) < 1 << 31
        return lengths.astype(np.int32) if small else lengths

    @property
    def windowed(self) -> bool:
        """Whether length-grouped batches are made one at a time from their window.

        With ``batch_size`` rows and no budget, a batch is rows of one window of 50 batches of
        the epoch's order, sorted by length: a rank of many makes only its own batches, reading
        the lengths of their windows (O(window) a batch), instead of planning the whole epoch
        (O(n)). Both give the same batches; the choice depends on ``world_size`` alone.
        """
        opts = self.opts
        return (
            self.world_size >= WINDOWED_MIN_RANKS
            and self.length_at is not None
            and opts.group_by_length
            and opts.batch_tokens is None
            and opts.seq_len is None
        )

    def __getstate__(self) -> dict[str, Any]:
        # Pickled and deep-copied without its lock and cached plans (made again when asked).
        state = self.__dict__.copy()
        state.pop("lengths", None)
        state.pop("_compact", None)
        state["_plans"] = {}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.plan_params.items() if v is not None)
        return f"UnitOrder({self.docs!r}, {params}, rank={self.rank}, world_size={self.world_size})"

    def plan(self, epoch: int) -> tuple[Units, Order]:
        """The epoch's batches and the order that deals them to the ranks (two epochs cached)."""
        with self._lock:
            found = self._plans.get(epoch)
            if found is None:
                units = self._units(epoch)
                if units.count == 0:
                    raise ValueError(f"epoch {epoch} has no batch: the data has no elements.")
                deal = Order(
                    units.count,
                    1,
                    shuffle=False,
                    rank=self.rank,
                    world_size=self.world_size,
                    drop_last=self.drop_last,
                )
                if len(self._plans) >= 2:
                    self._plans.pop(next(iter(self._plans)))
                found = self._plans[epoch] = (units, deal)
            return found

    def _units(self, epoch: int) -> Units:
        opts = self.opts
        shuffled = self.shuffle != "none"
        rng = generator(self.seed, epoch, _STREAM_BATCHES) if shuffled else None
        if self.windowed:
            return self._windowed_units(epoch, rng)
        seq = self.docs.global_order(epoch)
        lens = self._compact[seq]
        if opts.layout == "pack":
            return _pack_units(seq, lens, opts, self.drop_last)
        if opts.layout == "fit":
            return _fit_units(seq, lens, self.lengths, opts, self.drop_last)
        if opts.batch_tokens is None:  # length-grouped batches of batch_size rows
            assert opts.batch_size is not None
            windows, starts, stops = _plans.length_grouped(lens, opts.batch_size, rng)
            if self.drop_last and len(seq) % opts.batch_size:
                starts, stops = starts[:-1], stops[:-1]
            return _row_units(seq, starts, stops, windows)
        window = _plans.window_size(len(seq))
        mode = "max" if opts.layout == "pad" else "sum"
        padded = self.padded if mode == "max" else None
        if not opts.group_by_length:
            bounds = _plans.greedy_bounds(
                lens, opts.batch_tokens, mode=mode, window=window, padded=padded
            )
            return _row_units(seq, bounds[:-1], bounds[1:])
        sw = _plans.SortedWindows(lens, window)
        cost = sw.lengths().reshape(-1)[: len(seq)]
        bounds = _plans.greedy_bounds(
            cost, opts.batch_tokens, mode=mode, window=window, padded=padded, sorted_desc=True
        )
        starts, stops = bounds[:-1], bounds[1:]
        if rng is not None:  # whole batches shuffled
            perm = rng.permutation(len(starts))
            starts, stops = starts[perm], stops[perm]
        return _row_units(seq, starts, stops, sw)

    def _windowed_units(self, epoch: int, rng: np.random.Generator | None) -> Units:
        """Length-grouped batches, each made from its window when asked (``windowed``)."""
        assert self.opts.batch_size is not None and self.length_at is not None
        b, m = self.opts.batch_size, self.docs.length
        size = b * _plans.GROUP_WINDOW_BATCHES
        full = m // b
        order = _plans.batch_order(full, rng)
        count = full if self.drop_last or not m % b else full + 1
        source = self.docs._source(epoch)
        length_at = self.length_at

        def first(u: int) -> int:
            return int(order[u]) * b if u < full else full * b  # the short last batch: last

        def rows(u: int) -> np.ndarray:
            start = first(u)
            lo = start // size * size
            seg = source.segment(lo, min(lo + size, m))
            window = _plans.SortedWindows(length_at(seg), size)
            return seg[window.order()[start - lo : start - lo + b]]

        def positions(u: int) -> np.ndarray:
            start = first(u)
            return np.arange(start, min(start + b, m), dtype=np.int64)

        return Units(count, rows, rows, positions, m)

    def epoch(self, epoch: int, offset: int = 0) -> UnitEpoch:
        """This rank's batches of ``epoch`` from global batch ``offset`` on."""
        epoch = check_int("epoch", epoch, minimum=0)
        units, deal = self.plan(epoch)
        return UnitEpoch(units, deal.epoch(0, offset))

    def _deal(self) -> Order:
        return self.plan(self.current_epoch())[1]

    def num_batches(self, offset: int = 0) -> int:
        """Batches of each rank in the current epoch from global batch ``offset`` on."""
        return self._deal().num_batches(offset)

    def num_batches_in(self, epoch: int, offset: int = 0) -> int:
        """Batches of each rank in ``epoch`` from global batch ``offset`` on (a loaded state)."""
        return self.plan(epoch)[1].num_batches(offset)

    def __len__(self) -> int:
        return self.num_batches(0)

    def per_rank(self, offset: int = 0) -> int:
        """Batches of this rank in the current epoch from ``offset`` on."""
        return self._deal().per_rank(offset)

    def last_batch_size(self, offset: int = 0) -> int:
        """0: a rank's batches are whole planned batches."""
        return 0

    @property
    def padded_length(self) -> int:
        """Planned batches of the current epoch, after evening the ranks."""
        return self._deal().padded_length

    def global_order(self, epoch: int) -> np.ndarray:
        """The epoch's order of the data's rows, before planning."""
        return self.docs.global_order(epoch)


def _row_units(
    seq: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    windows: _plans.SortedWindows | None = None,
) -> Units:
    """Batches of whole rows: ``seq[starts[u]:stops[u]]``, after sorting ``windows`` if given."""
    if windows is not None:  # one gather now: each batch is then a slice
        seq = seq[windows.order()]

    def rows(u: int) -> np.ndarray:
        return seq[starts[u] : stops[u]]

    def positions(u: int) -> np.ndarray:
        return np.arange(starts[u], stops[u], dtype=np.int64)

    return Units(len(starts), rows, rows, positions, len(seq))


def _pack_units(seq: np.ndarray, lens: np.ndarray, opts: Options, drop_last: bool) -> Units:
    """Concatenate-then-split: the epoch's rows as one stream cut into rows of ``seq_len``."""
    seq_len, per = opts.seq_len or 1, opts.batch_size or 1
    stream = np.zeros(len(seq) + 1, dtype=np.int64)
    np.cumsum(lens, out=stream[1:])
    total = int(stream[-1])
    packed_rows = -(-total // seq_len)
    count = packed_rows // per if drop_last else -(-packed_rows // per)
    span = seq_len * per

    def block(us: np.ndarray) -> Block:
        starts = us * span
        stops = np.minimum(starts + span, total)
        at, first, length, k = _plans.pack_ranges(stream, starts, stops, seq_len)
        dst = k * span + (stream[at] + first - starts[k])
        rows_of = (-(-(stops - starts) // seq_len)).tolist()
        pieces = Pieces(seq[at], first, length, dst, len(us) * per)
        return Block(pieces, per, rows_of, [0] * len(us))

    return _packed_units(count, per, packed_rows, block)


def _fit_units(
    seq: np.ndarray, lens: np.ndarray, lengths: np.ndarray, opts: Options, drop_last: bool
) -> Units:
    """Whole rows (or their pieces) fitted into rows of ``seq_len``, first fit decreasing."""
    seq_len, per = opts.seq_len or 1, opts.batch_size or 1
    if not lens.all():  # rows without elements take no place
        keep = np.flatnonzero(lens)
        seq, lens = seq[keep], lens[keep]
    pieces = _FitPieces(lens, seq_len, opts.long_rows == "split")
    piece, row_first = _plans.fit_rows(pieces.length, seq_len, opts.max_segments)
    total_rows = len(row_first) - 1
    batches = total_rows // per if drop_last else -(-total_rows // per)

    def block(us: np.ndarray) -> Block:
        r0 = us * per
        r1 = np.minimum(r0 + per, total_rows)
        a, b = row_first[r0], row_first[r1]
        at = _plans.spread(a, b - a)
        k = np.repeat(np.arange(len(us)), b - a)
        x = piece[at]
        doc, start = pieces.locate(x)
        length = pieces.length[x].astype(np.int64)
        # Each piece's place in its packed row: the lengths before it in that row.
        row = np.searchsorted(row_first, at, side="right") - 1
        within = np.cumsum(length) - length
        first = np.flatnonzero(np.diff(row, prepend=-1))
        within -= np.repeat(within[first], np.diff(np.append(first, len(row))))
        dst = (k * per + row - r0[k]) * seq_len + within
        cut = np.maximum(lengths[seq[doc]] - seq_len, 0) if opts.long_rows == "truncate" else None
        truncated = [0] * len(us) if cut is None else np.bincount(k, cut, len(us)).astype(int)
        rows = Pieces(seq[doc], start, length, dst, len(us) * per)
        return Block(rows, per, (r1 - r0).tolist(), list(map(int, truncated)))

    return _packed_units(batches, per, total_rows, block)


class _FitPieces:
    """The pieces first fit packs: one per row, or a row longer than ``seq_len`` cut in pieces.

    Args:
        lens: the rows' lengths in the epoch's order.
        seq_len: the longest piece.
        split: cut longer rows into pieces of ``seq_len`` (else truncate them to one).
    """

    def __init__(self, lens: np.ndarray, seq_len: int, split: bool) -> None:
        self.seq_len = seq_len
        long = np.flatnonzero(lens > seq_len) if split else np.zeros(0, np.int64)
        self.long = long
        if not len(long):
            self.length = np.minimum(lens, seq_len)
            return
        count = -(-lens[long].astype(np.int64) // seq_len)
        extra = count - 1
        # Each long row's pieces follow it: seq_len elements each, the last the rest.
        length = np.insert(np.minimum(lens, seq_len), np.repeat(long + 1, extra), seq_len)
        self.first = long + np.cumsum(extra) - extra
        self.count = count
        length[self.first + count - 1] = lens[long] - extra * seq_len
        self.length = length

    def locate(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows (positions in the epoch's order) of pieces ``x`` and their first elements."""
        if not len(self.long):
            return x, np.zeros(len(x), dtype=np.int64)
        j = np.searchsorted(self.first, x, side="right") - 1
        jj = np.maximum(j, 0)
        inside = (j >= 0) & (x - self.first[jj] < self.count[jj])
        # Pieces before x beyond one per row: all extra pieces of the long rows before it.
        before = np.where(j >= 0, self.first[jj] - self.long[jj] + self.count[jj] - 1, 0)
        doc = np.where(inside, self.long[jj], x - before)
        start = np.where(inside, (x - self.first[jj]) * self.seq_len, 0)
        return doc, start


def _packed_units(count: int, per: int, total: int, block: Callable[[np.ndarray], Block]) -> Units:
    """Packed batches: batch ``u`` is the block of ``u`` alone, its rows those of its pieces.

    Batch ``u`` holds packed rows ``u * per`` on (``per`` of them, fewer in the last batch
    of the epoch's ``total``), numbered so for keyed transforms.
    """

    def batch(u: int) -> Block:
        return block(np.array([u], dtype=np.int64))

    def rows(u: int) -> np.ndarray:
        return _unique_in_order(batch(u).pieces.row)

    def positions(u: int) -> np.ndarray:
        return np.arange(u * per, min((u + 1) * per, total), dtype=np.int64)

    return Units(count, batch, rows, positions, total, block)


def _unique_in_order(x: np.ndarray) -> np.ndarray:
    """The distinct values of ``x`` in the order they first appear."""
    _, first = np.unique(x, return_index=True)
    return x[np.sort(first)]
