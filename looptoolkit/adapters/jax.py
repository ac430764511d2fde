"""JAX backend: one jitted gather for all leaves, one ``jax.device_put`` per move.

A JAX dispatch costs tens of microseconds, so every call here handles the whole
list of leaves at once: the gather is one jitted function over the list, and a
move is one ``jax.device_put`` of the list to a device or a ``Sharding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from looptoolkit._common.dtypes import as_numpy_dtype
from looptoolkit._common.target import Target
from looptoolkit.adapters import _jax_blocks
from looptoolkit.adapters._host import aligned_gather, chunked, split_chunks
from looptoolkit.adapters._jax_blocks import JaxBlockStager, split, stageable
from looptoolkit.adapters._protocol import BackendBase, Stager

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator


@partial(jax.jit, static_argnames=())
def _take(leaves: list[jax.Array], idx: jax.Array) -> list[jax.Array]:
    return [jnp.take(leaf, idx, axis=0, mode="clip") for leaf in leaves]


# Batches gathered per dispatch by `take_batches` on an accelerator: a dispatch
# costs more than a 300-row gather, and 16 batches ahead is little memory.
_CHUNK = 16


@partial(jax.jit, static_argnums=(2, 3))
def _take_chunk(
    leaves: list[jax.Array], idx: jax.Array, size: int, count: int
) -> list[list[jax.Array]]:
    # One gather of `count` batches of `size` rows, split into batches inside the
    # program: one dispatch and one index transfer for all of them.
    rows = [jnp.take(leaf, idx, axis=0, mode="fill") for leaf in leaves]
    return [[r[j * size : (j + 1) * size] for r in rows] for j in range(count)]


def _take_on_device(
    leaves: list[jax.Array], batches: Iterable[np.ndarray], device: Any
) -> Iterator[list[jax.Array]]:
    """Gathers on ``device``: the indices of 16 batches per transfer and per dispatch."""
    small = max(leaf.shape[0] for leaf in leaves) < 2**31
    dtype = np.int32 if small else np.int64
    for chunk in chunked(batches, _CHUNK):
        size = len(chunk[0])
        if len(chunk) == _CHUNK and all(len(idx) == size for idx in chunk):
            flat = jax.device_put(np.concatenate(chunk).astype(dtype), device)
            yield from _take_chunk(leaves, flat, size, _CHUNK)
        else:
            for idx in chunk:
                yield list(_take(leaves, jax.device_put(idx.astype(dtype), device)))


def resolve_device(target: Target) -> Any:
    """The ``jax.Device`` or ``jax.sharding.Sharding`` for ``target``."""
    native = target.native
    if isinstance(native, (jax.Device, jax.sharding.Sharding)):
        return native
    platform = "gpu" if target.platform == "cuda" else target.platform
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        raise RuntimeError(
            f"JAX has no {platform} device (backends: {jax.default_backend()})"
        ) from None
    index = target.index or 0
    if index >= len(devices):
        raise RuntimeError(f"JAX has {len(devices)} {platform} device(s); asked for {index}")
    return devices[index]


def _check_cast(name: str) -> None:
    """Raise when JAX would silently hold dtype ``name`` as another (float64 without x64)."""
    wanted = as_numpy_dtype(name)
    held = jax.dtypes.canonicalize_dtype(wanted)
    if held != wanted:
        raise TypeError(
            f"JAX holds {name} as {held.name} here (`jax_enable_x64` is off); "
            f"cannot cast to {name}."
        )


def _platform(device: Any) -> str:
    return "cuda" if device.platform in ("gpu", "cuda", "rocm") else str(device.platform)


class JaxBackend(BackendBase):
    """Backend for ``jax.Array``."""

    name = "jax"

    def native_target(self, device: Any) -> Target | None:
        """The target of a ``jax.Device`` or a ``jax.sharding.Sharding``."""
        if isinstance(device, jax.Device):
            return Target(device, _platform(device), device.id, home="jax", native=device)
        if isinstance(device, jax.sharding.Sharding):
            first = next(iter(device.device_set))
            return Target(device, _platform(first), None, home="jax", native=device)
        return None

    def resolve_device(self, target: Target) -> Any:
        """The ``jax.Device`` or ``Sharding`` for ``target``; raises when it is not present."""
        return resolve_device(target)

    def compile_transform(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``jax.jit(fn)``: compiled once per batch shape, one dispatch per batch."""
        return jax.jit(fn)

    def batch_shards(self, target: Target, leaf: Any) -> int:
        """Shards of a ``Sharding``'s batch axis (1 for a device, or an unsplittable axis)."""
        sharding = target.native
        if not isinstance(sharding, jax.sharding.Sharding):
            return 1
        devices = len(sharding.device_set)
        try:
            return int(devices // sharding.shard_shape((devices, *leaf.shape[1:]))[0])
        except ValueError:  # another axis does not split: moving the leaf names it
            return 1

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a JAX array."""
        return isinstance(x, jax.Array)

    def dtype_name(self, x: jax.Array) -> str:
        """The dtype's name."""
        return str(x.dtype.name)

    def concatenate(self, leaves: Sequence[jax.Array]) -> jax.Array:
        """One array of ``leaves``' rows, one after the other (a mixture's columns)."""
        return jnp.concatenate(list(leaves))

    def stack(self, leaves: Sequence[jax.Array]) -> jax.Array:
        """``jnp.stack(leaves)``."""
        return jnp.stack(list(leaves))

    def take(self, leaves: Sequence[jax.Array], idx: Any) -> list[jax.Array]:
        """Gather rows of every leaf in one jitted call (one dispatch per batch)."""
        return list(_take(list(leaves), idx))

    def take_batches(
        self, leaves: Sequence[jax.Array], batches: Iterable[np.ndarray]
    ) -> Iterator[list[jax.Array]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily.

        Leaves on the host CPU are gathered by NumPy from zero-copy views, a chunk
        of batches at a time ([`host_chunks`][looptoolkit.adapters.host_chunks]), into
        64-byte-aligned arrays (``jax.device_put`` copies others once more); each
        chunk is one ``jax.device_put`` of all leaves and one jitted split into
        its batches: a JAX call per chunk, not per batch (jitted gathers on the
        CPU hand work to XLA's threads, which share the cores with everything
        else, and measured slower). For leaves on one accelerator, the indices of
        16 batches go to the device in one transfer and are gathered by one
        dispatch (three programs compiled per shape: 16 batches, one batch, a
        last short one).
        """
        leaves = list(leaves)
        devices = {device for leaf in leaves for device in leaf.devices()}
        if len(devices) != 1:  # sharded or spread over devices: one take per batch
            for idx in batches:
                yield self.take(leaves, idx)
            return
        device = devices.pop()
        if device.platform == "cpu":
            views = [np.asarray(leaf) for leaf in leaves]
            yield from split_chunks(
                views,
                batches,
                lambda rows: jax.device_put(rows, device),
                lambda arrays, sizes: split(arrays, tuple(sizes)),
                aligned_gather,
            )
            return
        yield from _take_on_device(leaves, batches, device)

    def stager(
        self, leaves: Sequence[Any], batch_size: int, target: Target, slots: int
    ) -> Stager | None:
        """Block uploads (``_jax_blocks``) of host leaves to one JAX device.

        None (each batch gathered, then moved by one ``device_put``) for a
        ``Sharding`` target, where no leaf is on the host (or of a dtype JAX
        holds), and where ``_jax_blocks.BLOCK_BYTES`` is 0.
        """
        if target.home != "jax" or _jax_blocks.BLOCK_BYTES <= 0:
            return None
        device = resolve_device(target)
        if not isinstance(device, jax.Device):  # a Sharding: batches moved one at a time
            return None
        views = [(i, v) for i, v in enumerate(map(stageable, leaves)) if v is not None]
        if not views:
            return None
        return JaxBlockStager(views, batch_size, device)

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[jax.Array]:
        """Put JAX arrays (and NumPy arrays sent to JAX) on the target with one ``device_put``.

        JAX orders reads after transfers itself, so ``non_blocking`` needs no
        synchronisation here; ``pack`` does not apply (``device_put`` already
        transfers a list in one call).
        """
        return list(jax.device_put(list(leaves), resolve_device(target)))

    def cast(self, x: jax.Array | np.ndarray, name: str) -> jax.Array | np.ndarray:
        """``x.astype(name)``; raises where JAX would hold another dtype (float64 without x64)."""
        _check_cast(name)
        return x.astype(as_numpy_dtype(name))

    def constant(self, values: np.ndarray, like: jax.Array) -> jax.Array:
        """``jnp.asarray(values)`` (JAX moves it to ``like``'s device where they meet)."""
        return jnp.asarray(values)

    def synchronize(self, target: Target | None = None) -> None:
        """Wait for outstanding JAX work with side effects (``jax.effects_barrier``).

        JAX has no device-wide wait: queued computations and transfers are waited
        for on their outputs (``jax.block_until_ready``), as the benchmarks do on
        every batch.
        """
        jax.effects_barrier()


backend = JaxBackend()
