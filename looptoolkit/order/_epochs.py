"""The epoch cursor: which epoch, from which sample, the next pass over the data runs.

Between the orders ([`looptoolkit.order`][looptoolkit.order], a pure function of the
epoch) and every route that iterates them: the [`Loader`][looptoolkit.Loader], the
DataLoader integration ([`looptoolkit.torch_data`][looptoolkit.torch_data]), the tf.data
integration ([`looptoolkit.tf_data`][looptoolkit.tf_data]) and the comparison pipelines. Each of
them asks one [`EpochCursor`][looptoolkit.order._epochs.EpochCursor] which epoch a pass runs and
tells it when a pass is done, so they all follow one rule (``docs/loader.md``, "Which epoch
a loop runs"):

1. A pass *binds* the cursor's ``(epoch, offset)`` when its first batch is
   asked for. An ``iter()`` that is never advanced (a framework's probe, the
   first of the two ``iter(batch_sampler)`` calls of torch's multi-process
   iterator) binds nothing.
2. A pass that hands out its last batch *completes* its epoch: the cursor moves
   to ``(epoch + 1, 0)``, unless it was moved since the pass bound it.
3. A pass that ends early (``break``, ``close()``, dropped, an error while
   producing a batch) leaves the cursor where it was: the next pass runs the
   same epoch again, from the same offset. A framework's one-batch look-ahead,
   sanity-check pass or ``limit_train_batches`` therefore shifts nothing.
4. ``set_epoch(e)`` always wins: the next pass runs epoch ``e`` from its start
   (from the loaded offset if ``e`` is the epoch a loaded state points into).

Rule 3 has a trap: a loop that caps every epoch with ``break`` runs the same
batches each time. The routes that count the batches their passes hand out (the
Loader, the DataLoader integration) tell the cursor how far a pass that ended early
got ([`EpochCursor.ended_early`][looptoolkit.order._epochs.EpochCursor.ended_early]); when two
passes in a row, with no ``set_epoch``, ``load`` or finished epoch between their
starts, both end after the same number of batches, it warns once
([`RepeatedEpochWarning`][looptoolkit.RepeatedEpochWarning]).

The state helpers ([`state_of`][looptoolkit.order._epochs.state_of],
[`parse_state`][looptoolkit.order._epochs.parse_state]) give the Loader and the DataLoader
integration one resumable state format.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from looptoolkit._common.errors import RepeatedEpochWarning, caller_stacklevel, check_int
from looptoolkit.order._order import Order

__all__ = [
    "EPOCH_KEY",
    "OFFSET_KEY",
    "STATE_VERSION",
    "EpochCursor",
    "EpochSampler",
    "parse_state",
    "pass_over",
    "position",
    "state_of",
]


class EpochCursor:
    """The ``(epoch, offset)`` the next pass runs, and a count of its moves.

    Thread-safe: a prefetch thread or a tf.data callback may complete a pass
    while the user's thread sets the epoch. Pickles without its lock.

    Args:
        epoch: the epoch of the first pass.

    Examples:
        >>> cursor = EpochCursor()
        >>> epoch, offset, token = cursor.bind()   # a pass starts epoch 0
        >>> cursor.bind()[:2]                      # a second pass, before the first is done
        (0, 0)
        >>> cursor.complete(token), cursor.position
        (True, (1, 0))
        >>> cursor.complete(token)                 # the other pass of epoch 0 moves nothing
        False
        >>> cursor.set_epoch(5); cursor.position
        (5, 0)
    """

    __slots__ = ("_early", "_lock", "_warned", "epoch", "era", "moves", "offset")

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = check_int("epoch", epoch, minimum=0)
        self.offset = 0
        self.moves = 0  # bumped on every move: a pass holds the value it bound
        # Bumped on every move, every `set_epoch` (one that moves nothing too) and every
        # early end: a pass bound in the era an early end opened started after that end,
        # with nothing between them.
        self.era = 0
        self._lock = threading.Lock()
        # (era the pass was bound in, era its end opened, epoch, batches) of the last early end
        self._early: tuple[int, int, int, int] | None = None
        self._warned = False

    @property
    def position(self) -> tuple[int, int]:
        """``(epoch, offset)`` of the next pass."""
        return self.epoch, self.offset

    def bind(self) -> tuple[int, int, int]:
        """``(epoch, offset, token)`` for a pass that starts now; ``token`` for ``complete``."""
        with self._lock:
            return self.epoch, self.offset, self.moves

    def bind_counted(self) -> tuple[int, int, int, int]:
        """``bind()`` and the cursor's ``era``, for a pass that will tell ``ended_early``."""
        with self._lock:
            return self.epoch, self.offset, self.moves, self.era

    def ended_early(self, epoch: int, era: int, batches: int) -> None:
        """A pass of ``epoch`` bound in ``era`` ended before its last batch, after ``batches``.

        Warns ([`RepeatedEpochWarning`][looptoolkit.RepeatedEpochWarning], once per cursor) when
        this pass started right after the last early end, with nothing else between the two
        passes' starts (no ``set_epoch``, ``load``, finished epoch or other early end), over the
        same epoch, and handed out as many batches: two passes in a row ran the same batches.
        Passes that run side by side (two iterators, ``zip``) are not in a row. A pass of fewer
        than two batches (a probe, a peek with ``next(iter(loader))``, a one-batch look-ahead)
        tells nothing.
        """
        if batches < 2:
            return
        with self._lock:
            # In a row: this pass was bound in the era the last early end opened, and that
            # end was all that came between the two starts.
            repeated = self._early == (era - 1, era, epoch, batches) and not self._warned
            self.era += 1  # a pass bound from now on starts after this end
            self._early = (era, self.era, epoch, batches)
            self._warned = self._warned or repeated
        if repeated:
            warnings.warn(
                f"Two passes in a row over epoch {epoch} ended early after {batches} batches, "
                "so both ran the same batches: a pass that ends early (a `break`, an error) "
                "leaves the loader at that epoch, and the next pass repeats it. To run a new "
                "epoch each time, call `loader.set_epoch(epoch)` at the start of each epoch; "
                "to stop in the middle of an epoch and resume there later, save "
                "`loader.state_dict()` inside the loop. (Shown once per loader.)",
                RepeatedEpochWarning,
                stacklevel=caller_stacklevel(),
            )

    def complete(self, token: int) -> bool:
        """A pass bound with ``token`` handed out its last batch: move to the next epoch.

        Returns:
            Whether the cursor moved (False when it was moved since that pass bound it).
        """
        with self._lock:
            if token != self.moves:
                return False
            self.epoch, self.offset, self.moves = self.epoch + 1, 0, self.moves + 1
            self.era += 1
            return True

    def set_epoch(self, epoch: int) -> None:
        """The next pass runs ``epoch`` (from the loaded offset when it is the cursor's epoch)."""
        epoch = check_int("epoch", epoch, minimum=0)
        with self._lock:
            if epoch != self.epoch:
                self.epoch, self.offset, self.moves = epoch, 0, self.moves + 1
            self.era += 1  # passes before and after it are not in a row, moved or not

    def load(self, epoch: int, offset: int) -> None:
        """The next pass runs ``epoch`` from global position ``offset`` (a loaded state)."""
        with self._lock:
            self.epoch, self.offset, self.moves = epoch, offset, self.moves + 1
            self.era += 1

    def __getstate__(self) -> tuple[int, int, int]:
        return self.epoch, self.offset, self.moves

    def __setstate__(self, state: tuple[int, int, int]) -> None:
        self.epoch, self.offset, self.moves = state
        self.era = 0
        self._lock = threading.Lock()
        self._early = None
        self._warned = False

    def __repr__(self) -> str:
        return f"EpochCursor(epoch={self.epoch}, offset={self.offset})"


