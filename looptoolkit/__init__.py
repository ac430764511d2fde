"""looptoolkit: feed tensors to a model fast, for PyTorch, JAX, TensorFlow and NumPy.

- [`to_device`][looptoolkit.to_device] moves any nested batch to a device.
- [`Loader`][looptoolkit.Loader] batches in-memory (or memory-mapped) arrays with one gather
  per leaf per batch, full or grouped shuffling, resume, sharding, prefetch
  and a ``transform`` run where the batch arrives; [`Order`][looptoolkit.Order] is its epoch
  order on its own, [`normalize`][looptoolkit.normalize] the common transform;
  [`stack_records`][looptoolkit.stack_records] turns a list of per-sample records into the columns
  it batches.
- [`GetItemsDataset`][looptoolkit.GetItemsDataset], [`make_dataloader`][looptoolkit.make_dataloader]
  and [`keep_batch`][looptoolkit.keep_batch] bring the batched fetch to
  ``torch.utils.data.DataLoader`` (they need torch); [`loader_dataset`][looptoolkit.loader_dataset]
  yields the Loader's batches from ``tf.data`` (needs tensorflow).
- [`StaticBatches`][looptoolkit.StaticBatches] copies every batch into the same torch
  buffers, for CUDA graphs and ``torch.compile(mode="reduce-overhead")``.

Importing looptoolkit imports no framework: torch, jax and tensorflow are
loaded only when their arrays are used or their integration is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from looptoolkit._common.errors import RepeatedEpochWarning, TransferError
from looptoolkit._common.keys import BatchKeys
from looptoolkit.device._move import to_device
from looptoolkit.device._tree import ContainerRebuildWarning

if TYPE_CHECKING:
    from looptoolkit._inputs.group_budget import group_size_for
    from looptoolkit._rows.records import stack_records
    from looptoolkit._static import StaticBatches
    from looptoolkit.loader import Loader, LoaderStats
    from looptoolkit.mix import Mix
    from looptoolkit.order._order import Order
    from looptoolkit.ragged import (
        FitLayout,
        Flat,
        FlatLayout,
        Packed,
        PackLayout,
        Padded,
        PadLayout,
        Ragged,
    )
    from looptoolkit.tf_data import loader_dataset
    from looptoolkit.torch_data import GetItemsDataset, keep_batch, make_dataloader
    from looptoolkit.transforms import normalize

__version__ = "0.1.0"

# The public errors and warnings are shown where users import them from: a
# traceback reads `looptoolkit.TransferError`, as the docs write it.
for _public in (TransferError, ContainerRebuildWarning, RepeatedEpochWarning, BatchKeys):
    _public.__module__ = __name__
del _public

__all__ = [
    "BatchKeys",
    "ContainerRebuildWarning",
    "FitLayout",
    "Flat",
    "FlatLayout",
    "GetItemsDataset",
    "Loader",
    "LoaderStats",
    "Mix",
    "Order",
    "PackLayout",
    "Packed",
    "PadLayout",
    "Padded",
    "Ragged",
    "RepeatedEpochWarning",
    "StaticBatches",
    "TransferError",
    "__version__",
    "group_size_for",
    "keep_batch",
    "loader_dataset",
    "make_dataloader",
    "normalize",
    "stack_records",
    "to_device",
]

# Loaded on first use: the torch and tf integrations import their framework.
_LAZY = {
    "Loader": "looptoolkit.loader",
    "LoaderStats": "looptoolkit.loader",
    "Mix": "looptoolkit.mix",
    "Order": "looptoolkit.order._order",
    "Ragged": "looptoolkit.ragged",
    "Padded": "looptoolkit.ragged",
    "Flat": "looptoolkit.ragged",
    "Packed": "looptoolkit.ragged",
    "PadLayout": "looptoolkit.ragged",
    "FlatLayout": "looptoolkit.ragged",
    "PackLayout": "looptoolkit.ragged",
    "FitLayout": "looptoolkit.ragged",
    "GetItemsDataset": "looptoolkit.torch_data",
    "keep_batch": "looptoolkit.torch_data",
    "make_dataloader": "looptoolkit.torch_data",
    "loader_dataset": "looptoolkit.tf_data",
    "normalize": "looptoolkit.transforms",
    "stack_records": "looptoolkit._rows.records",
    "group_size_for": "looptoolkit._inputs.group_budget",
    "StaticBatches": "looptoolkit._static",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
