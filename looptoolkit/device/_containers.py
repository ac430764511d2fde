"""Container rules: how each kind of container is flattened and rebuilt.

Used by [`looptoolkit.tree`][looptoolkit.tree], which classifies a type the first
time it meets it as a leaf and registers it here, in one or both of its optree namespaces
([`DATA`][looptoolkit.device._containers.DATA] for the Loader's data and its batches,
[`MOVE`][looptoolkit.device._containers.MOVE] for ``to_device``). The rules, in order:

- a framework's own containers (``Backend.container``: TensorDict, tensorclass;
  ``Backend.move_container``, ``to_device`` only: a lazily stacked TensorDict);
- dataclasses and attrs classes (a shallow copy with the fields replaced; a
  dataclass that is also a mapping, such as a model output, gets its entries
  replaced too), ``types.SimpleNamespace``;
- subclasses of dict, OrderedDict, defaultdict, deque, list, tuple, set and
  frozenset (and set, frozenset, ``UserDict``, ``UserList`` themselves), rebuilt
  as their own type with their instance attributes;
- other mappings and sequences, which cannot be rebuilt as their own type, and
  subclasses of the above with their own constructor: they come back as they
  are when nothing inside them changed, else as their closest base with a
  [`ContainerRebuildWarning`][looptoolkit.ContainerRebuildWarning] (``strict``:
  [`Unbuildable`][looptoolkit.device._containers.Unbuildable]). When such a type has its own
  ``.to`` (a tokenizer's ``BatchEncoding``), ``to_device`` moves it with its ``.to`` instead: it is
  not registered in [`MOVE`][looptoolkit.device._containers.MOVE].

Instance attributes that a container carries besides its fields or items
(``batch.meta = ...``) come back with it; those that are arrays or containers
(an array set after ``__init__``, say) are looked into like fields.
"""

from __future__ import annotations

import array
import collections
import collections.abc
import copy
import dataclasses
import os
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import optree

from looptoolkit._common.errors import PACKAGE_DIR, caller_stacklevel
from looptoolkit._common.node import Node, Ref
from looptoolkit.adapters import container_node, move_container_node
from looptoolkit.device._fields import (
    attribute_children,
    attrs_names,
    fields_node,
    namespace_node,
    set_entry,
)
from looptoolkit.stores import is_store_type

__all__ = [
    "DATA",
    "MOVE",
    "ContainerRebuildWarning",
    "Unbuildable",
    "classify",
    "describe_lossy",
    "lossy_base",
    "namedtuple_class",
    "needs_registration",
    "register_namedtuple",
    "state",
]

DATA = "looptoolkit"
MOVE = "looptoolkit.to_device"
_BOTH = (DATA, MOVE)


class ContainerRebuildWarning(UserWarning):
    """A container could not be rebuilt as its own type and became its closest base.

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> from looptoolkit import to_device
        >>> class Tagged(dict):  # a dict subclass with its own constructor
        ...     def __init__(self, tag, **items):
        ...         super().__init__(**items)
        ...         self.tag = tag
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     out = to_device(Tagged("t", x=np.ones(2)), "cpu", dtype=np.float32)
        >>> type(out).__name__, caught[0].category.__name__
        ('dict', 'ContainerRebuildWarning')
    """


class Unbuildable(Exception):
    """Raised under ``strict`` for a container that would become its base type."""

    def __init__(self, obj: Any) -> None:
        super().__init__(type(obj))
        self.obj = obj


# `state.strict`: set by tree.unflatten around one call, in its own thread.
state = threading.local()


# Types registered as lossy -> the base type they are rebuilt as.
_lossy: dict[type, type] = {}
# Lossy types that are read-only or non-dict mappings (their messages say so).
_mappings: set[type] = set()


def lossy_base(cls: type) -> type | None:
    """The type a lossy container is rebuilt as, or None when ``cls`` is not lossy."""
    return _lossy.get(cls)


