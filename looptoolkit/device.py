"""Device transfer: ``to_device`` moves every array leaf of a pytree to a device.

Step after the gather: it takes a batch (any nesting of containers, see
:mod:`looptoolkit.tree`), sends each framework's leaves to that framework's
backend in one call (so a backend can pack many small leaves into one copy, or
put a whole list with one ``jax.device_put``), and rebuilds the same containers
around the moved leaves. The Loader's prefetch queue receives the result.

The dtype cast runs on whichever side of the copy moves fewer bytes: a cast
that shrinks the itemsize (float32 -> float16) runs before the copy, one that
grows it (uint8 -> float16) after it, on the destination.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from looptoolkit import tree as _tree
from looptoolkit.adapters import Backend, backend_of, get_backend

__all__ = ["Target", "TransferError", "dtype_name", "parse_device", "to_device"]


class TransferError(RuntimeError):
    """A leaf could not be moved; the message names its key path and the cause."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Target:
    """A parsed device.

    Attributes:
        spec: what the caller passed.
        platform: ``"cpu"``, ``"cuda"``, ``"tpu"``, ``"mps"``, ...
        index: device ordinal, or None for the framework's default.
        home: the framework NumPy leaves go to (None: they stay NumPy).
        native: a framework object to use as is (a ``torch.device``, a ``jax.Device``,
            a ``jax.sharding.Sharding``), or None.
    """

    spec: Any
    platform: str
    index: int | None = None
    home: str | None = None
    native: Any = None

    def __str__(self) -> str:
        return repr(self.spec) if not isinstance(self.spec, str) else f"'{self.spec}'"


_KNOWN = "'cpu', 'cuda', 'cuda:N', 'mps', 'gpu', 'gpu:N', 'tpu', '/GPU:N', '/CPU:N'"


def _split_index(text: str, spec: str) -> tuple[str, int | None]:
    name, sep, number = text.partition(":")
    if not sep:
        return name, None
    if not number.isdigit():
        raise ValueError(f"`device` {spec!r} is not a known device; use one of {_KNOWN}.")
    return name, int(number)


def _parse_str(spec: str) -> Target:
    text = spec.strip()
    if text.startswith("/"):  # TensorFlow: "/GPU:0", "/device:GPU:0", "/job:x/device:CPU:0"
        last = text.rsplit("/", 1)[-1].removeprefix("device:")
        kind, index = _split_index(last, spec)
        if kind.upper() in ("GPU", "CPU"):
            platform = "cuda" if kind.upper() == "GPU" else "cpu"
            return Target(spec, platform, index, home="tf")
        raise ValueError(f"`device` {spec!r} is not a known device; use one of {_KNOWN}.")
    name, index = _split_index(text.lower(), spec)
    if name == "cpu":
        return Target(spec, "cpu", index, home=None)
    if name in ("cuda", "mps", "xpu"):
        return Target(spec, name, index, home="torch")
    if name in ("gpu", "tpu"):
        return Target(spec, "cuda" if name == "gpu" else name, index, home="jax")
    raise ValueError(f"`device` {spec!r} is not a known device; use one of {_KNOWN}.")


