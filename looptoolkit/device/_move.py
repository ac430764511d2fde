"""Device transfer: ``to_device`` moves every array leaf of a pytree to a device.

Step after the gather: it takes a batch (any nesting of containers, see
[`looptoolkit.tree`][looptoolkit.tree]), sends each framework's leaves to that framework's
backend in one call (so a backend can pack many small leaves into one copy, or
put a whole list with one ``jax.device_put``), and rebuilds the same containers
around the moved leaves. The Loader's prefetch queue receives the result.

The dtype cast runs on whichever side of the copy moves fewer bytes: a cast
that shrinks the itemsize (float32 -> float16) runs before the copy, one that
grows it (uint8 -> float16) after it, on the destination.
"""

from __future__ import annotations

import collections.abc
import io
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from looptoolkit._common.dtypes import DtypePolicy, cast_before_copy, dtype_name
from looptoolkit._common.errors import TransferError
from looptoolkit._common.target import Target, parse_device_string
from looptoolkit.adapters import (
    DEVICE_HOMES,
    Backend,
    backend_of,
    get_backend,
    native_target,
    object_backend,
)
from looptoolkit.device import _tree as _tree

__all__ = [
    "Target",
    "TransferError",
    "cast_before_copy",
    "describe_leaf",
    "dtype_name",
    "mover",
    "parse_device",
    "to_device",
    "transfer",
]


def parse_device(device: Any) -> Target:
    """Parse a device string, ``torch.device``, ``jax.Device`` or ``jax.sharding.Sharding``.

    Args:
        device: what the caller passed as ``device``.

    Returns:
        The parsed [`Target`][looptoolkit._common.target.Target].

    Raises:
        ValueError: an unknown device string.
        TypeError: ``device`` is of no supported kind.

    Examples:
        >>> parse_device("cuda:1")
        Target(spec='cuda:1', platform='cuda', index=1, home='torch', native=None)
        >>> parse_device("/GPU:0").home
        'tf'
    """
    if isinstance(device, Target):
        return device
    if isinstance(device, str):
        return parse_device_string(device, DEVICE_HOMES)
    target = native_target(device)
    if target is None:
        raise TypeError(
            "`device` must be a string, a torch.device, a jax.Device or a "
            f"jax.sharding.Sharding, got {type(device).__name__}."
        )
    return target


# -- to_device ---------------------------------------------------------------------


def describe_leaf(leaf: Any) -> str:
    """``"torch float32 [2, 3]"``: the leaf's framework, dtype name and shape."""
    shape = tuple(getattr(leaf, "shape", ()))
    backend = backend_of(leaf)
    name = backend.dtype_name(leaf) if backend is not None else type(leaf).__name__
    return f"{type(leaf).__module__.split('.')[0]} {name} {list(shape)}"


def transfer(
    backend: Backend,
    leaves: Sequence[Any],
    target: Target,
    casts: Sequence[str | None] | None,
    non_blocking: bool | None = None,
    pack: bool | None = None,
) -> list[Any]:
    """``backend.move`` of ``leaves``, each cast to ``casts[i]`` on the cheaper side of the copy.

    ``casts`` None: no leaf is cast (one ``move``, nothing else per leaf).

    A cast that shrinks the itemsize (float32 -> float16) runs before the move,
    where the leaf is; one that grows it (uint8 -> float16) after, on the
    destination: both through ``backend.cast``, so no backend repeats the rule.

    Raises:
        ValueError: ``casts`` and ``leaves`` differ in length.
    """
    if casts is None:
        return backend.move(leaves, target, non_blocking, pack)
    if len(casts) != len(leaves):
        raise ValueError(f"{len(leaves)} leaves but {len(casts)} casts.")
    if not any(casts):
        return backend.move(leaves, target, non_blocking, pack)
    staged = list(leaves)
    after = list(casts)
    for i, cast in enumerate(casts):
        if cast is not None:
            source = backend_of(staged[i])
            assert source is not None  # only arrays are moved
            if cast_before_copy(source.dtype_name(staged[i]), cast):
                staged[i] = backend.cast(staged[i], cast)
                after[i] = None
    moved = backend.move(staged, target, non_blocking, pack)
    return [
        x if cast is None else backend.cast(x, cast) for x, cast in zip(moved, after, strict=True)
    ]


