"""The Loader's variable-length path: plans per epoch, ragged batches per plan.

Between the order and the transfer, in place of the rectangular
[`Rows`][looptoolkit._rows.rows.Rows]: [`rows_of`][looptoolkit.ragged._loader.rows_of] reads the
ragged inputs and the options, [`RaggedRows`][looptoolkit.ragged._loader.RaggedRows] builds each
batch's layout (one copy per leaf per batch) and fixed leaves' rows, and its
[`order`][looptoolkit.ragged._loader.RaggedRows.order] is either the rectangular
[`Order`][looptoolkit.Order] over rows (padded and flat batches of ``batch_size`` rows: every
rectangular feature as it is) or a [`UnitOrder`][looptoolkit.ragged._loader.UnitOrder]: each
epoch is planned (token budgets, length grouping, packing) into whole batches, and the batches are
dealt to the ranks in turn by an [`Order`][looptoolkit.Order] of one batch per step. Either way a
state is ``(epoch, offset)``, resumed in O(1).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import optree

from looptoolkit._rows.advice import advise_reads
from looptoolkit._rows.mapped import MappedFiles
from looptoolkit._rows.rows import Rows
from looptoolkit._rows.store_reads import announced, loader_order, summed
from looptoolkit.adapters._wrap import from_host
from looptoolkit.device import _tree as _tree
from looptoolkit.order._checks import check_not_empty
from looptoolkit.order._options import ORDER_ARGS, OrderOptions
from looptoolkit.order._order import Order, normalize_shuffle
from looptoolkit.ragged._column import Ragged, find_ragged
from looptoolkit.ragged._layouts import (
    flat_batch,
    packed_batches,
    pad_batch,
    padded_length,
)
from looptoolkit.ragged._options import Options, check_unused, options
from looptoolkit.ragged._stored import RowChunked, RowChunks
from looptoolkit.ragged._units import WINDOWED_MIN_RANKS, Block, Pieces, UnitOrder

__all__ = ["RaggedRows", "ragged_probe", "rows_of"]


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
        self.ragged_paths = [paths[i] for i, _ in self.ragged]
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
        # The files of memmap values and leaves, checked at the start of each pass.
        mapped = [x.values if isinstance(x, Ragged) else x for x in leaves]
        self.files = MappedFiles(mapped, lambda: paths)
        self.backends = sorted(
            {x.backend for _, x in self.ragged}
            | ({b for b in self.fixed.backends} if self.fixed else set())
        )
        self._paths = paths
        self._row_lengths: np.ndarray | None = None
        if opts.buckets is not None or opts.batch_tokens is not None or opts.seq_len is not None:
            self._check_fits(paths)
        self.stats: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Pickled and deep-copied without its lock.
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def lengths(self) -> np.ndarray:
        """One length per row, as the plans read it; computed when first asked for.

        Padded and flat batches of ``batch_size`` rows never ask: they read their rows'
        offsets a batch at a time (memory-mapped offsets are never read whole).
        """
        if self._row_lengths is None:
            self._row_lengths = self._lengths(self._paths)
        return self._row_lengths

    def all_lengths(self) -> np.ndarray:
        """[`lengths`][looptoolkit.ragged._loader.RaggedRows.lengths] (a picklable callable)."""
        return self.lengths

    def length_at(self, rows: np.ndarray) -> np.ndarray:
        """The lengths of rows ``rows`` as the plans read them, from their offsets alone.

        Raises:
            ValueError: ragged leaves whose lengths differ at one of the rows (a plan reads
                one length per row), both named.
        """
        first_at, first = self.ragged[0]
        lengths = first.spans(rows)[1]
        for i, x in self.ragged[1:]:
            other = x.spans(rows)[1]
            if not np.array_equal(other, lengths):
                self._unequal(first_at, i, int(rows[np.argmax(other != lengths)]))
        return lengths

    def _unequal(self, first_at: int, i: int, row: int) -> None:
        paths = self._paths
        first, x = self.leaves[first_at], self.leaves[i]
        raise ValueError(
            f"`layout={self.opts.layout!r}` plans one length per row, and the ragged "
            f"leaves {paths[first_at]} and {paths[i]} differ at row {row} "
            f"({len(first[row])} and {len(x[row])}); pass them in separate "
            'Loaders, or use `layout="pad"` or `"flat"` with `batch_size`.'
        )

    def _lengths(self, paths: list[str]) -> np.ndarray:
        """One length per row, as the plans read it: the ragged leaves' (the longest, for pad)."""
        first_at, first = self.ragged[0]
        lengths = first.lengths
        for i, x in self.ragged[1:]:
            if np.array_equal(x.lengths, lengths):
                continue
            if self.opts.units:
                self._unequal(first_at, i, int(np.flatnonzero(x.lengths != lengths)[0]))
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
                '`FitLayout(long_rows="split")` or `"truncate"`, or a larger `seq_len`.'
            )

    def padded(self, lengths: np.ndarray) -> np.ndarray:
        """The padded length ``L`` a batch whose longest row has each of ``lengths`` gets."""
        return padded_length(lengths, self.opts.pad_to_multiple_of, self.opts.buckets)

    # -- what the Loader's pipeline calls (the rectangular Rows' interface) ------------

    def gather(self, batches: Iterator[Any], staged: Any = None) -> Iterator[list[Any]]:
        """The leaf lists of each batch: rows (an index array), or packed batches' pieces."""
        if self.remote():
            batches = self._announced(batches)
        if self.opts.seq_len is not None:  # packed: blocks of batches planned at once
            return itertools.chain.from_iterable(map(self._expand, batches))
        return map(self._leaves, batches)

    def remote(self) -> list[RowChunked]:
        """The values of the ragged leaves in a bucket (read ahead of the order)."""
        return [col.values for _, col in self.ragged if isinstance(col.values, RowChunked)]

    def _announced(self, batches: Iterator[Any]) -> Iterator[Any]:
        """``batches``, each remote column told ahead the row chunks the order reads next.

        A pass lists (HEADs) the files once, and drops what was fetched ahead at its end.
        """
        values = self.remote()
        for v in values:
            v.start_pass()
        try:
            items, looked = itertools.tee(batches)
            rows = map(_rows_read, looked)
            ahead = announced(rows, [RowChunks(v) for v in values])
            for item, _ in zip(items, ahead, strict=True):
                yield item
        finally:
            for v in values:
                v.forget()

    def _refuse_scattered(self, args: dict[str, Any]) -> None:
        """Refuse an order that scatters rows over a bucket's chunks, with no disk cache.

        Such an order (a full shuffle, weights, an ``order_fn``) reads about one chunk of
        rows (about ``REMOTE_CHUNK_BYTES``) per row of a batch.

        Raises:
            ValueError: a ragged leaf in a bucket without a disk cache (named).
        """
        shuffle = normalize_shuffle(args["shuffle"])
        scattered = shuffle == "full" or any(
            args[k] is not None for k in ("weights", "num_samples", "order_fn")
        )
        scattered = scattered or bool(args["replacement"])
        if not scattered:
            return
        for (_, col), path in zip(self.ragged, self.ragged_paths, strict=True):
            values = col.values
            if isinstance(values, RowChunked) and values.file.cache is None:
                raise ValueError(
                    f"{path} is read from a bucket by chunks of about {values.chunk_rows} rows, "
                    "and this order scatters a batch's rows over them (a chunk fetched for "
                    'about each row); pass `shuffle="grouped"` (each chunk fetched about once '
                    "an epoch), or read it through a chunk cache on disk: "
                    "`looptoolkit.stores.bucket(url, ..., cache_dir=..., cache_bytes=...)`."
                )

    def remote_reads(self) -> dict[str, int]:
        """This process's requests and bytes of the ragged leaves in a bucket, summed."""
        return summed([values.file.counters for values in self.remote()])

    def remote_chunk_rows(self) -> int | None:
        """Rows per chunk of the first ragged leaf in a bucket (the order's groups), or None."""
        values = self.remote()
        return values[0].chunk_rows if values else None

    def _expand(self, item: Block) -> Iterator[list[Any]]:
        """The leaves of each packed batch of a block, one batch at a time."""
        opts = self.opts
        seq_len, pieces = opts.seq_len or 0, item.pieces
        layouts = [
            packed_batches(
                col.host,
                col.offsets[pieces.row] + pieces.start,
                pieces.length,
                pieces.dst,
                item.per,
                item.rows,
                seq_len,
                opts.pad_value,
            )
            for _, col in self.ragged
        ]
        fixed: list[Any] = []
        bounds: list[int] = []
        if self.fixed is not None:
            # The fixed leaves' rows, one per piece, cut where each batch's pieces end.
            fixed = self.fixed.take(pieces.row)
            bounds = np.searchsorted(
                pieces.dst, np.arange(len(item.rows) + 1) * item.per * seq_len
            ).tolist()
        for j, parts in enumerate(zip(*layouts, strict=True)):
            out: list[Any] = [None] * len(self.leaves)
            for (i, col), part in zip(self.ragged, parts, strict=True):
                out[i] = _framework(col, part)
            if self.stats is not None:
                real = int((np.asarray(parts[0].segment_ids) > 0).sum())
                self._count(real, item.rows[j] * seq_len, item.rows[j], item.truncated[j])
            for i, leaf in zip(self.fixed_at, fixed, strict=True):
                out[i] = leaf[bounds[j] : bounds[j + 1]]
            yield out

    def built(self, gathered: Iterator[Sequence[Any]]) -> Iterator[Any]:
        """The batches of gathered leaf lists."""
        return map(self.build, gathered)

    def build(self, leaves: Sequence[Any]) -> Any:
        """The batch: the data's containers around the layouts and the fixed leaves."""
        return self.spec.unflatten(leaves)

    def take(self, idx: np.ndarray) -> Any:
        """The batch of rows ``idx`` in the Loader's layout (pad or flat)."""
        return self.build(self._leaves(np.asarray(idx, dtype=np.int64)))

    def _leaves(self, item: np.ndarray) -> list[Any]:
        """The leaves of the batch of rows ``item`` (``"pad"`` and ``"flat"``)."""
        out: list[Any] = [None] * len(self.leaves)
        opts = self.opts
        rows = item
        for k, (i, col) in enumerate(self.ragged):
            starts, lens = col.spans(rows)
            if opts.layout == "pad":
                longest = max(lens.tolist(), default=0)
                size = int(padded_length(longest, opts.pad_to_multiple_of, opts.buckets))
                arrays: Any = pad_batch(col.host, starts, lens, size, opts.pad_value)
                slots = size * len(lens)
            else:
                arrays = flat_batch(col.host, starts, lens)
                slots = int(lens.sum())
            out[i] = _framework(col, arrays)
            if k == 0 and self.stats is not None:
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

    def order(self, opts: OrderOptions) -> Order | UnitOrder:
        """The epoch order of these rows: step 2 of a Loader's construction.

        Padded and flat batches of ``batch_size`` rows follow the rectangular
        [`Order`][looptoolkit.Order] over rows; token budgets, length grouping, packed and
        fitted rows plan each epoch into whole batches dealt to the ranks in turn
        ([`UnitOrder`][looptoolkit.ragged._units.UnitOrder]).

        Raises:
            ValueError: ``pad_shards=False`` with planned batches; an epoch without batches.
        """
        args, rank, world_size = opts.args, opts.rank, opts.world_size
        o = self.opts
        order: Order | UnitOrder
        chunk_rows = self.remote_chunk_rows()
        if chunk_rows is not None:
            self._refuse_scattered(args)
        if not o.units:
            assert o.batch_size is not None
            order = loader_order(self.n, o.batch_size, args, rank, world_size, None)
            if chunk_rows is not None:  # groups of whole chunks of rows in a bucket
                order = _chunked(order, chunk_rows, args)
            check_not_empty(order)
        else:
            if not args["pad_shards"]:
                raise ValueError(
                    "`pad_shards=False` is not offered with planned batches (`batch_tokens`, "
                    "`group_by_length`, `PackLayout` or `FitLayout`): ranks get whole batches "
                    "in turn."
                )
            # The epoch's order of the rows, on one rank: the plan deals whole batches to the
            # ranks.
            docs = loader_order(self.n, 1, {**args, "drop_last": False}, 0, 1, None)
            if chunk_rows is not None:
                docs = _chunked(docs, chunk_rows, {**args, "drop_last": False})
            order = UnitOrder(
                self.all_lengths,
                self.padded,
                o,
                docs,
                rank,
                world_size,
                args["drop_last"],
                self.length_at,
            )
            if len(order) == 0:
                raise ValueError(
                    f"`drop_last=True` leaves rank {rank} of {world_size} no batch of epoch 0."
                )
        # A plan of the whole epoch reads every row's offsets in sequence (read-ahead helps).
        whole = (
            o.batch_tokens is not None
            or o.layout in ("pack", "fit")
            or (o.group_by_length and world_size < WINDOWED_MIN_RANKS)
        )
        advise_reads(self.leaves, opts.reads, world_size, offsets=not whole)
        return order

    def check_delivery(self, resident: bool, return_mask: bool) -> None:
        """Refuse what a Loader does not offer with ragged leaves.

        Raises:
            ValueError: ``resident`` or ``return_mask``.
        """
        for name, value in (("resident", resident), ("return_mask", return_mask)):
            if value:
                raise ValueError(
                    f"`{name}` is not offered with ragged leaves (batches are laid out on the "
                    "host, then moved by `device=`)."
                )

    def first_rows(self, k: int) -> Any:
        """A batch of the first ``k`` rows in the Loader's layout (the construction probe)."""
        idx = np.arange(min(k, self.n), dtype=np.int64)
        if self.opts.layout in ("pad", "flat"):
            return self.take(idx)
        seq_len = self.opts.seq_len or 0
        lens = np.minimum(self.lengths[idx], seq_len)
        dst = np.arange(len(idx), dtype=np.int64) * seq_len
        pieces = Pieces(idx, np.zeros_like(idx), lens, dst, len(idx))
        return self.batch(Block(pieces, len(idx), [len(idx)], [0]))

    def batch(self, item: Any) -> Any:
        """One batch: of rows (an index array) or the block of one packed batch."""
        if isinstance(item, Block):
            (leaves,) = list(self._expand(item))
            return self.build(leaves)
        return self.build(self._leaves(item))


