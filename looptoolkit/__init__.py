"""looptoolkit: feed tensors to a model fast, for PyTorch, JAX, TensorFlow and NumPy.

- :func:`to_device` moves any nested batch to a device.
- :class:`Loader` batches in-memory (or memory-mapped) arrays with one gather
  per leaf per batch, full or grouped shuffling, resume, sharding and prefetch.
- :class:`GetItemsDataset` brings the batched fetch to ``torch.utils.data.DataLoader``.

Importing looptoolkit imports no framework: torch, jax and tensorflow are
loaded only when their arrays are used or their backend is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from looptoolkit.device import TransferError, to_device
from looptoolkit.tree import ContainerRebuildWarning

if TYPE_CHECKING:
    from looptoolkit.dataset import GetItemsDataset
    from looptoolkit.loader import Loader

__version__ = "0.1.0"

__all__ = [
    "ContainerRebuildWarning",
    "GetItemsDataset",
    "Loader",
    "TransferError",
    "__version__",
    "to_device",
]

_LAZY = {"Loader": "looptoolkit.loader", "GetItemsDataset": "looptoolkit.dataset"}


def __getattr__(name: str) -> Any:
    # Loader and GetItemsDataset load on first use; GetItemsDataset needs torch.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
