"""The backend registry: which backends exist, which one owns a leaf, found lazily.

The core of looptoolkit never imports a framework and has no framework-specific
branch. It asks this registry which backend owns a leaf
([`backend_of`][looptoolkit.adapters.backend_of]), for a backend by name
([`get_backend`][looptoolkit.adapters.get_backend]), or asks every loaded backend a
question only a framework can answer: what a ``torch.device`` means
([`native_target`][looptoolkit.adapters.native_target]), whether a type is a framework
container such as a TensorDict ([`container_node`][looptoolkit.adapters.container_node]),
which process group this process is in
([`process_group`][looptoolkit.adapters.process_group]). A leaf's owner is found by
looking at ``sys.modules`` first: a ``torch.Tensor`` can only exist once torch has
been imported, so recognising leaves never imports a framework that was not
already loaded.

Backends are listed by module path and imported on first use;
[`register_backend`][looptoolkit.adapters.register_backend] adds one.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from looptoolkit._common.target import PATH_STYLE
from looptoolkit.adapters._protocol import Backend, Flatten

if TYPE_CHECKING:
    from looptoolkit._common.target import Target

__all__ = [
    "BACKENDS",
    "DEVICE_HOMES",
    "backend_of",
    "batch_shards",
    "container_node",
    "get_backend",
    "is_batched_node",
    "loaded_backends",
    "move_container_node",
    "native_target",
    "object_backend",
    "process_group",
    "register_backend",
]

_T = TypeVar("_T")

# backend name -> (adapter module, framework's top-level module, pip extra)
BACKENDS: dict[str, tuple[str, str, str]] = {
    "numpy": ("looptoolkit.adapters.numpy", "numpy", ""),
    "torch": ("looptoolkit.adapters.torch", "torch", "torch"),
    "jax": ("looptoolkit.adapters.jax", "jax", "jax"),
    "tf": ("looptoolkit.adapters.tf", "tensorflow", "tf"),
}

# Device string names -> the backend NumPy leaves go to (PATH_STYLE stands for
# tf-style "/GPU:0" names). "cpu" is nobody's: NumPy leaves stay NumPy.
DEVICE_HOMES: dict[str, str] = {
    "cuda": "torch",
    "mps": "torch",
    "xpu": "torch",
    "gpu": "jax",
    "tpu": "jax",
    PATH_STYLE: "tf",
}

# The backend of host arrays: it owns no device objects, containers or process
# groups, so the questions asked of every loaded backend skip it.
_HOST = "numpy"

_loaded: dict[str, Backend] = {}
# type -> owning backend (or None). A type can only be seen once its framework
# is imported, so a cached None never goes stale for a framework loaded later.
_owners: dict[type, Backend | None] = {}


def register_backend(
    name: str,
    module: str,
    *,
    framework: str,
    extra: str = "",
    devices: Iterable[str] = (),
) -> None:
    """Add a backend (or replace one): its adapter module is imported on first use.

    Args:
        name: the backend's name (``get_backend(name)``, a variant's ``backend``).
        module: the import path of a module whose ``backend`` attribute implements
            [`Backend`][looptoolkit.adapters.Backend].
        framework: the framework's top-level module; the backend is asked about
            leaves only once this module is in ``sys.modules``.
        extra: the pip extra that installs the framework (named when it is missing).
        devices: device string platforms (``"npu"``) whose NumPy leaves go to this backend.

    Examples:
        >>> register_backend("numpy", "looptoolkit.adapters.numpy", framework="numpy")
        >>> get_backend("numpy").name
        'numpy'
    """
    BACKENDS[name] = (module, framework, extra)
    _loaded.pop(name, None)
    _owners.clear()
    for platform in devices:
        DEVICE_HOMES[platform] = name


def _import_backend(name: str) -> Backend:
    try:
        module_name, framework, extra = BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}."
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if e.name is not None and e.name.split(".")[0] == framework:
            raise ImportError(
                f"{framework} is not installed; install it with "
                f"`pip install 'looptoolkit[{extra}]'`."
            ) from None
        raise
    backend: Backend = module.backend
    return backend


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (``"numpy"``, ``"torch"``, ``"jax"``, ``"tf"``, or registered).

    Imports the framework on first use.

    Raises:
        ValueError: ``name`` is not a backend.
        ImportError: the framework is not installed (the message says which extra to install).

    Examples:
        >>> from looptoolkit.adapters import get_backend
        >>> get_backend("numpy").name
        'numpy'
    """
    backend = _loaded.get(name)
    if backend is None:
        backend = _loaded[name] = _import_backend(name)
    return backend


def loaded_backends() -> list[Backend]:
    """The backends whose framework is already imported (imports no framework).

    NumPy's is not among them: it owns no device objects, containers or process groups.
    """
    return [
        get_backend(name)
        for name, (_, framework, _) in BACKENDS.items()
        if name != _HOST and framework in sys.modules
    ]


def backend_of(x: object) -> Backend | None:
    """The backend that owns array ``x``, or None when ``x`` is not an array.

    Never imports a framework: only frameworks already in ``sys.modules`` are asked.
    NumPy scalars (``np.float32(1.0)``) are not arrays here; they pass through as values.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.adapters import backend_of
        >>> backend_of(np.zeros(3)).name, backend_of("a string")
        ('numpy', None)
    """
    cls = type(x)
    try:
        return _owners[cls]
    except KeyError:
        pass
    owner: Backend | None = None
    if isinstance(x, np.ndarray):
        owner = get_backend(_HOST)
    else:
        for backend in loaded_backends():
            if backend.is_array(x):
                owner = backend
                break
    _owners[cls] = owner
    return owner


def _first_answer(ask: Callable[[Backend], _T | None]) -> _T | None:
    """The first answer other than None of the loaded backends to ``ask``."""
    for backend in loaded_backends():
        answer = ask(backend)
        if answer is not None:
            return answer
    return None


def native_target(device: Any) -> Target | None:
    """The ``Target`` of a framework device object, or None when no backend knows it."""
    return _first_answer(lambda backend: backend.native_target(device))


def object_backend(obj: Any) -> Backend | None:
    """The backend whose objects (with their own ``.to``) ``obj`` is, if any."""
    return _first_answer(lambda backend: backend if backend.owns_object(obj) else None)


def container_node(cls: type) -> Flatten | None:
    """The ``(flatten, unflatten)`` optree functions for a framework's container type, else None."""
    return _first_answer(lambda backend: backend.container(cls))


def move_container_node(cls: type) -> Flatten | None:
    """The optree ``(flatten, unflatten)`` of a container only ``to_device`` looks into."""
    return _first_answer(lambda backend: backend.move_container(cls))


def is_batched_node(x: Any) -> bool:
    """Whether ``x`` is a framework container that records its batch size."""
    return any(backend.is_batched_node(x) for backend in loaded_backends())


def process_group() -> tuple[int, int] | None:
    """``(rank, world_size)`` of an initialised process group, if any framework has one."""
    return _first_answer(lambda backend: backend.process_group())


def batch_shards(target: Target, leaf: Any) -> int:
    """How many shards ``target`` splits a batch's leading axis into (1 for one device)."""
    if target.home is None or target.native is None:
        return 1
    return get_backend(target.home).batch_shards(target, leaf)
