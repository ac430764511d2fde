"""Epoch orders: the first step of the data flow, from ``(seed, epoch, shard)`` to batch indices.

An [`Order`][looptoolkit.Order] turns ``(seed, epoch, n, shuffle, group_size, rank, world_size,
batch_size, drop_last)`` into the index arrays of one epoch for one shard, and
hands them, batch by batch, to the [`Loader`][looptoolkit.Loader], which gathers
those rows from every leaf. Everything here is NumPy and a pure function of its
arguments: the same order on every run, every machine and every framework.

An epoch is built in three steps (``docs/order.md`` has the details and the
measured trade-offs):

1. The **global order** ``G`` of the epoch, a permutation of ``[0, n)``:
   ``"none"`` is ``arange(n)``; ``"full"`` is ``rng.permutation(n)`` below
   ``KEYED_MIN_ROWS`` (2**20) rows and, from it on, a keyed bijection of ``[0, n)``
   per ``(seed, epoch)`` (Feistel rounds with cycle-walking, ``looptoolkit.order._keyed``)
   whose positions are computed on their own, so that a rank computes only its
   own positions, a block at a time (the choice depends on ``n`` alone);
   ``"grouped"`` cuts a randomly rotated index range into groups of
   ``group_size``, shuffles the order of the groups and, independently for each
   group, the order inside it, then rotates the resulting stream by a random
   shift that is not a multiple of the group size (so batch boundaries never
   sit on the same group boundaries in two epochs). Grouped orders are produced
   chunk by chunk (a few groups at a time, each chunk from its own random
   stream), so any position can be computed without an ``n``-long array.
2. **Padding**: unless ``drop_last``, ``G`` is extended by wrapping around from
   its start to ``L = ceil(n / world_size) * world_size`` positions (as
   ``torch.utils.data.DistributedSampler`` does); with ``drop_last`` it is cut
   to ``L = (n // world_size) * world_size``.
3. **Sharding**, as ``DistributedSampler`` does: rank ``r`` takes every
   ``world_size``-th position of the padded order ``P`` from ``offset + r`` on,
   ``P[offset + r : L : world_size]``, and cuts that stream into batches of
   ``batch_size`` (a last partial one unless ``drop_last``). A rank's order
   therefore does not depend on ``batch_size``, and ``k`` batches on every rank
   consume exactly the global positions ``[offset, offset + k * batch_size *
   world_size)``.

Random streams are derived from ``(seed, epoch, stream, ...)`` with an injective
encoding into `numpy.random.SeedSequence` entropy, so no two
``(seed, epoch)`` pairs share a stream (``seed + epoch`` would make ``(1, 1)``
and ``(2, 0)`` equal).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import numpy as np

from looptoolkit._common.errors import check_int
from looptoolkit.order import _keyed as _keyed
from looptoolkit.order._sampling import Sampling
from looptoolkit.order._sources import (
    STREAM_FULL,
    ChunkGrouped,
    Grouped,
    Materialized,
    Positional,
    Sequential,
    Source,
    chunk_shards,
    generator,
)

__all__ = [
    "DEFAULT_GROUP_SIZE",
    "SHUFFLE_MODES",
    "EpochOrder",
    "Order",
    "batch_count",
    "epoch_indices",
    "normalize_shuffle",
]

SHUFFLE_MODES = ("none", "full", "grouped")

DEFAULT_GROUP_SIZE: int = 8192
"""Rows per group of a grouped shuffle when ``group_size`` is None.

