"""GetItemsDataset: the Loader's batched gather behind ``torch.utils.data.DataLoader``.

For users who keep PyTorch's ``DataLoader`` (its samplers, workers, pinning):
[`GetItemsDataset`][looptoolkit.GetItemsDataset] answers ``__getitems__`` with one gather per leaf
per batch instead of one ``__getitem__`` per sample plus a collate, and
[`make_dataloader`][looptoolkit.make_dataloader] wires it to a batch sampler that yields the same
epoch orders as [`Loader`][looptoolkit.Loader] and an identity ``collate_fn``, so each
batch is fetched in one call and reaches the loop as the dataset built it.

This module imports torch; ``looptoolkit`` loads it on first use of
``GetItemsDataset``.
"""

from __future__ import annotations

import multiprocessing
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from looptoolkit._common.keys import BatchKeys, KeyedBatch, KeyedCollate, KeyedIndices
from looptoolkit._inputs.kinds import rows_of
from looptoolkit._rows.rows import Rows
from looptoolkit._torch_ragged import as_tensor, hf_inputs, ragged_parts
from looptoolkit.adapters import process_group
from looptoolkit.mix._loader import MixedRows
from looptoolkit.mix._loader import load as mix_load
from looptoolkit.order._epochs import EpochCursor, EpochSampler, parse_state, position, state_of
from looptoolkit.order._options import ORDER_ARGS, OrderOptions
from looptoolkit.order._order import Order
from looptoolkit.ragged._layout_options import LayoutOptions, refuse_layout_args
from looptoolkit.ragged._options import DEFAULTS as RAGGED_DEFAULTS

__all__ = [
    "EpochDataLoader",
    "GetItemsDataset",
    "OrderBatchSampler",
    "hf_inputs",
    "keep_batch",
    "make_dataloader",
]


class GetItemsDataset(torch.utils.data.Dataset[Any]):
    """A map-style dataset over a pytree of arrays, fetched a whole batch at a time.

    Args:
        data: a pytree of NumPy (``np.memmap`` too), torch, JAX or tf arrays
            sharing the leading dimension, as for [`Loader`][looptoolkit.Loader];
            chunked stores too (zarr, HDF5, Arrow / HF datasets), which pickle
            as what reopens them, so each worker reads through its own handle.
        tensors: NumPy leaves of a batch come out as torch tensors (sharing the
            gathered batch's memory, as ``default_collate`` gives tensors);
            other leaves are kept.

    Raises:
        ValueError: an empty pytree, a 0-d leaf, or leaves of different lengths.
        TypeError: a leaf that is not an array; a list of per-sample records (see
            [`looptoolkit.stack_records`][looptoolkit.stack_records]).

    Examples:
        >>> import numpy as np
        >>> ds = GetItemsDataset({"x": np.arange(6).reshape(3, 2), "y": np.arange(3)})
        >>> len(ds), ds[1]["x"].tolist()
        (3, [2, 3])
        >>> ds.__getitems__([2, 0])["y"].tolist()
        [2, 0]

        With ``torch.utils.data.DataLoader``, pass ``collate_fn=keep_batch``: the
        DataLoader's samplers and workers are kept, each batch is one gather.

        >>> from torch.utils.data import DataLoader
        >>> dl = DataLoader(ds, batch_size=2, collate_fn=keep_batch)
        >>> [b["y"].tolist() for b in dl]
        [[0, 1], [2]]
    """

    def __init__(self, data: Any, *, tensors: bool = False) -> None:
        self._rows = Rows(data)
        self.tensors = bool(tensors)
        self._leaf_fn = as_tensor if self.tensors else None

    @classmethod
    def _of(cls, rows: Rows, *, tensors: bool) -> GetItemsDataset:
        """A dataset over rows already made (``make_dataloader``'s, a mixture's columns')."""
        dataset = cls.__new__(cls)
        dataset._rows = rows
        dataset.tensors = bool(tensors)
        dataset._leaf_fn = as_tensor if dataset.tensors else None
        return dataset

    def __len__(self) -> int:
        return self._rows.n

    def __getitem__(self, index: int) -> Any:
        """One row: the data's structure, each leaf without its leading dimension."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"`index` must be an int, got {type(index).__name__}.")
        return self._rows.row(int(index))

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> Any:
        """The rows ``indices`` as one batch (one gather per leaf).

        ``DataLoader`` passes a list of ints; NumPy converts it several times
        faster than ``torch.as_tensor`` does.
        """
        if isinstance(indices, KeyedIndices):  # a keyed collate_fn's batch: keys go along
            return KeyedBatch(self.__getitems__(indices.indices), indices.keys)
        idx = np.asarray(indices, dtype=np.intp)
        if idx.ndim != 1:
            raise ValueError(f"`indices` must be 1-D, got shape {list(idx.shape)}.")
        if len(idx) and (idx.min() < -self._rows.n or idx.max() >= self._rows.n):
            raise IndexError(f"`indices` out of range for {self._rows.n} rows.")
        return self._rows.take(idx, self._leaf_fn)

    def __reduce__(self) -> tuple[Any, ...]:
        # Workers started by spawn or forkserver get the data (store objects as what
        # reopens them) and the chunk cache's size, and rebuild the rest.
        store = self._rows.store
        cache = None if store is None else store.cache_bytes
        return (_rebuilt, (type(self), self._rows.data, self.tensors, cache))

    def __repr__(self) -> str:
        rows = self._rows
        kinds = "/".join(rows.backends)
        return f"GetItemsDataset(<{len(rows.leaves)} {kinds} leaves of {rows.n} rows>)"


def _rebuilt(
    cls: type[GetItemsDataset], data: Any, tensors: bool, cache_bytes: int | None
) -> GetItemsDataset:
    """A GetItemsDataset unpickled: ``data`` and its store's chunk cache size."""
    dataset = cls(data, tensors=tensors)
    if dataset._rows.store is not None:
        dataset._rows.store.cache_bytes = cache_bytes
    return dataset


