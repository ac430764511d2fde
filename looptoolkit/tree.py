"""Pytree helpers on optree: the containers looptoolkit looks into.

First step of every transfer: :func:`flatten` turns a nested batch into a list
of leaves and a treespec that rebuilds the same containers. It hands the leaves
to :mod:`looptoolkit.device` (or the Loader) and gets them back for
``spec.unflatten``.

optree already handles dict (key order kept), OrderedDict, defaultdict, deque,
list, tuple and namedtuples (subclasses too). On first sight this module
registers, in optree's ``"looptoolkit"`` namespace only: dataclasses (frozen too),
frameworks' own containers (TensorDict and tensorclass, whose flattening the
backend provides: ``Backend.container``), and subclasses of the built-in containers. A
container that cannot be rebuilt as its own type (a dict subclass with its own
``__init__``, a read-only mapping, ``torch.Size``) comes back as it is when
nothing inside it changed, and is otherwise rebuilt as its closest base with a
:class:`ContainerRebuildWarning`, or raises under ``strict=True``; an array
inside it is never left behind.
"""

from __future__ import annotations

import collections
import collections.abc
import copy
import dataclasses
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import optree

from looptoolkit.adapters import container_node

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

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ref) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


# Types already classified: registered as nodes, or known to be leaves.
_seen: set[type] = set()
# Types registered as lossy -> the base type they are rebuilt as (strict mode refuses).
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


# Frames in these directories are looptoolkit's or optree's, not the caller's.
_INTERNAL_DIRS = (
    os.path.dirname(os.path.abspath(__file__)),
    os.path.dirname(os.path.abspath(optree.__file__)),
)


def _caller_stacklevel() -> int:
    """``stacklevel`` that points a warning at the first frame outside looptoolkit.

    The warning is raised inside optree's unflatten callback, under ``to_device``
    or ``unflatten``; the user's line that called them is what to show.
    """
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


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


def _unchanged(old: Iterable[Any], new: list[Any]) -> bool:
    before = list(old)
    return len(before) == len(new) and all(a is b for a, b in zip(before, new, strict=True))


def _lossy_rebuild(obj: Any, old: Iterable[Any], new: list[Any], build: Callable[[], Any]) -> Any:
    """Rebuild a container that cannot be rebuilt as its own type, as its closest base.

    When nothing inside it changed there is nothing to rebuild: the container itself
    comes back, without a warning. Otherwise, under ``strict`` this raises (the
    caller names the path), else it warns and builds the base type.
    """
    if _unchanged(old, new):
        return obj
    cls = type(obj)
    if getattr(_state, "strict", False):
        raise _Unbuildable(obj)
    if cls in _mappings:
        what = "is a mapping that cannot be rebuilt"
    else:
        what = "has its own constructor and cannot be rebuilt"
    warnings.warn(
        f"{cls.__module__}.{cls.__qualname__} {what}; it was rebuilt as "
        f"{_lossy[cls].__name__} (pass `strict=True` to raise).",
        ContainerRebuildWarning,
        stacklevel=_caller_stacklevel(),
    )
    return build()


def _register_subclass(cls: type, base: type) -> None:
    lossy = _own_constructor(cls, base)
    build: Any = base if lossy else cls
    if lossy:
        _lossy[cls] = base
    mapping = issubclass(base, dict)

    def attributes(obj: Any) -> dict[str, Any] | None:
        # Instance attributes of the subclass (`batch.meta = ...`) come back with it.
        return None if lossy else getattr(obj, "__dict__", None) or None

    def restore(new: Any, attrs: dict[str, Any] | None) -> Any:
        if attrs:
            new.__dict__.update(attrs)
        return new

    if mapping:

        def flatten_fn(obj: Any) -> tuple[list[Any], tuple[Any, ...], list[Any]]:
            keys = list(obj.keys())
            factory = getattr(obj, "default_factory", None)
            ref = _Ref(obj) if lossy else None
            return [obj[k] for k in keys], (keys, factory, attributes(obj), ref), keys

        def unflatten_fn(meta: tuple[Any, ...], children: Iterable[Any]) -> Any:
            keys, factory, attrs, ref = meta
            values = list(children)

            def make() -> Any:
                items = zip(keys, values, strict=True)
                if issubclass(build, collections.defaultdict):
                    return restore(build(factory, items), attrs)
                return restore(build(items), attrs)

            if ref is None:
                return make()
            return _lossy_rebuild(ref.obj, (ref.obj[k] for k in keys), values, make)

    else:

        def flatten_fn(obj: Any) -> tuple[list[Any], Any, None]:  # type: ignore[misc]
            ref = _Ref(obj) if lossy else None
            return list(obj), (getattr(obj, "maxlen", None), attributes(obj), ref), None

        def unflatten_fn(meta: Any, children: Iterable[Any]) -> Any:  # type: ignore[misc]
            maxlen, attrs, ref = meta
            values = list(children)

            def make() -> Any:
                if issubclass(build, collections.deque):
                    return restore(build(values, maxlen), attrs)
                if issubclass(build, tuple) and hasattr(build, "_make"):  # a namedtuple
                    return restore(build._make(values), attrs)
                return restore(build(values), attrs)

            if ref is None:
                return make()
            return _lossy_rebuild(ref.obj, ref.obj, values, make)

    _register(cls, flatten_fn, unflatten_fn)


# Non-dict mappings registered by _register_mapping (their warning says so).
_mappings: set[type] = set()