def describe_lossy(cls: type) -> str:
    """Why ``cls`` cannot be rebuilt as its own type."""
    return "it is a read-only mapping" if cls in _mappings else "it has its own constructor"


def _register(cls: type, node: Node, where: Iterable[str]) -> None:
    with warnings.catch_warnings():
        # optree notes that a namedtuple subclass is overridden in a namespace: intended.
        warnings.simplefilter("ignore", UserWarning)
        for namespace in where:
            optree.register_pytree_node(cls, *node, namespace=namespace)


# -- subclasses of built-in containers ---------------------------------------------------

_BASES: tuple[type, ...] = (
    collections.defaultdict,
    collections.OrderedDict,
    dict,
    collections.UserDict,
    collections.deque,
    list,
    collections.UserList,
    tuple,
    set,
    frozenset,
)
# Not optree's own nodes: registered themselves, not only their subclasses.
_REGISTERED_BASES = (set, frozenset, collections.UserDict, collections.UserList)


def _own_constructor(cls: type, base: type) -> bool:
    """Whether a class between ``cls`` and ``base`` defines ``__init__`` or ``__new__``."""
    for klass in cls.__mro__:
        if klass is base:
            return False
        if "__init__" in vars(klass) or "__new__" in vars(klass):
            return True
    return False


def _unchanged(old: Iterable[Any], new: list[Any]) -> bool:
    before = list(old)
    return len(before) == len(new) and all(a is b for a, b in zip(before, new, strict=True))


# Frames in these directories are looptoolkit's or optree's, not the caller's.
_INTERNAL_DIRS = (PACKAGE_DIR, os.path.dirname(os.path.abspath(optree.__file__)))


def _lossy_rebuild(obj: Any, old: Iterable[Any], new: list[Any], build: Callable[[], Any]) -> Any:
    """Rebuild a container that cannot be rebuilt as its own type, as its closest base.

    When nothing inside it changed there is nothing to rebuild: the container
    itself comes back, without a warning. Otherwise, under ``strict`` this raises
    (the caller names the path), else it warns and builds the base type.
    """
    if _unchanged(old, new):
        return obj
    cls = type(obj)
    if getattr(state, "strict", False):
        raise Unbuildable(obj)
    if cls in _mappings:
        what = "is a mapping that cannot be rebuilt"
    else:
        what = "has its own constructor and cannot be rebuilt"
    warnings.warn(
        f"{cls.__module__}.{cls.__qualname__} {what}; it was rebuilt as "
        f"{_lossy[cls].__name__} (pass `strict=True` to raise).",
        ContainerRebuildWarning,
        stacklevel=caller_stacklevel(_INTERNAL_DIRS),
    )
    return build()


