"""The image ops' kernels on JAX arrays: one compiled function per op configuration and shape.

The ops draw their per-row parameters on the host as on any array (NumPy, keyed) and, when
the images are a ``jax.Array``, hand them here: each kernel is built once per op
configuration (``jax.jit`` of a function closed over the op's constants, kept in a cache)
and compiled by ``jax.jit`` once per input shape and dtype; the parameters go in as arrays,
so a new batch of the same shape runs the compiled function without tracing again, and
every row is computed in the same call (masks, gathers and ``vmap``, no loop over rows).

The kernels compute as the NumPy paths of the ops do, in float32 with the same casts, so
the outputs agree with them: flips, crops, erasing and the mixing ops' pastes exactly, the
resampling and colour ops within one uint8 level (float32 sums in another order).

This module imports jax, and is itself imported only when a JAX array reaches an op (a
``jax.Array`` can only exist once jax is imported), so ``import looptoolkit.augment``
imports no framework.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from looptoolkit.augment._image import base_grid, hsv_to_rgb, rgb_to_hsv, sample_at

__all__ = [
    "TRACES",
    "color",
    "convert",
    "crop",
    "cutmix",
    "erase",
    "flip",
    "mix_labels",
    "mixup",
    "resized_crop",
    "soft_labels",
    "warp",
]

TRACES: collections.Counter[str] = collections.Counter()
"""Traces of each kernel, by name: a trace is a compilation, one per configuration and shape."""

_BODIES: dict[str, Callable[..., Callable[..., Any]]] = {}


def _body(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a kernel's builder: the op's constants to a function of arrays."""

    def register(build: Callable[..., Any]) -> Callable[..., Any]:
        _BODIES[name] = build
        return build

    return register


@functools.lru_cache(maxsize=512)
def _compiled(name: str, config: tuple[Any, ...]) -> Callable[..., Any]:
    """The jitted kernel ``name`` for the op's ``config`` (built once per configuration)."""
    body = _BODIES[name](*config)

    def traced(*arrays: Any) -> Any:
        TRACES[name] += 1  # runs only while jax traces: once per input shape and dtype
        return body(*arrays)

    return jax.jit(traced)


def _host(values: np.ndarray) -> np.ndarray:
    """Host parameters in the dtypes JAX keeps without x64: int32, float32 or bool."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int32)
    if values.dtype.kind == "f":
        return values.astype(np.float32)
    return values


def _run(name: str, config: tuple[Any, ...], images: Any, *params: np.ndarray) -> Any:
    return _compiled(name, config)(images, *(_host(p) for p in params))


def _first(x: Any, channels: str) -> Any:
    return x if channels == "first" else jnp.transpose(x, (0, 3, 1, 2))


def _layout(x: Any, channels: str) -> Any:
    return x if channels == "first" else jnp.transpose(x, (0, 2, 3, 1))


def _is_float(x: Any) -> bool:
    return bool(jnp.issubdtype(x.dtype, jnp.floating))


def _cast_trunc(x: Any, dtype: Any) -> Any:
    """Float ``x`` clipped to ``dtype``'s range of images and cast (truncating, as torch)."""
    top = 1.0 if jnp.issubdtype(dtype, jnp.floating) else 255.0
    return jnp.clip(x, 0.0, top).astype(dtype)


def _cast_round(x: Any, dtype: Any) -> Any:
    if not jnp.issubdtype(dtype, jnp.floating):
        x = jnp.round(x)  # half to even, as np.rint
    return _cast_trunc(x, dtype)


def _rows(mask: Any) -> Any:
    """A per-row mask ``(N,)`` broadcast over ``(N, C, H, W)``."""
    return mask[:, None, None, None]


# -- flips, crops, erasing -------------------------------------------------------------------


@_body("flip")
def _flip(axis: int, channels: str) -> Callable[..., Any]:
    axis = axis if channels == "first" else axis - 1  # height and width move left by one

    def body(images: Any, apply: Any) -> Any:
        return jnp.where(_rows(apply), jnp.flip(images, axis), images)

    return body


def flip(images: Any, apply: np.ndarray, axis: int, channels: str) -> Any:
    """``images`` with the rows where ``apply`` flipped along ``axis`` of the channel-first view."""
    return _run("flip", (axis, channels), images, apply)


