"""Which batched kernels an op's images take: JAX's, tf's, torch's off the host, or none.

Above the kernel modules (``_jax``, ``_tf``, ``_torch``), each imported here only when its
kind of array first reaches an op; below the ops, which ask
[`kernels`][looptoolkit.augment._dispatch.kernels] before taking their host paths.
"""

from __future__ import annotations

from typing import Any

from looptoolkit.augment._image import is_jax, is_tf, is_torch

__all__ = ["HOST_DEVICES", "kernels"]

HOST_DEVICES = frozenset({"cpu"})
"""Device types whose torch tensors take the ops' host paths (torch's per-image kernels)."""


def kernels(x: Any) -> Any:
    """The batched kernels for ``x``: JAX, tf, torch off the host; None on the host paths."""
    if is_torch(x):
        if x.device.type in HOST_DEVICES:
            return None
        from looptoolkit.augment import _torch

        return _torch.kernels_on(x.device)
    if is_jax(x):
        from looptoolkit.augment import _jax

        return _jax.KERNELS
    if is_tf(x):
        from looptoolkit.augment import _tf

        return _tf.KERNELS
    return None
