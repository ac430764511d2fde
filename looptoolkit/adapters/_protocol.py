"""The Backend protocol: the surface every framework adapter implements, and its options.

[`Backend`][looptoolkit.adapters.Backend] is what the core asks of a framework.
Its **required surface** ([`Required`][looptoolkit.adapters.Required]) is what every
backend must implement: recognise its arrays, gather rows, move and cast, wait
for the device. The **optional capabilities** are separate protocols, each with
a do-nothing answer in [`BackendBase`][looptoolkit.adapters.BackendBase], so a new
backend implements only what its framework has:

- [`Staging`][looptoolkit.adapters.Staging]: a staged upload (pinned buffers, a side stream);
- [`Sharding`][looptoolkit.adapters.Sharding]: batches split across devices, process groups;
- [`Containers`][looptoolkit.adapters.Containers]: container types and objects of its own
  (TensorDict, ``nn.Module``);
- [`Native`][looptoolkit.adapters.Native]: device objects of its own (``torch.device``,
  ``jax.Device``) and compiled transforms (``jax.jit``, ``tf.function``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from looptoolkit._common.target import Target

__all__ = [
    "Backend",
    "BackendBase",
    "Containers",
    "Native",
    "Required",
    "Sharding",
    "Stager",
    "Staging",
]

Flatten = tuple[Callable[..., Any], Callable[..., Any]]


class Stager(Protocol):
    """A staged upload: host rows gathered into reusable (pinned) buffers, copied ahead.

    A backend offers one ([`Staging.stager`][looptoolkit.adapters.Staging.stager]) where
    it can beat a plain ``move`` of each batch, e.g. torch on CUDA: gather into
    pinned buffers, copy on a side stream, hand over with an event.
    """

    positions: list[int]
    """Positions, in the data's leaves, of the leaves this stager gathers itself."""

    moved: bool
    """Whether the staged leaves of the batches made so far are on the target device already
    (the move has nothing left to do for them); read once ``context`` has been entered."""

    stats: Any
    """The Loader's [`LoaderStats`][looptoolkit.LoaderStats] (None: none kept), set by the
    Loader; a stager that uploads blocks of batches sets its ``block_batches``."""

    def staged(self, batches: Iterable[np.ndarray]) -> Iterator[list[Any]]:
        """The staged leaves of each batch (in the order of ``positions``).

        On the host, or already on the device where ``moved`` says so.
        """
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


class Required(Protocol):
    """The surface every backend must implement.

    Leaves are handled in lists, one call per backend per batch, so that a
    framework with a high per-call cost (a JAX dispatch, an eager tf op) pays it
    once per batch, not once per leaf.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.adapters import get_backend
        >>> numpy_backend = get_backend("numpy")
        >>> numpy_backend.is_array(np.zeros(2)), numpy_backend.length(np.zeros((5, 2)))
        (True, 5)
        >>> numpy_backend.dtype_name(np.zeros(1, np.float16))
        'float16'
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
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[Any]:
        """Move leaves (of this framework, or NumPy leaves sent to it) to ``target``.

        Dtypes are not the move's business: the transfer layer
        (`looptoolkit.device._move.transfer`) casts through ``cast`` before
        or after it, on the side of the copy that moves fewer bytes.
        """
        ...

    def cast(self, x: Any, name: str) -> Any:
        """``x`` as dtype ``name``, where it is (traceable under ``compile_transform``).

        ``x`` is an array of this framework, on its device, or a NumPy array on
        its way to this framework (cast on the host).
        """
        ...

    def constant(self, values: np.ndarray, like: Any) -> Any:
        """``values`` as an array of this framework, on the device of ``like``."""
        ...

    def synchronize(self, target: Target | None = None) -> None:
        """Wait until work queued on the target's device has finished."""
        ...

    def resolve_device(self, target: Target) -> Any:
        """This framework's device for ``target``; raises when it is not present."""
        ...


class Staging(Protocol):
    """Optional: a staged upload that beats a plain ``move`` per batch.

    Examples:
        >>> from looptoolkit.adapters import get_backend
        >>> from looptoolkit.device._move import parse_device
        >>> get_backend("numpy").stager([], 32, parse_device("cpu"), 2) is None  # none on NumPy
        True
    """

    def stager(
        self, leaves: Sequence[Any], batch_size: int, target: Target, slots: int
    ) -> Stager | None:
        """A staged upload of these leaves to ``target``, where it beats a plain ``move``.

        ``leaves`` holds None in place of a leaf that must not be staged (one the
        move leaves where it is, under ``skip_keys``).
        """
        ...


