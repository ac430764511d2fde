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

from looptoolkit.adapters.numpy import as_numpy_dtype
from looptoolkit.device import cast_before_copy

if TYPE_CHECKING:
    from looptoolkit.device import Target


@partial(jax.jit, static_argnames=())
def _take(leaves: list[jax.Array], idx: jax.Array) -> list[jax.Array]:
    return [jnp.take(leaf, idx, axis=0, mode="clip") for leaf in leaves]


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


class JaxBackend:
    """Backend for ``jax.Array``."""

    name = "jax"

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a JAX array."""
        return isinstance(x, jax.Array)

    def length(self, x: jax.Array) -> int:
        """Leading dimension of ``x``."""
        return int(x.shape[0])

    def dtype_name(self, x: jax.Array) -> str:
        """The dtype's name."""
        return str(x.dtype.name)

    def take(self, leaves: Sequence[jax.Array], idx: Any) -> list[jax.Array]:
        """Gather rows of every leaf in one jitted call (one dispatch per batch)."""
        return list(_take(list(leaves), idx))

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[jax.Array]:
        """Put JAX arrays (and NumPy arrays sent to JAX) on the target with one ``device_put``.

        JAX orders reads after transfers itself, so ``non_blocking`` needs no
        synchronisation here; ``pack`` does not apply (``device_put`` already
        transfers a list in one call).
        """
        device = resolve_device(target)
        staged: list[Any] = []
        after: list[str | None] = []
        for leaf, cast in zip(leaves, casts, strict=True):
            if cast is not None and cast_before_copy(leaf.dtype.name, cast):
                leaf = leaf.astype(as_numpy_dtype(cast))
                cast = None
            staged.append(leaf)
            after.append(cast)
        moved = jax.device_put(staged, device)
        return [
            x if cast is None else x.astype(as_numpy_dtype(cast))
            for x, cast in zip(moved, after, strict=True)
        ]

    def synchronize(self, target: Target | None = None) -> None:
        """Wait for outstanding JAX work with side effects."""
        jax.effects_barrier()


backend = JaxBackend()