def _subclass_node(cls: type, base: type) -> Node:
    lossy = _own_constructor(cls, base)
    build: Any = base if lossy else cls
    if lossy:
        _lossy[cls] = base
    # UserDict / UserList keep their items in `.data`.
    skip = (
        frozenset({"data"}) if base in (collections.UserDict, collections.UserList) else frozenset()
    )

    def attributes(obj: Any) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
        # Instance attributes of the subclass (`batch.meta = ...`) come back with it:
        # plain values as they are, anything else (an array) as children.
        attrs = None if lossy else getattr(obj, "__dict__", None)
        if not attrs:
            return None, ()
        children = attribute_children(obj, skip)
        plain = {k: v for k, v in attrs.items() if k not in skip and k not in children}
        return plain or None, children

    def restore(
        new: Any, plain: dict[str, Any] | None, extras: tuple[str, ...], values: list[Any]
    ) -> Any:
        if plain:
            new.__dict__.update(plain)
        for name, value in zip(extras, values, strict=True):
            new.__dict__[name] = value
        return new

    if issubclass(base, (dict, collections.UserDict)):

        def flatten_fn(obj: Any) -> tuple[list[Any], tuple[Any, ...], list[Any]]:
            keys = list(obj.keys())
            factory = getattr(obj, "default_factory", None)
            ref = Ref(obj) if lossy else None
            plain, extras = attributes(obj)
            values = [obj[k] for k in keys] + [getattr(obj, k) for k in extras]
            return values, (keys, factory, plain, extras, ref), [*keys, *extras]

        new_mapping: Callable[[Any, Any], Any] = (
            build if issubclass(build, collections.defaultdict) else lambda _, pairs: build(pairs)
        )

        def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
            keys, factory, plain, extras, ref = meta
            values = list(children)
            items, attrs = values[: len(keys)], values[len(keys) :]

            def make() -> Any:
                pairs = zip(keys, items, strict=True)
                return restore(new_mapping(factory, pairs), plain, extras, attrs)

            if ref is None:
                return make()
            return _lossy_rebuild(ref.obj, (ref.obj[k] for k in keys), items, make)

        return flatten_fn, unflatten_fn

    # The constructor, chosen once: deque(items, maxlen), a namedtuple's _make, or build(items).
    new_sequence: Callable[[list[Any], Any], Any] = (
        build
        if issubclass(build, collections.deque)
        else (lambda items, _: build._make(items))
        if issubclass(build, tuple) and hasattr(build, "_make")
        else (lambda items, _: build(items))
    )

    def flatten_seq(obj: Any) -> tuple[list[Any], Any, None]:
        ref = Ref(obj) if lossy else None
        plain, extras = attributes(obj)
        items = list(obj)
        values = items + [getattr(obj, k) for k in extras]
        return values, (getattr(obj, "maxlen", None), len(items), plain, extras, ref), None

    def unflatten_seq(meta: Any, children: Iterable[Any]) -> Any:
        maxlen, n, plain, extras, ref = meta
        values = list(children)
        items, attrs = values[:n], values[n:]

        def make() -> Any:
            return restore(new_sequence(items, maxlen), plain, extras, attrs)

        if ref is None:
            return make()
        return _lossy_rebuild(ref.obj, ref.obj, items, make)

    return flatten_seq, unflatten_seq


def _mapping_node(cls: type) -> Node:
    """A non-dict mapping (MappingProxyType, a custom Mapping) is rebuilt as a dict."""
    _lossy[cls] = dict
    _mappings.add(cls)

    def flatten_fn(obj: Any) -> tuple[list[Any], tuple[list[Any], Ref], list[Any]]:
        keys = list(obj.keys())
        return [obj[k] for k in keys], (keys, Ref(obj)), keys

    def unflatten_fn(meta: tuple[list[Any], Ref], children: Iterable[Any]) -> Any:
        keys, ref = meta
        values = list(children)
        return _lossy_rebuild(
            ref.obj,
            (ref.obj[k] for k in keys),
            values,
            lambda: dict(zip(keys, values, strict=True)),
        )

    return flatten_fn, unflatten_fn


def _sequence_node(cls: type) -> Node:
    """A sequence that is no list or tuple (a custom ``Sequence``) is rebuilt as a list."""
    _lossy[cls] = list

    def flatten_fn(obj: Any) -> tuple[list[Any], Ref, None]:
        return list(obj), Ref(obj), None

    def unflatten_fn(ref: Ref, children: Iterable[Any]) -> Any:
        values = list(children)
        return _lossy_rebuild(ref.obj, ref.obj, values, lambda: values)

    return flatten_fn, unflatten_fn


# -- namedtuples ------------------------------------------------------------------------


def namedtuple_class(cls: type) -> type | None:
    """The class ``collections.namedtuple`` made, that ``cls`` is or derives from."""
    if not issubclass(cls, tuple):
        return None
    for klass in cls.__mro__:
        if "_fields" in vars(klass) and "_make" in vars(klass):
            return klass
    return None


def needs_registration(cls: type) -> bool:
    """Whether optree's own namedtuple handling would lose something of ``cls``.

    A subclass of a namedtuple class with its own constructor cannot be rebuilt
    as ``cls(*fields)``; one whose instances have a ``__dict__`` would lose their
    instance attributes.
    """
    base = namedtuple_class(cls)
    if base is None or base is cls:
        return False
    return cls.__dictoffset__ != 0 or _own_constructor(cls, base)