def _register_mapping(cls: type) -> None:
    """A non-dict mapping (MappingProxyType, a custom Mapping) is rebuilt as a dict."""
    _lossy[cls] = dict
    _mappings.add(cls)

    def flatten_fn(obj: Any) -> tuple[list[Any], tuple[list[Any], _Ref], list[Any]]:
        keys = list(obj.keys())
        return [obj[k] for k in keys], (keys, _Ref(obj)), keys

    def unflatten_fn(meta: tuple[list[Any], _Ref], children: Iterable[Any]) -> Any:
        keys, ref = meta
        values = list(children)
        return _lossy_rebuild(
            ref.obj,
            (ref.obj[k] for k in keys),
            values,
            lambda: dict(zip(keys, values, strict=True)),
        )

    _register(cls, flatten_fn, unflatten_fn)


class _Unbuildable(Exception):
    def __init__(self, obj: Any) -> None:
        super().__init__(type(obj))
        self.obj = obj


# -- classification --------------------------------------------------------------


def _classify(cls: type) -> bool:
    """Register ``cls`` as a node when it is a container; True when it was registered."""
    node = container_node(cls)  # a framework's own container (TensorDict, tensorclass)
    if node is not None:
        _register(cls, *node)
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


def flatten(tree: Any) -> tuple[list[Any], optree.PyTreeSpec]:
    """Leaves and treespec of ``tree`` in looptoolkit's optree namespace.

    ``None`` is kept as a leaf so that it comes back where it was.
    """
    leaves, spec, _ = flatten_typed(tree)
    return leaves, spec


def flatten_typed(tree: Any) -> tuple[list[Any], optree.PyTreeSpec, set[type]]:
    """:func:`flatten`, plus the set of the leaves' types (computed anyway, reused by callers)."""
    while True:
        leaves, spec = optree.tree_flatten(tree, none_is_leaf=True, namespace=NAMESPACE)
        types = set(map(type, leaves))
        # Containers optree does not know yet are leaves now: register, go again.
        if types <= _seen or not _new_container_types(types):
            return leaves, spec, types


def unflatten(
    spec: optree.PyTreeSpec, leaves: Iterable[Any], *, strict: bool = False, tree: Any = None
) -> Any:
    """Rebuild the containers of ``spec`` around ``leaves``.

    A container that cannot be rebuilt as its own type (a dict subclass with its
    own ``__init__``) comes back as it is when nothing inside it changed; else it is
    rebuilt as its closest base with a :class:`ContainerRebuildWarning`, or, under
    ``strict=True``, raises.

    Args:
        spec: the treespec from :func:`flatten`.
        leaves: the new leaves, in the order of :func:`flatten`'s.
        strict: raise instead of warning.
        tree: the tree ``spec`` came from, to name the container's key path.

    Raises:
        TypeError: under ``strict=True``, a container had to be rebuilt as another type.
    """
    _state.strict = strict
    try:
        leaves = list(leaves)
        try:
            return optree.tree_unflatten(spec, leaves)
        except TypeError:
            # optree rebuilds namedtuples as cls(*fields); a subclass with its own
            # constructor refuses that. Register such subclasses as lossy, retry once.
            if tree is None or not _register_namedtuple_subclasses(tree):
                raise
            _, spec = flatten(tree)
            return optree.tree_unflatten(spec, leaves)
    except _Unbuildable as e:
        _state.strict = False
        cls = type(e.obj)
        path = _path_of(tree, e.obj) if tree is not None else f"a {cls.__name__} in the batch"
        reason = "it is a read-only mapping" if cls in _mappings else "it has its own constructor"
        raise TypeError(
            f"{path} is a {cls.__module__}.{cls.__qualname__}, which cannot be rebuilt as its "
            f"own type ({reason}); with `strict=False` it is rebuilt as "
            f"{_lossy[cls].__name__} with a warning."
        ) from None
    finally:
        _state.strict = False


def _namedtuple_class(cls: type) -> type | None:
    """The class ``collections.namedtuple`` made, that ``cls`` is or derives from."""
    if not issubclass(cls, tuple):
        return None
    for klass in cls.__mro__:
        if "_fields" in vars(klass) and "_make" in vars(klass):
            return klass
    return None


def _unbuildable_namedtuple(x: Any) -> bool:
    cls = type(x)
    base = _namedtuple_class(cls)
    return base is not None and base is not cls and _own_constructor(cls, base)


def _register_namedtuple_subclasses(tree: Any) -> bool:
    """Register namedtuple subclasses with their own constructor found in ``tree``."""
    found, _ = optree.tree_flatten(
        tree, is_leaf=_unbuildable_namedtuple, none_is_leaf=True, namespace=NAMESPACE
    )
    classes = {type(x) for x in found if _unbuildable_namedtuple(x)} - set(_lossy)
    with _lock, warnings.catch_warnings():
        # optree notes that a namedtuple subclass is overridden in our namespace: intended.
        warnings.simplefilter("ignore", UserWarning)
        for cls in classes:
            base = _namedtuple_class(cls)
            assert base is not None
            _register_subclass(cls, base)
    return bool(classes)


def leaf_paths(spec: optree.PyTreeSpec, root: str = "batch") -> list[str]:
    """Key paths of the leaves of ``spec`` as code, e.g. ``batch['im']['image']``."""
    return [accessor.codify(root) for accessor in spec.accessors()]


def _path_of(tree: Any, obj: Any, root: str = "batch") -> str:
    """Key path of the container ``obj`` inside ``tree``."""
    leaves, spec = optree.tree_flatten(
        tree, is_leaf=lambda x: x is obj, none_is_leaf=True, namespace=NAMESPACE
    )
    for leaf, path in zip(leaves, leaf_paths(spec, root), strict=True):
        if leaf is obj:
            return path
    return root
