"""PyTorch's own input loops for ``looptoolkit compare``.

``torch.utils.data.DataLoader`` the way PyTorch users run it: per-sample
``__getitem__`` + ``default_collate`` (the default), and over
[`looptoolkit.GetItemsDataset`][looptoolkit.GetItemsDataset] (one ``__getitems__`` gather per
batch); ``torch.randperm`` + ``x[idx]`` or ``index_select``; and the bare
device-resident ``index_select``.
Given an ``order``, the DataLoaders yield exactly the Loader's batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from looptoolkit import tree
from looptoolkit._epochs import EpochCursor, pass_over
from looptoolkit._rows import Rows
from looptoolkit.adapters.torch import from_numpy
from looptoolkit.bench.epochs import EpochPipeline, order_length
from looptoolkit.order import batch_count, epoch_indices
from looptoolkit.torch_data import GetItemsDataset, keep_batch

__all__ = [
    "OrderSampler",
    "PerSampleDataset",
    "getitems_dataloader",
    "per_sample_dataloader",
    "randperm_loop",
    "resident_gather",
]


def as_torch(x: Any) -> torch.Tensor:
    """A torch tensor for a NumPy array (zero-copy) or a tensor (as is)."""
    if isinstance(x, torch.Tensor):
        return x
    return from_numpy(np.asarray(x))


class PerSampleDataset(Dataset):
    """A map-style dataset over a pytree of tensors that returns one row at a time.

    What ``torch.utils.data.TensorDataset`` does, for any pytree: ``dataset[i]``
    is the tree of row ``i``, and ``DataLoader``'s ``default_collate`` stacks
    the rows of a batch. It has no ``__getitems__``, so ``DataLoader`` calls
    ``__getitem__`` once per sample: the per-sample path users run by default.

    Args:
        data: a pytree of tensors or NumPy arrays (turned into tensors without a
            copy) sharing the leading dimension.
    """

    def __init__(self, data: Any) -> None:
        self._n = Rows(data).n
        leaves, self._spec = tree.flatten(data)
        self._leaves = [as_torch(leaf) for leaf in leaves]

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Any:
        return tree.unflatten(self._spec, [leaf[i] for leaf in self._leaves])


class OrderSampler(Sampler[int]):
    """A sampler that yields the epoch orders of an ``Order`` (or a ``Loader``).

    Which epoch each ``iter()`` runs is the Loader's rule (the one epoch cursor):
    a pass run to the end moves to the next epoch; ``set_epoch(e)`` chooses the
    next one, like ``DistributedSampler``.

    Args:
        order: an ``Order``, a ``Loader`` or a function of the epoch returning
            the sample order.
        n: samples per epoch.
        start_epoch: the epoch of the first ``iter()``.
    """

    def __init__(self, order: Any, n: int, *, start_epoch: int = 0) -> None:
        self.order = order
        self.n = n
        self.cursor = EpochCursor(start_epoch)

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next ``iter()`` yields."""
        self.cursor.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return pass_over(self.cursor, lambda epoch: epoch_indices(self.order, epoch).tolist())

    def __len__(self) -> int:
        return self.n


def _sampling(
    n: int, order: Any, shuffle: bool, seed: int
) -> tuple[Sampler[int] | None, bool, torch.Generator | None]:
    if order is not None:
        return OrderSampler(order, n), False, None
    return None, shuffle, torch.Generator().manual_seed(seed) if shuffle else None