def register_namedtuple(cls: type) -> None:
    """Register a namedtuple subclass that ``needs_registration``, in both namespaces."""
    base = namedtuple_class(cls)
    assert base is not None
    _register(cls, _subclass_node(cls, base), _BOTH)


# -- classification ----------------------------------------------------------------------

_NOT_CONTAINERS = (str, bytes, bytearray, memoryview, range, array.array)


def _is_array_type(cls: type) -> bool:
    # Arrays are never containers, whatever abstract base classes they register with.
    return hasattr(cls, "shape") and hasattr(cls, "dtype")


def _node_for(cls: type) -> Node | None:
    """How to flatten ``cls`` (None: it is a leaf); a lossy rule also enters ``_lossy``."""
    if dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls))
        return fields_node(names, issubclass(cls, collections.abc.Mapping))
    attrs = attrs_names(cls)
    if attrs is not None:
        return fields_node(attrs, issubclass(cls, collections.abc.Mapping))
    if issubclass(cls, types.SimpleNamespace):
        return namespace_node()
    for base in _BASES:
        if issubclass(cls, base) and (cls is not base or base in _REGISTERED_BASES):
            return _subclass_node(cls, base)
    if _is_array_type(cls) or issubclass(cls, _NOT_CONTAINERS):
        return None
    if issubclass(cls, collections.abc.Mapping):
        return _mapping_node(cls)
    if issubclass(cls, collections.abc.Sequence):
        return _sequence_node(cls)
    return None


def classify(cls: type) -> tuple[bool, bool]:
    """Register ``cls`` where it is a container: ``(in DATA, in MOVE)``.

    Called once per type, under [`looptoolkit.tree`][looptoolkit.tree]'s lock.
    """
    if is_store_type(cls):  # a store, table or lazy array: the Loader reads or refuses it
        return False, False
    node = container_node(cls)  # a framework's own container (TensorDict, tensorclass)
    if node is not None:
        _register(cls, node, _BOTH)
        return True, True
    node = move_container_node(cls)
    if node is not None:
        _register(cls, node, (MOVE,))
        return False, True
    found = _node_for(cls)
    if found is None:
        return False, False
    lossy = cls in _lossy
    # A container that cannot be rebuilt as its own type but has its own `.to` is
    # moved by it: to_device sees it as a leaf. Looked up on the class: an
    # instance attribute called `to` is not a method.
    moved_by_to = lossy and callable(getattr(cls, "to", None))
    if moved_by_to and issubclass(cls, collections.abc.MutableMapping):
        # Such a batch class is rebuilt by the Loader the way its `.to` treats it:
        # the same object (a shallow copy) with its entries replaced.
        found = _copied_mapping_node(cls, found)
    _register(cls, found, (DATA,) if moved_by_to else _BOTH)
    return True, not moved_by_to


def _copied_mapping_node(cls: type, lossy: Node) -> Node:
    """A mutable mapping rebuilt as a shallow copy of itself with its entries replaced.

    Where the copy cannot be made or take the entries, the ``lossy`` rule applies.
    """
    lossy_flatten, lossy_unflatten = lossy

    def flatten_fn(obj: Any) -> tuple[list[Any], tuple[Any, ...], list[Any]]:
        values, meta, entries = lossy_flatten(obj)
        keys = list(obj.keys())
        return values, (Ref(obj), keys, meta), entries

    def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
        ref, keys, inner = meta
        values = list(children)
        if _unchanged((ref.obj[k] for k in keys), values):
            return ref.obj
        try:
            new = copy.copy(ref.obj)
            for key, value in zip(keys, values, strict=True):
                set_entry(new, key, value)
        except Exception:  # a copy or an assignment the class refuses
            return lossy_unflatten(inner, values)
        return new

    return flatten_fn, unflatten_fn