class OrderBatchSampler(torch.utils.data.Sampler[np.ndarray]):
    """A batch sampler yielding the batches of an [`Order`][looptoolkit.Order].

    Batches are 1-D NumPy index arrays, the ones the Loader gathers. Which epoch
    a pass runs is the Loader's rule, kept by one epoch cursor: a pass binds the
    cursor's epoch at its first batch and moves it on when the epoch is done;
    ``set_epoch(e)`` always wins. ``set_epoch`` is here and on
    ``sampler``, where Lightning, accelerate and
    the HF Trainer call it (``dl.batch_sampler.sampler``, ``dl.batch_sampler``, and through
    accelerate's wrappers ``dl.batch_sampler.batch_sampler``).

    Iterated through [`EpochDataLoader`][looptoolkit.torch_data.EpochDataLoader], a pass is done
    when the loop has received its last batch. Iterated by a plain DataLoader (the one
    accelerate's ``prepare`` or ``skip_first_batches`` builds around it), it is
    done when its last batch has been sent to the workers; those wrappers call
    ``set_epoch`` every epoch.

    Args:
        order: the epoch orders.
        cursor: the epoch cursor to share (a new one starting at epoch 0 by default).

    Examples:
        >>> sampler = OrderBatchSampler(Order(5, 2, shuffle=False))
        >>> [b.tolist() for b in sampler], sampler.epoch
        ([[0, 1], [2, 3], [4]], 1)
        >>> sampler.sampler.set_epoch(4); sampler.epoch
        4
    """

    def __init__(
        self, order: Order, cursor: EpochCursor | None = None, *, keyed: bool = False
    ) -> None:
        self.order = order
        # Yield each batch with its keys (a keyed collate_fn: an augmentation).
        self.keyed = keyed
        self.cursor = EpochCursor() if cursor is None else cursor
        self.sampler = EpochSampler(order, self.cursor)
        # The pass an EpochDataLoader iterator bound, while it builds its DataLoader iterator.
        self._tracked: tuple[int, int] | None = None

    @property
    def epoch(self) -> int:
        """The epoch the next pass runs."""
        return self.cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next pass runs."""
        self.cursor.set_epoch(epoch)

    def __iter__(self) -> Iterator[np.ndarray]:
        tracked = self._tracked  # read now: torch calls iter() before it asks for a batch
        if tracked is not None:
            return self._batches(self.order.epoch(*tracked))
        return self._untracked()

    def _batches(self, schedule: Any) -> Iterator[Any]:
        """The epoch's index batches, each with its keys when the collate is keyed."""
        if not self.keyed:
            return iter(schedule)
        seed, epoch = self.order.seed, schedule.epoch
        return (
            KeyedIndices(idx, BatchKeys(seed, epoch, schedule.positions(k)))
            for k, idx in enumerate(schedule)
        )

    def _untracked(self) -> Iterator[np.ndarray]:
        # A generator: the epoch is bound at the first batch asked for, so the first
        # of the two iter() calls of torch's multi-process iterator binds nothing.
        epoch, offset, token, era = self.cursor.bind_counted()
        sent = 0
        try:
            for batch in self._batches(self.order.epoch(epoch, offset)):
                sent += 1
                yield batch
        except GeneratorExit:  # the DataLoader's iterator was dropped before the last batch
            self.cursor.ended_early(epoch, era, sent)
            raise
        self.cursor.complete(token)

    def __len__(self) -> int:
        return len(self.order)