def _locate_failure(
    backend: Backend,
    leaves: Sequence[Any],
    paths: Sequence[str],
    target: Target,
    casts: Sequence[str | None] | None,
    non_blocking: bool | None,
    error: Exception,
) -> TransferError:
    """Retry leaf by leaf to name the leaf that failed."""
    if casts is None:
        casts = [None] * len(leaves)
    for leaf, path, cast in zip(leaves, paths, casts, strict=True):
        try:
            transfer(backend, [leaf], target, [cast], non_blocking, False)
        except Exception as e:
            what = f" as {cast}" if cast else ""
            return TransferError(
                f"cannot move {path} ({describe_leaf(leaf)}) to {target}{what}: {e}", path
            )
    joined = ", ".join(paths[:4]) + (", ..." if len(paths) > 4 else "")
    return TransferError(f"cannot move {joined} to {target}: {error}", paths[0] if paths else None)


# What happens to a leaf of a given type, per (type, home of NumPy leaves): the
# backend that moves it, _OBJECT (it has its own `.to`), _UNREADABLE (an iterator
# or a view, which may hold arrays that cannot be reached without consuming it),
# or None (returned as is). Deciding once per type keeps the per-leaf work of a
# call to list comprehensions.
_OBJECT = "object"
_UNREADABLE = "unreadable"
_UNKNOWN = "unknown"
_routes: dict[tuple[type, str | None], Backend | str | None] = {}


def _unreadable(cls: type) -> bool:
    """An iterator (a generator, ``map``, ``zip``) or a dict view, but not a file."""
    return issubclass(cls, (collections.abc.Iterator, collections.abc.MappingView)) and not (
        issubclass(cls, io.IOBase)
    )


def _route(leaf: Any, home: str | None) -> Backend | str | None:
    cls = type(leaf)
    route = _routes.get((cls, home), _UNKNOWN)
    if route is not _UNKNOWN:
        return route
    backend = backend_of(leaf)
    decided: Backend | str | None
    if backend is None:
        # Looked up on the class: an instance attribute called `to` is not a method.
        if callable(getattr(cls, "to", None)):
            decided = _OBJECT
        elif _unreadable(cls):
            decided = _UNREADABLE
        else:
            decided = None
    elif backend.name == "numpy" and home is not None:
        decided = get_backend(home)
    else:
        decided = backend
    _routes[(cls, home)] = decided
    return decided


def _casts(policy: DtypePolicy, items: Sequence[Any]) -> list[str | None]:
    """Target dtype of each leaf, decided once per distinct source dtype."""
    memo: dict[Any, str | None] = {}
    out: list[str | None] = []
    for x in items:
        dt = x.dtype
        try:
            cast = memo[dt]
        except KeyError:
            source = backend_of(x)
            assert source is not None  # only arrays reach here
            cast = memo[dt] = policy(source.dtype_name(x))
        out.append(cast)
    return out


def _move_object(obj: Any, device: Any, target: Target) -> Any:
    """``obj.to(device)``; a framework's objects get that framework's device for the target."""
    backend = object_backend(obj)
    if backend is not None:
        # An nn.Module or a TensorDict does not understand "/CPU:0" or a jax.Device.
        return obj.to(backend.resolve_device(target))
    # What the user passed (the Loader passes its parsed Target: it gets that back).
    return obj.to(target.spec if isinstance(device, Target) else device)


