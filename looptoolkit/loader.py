"""Loader: from an epoch's order to batches in the user's loop.

The step after [`looptoolkit.order`][looptoolkit.order] in the data flow. For each
epoch it takes this shard's sample order from an [`Order`][looptoolkit.Order], cuts
it into batches, has each backend gather them (one gather per leaf per batch;
torch, JAX and tf gather a chunk of batches at once and split it, so their
per-call cost is paid per chunk), rebuilds the data's containers around the
gathered leaves, moves the batch with [`looptoolkit.to_device`][looptoolkit.to_device] when a
``device`` is given, applies the ``transform``, and hands it to the user's
step, prefetched in the loop's own thread or by one background thread
([`looptoolkit._pipeline.stream`][looptoolkit._pipeline.stream] builds the epoch's stream).

Where the work runs:

- In-memory data (``prefetch_mode="auto"``): gather, move and transform in the
  consumer's thread. A background hand-off costs more than a host gather of a
  batch (tens of microseconds); with a ``device`` and ``prefetch > 0`` the moves
  of the next ``prefetch`` batches are issued before a batch is handed out, so an
  asynchronous copy (for torch on CUDA on a side stream, from pinned staging
  buffers reused across batches) runs during the loop's step. A move that keeps
  every leaf as it is (host arrays to ``"cpu"``) is skipped.
- Store data, or ``prefetch_mode="thread"``: one background thread reads (or
  gathers), moves and transforms up to ``prefetch`` batches ahead through a
  bounded queue.
- ``resident=True``: the dataset is put on the device once; each batch is a
  gather on the device, queued in the consumer's thread (the device's own queue
  is the overlap).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from looptoolkit._inputs.habits import refuse_dataloader_args
from looptoolkit._inputs.kinds import rows_of
from looptoolkit._pipeline.delivery import Delivery
from looptoolkit._pipeline.iterator import CLOSED as _CLOSED
from looptoolkit._pipeline.iterator import LoaderIterator
from looptoolkit._pipeline.stats import LoaderStats
from looptoolkit._pipeline.stream import Progress
from looptoolkit.adapters import process_group
from looptoolkit.mix import Mix
from looptoolkit.mix import _loader as _mix
from looptoolkit.order import _epochs as _epochs
from looptoolkit.order._checks import check_shards
from looptoolkit.order._epochs import (
    EPOCH_KEY,
    OFFSET_KEY,
    EpochCursor,
    EpochSampler,
    parse_state,
    position,
    state_of,
)
from looptoolkit.order._options import OrderOptions
from looptoolkit.ragged._layout_options import LayoutOptions, refuse_layout_args
from looptoolkit.ragged._options import DEFAULTS as RAGGED_DEFAULTS
from looptoolkit.ragged._options import given as ragged_given
from looptoolkit.ragged._units import UnitOrder

__all__ = ["Loader", "LoaderIterator", "LoaderStats"]


def _restore(cls: type[Loader], data: Any, args: dict[str, Any], state: dict[str, Any]) -> Loader:
    """A Loader rebuilt from its arguments, at the position ``state`` describes (pickling)."""
    loader = cls(data, **args)
    epoch, offset = state[EPOCH_KEY], state[OFFSET_KEY]
    if offset % loader.world_size:  # another world size in this process: resume at the epoch
        offset = 0
    _mix.load(loader._order, state, epoch, offset)
    loader._cursor.load(epoch, offset)
    return loader


def _given(scope: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Loader's arguments from its ``__init__``'s locals, and its ragged options.

    The arguments are every one but the data, the ragged options only where given: a
    Loader's ``repr`` and pickle name what the user said.
    """
    args = {k: v for k, v in scope.items() if k not in ("self", "data")}
    ragged = {k: args.pop(k) for k in RAGGED_DEFAULTS}
    return {**args, **{k: ragged[k] for k in ragged_given(ragged)}}, ragged


# -- the Loader ----------------------------------------------------------------------


