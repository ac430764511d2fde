"""Layout and dtype helpers the image ops share, for NumPy arrays and torch tensors alike.

The ops compute on a channel-first view ``(N, C, H, W)`` of the batch (a transposed view
for channel-last images, no copy) and write into a copy of the batch in its own layout, so
one code path serves both layouts. torch, JAX and tf are recognised by ``sys.modules``: a
tensor can only exist once its framework is imported, so nothing here imports one. JAX
arrays, tf tensors and torch tensors off the host go to the batched kernels instead
([`_dispatch.kernels`][looptoolkit.augment._dispatch.kernels]); the shared helpers here
(the HSV round trip, the affine sampling, the resampling weights) take the kernels' array
namespace ``xp``, or find NumPy's, torch's or JAX's from their input.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from looptoolkit.augment._base import ImageBatch, Op

__all__ = [
    "ImageOp",
    "array_module",
    "as_pair",
    "as_range",
    "base_grid",
    "cast_round",
    "cast_trunc",
    "clip",
    "first",
    "hsv_to_rgb",
    "is_float",
    "is_jax",
    "is_tf",
    "is_torch",
    "layout",
    "max_value",
    "replace",
    "resample_weights",
    "rgb_to_hsv",
    "rows",
    "sample_at",
    "stack",
    "to_float32",
    "writable",
]


def is_torch(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_jax(x: Any) -> bool:
    """Whether ``x`` is a JAX array (without importing jax)."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def is_tf(x: Any) -> bool:
    """Whether ``x`` is a tf tensor (without importing tensorflow)."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(x, tf.Tensor)


def is_float(x: Any) -> bool:
    """Whether ``x`` holds floating-point values."""
    if is_torch(x):
        return bool(x.is_floating_point())
    if is_tf(x):
        return bool(x.dtype.is_floating)
    return bool(np.issubdtype(x.dtype, np.floating))


def max_value(x: Any) -> float:
    """The value of white: 255 for uint8 images, 1 for float images."""
    return 1.0 if is_float(x) else 255.0


def first(images: Any, channels: str) -> Any:
    """A channel-first view ``(N, C, H, W)`` of ``images`` (no copy)."""
    if channels == "first":
        return images
    return images.permute(0, 3, 1, 2) if is_torch(images) else images.transpose(0, 3, 1, 2)


def layout(images: Any, channels: str) -> Any:
    """Channel-first ``images`` as a contiguous array in the ``channels`` layout."""
    if channels == "first":
        return images
    if is_torch(images):
        return images.permute(0, 2, 3, 1).contiguous()
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1))


def stack(images: list[Any]) -> Any:
    """Images of one shape stacked into a batch."""
    if is_torch(images[0]):
        import torch

        return torch.stack(images)
    return np.stack(images)


def writable(batch: ImageBatch) -> Any:
    """The batch's images to write the op's result into: an earlier op's own, or a copy."""
    images = batch.images
    if batch.owned:
        return images
    return images.clone() if is_torch(images) else images.copy()


def rows(apply: np.ndarray, like: Any) -> Any:
    """The indices of the rows where ``apply``, as an index for ``like``'s kind of array."""
    idx = np.flatnonzero(apply)
    if is_torch(like):
        import torch

        return torch.as_tensor(idx, device=like.device)
    return idx


def to_float32(x: Any) -> Any:
    """``x`` as float32 (values unchanged)."""
    if is_torch(x):
        import torch

        return x.to(torch.float32)
    return x.astype(np.float32)


def clip(x: Any, lo: float, hi: float) -> Any:
    """``x`` clipped to ``[lo, hi]``."""
    return x.clamp(lo, hi) if is_torch(x) else np.clip(x, lo, hi)


def cast_trunc(x: Any, like: Any) -> Any:
    """Float ``x`` as ``like``'s dtype, clipped to its range and truncated (torch's ``.to``)."""
    x = clip(x, 0.0, max_value(like))
    return x.to(like.dtype) if is_torch(x) else x.astype(like.dtype)


def cast_round(x: Any, like: Any) -> Any:
    """Float ``x`` as ``like``'s dtype, rounded half to even when ``like`` is an integer."""
    if not is_float(like):
        x = x.round() if is_torch(x) else np.rint(x)
    return cast_trunc(x, like)