def to_device(
    tree: Any,
    device: Any,
    *,
    dtype: Any = None,
    non_blocking: bool | None = None,
    pack: bool | None = None,
    strict: bool = False,
    skip_keys: Any = None,
) -> Any:
    """Move every array leaf of ``tree`` to ``device``; everything else is returned as is.

    Args:
        tree: any nesting of dict, OrderedDict, defaultdict, deque, list, tuple,
            set, namedtuple, dataclass, attrs class, ``SimpleNamespace``,
            TensorDict and tensorclass (their subclasses too), with torch, NumPy,
            JAX or tf arrays as leaves. Objects with their own ``.to`` (an
            ``nn.Module``, a tokenizer's ``BatchEncoding``) are moved by it.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"/GPU:0"``, a ``torch.device``,
            a ``jax.Device`` or a ``jax.sharding.Sharding``. Each framework's leaves
            stay in their framework; NumPy leaves go to the framework the device
            names (``"cuda"`` and torch devices: torch; JAX devices and shardings,
            ``"gpu"``, ``"tpu"``: JAX; ``"/GPU:0"``: tf; ``"cpu"``: they stay NumPy).
        dtype: None; one dtype, applied to floating-point leaves only; or a mapping
            from source to target dtype (``{np.uint8: np.float16}``). Casts that
            shrink the itemsize run before the copy, the others after it.
        non_blocking: None: host-to-device copies to CUDA are non-blocking (safe from
            pinned and from pageable memory), device-to-host copies blocking (the
            results are ready and pageable). True: device-to-host copies too are
            queued, into pinned memory, with one synchronisation before returning.
            False: every copy blocks.
        pack: None: many small leaves of one framework going host-to-device are
            packed into one pinned buffer, copied once and split on the device.
            True packs whatever the device (used to test the packed path on CPU);
            False never packs.
        skip_keys: the leaves that stay exactly as they are: a key name (a str),
            or a collection of names (a list, a set, or a tuple, as accelerate's
            ``skip_keys``: ``("meta", "ids")`` is two names) whose items may also
            be key paths, written as tuples inside the collection
            (``[("meta", "ids")]``). A name matches any key, index or field of a
            leaf's path, wherever it sits in the tree; a key path matches the
            leaves under it. A tuple holding an item that is neither a name nor a
            key path (``("meta", 0)``) is refused as ambiguous.
        strict: raise instead of warning when a container that cannot be rebuilt
            as its own type (a dict subclass with its own ``__init__``) would have to
            be, because a leaf inside it changed. One whose leaves all stay as they
            are comes back as it is, strict or not.

    Returns:
        A tree with the same structure and container types.

    Raises:
        ValueError: an unknown device string.
        TypeError: ``device`` or ``dtype`` of a wrong kind; an iterator (a generator)
            or a dict view in ``tree``, which cannot be looked into without
            consuming it (named by its key path); under ``strict=True``, a
            container that would have to be rebuilt as another type (named by its
            key path; raised after the leaves were moved).
        TransferError: a leaf could not be moved (an absent device, an impossible
            cast); the message names its key path, e.g. ``batch['im']['image']``.

    Examples:
        >>> import numpy as np
        >>> batch = {"x": np.ones((2, 3), np.float64), "n": 3}
        >>> out = to_device(batch, "cpu", dtype=np.float32)
        >>> out["x"].dtype, out["n"]
        (dtype('float32'), 3)
    """
    target = parse_device(device)
    policy = DtypePolicy(dtype) if dtype is not None else None
    skip = skipping(skip_keys)
    return _move_tree(tree, device, target, policy, non_blocking, pack, strict, "batch", skip=skip)


def skipping(skip_keys: Any) -> Callable[[Any], list[bool]] | None:
    """For ``skip_keys``: a function of a pytree spec to which leaves stay (None: none do).

    ``skip_keys`` is a name, or a collection of names and key paths (tuples). A
    tuple is a collection of names, as accelerate's ``skip_keys`` is.

    Raises:
        TypeError: ``skip_keys`` is not a str or a collection of names and key paths.
        ValueError: a tuple holding an item that is neither a str nor a tuple (a
            key path written without its list, ``("meta", 0)``).
    """
    if skip_keys is None:
        return None
    if isinstance(skip_keys, tuple):
        odd = [item for item in skip_keys if not isinstance(item, str | tuple)]
        if odd:
            raise ValueError(
                f"`skip_keys` {skip_keys!r} is ambiguous: a tuple is a collection of key "
                f"names (as accelerate's `skip_keys`), and {odd[0]!r} is not a name. Write a "
                f"key path as a tuple inside a list, `skip_keys=[{skip_keys!r}]`, or the "
                f"names as a list, `skip_keys={list(skip_keys)!r}`."
            )
    items = [skip_keys] if isinstance(skip_keys, str) else skip_keys
    try:
        items = list(items)
    except TypeError:
        raise TypeError(
            "`skip_keys` must be a key name or a collection of names and key paths "
            f"(tuples inside a list), got {type(skip_keys).__name__}."
        ) from None
    names = {item for item in items if not isinstance(item, tuple)}
    prefixes = [item for item in items if isinstance(item, tuple)]

    def skipped(spec: Any) -> list[bool]:
        return [
            any(key in names for key in path if isinstance(key, Hashable))
            or any(path[: len(p)] == p for p in prefixes)
            for path in spec.paths()
        ]

    return skipped


def mover(
    device: Any, dtype: Any = None, skip_keys: Any = None
) -> Callable[[Any, bool | None], Any]:
    """``to_device`` to ``device`` with ``dtype``, parsed once, for many trees.

    Returns:
        ``move(tree, non_blocking)``: ``to_device(tree, device, dtype=dtype,
        non_blocking=non_blocking)``.
    """
    target = parse_device(device)
    policy = DtypePolicy(dtype) if dtype is not None else None
    skip = skipping(skip_keys)

    def move(tree: Any, non_blocking: bool | None) -> Any:
        return _move_tree(
            tree, device, target, policy, non_blocking, None, False, "batch", skip=skip
        )

    return move


