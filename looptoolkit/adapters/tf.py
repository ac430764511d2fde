"""TensorFlow backend: ``tf.gather`` in one ``tf.function`` per batch, ``tf.device`` moves.

tf leaves are placed with ``tf.device("/GPU:0")``-style names; NumPy leaves sent
to tf become ``tf.Tensor`` on the named device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from looptoolkit._common.dtypes import as_numpy_dtype
from looptoolkit.adapters._host import (
    ALIGN,
    aligned_gather,
    gather_rows,
    row_gather,
    split_chunks,
)
from looptoolkit.adapters._protocol import BackendBase

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from looptoolkit._common.target import Target


@tf.function(reduce_retracing=True)
def _gather(leaves: list[tf.Tensor], idx: tf.Tensor) -> list[tf.Tensor]:
    # Traced once per list length and dtypes, shapes generalised (reduce_retracing).
    return [tf.gather(leaf, idx) for leaf in leaves]


_host_devices: dict[str, bool] = {}


def _host_views(leaves: Sequence[tf.Tensor]) -> list[np.ndarray] | None:
    """Zero-copy NumPy views of the leaves when all are numeric host tensors, else None."""
    for leaf in leaves:
        host = _host_devices.get(leaf.device)
        if host is None:
            host = _host_devices[leaf.device] = (
                tf.DeviceSpec.from_string(leaf.device).device_type == "CPU"
            )
        if not host or leaf.dtype == tf.string or leaf.dtype.is_quantized:
            return None
    return [np.asarray(leaf) for leaf in leaves]


_gpus: list[bool] = []


def _has_gpu() -> bool:
    """Whether tf sees a GPU, asked without starting its runtime (which maps GPU memory).

    ``list_physical_devices`` does not initialise the runtime; ``list_logical_devices``
    does, and tf then takes nearly all memory of every visible GPU (unless
    ``TF_FORCE_GPU_ALLOW_GROWTH=true``).
    """
    if not _gpus:
        _gpus.append(bool(tf.config.list_physical_devices("GPU")))
    return _gpus[0]


def _from_numpy(rows: list[np.ndarray]) -> list[tf.Tensor]:
    """Host tensors from NumPy arrays; on the host even where a GPU is the default."""
    if not _has_gpu():
        return [tf.convert_to_tensor(r) for r in rows]
    with tf.device("/CPU:0"):
        return [tf.convert_to_tensor(r) for r in rows]


# `convert_to_tensor` copies every NumPy array, then copies it again, slowly, when
# it does not start on tf's 64-byte boundary (NumPy's large arrays start 16 bytes
# past one). Chunks gathered into aligned arrays are adopted instead (DLPack).
_adoptable: dict[np.dtype, bool] = {}


def _can_adopt(dtype: np.dtype) -> bool:
    """Whether tf takes arrays of ``dtype`` over through DLPack, with their dtype."""
    ok = _adoptable.get(dtype)
    if ok is None:
        try:
            probe = tf.experimental.dlpack.from_dlpack(np.zeros(1, dtype).__dlpack__())
            ok = probe.dtype.as_numpy_dtype == dtype.type
        except Exception:  # no DLPack for this dtype (bfloat16, strings) or this NumPy
            ok = False
        _adoptable[dtype] = ok
    return ok


def _chunk_gather(view: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``aligned_gather(view)`` where tf can adopt the result, else ``row_gather(view)``."""
    return aligned_gather(view) if _can_adopt(view.dtype) else row_gather(view)


def _adopt(rows: list[np.ndarray]) -> list[tf.Tensor]:
    """Host tensors of freshly gathered arrays: aligned ones adopted without a copy (DLPack)."""
    if all(r.ctypes.data % ALIGN == 0 and _can_adopt(r.dtype) for r in rows):
        from_dlpack = tf.experimental.dlpack.from_dlpack
        return [from_dlpack(r.__dlpack__()) for r in rows]
    return _from_numpy(rows)


def _split(tensors: list[tf.Tensor], sizes: list[int]) -> Iterable[Sequence[tf.Tensor]]:
    """One ``tf.split`` per leaf into batches of ``sizes``; equal sizes given as a count."""
    parts: Any = len(sizes) if sizes[0] == sizes[-1] else sizes
    return zip(*(tf.split(t, parts) for t in tensors), strict=True)