class Sharding(Protocol):
    """Optional: batches split across devices, and the process group of this process.

    Examples:
        >>> from looptoolkit.adapters import get_backend
        >>> get_backend("numpy").process_group() is None  # NumPy has no process groups
        True
    """

    def batch_shards(self, target: Target, leaf: Any) -> int:
        """How many shards ``target`` splits a batch's leading axis into (1: none)."""
        ...

    def process_group(self) -> tuple[int, int] | None:
        """``(rank, world_size)`` of an initialised process group of this framework."""
        ...


class Containers(Protocol):
    """Optional: container types and objects (with their own ``.to``) of this framework.

    Examples:
        >>> from looptoolkit.adapters import get_backend
        >>> get_backend("numpy").container(dict) is None  # dicts are everybody's
        True
    """

    def owns_object(self, obj: Any) -> bool:
        """Whether ``obj`` (not an array, with its own ``.to``) belongs to this framework."""
        ...

    def container(self, cls: type) -> Flatten | None:
        """The ``(flatten, unflatten)`` optree functions for a container type of this framework."""
        ...

    def move_container(self, cls: type) -> Flatten | None:
        """The optree ``(flatten, unflatten)`` of a container type only ``to_device`` looks into.

        A lazily stacked TensorDict: ``to_device`` moves and casts its leaves, but its
        parts are samples, not columns, so the Loader does not batch them.
        """
        ...

    def is_batched_node(self, x: Any) -> bool:
        """Whether ``x`` is a container that records its batch size (a TensorDict)."""
        ...


class Native(Protocol):
    """Optional: device objects of this framework, and compiled batch functions.

    Examples:
        >>> from looptoolkit.adapters import get_backend
        >>> double = get_backend("numpy").compile_transform(lambda x: 2 * x)  # eager
        >>> double(3)
        6
    """

    def native_target(self, device: Any) -> Target | None:
        """The ``Target`` of a device object of this framework, or None if it is not one."""
        ...

    def compile_transform(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``fn`` compiled for batches of this framework (``jax.jit``, ``tf.function``)."""
        ...

    def bind_target(self, target: Target) -> Target:
        """``target`` with what the calling thread's state decides fixed in it.

        The Loader calls it once, in the thread that builds it, so that its
        background thread moves batches to the same device (torch: ``"cuda"``
        becomes ``"cuda:N"``, N the calling thread's current device).
        """
        ...


@runtime_checkable
class Backend(Required, Staging, Sharding, Containers, Native, Protocol):
    """What the core asks of a framework: the required surface and every optional capability.

    A backend class derives from [`BackendBase`][looptoolkit.adapters.BackendBase],
    which answers each optional capability for a framework that lacks it, and
    implements [`Required`][looptoolkit.adapters.Required]. A backend is a module
    whose ``backend`` attribute implements this protocol, listed in ``BACKENDS``
    (name, module, framework, pip extra) or added with
    [`register_backend`][looptoolkit.adapters.register_backend].

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


class BackendBase:
    """Every optional capability, answered for a framework that has none of it.

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

    # -- Native

    def native_target(self, device: Any) -> Target | None:
        """No device objects of its own."""
        return None

    def compile_transform(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Nothing to compile: ``fn`` runs eagerly."""
        return fn

    def bind_target(self, target: Target) -> Target:
        """No per-thread device state: ``target`` as it is."""
        return target

    # -- Containers

    def owns_object(self, obj: Any) -> bool:
        """No objects of its own."""
        return False

    def container(self, cls: type) -> Flatten | None:
        """No container types of its own."""
        return None

    def move_container(self, cls: type) -> Flatten | None:
        """No container types that only ``to_device`` looks into."""
        return None

    def is_batched_node(self, x: Any) -> bool:
        """No batch-sized containers."""
        return False

    # -- Sharding

    def process_group(self) -> tuple[int, int] | None:
        """No process groups."""
        return None

    def batch_shards(self, target: Target, leaf: Any) -> int:
        """Batches are not split across devices."""
        return 1

    # -- Staging

    def stager(
        self, leaves: Sequence[Any], batch_size: int, target: Target, slots: int
    ) -> Stager | None:
        """No staged upload: batches are moved one ``move`` at a time."""
        return None