def _chunked(order: Order, chunk_rows: int, args: dict[str, Any]) -> Order:
    """``order`` with its groups made of whole chunks of ``chunk_rows`` rows (a grouped order)."""
    if order.shuffle != "grouped":
        return order
    options = {k: args[k] for k in ORDER_ARGS}
    return Order(
        order.n,
        order.batch_size,
        rank=order.rank,
        world_size=order.world_size,
        chunk_rows=chunk_rows,
        **options,
    )


def _rows_read(item: Any) -> np.ndarray:
    """The rows a batch reads: its index array, or the rows of a packed block's pieces."""
    return item.pieces.row if isinstance(item, Block) else item


def _framework(col: Ragged, arrays: tuple[Any, ...]) -> Any:
    """The layout's arrays in the framework of ``col``'s values (Python ints stay)."""
    if col.backend == "numpy":
        return arrays
    return type(arrays)(
        *(from_host(col.backend, a, col.values) if isinstance(a, np.ndarray) else a for a in arrays)
    )


# -- construction ------------------------------------------------------------------------


def ragged_probe(
    rows: RaggedRows, target: Any, dtype: Any, non_blocking: bool | None, skip_keys: Any
) -> bool:
    """Move a batch of the first rows to ``target``, as every batch will be moved.

    Returns:
        Whether the move kept every leaf as it was (host arrays to ``"cpu"``, no cast): then
        the Loader skips the move of every batch.

    Raises:
        TransferError: a leaf cannot be moved or cast.
    """
    from looptoolkit.device._move import to_device

    batch = rows.first_rows(2)
    moved = to_device(batch, target, dtype=dtype, non_blocking=non_blocking, skip_keys=skip_keys)
    (out, spec), (given, given_spec) = _tree.flatten(moved), _tree.flatten(batch)
    return spec == given_spec and all(a is b for a, b in zip(out, given, strict=True))