class _Pass:
    """One pass of an ``EpochDataLoader``: binds its epoch at the first batch asked for."""

    __slots__ = (
        "__weakref__",
        "_delivered",
        "_epoch",
        "_era",
        "_it",
        "_loader",
        "_offset",
        "_token",
        "_total",
    )

    def __init__(self, loader: EpochDataLoader) -> None:
        self._loader = loader
        self._it: Iterator[Any] | None = None
        self._total = -1  # -1: not bound yet
        self._delivered = 0
        self._epoch = self._offset = self._token = self._era = 0

    def __iter__(self) -> _Pass:
        return self

    def __len__(self) -> int:
        sampler = self._loader._sampler
        if self._total < 0:
            return sampler.order.num_batches(sampler.cursor.offset)
        return self._total - self._delivered if self._it is not None else 0

    def _bind(self) -> Iterator[Any]:
        loader = self._loader
        sampler = loader._sampler
        self._epoch, self._offset, self._token, self._era = sampler.cursor.bind_counted()
        self._total = sampler.order.num_batches(self._offset)
        sampler._tracked = (self._epoch, self._offset)
        try:
            it = torch.utils.data.DataLoader.__iter__(loader)
        finally:
            sampler._tracked = None
        loader._live = weakref.ref(self)
        if not self._total:  # resumed at the very end of its epoch
            sampler.cursor.complete(self._token)
        return it

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            if self._total >= 0:  # finished or closed
                raise StopIteration
            it = self._it = self._bind()
        try:
            batch = next(it)
        except BaseException:
            self.close()  # the end, or an error: an early end leaves the cursor where it was
            raise
        self._delivered += 1
        if self._delivered == self._total:
            self._loader._sampler.cursor.complete(self._token)
        return batch

    def close(self) -> None:
        """End the pass (workers of a non-persistent DataLoader shut down with their iterator)."""
        it, self._it = self._it, None
        if self._total < 0:
            self._total = 0
        if it is not None and _exit_through_interpreter(self._loader):
            _drain(it)
        if it is not None and self._delivered < self._total:  # before its last batch
            self._loader._sampler.cursor.ended_early(self._epoch, self._era, self._delivered)

    def __del__(self) -> None:
        # A pass dropped before its end (a look-ahead, a `break`) ends as `close()` does.
        if self._it is not None:
            self.close()

    def running(self) -> tuple[int, int, int, bool] | None:
        """``(epoch, offset reached, token, finished)`` while bound and not closed."""
        if self._it is None:
            return None
        order = self._loader._sampler.order
        offset = self._offset + self._delivered * order.batch_size * order.world_size
        return self._epoch, offset, self._token, self._delivered >= self._total


def _exit_through_interpreter(loader: torch.utils.data.DataLoader[Any]) -> bool:
    """Whether ``loader``'s worker processes are spawned (they end as an interpreter exits)."""
    if loader.num_workers == 0 or loader.persistent_workers:
        return False
    context = loader.multiprocessing_context
    if context is not None:
        return context.get_start_method() == "spawn"
    # The default start method, the first listed, unless one was set.
    method = multiprocessing.get_start_method(allow_none=True)
    return (method or multiprocessing.get_all_start_methods()[0]) == "spawn"