@_body("crop")
def _crop(
    size: tuple[int, int], pad: tuple[int, int, int, int], fill: float, channels: str
) -> Callable[..., Any]:
    left, top, right, bottom = pad

    def body(images: Any, tops: Any, lefts: Any) -> Any:
        x = _first(images, channels)
        value = jnp.asarray(fill, jnp.float32).astype(x.dtype)
        widths = ((0, 0), (0, 0), (top, bottom), (left, right))
        padded = jnp.pad(x, widths, constant_values=value)
        shape = (x.shape[1], *size)

        def one(image: Any, t: Any, u: Any) -> Any:
            return lax.dynamic_slice(image, (0, t, u), shape)

        return _layout(jax.vmap(one)(padded, tops, lefts), channels)

    return body


def crop(
    images: Any,
    params: dict[str, np.ndarray],
    size: tuple[int, int],
    pad: tuple[int, int, int, int],
    fill: float,
    channels: str,
) -> Any:
    """Each row's ``size`` crop at ``(top, left)`` of the images padded by ``pad``."""
    config = (size, pad, float(fill), channels)
    return _run("crop", config, images, params["top"], params["left"])


def _box(n_h: int, n_w: int, y1: Any, y2: Any, x1: Any, x2: Any) -> Any:
    """``(N, H, W)``: whether each pixel lies in its row's box ``[y1, y2) x [x1, x2)``."""
    ys, xs = jnp.arange(n_h)[None, :], jnp.arange(n_w)[None, :]
    in_y = (ys >= y1[:, None]) & (ys < y2[:, None])
    in_x = (xs >= x1[:, None]) & (xs < x2[:, None])
    return in_y[:, :, None] & in_x[:, None, :]


@_body("erase")
def _erase(value: tuple[float, ...], channels: str) -> Callable[..., Any]:
    def body(images: Any, apply: Any, top: Any, left: Any, height: Any, width: Any) -> Any:
        x = _first(images, channels)
        c, h, w = x.shape[1:]
        box = _box(h, w, top, top + height, left, left + width) & apply[:, None, None]
        fill = jnp.broadcast_to(jnp.asarray(value, jnp.float32), (c,)).astype(x.dtype)
        return _layout(jnp.where(box[:, None], fill[None, :, None, None], x), channels)

    return body


def erase(
    images: Any, params: dict[str, np.ndarray], value: tuple[float, ...], channels: str
) -> Any:
    """``images`` with each applied row's box set to ``value``."""
    names = ("apply", "top", "left", "height", "width")
    return _run("erase", (value, channels), images, *(params[k] for k in names))


# -- resized crop ----------------------------------------------------------------------------


def _weights(start: Any, n_in: Any, n_out: int, n_full: int, antialias: bool) -> Any:
    """``(N, n_out, n_full)``: each row's resampling weights of its crop ``[start, start + n_in)``.

    The separable bilinear weights of the NumPy path (``_geometry.resize_weights``), per row:
    half-pixel centres; when downscaling with ``antialias`` the triangle widened by the
    scale over PyTorch's span of taps, normalised; placed at the crop's offset in the axis.
    """
    scale = (n_in.astype(jnp.float32) / n_out)[:, None]
    out = jnp.arange(n_out, dtype=jnp.float32)[None, :]
    j = (jnp.arange(n_full)[None, :] - start[:, None]).astype(jnp.float32)[:, None, :]
    if antialias:
        wide = scale >= 1.0
        support, inv = jnp.where(wide, scale, 1.0), jnp.where(wide, 1.0 / scale, 1.0)
        center = scale * (out + 0.5)
        lo = jnp.maximum(jnp.trunc(center - support + 0.5), 0.0)[..., None]
        hi = jnp.minimum(jnp.trunc(center + support + 0.5), n_in[:, None])[..., None]
        w = jnp.clip(1.0 - jnp.abs((j - center[..., None] + 0.5) * inv[..., None]), 0.0, None)
        w = jnp.where((j >= lo) & (j < hi), w, 0.0)
        return w / w.sum(axis=2, keepdims=True)
    src = jnp.maximum(scale * (out + 0.5) - 0.5, 0.0)
    x0 = jnp.floor(src)
    x1 = jnp.minimum(x0 + 1, (n_in - 1)[:, None])
    lam = (src - x0)[..., None]
    return jnp.where(j == x0[..., None], 1.0 - lam, 0.0) + jnp.where(j == x1[..., None], lam, 0.0)