def rows_of(data: Any, batch_size: Any, ragged_args: dict[str, Any], cache_bytes: Any) -> Any:
    """What the rows of ``data`` are when it may hold ragged columns (step 1, below a mixture).

    Ragged inputs (lists of token lists, object arrays, Arrow list columns, jagged tensors...)
    become [`Ragged`][looptoolkit.Ragged] leaves and the data a
    [`RaggedRows`][looptoolkit.ragged._loader.RaggedRows] laid out by the ragged options; data
    without any is rectangular [`Rows`][looptoolkit._rows.rows.Rows].

    Args:
        data: the data.
        batch_size: rows per batch (None with ``batch_tokens``).
        ragged_args: the ragged options by name.
        cache_bytes: the chunk cache of store leaves (rectangular data only).

    Raises:
        ValueError: ragged options without ragged leaves, a missing ``batch_size``,
            ``cache_bytes`` with ragged leaves, and the errors of the options and the rows.
    """
    ragged = find_ragged(data)
    if ragged is None:
        check_unused(ragged_args, batch_size)
        return Rows(data, cache_bytes)
    if cache_bytes is not None:
        raise ValueError(
            "`cache_bytes` is not offered with ragged leaves (batches are laid out on the host, "
            "then moved by `device=`)."
        )
    return RaggedRows(ragged, options(batch_size, **ragged_args))
