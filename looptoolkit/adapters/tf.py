"""TensorFlow backend: ``tf.gather`` in one ``tf.function`` per batch, ``tf.device`` moves.

tf leaves are placed with ``tf.device("/GPU:0")``-style names; NumPy leaves sent
to tf become ``tf.Tensor`` on the named device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from looptoolkit.device import cast_before_copy

if TYPE_CHECKING:
    from looptoolkit.device import Target

_gathers: dict[int, Callable[..., Any]] = {}


def _gather_fn(count: int) -> Callable[..., Any]:
    fn = _gathers.get(count)
    if fn is None:

        @tf.function(reduce_retracing=True)
        def gather(leaves: list[tf.Tensor], idx: tf.Tensor) -> list[tf.Tensor]:
            return [tf.gather(leaf, idx) for leaf in leaves]

        fn = _gathers[count] = gather
    return fn


def device_name(target: Target) -> str:
    """The tf device name (``"/GPU:0"``) for ``target``; raises when it is not present."""
    kind = "CPU" if target.platform == "cpu" else "GPU"
    if target.platform not in ("cpu", "cuda"):
        raise RuntimeError(f"tf has no {target.platform} devices here")
    index = target.index or 0
    present = tf.config.list_logical_devices(kind)
    if index >= len(present):
        raise RuntimeError(f"tf has {len(present)} {kind} device(s); asked for {kind}:{index}")
    return f"/{kind}:{index}"


class TfBackend:
    """Backend for ``tf.Tensor``."""

    name = "tf"

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a tf tensor."""
        return isinstance(x, tf.Tensor)

    def length(self, x: tf.Tensor) -> int:
        """Leading dimension of ``x``."""
        return int(x.shape[0])

    def dtype_name(self, x: tf.Tensor) -> str:
        """The dtype's name."""
        return str(x.dtype.name)

    def take(self, leaves: Sequence[tf.Tensor], idx: Any) -> list[tf.Tensor]:
        """Gather rows of every leaf in one ``tf.function`` call."""
        return list(_gather_fn(len(leaves))(list(leaves), tf.convert_to_tensor(idx)))

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[tf.Tensor]:
        """Copy tf tensors (and NumPy arrays sent to tf) to the named device."""
        name = device_name(target)
        out = []
        with tf.device(name):
            for leaf, cast in zip(leaves, casts, strict=True):
                source = leaf.dtype.name
                if isinstance(leaf, np.ndarray):
                    if cast is not None and cast_before_copy(source, cast):
                        leaf, cast = leaf.astype(cast), None
                    x = tf.convert_to_tensor(leaf)
                else:
                    if cast is not None and cast_before_copy(source, cast):
                        leaf, cast = tf.cast(leaf, cast), None
                    x = tf.identity(leaf)
                out.append(x if cast is None else tf.cast(x, cast))
        return out

    def synchronize(self, target: Target | None = None) -> None:
        """Wait for queued work on tf's GPUs (host ops complete eagerly)."""
        if tf.config.list_logical_devices("GPU"):
            tf.test.experimental.sync_devices()


backend = TfBackend()
