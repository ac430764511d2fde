"""Geometric image ops that move whole pixels or resample separably: flips, crops, erasing.

Each op draws its parameters for the whole batch on the host (torchvision's samplers,
vectorised over rows) and applies them where the batch lives. Resampling follows
``torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=True)``,
what torchvision's tensor ``resized_crop`` uses: on torch tensors it is that call, one per
row (rows have crops of different sizes; ``affine_grid`` + ``grid_sample`` would batch them
on a device but does not antialias); NumPy arrays go through the same call where torch is
installed (measured about 12 times as fast on the host), else through the same separable
weights, computed once per (crop size, output size), as two matrix products per row.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import Any

import numpy as np

from looptoolkit.augment import _dispatch, _image
from looptoolkit.augment._base import ImageBatch
from looptoolkit.augment._image import ImageOp, as_pair, as_range

__all__ = [
    "HorizontalFlip",
    "RandomCrop",
    "RandomErasing",
    "RandomResizedCrop",
    "VerticalFlip",
    "resize",
    "resize_numpy",
    "resize_weights",
]

TRIES = 10  # torchvision's tries for a crop or an erased box before its fallback


class HorizontalFlip(ImageOp):
    """Flip the rows where it applies left to right (torchvision's ``RandomHorizontalFlip``).

    Args:
        p: probability that a row is flipped.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, HorizontalFlip
        >>> image = np.arange(4, dtype=np.uint8).reshape(1, 1, 1, 4)
        >>> Augment([HorizontalFlip(p=1.0)], key=None)(image, BatchKeys(0, 0, np.arange(1)))
        array([[[[3, 2, 1, 0]]]], dtype=uint8)
    """

    axis = 3  # width, in the channel-first view

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The batch with the rows where ``params["apply"]`` flipped."""
        images = batch.images
        kernels = _dispatch.kernels(images)
        if kernels is not None:
            return _image.replace(
                batch, kernels.flip(images, params["apply"], self.axis, batch.channels)
            )
        idx = _image.rows(params["apply"], images)
        if len(idx) == 0:
            return batch
        out = _image.writable(batch)
        src, dst = _image.first(images, batch.channels), _image.first(out, batch.channels)
        if _image.is_torch(images):
            dst[idx] = src[idx].flip(self.axis)
        else:
            dst[idx] = np.flip(src[idx], self.axis)
        return _image.replace(batch, out)


class VerticalFlip(HorizontalFlip):
    """Flip the rows where it applies top to bottom (torchvision's ``RandomVerticalFlip``).

    Args:
        p: probability that a row is flipped.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, VerticalFlip
        >>> image = np.arange(3, dtype=np.uint8).reshape(1, 1, 3, 1)
        >>> out = Augment([VerticalFlip(p=1.0)], key=None)(image, BatchKeys(0, 0, np.arange(1)))
        >>> out[0, 0, :, 0]
        array([2, 1, 0], dtype=uint8)
    """

    axis = 2  # height, in the channel-first view


def _uniform_int(u: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """An integer uniform in ``[0, n)`` from a uniform ``u`` in ``[0, 1)`` (``torch.randint``)."""
    return np.minimum(np.floor(u * n), n - 1).astype(np.int64)


def _boxes(
    u: np.ndarray,
    area: float,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    tall_wide: tuple[bool, bool],
) -> tuple[np.ndarray, np.ndarray]:
    """All tries' ``(h, w)`` per row: area fraction uniform in ``scale``, log-ratio uniform.

    ``u`` is ``(N, 2 * TRIES)`` (the area draws, then the ratio draws); ``tall_wide`` says
    which of ``sqrt(area * ratio)`` is the width (crop: the width; erasing: the height).
    """
    target = area * (scale[0] + (scale[1] - scale[0]) * u[:, :TRIES])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(lo + (hi - lo) * u[:, TRIES : 2 * TRIES])
    wide = np.rint(np.sqrt(target * aspect)).astype(np.int64)
    tall = np.rint(np.sqrt(target / aspect)).astype(np.int64)
    return (tall, wide) if tall_wide[0] else (wide, tall)


def _first_valid(valid: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each row's values at its first valid try, and whether it had one."""
    pick = np.argmax(valid, axis=1)[:, None]
    found = np.asarray(valid.any(axis=1))
    return (found, *(np.take_along_axis(a, pick, axis=1)[:, 0] for a in arrays))


class RandomResizedCrop(ImageOp):
    """Crop a random area and aspect ratio, resized to ``size`` (torchvision's sampling).

    Each row draws its ten tries at once (area fraction uniform in ``scale``, log aspect
    ratio uniform in ``log(ratio)``) and keeps the first that fits; a row with none takes the
    central crop, clamped to the ratio range. Every row is cropped (the output size
    changes), so there is no ``p``.

    Args:
        size: output ``(height, width)``, or an int for a square.
        scale: range of the crop's area, as a fraction of the image's.
        ratio: range of the crop's width / height.
        antialias: low-pass when downscaling, as ``interpolate(antialias=True)``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, RandomResizedCrop
        >>> aug = Augment([RandomResizedCrop(8)], key=None)
        >>> aug(np.zeros((2, 3, 16, 20), np.uint8), BatchKeys(0, 0, np.arange(2))).shape
        (2, 3, 8, 8)
    """

    draws = 2 * TRIES + 2
    _fields = ("size", "scale", "ratio", "antialias")

    def __init__(
        self,
        size: int | tuple[int, int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        antialias: bool = True,
    ) -> None:
        super().__init__(1.0)
        self.size = as_pair(size, "size")
        self.scale = as_range(scale, "scale", low=0.0)
        self.ratio = as_range(ratio, "ratio")
        if self.ratio[0] <= 0:
            raise ValueError(f"`ratio` must be positive, got {ratio!r}.")
        if not isinstance(antialias, bool):
            raise TypeError(f"`antialias` must be a bool, got {antialias!r}.")
        self.antialias = antialias

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """Each row's crop box ``top``, ``left``, ``height``, ``width``."""
        height, width = batch.size
        h, w = _boxes(u, height * width, self.scale, self.ratio, (False, True))
        valid = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        found, h, w = _first_valid(valid, h, w)
        # The central fallback, the same for every row of the batch.
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            fw, fh = width, round(width / min(self.ratio))
        elif in_ratio > max(self.ratio):
            fw, fh = round(height * max(self.ratio)), height
        else:
            fw, fh = width, height
        h, w = np.where(found, h, fh), np.where(found, w, fw)
        top = np.where(found, _uniform_int(u[:, -2], height - h + 1), (height - h) // 2)
        left = np.where(found, _uniform_int(u[:, -1], width - w + 1), (width - w) // 2)
        return {"top": top, "left": left, "height": h, "width": w}

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The batch's crops, resized to ``size``."""
        images = batch.images
        kernels = _dispatch.kernels(images)
        if kernels is not None:
            out = kernels.resized_crop(images, params, self.size, self.antialias, batch.channels)
            return _image.replace(batch, out)
        src = _image.first(images, batch.channels)
        boxes = zip(params["top"], params["left"], params["height"], params["width"], strict=True)
        crops = [src[k, :, t : t + h, x : x + w] for k, (t, x, h, w) in enumerate(boxes)]
        out = _image.stack([resize(crop, self.size, self.antialias) for crop in crops])
        return _image.replace(batch, _image.layout(out, batch.channels))


@functools.lru_cache(maxsize=4096)
def resize_weights(n_in: int, n_out: int, antialias: bool) -> np.ndarray:
    """The ``(n_out, n_in)`` float32 matrix of bilinear resampling along one axis.

    [`resample_weights`][looptoolkit.augment._image.resample_weights] of the whole axis,
    computed in float64.
    """
    one = np.zeros(1)
    out, full = np.arange(n_out, dtype=np.float64), np.arange(n_in, dtype=np.float64)
    weights = _image.resample_weights(one, one + n_in, out, full, antialias)[0]
    return weights.astype(np.float32)


def _has_torch() -> bool:
    """Whether torch can be imported (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def resize(image: Any, size: tuple[int, int], antialias: bool) -> Any:
    """One channel-first image ``(C, h, w)`` resized bilinearly to ``size``.

    NumPy images go through torch's kernel where torch is installed (about 12 times as
    fast on the host as the two matrix products of ``resize_numpy``), else through those.
    """
    if not _image.is_torch(image):
        if not _has_torch():
            return resize_numpy(image, size, antialias)
        import torch

        if min(image.strides) < 0:
            image = np.ascontiguousarray(image)
        return resize(torch.from_numpy(image), size, antialias).numpy()
    import torch

    # A crop is a strided view of its image; the antialiased kernel reads a contiguous copy
    # of it several times faster (measured: 0.7 s against 0.12 s for 128 crops to 224).
    x = image[None].contiguous()
    # uint8 has its own (fixed-point) CPU kernel; elsewhere compute in float
    native = image.device.type == "cpu" or image.is_floating_point()
    y = torch.nn.functional.interpolate(
        x if native else x.float(),
        size=size,
        mode="bilinear",
        align_corners=False,
        antialias=antialias,
    )[0]
    return y if native else _image.cast_round(y, image)


def resize_numpy(image: np.ndarray, size: tuple[int, int], antialias: bool) -> np.ndarray:
    """``resize`` in NumPy: the separable weights as two matrix products."""
    wy = resize_weights(image.shape[1], size[0], antialias)
    wx = resize_weights(image.shape[2], size[1], antialias)
    # Width first, then height, rounding between the passes for uint8 as PyTorch does.
    x = _image.to_float32(image) @ wx.T
    if _image.is_float(image):
        return (wy @ x).astype(image.dtype)  # no clamping, as interpolate
    return _image.cast_round(wy @ np.clip(np.rint(x), 0, 255), image)


class RandomCrop(ImageOp):
    """A random ``size`` crop, after constant padding (torchvision's ``RandomCrop``).

    Every row is cropped (the output size changes), so there is no ``p``.

    Args:
        size: output ``(height, width)``, or an int for a square.
        padding: pixels added around the images before cropping: an int for all sides, a
            pair ``(left/right, top/bottom)`` or ``(left, top, right, bottom)``.
        pad_if_needed: pad images smaller than ``size`` on both sides to fit.
        fill: the padding's value.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, RandomCrop
        >>> aug = Augment([RandomCrop(32, padding=4)], key=None)
        >>> aug(np.zeros((2, 3, 32, 32), np.uint8), BatchKeys(0, 0, np.arange(2))).shape
        (2, 3, 32, 32)
    """

    draws = 2
    _fields = ("size", "padding", "pad_if_needed", "fill")

    def __init__(
        self,
        size: int | tuple[int, int],
        padding: int | tuple[int, ...] | None = None,
        pad_if_needed: bool = False,
        fill: float = 0,
    ) -> None:
        super().__init__(1.0)
        self.size = as_pair(size, "size")
        if padding is None:
            self._pad = (0, 0, 0, 0)
        elif isinstance(padding, int) and not isinstance(padding, bool):
            self._pad = (padding,) * 4
        elif isinstance(padding, tuple | list) and len(padding) in (2, 4):
            pads = tuple(int(v) for v in padding)
            self._pad = pads * 2 if len(pads) == 2 else pads  # type: ignore[assignment]
        else:
            raise TypeError(f"`padding` must be an int or a tuple of 2 or 4 ints, got {padding!r}.")
        if min(self._pad) < 0:
            raise ValueError(f"`padding` must be >= 0, got {padding!r}.")
        self.padding = padding
        self.pad_if_needed = bool(pad_if_needed)
        if not isinstance(fill, int | float):
            raise TypeError(f"`fill` must be a number, got {fill!r}.")
        self.fill = fill

    def _padding(self, height: int, width: int) -> tuple[int, int, int, int]:
        """``(left, top, right, bottom)`` for images of ``(height, width)``."""
        left, top, right, bottom = self._pad
        th, tw = self.size
        if self.pad_if_needed and width + left + right < tw:
            extra = tw - (width + left + right)
            left, right = left + extra, right + extra
        if self.pad_if_needed and height + top + bottom < th:
            extra = th - (height + top + bottom)
            top, bottom = top + extra, bottom + extra
        return left, top, right, bottom

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """Each row's crop corner ``top``, ``left`` in the padded images."""
        height, width = batch.size
        left, top, right, bottom = self._padding(height, width)
        ph, pw = height + top + bottom, width + left + right
        th, tw = self.size
        if ph < th or pw < tw:
            raise ValueError(
                f"`size` {self.size} is larger than the padded images ({ph}, {pw}); "
                "pass `padding=` or `pad_if_needed=True`."
            )
        return {
            "top": _uniform_int(u[:, 0], ph - th + 1),
            "left": _uniform_int(u[:, 1], pw - tw + 1),
        }

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The batch's crops."""
        height, width = batch.size
        left, top, right, bottom = self._padding(height, width)
        kernels = _dispatch.kernels(batch.images)
        if kernels is not None:
            pad = (left, top, right, bottom)
            out = kernels.crop(batch.images, params, self.size, pad, self.fill, batch.channels)
            return _image.replace(batch, out)
        src = _image.first(batch.images, batch.channels)
        padded: Any
        if _image.is_torch(src):
            import torch

            padded = torch.nn.functional.pad(src, (left, right, top, bottom), value=self.fill)
        else:
            widths = ((0, 0), (0, 0), (top, bottom), (left, right))
            padded = np.pad(src, widths, constant_values=self.fill)
        th, tw = self.size
        crops = [
            padded[k, :, t : t + th, x : x + tw]
            for k, (t, x) in enumerate(zip(params["top"], params["left"], strict=True))
        ]
        out = _image.stack(crops)
        return _image.replace(batch, _image.layout(out, batch.channels))


class RandomErasing(ImageOp):
    """Erase a random box of the rows where it applies (torchvision's ``RandomErasing``).

    Ten tries per row, drawn at once (area fraction uniform in ``scale``, log aspect ratio
    uniform in ``log(ratio)``), the first box strictly inside the image kept; a row with none
    is left as it is.

    Args:
        p: probability that a row is erased.
        scale: range of the box's area, as a fraction of the image's.
        ratio: range of the box's height / width.
        value: the box's value: a number, or one per channel (in the images' units: 0-255
            for uint8 images).

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, RandomErasing
        >>> aug = Augment([RandomErasing(p=1.0, value=0)], key=None)
        >>> out = aug(np.full((4, 3, 16, 16), 255, np.uint8), BatchKeys(0, 0, np.arange(4)))
        >>> bool((out == 0).any(axis=(1, 2, 3)).all())  # every row has an erased box
        True
    """

    draws = 2 * TRIES + 2
    _fields = ("p", "scale", "ratio", "value")

    def __init__(
        self,
        p: float = 0.5,
        scale: tuple[float, float] = (0.02, 0.33),
        ratio: tuple[float, float] = (0.3, 3.3),
        value: float | tuple[float, ...] = 0,
    ) -> None:
        super().__init__(p)
        self.scale = as_range(scale, "scale", low=0.0)
        self.ratio = as_range(ratio, "ratio")
        if self.ratio[0] <= 0:
            raise ValueError(f"`ratio` must be positive, got {ratio!r}.")
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._value: tuple[float, ...] = (float(value),)
        elif isinstance(value, tuple | list) and all(isinstance(v, int | float) for v in value):
            self._value = tuple(float(v) for v in value)
        else:
            raise TypeError(f"`value` must be a number or a tuple of numbers, got {value!r}.")
        self.value = value

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """Each row's box ``top``, ``left``, ``height``, ``width`` and whether it has one."""
        height, width = batch.size
        h, w = _boxes(u, height * width, self.scale, self.ratio, (True, False))
        found, h, w = _first_valid((h < height) & (w < width), h, w)
        h, w = np.where(found, h, height), np.where(found, w, width)
        top = np.where(found, _uniform_int(u[:, -2], height - h + 1), 0)
        left = np.where(found, _uniform_int(u[:, -1], width - w + 1), 0)
        return {"top": top, "left": left, "height": h, "width": w, "found": found}

    def draw(self, keys: Any, stream: int, batch: ImageBatch) -> dict[str, np.ndarray]:
        """The batch's parameters; a row without a box is not applied."""
        out = super().draw(keys, stream, batch)
        out["apply"] = out["apply"] & out["found"]
        return out

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The batch with each applied row's box set to ``value``."""
        images = batch.images
        dst_rows = np.flatnonzero(params["apply"])
        if len(dst_rows) == 0:
            return batch
        channels = batch.num_channels
        if len(self._value) not in (1, channels):
            raise ValueError(
                f"`value` must have 1 or {channels} numbers for {channels} channels, "
                f"got {self.value!r}."
            )
        kernels = _dispatch.kernels(images)
        if kernels is not None:
            return _image.replace(batch, kernels.erase(images, params, self._value, batch.channels))
        out = _image.writable(batch)
        dst = _image.first(out, batch.channels)
        fill = np.asarray(self._value, dtype=np.float32)[:, None, None]
        value: Any
        if _image.is_torch(dst):
            import torch

            value = torch.as_tensor(fill, device=dst.device)
        else:
            value = fill
        for k in dst_rows:
            t, x = params["top"][k], params["left"][k]
            h, w = params["height"][k], params["width"][k]
            dst[k, :, t : t + h, x : x + w] = value
        return _image.replace(batch, out)
