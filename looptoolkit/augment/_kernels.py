"""The image ops' compiled kernels, written once for every framework that compiles them.

The ops draw their per-row parameters on the host as on any array (NumPy, keyed) and,
when the images are a ``jax.Array`` or a ``tf.Tensor``, hand them to that framework's
[`Kernels`][looptoolkit.augment._kernels.Kernels]: each kernel is built once per op
configuration (a function closed over the op's constants, compiled by ``jax.jit`` or
``tf.function`` and kept in a cache) and compiled once per input shape and dtype; the
parameters go in as arrays, so a new batch of the same shape runs the compiled function
without tracing again, and every row is computed in the same call (masks, gathers and
batched products, no loop over rows).

The kernels are written against a small array namespace ``xp`` with NumPy's names (what
``jax.numpy`` offers, and what ``_tf`` offers on tf tensors), plus a few primitives
whose best form differs by framework (``crops``, ``take``, ``one_hot``, ``cast``). They
compute as the NumPy paths of the ops do, in float32 with the same casts, so the outputs
agree with them: flips, crops, erasing and the mixing ops' pastes exactly, the resampling
and colour ops within a uint8 level or two (float32 sums in another order).

Nothing here imports a framework: ``_jax`` and ``_tf`` build their ``Kernels`` from their
namespaces, and are imported only when such an array reaches an op.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

from looptoolkit.augment._image import (
    base_grid,
    hsv_to_rgb,
    resample_weights,
    rgb_to_hsv,
    sample_at,
)

__all__ = ["Kernels"]

_BODIES: dict[str, Callable[..., Callable[..., Any]]] = {}


def _body(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a kernel's builder: the namespace and the op's constants to a function."""

    def register(build: Callable[..., Any]) -> Callable[..., Any]:
        _BODIES[name] = build
        return build

    return register


