"""Containers with named fields: dataclasses, attrs classes, ``SimpleNamespace``.

Part of the container rules of [`looptoolkit.device._containers`][looptoolkit.device._containers]:
each is flattened by its fields (and by any other instance attribute that is not a
plain value, such as an array set after ``__init__``) and rebuilt as a shallow
copy with them replaced, without running its constructor again.
"""

from __future__ import annotations

import array
import collections
import collections.abc
import copy
import dataclasses
import types
from collections.abc import Iterable
from typing import Any

from looptoolkit._common.node import Node, Ref
from looptoolkit.adapters import backend_of, container_node

__all__ = [
    "attribute_children",
    "attrs_names",
    "fields_node",
    "namespace_node",
    "set_entry",
]


class _Unset:
    """Stands for a dataclass field that has no value (``init=False``, never assigned)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def set_entry(obj: Any, key: Any, value: Any) -> None:
    if isinstance(obj, dict) and dict.__contains__(obj, key):
        # Past the class's own __setitem__, as object.__setattr__ goes past a frozen
        # __setattr__: the copy already has the key, only its value changes.
        dict.__setitem__(obj, key, value)
    else:
        obj[key] = value


# Attribute values that may hold arrays, besides arrays: the containers a batch is
# made of (any sequence but text and bytes, any mapping, dataclasses and attrs
# instances, namespaces, frameworks' own containers such as a TensorDict).
_HOLDERS = (
    collections.abc.Sequence,
    collections.abc.Mapping,
    collections.abc.Set,
    collections.deque,
    types.SimpleNamespace,
)
_NOT_HOLDERS = (str, bytes, bytearray, memoryview, range, array.array)
_holder_types: dict[type, bool] = {}


def _holds_arrays(value: Any) -> bool:
    cls = type(value)
    found = _holder_types.get(cls)
    if found is None:
        if issubclass(cls, _NOT_HOLDERS):
            found = False
        elif issubclass(cls, _HOLDERS) or dataclasses.is_dataclass(cls):
            found = True
        else:
            found = (
                attrs_names(cls) is not None
                or backend_of(value) is not None
                or container_node(cls) is not None
            )
        _holder_types[cls] = found
    return found


def attribute_children(obj: Any, skip: frozenset[Any]) -> tuple[str, ...]:
    """Instance attributes of ``obj`` outside ``skip`` that are arrays or containers.

    Any other attribute (a str, a number, a function, a model) is metadata: it
    comes back as it is, and the Loader does not take it for a column.
    """
    attrs = getattr(obj, "__dict__", None)
    if not attrs:
        return ()
    return tuple(k for k, v in attrs.items() if k not in skip and _holds_arrays(v))


def fields_node(names: tuple[str, ...], mapping: bool) -> Node:
    """Flatten by named attributes; rebuild as a shallow copy with them replaced.

    A shallow copy keeps frozen-ness, ``init=False`` fields and any extra
    attributes without running ``__init__``/``__post_init__`` again; extra
    attributes that are not plain values (an array set after ``__init__``) are
    children too. For a ``mapping`` (a dataclass subclassing OrderedDict, as
    model outputs do), an entry holding the same object as a field gets the
    field's new value, and the other entries are children of their own: nothing
    inside is left behind.
    """
    known = frozenset(names)
    if not mapping:

        def flatten_fields(obj: Any) -> tuple[list[Any], tuple[Any, ...], tuple[str, ...]]:
            extras = attribute_children(obj, known)
            values = [getattr(obj, n, _UNSET) for n in names]
            values += [getattr(obj, n) for n in extras]
            return values, (Ref(obj), extras), (*names, *extras)

        def unflatten_fields(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
            ref, extras = meta
            new = copy.copy(ref.obj)
            for name, value in zip((*names, *extras), children, strict=True):
                if value is not _UNSET:
                    object.__setattr__(new, name, value)
            return new

        return flatten_fields, unflatten_fields

    position = {name: i for i, name in enumerate(names)}

    def flatten_fn(obj: Any) -> tuple[list[Any], tuple[Any, ...], list[Any]]:
        values = [getattr(obj, n, _UNSET) for n in names]
        shared: list[tuple[Any, int]] = []
        own: list[Any] = []
        where = {id(v): i for i, v in enumerate(values) if v is not _UNSET}
        for key in list(obj.keys()):
            value = obj[key]
            i = position.get(key, -1)
            if i < 0 or values[i] is not value:
                i = where.get(id(value), -1)
            if i >= 0:
                shared.append((key, i))
            else:
                own.append(key)
                values.append(value)
        # An entry that is also an attribute of its own (set through the mapping of
        # a model output) keeps the two in step.
        attrs = getattr(obj, "__dict__", {})
        mirrored = tuple(isinstance(k, str) and attrs.get(k) is obj[k] for k in own)
        kept_in_step = {k for k, m in zip(own, mirrored, strict=True) if m}
        extras = attribute_children(obj, known | kept_in_step)
        values += [attrs[k] for k in extras]
        meta = (Ref(obj), tuple(shared), tuple(own), mirrored, extras)
        return values, meta, [*names, *own, *extras]

    def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
        ref, shared, own, mirrored, extras = meta
        values = list(children)
        new = copy.copy(ref.obj)
        for name, value in zip(names, values, strict=False):
            if value is not _UNSET:
                object.__setattr__(new, name, value)
        for key, i in shared:
            set_entry(new, key, values[i])
        mine = values[len(names) : len(names) + len(own)]
        for key, value, attribute in zip(own, mine, mirrored, strict=True):
            set_entry(new, key, value)
            if attribute:
                object.__setattr__(new, key, value)
        for name, value in zip(extras, values[len(names) + len(own) :], strict=True):
            object.__setattr__(new, name, value)
        return new

    return flatten_fn, unflatten_fn


def namespace_node() -> Node:
    def flatten_fn(obj: Any) -> tuple[list[Any], tuple[Any, ...], list[str]]:
        keys = list(vars(obj))
        return [getattr(obj, k) for k in keys], (Ref(obj), tuple(keys)), keys

    def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
        ref, keys = meta
        new = copy.copy(ref.obj)
        new.__dict__.update(zip(keys, children, strict=True))
        return new

    return flatten_fn, unflatten_fn


def attrs_names(cls: type) -> tuple[str, ...] | None:
    """Field names of an attrs class (``attrs.fields(cls)`` is ``cls.__attrs_attrs__``)."""
    fields = getattr(cls, "__attrs_attrs__", None)
    if fields is None or not isinstance(fields, tuple):
        return None
    return tuple(f.name for f in fields)