def _dataloader(
    dataset: Any,
    batch_size: int,
    order: Any,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    num_workers: int,
    kwargs: dict[str, Any],
) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` in the Loader's order, or DataLoader's own."""
    sampler, shuffle, generator = _sampling(len(dataset), order, shuffle, seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        sampler=sampler,
        generator=generator,
        drop_last=drop_last,
        num_workers=num_workers,
        **kwargs,
    )


def per_sample_dataloader(
    data: Any,
    batch_size: int,
    *,
    order: Any = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    num_workers: int = 0,
    **kwargs: Any,
) -> DataLoader:
    """``DataLoader`` over ``PerSampleDataset``: one ``__getitem__`` per sample.

    The loop PyTorch users write by default. With ``order`` the samples come in
    the Loader's order (an [`OrderSampler`][looptoolkit.bench.native_torch.OrderSampler]), so the
    batches equal the Loader's; without it, ``shuffle=True`` is DataLoader's own ``RandomSampler``
    seeded with ``seed``.

    Args:
        data: a pytree of tensors or NumPy arrays.
        batch_size: samples per batch.
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        shuffle: without ``order``: DataLoader's ``shuffle``.
        seed: without ``order``: seeds DataLoader's generator.
        drop_last: drop the last partial batch.
        num_workers: DataLoader worker processes.
        **kwargs: passed to ``DataLoader`` (``pin_memory``, ``persistent_workers``,
            ``multiprocessing_context``, ...).

    Returns:
        The ``DataLoader``; a pass run to the end moves it to the next epoch.
    """
    return _dataloader(
        PerSampleDataset(data), batch_size, order, shuffle, seed, drop_last, num_workers, kwargs
    )


def getitems_dataloader(
    data: Any,
    batch_size: int,
    *,
    order: Any = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    num_workers: int = 0,
    **kwargs: Any,
) -> DataLoader:
    """``DataLoader`` over ``looptoolkit.GetItemsDataset``: one gather per batch.

    DataLoader's sampler and ``BatchSampler`` still build each batch as a list of
    ints, which ``__getitems__`` gathers in one call; ``collate_fn`` passes the
    gathered batch through. With ``order`` the batches equal the Loader's.

    Args:
        data: a pytree of tensors or NumPy arrays.
        batch_size: samples per batch.
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        shuffle: without ``order``: DataLoader's ``shuffle``.
        seed: without ``order``: seeds DataLoader's generator.
        drop_last: drop the last partial batch.
        num_workers: DataLoader worker processes.
        **kwargs: passed to ``DataLoader``.

    Returns:
        The ``DataLoader``; a pass run to the end moves it to the next epoch.
    """
    kwargs.setdefault("collate_fn", keep_batch)
    return _dataloader(
        GetItemsDataset(data), batch_size, order, shuffle, seed, drop_last, num_workers, kwargs
    )


def randperm_loop(
    data: Any,
    batch_size: int,
    *,
    seed: int = 0,
    drop_last: bool = False,
    gather: str = "index",
) -> EpochPipeline:
    """``torch.randperm`` per epoch, then one gather per leaf per batch.

    The loop a PyTorch user writes by hand for in-memory tensors, with torch's
    fancy indexing ``leaf[idx]`` (which runs OpenMP threads) or with
    ``leaf.index_select(0, idx)``. The order is torch's, not the Loader's.

    Args:
        data: a pytree of tensors or NumPy arrays (on any one device).
        batch_size: rows per batch.
        seed: seeds the ``torch.Generator`` once; each epoch draws the next permutation.
        drop_last: drop the last partial batch.
        gather: ``"index"`` (``leaf[idx]``) or ``"index_select"``.

    Returns:
        An [`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] of batches shaped like
        ``data``.
    """
    if gather not in ("index", "index_select"):
        raise ValueError(f"`gather` must be 'index' or 'index_select', got {gather!r}.")
    leaves, spec = tree.flatten(data)
    tensors = [as_torch(leaf) for leaf in leaves]
    n = int(tensors[0].shape[0])
    device = tensors[0].device
    generator = torch.Generator(device=device if device.type == "cuda" else "cpu")
    generator.manual_seed(seed)
    length = batch_count(n, batch_size, drop_last)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        perm = torch.randperm(n, generator=generator, device=generator.device)
        for start in range(0, length * batch_size, batch_size):
            idx = perm[start : start + batch_size]
            if gather == "index":
                yield tree.unflatten(spec, [t[idx] for t in tensors])
            else:
                yield tree.unflatten(spec, [t.index_select(0, idx) for t in tensors])

    return EpochPipeline(epoch_fn, length, name=f"randperm_loop[{gather}]")


def resident_gather(
    data: Any,
    batch_size: int,
    *,
    order: Any,
    device: Any = None,
    drop_last: bool = False,
) -> EpochPipeline:
    """Device-resident data, ``index_select`` on the device: the bare on-device gather.

    The data is copied to ``device`` once; each epoch's order is copied once;
    each batch is one ``index_select`` per leaf on a slice of it. The reference
    loop for a device-resident Loader.

    Args:
        data: a pytree of tensors or NumPy arrays.
        batch_size: rows per batch.
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        device: where the data lives (default: where it is).
        drop_last: drop the last partial batch.

    Returns:
        An [`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] of batches on ``device``.
    """
    leaves, spec = tree.flatten(data)
    tensors = [as_torch(leaf) for leaf in leaves]
    if device is not None:
        tensors = [t.to(device) for t in tensors]
    on = tensors[0].device
    n = int(tensors[0].shape[0])

    def epoch_fn(epoch: int) -> Iterator[Any]:
        indices = torch.from_numpy(epoch_indices(order, epoch).astype(np.int64)).to(on)
        m = len(indices)
        for start in range(0, batch_count(m, batch_size, drop_last) * batch_size, batch_size):
            idx = indices[start : start + batch_size]
            yield tree.unflatten(spec, [t.index_select(0, idx) for t in tensors])

    length = order_length(order, n, batch_size, drop_last)
    return EpochPipeline(epoch_fn, length, name="resident_gather")