class Kernels:
    """One framework's compiled kernels: its namespace ``xp``, compiler and parameter cast.

    Args:
        xp: the array namespace the kernels compute with.
        compile: turns a function of arrays into the framework's compiled function.
        host: casts a host parameter array to what the framework takes (e.g. int32).
    """

    def __init__(
        self, xp: Any, compile: Callable[[Callable[..., Any]], Any], host: Callable[..., Any]
    ) -> None:
        self.xp = xp
        self.compile = compile
        self.host = host
        self.traces: collections.Counter[str] = collections.Counter()
        """Traces of each kernel, by name: one per configuration, input shape and dtype."""
        self._compiled: dict[tuple[str, tuple[Any, ...]], Any] = {}

    def run(self, name: str, config: tuple[Any, ...], images: Any, *params: np.ndarray) -> Any:
        """Kernel ``name`` for ``config`` on ``images`` with host ``params``."""
        fn = self._compiled.get((name, config))
        if fn is None:
            body = _BODIES[name](self.xp, *config)

            def traced(*arrays: Any) -> Any:
                self.traces[name] += 1  # runs only while tracing: once per shape and dtype
                return body(*arrays)

            fn = self._compiled[(name, config)] = self.compile(traced)
        return fn(images, *(self.host(p) for p in params))

    # -- the ops' entry points ---------------------------------------------------------------

    def flip(self, images: Any, apply: np.ndarray, axis: int, channels: str) -> Any:
        """The rows where ``apply`` flipped along ``axis`` of the channel-first view."""
        return self.run("flip", (axis, channels), images, apply)

    def crop(
        self,
        images: Any,
        params: dict[str, np.ndarray],
        size: tuple[int, int],
        pad: tuple[int, int, int, int],
        fill: float,
        channels: str,
    ) -> Any:
        """Each row's ``size`` crop at ``(top, left)`` of the images padded by ``pad``."""
        config = (size, pad, float(fill), channels)
        return self.run("crop", config, images, params["top"], params["left"])

    def erase(
        self, images: Any, params: dict[str, np.ndarray], value: tuple[float, ...], channels: str
    ) -> Any:
        """``images`` with each applied row's box set to ``value``."""
        names = ("apply", "top", "left", "height", "width")
        return self.run("erase", (value, channels), images, *(params[k] for k in names))

    def resized_crop(
        self,
        images: Any,
        params: dict[str, np.ndarray],
        size: tuple[int, int],
        antialias: bool,
        channels: str,
    ) -> Any:
        """Each row's box ``(top, left, height, width)`` resized to ``size``: two products."""
        names = ("top", "left", "height", "width")
        config = (size, antialias, channels)
        return self.run("resized_crop", config, images, *(params[k] for k in names))

    def color(
        self, images: Any, params: dict[str, np.ndarray], enabled: tuple[bool, ...], channels: str
    ) -> Any:
        """``ColorJitter`` on every applied row, each in its own order of the adjustments."""
        names = ("brightness", "contrast", "saturation", "hue")
        factors = np.stack([np.nan_to_num(params[k]) for k in names], axis=1)
        config = (enabled, channels)
        return self.run("color", config, images, params["apply"], params["order"], factors)

    def warp(
        self,
        images: Any,
        apply: np.ndarray,
        theta: np.ndarray,
        mode: str,
        fill: tuple[float, ...],
        channels: str,
    ) -> Any:
        """The applied rows sampled (nearest or bilinear) at their inverse maps ``theta``."""
        return self.run("warp", (mode, fill, channels), images, apply, theta)

    def mixup(
        self, images: Any, partner: np.ndarray, weight: np.ndarray, mixing: np.ndarray
    ) -> Any:
        """Each mixing row blended with its partner by its weight, in the images' dtype."""
        return self.run("mixup", (), images, partner, weight, mixing)

    def cutmix(self, images: Any, partner: np.ndarray, box: np.ndarray, channels: str) -> Any:
        """Each row's box ``(y1, y2, x1, x2)`` pasted from its partner (empty boxes paste none)."""
        return self.run("cutmix", (channels,), images, partner, box)

    def mix_labels(self, soft: Any, partner: np.ndarray, weight: np.ndarray) -> Any:
        """Soft labels ``(N, K)`` mixed with the partners' by the rows' weights."""
        return self.run("mix_labels", (), soft, partner, weight)

    def soft_labels(self, labels: Any, num_classes: int | None) -> Any:
        """Class ids ``(N,)`` as one-hot float32 ``(N, num_classes)``, or ``(N, K)`` as float32."""
        xp = self.xp
        if len(labels.shape) == 1 and num_classes is not None:
            return xp.one_hot(labels, num_classes)
        return xp.cast(labels, xp.float32)

    def convert(self, images: Any, name: str) -> Any:
        """``images`` as dtype ``name``, scaled as ``Augment``'s ``dtype=`` (``ToDtype``)."""
        xp = self.xp
        target = xp.dtype(name)
        if images.dtype == target:
            return images
        source_float = xp.is_float(images)
        target_float = xp.is_float_dtype(target)
        if not source_float and target_float:
            return xp.cast(images, target) / 255.0
        if source_float and not target_float:
            return xp.cast(xp.clip(images * (255.0 + 1.0 - 1e-3), 0.0, 255.0), target)
        return xp.cast(images, target)


# -- helpers of the bodies -------------------------------------------------------------------


def _first(xp: Any, x: Any, channels: str) -> Any:
    return x if channels == "first" else xp.transpose(x, (0, 3, 1, 2))


def _layout(xp: Any, x: Any, channels: str) -> Any:
    return x if channels == "first" else xp.transpose(x, (0, 2, 3, 1))


def _cast_trunc(xp: Any, x: Any, dtype: Any) -> Any:
    """Float ``x`` clipped to ``dtype``'s range of images and cast (truncating, as torch)."""
    top = 1.0 if xp.is_float_dtype(dtype) else 255.0
    return xp.cast(xp.clip(x, 0.0, top), dtype)


def _cast_round(xp: Any, x: Any, dtype: Any) -> Any:
    if not xp.is_float_dtype(dtype):
        x = xp.round(x)  # half to even, as np.rint
    return _cast_trunc(xp, x, dtype)


def _rows(mask: Any) -> Any:
    """A per-row mask ``(N,)`` broadcast over ``(N, C, H, W)``."""
    return mask[:, None, None, None]


