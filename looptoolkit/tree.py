"""Pytree helpers on optree: the containers looptoolkit looks into.

First step of every transfer: :func:`flatten` turns a nested batch into a list
of leaves and a treespec that rebuilds the same containers. It hands the leaves
to :mod:`looptoolkit.device` (or the Loader) and gets them back for
``spec.unflatten``.

optree already handles dict (key order kept), OrderedDict, defaultdict, deque,
list, tuple and namedtuples (subclasses too). On first sight this module
registers, in optree's ``"looptoolkit"`` namespace only: dataclasses (frozen too),
TensorDict and tensorclass, and subclasses of the built-in containers. A
container that cannot be rebuilt as its own type (a dict subclass with its own
``__init__``, a read-only mapping) is rebuilt as its closest base with a
:class:`ContainerRebuildWarning`, or raises under ``strict=True``; an array
inside it is never left behind.
"""

from __future__ import annotations

import collections
import collections.abc
import copy
import dataclasses
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import optree

__all__ = [
    "NAMESPACE",
    "ContainerRebuildWarning",
    "flatten",
    "flatten_typed",
    "leaf_paths",
    "unflatten",
]

NAMESPACE = "looptoolkit"


class ContainerRebuildWarning(UserWarning):
    """A container could not be rebuilt as its own type and became its closest base."""


class _Ref:
    """Carries an object as treespec metadata, compared by identity.

    Dataclass equality would compare arrays field by field; identity is what
    rebuilding needs.
    """

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ref) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


# Types already classified: registered as nodes, or known to be leaves.
_seen: set[type] = set()
# Types registered as lossy (rebuilt as a base type); strict mode refuses them.
_lossy: dict[type, type] = {}
_state = threading.local()
_lock = threading.Lock()


def _register(cls: type, flatten_fn: Callable[..., Any], unflatten_fn: Callable[..., Any]) -> None:
    optree.register_pytree_node(cls, flatten_fn, unflatten_fn, namespace=NAMESPACE)


# -- dataclasses ---------------------------------------------------------------


