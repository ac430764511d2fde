"""Pytree helpers on optree: the containers looptoolkit looks into.

First step of every transfer: [`flatten`][looptoolkit.device._tree.flatten] turns a nested batch
into a list of leaves and a treespec that rebuilds the same containers. It hands the leaves
to [`looptoolkit.device`][looptoolkit.device] (or the Loader) and gets them back for
``spec.unflatten``.

optree already handles dict (key order kept), OrderedDict, defaultdict, deque,
list, tuple and namedtuples. On first sight this module registers, in optree's
``"looptoolkit"`` namespaces only, every other container a batch may hold (the
rules are in [`looptoolkit.device._containers`][looptoolkit.device._containers]): dataclasses
(frozen too, and those that are also mappings), attrs classes, ``SimpleNamespace``, frameworks' own
containers (TensorDict and tensorclass: ``Backend.container``), sets, and
subclasses of the built-in containers, namedtuple subclasses with instance
attributes or their own constructor included. A container that cannot be
rebuilt as its own type (a dict subclass with its own ``__init__``, a read-only
mapping, ``torch.Size``) comes back as it is when nothing inside it changed, and
is otherwise rebuilt as its closest base with a
[`ContainerRebuildWarning`][looptoolkit.ContainerRebuildWarning], or raises under ``strict=True``;
an array inside it is never left behind.

Two views of one tree: the Loader's ([`NAMESPACE`][looptoolkit.device._tree.NAMESPACE]) looks into
every container; ``to_device``'s (``flatten(..., move=True)``) leaves a container that
cannot be rebuilt but has its own ``.to`` (a tokenizer's ``BatchEncoding``) as a
leaf, for its ``.to`` to move it, and also looks into containers whose parts are
samples rather than columns (a lazily stacked TensorDict).
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

import optree

from looptoolkit.device import _containers as _containers
from looptoolkit.device._containers import ContainerRebuildWarning, Unbuildable

__all__ = [
    "MOVE_NAMESPACE",
    "NAMESPACE",
    "ContainerRebuildWarning",
    "flatten",
    "flatten_typed",
    "leaf_paths",
    "looks_into",
    "unflatten",
]

NAMESPACE = _containers.DATA
MOVE_NAMESPACE = _containers.MOVE

# Types already classified (registered as nodes, or known to be leaves), and the
# types that are nodes in each namespace. A type enters `_nodes` once optree knows
# it, and `_seen` after that: a thread that finds a leaf of a type in `_nodes`
# flattens again, whichever thread registered it.
_seen: set[type] = set()
_nodes: dict[str, set[type]] = {NAMESPACE: set(), MOVE_NAMESPACE: set()}
# Namedtuple classes looked at, and those registered (see _containers.needs_registration).
_namedtuples_seen: set[type] = set()
_lock = threading.Lock()

# Specs made of optree's own nodes and plain namedtuples only: nothing in them to
# register. Their metadata holds keys and classes, never the tree's objects.
_plain_specs: dict[optree.PyTreeSpec, None] = {}
_PLAIN_SPECS_MAX = 256
_BUILTIN_NODES = frozenset(
    {dict, list, tuple, collections.OrderedDict, collections.defaultdict, collections.deque}
)


def _classify(types: set[type]) -> None:
    with _lock:
        for cls in types - _seen:
            data, move = _containers.classify(cls)
            if data:
                _nodes[NAMESPACE].add(cls)
            if move:
                _nodes[MOVE_NAMESPACE].add(cls)
            _seen.add(cls)


def _register_namedtuples(spec: optree.PyTreeSpec) -> bool:
    """Register the namedtuple subclasses in ``spec`` that optree would rebuild lossily.

    True when ``spec`` holds one as a plain namedtuple node: flatten again.
    """
    if spec.num_nodes == spec.num_leaves:  # a single leaf
        return False
    try:
        if spec in _plain_specs:
            return False
    except TypeError:  # metadata that cannot be hashed: look at it every time
        pass
    native: set[type] = set()
    plain = True

    def visit(node_type: type, node_data: Any, children: Any) -> None:
        nonlocal plain
        if node_data is node_type:  # optree's own namedtuple node
            native.add(node_type)
        elif node_type not in _BUILTIN_NODES:
            plain = False

    spec.walk([None] * spec.num_leaves, visit, None)
    fresh = native - _namedtuples_seen
    if fresh:
        with _lock:
            for cls in fresh:
                if _containers.needs_registration(cls):
                    _containers.register_namedtuple(cls)
                    _nodes[NAMESPACE].add(cls)
                    _nodes[MOVE_NAMESPACE].add(cls)
                _namedtuples_seen.add(cls)
    if not native.isdisjoint(_nodes[spec.namespace or NAMESPACE]):
        return True
    if plain:
        if len(_plain_specs) >= _PLAIN_SPECS_MAX:
            _plain_specs.clear()
        with contextlib.suppress(TypeError):  # metadata that cannot be hashed
            _plain_specs[spec] = None
    return False


def looks_into(cls: type) -> bool:
    """Whether the Loader's view (``NAMESPACE``) looks into instances of ``cls``."""
    return cls in _nodes[NAMESPACE]


