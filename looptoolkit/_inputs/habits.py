"""A DataLoader user's habits, met at the Loader's door: datasets as data, DataLoader arguments.

Before the [`Loader`][looptoolkit.Loader] reads its ``data``:
[`dataset_data`][looptoolkit._inputs.habits.dataset_data] takes a dataset that holds its tensors
(``TensorDataset``: its ``tensors`` tuple, batched as ``(x, y)``) and refuses any other
dataset object with the line to write;
[`refuse_dataloader_args`][looptoolkit._inputs.habits.refuse_dataloader_args] refuses the keyword
arguments only ``DataLoader`` takes, naming the Loader's equivalent. Both read types and
attributes only: no framework is imported or named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from looptoolkit._rows.records import kind_of
from looptoolkit.adapters import backend_of
from looptoolkit.device import _tree as _tree
from looptoolkit.ragged._column import Ragged
from looptoolkit.stores import is_store_type

__all__ = ["DATALOADER_ONLY", "dataset_data", "refuse_dataloader_args"]

_WORKERS = (
    "the Loader gathers each batch in one call, in the loop's thread for data in memory (a "
    'background thread for store data, or with `prefetch_mode="thread"`), so drop it, or keep '
    "worker processes with `looptoolkit.make_dataloader(data, batch_size, num_workers=...)`"
)

# Keyword arguments of `torch.utils.data.DataLoader` the Loader does not take -> what to write.
DATALOADER_ONLY: dict[str, str] = {
    "num_workers": _WORKERS,
    "multiprocessing_context": _WORKERS,
    "persistent_workers": "the Loader starts no worker processes to keep, so drop it",
    "worker_init_fn": "the Loader starts no worker processes; seed the order with `seed=`",
    "pin_memory": (
        'pass `device="cuda"` instead: the Loader copies each batch from pinned staging '
        "buffers, asynchronously (`pin_memory_device` likewise: the device is `device=`)"
    ),
    "pin_memory_device": 'pass `device="cuda:0"` instead',
    "collate_fn": (
        "pass `transform=fn` instead: it gets each whole batch, already gathered (not a "
        "list of samples), and its result is what the loop receives"
    ),
    "sampler": (
        'the order is `shuffle=` (False, True or "grouped"), `weights=` (with '
        "`replacement=`, `num_samples=`), `indices=` (a subset) or `order_fn=` (a function "
        "of `(seed, epoch)`)"
    ),
    "batch_sampler": (
        "pass `batch_size=` with `shuffle=` (or `batch_tokens=` for ragged rows), and "
        "`order_fn=` for an order of your own"
    ),
    "prefetch_factor": "pass `prefetch=` instead: the batches prepared ahead of the loop",
    "generator": "pass `seed=` instead: each epoch's order is a function of `(seed, epoch)`",
    "timeout": "the Loader has no worker processes to wait for, so drop it",
    "in_order": "the Loader yields batches in order, always, so drop it",
}


def refuse_dataloader_args(kwargs: Mapping[str, Any]) -> None:
    """Refuse the ``DataLoader``-only keyword arguments among ``kwargs``, naming the equivalent.

    Raises:
        TypeError: one of [`DATALOADER_ONLY`][looptoolkit._inputs.habits.DATALOADER_ONLY] was
        passed.
    """
    for name in kwargs:
        hint = DATALOADER_ONLY.get(name)
        if hint is not None:
            raise TypeError(f"`Loader` takes no `{name}` (a `DataLoader` argument): {hint}.")


def _is_opaque(data: Any) -> bool:
    """Whether ``data`` is one object the Loader would take for a leaf: not an array or store."""
    if backend_of(data) is not None or is_store_type(type(data)) or isinstance(data, Ragged):
        return False
    if isinstance(data, Mapping | Sequence):
        return False
    _, spec = _tree.flatten(data)
    return spec.is_leaf()


def _is_dataset(data: Any) -> bool:
    """A dataset object by its habits: ``__getitems__``, or a base class named ``*Dataset``."""
    if hasattr(data, "__getitems__"):
        return True
    return any(c.__name__.endswith("Dataset") for c in type(data).__mro__)


def dataset_data(data: Any) -> Any:
    """``data``, or the tensors a dataset holds (``TensorDataset.tensors``, batched as a tuple).

    Raises:
        TypeError: another dataset object (one sample per index, or no indices at all), with
            the line to write.
    """
    tensors = getattr(data, "tensors", None)
    if (
        isinstance(tensors, tuple)
        and tensors
        and not is_store_type(type(data))
        and all(backend_of(t) is not None for t in tensors)
    ):
        return tensors
    if not _is_opaque(data) or not _is_dataset(data):
        return data
    kind = kind_of(data)
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        raise TypeError(
            f"`data` is a dataset ({kind}) that yields one sample per index, and the Loader "
            "batches arrays: pass the arrays it holds (`Loader((x, y), batch_size)`), or "
            "stack its samples once, `Loader(looptoolkit.stack_records([ds[i] for i in "
            "range(len(ds))]), batch_size)`."
        )
    raise TypeError(
        f"`data` is a dataset ({kind}) without indices, and the Loader batches arrays in "
        "memory: pass the arrays it reads from (`Loader((x, y), batch_size)`), or keep it in a "
        "`DataLoader`."
    )
