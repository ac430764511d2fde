"""The image ops' kernels on tf tensors: ``tf.function`` of the shared kernel bodies.

[`KERNELS`][looptoolkit.augment._tf.KERNELS] runs the bodies of
[`_kernels`][looptoolkit.augment._kernels] with [`NUMPY`][looptoolkit.augment._tf.NUMPY],
the NumPy names they use written with tf ops (``tf.experimental.numpy`` needs NumPy
behaviour switched on for the whole process, which a library must not do), compiled by
``tf.function`` once per op configuration and input shape, on the device the images are
on. A row's crop is two gathers of its rows and columns.

This module imports tensorflow, and is itself imported only when a tf tensor reaches an op
(a ``tf.Tensor`` can only exist once tensorflow is imported).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from looptoolkit.augment._kernels import Kernels

__all__ = ["KERNELS", "NUMPY", "TRACES"]


class _Namespace:
    """The NumPy names the kernel bodies and ``_image``'s shared helpers use, on tf tensors."""

    float32 = tf.float32
    int32 = tf.int32

    maximum = staticmethod(tf.maximum)
    minimum = staticmethod(tf.minimum)
    where = staticmethod(tf.where)
    ones_like = staticmethod(tf.ones_like)
    floor = staticmethod(tf.floor)
    abs = staticmethod(tf.abs)
    round = staticmethod(tf.round)  # half to even, as np.rint
    transpose = staticmethod(tf.transpose)
    reshape = staticmethod(tf.reshape)
    broadcast_to = staticmethod(tf.broadcast_to)
    einsum = staticmethod(tf.einsum)

    @staticmethod
    def dtype(name: str) -> Any:
        return tf.as_dtype(name)

    @staticmethod
    def is_float(x: Any) -> bool:
        return bool(x.dtype.is_floating)

    @staticmethod
    def is_float_dtype(dtype: Any) -> bool:
        return bool(tf.as_dtype(dtype).is_floating)

    @staticmethod
    def cast(x: Any, dtype: Any) -> Any:
        return tf.cast(x, dtype)

    @staticmethod
    def asarray(x: Any, dtype: Any = None) -> Any:
        if isinstance(x, tf.Tensor):
            return x if dtype is None else tf.cast(x, dtype)
        return tf.constant(np.asarray(x), dtype=dtype)

    @staticmethod
    def arange(n: int, dtype: Any) -> Any:
        return tf.range(n, dtype=dtype)

    @staticmethod
    def zeros(shape: Any, dtype: Any) -> Any:
        return tf.zeros(shape, dtype=dtype)

    @staticmethod
    def clip(x: Any, lo: Any, hi: Any) -> Any:
        x = x if lo is None else tf.maximum(x, tf.cast(lo, x.dtype))
        return x if hi is None else tf.minimum(x, tf.cast(hi, x.dtype))

    @staticmethod
    def trunc(x: Any) -> Any:
        return tf.where(x < 0, tf.math.ceil(x), tf.floor(x))

    @staticmethod
    def fmod(x: Any, y: Any) -> Any:
        return x - y * _Namespace.trunc(x / y)

    @staticmethod
    def sum(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return tf.reduce_sum(x, axis=axis, keepdims=keepdims)

    @staticmethod
    def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return tf.reduce_mean(x, axis=axis, keepdims=keepdims)

    @staticmethod
    def stack(xs: Any, axis: int = 0) -> Any:
        return tf.stack(xs, axis=axis)

    @staticmethod
    def concatenate(xs: Any, axis: int = 0) -> Any:
        return tf.concat(xs, axis=axis)

    @staticmethod
    def flip(x: Any, axis: int) -> Any:
        return tf.reverse(x, [axis])

    @staticmethod
    def pad(x: Any, widths: Any, value: Any) -> Any:
        return tf.pad(x, widths, constant_values=value)

    @staticmethod
    def take(x: Any, rows: Any) -> Any:
        return tf.gather(x, rows, axis=0)

    @staticmethod
    def take_along_axis(x: Any, idx: Any, axis: int) -> Any:
        """``np.take_along_axis`` for the last axis, ``idx`` of ``x``'s rank (broadcast)."""
        rank = len(x.shape)
        if axis not in (-1, rank - 1):
            raise NotImplementedError("take_along_axis on tf tensors gathers on the last axis")
        idx = tf.broadcast_to(idx, [*x.shape[:-1], idx.shape[-1]])
        return tf.gather(x, idx, batch_dims=rank - 1)

    @staticmethod
    def crops(x: Any, tops: Any, lefts: Any, size: tuple[int, int]) -> Any:
        rows = tops[:, None] + tf.range(size[0], dtype=tops.dtype)  # (N, h)
        cols = lefts[:, None] + tf.range(size[1], dtype=lefts.dtype)  # (N, w)
        x = tf.gather(x, rows, axis=2, batch_dims=1)  # (N, C, h, W)
        return tf.gather(x, cols, axis=3, batch_dims=1)  # (N, C, h, w)

    @staticmethod
    def one_hot(labels: Any, k: int) -> Any:
        return tf.one_hot(labels, k, dtype=tf.float32)


NUMPY = _Namespace()
"""The NumPy names on tf tensors (the kernels' ``xp``)."""


def _host(values: np.ndarray) -> Any:
    """Host parameters as tf tensors: int32, float32 or bool."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        values = values.astype(np.int32)
    elif values.dtype.kind == "f":
        values = values.astype(np.float32)
    return tf.constant(values)


def _compile(fn: Any) -> Any:
    return tf.function(fn, autograph=False, reduce_retracing=False)


KERNELS = Kernels(NUMPY, _compile, _host)
"""The kernels on tf tensors."""

TRACES = KERNELS.traces
"""Traces of each kernel, by name: a trace is a compilation, one per configuration and shape."""
