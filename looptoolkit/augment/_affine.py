"""Affine image ops: rotation, translation, scale and shear through an inverse map.

torchvision's parameter sampling, drawn for the whole batch; each output pixel is sampled
from the input at the inverse affine map of its centre, as torchvision's tensor ``affine``
and ``rotate`` do (their ``affine_grid`` with half-pixel centres, then ``grid_sample`` with
zero padding, nearest by default or bilinear, and ``fill`` outside the image). On torch
tensors that is one ``grid_sample`` call for the batch's applied rows; on NumPy arrays the
same grid, sampled by gathering.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from looptoolkit.augment import _dispatch, _image
from looptoolkit.augment._base import ImageBatch
from looptoolkit.augment._image import ImageOp, as_range

__all__ = ["RandomAffine", "RandomRotation", "inverse_matrices"]

_MODES = ("nearest", "bilinear")


def inverse_matrices(
    angle: np.ndarray,
    translate: tuple[np.ndarray, np.ndarray],
    scale: np.ndarray,
    shear: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Each row's inverse affine map ``(N, 2, 3)`` about the image centre (torchvision's).

    The forward map is ``T * C * R(angle) * Sh(shear) * S(scale) * C^-1`` with degrees,
    pixels of translation, and ``C`` the centre (here the origin: the grid is centred).
    """
    rot = np.radians(angle)
    sx, sy = np.radians(shear[0]), np.radians(shear[1])
    a = np.cos(rot - sy) / np.cos(sy)
    b = -np.cos(rot - sy) * np.tan(sx) / np.cos(sy) - np.sin(rot)
    c = np.sin(rot - sy) / np.cos(sy)
    d = -np.sin(rot - sy) * np.tan(sx) / np.cos(sy) + np.cos(rot)
    m = np.stack([d, -b, 0.0 * d, -c, a, 0.0 * d], axis=1) / np.asarray(scale)[:, None]
    tx, ty = translate
    m[:, 2] += m[:, 0] * -tx + m[:, 1] * -ty
    m[:, 5] += m[:, 3] * -tx + m[:, 4] * -ty
    return m.reshape(-1, 2, 3)


def _fill_values(fill: tuple[float, ...], channels: int) -> np.ndarray:
    if len(fill) not in (1, channels):
        raise ValueError(
            f"`fill` must have 1 or {channels} numbers for {channels} channels, got {fill!r}."
        )
    return np.broadcast_to(np.asarray(fill, dtype=np.float32), (channels,)).copy()


def _warp_torch(src: Any, theta: np.ndarray, mode: str, fill: np.ndarray) -> Any:
    """Torchvision's ``_apply_grid_transform``, for a batch of maps at once."""
    import torch

    n, c, h, w = src.shape
    dtype = src.dtype if src.is_floating_point() else torch.float32
    base = torch.as_tensor(_image.base_grid(h, w), device=src.device).to(dtype)
    theta_t = torch.as_tensor(theta, device=src.device).to(dtype)
    halves = torch.tensor([0.5 * w, 0.5 * h], dtype=dtype, device=src.device)
    grid = base[None].expand(n, h * w, 3).bmm(theta_t.transpose(1, 2) / halves).view(n, h, w, 2)
    img = src.to(dtype)
    img = torch.cat((img, torch.ones((n, 1, h, w), dtype=dtype, device=src.device)), dim=1)
    img = torch.nn.functional.grid_sample(
        img, grid, mode=mode, padding_mode="zeros", align_corners=False
    )
    mask, img = img[:, -1:].expand(n, c, h, w), img[:, :-1]
    fill_img = torch.as_tensor(fill, device=src.device).to(dtype).view(1, c, 1, 1).expand_as(img)
    if mode == "nearest":
        img = torch.where(mask < 0.5, fill_img, img)
    else:
        img = img * mask + (1.0 - mask) * fill_img
    return _image.cast_round(img, src)