class Loader:
    """Batches of in-memory (or memory-mapped) arrays: one gather per leaf per batch.

    Each epoch visits every sample once in an order that is a pure function of
    ``(seed, epoch, N, shuffle, group_size, rank, world_size)``, on every backend.
    Which epoch a pass runs is one rule (``docs/loader.md``): a ``for`` loop that
    runs to the end moves on to the next epoch, a pass that ends early
    (``break``, an error, a framework's probe or look-ahead) is run again by the
    next ``iter()``, and [`set_epoch`][looptoolkit.Loader.set_epoch] always wins.

    Args:
        data: a pytree (dicts, lists, tuples, namedtuples, dataclasses, TensorDict)
            of NumPy (``np.memmap`` too), torch, JAX or tf arrays sharing the
            leading dimension N. Batches have the same structure and leaf
            frameworks (a memmap leaf yields in-memory ndarrays; a pass over a
            memmap whose file was replaced or changed size since the Loader was
            made raises ``RuntimeError`` naming the file). Chunked stores
            may stand for arrays or containers: zarr arrays and groups, HDF5
            datasets and files, Arrow tables and HF ``datasets.Dataset``s (their
            batches are NumPy; a group, file, table or dataset is a dict; see
            ``docs/stores.md``). A ``TensorDataset`` (any object with a ``tensors``
            tuple) is its tensors, batched as a tuple. Under a key, a list of 1-D
            arrays or of token lists (a tokenizer's output) is one ragged column,
            whatever the lengths (``docs/ragged.md``).
        batch_size: samples per batch (per rank).
        shuffle: ``False`` (sequential), ``True`` or ``"full"`` (a permutation per
            epoch), or ``"grouped"`` (groups of ``group_size`` consecutive indices,
            shuffled between and within groups: a cheaper shuffle, and faster
            gathers, since rows of one group lie close together). On store data,
            a group is whole chunks drawn at random (``group_size`` rounded up to
            whole chunks; default 16 chunks), each chunk read once per epoch.
        seed: seed of the epoch orders.
        drop_last: drop this shard's last batch when it is short (and do not pad
            the shards).
        group_size: group size of the grouped shuffle; None for the default
            (``looptoolkit.order._order.DEFAULT_GROUP_SIZE``).
        run_size: rows per run of the grouped shuffle: runs of consecutive rows
            are shuffled as units inside each group, so each batch is gathered as
            runs of neighbouring rows (faster gathers, a weaker shuffle:
            neighbouring rows share a batch far more often). 1 (the default):
            single rows.
        device: where batches go (``"cpu"``, ``"cuda"``, ``"/GPU:0"``, a
            ``torch.device``, a ``jax.Device``...), through
            [`looptoolkit.to_device`][looptoolkit.to_device].
            None: batches stay where the data is. It also decides the framework the
            loop receives: ``"cpu"`` keeps NumPy leaves NumPy, ``torch.device("cpu")``
            or ``"cuda"`` makes them torch tensors, a JAX device JAX arrays, ``"/GPU:0"``
            tf tensors (``docs/loader.md``, "Which arrays the loop receives").
        prefetch: batches prepared ahead of the one the loop is given (0: none,
            every step when the batch is asked for). Where, ``prefetch_mode`` says.
        prefetch_mode: ``"auto"`` (the default): store data is read, moved and
            transformed ahead by one background thread (handed over in blocks of
            up to 32 batches; decoding releases the GIL); in-memory data is
            gathered in the loop's thread, where a gather costs less than a
            hand-off between threads, and with a ``device`` the moves of the next
            ``prefetch`` batches are issued before a batch is handed out, so
            asynchronous copies overlap the step. ``"thread"``: the background
            thread for any data (a heavy transform that releases the GIL, a
            memmap on a slow disk); needs ``prefetch >= 1``. ``"inline"``: the
            loop's thread for any data. [`LoaderStats`][looptoolkit.LoaderStats]
            and the ``prefetch_mode`` attribute say which one runs.
        rank: this process's shard; with ``world_size``, None for the values of
            an initialised ``torch.distributed`` (else 0 of 1).
        world_size: number of shards. Each rank gets the same number of batches;
            the epoch is padded by wrapping around unless ``drop_last``.
        resident: put the whole dataset on ``device`` once, at construction, and
            gather each batch there.
        dtype: cast applied by [`to_device`][looptoolkit.to_device] (one dtype for the
            floating-point leaves, or a mapping); needs a ``device``.
        non_blocking: passed to [`to_device`][looptoolkit.to_device]; needs a ``device``.
        stats: measure time waiting for data against time in the loop's step
            ([`stats`][looptoolkit.Loader.stats]).
        return_mask: yield ``(batch, mask)`` pairs, ``mask`` a 1-D NumPy bool array
            that is False at the padding rows of a sharded epoch (see
            [`looptoolkit.distributed.drop_padding`][looptoolkit.distributed.drop_padding]).
        transform: ``fn(batch)``, applied to every batch once it is where it goes
            (after the move and the ``dtype`` cast); its result, any pytree, is what
            the loop receives. It runs where the transfer runs: in the prefetch
            thread when prefetching (on CUDA on the copy's side stream, ordered
            before the consumer's stream), else in the consumer's thread; with
            ``resident=True`` after the on-device gather. An exception in it
            reaches the loop with a note naming the epoch and batch number.
        jit_transform: compile ``transform`` once with the framework of the batch's
            arrays (``jax.jit`` for JAX, ``tf.function`` for tf; torch and NumPy
            run it eagerly). False for a function that cannot be compiled.
        weights: one non-negative weight per row: each epoch draws ``num_samples``
            rows with probability proportional to the weight (as
            ``WeightedRandomSampler``), without or with ``replacement``.
        replacement: draw rows with replacement (with ``weights``, or uniformly
            without them, as ``RandomSampler(replacement=True)``).
        num_samples: rows drawn per epoch with ``weights`` or ``replacement``
            (default N).
        indices: the rows an epoch visits (a subset of the data, any order, no
            copy): shuffled by ``shuffle`` like the rows of a smaller dataset.
        order_fn: ``order_fn(seed, epoch)`` returns the epoch's rows, a 1-D
            integer array of the same length every epoch, used instead of the
            built-in shuffles; it gets the Loader's sharding, resume and prefetch.
        pad_shards: False: with ``world_size``, each rank gets its own rows of the
            epoch and no padding (ranks' batch counts may differ by one).
        skip_keys: a key name, or a collection of names and key paths (a tuple
            is a collection of names, ``("meta", "ids")``; a key path is a tuple
            inside a list, ``[("meta", "ids")]``; as [`to_device`][looptoolkit.to_device]'s)
            whose leaves are gathered like every leaf but not moved, cast or
            transformed: they are held out of ``transform`` and put back in
            place (the transform must then return the batch's structure).
            Needs a ``device``.
        cache_bytes: the chunk cache of store data read whole chunks at a time
            (``shuffle=False`` or ``"grouped"``): None for two groups of chunks
            of every store leaf; at least one group.
        layout: how ragged leaves ([`Ragged`][looptoolkit.Ragged], lists of token lists or
            of 1-D arrays under a key, object arrays of arrays, Arrow and HF list columns, jagged
            nested tensors, ``tf.RaggedTensor``) are batched, a layout object with its own
            options: [`PadLayout`][looptoolkit.PadLayout] (the default,
            [`Padded`][looptoolkit.Padded] batches; ``pad_value``, ``pad_to_multiple_of``,
            ``buckets``), [`FlatLayout`][looptoolkit.FlatLayout] ([`Flat`][looptoolkit.Flat]),
            [`PackLayout`][looptoolkit.PackLayout] (concatenate-then-split into rows of
            ``seq_len``) or [`FitLayout`][looptoolkit.FitLayout] (whole rows into rows of
            ``seq_len``; ``max_segments``, ``long_rows``), both [`Packed`][looptoolkit.Packed],
            and then ``batch_size`` counts packed rows. ``"pad"`` and ``"flat"`` name the
            default objects. ``docs/ragged.md`` has the guide.
        batch_tokens: ``"pad"``/``"flat"``: a budget of elements per batch instead of
            ``batch_size`` (padding counted for ``"pad"``: ``B * L <= batch_tokens``).
        group_by_length: sort windows of 50 batches of the epoch's order by length, then
            shuffle whole batches (with ``batch_tokens``: the budget's windows).

    Raises:
        ValueError: a wrong value: leaves of different leading dimensions (both
            named, with their sizes), a 0-d leaf, an empty pytree, ``batch_size < 1``,
            an unknown ``shuffle``, ``group_size < 1``, ``rank`` outside
            ``[0, world_size)``, an unknown device string, ``prefetch < 0``, an
            unknown ``prefetch_mode``, ``prefetch_mode="thread"`` with ``prefetch=0``,
            ``resident``, ``dtype`` or ``non_blocking`` without a ``device``;
            ``drop_last=True`` with a shard of fewer rows than ``batch_size``;
            negative, NaN or all-zero ``weights``, ``num_samples`` above the rows
            of non-zero weight without ``replacement``, ``indices`` or an
            ``order_fn`` result outside ``[0, N)``, an ``order_fn`` of another
            length than epoch 0's, an order combination that is not offered,
            ``skip_keys`` without a ``device``; with ``pad_shards=False``, a rank
            that gets no row.
        TypeError: a leaf that is not an array (named by its key path); a list of
            per-sample records (the message says how to stack it, see
            [`looptoolkit.stack_records`][looptoolkit.stack_records]); a list of 1-D arrays
            of one length as ``data`` itself (columns or documents: both fixes named);
            a dataset object other than a ``TensorDataset`` (with the line to write);
            a ``DataLoader``-only argument (``num_workers``, ``pin_memory``,
            ``collate_fn``, ``sampler``...: the Loader's equivalent named); an option of a
            layout passed as a keyword (``seq_len``, ``pad_value``...: the layout object
            named); an argument of a wrong type.
        TransferError: ``device`` is not present, or ``dtype`` cannot be applied
            (checked on one row at construction).

    Examples:
        >>> import numpy as np
        >>> data = {"x": np.arange(10.0).reshape(5, 2), "y": np.arange(5)}
        >>> loader = Loader(data, 2, shuffle=False)
        >>> len(loader)
        3
        >>> [batch["y"].tolist() for batch in loader]
        [[0, 1], [2, 3], [4]]
        >>> shuffled = Loader(data, 2, seed=1)
        >>> sorted(np.concatenate([b["y"] for b in shuffled]).tolist())
        [0, 1, 2, 3, 4]
        >>> state = shuffled.state_dict()  # after an epoch: the start of the next
        >>> state[Loader.EPOCH_KEY], state[Loader.OFFSET_KEY]
        (1, 0)
    """

    VERSION_KEY = _epochs.VERSION_KEY
    EPOCH_KEY = _epochs.EPOCH_KEY
    OFFSET_KEY = _epochs.OFFSET_KEY
    SEED_KEY = _epochs.SEED_KEY
    N_KEY = _epochs.N_KEY
    SHUFFLE_KEY = _epochs.SHUFFLE_KEY
    GROUP_SIZE_KEY = _epochs.GROUP_SIZE_KEY
    RUN_SIZE_KEY = _epochs.RUN_SIZE_KEY
    WORLD_SIZE_KEY = _epochs.WORLD_SIZE_KEY
    BATCH_SIZE_KEY = _epochs.BATCH_SIZE_KEY
    STATE_VERSION = _epochs.STATE_VERSION

    def __new__(cls, *args: Any, **kwargs: Any) -> Loader:
        """A new Loader; a ``DataLoader`` argument or a layout's option is refused here, named.

        ``__init__`` would refuse it bare; the signature stays ``__init__``'s
        (``__signature__``, set below the class). A subclass with its own ``__init__``
        may take such a name for itself: its arguments are left to it.
        """
        if cls.__init__ is Loader.__init__:
            refuse_dataloader_args(kwargs)
            refuse_layout_args(kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        data: Any,
        batch_size: int | None = None,
        *,
        shuffle: bool | str = True,
        seed: int = 0,
        drop_last: bool = False,
        group_size: int | None = None,
        run_size: int = 1,
        device: Any = None,
        prefetch: int = 2,
        prefetch_mode: str = "auto",
        rank: int | None = None,
        world_size: int | None = None,
        resident: bool = False,
        dtype: Any = None,
        non_blocking: bool | None = None,
        stats: bool = False,
        return_mask: bool = False,
        transform: Callable[[Any], Any] | None = None,
        jit_transform: bool = True,
        weights: Any = None,
        replacement: bool = False,
        num_samples: int | None = None,
        indices: Any = None,
        order_fn: Callable[[int, int], Any] | None = None,
        pad_shards: bool = True,
        skip_keys: Any = None,
        cache_bytes: int | None = None,
        layout: str | LayoutOptions | None = None,
        batch_tokens: int | None = None,
        group_by_length: bool = False,
    ) -> None:
        # What `repr`, pickling and a rebuilt Loader use; the ragged options apart.
        self._args, ragged_args = _given(locals())
        orders = OrderOptions.of(self._args, batch_size, rank, world_size, process_group())
        delivery = Delivery.of(self._args)
        # 1. What the rows are: one entry for every kind of data, each kind's checks its own.
        rows = rows_of(data, batch_size, ragged_args, cache_bytes)
        # 2. Which rows when: the order, built by the rows from the order options.
        self._order: Any = rows.order(orders)
        # 3. Where they go: the delivery fitted to the rows (a probe move, or resident rows).
        self._route = delivery.route(rows, self._order)
        self._rows, self._plan = self._route.rows, self._route.plan
        self._mix: Mix | None = getattr(rows, "mix", None)
        self._ragged = bool(rows.ragged_paths)
        # What pickles: store objects as StoreArrays; a mixture as itself.
        self._data, self._expanded = data, rows.data if self._mix is None else self._mix
        # Plain ints, whatever integer type was passed: state_dict() holds them.
        self.batch_size: Any = None if batch_size is None else int(batch_size)
        self.n: int = rows.n
        self.rank, self.world_size = orders.rank, orders.world_size
        self.prefetch: int = delivery.prefetch
        self.resident: bool = delivery.resident
        self.device: Any = device
        self.prefetch_mode: str = self._route.mode  # where batches are made: "thread" or "inline"
        self._stats: LoaderStats | None = self._route.stats
        self.return_mask = delivery.return_mask
        # Which epoch the next pass runs (the one rule of every route: `_epochs`),
        # and the pass bound last, which `state_dict` describes while it runs.
        self._cursor = EpochCursor()
        self._sampler = EpochSampler(self._order, self._cursor)
        if isinstance(self._order, UnitOrder):  # planned batches: their count is the epoch's
            self._order.current_epoch = lambda: self._cursor.epoch
        self._live: weakref.ref[LoaderIterator] | None = None

    # -- public API ----------------------------------------------------------------------

    def __iter__(self) -> LoaderIterator:
        """A new pass: the epoch the cursor points at, bound when its first batch is asked for.

        Iterators are independent, as DataLoader's are: a second ``iter()`` never
        raises, and each pass yields a whole epoch (or the rest of a resumed one).
        """
        return LoaderIterator(self)

    def _bind(self, iterator: LoaderIterator) -> None:
        """Start ``iterator``'s pass at the cursor's epoch and offset."""
        if self._rows.files:
            self._rows.files.check()  # a memmap's file cut shorter would crash the reads
        epoch, offset, token, era = self._cursor.bind_counted()
        schedule = self._order.epoch(epoch, offset)
        first = offset // schedule.global_batch
        progress = Progress(epoch, offset, len(schedule), first)
        # Batches are views of blocks of the order, made as the epoch goes: no
        # N-long index array for a grouped or sequential order.
        batches = _mix.counted(iter(schedule), self._order, self._mix, self._stats)
        source = self._route.stream(batches, schedule, progress, self.batch_size)
        iterator._progress, iterator._token, iterator._era = progress, token, era
        iterator._source = source if progress.total else _CLOSED
        if not progress.total:  # resumed at the very end of its epoch
            self._cursor.complete(token)
        self._live = weakref.ref(iterator)

    def __len__(self) -> int:
        """Batches per epoch for this shard (the last short one counted unless ``drop_last``)."""
        return len(self._order)

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next pass runs (``set_epoch`` always wins).

        Setting the epoch a loaded state points into keeps its position, so
        ``load_state_dict`` followed by ``set_epoch(state["epoch"])`` resumes.
        A pass already running keeps its own epoch.
        """
        self._cursor.set_epoch(epoch)

    # None: the Loader batches by itself (Lightning then reads `sampler`, as for a DataLoader).
    batch_sampler: None = None

    @property
    def sampler(self) -> EpochSampler:
        """Where frameworks look for ``set_epoch`` (Lightning calls ``loader.sampler.set_epoch``).

        Its ``set_epoch`` is [`set_epoch`][looptoolkit.Loader.set_epoch]; iterating it yields this
        shard's indices of the epoch the next pass runs.
        """
        return self._sampler

    def indices(self, epoch: int) -> np.ndarray:
        """The sample order of ``epoch`` for this shard (padding included), as a 1-D array."""
        return np.asarray(self._order.epoch(epoch).indices())

    def padding_mask(self, epoch: int, batch: int) -> np.ndarray | None:
        """Which rows of batch ``batch`` of ``epoch`` (from the epoch's start) are padding.

        True at padding rows; None when the batch has none. ``return_mask=True``
        gives each batch's mask with the batch instead (True at real rows, also
        in a resumed epoch), the form
        [`looptoolkit.distributed.drop_padding`][looptoolkit.distributed.drop_padding] takes.
        """
        mask = self._order.epoch(epoch).padding_mask(batch)
        return None if mask is None else np.asarray(mask)

    @property
    def order(self) -> Any:
        """The [`Order`][looptoolkit.Order] that gives each epoch's indices.

        With planned ragged batches (``batch_tokens``, ``group_by_length``, ``"pack"``,
        ``"fit"``) an order of whole batches with the same methods, whose offsets count batches.
        """
        return self._order

    @property
    def stats(self) -> LoaderStats:
        """Time waiting for data against time in the step (needs ``stats=True``)."""
        if self._stats is None:
            raise ValueError("`stats` is off; create the Loader with `stats=True`.")
        return self._stats

    def state_dict(self) -> dict[str, Any]:
        """Where the iteration stands: the epoch and the samples the user has consumed.

        While a pass runs (bound, not closed, not past its last batch), the
        position in it: batches handed to the user, not those prefetched.
        Otherwise what the next pass does: after a finished epoch, the start of
        the next one; after a pass that ended early (``break``, ``close()``, an
        error, a dropped iterator), the start of the same epoch again. A Loader
        that loads this state yields exactly what this one yields next.

        The offset is global (samples consumed by all ranks together), so a
        loader with another world size can resume it. Every value is a plain
        Python int, str, bool or None, for json, pickle and ``torch.load(weights_only=True)``.
        """
        live = None if self._live is None else self._live()
        running = None
        if live is not None and live._progress is not None and live._source is not _CLOSED:
            p = live._progress
            offset = p.start + p.consumed * self._order.batch_size * self.world_size
            running = (p.epoch, offset, live._token, p.consumed >= p.total)
        return state_of(self._order, *position(self._cursor, running))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict``: the next pass yields exactly the batches left.

        The saved state must describe the same epoch orders (``n``, ``shuffle``,
        ``seed``, ``group_size``, ``run_size``); batch size and world size may differ, as long
        as the saved offset is a multiple of this loader's world size. A pass
        already running keeps its own epoch.

        Raises:
            ValueError: a key is missing, the state describes other orders, or its
                offset does not fit this loader.
        """
        epoch, offset = parse_state(self._order, state)
        if self._route.shards > 1:
            check_shards(self._order, self._route.shards, offset)
        _mix.load(self._order, state, epoch, offset)
        self._cursor.load(epoch, offset)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (spawn, ddp_spawn) and deep-copied as its arguments and its
        # position: the copy has no thread or lock and yields the same batches.
        return (_restore, (type(self), self._expanded, self._args, self.state_dict()))

    @property
    def transform(self) -> Callable[[Any], Any] | None:
        """The ``transform`` applied to every batch (None: none)."""
        transform: Callable[[Any], Any] | None = self._args["transform"]
        return transform

    @property
    def data(self) -> Any:
        """The data this loader batches, as it was passed (not a copy)."""
        return self._data

    def __repr__(self) -> str:
        rows = self._rows
        data = f"<{len(rows.leaves)} {'/'.join(rows.backends)} leaves of {self.n} rows>"
        if self._ragged:  # which leaves were read as ragged columns
            data = data[:-1] + f", ragged: {', '.join(rows.ragged_paths)}>"
        args = ", ".join(f"{k}={v!r}" for k, v in self._args.items())
        return f"Loader({data}, {args})"


# `__new__` takes anything (to refuse DataLoader arguments with a hint): the signature a user,
# an IDE or `inspect` sees is `__init__`'s.
_init = inspect.signature(Loader.__init__)
_params = list(_init.parameters.values())[1:]  # without `self`
Loader.__signature__ = _init.replace(parameters=_params)  # type: ignore[attr-defined]
