"""GetItemsDataset: the Loader's batched gather behind ``torch.utils.data.DataLoader``.

For users who keep PyTorch's ``DataLoader`` (its samplers, workers, pinning):
:class:`GetItemsDataset` answers ``__getitems__`` with one gather per leaf per
batch instead of one ``__getitem__`` per sample plus a collate, and
:func:`make_dataloader` wires it to a batch sampler that yields the same epoch
orders as :class:`~looptoolkit.Loader` and an identity ``collate_fn``, so each
batch is fetched in one call and reaches the loop as the dataset built it.

This module imports torch; ``looptoolkit`` loads it on first use of
``GetItemsDataset``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from looptoolkit._probe import check_not_empty
from looptoolkit._rows import Rows
from looptoolkit.order import Order, resolve_rank

__all__ = ["GetItemsDataset", "OrderBatchSampler", "keep_batch", "make_dataloader"]


class GetItemsDataset(torch.utils.data.Dataset[Any]):
    """A map-style dataset over a pytree of arrays, fetched a whole batch at a time.

    Args:
        data: a pytree of NumPy (``np.memmap`` too), torch, JAX or tf arrays
            sharing the leading dimension, as for :class:`~looptoolkit.Loader`.

    Raises:
        ValueError: an empty pytree, a 0-d leaf, or leaves of different lengths.
        TypeError: a leaf that is not an array; a list of per-sample records (see
            :func:`looptoolkit.stack_records`).

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

    def __init__(self, data: Any) -> None:
        self._rows = Rows(data)

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
        idx = np.asarray(indices, dtype=np.intp)
        if idx.ndim != 1:
            raise ValueError(f"`indices` must be 1-D, got shape {list(idx.shape)}.")
        if len(idx) and (idx.min() < -self._rows.n or idx.max() >= self._rows.n):
            raise IndexError(f"`indices` out of range for {self._rows.n} rows.")
        return self._rows.take(idx)

    def __repr__(self) -> str:
        rows = self._rows
        kinds = "/".join(rows.backends)
        return f"GetItemsDataset(<{len(rows.leaves)} {kinds} leaves of {rows.n} rows>)"


class OrderBatchSampler(torch.utils.data.Sampler[np.ndarray]):
    """A batch sampler yielding the batches of an :class:`~looptoolkit.order.Order`.

    Each iteration is the next epoch (as with the Loader); :meth:`set_epoch` fixes
    it. Batches are 1-D NumPy index arrays, the same ones the Loader gathers.
    """

    def __init__(self, order: Order) -> None:
        self.order = order
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next iteration runs."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[np.ndarray]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        return iter(self.order.epoch(epoch))

    def __len__(self) -> int:
        return len(self.order)


def keep_batch(batch: Any) -> Any:
    """``collate_fn`` for a DataLoader over :class:`GetItemsDataset`: the batch as it is.

    ``__getitems__`` already returns the whole batch; DataLoader's default
    collate would try to take it apart as a list of samples. A module-level
    function, so that worker processes can pickle it.
    """
    return batch


def make_dataloader(
    data: Any,
    batch_size: int,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
    group_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    **kwargs: Any,
) -> torch.utils.data.DataLoader[Any]:
    """A ``torch.utils.data.DataLoader`` that fetches each batch with one gather per leaf.

    The batch sampler yields the Loader's epoch orders (same ``seed``, ``shuffle``,
    sharding), ``GetItemsDataset.__getitems__`` gathers each batch, and the
    identity ``collate_fn`` hands it on unchanged. Each iteration of the result
    is the next epoch; ``loader.batch_sampler.set_epoch(e)`` fixes it.

    Args:
        data: a pytree of arrays sharing the leading dimension.
        batch_size: samples per batch (per rank).
        shuffle: ``False``, ``True``/``"full"`` or ``"grouped"``, as for the Loader.
        seed: seed of the epoch orders.
        num_workers: DataLoader worker processes (0: fetch in the main process,
            the fastest for in-memory data on few cores).
        drop_last: drop the last short batch (and do not pad the shards).
        group_size: group size of the grouped shuffle.
        rank: this process's shard (None with ``world_size`` None: from
            ``torch.distributed`` when initialised).
        world_size: number of shards.
        **kwargs: passed to ``DataLoader`` (``pin_memory``, ``persistent_workers``...).

    Returns:
        The DataLoader.

    Raises:
        ValueError: with ``drop_last``, this shard has fewer rows than ``batch_size``
            (every epoch would be empty); the errors of :class:`GetItemsDataset`.
        TypeError: the errors of :class:`GetItemsDataset`.

    Examples:
        >>> import numpy as np
        >>> loader = make_dataloader({"y": np.arange(5)}, 2, shuffle=False)
        >>> [batch["y"].tolist() for batch in loader]
        [[0, 1], [2, 3], [4]]
    """
    dataset = GetItemsDataset(data)
    rank, world_size = resolve_rank(rank, world_size)
    order = Order(
        len(dataset),
        batch_size,
        shuffle=shuffle,
        seed=seed,
        group_size=group_size,
        rank=rank,
        world_size=world_size,
        drop_last=drop_last,
    )
    check_not_empty(order)
    return torch.utils.data.DataLoader(
        dataset,
        # Typed as lists of ints; DataLoader only hands each batch to `__getitems__`.
        batch_sampler=OrderBatchSampler(order),  # type: ignore[arg-type]
        collate_fn=keep_batch,
        num_workers=num_workers,
        **kwargs,
    )