Chosen by ``benchmarks/order_quality.py`` (``docs/order.md`` has the table): the
largest group size that costs no more than smaller ones. On the tabular workload
(300-row batches of 256-byte rows, 2-core EPYC) generating the order plus
gathering every batch took the same time with groups of 256 to 8192 rows, and
about 5% more at 16384 and 10-15% more at 65536 (each group's shuffle then
leaves the fastest caches), while the chance that two neighbouring rows share
a batch falls as ``batch_size / group_size`` (0.037 at 8192, batches of 300).
"""

# Positions per block when iterating: one vectorised slice per block, then
# per-batch row views of it.
_BLOCK_POSITIONS = 1 << 16


def batch_count(n: int, batch_size: int, drop_last: bool = False) -> int:
    """Batches of ``batch_size`` that ``n`` samples make (a last short one unless ``drop_last``).

    The one definition of a batch count: [`Order`][looptoolkit.Order], the integrations and the
    comparison pipelines all use it.

    Examples:
        >>> batch_count(10, 3), batch_count(10, 3, drop_last=True)
        (4, 3)
    """
    return n // batch_size if drop_last else -(-n // batch_size)


def epoch_indices(order: Any, epoch: int) -> np.ndarray:
    """The sample order of ``epoch`` as a 1-D NumPy integer array.

    Args:
        order: a [`looptoolkit.Loader`][looptoolkit.Loader] (``indices(epoch)``), an
            [`Order`][looptoolkit.Order] (``epoch(epoch).indices()``: this shard's order, as the
            Loader gathers it), or a function of the epoch returning the order.
        epoch: the epoch number.

    Returns:
        The indices, in the order the epoch visits them.

    Raises:
        TypeError: ``order`` is none of those.

    Examples:
        >>> epoch_indices(lambda e: np.arange(4)[::-1], 0)
        array([3, 2, 1, 0])
    """
    if callable(getattr(order, "indices", None)):
        indices = order.indices(epoch)
    elif callable(getattr(order, "epoch", None)):
        indices = order.epoch(epoch).indices()
    elif callable(order):
        indices = order(epoch)
    else:
        raise TypeError(
            "`order` must be an Order, a Loader or a function of the epoch, "
            f"got {type(order).__name__}."
        )
    return np.asarray(indices)


def normalize_shuffle(shuffle: bool | str) -> str:
    """The shuffle mode named by ``shuffle``, one of ``SHUFFLE_MODES``.

    Args:
        shuffle: ``False`` (-> ``"none"``), ``True`` (-> ``"full"``), or one of
            ``"none"``, ``"full"``, ``"grouped"``.

    Returns:
        The mode as a string.

    Raises:
        TypeError: ``shuffle`` is neither a bool nor a str.
        ValueError: ``shuffle`` is a str that names no mode.

    Examples:
        >>> normalize_shuffle(True), normalize_shuffle(False), normalize_shuffle("grouped")
        ('full', 'none', 'grouped')
    """
    if isinstance(shuffle, bool | np.bool_):
        return "full" if shuffle else "none"
    if isinstance(shuffle, str):
        if shuffle in SHUFFLE_MODES:
            return shuffle
        raise ValueError(f"`shuffle` must be False, True, 'full' or 'grouped', got {shuffle!r}.")
    raise TypeError(
        f"`shuffle` must be False, True, 'full' or 'grouped', got {type(shuffle).__name__}."
    )


class Order:
    """The batch order of every epoch of one shard.

    Args:
        n: number of samples, ``>= 1``.
        batch_size: samples per batch on each rank, ``>= 1``.
        shuffle: ``False``/``"none"``, ``True``/``"full"`` or ``"grouped"``.
        seed: non-negative int; with the epoch it determines every random choice.
        group_size: rows per group of a grouped shuffle; None means
            ``DEFAULT_GROUP_SIZE``. Validated for every mode,
            used only by ``"grouped"`` (groups larger than ``n`` are one group of ``n``).
        run_size: rows per run inside a group of a grouped shuffle (1: every row
            on its own). Runs of consecutive rows keep their order and are
            shuffled as units: gathers read runs of neighbouring rows (faster),
            and neighbouring rows share a batch far more often (a weaker
            shuffle). Validated for every mode, used only by ``"grouped"``.
        rank: this shard, in ``[0, world_size)``.
        world_size: number of shards, ``>= 1``.
        drop_last: drop the last partial batch, and cut the epoch to a multiple
            of ``world_size`` instead of padding it.
        chunk_rows: rows per chunk of the data's store (the Loader passes it for
            zarr, HDF5 and Arrow data). With ``"grouped"``, a group is then
            ``ceil(group_size / chunk_rows)`` whole chunks drawn at random
            (``group_size`` is rounded up to whole chunks), and with several
            ranks each rank gets whole chunks of its own
            (``ChunkGrouped``). Not used by
            the other shuffles.

    Raises:
        TypeError: an argument has the wrong type (bools are not ints here).
        ValueError: an argument has a wrong value.

    Examples:
        >>> order = Order(10, 4, shuffle=False)
        >>> len(order), [b.tolist() for b in order.epoch(0)]
        (3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
        >>> two = Order(5, 2, shuffle=False, rank=1, world_size=2)
        >>> [b.tolist() for b in two.epoch(0)], two.epoch(0).padding_mask(1).tolist()
        ([[1, 3], [0]], [True])
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        shuffle: bool | str = True,
        seed: int = 0,
        group_size: int | None = None,
        run_size: int = 1,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        weights: Any = None,
        replacement: bool = False,
        num_samples: int | None = None,
        indices: Any = None,
        order_fn: Callable[[int, int], Any] | None = None,
        pad_shards: bool = True,
        chunk_rows: int | None = None,
    ) -> None:
        self.n = check_int("n", n, minimum=1)
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.shuffle = normalize_shuffle(shuffle)
        self.seed = check_int("seed", seed, minimum=0)
        self.group_size = (
            DEFAULT_GROUP_SIZE
            if group_size is None
            else check_int("group_size", group_size, minimum=1)
        )
        self.run_size = check_int("run_size", run_size, minimum=1)
        self.rank, self.world_size = check_rank(rank, world_size)
        for name, flag in (("drop_last", drop_last), ("pad_shards", pad_shards)):
            if not isinstance(flag, bool | np.bool_):
                raise TypeError(f"`{name}` must be a bool, got {type(flag).__name__}.")
        self.drop_last = bool(drop_last)
        self.pad_shards = bool(pad_shards)
        self.sampling = Sampling(
            self.n,
            self.shuffle,
            weights=weights,
            replacement=replacement,
            num_samples=num_samples,
            indices=indices,
            order_fn=order_fn,
            seed=self.seed,
        )
        # Samples per epoch before sharding: n, or the subset's, the draw's, the custom order's.
        self.length: int = self.sampling.length
        # Rows per chunk of a chunk-grouped order (a store's), else None.
        self.chunk_rows: int | None = None
        self._shard_rows: tuple[int, ...] = ()
        # (an order computed by position shuffles the rows itself: its sources' chunks)
        if chunk_rows is not None and self.shuffle == "grouped" and not self.sampling.positional:
            self._chunk_grouped(check_int("chunk_rows", chunk_rows, minimum=1))

    def _chunk_grouped(self, chunk_rows: int) -> None:
        """Set up the grouped order of a chunked store (groups of whole chunks)."""
        offered = (
            "the grouped order of a store (groups of whole chunks) is not offered with {}; "
            'use `shuffle="full"` (sorted reads per batch) or drop the option.'
        )
        if self.sampling.kind != "permutation":
            raise ValueError(offered.format(f"`{self.sampling.kind}` sampling"))
        if self.run_size != 1:
            raise ValueError(offered.format("`run_size`"))
        if not self.pad_shards:
            raise ValueError(offered.format("`pad_shards=False` (`drop_last=True` evens ranks)"))
        self.chunk_rows = chunk_rows
        self.group_size = -(-self.group_size // chunk_rows) * chunk_rows
        self._shard_rows = chunk_shards(self.n, chunk_rows, self.world_size)
        if min(self._shard_rows) == 0:
            chunks = -(-self.n // chunk_rows)
            raise ValueError(
                f"the grouped order of a store gives each rank whole chunks: {self.n} rows in "
                f"chunks of {chunk_rows} make {chunks} chunks, fewer than `world_size` "
                f'({self.world_size}); use `shuffle="full"` or fewer ranks.'
            )

    def __repr__(self) -> str:
        return (
            f"Order(n={self.n}, batch_size={self.batch_size}, shuffle={self.shuffle!r}, "
            f"seed={self.seed}, group_size={self.group_size}, run_size={self.run_size}, "
            f"rank={self.rank}, world_size={self.world_size}, drop_last={self.drop_last}"
            + ("" if self.sampling.kind == "permutation" else f", sampling={self.sampling.kind!r}")
            + ("" if self.pad_shards else ", pad_shards=False")
            + ("" if self.chunk_rows is None else f", chunk_rows={self.chunk_rows}")
            + ")"
        )

    @property
    def padded_length(self) -> int:
        """``L``: positions of the epoch's global order after padding or cutting."""
        w, m = self.world_size, self.length
        if self._shard_rows:  # each rank's own chunks, padded to the longest or cut
            return w * (min(self._shard_rows) if self.drop_last else max(self._shard_rows))
        if not self.pad_shards:
            return m
        if self.drop_last:
            return (m // w) * w
        return -(-m // w) * w

    @property
    def full_order(self) -> str | None:
        """How the full shuffle's permutation is computed: ``"keyed"`` or ``"permutation"``.

        None when the order shuffles no permutation of its own (other shuffles, weighted
        draws without replacement, custom orders); for draws with replacement (uniform
        or weighted), whether they are computed by position. A saved state records it:
        a state from before the keyed orders existed described a materialised
        permutation or draw at any length.
        """
        if self.shuffle != "full":
            return None
        keyed = self.sampling.keyed  # draws with replacement: "permutation" names the old ones
        if keyed is not None:
            return "keyed" if keyed else "permutation"
        if self.sampling.kind not in ("permutation", "indices"):
            return None
        return "keyed" if self.length >= _keyed.KEYED_MIN_ROWS else "permutation"

    def per_rank(self, offset: int = 0) -> int:
        """Samples this rank gets in an epoch resumed at ``offset`` (before ``drop_last``)."""
        remaining = self.padded_length - self._check_offset(offset)
        if self.pad_shards:
            return remaining // self.world_size
        return max(0, -(-(remaining - self.rank) // self.world_size))

    def num_batches(self, offset: int = 0) -> int:
        """Batches this rank gets in an epoch resumed at global position ``offset``.

        Args:
            offset: global positions already consumed (by all ranks together);
                a multiple of ``world_size``, at most
                [`padded_length`][looptoolkit.Order.padded_length].

        Returns:
            The number of batches, the same on every rank.

        Raises:
            TypeError: ``offset`` is not an int.
            ValueError: ``offset`` is negative, not a multiple of ``world_size``,
                or past the padded length.
        """
        return batch_count(self.per_rank(offset), self.batch_size, self.drop_last)

    def __len__(self) -> int:
        return self.num_batches(0)

    def last_batch_size(self, offset: int = 0) -> int:
        """Rows of each rank's short last batch of an epoch resumed at ``offset`` (0: none)."""
        if self.drop_last:
            return 0
        return self.per_rank(offset) % self.batch_size

    def global_order(self, epoch: int) -> np.ndarray:
        """The epoch's permutation of ``[0, n)``, before padding and sharding.

        This materialises ``n`` int64s; iterating [`epoch`][looptoolkit.Order.epoch] does not need
        to.

        Args:
            epoch: non-negative epoch number.

        Returns:
            A fresh 1-D int64 array.
        """
        source = self._source(check_int("epoch", epoch, minimum=0))
        return source.materialize().astype(np.int64, copy=False)

    def epoch(self, epoch: int, offset: int = 0) -> EpochOrder:
        """The batches of ``epoch`` for this rank, from global position ``offset`` on.

        Args:
            epoch: non-negative epoch number.
            offset: global positions already consumed by all ranks together
                (``k * batch_size * world_size`` after ``k`` batches per rank); a
                multiple of ``world_size``. With the same ``world_size`` the
                result is batches ``k, k + 1, ...`` of ``epoch(epoch)``; with
                another one the remaining order is re-split between the ranks.

        Returns:
            The epoch's ``EpochOrder``.
        """
        epoch = check_int("epoch", epoch, minimum=0)
        offset = self._check_offset(offset)
        return EpochOrder(self, epoch, offset)

    def _source(self, epoch: int) -> Source:
        sampled = self.sampling.source(self.seed, epoch, lambda m: self._permutation(m, epoch))
        return self._permutation(self.n, epoch) if sampled is None else sampled

    def _permutation(self, n: int, epoch: int) -> Source:
        """The epoch's shuffle of ``n`` positions."""
        if self.chunk_rows is not None:
            k = self.group_size // self.chunk_rows
            cut = self.drop_last
            return ChunkGrouped(n, self.chunk_rows, k, self.seed, epoch, self.world_size, cut)
        if self.shuffle == "none":
            return Sequential(n)
        if self.shuffle == "full":
            if n >= _keyed.KEYED_MIN_ROWS:  # by position: no n-long array (depends on n alone)
                return _keyed.Keyed(n, self.seed, epoch)
            rng = generator(self.seed, epoch, STREAM_FULL)
            return Materialized(rng.permutation(n).astype(np.intp, copy=False), fresh=True)
        return Grouped(n, self.group_size, self.seed, epoch, self.run_size)

    def _padding(self, positions: np.ndarray) -> np.ndarray:
        """Which global ``positions`` (of this rank) of the padded order are padding."""
        if self._shard_rows:
            return positions // self.world_size >= self._shard_rows[self.rank]
        return positions >= self.length

    def _check_offset(self, offset: int) -> int:
        offset = check_int("offset", offset, minimum=0)
        if offset % self.world_size:
            raise ValueError(
                f"`offset` must be a multiple of `world_size` ({self.world_size}), got {offset}."
            )
        if offset > self.padded_length:
            raise ValueError(
                f"`offset` must be <= the padded epoch length ({self.padded_length}), got {offset}."
            )
        return offset


class EpochOrder:
    """The batches of one epoch for one rank: what the Loader gathers.

    Batches are 1-D ``np.intp`` arrays. Iterating yields views into blocks that
    the iteration generated (or into the epoch's permutation for ``"full"``),
    strided by ``world_size`` when there are several ranks, so a batch costs no
    copy; copy one before writing to it.

    Attributes:
        order: the [`Order`][looptoolkit.Order] this epoch belongs to.
        epoch: the epoch number.
        offset: global positions skipped at the start (a resumed epoch).
        global_batch: ``batch_size * world_size``, positions per global batch.
        samples_per_rank: ``(L - offset) // world_size``, this rank's share of
            the remaining padded order (with ``drop_last`` a last partial batch
            of it is then dropped).
    """

    def __init__(self, order: Order, epoch: int, offset: int) -> None:
        self.order = order
        self.epoch = epoch
        self.offset = offset
        # Positions of the global order before it wraps (a chunk-grouped order pads itself).
        self._n = order.padded_length if order.chunk_rows is not None else order.length
        self.global_batch = order.batch_size * order.world_size
        self.samples_per_rank = order.per_rank(offset)
        self._full = self.samples_per_rank // order.batch_size
        self._last = order.last_batch_size(offset)  # size of the last partial batch
        self._len = self._full + (1 if self._last else 0)

    @functools.cached_property
    def _source(self) -> Source:
        # Made on first use: a padding mask or the length needs no permutation.
        return self.order._source(self.epoch)

    def __repr__(self) -> str:
        return f"EpochOrder({self.order!r}, epoch={self.epoch}, offset={self.offset})"

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[np.ndarray]:
        # Python runs once per block of batches; `chain` steps through each
        # block's row views in C, one per batch.
        return itertools.chain.from_iterable(self._blocks())

    def _blocks(self) -> Iterator[Iterable[np.ndarray]]:
        b, w, r = self.order.batch_size, self.order.world_size, self.order.rank
        g = self.global_batch
        own = w > 1 and self._positional  # compute this rank's positions alone
        step = max(1, _BLOCK_POSITIONS // (b if own else g))  # global batches per block
        for k0 in range(0, self._full, step):
            k1 = min(self._full, k0 + step)
            start, stop = self.offset + k0 * g, self.offset + k1 * g
            # Rows of a 2-D block are the batches. Position j * w + r of a global
            # batch is row j of rank r's batch.
            if w == 1:
                yield self._values(start, stop).reshape(k1 - k0, b)
            elif own:
                yield self._own(start, stop).reshape(k1 - k0, b)
            else:
                yield self._values(start, stop).reshape(k1 - k0, b, w)[:, :, r]
        if self._last:
            yield (self.batch(self._full),)

    def batch(self, i: int) -> np.ndarray:
        """The ``i``-th batch of this rank (negative ``i`` counts from the end).

        Raises:
            IndexError: ``i`` is out of range.
        """
        start, stop = self._span(i)
        w = self.order.world_size
        if w > 1 and self._positional:
            return self._own(start, stop)
        values = self._values(start, stop)
        return values if w == 1 else values[self.order.rank :: w]

    def padding_mask(self, i: int) -> np.ndarray | None:
        """Where batch ``i`` holds padding, or None when it holds none.

        Padding rows are wrapped-around duplicates from the start of the epoch's
        order, added so that every rank gets the same number of samples.

        Returns:
            A bool array of the batch's length, True at padding rows; or None.

        Raises:
            IndexError: ``i`` is out of range.
        """
        start, stop = self._span(i)
        w = self.order.world_size
        positions = np.arange(start + self.order.rank, stop, w)
        padding = self.order._padding(positions)
        return padding if padding[-1] else None

    def positions(self, i: int) -> np.ndarray:
        """The positions in the epoch's global order of the rows of this rank's batch ``i``.

        What a row's keyed draws are a function of: the same row of the same epoch has the
        same position at any world size, batch size or resume offset (padding rows, which
        wrap around to the start of the order, have positions past its end).

        Raises:
            IndexError: ``i`` is out of range.
        """
        start, stop = self._span(i)
        return np.arange(start + self.order.rank, stop, self.order.world_size, dtype=np.int64)

    def indices(self) -> np.ndarray:
        """All batches of this rank, concatenated, as one 1-D ``np.intp`` array.

        This is ``P[offset + rank : offset + len * world_size : world_size]`` of
        the padded order ``P``, whatever the batch size (with ``drop_last`` it
        stops before the dropped partial batch). May share memory with this
        object (for ``"full"`` with one rank it is a slice of the permutation).
        """
        w, r = self.order.world_size, self.order.rank
        total = self._full * self.order.batch_size + self._last
        if w == 1:
            return self._values(self.offset, self.offset + total)
        out = np.empty(total, dtype=np.intp)
        own = self._positional
        per_block = _BLOCK_POSITIONS if own else max(1, _BLOCK_POSITIONS // w)
        for j0 in range(0, total, per_block):  # this rank's samples per block: per_block
            j1 = min(total, j0 + per_block)
            start, stop = self.offset + j0 * w, self.offset + j1 * w
            out[j0:j1] = self._own(start, stop) if own else self._values(start, stop)[r::w]
        return out

    def _span(self, i: int) -> tuple[int, int]:
        """Positions ``[start, stop)`` of the global batch holding this rank's batch ``i``.

        The rank's rows are positions ``start + rank, start + rank + world_size, ...``.
        """
        if not isinstance(i, int | np.integer) or isinstance(i, bool):
            raise TypeError(f"batch index must be an int, got {type(i).__name__}.")
        index = int(i)
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError(f"batch {index} out of range for an epoch of {self._len} batches.")
        start = self.offset + i * self.global_batch
        if i < self._full:
            return start, start + self.global_batch
        return start, start + self._last * self.order.world_size

    @property
    def _positional(self) -> bool:
        """Whether the source computes any position on its own (then a rank reads only its own)."""
        return getattr(self._source, "positional", False)

    def _own(self, start: int, stop: int) -> np.ndarray:
        """This rank's positions of ``[start, stop)`` of the padded order, from a positional source.

        Positions ``start + rank, start + rank + world_size, ...``; padding wraps by position.
        """
        w = self.order.world_size
        positions = np.arange(start + self.order.rank, stop, w, dtype=np.int64)
        if stop > self._n:
            positions %= self._n
        return cast(Positional, self._source).at(positions)

    def _values(self, start: int, stop: int) -> np.ndarray:
        """Padded global order at positions ``[start, stop)``; wraps past ``n``."""
        n = self._n
        if stop <= start:
            return np.empty(0, dtype=np.intp)
        if stop <= n:
            return self._source.segment(start, stop)
        pieces = []
        while start < stop:
            lap = start - start % n
            end = min(stop, lap + n)
            pieces.append(self._source.segment(start - lap, end - lap))
            start = end
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


def check_rank(rank: object, world_size: object) -> tuple[int, int]:
    """``(rank, world_size)`` as ints, ``rank`` in ``[0, world_size)``."""
    world = check_int("world_size", world_size, minimum=1)
    r = check_int("rank", rank)
    if not 0 <= r < world:
        raise ValueError(f"`rank` must be in [0, world_size), got rank={r}, world_size={world}.")
    return r, world
