"""Backends: one module per framework behind one small protocol, found lazily.

The core of looptoolkit never imports a framework. It asks this registry which
backend owns a leaf (:func:`backend_of`) or for a backend by name
(:func:`get_backend`). A leaf's owner is found by looking at ``sys.modules``
first: a ``torch.Tensor`` can only exist once torch has been imported, so
recognising leaves never imports a framework that was not already loaded.

Backend modules are imported on first use (module ``__getattr__``), so
``import looptoolkit.adapters`` is as cheap as ``import numpy``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from looptoolkit.device import Target

__all__ = [
    "BACKENDS",
    "Backend",
    "available_backends",
    "backend_of",
    "get_backend",
]

# backend name -> (adapter module, framework's top-level module, pip extra)
BACKENDS: dict[str, tuple[str, str, str]] = {
    "numpy": ("looptoolkit.adapters.numpy", "numpy", ""),
    "torch": ("looptoolkit.adapters.torch", "torch", "torch"),
    "jax": ("looptoolkit.adapters.jax", "jax", "jax"),
    "tf": ("looptoolkit.adapters.tf", "tensorflow", "tf"),
}


@runtime_checkable
class Backend(Protocol):
    """What every framework adapter provides.

    Leaves are handled in lists, one call per backend per batch, so that a
    framework with a high per-call cost (a JAX dispatch, an eager tf op) pays it
    once per batch, not once per leaf.
    """

    name: str

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is an array of this framework."""
        ...

    def length(self, x: Any) -> int:
        """Size of the leading dimension of ``x``."""
        ...

    def dtype_name(self, x: Any) -> str:
        """NumPy-style name of the dtype of ``x`` (``"float32"``, ``"bfloat16"``)."""
        ...

    def take(self, leaves: Sequence[Any], idx: np.ndarray) -> list[Any]:
        """Gather rows ``idx`` (1-D integer NumPy array) of every leaf."""
        ...

    def take_batches(
        self, leaves: Sequence[Any], batches: Iterable[np.ndarray]
    ) -> Iterator[list[Any]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily.

        Per-epoch preparation (zero-copy views, an index upload) happens once
        here rather than once per batch.
        """
        ...

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[Any]:
        """Move leaves (of this framework, or NumPy leaves sent to it) to ``target``.

        ``casts[i]`` is the dtype name leaf ``i`` must have on arrival, or None.
        """
        ...

    def synchronize(self, target: Target | None = None) -> None:
        """Wait until work queued on the target's device has finished."""
        ...


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


_loaded: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (``"numpy"``, ``"torch"``, ``"jax"``, ``"tf"``).

    Imports the framework on first use.

    Raises:
        ValueError: ``name`` is not a backend.
        ImportError: the framework is not installed (the message says which extra to install).
    """
    backend = _loaded.get(name)
    if backend is None:
        backend = _loaded[name] = _import_backend(name)
    return backend


def available_backends() -> list[str]:
    """Names of the backends whose framework can be imported (imports each one)."""
    names = []
    for name in BACKENDS:
        try:
            get_backend(name)
        except ImportError:
            continue
        names.append(name)
    return names


# type -> owning backend (or None). A type can only be seen once its framework
# is imported, so a cached None never goes stale for a framework loaded later.
_owners: dict[type, Backend | None] = {}


def backend_of(x: object) -> Backend | None:
    """The backend that owns array ``x``, or None when ``x`` is not an array.

    Never imports a framework: only frameworks already in ``sys.modules`` are asked.
    NumPy scalars (``np.float32(1.0)``) are not arrays here; they pass through as values.
    """
    cls = type(x)
    try:
        return _owners[cls]
    except KeyError:
        pass
    owner: Backend | None = None
    if isinstance(x, np.ndarray):
        owner = get_backend("numpy")
    else:
        for name, (_, framework, _) in BACKENDS.items():
            if name == "numpy" or framework not in sys.modules:
                continue
            backend = get_backend(name)
            if backend.is_array(x):
                owner = backend
                break
    _owners[cls] = owner
    return owner


def chunked(items: Iterable[np.ndarray], size: int) -> Iterator[list[np.ndarray]]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    chunk: list[np.ndarray] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def __getattr__(name: str) -> Any:
    # `looptoolkit.adapters.torch` etc. resolve lazily, as optree.integrations does.
    if name in BACKENDS:
        return importlib.import_module(BACKENDS[name][0])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *BACKENDS])