def _drain(it: Any) -> None:
    """Receive the batches a multi-process iterator's workers were asked for, then stop them.

    torch stops the workers of an iterator dropped before its end at once: each skips
    the batches still queued for it, but one it has put on its result queue may still
    be pickled there by the queue's feeder thread (a batch's tensors moved to shared
    memory, in C++) as the worker exits. A spawned worker exits through the
    interpreter's finalisation (fork and forkserver ones through ``os._exit``), which
    ends that daemon thread where it next takes the GIL, inside C++ code: the worker
    aborts ("terminate called without an active exception") and torch raises
    "DataLoader worker ... is killed by signal: Aborted" in the iterator's ``__del__``.
    Received here first, no batch is in flight when the workers are told to stop: a
    stop waits for the batches already asked for (``prefetch_factor`` per worker), not
    only the one being read.
    """
    iterator = torch.utils.data.dataloader._MultiProcessingDataLoaderIter
    if (
        not isinstance(it, iterator)
        or it._shutdown
        or torch.utils.data._utils.python_exit_status is not False  # torch's own exit path
    ):
        return
    it._sampler_iter = iter(())  # no more batches asked for
    try:
        while True:
            received = it._rcvd_idx
            try:
                it._next_data()  # the last one shuts the workers down
            except StopIteration:
                return
            except Exception:
                # A batch that failed in its worker is received too; any other
                # failure (a worker gone, a timeout) is left to torch's shutdown.
                if it._rcvd_idx == received:
                    return
    finally:
        it._shutdown_workers()  # done already, unless a failure ended the receiving