class EpochSampler:
    """The sample indices of the epoch a cursor points at; ``set_epoch`` moves the cursor.

    What the frameworks find where ``DistributedSampler`` sits (``loader.sampler``,
    ``dataloader.batch_sampler.sampler``): Lightning, accelerate and the HF
    Trainer call its ``set_epoch`` at the start of every epoch. Iterating it
    yields this shard's indices of the cursor's epoch (from its offset) and
    moves nothing.

    Args:
        order: the epoch orders.
        cursor: the cursor it reads and moves.

    Examples:
        >>> sampler = EpochSampler(Order(4, 2, shuffle=False), EpochCursor())
        >>> sampler.set_epoch(3); sampler.epoch, list(sampler), len(sampler)
        (3, [0, 1, 2, 3], 4)
    """

    def __init__(self, order: Order, cursor: EpochCursor) -> None:
        self.order = order
        self.cursor = cursor

    @property
    def epoch(self) -> int:
        """The epoch the next pass runs."""
        return self.cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next pass runs, as ``DistributedSampler.set_epoch``."""
        self.cursor.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        epoch, offset, _ = self.cursor.bind()
        schedule = self.order.epoch(epoch, offset)
        if isinstance(self.order, Order):  # batch by batch: no array of the rank's whole share
            return itertools.chain.from_iterable(batch.tolist() for batch in schedule)
        return iter(schedule.indices().tolist())

    def __len__(self) -> int:
        order = self.order
        per_rank = order.per_rank(self.cursor.offset)
        return per_rank - per_rank % order.batch_size if order.drop_last else per_rank


def pass_over(cursor: EpochCursor, epoch_fn: Callable[[int], Iterable[Any]]) -> Iterator[Any]:
    """A pass by the rule: ``epoch_fn(epoch)`` of the epoch bound at the first item asked for.

    The epoch is done when the pass runs out. The items are chained at C level:
    the pass adds no Python frame per item (the comparison pipelines use it).

    Examples:
        >>> cursor = EpochCursor()
        >>> first = pass_over(cursor, lambda e: [e, e])   # nothing bound yet
        >>> list(pass_over(cursor, lambda e: [e, e])), list(first), cursor.epoch
        ([0, 0], [1, 1], 2)
    """
    return itertools.chain.from_iterable(_one_pass(cursor, epoch_fn))


def _one_pass(cursor: EpochCursor, epoch_fn: Callable[[int], Iterable[Any]]) -> Iterator[Any]:
    epoch, _, token = cursor.bind()
    yield epoch_fn(epoch)
    cursor.complete(token)


def position(cursor: EpochCursor, running: tuple[int, int, int, bool] | None) -> tuple[int, int]:
    """``(epoch, offset)`` a state describes: the running pass's, or the cursor's.

    Args:
        cursor: the epoch cursor.
        running: ``(epoch, offset reached, token, finished)`` of the pass bound
            last, unless it was closed; None otherwise. A pass bound before the
            cursor last moved no longer counts; a finished one whose end has not
            reached the cursor yet (in another thread) describes the next epoch.
    """
    epoch, offset, moves = cursor.bind()
    if running is not None and running[2] == moves:
        return (running[0] + 1, 0) if running[3] else (running[0], running[1])
    return epoch, offset


# -- the resumable state ---------------------------------------------------------------

STATE_VERSION = 1
VERSION_KEY = "version"
EPOCH_KEY = "epoch"
OFFSET_KEY = "offset"
SEED_KEY = "seed"
N_KEY = "n"
SHUFFLE_KEY = "shuffle"
GROUP_SIZE_KEY = "group_size"
RUN_SIZE_KEY = "run_size"
WORLD_SIZE_KEY = "world_size"
BATCH_SIZE_KEY = "batch_size"
SAMPLING_KEY = "sampling"
LENGTH_KEY = "length"
FINGERPRINT_KEY = "fingerprint"
PAD_SHARDS_KEY = "pad_shards"
CHUNK_ROWS_KEY = "chunk_rows"  # rows per chunk of a store's grouped order; None otherwise
FULL_ORDER_KEY = "full_order"  # a full shuffle's permutation: "keyed" or "permutation"
PLAN_KEY = "plan"  # the options of planned ragged batches (layout, budget, ...); absent otherwise
MIX_KEY = "mixture"  # a mixture's position, counts and stage (looptoolkit.mix); absent otherwise


def state_of(order: Order, epoch: int, offset: int) -> dict[str, Any]:
    """The resumable state of a pass at ``(epoch, offset)`` of ``order``: plain ints and strs."""
    state = {
        VERSION_KEY: STATE_VERSION,
        EPOCH_KEY: int(epoch),
        OFFSET_KEY: int(offset),
        SEED_KEY: order.seed,
        N_KEY: order.n,
        SHUFFLE_KEY: order.shuffle,
        GROUP_SIZE_KEY: order.group_size,
        RUN_SIZE_KEY: order.run_size,
        WORLD_SIZE_KEY: order.world_size,
        BATCH_SIZE_KEY: order.batch_size,
        SAMPLING_KEY: order.sampling.kind,
        LENGTH_KEY: order.length,
        FINGERPRINT_KEY: order.sampling.fingerprint,
        PAD_SHARDS_KEY: order.pad_shards,
        CHUNK_ROWS_KEY: order.chunk_rows,
    }
    full = getattr(order, "full_order", None)
    if full is not None:
        state[FULL_ORDER_KEY] = full
    plan = getattr(order, "plan_params", None)
    if plan is not None:  # planned ragged batches: offsets count batches of this plan
        state[PLAN_KEY] = dict(plan)
    sampling: Any = getattr(order, "sampling", None)
    if getattr(sampling, "positional", False):  # a mixture
        mixed = sampling.order_fn
        # Its counts and stage at the position; planned batches (offsets count batches):
        # the weights they were planned with.
        planned = plan is not None
        state[MIX_KEY] = {"stages": mixed.key()} if planned else mixed.state(epoch, offset)
    return state


def parse_state(order: Order, state: dict[str, Any]) -> tuple[int, int]:
    """``(epoch, offset)`` of a saved state, checked against ``order``.

    The state must describe the same epoch orders (``n``, ``shuffle``, ``seed``,
    the sampling (its kind, epoch length and a checksum of its weights or
    subset), ``pad_shards``, and for a grouped order ``group_size`` and
    ``run_size``, for a store's grouped order ``chunk_rows`` and the world
    size too); batch size and world size may differ, as long as the offset is a
    multiple of this world size.

    Raises:
        ValueError: a key is missing, the state describes other orders, or its
            offset does not fit ``order``.
    """
    if not isinstance(state, dict):
        raise TypeError(f"`state` must be a dict, got {type(state).__name__}.")
    keys = (EPOCH_KEY, OFFSET_KEY, SEED_KEY, N_KEY, SHUFFLE_KEY)
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"`state` is missing {', '.join(map(repr, missing))}.")
    mine: dict[str, Any] = {
        N_KEY: order.n,
        SHUFFLE_KEY: order.shuffle,
        SEED_KEY: order.seed,
        SAMPLING_KEY: order.sampling.kind,
        LENGTH_KEY: order.length,
        FINGERPRINT_KEY: order.sampling.fingerprint,
        PAD_SHARDS_KEY: order.pad_shards,
        CHUNK_ROWS_KEY: order.chunk_rows,
    }
    saved = dict(state)
    saved.setdefault(CHUNK_ROWS_KEY, None)  # states from before store orders existed
    # States from before these orders existed describe a padded permutation of n.
    saved.setdefault(SAMPLING_KEY, "permutation")
    saved.setdefault(LENGTH_KEY, order.n)
    saved.setdefault(FINGERPRINT_KEY, None)
    saved.setdefault(PAD_SHARDS_KEY, True)
    plan = getattr(order, "plan_params", None)
    if plan is not None or state.get(PLAN_KEY) is not None:
        mine[PLAN_KEY] = plan
    if getattr(order.sampling, "positional", False):
        # A mixture's epoch length follows its weights, which may change at resume.
        del mine[N_KEY], mine[LENGTH_KEY]
    if order.chunk_rows is not None:  # ranks own whole chunks: the order depends on them
        mine[WORLD_SIZE_KEY] = order.world_size
    full = getattr(order, "full_order", None)
    if full is not None:  # a full shuffle of 2**20 rows or more was a permutation before
        mine[FULL_ORDER_KEY] = full
        saved.setdefault(FULL_ORDER_KEY, "permutation")
    if order.shuffle == "grouped":
        mine[GROUP_SIZE_KEY] = order.group_size
        mine[RUN_SIZE_KEY] = order.run_size
        saved.setdefault(RUN_SIZE_KEY, 1)  # states from before runs existed
    different = [
        f"`{k}` {saved.get(k)!r} (this loader: {v!r})" for k, v in mine.items() if saved.get(k) != v
    ]
    if different:
        raise ValueError("`state` was saved for other epoch orders: " + ", ".join(different) + ".")
    epoch, offset = int(state[EPOCH_KEY]), int(state[OFFSET_KEY])
    if epoch < 0 or offset < 0:
        raise ValueError(f"`state` has a negative epoch or offset: {epoch}, {offset}.")
    if offset % order.world_size:
        raise ValueError(
            f"`state` offset {offset} is not a multiple of `world_size` {order.world_size}."
        )
    # Raises for an offset past the end of the state's epoch (planned batches: that epoch's plan).
    in_epoch = getattr(order, "num_batches_in", None)
    if in_epoch is not None:
        in_epoch(epoch, offset)
    else:
        order.num_batches(offset)
    return epoch, offset