def parse_device(device: Any) -> Target:
    """Parse a device string, ``torch.device``, ``jax.Device`` or ``jax.sharding.Sharding``.

    Args:
        device: what the caller passed as ``device``.

    Returns:
        The parsed :class:`Target`.

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
        return _parse_str(device)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(device, torch.device):
        return Target(device, device.type, device.index, home="torch", native=device)
    jax = sys.modules.get("jax")
    if jax is not None:
        if isinstance(device, jax.Device):
            platform = "cuda" if device.platform in ("gpu", "cuda", "rocm") else device.platform
            return Target(device, platform, device.id, home="jax", native=device)
        if isinstance(device, jax.sharding.Sharding):
            first = next(iter(device.device_set))
            platform = "cuda" if first.platform in ("gpu", "cuda", "rocm") else first.platform
            return Target(device, platform, None, home="jax", native=device)
    raise TypeError(
        "`device` must be a string, a torch.device, a jax.Device or a jax.sharding.Sharding, "
        f"got {type(device).__name__}."
    )


# -- dtypes ----------------------------------------------------------------------

_ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "complex64": 8,
    "complex128": 16,
}  # fmt: skip
_FLOATING = frozenset(n for n in _ITEMSIZE if n.startswith(("float", "bfloat")))
_TORCH_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
                  "int": "int32", "short": "int16", "cfloat": "complex64"}  # fmt: skip


def dtype_name(dtype: Any) -> str:
    """NumPy-style name of a NumPy, torch, JAX or tf dtype, or of a dtype string.

    Examples:
        >>> import numpy as np
        >>> dtype_name(np.float16), dtype_name("uint8")
        ('float16', 'uint8')
    """
    if dtype is None:
        # np.dtype(None) is float64: never what a caller who wrote None meant.
        raise TypeError("`dtype` None is not a dtype.")
    if isinstance(dtype, str):
        if dtype.startswith("torch."):
            # torch's own aliases, only with torch's prefix: a bare "float" or "int"
            # means what it means to NumPy (float64, int64).
            name = dtype.removeprefix("torch.")
            name = _TORCH_ALIASES.get(name, name)
        else:
            name = dtype
        if name in _ITEMSIZE:
            return name
    else:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(dtype, torch.dtype):
            return dtype_name(str(dtype))
        tf = sys.modules.get("tensorflow")
        if tf is not None and isinstance(dtype, tf.dtypes.DType):
            return str(dtype.name)
    import numpy as np

    try:
        return np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"`dtype` {dtype!r} is not a dtype.") from None


def itemsize(name: str) -> int:
    """Bytes per element of the dtype called ``name``."""
    size = _ITEMSIZE.get(name)
    if size is None:
        from looptoolkit.adapters.numpy import as_numpy_dtype

        size = as_numpy_dtype(name).itemsize
    return size


def cast_before_copy(source: str, target: str) -> bool:
    """Whether to cast before the copy: only when it makes the copy smaller.

    uint8 -> float16 is copied as uint8 (1 byte per element) and cast on the
    destination; float32 -> float16 is cast first (2 bytes instead of 4).

    Examples:
        >>> cast_before_copy("float32", "float16"), cast_before_copy("uint8", "float16")
        (True, False)
    """
    return itemsize(target) < itemsize(source)


class _DtypePolicy:
    """Which dtype each leaf should arrive in."""

    __slots__ = ("mapping", "single")

    def __init__(self, dtype: Any) -> None:
        self.single: str | None = None
        self.mapping: dict[str, str] | None = None
        if dtype is None:
            return
        if isinstance(dtype, Mapping):
            self.mapping = {dtype_name(k): dtype_name(v) for k, v in dtype.items()}
        else:
            self.single = dtype_name(dtype)

    def __call__(self, source: str) -> str | None:
        if self.single is not None:
            target = self.single if source in _FLOATING else None
        elif self.mapping is not None:
            target = self.mapping.get(source)
        else:
            return None
        return None if target == source else target


# -- to_device ---------------------------------------------------------------------


def _describe(leaf: Any) -> str:
    shape = tuple(getattr(leaf, "shape", ()))
    dtype = getattr(leaf, "dtype", "")
    # numpy, jax and tf dtypes have a `.name`; torch's print as "torch.float32".
    name = getattr(dtype, "name", None) or str(dtype).removeprefix("torch.")
    return f"{type(leaf).__module__.split('.')[0]} {name} {list(shape)}"


def _locate_failure(
    backend: Backend,
    leaves: Sequence[Any],
    paths: Sequence[str],
    target: Target,
    casts: Sequence[str | None],
    non_blocking: bool | None,
    error: Exception,
) -> TransferError:
    """Retry leaf by leaf to name the leaf that failed."""
    for leaf, path, cast in zip(leaves, paths, casts, strict=True):
        try:
            backend.move([leaf], target, [cast], non_blocking, False)
        except Exception as e:
            what = f" as {cast}" if cast else ""
            return TransferError(
                f"cannot move {path} ({_describe(leaf)}) to {target}{what}: {e}", path
            )
    joined = ", ".join(paths[:4]) + (", ..." if len(paths) > 4 else "")
    return TransferError(f"cannot move {joined} to {target}: {error}", paths[0] if paths else None)


# What happens to a leaf of a given type, per (type, home of NumPy leaves): the
# backend that moves it, _OBJECT (it has its own `.to`), or None (returned as is).
# Deciding once per type keeps the per-leaf work of a call to list comprehensions.
_OBJECT = "object"
_UNKNOWN = "unknown"
_routes: dict[tuple[type, str | None], Backend | str | None] = {}


def _route(leaf: Any, home: str | None) -> Backend | str | None:
    cls = type(leaf)
    route = _routes.get((cls, home), _UNKNOWN)
    if route is not _UNKNOWN:
        return route
    backend = backend_of(leaf)
    decided: Backend | str | None
    if backend is None:
        # Looked up on the class: an instance attribute called `to` is not a method.
        decided = _OBJECT if callable(getattr(cls, "to", None)) else None
    elif backend.name == "numpy" and home is not None:
        decided = get_backend(home)
    else:
        decided = backend
    _routes[(cls, home)] = decided
    return decided


def _casts(policy: _DtypePolicy, items: Sequence[Any]) -> list[str | None]:
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
    """``obj.to(device)``; torch objects get the ``torch.device`` the target names."""
    root = type(obj).__module__.partition(".")[0]
    if root in ("torch", "tensordict") or (
        "torch" in sys.modules and isinstance(obj, sys.modules["torch"].nn.Module)
    ):
        # An nn.Module or a TensorDict does not understand "/CPU:0" or a jax.Device.
        from looptoolkit.adapters.torch import resolve_device

        return obj.to(resolve_device(target))
    return obj.to(device)


def to_device(
    tree: Any,
    device: Any,
    *,
    dtype: Any = None,
    non_blocking: bool | None = None,
    pack: bool | None = None,
    strict: bool = False,
) -> Any:
    """Move every array leaf of ``tree`` to ``device``; everything else is returned as is.

    Args:
        tree: any nesting of dict, OrderedDict, defaultdict, deque, list, tuple,
            namedtuple, dataclass, TensorDict and tensorclass, with torch, NumPy,
            JAX or tf arrays as leaves. Objects with their own ``.to`` (an
            ``nn.Module``) are moved by it.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"/GPU:0"``, a ``torch.device``,
            a ``jax.Device`` or a ``jax.sharding.Sharding``. Each framework's leaves
            stay in their framework; NumPy leaves go to the framework the device
            names (``"cuda"`` and torch devices: torch; JAX devices and shardings,
            ``"gpu"``, ``"tpu"``: JAX; ``"/GPU:0"``: tf; ``"cpu"``: they stay NumPy).
        dtype: None; one dtype, applied to floating-point leaves only; or a mapping
            from source to target dtype (``{np.uint8: np.float16}``). Casts that
            shrink the itemsize run before the copy, the others after it.
        non_blocking: None: non-blocking where it is safe (host-to-device from pinned
            memory; device-to-host with one synchronisation at the end). True or
            False forces it; a forced non-blocking device-to-host copy is still
            synchronised before returning.
        pack: None: many small leaves of one framework going host-to-device are
            packed into one pinned buffer, copied once and split on the device.
            True packs whatever the device (used to test the packed path on CPU);
            False never packs.
        strict: raise instead of warning when a container that cannot be rebuilt
            as its own type (a dict subclass with its own ``__init__``) would have to
            be, because a leaf inside it changed. One whose leaves all stay as they
            are comes back as it is, strict or not.

    Returns:
        A tree with the same structure and container types.

    Raises:
        ValueError: an unknown device string.
        TypeError: ``device`` or ``dtype`` of a wrong kind; under ``strict=True``, a
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
    policy = _DtypePolicy(dtype) if dtype is not None else None
    leaves, spec, types = _tree.flatten_typed(tree)
    home = target.home
    if len(types) == 1:
        # One leaf type (the common case): one decision for all of them.
        routes = {_route(leaves[0], home)} if leaves else set()
        keys = None
    else:
        keys = [_route(leaf, home) for leaf in leaves]
        routes = set(keys)
    out = leaves if keys is None else list(leaves)
    paths: list[str] | None = None
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
                    out[i] = _move_object(leaf, device, target)
                except Exception as e:
                    if paths is None:
                        paths = _tree.leaf_paths(spec)
                    raise TransferError(
                        f"cannot move {paths[i]} ({type(leaf).__name__}) with its own "
                        f".to({device!r}): {e}",
                        paths[i],
                    ) from e
            continue
        dest: Backend = route  # type: ignore[assignment]
        casts = [None] * len(items) if policy is None else _casts(policy, items)
        try:
            moved = dest.move(items, target, casts, non_blocking, pack)
        except Exception as e:
            if paths is None:
                paths = _tree.leaf_paths(spec)
            raise _locate_failure(
                dest, items, [paths[i] for i in index], target, casts, non_blocking, e
            ) from e
        if keys is None:
            out = moved
        else:
            for i, value in zip(index, moved, strict=True):
                out[i] = value
    return _tree.unflatten(spec, out, strict=strict, tree=tree)