def leaf_mover(target: Target, dtype: Any = None) -> Callable[[Sequence[Any], bool | None], Any]:
    """The move of a list of arrays of one backend (or NumPy) to ``target``, cast by ``dtype``.

    What ``to_device`` does to a tree whose leaves are all such arrays, without the
    tree: for a caller that holds the leaves already (the Loader's staged batches).
    """
    backend = get_backend(target.home) if target.home is not None else None
    if backend is None:
        raise ValueError(f"{target} has no backend of its own to move arrays with.")
    policy = DtypePolicy(dtype) if dtype is not None else None

    def move(leaves: Sequence[Any], non_blocking: bool | None) -> Any:
        casts = None if policy is None else _casts(policy, leaves)
        return transfer(backend, leaves, target, casts, non_blocking, None)

    return move


def _move_tree(
    tree: Any,
    device: Any,
    target: Target,
    policy: DtypePolicy | None,
    non_blocking: bool | None,
    pack: bool | None,
    strict: bool,
    root: str,
    *,
    move: bool = True,
    skip: Callable[[Any], list[bool]] | None = None,
) -> Any:
    """[`to_device`][looptoolkit.to_device] of ``tree``, whose key paths start at ``root``.

    ``move=False``: the Loader's view of ``tree``, looking into every container,
    for what an object's own ``.to`` returned.
    """
    leaves, spec, types = _tree.flatten_typed(tree, move=move)
    home = target.home
    kept = None if skip is None else skip(spec)
    if kept is not None and any(kept):
        # Leaves under `skip_keys` take no route: they stay exactly as they are.
        routes_of = {cls: _route(leaf, home) for cls, leaf in {type(x): x for x in leaves}.items()}
        keys = [None if k else routes_of[type(x)] for x, k in zip(leaves, kept, strict=True)]
        routes = set(keys)
    elif len(types) == 1:
        # One leaf type (the common case): one decision for all of them.
        routes = {_route(leaves[0], home)}
        keys = None
    else:
        # Several leaf types (arrays, ints, None): one decision per type.
        sample = {type(leaf): leaf for leaf in leaves}
        by_type = {cls: _route(leaf, home) for cls, leaf in sample.items()}
        keys = list(map(by_type.__getitem__, map(type, leaves)))
        routes = set(by_type.values())
    out = leaves if keys is None else list(leaves)
    paths: list[str] | None = None
    if _UNREADABLE in routes:
        paths = _tree.leaf_paths(spec, root)
        i = next(
            i
            for i, leaf in enumerate(leaves)
            if (_route(leaf, home) if keys is None else keys[i]) is _UNREADABLE
        )
        raise TypeError(
            f"{paths[i]} is a {type(leaves[i]).__name__}, which to_device cannot look into "
            "without consuming it; pass its items as a list or a tuple."
        )
    # Arrays first, objects last: an object's own `.to` may move it in place
    # (nn.Module), which should not happen when an array then fails to move.
    for route in sorted(routes - {None}, key=lambda r: r is _OBJECT):
        if keys is None:
            index = range(len(leaves))
            items = leaves
        else:
            index = [i for i, key in enumerate(keys) if key is route]  # type: ignore[assignment]
            items = [leaves[i] for i in index]
        if route is _OBJECT:
            for i, leaf in zip(index, items, strict=True):
                try:
                    moved_object = _move_object(leaf, device, target)
                except Exception as e:
                    if paths is None:
                        paths = _tree.leaf_paths(spec, root)
                    raise TransferError(
                        f"cannot move {paths[i]} ({type(leaf).__name__}) with its own "
                        f".to({device!r}): {e}",
                        paths[i],
                    ) from e
                if moved_object is None:
                    # A `.to` that moves the object in place and returns None (as
                    # Lightning accepts): the object itself, now moved.
                    moved_object = leaf
                elif _tree.looks_into(type(moved_object)):
                    # A container moved by its own `.to` (a BatchEncoding): what that
                    # left behind, or did not cast, goes where the rest of the batch goes.
                    if paths is None:
                        paths = _tree.leaf_paths(spec, root)
                    moved_object = _move_tree(
                        moved_object,
                        device,
                        target,
                        policy,
                        non_blocking,
                        pack,
                        strict,
                        paths[i],
                        move=False,
                    )
                out[i] = moved_object
            continue
        dest: Backend = route  # type: ignore[assignment]
        casts = None if policy is None else _casts(policy, items)
        try:
            moved = transfer(dest, items, target, casts, non_blocking, pack)
        except Exception as e:
            if paths is None:
                paths = _tree.leaf_paths(spec, root)
            raise _locate_failure(
                dest, items, [paths[i] for i in index], target, casts, non_blocking, e
            ) from e
        if keys is None:
            out = moved
        else:
            for i, value in zip(index, moved, strict=True):
                out[i] = value
    return _tree.unflatten(spec, out, strict=strict, tree=tree, root=root)