@_body("resized_crop")
def _resized_crop(size: tuple[int, int], antialias: bool, channels: str) -> Callable[..., Any]:
    highest = lax.Precision.HIGHEST

    def body(images: Any, top: Any, left: Any, height: Any, width: Any) -> Any:
        x = _first(images, channels)
        h, w = x.shape[2:]
        wy = _weights(top, height, size[0], h, antialias)
        wx = _weights(left, width, size[1], w, antialias)
        integer = not _is_float(x)
        # width first, then height, rounding between the passes for uint8 (PyTorch's order)
        t = jnp.einsum("nchw,nvw->nchv", x.astype(jnp.float32), wx, precision=highest)
        if integer:
            t = jnp.clip(jnp.round(t), 0.0, 255.0)
        out = jnp.einsum("nuh,nchv->ncuv", wy, t, precision=highest)
        out = _cast_round(out, x.dtype) if integer else out.astype(x.dtype)
        return _layout(out, channels)

    return body


def resized_crop(
    images: Any,
    params: dict[str, np.ndarray],
    size: tuple[int, int],
    antialias: bool,
    channels: str,
) -> Any:
    """Each row's box ``(top, left, height, width)`` resized to ``size``, as one einsum pair."""
    names = ("top", "left", "height", "width")
    return _run("resized_crop", (size, antialias, channels), images, *(params[k] for k in names))


# -- colour ----------------------------------------------------------------------------------


def _gray(img: Any) -> Any:
    r, g, b = (img[:, k : k + 1].astype(jnp.float32) for k in range(3))
    gray = 0.2989 * r + 0.587 * g + 0.114 * b
    return gray if _is_float(img) else gray.astype(img.dtype)


def _blend(img: Any, other: Any, ratio: Any) -> Any:
    return _cast_trunc(ratio * img + (1.0 - ratio) * other, img.dtype)


def _hue(img: Any, shift: Any) -> Any:
    """Torchvision's ``adjust_hue`` (HSV round trip) with per-row shifts ``(N, 1, 1)``."""
    x = img if _is_float(img) else img.astype(jnp.float32) / 255.0
    h, s, v = rgb_to_hsv(x)
    out = hsv_to_rgb((h + shift) % 1.0, s, v)
    if _is_float(img):
        return out
    return _cast_trunc(out * (255.0 + 1.0 - 1e-3), img.dtype)


def _adjust(kind: int, img: Any, factor: Any) -> Any:
    """Adjustment ``kind`` (brightness, contrast, saturation, hue) with per-row factors."""
    ratio = factor[:, None, None, None]
    if kind == 0:
        return _blend(img, 0.0, ratio)
    if kind == 1:
        gray = _gray(img) if img.shape[1] == 3 else img
        return _blend(img, gray.astype(jnp.float32).mean(axis=(1, 2, 3), keepdims=True), ratio)
    if kind == 2:
        return _blend(img, _gray(img), ratio)
    return _hue(img, factor[:, None, None])


@_body("color")
def _color(enabled: tuple[bool, ...], channels: str) -> Callable[..., Any]:
    def body(images: Any, apply: Any, order: Any, factors: Any) -> Any:
        x = _first(images, channels)
        c = x.shape[1]
        img = x[:, :3] if c == 4 else x
        kinds = [k for k in range(4) if enabled[k] and (c != 1 or k < 2)]
        # Four steps; at step s each row takes the adjustment order[:, s] names.
        for stage in range(4):
            picks = [apply & (order[:, stage] == k) for k in kinds]
            done = [_adjust(k, img, factors[:, k]) for k in kinds]
            img = jnp.select([_rows(m) for m in picks], done, default=img) if kinds else img
        out = jnp.concatenate([img, x[:, 3:]], axis=1) if c == 4 else img
        return _layout(out, channels)

    return body


def color(
    images: Any, params: dict[str, np.ndarray], enabled: tuple[bool, ...], channels: str
) -> Any:
    """``ColorJitter`` on every applied row, each in its own order of the four adjustments."""
    names = ("brightness", "contrast", "saturation", "hue")
    factors = np.stack([np.nan_to_num(params[k]) for k in names], axis=1)
    config = (enabled, channels)
    return _run("color", config, images, params["apply"], params["order"], factors)


# -- affine ----------------------------------------------------------------------------------