class EpochDataLoader(torch.utils.data.DataLoader[Any]):
    """The ``DataLoader`` ``make_dataloader`` returns: epochs by the Loader's rule, resumable.

    A ``torch.utils.data.DataLoader`` in every respect (Lightning and Keras
    take it as one), with an [`OrderBatchSampler`][looptoolkit.torch_data.OrderBatchSampler] as its
    batch sampler. Each ``iter()`` is a pass that binds its epoch when its first batch is asked
    for (so a framework's probe or one-batch look-ahead moves nothing, and
    ``set_epoch`` called after ``iter()`` still counts), and finishes the epoch
    when the loop has received its last batch, whatever the workers prefetched.
    ``state_dict`` / ``load_state_dict`` resume in the middle of an epoch, as
    torchdata's ``StatefulDataLoader`` does; the state is the Loader's format.

    Examples:
        >>> dl = make_dataloader({"y": np.arange(6)}, 2, shuffle=False)
        >>> it = iter(dl)
        >>> next(it)["y"].tolist()
        [0, 1]
        >>> state = dl.state_dict()
        >>> again = make_dataloader({"y": np.arange(6)}, 2, shuffle=False)
        >>> again.load_state_dict(state)
        >>> [b["y"].tolist() for b in again]
        [[2, 3], [4, 5]]
    """

    _live: weakref.ref[_Pass] | None = None

    @property
    def _sampler(self) -> OrderBatchSampler:
        # Lightning and accelerate re-create the DataLoader around a wrapper of the
        # batch sampler (Lightning's for prediction keeps it as `_batch_sampler`,
        # accelerate's as `batch_sampler`): the pass binds the sampler inside.
        sampler: Any = self.batch_sampler
        for _ in range(8):
            if isinstance(sampler, OrderBatchSampler):
                return sampler
            inner = getattr(sampler, "_batch_sampler", None) or getattr(
                sampler, "batch_sampler", None
            )
            if inner is None:
                break
            sampler = inner
        raise TypeError(
            f"EpochDataLoader needs an OrderBatchSampler as its batch sampler, "
            f"got {type(self.batch_sampler).__name__}."
        )

    def __iter__(self) -> _Pass:  # type: ignore[override]
        return _Pass(self)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled and deep-copied without the reference to the pass running here.
        state = self.__dict__.copy()
        state.pop("_live", None)
        return state

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next pass runs (the HF Trainer calls ``dl.set_epoch``)."""
        self._sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the iteration stands: the running pass (batches the loop got), or the next pass."""
        live = None if self._live is None else self._live()
        running = None if live is None else live.running()
        sampler = self._sampler
        return state_of(sampler.order, *position(sampler.cursor, running))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict``: the next pass yields exactly the batches left."""
        sampler = self._sampler
        epoch, offset = parse_state(sampler.order, state)
        mix_load(sampler.order, state, epoch, offset)
        sampler.cursor.load(epoch, offset)


def keep_batch(batch: Any) -> Any:
    """``collate_fn`` for a DataLoader over ``GetItemsDataset``: the batch as it is.

    ``__getitems__`` already returns the whole batch; DataLoader's default
    collate would try to take it apart as a list of samples. A module-level
    function, so that worker processes can pickle it.

    Examples:
        >>> batch = {"y": np.arange(3)}
        >>> keep_batch(batch) is batch
        True
    """
    return batch


_OWN_ARGUMENTS = ("sampler", "batch_sampler", "batch_size")


def make_dataloader(
    data: Any,
    batch_size: int | None,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
    group_size: int | None = None,
    run_size: int = 1,
    rank: int | None = None,
    world_size: int | None = None,
    collate_fn: Callable[[Any], Any] | None = None,
    tensors: bool = True,
    weights: Any = None,
    replacement: bool = False,
    num_samples: int | None = None,
    indices: Any = None,
    order_fn: Callable[[int, int], Any] | None = None,
    pad_shards: bool = True,
    cache_bytes: int | None = None,
    layout: str | LayoutOptions | None = None,
    batch_tokens: int | None = None,
    group_by_length: bool = False,
    **kwargs: Any,
) -> EpochDataLoader:
    """A ``torch.utils.data.DataLoader`` that fetches each batch with one gather per leaf.

    The batch sampler yields the Loader's epoch orders (same ``seed``, ``shuffle``,
    sharding), ``GetItemsDataset.__getitems__`` gathers each batch in the worker,
    NumPy leaves become torch tensors and ``collate_fn`` (if any) runs on the
    whole batch, still in the worker. Epochs follow the Loader's rule: a loop
    run to the end moves on to the next epoch, a pass that ends early is run
    again, ``set_epoch(e)`` (on the result, its batch sampler or
    ``batch_sampler.sampler``) always wins.

    Args:
        data: a pytree of arrays sharing the leading dimension, or of
            chunked stores (zarr, HDF5, Arrow / HF datasets), as for the Loader.
        batch_size: samples per batch (per rank).
        shuffle: ``False``, ``True``/``"full"`` or ``"grouped"``, as for the Loader.
        seed: seed of the epoch orders.
        num_workers: DataLoader worker processes (0: fetch in the main process,
            the fastest for in-memory data on few cores).
        drop_last: drop the last short batch (and do not pad the shards).
        group_size: group size of the grouped shuffle.
        run_size: rows per run of the grouped shuffle, as for the Loader.
        rank: this process's shard (None with ``world_size`` None: from
            ``torch.distributed`` when initialised).
        world_size: number of shards.
        collate_fn: a function of the whole batch (after the gather and the
            tensor conversion), run in the workers: the per-batch hook.
        tensors: NumPy leaves come out as torch tensors (sharing memory with the
            gathered batch); False keeps them NumPy. Other leaves are kept.
        weights: weighted sampling, as for the Loader (``WeightedRandomSampler``).
        replacement: draw with replacement, as for the Loader.
        num_samples: rows drawn per epoch with ``weights`` or ``replacement``.
        indices: the rows an epoch visits (``SubsetRandomSampler``), as for the Loader.
        order_fn: ``(seed, epoch) -> rows``, a custom order, as for the Loader.
        pad_shards: False: each rank gets its own rows, no padding, as for the Loader.
        cache_bytes: the chunk cache of store data (zarr, HDF5, Arrow), as for
            the Loader; each worker has its own.
        layout: with ragged leaves (variable-length rows): a layout object with its options
            ([`PadLayout`][looptoolkit.PadLayout], the default,
            [`FlatLayout`][looptoolkit.FlatLayout], [`PackLayout`][looptoolkit.PackLayout],
            [`FitLayout`][looptoolkit.FitLayout]) or ``"pad"``/``"flat"``, as for the Loader;
            the batches are the Loader's, their NamedTuples holding torch tensors.
        batch_tokens: a token budget per batch in place of ``batch_size`` (pass
            ``batch_size=None``), as for the Loader.
        group_by_length: as for the Loader (ragged leaves).
        **kwargs: passed to ``DataLoader`` (``pin_memory``, ``persistent_workers``,
            ``multiprocessing_context``, ``prefetch_factor``...).

    Returns:
        An [`EpochDataLoader`][looptoolkit.torch_data.EpochDataLoader].

    Raises:
        ValueError: with ``drop_last``, this shard has fewer rows than ``batch_size``
            (every epoch would be empty); the errors of
            [`GetItemsDataset`][looptoolkit.GetItemsDataset].
        TypeError: ``sampler`` or ``batch_sampler`` in ``kwargs`` (the orders come
            from ``shuffle``, ``seed`` and the sharding); an option of a layout in
            ``kwargs`` (``seq_len``, ``pad_value``...: the layout object named); a
            ``collate_fn`` that is not callable; the errors of
            [`GetItemsDataset`][looptoolkit.GetItemsDataset].

    Examples:
        >>> import numpy as np
        >>> loader = make_dataloader({"y": np.arange(5)}, 2, shuffle=False)
        >>> [batch["y"].tolist() for batch in loader]
        [[0, 1], [2, 3], [4]]
        >>> type(next(iter(loader))["y"]).__name__
        'Tensor'
    """
    # As the Loader refuses them: the layout object to write (with the `layout` given).
    refuse_layout_args({"layout": layout, **kwargs})
    clash = [name for name in _OWN_ARGUMENTS if name in kwargs]
    if clash:
        raise TypeError(
            f"make_dataloader builds its own batch sampler; `{clash[0]}` cannot be passed "
            "(choose the order with `shuffle`, `seed`, `rank` and `world_size`)."
        )
    if "skip_keys" in kwargs:
        raise TypeError(
            "make_dataloader moves nothing (its batches stay on the host), so it takes no "
            "`skip_keys`; pass them to the move: `to_device(batch, device, skip_keys=...)`."
        )
    if collate_fn is not None and not callable(collate_fn):
        raise TypeError(f"`collate_fn` must be callable, got {type(collate_fn).__name__}.")
    # The ragged options by name, as their defaults list them (`looptoolkit.ragged`).
    arguments = locals()
    ragged_args = {name: arguments[name] for name in RAGGED_DEFAULTS}
    args = {name: arguments[name] for name in ORDER_ARGS}
    orders = OrderOptions.of(args, batch_size, rank, world_size, process_group())
    # The Loader's first two steps: what the rows are, which rows when (the DataLoader delivers).
    rows = rows_of(data, batch_size, ragged_args, cache_bytes)
    order = rows.order(orders)
    if isinstance(rows, MixedRows):  # the mixed order is the sampler's; rows are its columns'
        rows = rows.rows
    # A keyed collate_fn (an augmentation) gets each batch's keys from the batch sampler.
    keyed = bool(getattr(collate_fn, "keyed", False))
    collate: Callable[[Any], Any] = keep_batch if collate_fn is None else collate_fn
    if keyed:
        collate = KeyedCollate(collate_fn)
    if rows.ragged_paths:
        items, order, cursor = ragged_parts(rows, order, tensors=tensors)
        return EpochDataLoader(
            items,
            batch_sampler=OrderBatchSampler(order, cursor, keyed=keyed),  # type: ignore[arg-type]
            collate_fn=collate,
            num_workers=num_workers,
            **kwargs,
        )
    dataset = GetItemsDataset._of(rows, tensors=tensors)
    return EpochDataLoader(
        dataset,
        # Typed as lists of ints; DataLoader only hands each batch to `__getitems__`.
        batch_sampler=OrderBatchSampler(order, keyed=keyed),  # type: ignore[arg-type]
        # The batch is whole when `__getitems__` returns it: the user's function
        # of the batch, or the identity.
        collate_fn=collate,
        num_workers=num_workers,
        **kwargs,
    )