class _Unset:
    """Stands for a dataclass field that has no value (``init=False``, never assigned)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _register_dataclass(cls: type) -> None:
    names = tuple(f.name for f in dataclasses.fields(cls))

    def flatten_fn(obj: Any) -> tuple[tuple[Any, ...], _Ref, tuple[str, ...]]:
        return tuple(getattr(obj, n, _UNSET) for n in names), _Ref(obj), names

    def unflatten_fn(ref: _Ref, children: Iterable[Any]) -> Any:
        # A shallow copy keeps frozen-ness, init=False fields and any extra
        # attributes without running __init__/__post_init__ again.
        new = copy.copy(ref.obj)
        for name, value in zip(names, children, strict=True):
            if value is not _UNSET:
                object.__setattr__(new, name, value)
        return new

    _register(cls, flatten_fn, unflatten_fn)


# -- TensorDict / tensorclass (only when tensordict is already imported) -------


def _common_device(values: Iterable[Any]) -> Any:
    devices = {v.device for v in values if hasattr(v, "device") and hasattr(v, "is_pinned")}
    return devices.pop() if len(devices) == 1 else None


def _register_tensordict(cls: type) -> None:
    def flatten_fn(td: Any) -> tuple[list[Any], tuple[Any, ...], list[str]]:
        keys = list(td.keys())
        return [td.get(k) for k in keys], (keys, td.batch_size), keys

    def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
        keys, batch_size = meta
        values = list(children)
        return cls(
            dict(zip(keys, values, strict=True)),
            batch_size=batch_size,
            device=_common_device(values),
        )

    _register(cls, flatten_fn, unflatten_fn)


def _register_tensorclass(cls: Any) -> None:
    def flatten_fn(obj: Any) -> tuple[list[Any], Any, list[str]]:
        return [obj._tensordict], _Ref(obj), ["_tensordict"]

    def unflatten_fn(ref: _Ref, children: Iterable[Any]) -> Any:
        (td,) = children
        new = copy.copy(ref.obj)
        object.__setattr__(new, "_tensordict", td)
        return new

    _register(cls, flatten_fn, unflatten_fn)


# -- subclasses of built-in containers -------------------------------------------

_BASES: tuple[type, ...] = (
    collections.defaultdict,
    collections.OrderedDict,
    dict,
    collections.deque,
    list,
    tuple,
)


def _own_constructor(cls: type, base: type) -> bool:
    """Whether a class between ``cls`` and ``base`` defines ``__init__`` or ``__new__``."""
    for klass in cls.__mro__:
        if klass is base:
            return False
        if "__init__" in vars(klass) or "__new__" in vars(klass):
            return True
    return False


def _register_subclass(cls: type, base: type) -> None:
    lossy = _own_constructor(cls, base)
    build: Any = base if lossy else cls
    if lossy:
        _lossy[cls] = base
    mapping = issubclass(base, dict)

    def warn() -> None:
        if lossy:
            warnings.warn(
                f"{cls.__module__}.{cls.__qualname__} has its own constructor and cannot be "
                f"rebuilt; it was rebuilt as {base.__name__} (pass `strict=True` to raise).",
                ContainerRebuildWarning,
                stacklevel=4,
            )

    def attributes(obj: Any) -> dict[str, Any] | None:
        # Instance attributes of the subclass (`batch.meta = ...`) come back with it.
        return None if lossy else getattr(obj, "__dict__", None) or None

    def restore(new: Any, attrs: dict[str, Any] | None) -> Any:
        if attrs:
            new.__dict__.update(attrs)
        return new

    if mapping:

        def flatten_fn(obj: Any) -> tuple[list[Any], tuple[Any, ...], list[Any]]:
            if getattr(_state, "strict", False) and lossy:
                raise _Unbuildable(cls)
            keys = list(obj.keys())
            factory = getattr(obj, "default_factory", None)
            return [obj[k] for k in keys], (keys, factory, attributes(obj)), keys

        def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
            keys, factory, attrs = meta
            warn()
            items = zip(keys, children, strict=True)
            if issubclass(build, collections.defaultdict):
                return restore(build(factory, items), attrs)
            return restore(build(items), attrs)

    else:

        def flatten_fn(obj: Any) -> tuple[list[Any], Any, None]:  # type: ignore[misc]
            if getattr(_state, "strict", False) and lossy:
                raise _Unbuildable(cls)
            return list(obj), (getattr(obj, "maxlen", None), attributes(obj)), None

        def unflatten_fn(meta: Any, children: Iterable[Any]) -> Any:  # type: ignore[misc]
            maxlen, attrs = meta
            warn()
            if issubclass(build, collections.deque):
                return restore(build(children, maxlen), attrs)
            return restore(build(children), attrs)

    _register(cls, flatten_fn, unflatten_fn)


def _register_mapping(cls: type) -> None:
    """A non-dict mapping (MappingProxyType, a custom Mapping) is rebuilt as a dict."""
    _lossy[cls] = dict

    def flatten_fn(obj: Any) -> tuple[list[Any], list[Any], list[Any]]:
        if getattr(_state, "strict", False):
            raise _Unbuildable(cls)
        keys = list(obj.keys())
        return [obj[k] for k in keys], keys, keys

    def unflatten_fn(keys: list[Any], children: Iterable[Any]) -> dict[Any, Any]:
        warnings.warn(
            f"{cls.__module__}.{cls.__qualname__} is a mapping that cannot be rebuilt; "
            "it was rebuilt as dict (pass `strict=True` to raise).",
            ContainerRebuildWarning,
            stacklevel=4,
        )
        return dict(zip(keys, children, strict=True))

    _register(cls, flatten_fn, unflatten_fn)


class _Unbuildable(Exception):
    def __init__(self, cls: type) -> None:
        super().__init__(cls)
        self.cls = cls


# -- classification --------------------------------------------------------------


def _classify(cls: type) -> bool:
    """Register ``cls`` as a node when it is a container; True when it was registered."""
    td = sys.modules.get("tensordict")
    if td is not None:
        if cls is td.TensorDict:
            _register_tensordict(cls)
            return True
        if td.is_tensorclass(cls):
            _register_tensorclass(cls)
            return True
    if dataclasses.is_dataclass(cls):
        _register_dataclass(cls)
        return True
    for base in _BASES:
        if issubclass(cls, base) and cls is not base:
            _register_subclass(cls, base)
            return True
    if issubclass(cls, collections.abc.Mapping) and not _is_array_type(cls):
        _register_mapping(cls)
        return True
    return False


def _is_array_type(cls: type) -> bool:
    # Arrays are never containers, whatever abstract base classes they register with.
    return hasattr(cls, "shape") and hasattr(cls, "dtype")


def _new_container_types(types: set[type]) -> bool:
    unseen = types - _seen
    if not unseen:
        return False
    registered = False
    with _lock:
        for cls in unseen:
            if cls in _seen:
                continue
            if _classify(cls):
                registered = True
            _seen.add(cls)
    return registered


def flatten(tree: Any, *, strict: bool = False) -> tuple[list[Any], optree.PyTreeSpec]:
    """Leaves and treespec of ``tree`` in looptoolkit's optree namespace.

    ``None`` is kept as a leaf so that it comes back where it was.

    Raises:
        TypeError: under ``strict=True``, a container that cannot be rebuilt as its own
            type; the message names its key path.
    """
    leaves, spec, _ = flatten_typed(tree, strict=strict)
    return leaves, spec


def flatten_typed(
    tree: Any, *, strict: bool = False
) -> tuple[list[Any], optree.PyTreeSpec, set[type]]:
    """:func:`flatten`, plus the set of the leaves' types (computed anyway, reused by callers).

    Raises:
        TypeError: as :func:`flatten`.
    """
    _state.strict = strict
    try:
        while True:
            leaves, spec = optree.tree_flatten(tree, none_is_leaf=True, namespace=NAMESPACE)
            types = set(map(type, leaves))
            # Containers optree does not know yet are leaves now: register, go again.
            if types <= _seen or not _new_container_types(types):
                return leaves, spec, types
    except _Unbuildable as e:
        _state.strict = False
        path = _path_of_type(tree, e.cls)
        raise TypeError(
            f"{path} is a {e.cls.__module__}.{e.cls.__qualname__}, which cannot be rebuilt as "
            f"its own type (it has its own constructor); with `strict=False` it is rebuilt as "
            f"{_lossy[e.cls].__name__} with a warning."
        ) from None
    finally:
        _state.strict = False


def unflatten(spec: optree.PyTreeSpec, leaves: Iterable[Any]) -> Any:
    """Rebuild the containers of ``spec`` around ``leaves``."""
    return optree.tree_unflatten(spec, leaves)


def leaf_paths(spec: optree.PyTreeSpec, root: str = "batch") -> list[str]:
    """Key paths of the leaves of ``spec`` as code, e.g. ``batch['im']['image']``."""
    return [accessor.codify(root) for accessor in spec.accessors()]


def _path_of_type(tree: Any, cls: type, root: str = "batch") -> str:
    leaves, spec = optree.tree_flatten(
        tree, is_leaf=lambda x: type(x) is cls, none_is_leaf=True, namespace=NAMESPACE
    )
    for leaf, path in zip(leaves, leaf_paths(spec, root), strict=True):
        if type(leaf) is cls:
            return path
    return root
