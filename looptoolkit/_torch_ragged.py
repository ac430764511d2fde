"""Ragged batches behind torch's ``DataLoader``: the dataset ``make_dataloader`` builds.

Between the ragged plans ([`looptoolkit.ragged._loader`][looptoolkit.ragged._loader]) and the
DataLoader integration ([`looptoolkit.torch_data`][looptoolkit.torch_data]): the batch sampler
yields what the Loader's epoch order yields (the rows of a padded or flat batch, the pieces of
a packed one), and [`RaggedItemsDataset`][looptoolkit._torch_ragged.RaggedItemsDataset] builds
the batch's layout from it in the DataLoader's worker, as the Loader does.

This module imports torch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import optree
import torch.utils.data

from looptoolkit._epochs import EpochCursor
from looptoolkit.ragged._loader import RaggedRows
from looptoolkit.ragged._loader import setup as ragged_setup
from looptoolkit.ragged._options import Options
from looptoolkit.ragged._units import UnitEpoch, UnitOrder
from looptoolkit.tree import NAMESPACE

__all__ = ["PerBatch", "RaggedItemsDataset", "as_tensor", "ragged_parts"]

_TENSOR_KINDS = frozenset("biufc")


def as_tensor(leaf: Any) -> Any:
    """A NumPy array of numbers as a torch tensor sharing its memory; anything else as it is.

    Examples:
        >>> type(as_tensor(np.arange(3))).__name__, as_tensor(7)
        ('Tensor', 7)
    """
    if isinstance(leaf, np.ndarray) and leaf.dtype.kind in _TENSOR_KINDS:
        # Shares the gathered batch's memory; a read-only view is copied once.
        return torch.from_numpy(leaf if leaf.flags.writeable else leaf.copy())
    return leaf


class RaggedItemsDataset(torch.utils.data.Dataset[Any]):
    """The dataset ``make_dataloader`` builds over data with ragged leaves.

    ``__getitems__`` takes what the batch sampler yields for one batch (the rows of a padded
    or flat batch, or the pieces of a packed one) and builds the batch's layout
    ([`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat],
    [`Packed`][looptoolkit.Packed]) as the Loader does; NumPy arrays become torch tensors.

    Args:
        rows: the ragged rows of the data, with the layout's options.
        tensors: NumPy arrays of a batch come out as torch tensors.
    """

    def __init__(self, rows: RaggedRows, *, tensors: bool = True) -> None:
        self._rows = rows
        self.tensors = bool(tensors)

    def __len__(self) -> int:
        return self._rows.n

    def __getitem__(self, index: int) -> Any:
        raise TypeError(
            "a ragged dataset is read a batch at a time (`__getitems__`), by a DataLoader "
            "from `make_dataloader`."
        )

    def __getitems__(self, item: Any) -> Any:
        """The batch of ``item``: an index array of rows, or the block of a packed batch."""
        rows = self._rows
        if not hasattr(item, "rows"):  # the rows of a padded or flat batch
            item = np.asarray(item, dtype=np.int64)
        batch = rows.batch(item)
        if not self.tensors:
            return batch
        return optree.tree_map(as_tensor, batch, none_is_leaf=True, namespace=NAMESPACE)

    def __reduce__(self) -> tuple[Any, ...]:
        # Workers started by spawn or forkserver rebuild the rows from the data and options.
        rows = self._rows
        return (_ragged_rebuilt, (type(self), rows.data, rows.opts, self.tensors))

    def __repr__(self) -> str:
        rows = self._rows
        return (
            f"RaggedItemsDataset(<{len(rows.ragged)} ragged and {len(rows.fixed_at)} fixed "
            f"leaves of {rows.n} rows, layout={rows.opts.layout!r}>)"
        )


def _ragged_rebuilt(
    cls: type[RaggedItemsDataset], data: Any, opts: Options, tensors: bool
) -> RaggedItemsDataset:
    """A RaggedItemsDataset unpickled: its rows rebuilt from ``data`` and ``opts``."""
    return cls(RaggedRows(data, opts), tensors=tensors)


def ragged_parts(
    data: Any,
    args: dict[str, Any],
    ragged_args: dict[str, Any],
    rank: int,
    world_size: int,
    *,
    tensors: bool,
) -> tuple[RaggedItemsDataset, Any, EpochCursor]:
    """The dataset, epoch order and epoch cursor of ``make_dataloader`` over ragged ``data``.

    Args:
        data: the data with its ragged inputs as [`Ragged`][looptoolkit.Ragged] leaves.
        args: ``batch_size`` and the epoch order's arguments, as the Loader's ``_args``
            (``looptoolkit.ragged._loader.setup`` takes them).
        ragged_args: the ragged options, as the Loader takes them.
        rank: this process's rank, resolved.
        world_size: the number of ranks, resolved.
        tensors: NumPy arrays of a batch come out as torch tensors.

    Raises:
        ValueError: the errors of the Loader's ragged options and plans.
    """
    rows, order = ragged_setup(data, args, ragged_args, rank, world_size)
    cursor = EpochCursor()
    if isinstance(order, UnitOrder):
        # Planned batches: their count is the epoch's. A partial of `getattr` pickles and
        # deep-copies along with the cursor, which a lambda would not.
        order.current_epoch = functools.partial(getattr, cursor, "epoch")
        return RaggedItemsDataset(rows, tensors=tensors), PerBatch(order), cursor
    return RaggedItemsDataset(rows, tensors=tensors), order, cursor


class PerBatch:
    """A [`UnitOrder`][looptoolkit.ragged._units.UnitOrder] whose epochs yield one item per batch.

    The Loader lays out packed batches a block at a time; a batch sampler hands each batch to
    the dataset on its own (to a worker of its own), so here an epoch yields what each batch
    gathers. Everything else is the order's.
    """

    def __init__(self, order: UnitOrder) -> None:
        self.order = order

    def __getattr__(self, name: str) -> Any:
        order = self.__dict__.get("order")  # absent while unpickling
        if order is None:
            raise AttributeError(name)
        return getattr(order, name)

    def __len__(self) -> int:
        return len(self.order)

    def __repr__(self) -> str:
        return repr(self.order)

    def epoch(self, epoch: int, offset: int = 0) -> _Batches:
        """This rank's batches of ``epoch`` from global batch ``offset`` on, one at a time."""
        return _Batches(self.order.epoch(epoch, offset))


class _Batches:
    """A [`UnitEpoch`][looptoolkit.ragged._units.UnitEpoch] iterated one batch at a time."""

    def __init__(self, schedule: UnitEpoch) -> None:
        self.schedule = schedule

    def __getattr__(self, name: str) -> Any:
        schedule = self.__dict__.get("schedule")
        if schedule is None:
            raise AttributeError(name)
        return getattr(schedule, name)

    def __len__(self) -> int:
        return len(self.schedule)

    def __iter__(self) -> Iterator[Any]:
        schedule = self.schedule
        return (schedule.batch(i) for i in range(len(schedule)))
