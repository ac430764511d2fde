"""Colour ops: torchvision's ``ColorJitter``, four adjustments in a random order per row.

The adjustments compute as torchvision's tensor functions do (``adjust_brightness``,
``adjust_contrast``, ``adjust_saturation``, ``adjust_hue``): a blend in float32 with the
black image, the grayscale mean or the grayscale image, clamped and cast back (truncating
for uint8); the hue through an HSV round trip of the image in ``[0, 1]``. Grayscale is
``0.2989 R + 0.587 G + 0.114 B``, truncated to uint8 for uint8 images. Each factor is a
per-row array, so one call serves every row the adjustment applies to. Images with four
channels are adjusted in their first three (the alpha channel is kept); images with one
channel get brightness and contrast only, as torchvision's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from looptoolkit.augment import _dispatch, _image
from looptoolkit.augment._base import ImageBatch
from looptoolkit.augment._image import ImageOp

__all__ = ["ColorJitter", "adjust"]

BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)
_NAMES = ("brightness", "contrast", "saturation", "hue")


def _factor(values: np.ndarray, like: Any) -> Any:
    """Per-row factors ``(n, 1, 1, 1)`` as float32, where ``like`` lives."""
    f = np.asarray(values, dtype=np.float32).reshape(-1, 1, 1, 1)
    if _image.is_torch(like):
        import torch

        return torch.as_tensor(f, device=like.device)
    return f


def _blend(img: Any, other: Any, ratio: Any) -> Any:
    """Torchvision's ``_blend``: ``ratio * img + (1 - ratio) * other``, clamped and cast."""
    return _image.cast_trunc(ratio * img + (1.0 - ratio) * other, img)


def _gray(img: Any) -> Any:
    """``(n, 1, H, W)`` grayscale in ``img``'s dtype (torchvision's ``rgb_to_grayscale``)."""
    r, g, b = (_image.to_float32(img[:, k : k + 1]) for k in range(3))
    gray = 0.2989 * r + 0.587 * g + 0.114 * b
    if _image.is_float(img):
        return gray
    return gray.to(img.dtype) if _image.is_torch(img) else gray.astype(img.dtype)


def adjust(kind: int, img: Any, factor: np.ndarray) -> Any:
    """One adjustment of ``img`` ``(n, C, H, W)``, ``C`` in 1 or 3, with per-row factors."""
    channels = img.shape[1]
    ratio = _factor(factor, img)
    if kind == BRIGHTNESS:
        return _blend(img, 0.0, ratio)
    if kind == CONTRAST:
        gray = _gray(img) if channels == 3 else img
        return _blend(img, _image.to_float32(gray).mean(axis=(1, 2, 3), keepdims=True), ratio)
    if channels == 1:  # saturation and hue leave gray images as they are
        return img
    if kind == SATURATION:
        return _blend(img, _gray(img), ratio)
    x = img if _image.is_float(img) else _image.to_float32(img) / 255.0
    h, s, v = _image.rgb_to_hsv(x)
    out = _image.hsv_to_rgb((h + ratio[:, 0]) % 1.0, s, v)
    if _image.is_float(img):
        return out
    return _image.cast_trunc(out * (255.0 + 1.0 - 1e-3), img)


def _range(value: Any, name: str, *, center: float, bound: tuple[float, float]) -> Any:
    """Torchvision's ``_check_input``: a range of factors, or None for no adjustment."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"`{name}` must be >= 0 when a single number, got {value!r}.")
        lo, hi = center - value, center + value
        if center == 1.0:
            lo = max(lo, 0.0)
    elif isinstance(value, tuple | list) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        raise TypeError(f"`{name}` must be a number or a pair of numbers, got {value!r}.")
    if not bound[0] <= lo <= hi <= bound[1]:
        raise ValueError(f"`{name}` must lie in [{bound[0]}, {bound[1]}], got {value!r}.")
    return None if lo == hi == center else (float(lo), float(hi))


class ColorJitter(ImageOp):
    """Random brightness, contrast, saturation and hue (torchvision's ``ColorJitter``).

    Each row draws its four factors (uniform in their ranges) and the order of the four
    adjustments (a uniform random permutation, as ``torch.randperm(4)`` per call).

    Args:
        brightness: a number ``b`` for factors in ``[max(0, 1 - b), 1 + b]``, or a range.
        contrast: likewise.
        saturation: likewise.
        hue: a number ``h`` in ``[0, 0.5]`` for shifts in ``[-h, h]``, or a range within
            ``[-0.5, 0.5]``.
        p: probability that a row is adjusted.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, ColorJitter
        >>> aug = Augment([ColorJitter(brightness=0.5)], key=None)
        >>> out = aug(np.full((2, 3, 4, 4), 100, np.uint8), BatchKeys(0, 0, np.arange(2)))
        >>> out.dtype, bool((out != 100).any())
        (dtype('uint8'), True)
    """

    draws = 8
    _fields = ("brightness", "contrast", "saturation", "hue", "p")

    def __init__(
        self,
        brightness: float | tuple[float, float] = 0,
        contrast: float | tuple[float, float] = 0,
        saturation: float | tuple[float, float] = 0,
        hue: float | tuple[float, float] = 0,
        p: float = 1.0,
    ) -> None:
        super().__init__(p)
        self.brightness, self.contrast, self.saturation, self.hue = (
            brightness,
            contrast,
            saturation,
            hue,
        )
        inf = float("inf")
        self._ranges = (
            _range(brightness, "brightness", center=1.0, bound=(0.0, inf)),
            _range(contrast, "contrast", center=1.0, bound=(0.0, inf)),
            _range(saturation, "saturation", center=1.0, bound=(0.0, inf)),
            _range(hue, "hue", center=0.0, bound=(-0.5, 0.5)),
        )

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """Each row's ``order`` ``(N, 4)`` and its four factors (``nan`` where unused)."""
        out: dict[str, np.ndarray] = {"order": np.argsort(u[:, :4], axis=1)}
        for k, (name, span) in enumerate(zip(_NAMES, self._ranges, strict=True)):
            lo, hi = span if span is not None else (np.nan, np.nan)
            out[name] = lo + (hi - lo) * u[:, 4 + k]
        return out

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The batch with each applied row adjusted, in its order."""
        images = batch.images
        apply = params["apply"]
        if not apply.any():
            return batch
        channels = batch.num_channels
        if channels not in (1, 3, 4):
            raise ValueError(f"`ColorJitter` needs 1, 3 or 4 channels, got {channels}.")
        kernels = _dispatch.kernels(images)
        if kernels is not None:
            enabled = tuple(span is not None for span in self._ranges)
            return _image.replace(batch, kernels.color(images, params, enabled, batch.channels))
        out = _image.writable(batch)
        dst = _image.first(out, batch.channels)
        color = slice(0, 3 if channels == 4 else channels)
        for stage in range(4):
            for kind, name in enumerate(_NAMES):
                if self._ranges[kind] is None:
                    continue
                which = apply & (params["order"][:, stage] == kind)
                if not which.any():
                    continue
                idx = _image.rows(which, dst)
                dst[idx, color] = adjust(kind, dst[idx, color], params[name][which])
        return _image.replace(batch, out)