def flatten(
    tree: Any, *, move: bool = False, is_leaf: Callable[[Any], bool] | None = None
) -> tuple[list[Any], optree.PyTreeSpec]:
    """Leaves and treespec of ``tree`` in looptoolkit's optree namespace.

    ``None`` is kept as a leaf so that it comes back where it was. ``move``:
    ``to_device``'s view (see the module's docstring). ``is_leaf``: nodes not looked into
    (a list of a million token lists is one leaf, not its tokens).
    """
    leaves, spec, _ = flatten_typed(tree, move=move, is_leaf=is_leaf)
    return leaves, spec


def flatten_typed(
    tree: Any, *, move: bool = False, is_leaf: Callable[[Any], bool] | None = None
) -> tuple[list[Any], optree.PyTreeSpec, set[type]]:
    """``flatten``, plus the set of the leaves' types (computed anyway, reused by callers)."""
    namespace = MOVE_NAMESPACE if move else NAMESPACE
    nodes = _nodes[namespace]
    while True:
        leaves, spec = optree.tree_flatten(
            tree, is_leaf=is_leaf, none_is_leaf=True, namespace=namespace
        )
        types = set(map(type, leaves))
        if is_leaf is not None:
            types.discard(list)  # a list is a leaf only where `is_leaf` made it one
        if not types <= _seen:
            _classify(types)
        # A leaf that is a container (registered here or by another thread since
        # this flatten began) would be left behind: flatten again.
        if types.isdisjoint(nodes) and not _register_namedtuples(spec):
            return leaves, spec, types


def unflatten(
    spec: optree.PyTreeSpec,
    leaves: Iterable[Any],
    *,
    strict: bool = False,
    tree: Any = None,
    root: str = "batch",
) -> Any:
    """Rebuild the containers of ``spec`` around ``leaves``.

    A container that cannot be rebuilt as its own type (a dict subclass with its
    own ``__init__``) comes back as it is when nothing inside it changed; else it is
    rebuilt as its closest base with a
    [`ContainerRebuildWarning`][looptoolkit.ContainerRebuildWarning], or, under ``strict=True``,
    raises.

    Args:
        spec: the treespec from [`flatten`][looptoolkit.device._tree.flatten].
        leaves: the new leaves, in the order of [`flatten`][looptoolkit.device._tree.flatten]'s.
        strict: raise instead of warning.
        tree: the tree ``spec`` came from, to name the container's key path.
        root: the name of ``tree`` in that key path.

    Raises:
        TypeError: under ``strict=True``, a container had to be rebuilt as another type.
    """
    _containers.state.strict = strict
    try:
        return optree.tree_unflatten(spec, list(leaves))
    except Unbuildable as e:
        cls = type(e.obj)
        if tree is not None:
            path = _path_of(tree, e.obj, spec.namespace or NAMESPACE, root)
        else:
            path = f"a {cls.__name__} in the batch"
        base = _containers.lossy_base(cls)
        assert base is not None
        raise TypeError(
            f"{path} is a {cls.__module__}.{cls.__qualname__}, which cannot be rebuilt as its "
            f"own type ({_containers.describe_lossy(cls)}); with `strict=False` it is rebuilt "
            f"as {base.__name__} with a warning."
        ) from None
    finally:
        _containers.state.strict = False


def leaf_paths(spec: optree.PyTreeSpec, root: str = "batch") -> list[str]:
    """Key paths of the leaves of ``spec`` as code, e.g. ``batch['im']['image']``."""
    return [accessor.codify(root) for accessor in spec.accessors()]


def _path_of(tree: Any, obj: Any, namespace: str, root: str) -> str:
    """Key path of the container ``obj`` inside ``tree``."""
    leaves, spec = optree.tree_flatten(
        tree, is_leaf=lambda x: x is obj, none_is_leaf=True, namespace=namespace
    )
    for leaf, path in zip(leaves, leaf_paths(spec, root), strict=True):
        if leaf is obj:
            return path
    return root
