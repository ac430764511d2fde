"""The contract every augmentation op keeps: keyed draws on the host, one batched apply.

An [`Op`][looptoolkit.augment._base.Op] is one random transformation. It never draws from a
global generator: [`draw`][looptoolkit.augment._base.Op.draw] turns the batch's
[`BatchKeys`][looptoolkit._common.keys.BatchKeys] into per-row parameters (small NumPy arrays,
a few numbers a row, vectorised: no Python loop over rows), a pure function of the keys, and
[`apply`][looptoolkit.augment._base.Op.apply] applies them to the whole batch where it lives
(NumPy or torch on the host, torch on CUDA, JAX, tf), as one batched call per op on a device.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import numpy as np

from looptoolkit._common.keys import BatchKeys, uniforms

__all__ = ["PLACEMENTS", "ImageBatch", "Keyed", "Op", "stream_of"]


@dataclasses.dataclass
class ImageBatch:
    """What an op of an image augmentation reads and writes.

    Attributes:
        images: the batch's images, ``(N, C, H, W)`` (``channels="first"``) or
            ``(N, H, W, C)`` (``"last"``): a NumPy array or a framework's tensor.
        channels: ``"first"`` or ``"last"``.
        labels: the labels leaf (class ids ``(N,)`` or one-hot/soft ``(N, K)``), or None; the
            label-mixing ops (MixUp, CutMix) replace it with soft labels ``(N, K)``.
        num_classes: ``K`` for class-id labels (the mixing ops need it), or None.
        owned: whether ``images`` is an array an earlier op made (not the caller's): an op
            then writes into it instead of into a copy.
    """

    images: Any
    channels: str = "first"
    labels: Any = None
    num_classes: int | None = None
    owned: bool = False

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` of the images."""
        shape = tuple(self.images.shape)
        return (shape[2], shape[3]) if self.channels == "first" else (shape[1], shape[2])

    @property
    def num_channels(self) -> int:
        """The images' channels: the width of their channel axis."""
        return int(self.images.shape[1] if self.channels == "first" else self.images.shape[3])


def stream_of(place: int, op: Any) -> int:
    """The draw stream of ``op`` at ``place`` in a composition: distinct ops draw apart."""
    return zlib.crc32(f"{place}:{type(op).__name__}".encode())


class Op:
    """One random op: per-row parameters from keys, applied to the whole batch.

    Subclasses set ``draws`` (uniform numbers a row needs) and implement ``params`` (the
    uniforms to parameters, vectorised) and ``apply``. ``p`` is the probability that a row
    is transformed at all; rows left out cost nothing where the op allows.
    """

    draws: int = 0  # uniforms per row, beside the one that decides `p`

    def __init__(self, p: float = 1.0) -> None:
        if not isinstance(p, int | float) or not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"`p` must be a probability in [0, 1], got {p!r}.")
        self.p = float(p)

    def draw(self, keys: BatchKeys, stream: int, batch: ImageBatch) -> dict[str, np.ndarray]:
        """The batch's parameters: ``"apply"`` (bool per row) and the op's own arrays."""
        u = uniforms(keys, stream, self.draws + 1)
        out = self.params(u[:, 1:], batch)
        out["apply"] = u[:, 0] < self.p
        return out

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """Per-row parameters from uniforms ``u`` (``(N, draws)``)."""
        return {}

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """``batch`` with the op applied to the rows where ``params["apply"]``."""
        raise NotImplementedError


PLACEMENTS = ("device", "host")


class Keyed:
    """A keyed batch transform: called by the Loader with each batch and its keys.

    ``placement`` says where it runs, in one place: ``"device"`` (the default) after the
    batch's move, where the batch lives, as every Loader ``transform``; ``"host"`` on the
    host batch before its copy (the Loader reads ``before_move``).
    """

    keyed = True

    def __init__(self, placement: str = "device") -> None:
        if placement not in PLACEMENTS:
            raise ValueError(
                f"`placement` must be one of {', '.join(map(repr, PLACEMENTS))}, got {placement!r}."
            )
        self.placement = placement

    @property
    def before_move(self) -> bool:
        """Whether the Loader runs this transform on the host, before the batch's move."""
        return self.placement == "host"
