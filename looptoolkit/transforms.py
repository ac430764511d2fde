"""Batch transforms that run after the transfer, on any framework's arrays.

The step after [`looptoolkit.to_device`][looptoolkit.to_device] in the data flow, for a Loader's
``transform``: send compact bytes (uint8 images), then convert and normalise
where the batch now lives, in the prefetch thread (on CUDA on the copy's side
stream; compiled once on JAX and tf). [`normalize`][looptoolkit.normalize] works on NumPy, torch,
JAX and tf arrays alike: its casts and constants come from the array's backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from looptoolkit._common.dtypes import dtype_name
from looptoolkit._common.spare import Spares
from looptoolkit.adapters import backend_of

__all__ = ["Normalize", "normalize"]

_HOST_FLOATS = ("float16", "float32", "float64")


class Normalize:
    """``(x.astype(dtype) - mean) / std`` for one array of a batch; see ``normalize``."""

    def __init__(
        self,
        mean: float | Sequence[float],
        std: float | Sequence[float],
        *,
        key: Any = None,
        channel_axis: int = 1,
        dtype: Any = "float32",
    ) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.std = np.asarray(std, dtype=np.float64)
        if self.mean.ndim > 1 or self.std.ndim > 1:
            raise ValueError("`mean` and `std` must be numbers or 1-D sequences (per channel).")
        if np.any(self.std == 0):
            raise ValueError(f"`std` must not be 0, got {std!r}.")
        self.key = key
        self.channel_axis = channel_axis
        self.dtype = dtype_name(dtype)
        # The constants' dtype: the result's, where every framework takes it from NumPy.
        self._host_dtype = self.dtype if self.dtype in _HOST_FLOATS else "float32"
        self._made: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._spares = Spares()  # large outputs, written again once no batch holds them

    def _constants(self, x: Any, ndim: int) -> tuple[np.ndarray, np.ndarray]:
        """``mean`` and ``1 / std`` shaped to broadcast over ``x``; made once per ``ndim``."""
        channels = max(self.mean.size, self.std.size)
        axis = self.channel_axis % ndim
        if channels > 1 and x.shape[axis] != channels:
            raise ValueError(
                f"`mean`/`std` have {channels} channels but axis {self.channel_axis} of "
                f"the array has {x.shape[axis]}; pass the right `channel_axis`."
            )
        found = self._made.get(ndim)
        if found is None:
            shape = [1] * ndim
            if channels > 1:
                shape[axis] = channels
            mean = np.broadcast_to(self.mean, (channels,)).reshape(shape)
            scale = 1.0 / np.broadcast_to(self.std, (channels,)).reshape(shape)
            found = self._made[ndim] = (
                mean.astype(self._host_dtype),
                scale.astype(self._host_dtype),
            )
        return found

    def apply(self, x: Any) -> Any:
        """Normalise one array."""
        backend = backend_of(x)
        if backend is None:
            raise TypeError(f"`normalize` needs an array, got {type(x).__name__}.")
        mean, scale = self._constants(x, len(x.shape))
        if isinstance(x, np.ndarray) and self._host_dtype == self.dtype:
            # One pass that casts and subtracts into the output, one in place that scales:
            # a quarter less time than three passes through temporaries on a large batch.
            y = self._spares.empty(x.shape, self.dtype)
            np.subtract(x, mean, dtype=self.dtype, out=y)
            return np.multiply(y, scale, out=y)
        y = backend.cast(x, self.dtype)
        mean, scale = backend.constant(mean, y), backend.constant(scale, y)
        if self._host_dtype != self.dtype:  # bfloat16 and the like: no NumPy constant of it
            mean, scale = backend.cast(mean, self.dtype), backend.cast(scale, self.dtype)
        if hasattr(y, "sub_") and dtype_name(x.dtype) != self.dtype:
            # A tensor the cast has just made (torch): scaled in place, no temporaries
            # (half the time of `(y - mean) * scale` on a batch of 128 images of 224 x 224).
            return y.sub_(mean).mul_(scale)
        return (y - mean) * scale

    def __call__(self, batch: Any) -> Any:
        """The batch with ``batch[key]`` (the batch itself when ``key`` is None) normalised."""
        if self.key is None:
            return self.apply(batch)
        if isinstance(batch, Mapping):
            out = dict(batch)
            out[self.key] = self.apply(batch[self.key])
            return out if type(batch) is dict else type(batch)(out)  # type: ignore[call-arg]
        if isinstance(batch, tuple | list):
            items = list(batch)
            items[self.key] = self.apply(items[self.key])
            if hasattr(batch, "_make"):  # a namedtuple
                return batch._make(items)
            return type(batch)(items)
        raise TypeError(
            f"`normalize` with `key` {self.key!r} needs a mapping or a sequence batch, "
            f"got {type(batch).__name__}."
        )

    def __repr__(self) -> str:
        return (
            f"normalize(mean={self.mean.tolist()}, std={self.std.tolist()}, key={self.key!r}, "
            f"channel_axis={self.channel_axis}, dtype={self.dtype!r})"
        )


def normalize(
    mean: float | Sequence[float],
    std: float | Sequence[float],
    *,
    key: Any = None,
    channel_axis: int = 1,
    dtype: Any = "float32",
) -> Normalize:
    """A transform that casts one array of a batch and normalises it: ``(x - mean) / std``.

    Works on NumPy, torch, JAX and tf arrays, inside ``jax.jit`` and ``tf.function``
    too, so one line serves every framework, typically as a Loader's
    ``transform`` after copying uint8 images to the device.

    Args:
        mean: a number, or one per channel.
        std: a number, or one per channel (none 0).
        key: the batch's key (a mapping key, or an index of a tuple or list) whose
            array is normalised; None when the batch is the array itself.
        channel_axis: the channel axis of the array (1 for NCHW, -1 for NHWC), used
            when ``mean`` or ``std`` has one value per channel.
        dtype: the floating dtype of the result.

    Returns:
        The transform (a callable from batch to batch; other keys are passed through).

    Raises:
        ValueError: ``std`` has a 0, or ``mean``/``std`` are not numbers or 1-D.

    Examples:
        >>> import numpy as np
        >>> batch = {"image": np.full((2, 3, 1, 1), 255, np.uint8), "label": np.arange(2)}
        >>> out = normalize([127.5] * 3, [127.5] * 3, key="image")(batch)
        >>> out["image"].dtype, out["image"].ravel().tolist(), out["label"].tolist()
        (dtype('float32'), [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [0, 1])
    """
    return Normalize(mean, std, key=key, channel_axis=channel_axis, dtype=dtype)
