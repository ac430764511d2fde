"""TensorDict containers for the torch backend: how optree looks into them.

A ``TensorDict`` is rebuilt with everything ``TensorDict.to`` keeps: its keys in
order, ``batch_size``, dimension names, lock, and the device its leaves share. A
tensorclass is a shallow copy with its inner TensorDict replaced. A lazily
stacked TensorDict is rebuilt as a lazy stack (same stack dimension and name)
of its rebuilt parts; only ``to_device`` looks into it: its parts are samples,
not columns the Loader could batch.

Nothing here imports tensordict: a TensorDict can only exist once it is imported,
so ``sys.modules`` answers.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable
from typing import Any

import torch

from looptoolkit._common.node import Node, Ref

__all__ = ["container", "is_batched_node", "move_container"]


def _common_device(values: Iterable[Any]) -> Any:
    devices = {v.device for v in values if isinstance(v, torch.Tensor)}
    return devices.pop() if len(devices) == 1 else None


def _names(td: Any) -> list[str | None] | None:
    names = td.names
    return list(names) if any(n is not None for n in names) else None


def _tensordict_node(cls: type) -> Node:
    def flatten_fn(td: Any) -> tuple[list[Any], tuple[Any, ...], list[str]]:
        keys = list(td.keys())
        meta = (keys, td.batch_size, _names(td), td.is_locked)
        return [td.get(k) for k in keys], meta, keys

    def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
        keys, batch_size, names, locked = meta
        values = list(children)
        return cls(
            dict(zip(keys, values, strict=True)),
            batch_size=batch_size,
            device=_common_device(values),
            names=names,
            lock=locked,
        )

    return flatten_fn, unflatten_fn


def _tensorclass_node() -> Node:
    def flatten_fn(obj: Any) -> tuple[list[Any], Any, list[str]]:
        return [obj._tensordict], Ref(obj), ["_tensordict"]

    def unflatten_fn(ref: Ref, children: Iterable[Any]) -> Any:
        (td,) = children
        new = copy.copy(ref.obj)
        object.__setattr__(new, "_tensordict", td)
        return new

    return flatten_fn, unflatten_fn


def _lazy_stack_node(cls: type) -> Node:
    def flatten_fn(lazy: Any) -> tuple[list[Any], tuple[int, Any], None]:
        dim = lazy.stack_dim
        return list(lazy.tensordicts), (dim, lazy.names[dim]), None

    def unflatten_fn(meta: tuple[int, Any], children: Iterable[Any]) -> Any:
        dim, name = meta
        return cls(*children, stack_dim=dim, stack_dim_name=name)

    return flatten_fn, unflatten_fn


def container(cls: type) -> Node | None:
    """TensorDict and tensorclass types (only when tensordict is already imported)."""
    td = sys.modules.get("tensordict")
    if td is None:
        return None
    if cls is td.TensorDict:
        return _tensordict_node(cls)
    if td.is_tensorclass(cls):
        return _tensorclass_node()
    return None


def move_container(cls: type) -> Node | None:
    """``LazyStackedTensorDict``: looked into by ``to_device`` only."""
    td = sys.modules.get("tensordict")
    if td is None:
        return None
    if cls is td.LazyStackedTensorDict:
        return _lazy_stack_node(cls)
    return None


def is_batched_node(x: Any) -> bool:
    """TensorDict and tensorclass instances record their batch size."""
    td = sys.modules.get("tensordict")
    return td is not None and (isinstance(x, td.TensorDictBase) or td.is_tensorclass(x))