def _warp_numpy(src: np.ndarray, theta: np.ndarray, mode: str, fill: np.ndarray) -> np.ndarray:
    """The same sampling by gathering: pixel centres mapped, then nearest or bilinear."""
    n, c, h, w = src.shape
    halves = np.array([0.5 * w, 0.5 * h], dtype=np.float32)
    grid = _image.base_grid(h, w)[None] @ (theta.astype(np.float32).transpose(0, 2, 1) / halves)
    # grid_sample's unnormalisation (align_corners=False), in float32 as PyTorch's
    ix = (grid[..., 0] + np.float32(1)) * np.float32(w / 2) - np.float32(0.5)
    iy = (grid[..., 1] + np.float32(1)) * np.float32(h / 2) - np.float32(0.5)
    out = _image.sample_at(src.reshape(n, c, h * w), ix, iy, h, w, fill[None, :, None], mode)
    return _image.cast_round(out.reshape(n, c, h, w), src)


class RandomAffine(ImageOp):
    """A random affine map about the centre (torchvision's ``RandomAffine``).

    Args:
        degrees: rotation range in degrees: a number ``d`` for ``(-d, d)``, or a pair.
        translate: maximal shifts as fractions of the width and height, ``(a, b)``: shifts
            uniform in ``(-a * W, a * W)`` and ``(-b * H, b * H)``, rounded to pixels.
        scale: scale range ``(low, high)``; None keeps the size.
        shear: shear range in degrees along x: a number ``s`` for ``(-s, s)`` or a pair, or
            four numbers for x then y.
        fill: the value outside the image: a number or one per channel.
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        p: probability that a row is transformed.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, RandomAffine
        >>> aug = Augment([RandomAffine(15, translate=(0.1, 0.1))], key=None)
        >>> aug(np.zeros((2, 3, 16, 16), np.uint8), BatchKeys(0, 0, np.arange(2))).shape
        (2, 3, 16, 16)
    """

    draws = 6
    _fields: tuple[str, ...] = (
        "degrees",
        "translate",
        "scale",
        "shear",
        "fill",
        "interpolation",
        "p",
    )

    def __init__(
        self,
        degrees: float | tuple[float, float],
        translate: tuple[float, float] | None = None,
        scale: tuple[float, float] | None = None,
        shear: float | tuple[float, ...] | None = None,
        fill: float | tuple[float, ...] = 0,
        interpolation: str = "nearest",
        p: float = 1.0,
    ) -> None:
        super().__init__(p)
        self.degrees = _symmetric(degrees, "degrees")
        self.translate = translate
        if translate is not None:
            if not isinstance(translate, tuple | list) or len(translate) != 2:
                raise TypeError(f"`translate` must be a pair of fractions, got {translate!r}.")
            if not all(isinstance(v, int | float) and 0 <= v <= 1 for v in translate):
                raise ValueError(f"`translate` must be fractions in [0, 1], got {translate!r}.")
            self.translate = (float(translate[0]), float(translate[1]))
        self.scale = None if scale is None else as_range(scale, "scale", low=0.0)
        if self.scale is not None and self.scale[0] <= 0:
            raise ValueError(f"`scale` must be positive, got {scale!r}.")
        self.shear: tuple[float, ...] | None = None
        if shear is not None:
            if isinstance(shear, tuple | list) and len(shear) == 4:
                self.shear = (*as_range(shear[:2], "shear"), *as_range(shear[2:], "shear"))
            else:
                self.shear = _symmetric(shear, "shear")
        if isinstance(fill, int | float) and not isinstance(fill, bool):
            self._fill: tuple[float, ...] = (float(fill),)
        elif isinstance(fill, tuple | list) and all(isinstance(v, int | float) for v in fill):
            self._fill = tuple(float(v) for v in fill)
        else:
            raise TypeError(f"`fill` must be a number or a tuple of numbers, got {fill!r}.")
        self.fill = fill
        if interpolation not in _MODES:
            raise ValueError(
                f"`interpolation` must be 'nearest' or 'bilinear', got {interpolation!r}."
            )
        self.interpolation = interpolation

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """Each row's ``angle``, ``tx``, ``ty`` (pixels), ``scale``, ``shear_x``, ``shear_y``."""
        height, width = batch.size
        lo, hi = self.degrees
        out = {"angle": lo + (hi - lo) * u[:, 0]}
        zeros = np.zeros(len(u))
        if self.translate is not None:
            dx, dy = self.translate[0] * width, self.translate[1] * height
            out["tx"] = np.rint(-dx + 2 * dx * u[:, 1])
            out["ty"] = np.rint(-dy + 2 * dy * u[:, 2])
        else:
            out["tx"], out["ty"] = zeros, zeros
        if self.scale is not None:
            out["scale"] = self.scale[0] + (self.scale[1] - self.scale[0]) * u[:, 3]
        else:
            out["scale"] = zeros + 1.0
        out["shear_x"], out["shear_y"] = zeros, zeros
        if self.shear is not None:
            out["shear_x"] = self.shear[0] + (self.shear[1] - self.shear[0]) * u[:, 4]
            if len(self.shear) == 4:
                out["shear_y"] = self.shear[2] + (self.shear[3] - self.shear[2]) * u[:, 5]
        return out

    def matrices(self, params: dict[str, np.ndarray]) -> np.ndarray:
        """The rows' inverse maps ``(N, 2, 3)``."""
        return inverse_matrices(
            params["angle"],
            (params["tx"], params["ty"]),
            params["scale"],
            (params["shear_x"], params["shear_y"]),
        )

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The batch with the applied rows mapped."""
        images = batch.images
        which = np.flatnonzero(params["apply"])
        if len(which) == 0:
            return batch
        fill = _fill_values(self._fill, batch.num_channels)
        kernels = _dispatch.kernels(images)
        if kernels is not None:
            # every row's map: the compiled function keeps the applied rows' samples
            theta = self.matrices(params)
            mode = self.interpolation
            values = tuple(float(v) for v in fill)
            out = kernels.warp(images, params["apply"], theta, mode, values, batch.channels)
            return _image.replace(batch, out)
        theta = self.matrices({k: v[which] for k, v in params.items()})
        out = _image.writable(batch)
        src, dst = _image.first(images, batch.channels), _image.first(out, batch.channels)
        idx = _image.rows(params["apply"], images)
        warp = _warp_torch if _image.is_torch(images) else _warp_numpy
        dst[idx] = warp(src[idx], theta, self.interpolation, fill)
        return _image.replace(batch, out)


class RandomRotation(RandomAffine):
    """A random rotation about the centre (torchvision's ``RandomRotation``).

    Args:
        degrees: angle range in degrees, counter-clockwise: a number ``d`` for ``(-d, d)``,
            or a pair.
        fill: the value outside the image: a number or one per channel.
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        p: probability that a row is rotated.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, RandomRotation
        >>> aug = Augment([RandomRotation(30)], key=None)
        >>> aug(np.zeros((2, 3, 16, 16), np.uint8), BatchKeys(0, 0, np.arange(2))).shape
        (2, 3, 16, 16)
    """

    draws = 1
    _fields = ("degrees", "fill", "interpolation", "p")

    def __init__(
        self,
        degrees: float | tuple[float, float],
        fill: float | tuple[float, ...] = 0,
        interpolation: str = "nearest",
        p: float = 1.0,
    ) -> None:
        super().__init__(degrees, fill=fill, interpolation=interpolation, p=p)

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """Each row's ``angle``."""
        lo, hi = self.degrees
        return {"angle": lo + (hi - lo) * u[:, 0]}

    def matrices(self, params: dict[str, np.ndarray]) -> np.ndarray:
        """The rows' inverse maps: ``rotate`` is ``affine`` by minus the angle."""
        zeros = np.zeros_like(params["angle"])
        return inverse_matrices(-params["angle"], (zeros, zeros), zeros + 1.0, (zeros, zeros))


def _symmetric(value: Any, name: str) -> tuple[float, float]:
    """A range from a number ``v`` (``(-v, v)``, ``v >= 0``) or a pair."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"`{name}` must be >= 0 when a single number, got {value!r}.")
        return -float(value), float(value)
    return as_range(value, name)