@_body("warp")
def _warp(mode: str, fill: tuple[float, ...], channels: str) -> Callable[..., Any]:
    def body(images: Any, apply: Any, theta: Any) -> Any:
        x = _first(images, channels)
        n, c, h, w = x.shape
        grid_xy = jnp.asarray(base_grid(h, w))  # the NumPy path's pixel centres, a constant
        halves = jnp.asarray([0.5 * w, 0.5 * h], jnp.float32)
        mat = jnp.swapaxes(theta, 1, 2) / halves
        grid = jnp.einsum("pk,nkj->npj", grid_xy, mat, precision=lax.Precision.HIGHEST)
        # grid_sample's unnormalisation (align_corners=False), in float32 as PyTorch's
        ix = (grid[..., 0] + 1.0) * np.float32(w / 2) - 0.5
        iy = (grid[..., 1] + 1.0) * np.float32(h / 2) - 0.5
        fill_c = jnp.broadcast_to(jnp.asarray(fill, jnp.float32), (c,))[None, :, None]
        out = sample_at(x.reshape(n, c, h * w), ix, iy, h, w, fill_c, mode)
        out = _cast_round(out.reshape(n, c, h, w), x.dtype)
        return _layout(jnp.where(_rows(apply), out, x), channels)

    return body


def warp(
    images: Any,
    apply: np.ndarray,
    theta: np.ndarray,
    mode: str,
    fill: tuple[float, ...],
    channels: str,
) -> Any:
    """The applied rows sampled (nearest or bilinear) at their inverse maps ``theta``."""
    return _run("warp", (mode, fill, channels), images, apply, theta)


# -- mixing ----------------------------------------------------------------------------------


@_body("mixup")
def _mixup() -> Callable[..., Any]:
    def body(images: Any, partner: Any, weight: Any, mixing: Any) -> Any:
        w = _rows(weight)
        out = w * images.astype(jnp.float32) + (1 - w) * images[partner].astype(jnp.float32)
        if not _is_float(images):
            info = jnp.iinfo(images.dtype)
            out = jnp.clip(jnp.round(out), info.min, info.max)
        return jnp.where(_rows(mixing), out.astype(images.dtype), images)

    return body


def mixup(images: Any, partner: np.ndarray, weight: np.ndarray, mixing: np.ndarray) -> Any:
    """Each mixing row blended with its partner by its weight, in the images' dtype."""
    return _run("mixup", (), images, partner, weight, mixing)


@_body("cutmix")
def _cutmix(channels: str) -> Callable[..., Any]:
    def body(images: Any, partner: Any, box: Any) -> Any:
        h, w = images.shape[2:] if channels == "first" else images.shape[1:3]
        inside = _box(h, w, box[:, 0], box[:, 1], box[:, 2], box[:, 3])
        inside = inside[:, None] if channels == "first" else inside[..., None]
        return jnp.where(inside, images[partner], images)

    return body


def cutmix(images: Any, partner: np.ndarray, box: np.ndarray, channels: str) -> Any:
    """Each row's box ``(y1, y2, x1, x2)`` pasted from its partner (empty boxes paste none)."""
    return _run("cutmix", (channels,), images, partner, box)


@_body("mix_labels")
def _mix_labels() -> Callable[..., Any]:
    def body(soft: Any, partner: Any, weight: Any) -> Any:
        return weight[:, None] * soft + (1 - weight[:, None]) * soft[partner]

    return body


def mix_labels(soft: Any, partner: np.ndarray, weight: np.ndarray) -> Any:
    """Soft labels ``(N, K)`` mixed with the partners' by the rows' weights."""
    return _run("mix_labels", (), soft, partner, weight)


def soft_labels(labels: Any, num_classes: int | None) -> Any:
    """Class ids ``(N,)`` as one-hot float32 ``(N, num_classes)``, or ``(N, K)`` as float32."""
    if labels.ndim == 1 and num_classes is not None:
        return jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)
    return labels.astype(jnp.float32)


def convert(images: Any, name: str) -> Any:
    """``images`` as dtype ``name``, scaled as ``Augment``'s ``dtype=`` (``ToDtype``)."""
    target = jnp.dtype(name)
    if images.dtype == target:
        return images
    source_float = _is_float(images)
    target_float = jnp.issubdtype(target, jnp.floating)
    if not source_float and target_float:
        return images.astype(target) / 255.0
    if source_float and not target_float:
        return jnp.clip(images * (255.0 + 1.0 - 1e-3), 0, 255).astype(target)
    return images.astype(target)
