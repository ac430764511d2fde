"""Backends: one module per framework behind one small protocol, found lazily.

The core of looptoolkit never imports a framework and has no framework-specific branch. It asks this
registry which backend owns a leaf ([`backend_of`][looptoolkit.adapters.backend_of]), for a backend
by name ([`get_backend`][looptoolkit.adapters.get_backend]), or asks every loaded backend a question
only a framework can answer: what a ``torch.device`` means
([`native_target`][looptoolkit.adapters.native_target]), whether a type is a framework container
such as a TensorDict ([`container_node`][looptoolkit.adapters.container_node]), which process group
this process is in ([`process_group`][looptoolkit.adapters.process_group]). A leaf's owner is found
by looking at ``sys.modules`` first: a ``torch.Tensor`` can only exist once torch has been imported,
so recognising leaves never imports a framework that was not already loaded.

Backend modules are imported on first use (module ``__getattr__``), so
``import looptoolkit.adapters`` is as cheap as ``import numpy``.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from looptoolkit._target import PATH_STYLE

if TYPE_CHECKING:
    from looptoolkit._target import Target

__all__ = [
    "BACKENDS",
    "DEVICE_HOMES",
    "Backend",
    "BackendBase",
    "Stager",
    "backend_of",
    "batch_shards",
    "chunked",
    "container_node",
    "gather_rows",
    "get_backend",
    "host_chunks",
    "is_batched_node",
    "loaded_backends",
    "move_container_node",
    "native_target",
    "object_backend",
    "process_group",
    "row_gather",
    "split_chunks",
    "zip_gathers",
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


class Stager(Protocol):
    """A staged upload: host rows gathered into reusable (pinned) buffers, copied ahead.

    A backend offers one ([`Backend.stager`][looptoolkit.adapters.Backend.stager]) where it can beat
    a plain ``move`` of each batch, e.g. torch on CUDA: gather into pinned buffers, copy
    on a side stream, hand over with an event.
    """

    positions: list[int]
    """Positions, in the data's leaves, of the leaves this stager gathers itself."""

    def staged(self, batches: Iterable[np.ndarray]) -> Iterator[list[Any]]:
        """The staged leaves of each batch (in the order of ``positions``), on the host."""
        ...

    def context(self) -> AbstractContextManager[Any]:
        """Where the moves of staged batches run (a side stream); entered by the producer."""
        ...

    def record(self, k: int) -> Any:
        """Mark batch ``k``'s copies as queued; returns what ``hand_over`` waits on."""
        ...

    def hand_over(self, leaves: Iterable[Any], token: Any) -> None:
        """In the consumer's thread: make its stream wait for the batch of ``leaves``."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What every framework adapter provides.

    Leaves are handled in lists, one call per backend per batch, so that a
    framework with a high per-call cost (a JAX dispatch, an eager tf op) pays it
    once per batch, not once per leaf. [`BackendBase`][looptoolkit.adapters.BackendBase] gives every
    optional hook its do-nothing answer. A backend is a module under
    ``looptoolkit/adapters/`` whose ``backend`` attribute implements this
    protocol, listed in ``BACKENDS`` (name, module, framework, pip extra).

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.adapters import Backend, get_backend
        >>> numpy_backend = get_backend("numpy")
        >>> isinstance(numpy_backend, Backend), numpy_backend.name
        (True, 'numpy')
        >>> x = np.arange(6).reshape(3, 2)
        >>> [leaf.tolist() for leaf in numpy_backend.take([x], np.array([2, 0]))]
        [[[4, 5], [0, 1]]]
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

    def stack(self, leaves: Sequence[Any]) -> Any:
        """One array stacking ``leaves`` (arrays of one shape) along a new leading axis."""
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

    def cast(self, x: Any, name: str) -> Any:
        """``x`` as dtype ``name``, on its device (traceable under ``compile_transform``)."""
        ...

    def constant(self, values: np.ndarray, like: Any) -> Any:
        """``values`` as an array of this framework, on the device of ``like``."""
        ...

    def synchronize(self, target: Target | None = None) -> None:
        """Wait until work queued on the target's device has finished."""
        ...

    def native_target(self, device: Any) -> Target | None:
        """The ``Target`` of a device object of this framework, or None if it is not one."""
        ...

    def resolve_device(self, target: Target) -> Any:
        """This framework's device for ``target``; raises when it is not present."""
        ...

    def owns_object(self, obj: Any) -> bool:
        """Whether ``obj`` (not an array, with its own ``.to``) belongs to this framework."""
        ...

    def container(self, cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """The ``(flatten, unflatten)`` optree functions for a container type of this framework."""
        ...

    def move_container(self, cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """The optree ``(flatten, unflatten)`` of a container type only ``to_device`` looks into.

        A lazily stacked TensorDict: ``to_device`` moves and casts its leaves, but its
        parts are samples, not columns, so the Loader does not batch them.
        """
        ...

    def is_batched_node(self, x: Any) -> bool:
        """Whether ``x`` is a container that records its batch size (a TensorDict)."""
        ...

    def process_group(self) -> tuple[int, int] | None:
        """``(rank, world_size)`` of an initialised process group of this framework."""
        ...

    def batch_shards(self, target: Target, leaf: Any) -> int:
        """How many shards ``target`` splits a batch's leading axis into (1: none)."""
        ...

    def stager(
        self, leaves: Sequence[Any], batch_size: int, target: Target, slots: int
    ) -> Stager | None:
        """A staged upload of these leaves to ``target``, where it beats a plain ``move``."""
        ...

    def compile_transform(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``fn`` compiled for batches of this framework (``jax.jit``, ``tf.function``)."""
        ...


class BackendBase:
    """The optional hooks of ``Backend``, answered for a framework that has none.

    Also [`length`][looptoolkit.adapters.BackendBase.length], the same for every framework.

    Examples:
        >>> from looptoolkit.adapters import BackendBase
        >>> class Minimal(BackendBase):
        ...     name = "minimal"
        >>> Minimal().batch_shards(None, None), Minimal().process_group()
        (1, None)
    """

    def length(self, x: Any) -> int:
        """Size of the leading dimension of ``x``."""
        return int(x.shape[0])

    def native_target(self, device: Any) -> Target | None:
        """No device objects of its own."""
        return None

    def owns_object(self, obj: Any) -> bool:
        """No objects of its own."""
        return False

    def container(self, cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """No container types of its own."""
        return None

    def move_container(self, cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """No container types that only ``to_device`` looks into."""
        return None

    def is_batched_node(self, x: Any) -> bool:
        """No batch-sized containers."""
        return False

    def process_group(self) -> tuple[int, int] | None:
        """No process groups."""
        return None

    def batch_shards(self, target: Target, leaf: Any) -> int:
        """Batches are not split across devices."""
        return 1

    def stager(
        self, leaves: Sequence[Any], batch_size: int, target: Target, slots: int
    ) -> Stager | None:
        """No staged upload: batches are moved one ``move`` at a time."""
        return None

    def compile_transform(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Nothing to compile: ``fn`` runs eagerly."""
        return fn


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
    out = []
    for name, (_, framework, _) in BACKENDS.items():
        if name != "numpy" and framework in sys.modules:
            out.append(get_backend(name))
    return out


# type -> owning backend (or None). A type can only be seen once its framework
# is imported, so a cached None never goes stale for a framework loaded later.
_owners: dict[type, Backend | None] = {}


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
        owner = get_backend("numpy")
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


def container_node(cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The ``(flatten, unflatten)`` optree functions for a framework's container type, else None."""
    return _first_answer(lambda backend: backend.container(cls))


def move_container_node(cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
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


def row_gather(view: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The cheapest batch-sized gather of rows of a host array, for in-range indices >= 0.

    ``take`` on a C-contiguous array copies whole rows (``mode="clip"`` skips its
    bounds-error path: the epoch orders only hold valid indices). On any other
    layout (Fortran order, a column slice, a transposed view, a sliced memmap)
    ``take`` first copies the whole array, every call; fancy indexing then costs
    one batch.
    """
    if view.flags.c_contiguous:
        take = view.take
        # Positional arguments: keyword ones cost a dict per call, as much as a
        # small gather.
        return lambda idx: take(idx, 0, None, "clip")
    return view.__getitem__


def gather_rows(view: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` (negative ones counting from the end) of a host array, at a batch's cost."""
    return view.take(idx, axis=0) if view.flags.c_contiguous else view[idx]


def zip_gathers(
    gathers: Sequence[Callable[[np.ndarray], Any]], batches: Iterable[np.ndarray]
) -> Iterator[tuple[Any, ...]]:
    """For each index batch, the tuple of every gather's result: a C-level iterator.

    ``map`` and ``zip`` over copies of the batch stream (``itertools.tee``) run
    the whole per-batch loop in C; Python only runs the gathers themselves.
    """
    copies = itertools.tee(batches, len(gathers))
    return zip(*(map(g, c) for g, c in zip(gathers, copies, strict=True)), strict=True)


# Bytes of rows gathered at once by `host_chunks`, and at most this many batches:
# enough batches to amortise a framework's per-call cost (a tf op, a JAX
# transfer and dispatch) over dozens of batches, few enough bytes to stay in cache.
CHUNK_BYTES = 4 << 20
CHUNK_MAX_BATCHES = 64


def host_chunks(
    views: Sequence[np.ndarray], batches: Iterable[np.ndarray]
) -> Iterator[tuple[list[int], list[np.ndarray]]]:
    """Gather consecutive batches together: ``(batch sizes, one gathered array per view)``.

    Each chunk is one batch-sized-cost gather per view
    ([`row_gather`][looptoolkit.adapters.row_gather]) of the concatenated indices of up to
    [`CHUNK_MAX_BATCHES`][looptoolkit.adapters.CHUNK_MAX_BATCHES] batches and about
    [`CHUNK_BYTES`][looptoolkit.adapters.CHUNK_BYTES] bytes. A backend wraps each chunk once and
    splits it into its batches in one call, instead of paying its per-call cost per batch.
    """
    gathers = [row_gather(v) for v in views]
    row_bytes = sum(v.itemsize * int(np.prod(v.shape[1:])) for v in views) or 1
    stream = iter(batches)
    first = next(stream, None)
    if first is None:
        return
    count = max(1, min(CHUNK_MAX_BATCHES, CHUNK_BYTES // max(1, len(first) * row_bytes)))
    for chunk in chunked(itertools.chain([first], stream), count):
        flat = chunk[0] if len(chunk) == 1 else np.concatenate(chunk)
        yield [len(idx) for idx in chunk], [g(flat) for g in gathers]


def split_chunks(
    views: Sequence[np.ndarray],
    batches: Iterable[np.ndarray],
    wrap: Callable[[list[np.ndarray]], _T],
    split: Callable[[_T, list[int]], Iterable[Any]],
) -> Iterator[Any]:
    """The batches of ``host_chunks``: each chunk wrapped once, then split into batches.

    ``wrap`` turns a chunk's gathered rows (one array per view) into the
    framework's arrays in one go; ``split(arrays, sizes)`` cuts them into one
    sequence of leaves per batch (a list or a tuple: the backend's batches). A
    chunk of one batch is yielded as wrapped.
    """
    for sizes, rows in host_chunks(views, batches):
        wrapped = wrap(rows)
        if len(sizes) == 1:
            yield wrapped
        else:
            yield from split(wrapped, sizes)


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