def base_grid(height: int, width: int) -> np.ndarray:
    """``(H * W, 3)`` float32 pixel centres ``(x, y, 1)``, relative to the image centre."""
    x = np.linspace(-width * 0.5 + 0.5, width * 0.5 - 0.5, width, dtype=np.float32)
    y = np.linspace(-height * 0.5 + 0.5, height * 0.5 - 0.5, height, dtype=np.float32)
    grid = np.ones((height, width, 3), dtype=np.float32)
    grid[..., 0] = x[None, :]
    grid[..., 1] = y[:, None]
    return grid.reshape(-1, 3)


def replace(batch: ImageBatch, images: Any) -> ImageBatch:
    """``batch`` with the images an op made (same layout, labels kept; owned by the ops)."""
    return ImageBatch(images, batch.channels, batch.labels, batch.num_classes, owned=True)


def as_pair(value: Any, name: str) -> tuple[int, int]:
    """An ``(height, width)`` size from an int or a pair of ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        pair: tuple[Any, ...] = (value, value)
    elif isinstance(value, tuple | list) and len(value) == 2:
        pair = tuple(value)
    else:
        raise TypeError(f"`{name}` must be an int or a pair of ints, got {value!r}.")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise TypeError(f"`{name}` must be an int or a pair of ints, got {value!r}.")
    if min(pair) < 1:
        raise ValueError(f"`{name}` must be >= 1, got {value!r}.")
    return int(pair[0]), int(pair[1])


def as_range(value: Any, name: str, *, low: float | None = None) -> tuple[float, float]:
    """A ``(low, high)`` range of floats, ``low <= high``."""
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TypeError(f"`{name}` must be a pair of numbers, got {value!r}.")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise TypeError(f"`{name}` must be a pair of numbers, got {value!r}.")
    a, b = float(value[0]), float(value[1])
    if a > b or (low is not None and a < low):
        bound = "" if low is None else f" and >= {low}"
        raise ValueError(f"`{name}` must be (low, high) with low <= high{bound}, got {value!r}.")
    return a, b


class ImageOp(Op):
    """An [`Op`][looptoolkit.augment._base.Op] on images, with a ``__repr__`` of its arguments.

    Subclasses list their constructor's arguments in ``_fields`` (stored as attributes).
    """

    _fields: tuple[str, ...] = ("p",)

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({args})"


def array_module(x: Any) -> Any:
    """The array namespace of ``x``: ``torch``, ``jax.numpy`` or ``numpy`` (imports nothing new).

    A JAX array (or a tracer inside a jitted function) can only exist once jax is imported.
    """
    if is_torch(x):
        return sys.modules["torch"]
    if is_jax(x):
        import jax.numpy as jnp

        return jnp
    return np


def rgb_to_hsv(img: Any, xp: Any = None) -> tuple[Any, Any, Any]:
    """Hue, saturation and value of float RGB images ``(n, 3, H, W)`` (torchvision's formulas)."""
    xp = array_module(img) if xp is None else xp
    r, g, b = img[:, 0], img[:, 1], img[:, 2]
    maxc = xp.maximum(xp.maximum(r, g), b)
    minc = xp.minimum(xp.minimum(r, g), b)
    eqc = maxc == minc
    cr = maxc - minc
    ones = xp.ones_like(maxc)
    s = cr / xp.where(eqc, ones, maxc)
    cr_divisor = xp.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / cr_divisor, (maxc - g) / cr_divisor, (maxc - b) / cr_divisor
    hr = xp.where(maxc == r, bc - gc, 0.0)
    hg = xp.where((maxc == g) & (maxc != r), 2.0 + rc - bc, 0.0)
    hb = xp.where((maxc != g) & (maxc != r), 4.0 + gc - rc, 0.0)
    h = xp.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return h, s, maxc


def hsv_to_rgb(h: Any, s: Any, v: Any, xp: Any = None) -> Any:
    """Float RGB images ``(n, 3, H, W)`` from hue, saturation and value (torchvision's)."""
    xp = array_module(h) if xp is None else xp
    i = xp.floor(h * 6.0)
    f = h * 6.0 - i
    i = i % 6
    p = xp.clip(v * (1.0 - s), 0.0, 1.0)
    q = xp.clip(v * (1.0 - s * f), 0.0, 1.0)
    t = xp.clip(v * (1.0 - s * (1.0 - f)), 0.0, 1.0)

    def pick(*choices: Any) -> Any:
        out = choices[5]
        for k in range(4, -1, -1):
            out = xp.where(i == k, choices[k], out)
        return out

    rgb = (pick(v, q, p, p, t, v), pick(t, v, v, q, p, p), pick(p, p, t, v, v, q))
    return xp.stack(rgb, 1)


def sample_at(
    flat: Any, ix: Any, iy: Any, h: int, w: int, fill: Any, mode: str, xp: Any = None
) -> Any:
    """Float32 samples of ``flat`` ``(n, c, h * w)`` at pixel coordinates ``ix, iy`` ``(n, h * w)``.

    Nearest or bilinear, as ``grid_sample`` with zero padding and ``align_corners=False``;
    outside the image the ``fill`` ``(1, c, 1)`` shows through (bilinear: in proportion to
    the taps outside). One code for NumPy, JAX and tf (inside a compiled function too).
    """
    xp = array_module(flat) if xp is None else xp
    n, c = flat.shape[0], flat.shape[1]

    def gather(x: Any, y: Any) -> tuple[Any, Any]:
        inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
        at = xp.asarray(xp.clip(y, 0, h - 1) * w + xp.clip(x, 0, w - 1), dtype=xp.int32)
        values = xp.take_along_axis(flat, xp.broadcast_to(at[:, None], (n, c, h * w)), axis=2)
        return xp.asarray(values, dtype=xp.float32), xp.asarray(inside[:, None], dtype=xp.float32)

    if mode == "nearest":  # round half to even, as rint
        values, inside = gather(xp.round(ix), xp.round(iy))
        return xp.where(inside < 0.5, fill, values)
    x0, y0 = xp.floor(ix), xp.floor(iy)
    fx, fy = (ix - x0)[:, None], (iy - y0)[:, None]
    total = xp.zeros((n, c, h * w), dtype=xp.float32)
    mask = xp.zeros((n, 1, h * w), dtype=xp.float32)
    for dy, dx, weight in (
        (0, 0, (1 - fx) * (1 - fy)),
        (0, 1, fx * (1 - fy)),
        (1, 0, (1 - fx) * fy),
        (1, 1, fx * fy),
    ):
        values, inside = gather(x0 + dx, y0 + dy)
        total = total + weight * inside * values
        mask = mask + weight * inside
    return total * mask + (1.0 - mask) * fill


def resample_weights(
    start: Any, n_in: Any, out: Any, full: Any, antialias: bool, xp: Any = None
) -> Any:
    """``(N, n_out, n_full)``: each row's bilinear resampling weights along one axis.

    Row ``k`` resamples its crop ``[start[k], start[k] + n_in[k])`` of an axis of ``n_full``
    pixels to ``n_out``; ``start`` and ``n_in`` are float ``(N,)``, ``out`` and ``full``
    the float indices ``0 .. n_out - 1`` and ``0 .. n_full - 1``. Half-pixel centres
    (``align_corners=False``); when downscaling with ``antialias`` the triangle filter is
    widened by the scale over PyTorch's span of taps (C's truncating casts) and each
    output's weights normalised, as PyTorch's (and Pillow's) antialiased bilinear
    resampling does. One code for NumPy, torch, JAX and tf.
    """
    xp = array_module(start) if xp is None else xp
    scale = (n_in / out.shape[0])[:, None]
    out = out[None, :]
    j = (full[None, :] - start[:, None])[:, None, :]
    if antialias:
        wide = scale >= 1.0
        support, inv = xp.where(wide, scale, 1.0), xp.where(wide, 1.0 / scale, 1.0)
        center = scale * (out + 0.5)
        lo = xp.clip(xp.trunc(center - support + 0.5), 0.0, None)[..., None]
        hi = xp.minimum(xp.trunc(center + support + 0.5), n_in[:, None])[..., None]
        w = xp.clip(1.0 - xp.abs((j - center[..., None] + 0.5) * inv[..., None]), 0.0, None)
        w = xp.where((j >= lo) & (j < hi), w, 0.0)
        return w / xp.sum(w, axis=2, keepdims=True)
    src = xp.clip(scale * (out + 0.5) - 0.5, 0.0, None)
    x0 = xp.floor(src)
    x1 = xp.minimum(x0 + 1, (n_in - 1)[:, None])
    lam = (src - x0)[..., None]
    return xp.where(j == x0[..., None], 1.0 - lam, 0.0) + xp.where(j == x1[..., None], lam, 0.0)