def _box(xp: Any, n_h: int, n_w: int, y1: Any, y2: Any, x1: Any, x2: Any) -> Any:
    """``(N, H, W)``: whether each pixel lies in its row's box ``[y1, y2) x [x1, x2)``."""
    ys, xs = xp.arange(n_h, xp.int32)[None, :], xp.arange(n_w, xp.int32)[None, :]
    in_y = (ys >= y1[:, None]) & (ys < y2[:, None])
    in_x = (xs >= x1[:, None]) & (xs < x2[:, None])
    return in_y[:, :, None] & in_x[:, None, :]


# -- flips, crops, erasing -------------------------------------------------------------------


@_body("flip")
def _flip(xp: Any, axis: int, channels: str) -> Callable[..., Any]:
    axis = axis if channels == "first" else axis - 1  # height and width move left by one

    def body(images: Any, apply: Any) -> Any:
        return xp.where(_rows(apply), xp.flip(images, axis), images)

    return body


@_body("crop")
def _crop(
    xp: Any, size: tuple[int, int], pad: tuple[int, int, int, int], fill: float, channels: str
) -> Callable[..., Any]:
    left, top, right, bottom = pad

    def body(images: Any, tops: Any, lefts: Any) -> Any:
        x = _first(xp, images, channels)
        value = xp.cast(xp.asarray(fill, xp.float32), x.dtype)
        padded = xp.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), value)
        return _layout(xp, xp.crops(padded, tops, lefts, size), channels)

    return body


@_body("erase")
def _erase(xp: Any, value: tuple[float, ...], channels: str) -> Callable[..., Any]:
    def body(images: Any, apply: Any, top: Any, left: Any, height: Any, width: Any) -> Any:
        x = _first(xp, images, channels)
        c, h, w = x.shape[1:]
        box = _box(xp, h, w, top, top + height, left, left + width) & apply[:, None, None]
        fill = xp.cast(xp.broadcast_to(xp.asarray(value, xp.float32), (c,)), x.dtype)
        return _layout(xp, xp.where(box[:, None], fill[None, :, None, None], x), channels)

    return body


# -- resized crop ----------------------------------------------------------------------------


@_body("resized_crop")
def _resized_crop(
    xp: Any, size: tuple[int, int], antialias: bool, channels: str
) -> Callable[..., Any]:
    def body(images: Any, top: Any, left: Any, height: Any, width: Any) -> Any:
        x = _first(xp, images, channels)
        h, w = x.shape[2:]
        f32 = xp.float32

        def weights(start: Any, n_in: Any, n_out: int, n_full: int) -> Any:
            out, full = xp.arange(n_out, f32), xp.arange(n_full, f32)
            start, n_in = xp.cast(start, f32), xp.cast(n_in, f32)
            return resample_weights(start, n_in, out, full, antialias, xp)

        wy = weights(top, height, size[0], h)
        wx = weights(left, width, size[1], w)
        integer = not xp.is_float(x)
        # width first, then height, rounding between the passes for uint8 (PyTorch's order)
        t = xp.einsum("nchw,nvw->nchv", xp.cast(x, f32), wx)
        if integer:
            t = xp.clip(xp.round(t), 0.0, 255.0)
        out = xp.einsum("nuh,nchv->ncuv", wy, t)
        out = _cast_round(xp, out, x.dtype) if integer else xp.cast(out, x.dtype)
        return _layout(xp, out, channels)

    return body


# -- colour ----------------------------------------------------------------------------------


def _gray(xp: Any, img: Any) -> Any:
    r, g, b = (xp.cast(img[:, k : k + 1], xp.float32) for k in range(3))
    gray = 0.2989 * r + 0.587 * g + 0.114 * b
    return gray if xp.is_float(img) else xp.cast(gray, img.dtype)


def _blend(xp: Any, img: Any, other: Any, ratio: Any) -> Any:
    return _cast_trunc(xp, ratio * xp.cast(img, xp.float32) + (1.0 - ratio) * other, img.dtype)


def _hue(xp: Any, img: Any, shift: Any) -> Any:
    """Torchvision's ``adjust_hue`` (HSV round trip) with per-row shifts ``(N, 1, 1)``."""
    x = img if xp.is_float(img) else xp.cast(img, xp.float32) / 255.0
    h, s, v = rgb_to_hsv(x, xp)
    out = hsv_to_rgb((h + shift) % 1.0, s, v, xp)
    if xp.is_float(img):
        return out
    return _cast_trunc(xp, out * (255.0 + 1.0 - 1e-3), img.dtype)


