"""The Loader's variable-length path: plans per epoch, ragged batches per plan.

Between the order and the transfer, in place of the rectangular
[`Rows`][looptoolkit._rows.Rows]: [`setup`][looptoolkit.ragged._loader.setup] reads the options,
[`RaggedRows`][looptoolkit.ragged._loader.RaggedRows] builds each batch's layout (one copy per
leaf per batch) and fixed leaves' rows, and the epoch order is either the rectangular
[`Order`][looptoolkit.Order] over rows (padded and flat batches of ``batch_size`` rows: every
rectangular feature as it is) or a [`UnitOrder`][looptoolkit.ragged._loader.UnitOrder]: each
epoch is planned (token budgets, length grouping, packing) into whole batches, and the batches are
dealt to the ranks in turn by an [`Order`][looptoolkit.Order] of one batch per step. Either way a
state is ``(epoch, offset)``, resumed in O(1).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import optree

from looptoolkit import tree as _tree
from looptoolkit._errors import check_int
from looptoolkit._rows import Rows
from looptoolkit._sources import generator
from looptoolkit.adapters import backend_of
from looptoolkit.adapters._wrap import from_host
from looptoolkit.order import Order, normalize_shuffle
from looptoolkit.ragged import _plans
from looptoolkit.ragged._column import Ragged
from looptoolkit.ragged._layouts import flat_batch, packed_batch, pad_batch, padded_length

__all__ = ["LAYOUTS", "Options", "RaggedRows", "UnitOrder", "options", "ragged_probe", "setup"]

LAYOUTS = ("pad", "flat", "pack", "fit")
LONG_ROWS = ("split", "truncate", "error")
_STREAM_BATCHES = 7  # random stream of the shuffle of whole batches


class Options(NamedTuple):
    """The ragged options of a Loader, checked."""

    layout: str
    batch_size: int | None
    batch_tokens: int | None
    seq_len: int | None
    group_by_length: bool
    pad_value: Any
    pad_to_multiple_of: int | None
    buckets: np.ndarray | None
    max_segments: int | None
    long_rows: str

    @property
    def units(self) -> bool:
        """Whether epochs are planned into whole batches (else: batches of rows)."""
        return self.layout in ("pack", "fit") or self.batch_tokens is not None or (
            self.group_by_length
        )

    def params(self) -> dict[str, Any]:
        """What a saved state must match: every option that changes the plan."""
        buckets = None if self.buckets is None else [int(b) for b in self.buckets]
        return {
            "layout": self.layout,
            "batch_tokens": self.batch_tokens,
            "seq_len": self.seq_len,
            "group_by_length": self.group_by_length,
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "buckets": buckets,
            "max_segments": self.max_segments,
            "long_rows": self.long_rows,
        }


def options(
    batch_size: Any,
    *,
    layout: Any,
    batch_tokens: Any,
    seq_len: Any,
    group_by_length: Any,
    pad_value: Any,
    pad_to_multiple_of: Any,
    buckets: Any,
    max_segments: Any,
    long_rows: Any,
) -> Options:
    """The ragged options, checked: every wrong combination named.

    Raises:
        TypeError: an option of a wrong type.
        ValueError: a wrong value, or options that do not go together.
    """
    layout = "pad" if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(f"`layout` must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}.")
    if long_rows not in LONG_ROWS:
        raise ValueError(
            f"`long_rows` must be one of {', '.join(map(repr, LONG_ROWS))}, got {long_rows!r}."
        )
    if not isinstance(group_by_length, bool):
        raise TypeError(f"`group_by_length` must be a bool, got {type(group_by_length).__name__}.")
    packs = layout in ("pack", "fit")

    def only(name: str, value: Any, allowed: tuple[str, ...], default: Any = None) -> None:
        if value is not default and layout not in allowed:
            raise ValueError(
                f"`{name}` applies to `layout` {' or '.join(map(repr, allowed))}, not {layout!r}."
            )

    only("seq_len", seq_len, ("pack", "fit"))
    only("pad_to_multiple_of", pad_to_multiple_of, ("pad",))
    only("buckets", buckets, ("pad",))
    only("max_segments", max_segments, ("fit",))
    only("long_rows", long_rows, ("fit",), "error")
    only("batch_tokens", batch_tokens, ("pad", "flat"))
    if packs:
        if seq_len is None:
            raise ValueError(f'`layout="{layout}"` needs `seq_len`, the elements per packed row.')
        seq_len = check_int("seq_len", seq_len, minimum=1)
        if group_by_length:
            raise ValueError(f'`group_by_length` does not apply to `layout="{layout}"`.')
    if batch_tokens is not None:
        batch_tokens = check_int("batch_tokens", batch_tokens, minimum=1)
        if batch_size is not None:
            raise ValueError(
                "pass `batch_size` (rows per batch) or `batch_tokens` (a token budget), not both."
            )
    elif batch_size is None:
        raise ValueError("`batch_size` is required (or `batch_tokens` for a token budget).")
    else:
        batch_size = check_int("batch_size", batch_size, minimum=1)
    if pad_to_multiple_of is not None:
        pad_to_multiple_of = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    if buckets is not None:
        if pad_to_multiple_of is not None:
            raise ValueError("pass `buckets` or `pad_to_multiple_of`, not both.")
        sizes = np.asarray(buckets)
        if sizes.ndim != 1 or not len(sizes) or sizes.dtype.kind not in "iu":
            raise TypeError(f"`buckets` must be a non-empty list of ints, got {buckets!r}.")
        if sizes.min() < 1 or (np.diff(sizes) <= 0).any():
            raise ValueError(f"`buckets` must be increasing positive lengths, got {buckets!r}.")
        buckets = sizes.astype(np.int64)
    if max_segments is not None:
        max_segments = check_int("max_segments", max_segments, minimum=1)
    if pad_value is not None and not isinstance(pad_value, int | float | bool | np.generic):
        raise TypeError(f"`pad_value` must be a number, got {type(pad_value).__name__}.")
    return Options(
        layout,
        batch_size,
        batch_tokens,
        seq_len,
        group_by_length,
        0 if pad_value is None else pad_value,
        pad_to_multiple_of,
        buckets,
        max_segments,
        long_rows,
    )


# -- the batches -------------------------------------------------------------------------


class Pieces(NamedTuple):
    """One packed batch: pieces of rows and where they go in its ``rows * seq_len`` elements."""

    row: np.ndarray  # the piece's row of the data
    start: np.ndarray  # its first element within that row
    length: np.ndarray
    dst: np.ndarray  # its first position in the flattened batch
    rows: int
    truncated: int  # elements cut off by `long_rows="truncate"`


class RaggedRows:
    """The data side of a Loader with ragged leaves: the layouts and the fixed leaves' rows.

    Args:
        data: the user's data with its ragged inputs as [`Ragged`][looptoolkit.Ragged] leaves.
        opts: the checked options.

    Raises:
        ValueError: leaves with other numbers of rows (both named); ragged leaves of unequal
            row lengths where a plan needs one length per row; a row that does not fit
            ``buckets``, ``batch_tokens`` or ``seq_len`` (``long_rows="error"``), named.
    """

    def __init__(self, data: Any, opts: Options) -> None:
        self.data = data
        self.opts = opts
        leaves, spec = _tree.flatten(data)
        self.leaves: list[Any] = leaves
        self.spec: optree.PyTreeSpec = spec
        paths = _tree.leaf_paths(spec, "data")
        self.ragged = [(i, x) for i, x in enumerate(leaves) if isinstance(x, Ragged)]
        self.fixed_at = [i for i, x in enumerate(leaves) if not isinstance(x, Ragged)]
        first_at, first = self.ragged[0]
        self.n = len(first)
        for i, x in self.ragged[1:]:
            if len(x) != self.n:
                raise ValueError(
                    f"`data` leaves must have the same number of rows; {paths[first_at]} has "
                    f"{self.n} and {paths[i]} has {len(x)}."
                )
        self.fixed: Rows | None = None
        if self.fixed_at:
            fixed = [leaves[i] for i in self.fixed_at]
            self.fixed = Rows(fixed)
            if self.fixed.n != self.n:
                raise ValueError(
                    f"`data` leaves must have the same number of rows; {paths[first_at]} has "
                    f"{self.n} rows and {paths[self.fixed_at[0]]} has {self.fixed.n}."
                )
        self.store = None
        self.chunk_rows = None
        self.backends = sorted(
            {x.backend for _, x in self.ragged}
            | ({b for b in self.fixed.backends} if self.fixed else set())
        )
        self.lengths = self._lengths(paths)
        self._check_fits(paths)
        self.stats: Any = None
        self._lock = threading.Lock()

    def _lengths(self, paths: list[str]) -> np.ndarray:
        """One length per row, as the plans read it: the ragged leaves' (the longest, for pad)."""
        first_at, first = self.ragged[0]
        lengths = first.lengths
        for i, x in self.ragged[1:]:
            if np.array_equal(x.lengths, lengths):
                continue
            if self.opts.units:
                row = int(np.flatnonzero(x.lengths != lengths)[0])
                raise ValueError(
                    f"`layout={self.opts.layout!r}` plans one length per row, and the ragged "
                    f"leaves {paths[first_at]} and {paths[i]} differ at row {row} "
                    f"({int(lengths[row])} and {int(x.lengths[row])}); pass them in separate "
                    'Loaders, or use `layout="pad"` or `"flat"` with `batch_size`.'
                )
            lengths = np.maximum(lengths, x.lengths)
        return lengths

    def _check_fits(self, paths: list[str]) -> None:
        opts, lengths = self.opts, self.lengths
        longest = int(lengths.argmax()) if len(lengths) else 0
        top = int(lengths[longest]) if len(lengths) else 0
        where = f"{paths[self.ragged[0][0]]} row {longest} has {top} elements"
        if opts.buckets is not None and top > opts.buckets[-1]:
            raise ValueError(
                f"{where}, more than the largest of `buckets` ({int(opts.buckets[-1])}); add a "
                "larger bucket."
            )
        if opts.batch_tokens is not None:
            cost = self.padded(np.asarray([top]))[0] if opts.layout == "pad" else top
            if cost > opts.batch_tokens:
                raise ValueError(
                    f"{where} ({cost} with padding), more than `batch_tokens` "
                    f"({opts.batch_tokens}); raise the budget or cut long rows first."
                )
        if opts.layout == "fit" and opts.long_rows == "error" and top > (opts.seq_len or 0):
            raise ValueError(
                f"{where}, more than `seq_len` ({opts.seq_len}); pass "
                '`long_rows="split"` or `"truncate"`, or a larger `seq_len`.'
            )

    def padded(self, lengths: np.ndarray) -> np.ndarray:
        """The padded length ``L`` a batch whose longest row has each of ``lengths`` gets."""
        opts = self.opts
        if opts.buckets is not None:
            return opts.buckets[np.minimum(np.searchsorted(opts.buckets, lengths), len(opts.buckets) - 1)]
        if opts.pad_to_multiple_of:
            m = opts.pad_to_multiple_of
            return -(-lengths // m) * m
        return lengths

    # -- what the Loader's pipeline calls (the rectangular Rows' interface) ------------

    def gather(self, batches: Iterator[Any], staged: Any = None) -> Iterator[list[Any]]:
        """The leaf lists of each batch: rows (an index array) or pieces of a packed batch."""
        return map(self._leaves, batches)

    def built(self, gathered: Iterator[Sequence[Any]]) -> Iterator[Any]:
        """The batches of gathered leaf lists."""
        return map(self.build, gathered)

    def build(self, leaves: Sequence[Any]) -> Any:
        """The batch: the data's containers around the layouts and the fixed leaves."""
        return self.spec.unflatten(leaves)

    def take(self, idx: np.ndarray) -> Any:
        """The batch of rows ``idx`` in the Loader's layout (pad or flat)."""
        return self.build(self._leaves(np.asarray(idx, dtype=np.int64)))

    def _leaves(self, item: Any) -> list[Any]:
        out: list[Any] = [None] * len(self.leaves)
        opts = self.opts
        if isinstance(item, Pieces):
            rows = item.row
            for k, (i, col) in enumerate(self.ragged):
                src = col.offsets[rows] + item.start
                arrays = packed_batch(
                    col.host, src, item.length, item.dst, item.rows, opts.seq_len or 0, opts.pad_value
                )
                out[i] = _framework(col, arrays)
                if k == 0:
                    self._count(int(item.length.sum()), item.rows * (opts.seq_len or 0), item.rows, item.truncated)
        else:
            rows = item
            for k, (i, col) in enumerate(self.ragged):
                starts, lens = col.offsets[rows], col.lengths[rows]
                if opts.layout == "pad":
                    longest = int(lens.max()) if len(lens) else 0
                    size = padded_length(longest, opts.pad_to_multiple_of, opts.buckets)
                    arrays: Any = pad_batch(col.host, starts, lens, size, opts.pad_value)
                    slots = size * len(lens)
                else:
                    arrays = flat_batch(col.host, starts, lens)
                    slots = int(lens.sum())
                out[i] = _framework(col, arrays)
                if k == 0:
                    self._count(int(lens.sum()), slots, len(lens), 0)
        if self.fixed is not None:
            for i, leaf in zip(self.fixed_at, self.fixed.take(rows), strict=True):
                out[i] = leaf
        return out

    def _count(self, tokens: int, slots: int, rows: int, truncated: int) -> None:
        stats = self.stats
        if stats is not None:
            with self._lock:
                stats.add_tokens(tokens, slots, rows, truncated)

    def first_rows(self, k: int) -> Any:
        """A batch of the first ``k`` rows in the Loader's layout (the construction probe)."""
        idx = np.arange(min(k, self.n), dtype=np.int64)
        if self.opts.layout in ("pad", "flat"):
            return self.take(idx)
        lens = np.minimum(self.lengths[idx], self.opts.seq_len or 0)
        dst = np.arange(len(idx), dtype=np.int64) * (self.opts.seq_len or 0)
        pieces = Pieces(idx, np.zeros_like(idx), lens, dst, len(idx), 0)
        return self.build(self._leaves(pieces))


def _framework(col: Ragged, arrays: tuple[Any, ...]) -> Any:
    """The layout's arrays in the framework of ``col``'s values (Python ints stay)."""
    if col.backend == "numpy":
        return arrays
    return type(arrays)(
        *(from_host(col.backend, a, col.values) if isinstance(a, np.ndarray) else a for a in arrays)
    )


# -- the plans of whole batches --------------------------------------------------------


class Units:
    """The batches of one epoch's plan; ``batch(u)`` is what ``RaggedRows`` gathers for ``u``."""

    def __init__(self, count: int, batch: Callable[[int], Any], rows: Callable[[int], np.ndarray]):
        self.count = count
        self.batch = batch
        self.rows = rows  # the data rows of batch u, in order


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
        batch = self.units.batch
        return (batch(int(u[0])) for u in self._inner)

    def batch(self, i: int) -> Any:
        """What batch ``i`` of this rank gathers."""
        return self.units.batch(int(self._inner.batch(i)[0]))

    def padding_mask(self, i: int) -> np.ndarray | None:
        """``[True]`` when batch ``i`` repeats an earlier batch to even the ranks, else None."""
        return self._inner.padding_mask(i)

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

    def __init__(self, rows: RaggedRows, docs: Order, rank: int, world_size: int, drop_last: bool):
        self.rows = rows
        self.opts = rows.opts
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
        opts, lengths = self.opts, self.rows.lengths
        seq = self.docs.global_order(epoch)
        lens = lengths[seq]
        shuffled = self.shuffle != "none"
        rng = generator(self.seed, epoch, _STREAM_BATCHES) if shuffled else None
        if opts.layout == "pack":
            return _pack_units(seq, lens, opts, self.drop_last)
        if opts.layout == "fit":
            return _fit_units(seq, lens, opts, self.drop_last)
        if opts.batch_tokens is None:  # length-grouped batches of batch_size rows
            assert opts.batch_size is not None
            order, bounds = _plans.length_grouped(lens, opts.batch_size, rng)
            if self.drop_last and len(seq) % opts.batch_size:
                bounds = bounds[:-1]
            return _row_units(seq[order], bounds)
        window = _plans.window_size(len(seq))
        if opts.group_by_length:
            seq, lens = _sort_windows(seq, lens, window)
        mode = "max" if opts.layout == "pad" else "sum"
        cost = self.rows.padded(lens) if mode == "max" else lens
        bounds = _plans.greedy_bounds(cost, opts.batch_tokens, mode=mode, window=window)
        if opts.group_by_length and rng is not None:  # whole batches shuffled
            count = len(bounds) - 1
            perm = rng.permutation(count)
            starts, stops = bounds[:-1][perm], bounds[1:][perm]
            return _row_units(seq, None, starts, stops)
        return _row_units(seq, bounds)

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


def _sort_windows(seq: np.ndarray, lens: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    m = len(seq)
    windows = -(-m // window)
    grid = np.full(windows * window, -1, dtype=np.int64)
    grid[:m] = lens
    within = np.argsort(-grid.reshape(windows, window), axis=1, kind="stable")
    order = (within + (np.arange(windows) * window)[:, None]).reshape(-1)
    order = order[order < m]
    return seq[order], lens[order]


def _row_units(
    seq: np.ndarray,
    bounds: np.ndarray | None,
    starts: np.ndarray | None = None,
    stops: np.ndarray | None = None,
) -> Units:
    """Batches of whole rows: ``seq[starts[u]:stops[u]]``."""
    if bounds is not None:
        starts, stops = bounds[:-1], bounds[1:]
    assert starts is not None and stops is not None
    s, e = starts, stops

    def rows(u: int) -> np.ndarray:
        return seq[int(s[u]) : int(e[u])]

    return Units(len(s), rows, rows)


def _pack_units(seq: np.ndarray, lens: np.ndarray, opts: Options, drop_last: bool) -> Units:
    """Concatenate-then-split: the epoch's rows as one stream cut into rows of ``seq_len``."""
    seq_len, per = opts.seq_len or 1, opts.batch_size or 1
    stream = np.zeros(len(seq) + 1, dtype=np.int64)
    np.cumsum(lens, out=stream[1:])
    total = int(stream[-1])
    packed_rows = -(-total // seq_len)
    count = packed_rows // per if drop_last else -(-packed_rows // per)
    span = seq_len * per

    def batch(u: int) -> Pieces:
        start = u * span
        stop = min(start + span, total)
        at, first, length = _plans.pack_pieces(stream, start, stop, seq_len)
        return Pieces(seq[at], first, length, stream[at] + first - start, -(-(stop - start) // seq_len), 0)

    def rows(u: int) -> np.ndarray:
        start = u * span
        at = _plans.pack_pieces(stream, start, min(start + span, total), seq_len)[0]
        return seq[_unique_in_order(at)]

    return Units(count, batch, rows)


def _fit_units(seq: np.ndarray, lens: np.ndarray, opts: Options, drop_last: bool) -> Units:
    """Whole rows (or their pieces) fitted into rows of ``seq_len``, first fit decreasing."""
    seq_len, per = opts.seq_len or 1, opts.batch_size or 1
    keep = lens > 0
    seq, lens = seq[keep], lens[keep]
    cut = np.zeros(len(seq), dtype=np.int64)
    if opts.long_rows == "split":
        count = -(-lens // seq_len)
        owner = np.repeat(np.arange(len(seq)), count)
        first = (np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)) * seq_len
        length = np.minimum(seq_len, lens[owner] - first)
        seq, lens, start, cut = seq[owner], length, first, np.zeros(len(owner), dtype=np.int64)
    else:
        cut = np.maximum(lens - seq_len, 0)
        lens = np.minimum(lens, seq_len)
        start = np.zeros(len(seq), dtype=np.int64)
    piece, row, total_rows = _plans.fit_rows(lens, seq_len, opts.max_segments)
    p_row, p_start, p_len, p_cut = seq[piece], start[piece], lens[piece], cut[piece]
    row_first = np.searchsorted(row, np.arange(total_rows + 1))
    within = np.cumsum(p_len) - p_len
    within -= np.repeat(within[row_first[:-1]], np.diff(row_first))
    count = total_rows // per if drop_last else -(-total_rows // per)

    def span(u: int) -> tuple[int, int, int, int]:
        r0, r1 = u * per, min((u + 1) * per, total_rows)
        return r0, r1, int(row_first[r0]), int(row_first[r1])

    def batch(u: int) -> Pieces:
        r0, r1, a, b = span(u)
        dst = (row[a:b] - r0) * seq_len + within[a:b]
        return Pieces(p_row[a:b], p_start[a:b], p_len[a:b], dst, r1 - r0, int(p_cut[a:b].sum()))

    def rows(u: int) -> np.ndarray:
        _, _, a, b = span(u)
        return _unique_in_order(p_row[a:b])

    return Units(count, batch, rows)


def _unique_in_order(x: np.ndarray) -> np.ndarray:
    """The distinct values of ``x`` in the order they first appear."""
    _, first = np.unique(x, return_index=True)
    return x[np.sort(first)]


# -- construction ------------------------------------------------------------------------


def ragged_probe(
    rows: RaggedRows, target: Any, dtype: Any, non_blocking: bool | None, skip_keys: Any
) -> None:
    """Move a batch of the first rows to ``target``, as every batch will be moved.

    Raises:
        TransferError: a leaf cannot be moved or cast.
    """
    from looptoolkit.device import to_device

    to_device(rows.first_rows(2), target, dtype=dtype, non_blocking=non_blocking, skip_keys=skip_keys)



def setup(
    data: Any,
    opts: Options,
    *,
    shuffle: Any,
    seed: int,
    group_size: int | None,
    run_size: int,
    rank: int,
    world_size: int,
    drop_last: bool,
    sampling: dict[str, Any],
    pad_shards: bool,
) -> tuple[RaggedRows, Any]:
    """The rows and the epoch order of ragged ``data``.

    Raises:
        ValueError: as [`RaggedRows`][looptoolkit.ragged._loader.RaggedRows], and for options
            that the planned batches do not offer (``pad_shards=False``).
    """
    rows = RaggedRows(data, opts)
    normalize_shuffle(shuffle)
    if not opts.units:
        assert opts.batch_size is not None
        order = Order(
            rows.n,
            opts.batch_size,
            shuffle=shuffle,
            seed=seed,
            group_size=group_size,
            run_size=run_size,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
            pad_shards=pad_shards,
            **sampling,
        )
        return rows, order
    if not pad_shards:
        raise ValueError(
            "`pad_shards=False` is not offered with planned batches (`batch_tokens`, "
            '`group_by_length`, `layout="pack"` or `"fit"`): ranks get whole batches in turn.'
        )
    docs = Order(
        rows.n, 1, shuffle=shuffle, seed=seed, group_size=group_size, run_size=run_size, **sampling
    )
    return rows, UnitOrder(rows, docs, rank, world_size, drop_last)