def device_name(target: Target) -> str:
    """The tf device name (``"/GPU:0"``) for ``target``; raises when it is not present."""
    kind = "CPU" if target.platform == "cpu" else "GPU"
    if target.platform not in ("cpu", "cuda"):
        raise RuntimeError(f"tf has no {target.platform} devices here")
    index = target.index or 0
    if kind == "CPU" and index == 0:
        return "/CPU:0"  # always there: nothing to ask (asking would start the runtime)
    present = tf.config.list_logical_devices(kind)
    if index >= len(present):
        raise RuntimeError(f"tf has {len(present)} {kind} device(s); asked for {kind}:{index}")
    return f"/{kind}:{index}"


class TfBackend(BackendBase):
    """Backend for ``tf.Tensor``."""

    name = "tf"

    def resolve_device(self, target: Target) -> str:
        """The tf device name (``"/GPU:0"``) for ``target``; raises when it is not present."""
        return device_name(target)

    def compile_transform(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``tf.function(fn)``, traced once per batch shape (``reduce_retracing``)."""
        return tf.function(fn, reduce_retracing=True)

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a tf tensor."""
        return isinstance(x, tf.Tensor)

    def dtype_name(self, x: tf.Tensor) -> str:
        """The dtype's name."""
        return str(x.dtype.name)

    def concatenate(self, leaves: Sequence[tf.Tensor]) -> tf.Tensor:
        """One array of ``leaves``' rows, one after the other (a mixture's columns)."""
        return tf.concat(list(leaves), axis=0)

    def stack(self, leaves: Sequence[tf.Tensor]) -> tf.Tensor:
        """``tf.stack(leaves)``."""
        return tf.stack(list(leaves))

    def take(self, leaves: Sequence[tf.Tensor], idx: Any) -> list[tf.Tensor]:
        """Gather rows of every leaf: on the host with NumPy, elsewhere in one ``tf.function``.

        A ``tf.function`` call costs about 0.2 ms; NumPy's ``take`` on zero-copy views
        of host tensors, converted back, a few microseconds per leaf.
        """
        views = _host_views(leaves)
        if views is not None and isinstance(idx, np.ndarray):
            return _from_numpy([gather_rows(view, idx) for view in views])
        return list(_gather(list(leaves), tf.convert_to_tensor(idx)))

    def take_batches(
        self, leaves: Sequence[tf.Tensor], batches: Iterable[np.ndarray]
    ) -> Iterator[Sequence[tf.Tensor]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily.

        Host leaves are viewed as NumPy arrays once, gathered by NumPy a chunk of
        batches at a time ([`host_chunks`][looptoolkit.adapters.host_chunks]) into
        64-byte-aligned arrays that tf adopts without a copy (DLPack; numeric
        dtypes), and each chunk's tensor is split into its batches by one
        ``tf.split``: two eager tf ops per leaf per chunk, not per batch.
        """
        views = _host_views(leaves)
        if views is None:
            return (self.take(leaves, idx) for idx in batches)
        return split_chunks(views, batches, _adopt, _split, _chunk_gather)

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[tf.Tensor]:
        """Copy tf tensors (and NumPy arrays sent to tf) to the named device."""
        name = device_name(target)
        # A tensor's full name ends with e.g. "device:CPU:0"; one already there is
        # returned as is, as torch's `.to` does.
        suffix = "device:" + name.removeprefix("/")
        out = []
        with tf.device(name):
            for leaf in leaves:
                if isinstance(leaf, np.ndarray):
                    out.append(tf.convert_to_tensor(leaf))
                else:
                    out.append(leaf if leaf.device.endswith(suffix) else tf.identity(leaf))
        return out

    def cast(self, x: tf.Tensor | np.ndarray, name: str) -> tf.Tensor | np.ndarray:
        """``tf.cast(x, name)`` on the tensor's device; a NumPy array is cast by NumPy."""
        if isinstance(x, np.ndarray):
            return x.astype(as_numpy_dtype(name))
        if tf.executing_eagerly():
            with tf.device(x.device):
                return tf.cast(x, name)
        return tf.cast(x, name)

    def constant(self, values: np.ndarray, like: tf.Tensor) -> tf.Tensor:
        """``tf.constant(values)``."""
        return tf.constant(values)

    def synchronize(self, target: Target | None = None) -> None:
        """Wait for queued work on tf's GPUs (host ops complete eagerly)."""
        if (target is None or target.platform != "cpu") and _has_gpu():
            tf.test.experimental.sync_devices()


backend = TfBackend()