def _adjust(xp: Any, kind: int, img: Any, factor: Any) -> Any:
    """Adjustment ``kind`` (brightness, contrast, saturation, hue) with per-row factors."""
    ratio = factor[:, None, None, None]
    if kind == 0:
        return _blend(xp, img, 0.0, ratio)
    if kind == 1:
        gray = _gray(xp, img) if img.shape[1] == 3 else img
        mean = xp.mean(xp.cast(gray, xp.float32), axis=(1, 2, 3), keepdims=True)
        return _blend(xp, img, mean, ratio)
    if kind == 2:
        return _blend(xp, img, xp.cast(_gray(xp, img), xp.float32), ratio)
    return _hue(xp, img, factor[:, None, None])


@_body("color")
def _color(xp: Any, enabled: tuple[bool, ...], channels: str) -> Callable[..., Any]:
    def body(images: Any, apply: Any, order: Any, factors: Any) -> Any:
        x = _first(xp, images, channels)
        c = x.shape[1]
        img = x[:, :3] if c == 4 else x
        kinds = [k for k in range(4) if enabled[k] and (c != 1 or k < 2)]
        # Four steps; at step s each row takes the adjustment order[:, s] names.
        for stage in range(4):
            done = img
            for k in kinds:
                pick = _rows(apply & (order[:, stage] == k))
                done = xp.where(pick, _adjust(xp, k, img, factors[:, k]), done)
            img = done
        out = xp.concatenate([img, x[:, 3:]], 1) if c == 4 else img
        return _layout(xp, out, channels)

    return body


# -- affine ----------------------------------------------------------------------------------


@_body("warp")
def _warp(xp: Any, mode: str, fill: tuple[float, ...], channels: str) -> Callable[..., Any]:
    def body(images: Any, apply: Any, theta: Any) -> Any:
        x = _first(xp, images, channels)
        n, c, h, w = x.shape
        grid_xy = xp.asarray(base_grid(h, w), xp.float32)  # the NumPy path's pixel centres
        halves = xp.asarray(np.array([0.5 * w, 0.5 * h], np.float32), xp.float32)
        mat = xp.transpose(theta, (0, 2, 1)) / halves
        grid = xp.einsum("pk,nkj->npj", grid_xy, mat)
        # grid_sample's unnormalisation (align_corners=False), in float32 as PyTorch's
        ix = (grid[..., 0] + 1.0) * np.float32(w / 2) - 0.5
        iy = (grid[..., 1] + 1.0) * np.float32(h / 2) - 0.5
        fill_c = xp.broadcast_to(xp.asarray(fill, xp.float32), (c,))[None, :, None]
        out = sample_at(xp.reshape(x, (n, c, h * w)), ix, iy, h, w, fill_c, mode, xp)
        out = _cast_round(xp, xp.reshape(out, (n, c, h, w)), x.dtype)
        return _layout(xp, xp.where(_rows(apply), out, x), channels)

    return body


# -- mixing ----------------------------------------------------------------------------------


@_body("mixup")
def _mixup(xp: Any) -> Callable[..., Any]:
    def body(images: Any, partner: Any, weight: Any, mixing: Any) -> Any:
        w = _rows(weight)
        f32 = xp.float32
        others = xp.cast(xp.take(images, partner), f32)
        out = w * xp.cast(images, f32) + (1 - w) * others
        if not xp.is_float(images):
            out = xp.clip(xp.round(out), 0.0, 255.0)
        return xp.where(_rows(mixing), xp.cast(out, images.dtype), images)

    return body


@_body("cutmix")
def _cutmix(xp: Any, channels: str) -> Callable[..., Any]:
    def body(images: Any, partner: Any, box: Any) -> Any:
        h, w = images.shape[2:] if channels == "first" else images.shape[1:3]
        inside = _box(xp, h, w, box[:, 0], box[:, 1], box[:, 2], box[:, 3])
        inside = inside[:, None] if channels == "first" else inside[..., None]
        return xp.where(inside, xp.take(images, partner), images)

    return body


@_body("mix_labels")
def _mix_labels(xp: Any) -> Callable[..., Any]:
    def body(soft: Any, partner: Any, weight: Any) -> Any:
        return weight[:, None] * soft + (1 - weight[:, None]) * xp.take(soft, partner)

    return body
