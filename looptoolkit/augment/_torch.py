"""The image ops' kernels on torch tensors off the host: the shared bodies, run eagerly.

On the host torch's own per-image kernels measure fastest (the ops' NumPy-and-torch paths);
on a GPU a launch per row is what the ops must not make, so there every op runs the body
of [`_kernels`][looptoolkit.augment._kernels] that the compiling frameworks run (masks,
gathers, batched products; a row's parameters as arrays): a few batched calls an op.
[`kernels_on`][looptoolkit.augment._torch.kernels_on] gives the kernels of one device,
[`namespace_on`][looptoolkit.augment._torch.namespace_on] its NumPy names.

This module imports torch, and is itself imported only when a torch tensor off the host
reaches an op.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from looptoolkit.augment._kernels import Kernels

__all__ = ["kernels_on", "namespace_on"]


class _Namespace:
    """NumPy's names on the torch tensors of one device (torch's own where they agree)."""

    float32 = torch.float32
    int32 = torch.int32

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def dtype(name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def is_float(x: Any) -> bool:
        return bool(x.is_floating_point())

    @staticmethod
    def is_float_dtype(dtype: Any) -> bool:
        return bool(dtype.is_floating_point)

    @staticmethod
    def cast(x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    def asarray(self, x: Any, dtype: Any = None) -> Any:
        if isinstance(x, torch.Tensor):
            return x if dtype is None else x.to(dtype)
        return torch.as_tensor(np.asarray(x), dtype=dtype, device=self.device)

    def arange(self, n: int, dtype: Any) -> Any:
        return torch.arange(n, dtype=dtype, device=self.device)

    def zeros(self, shape: Any, dtype: Any) -> Any:
        return torch.zeros(shape, dtype=dtype, device=self.device)

    @staticmethod
    def transpose(x: Any, perm: tuple[int, ...]) -> Any:
        return x.permute(*perm)

    @staticmethod
    def flip(x: Any, axis: int) -> Any:
        return torch.flip(x, (axis,))

    @staticmethod
    def concatenate(xs: Any, axis: int = 0) -> Any:
        return torch.cat(list(xs), axis)

    @staticmethod
    def pad(x: Any, widths: Any, value: Any) -> Any:
        flat = [w for pair in reversed(widths) for w in pair]  # last axis first, as F.pad
        return torch.nn.functional.pad(x, flat, value=float(value))

    @staticmethod
    def take(x: Any, rows: Any) -> Any:
        return x[rows]

    @staticmethod
    def take_along_axis(x: Any, idx: Any, axis: int) -> Any:
        return torch.take_along_dim(x, idx.long(), dim=axis)

    def crops(self, x: Any, tops: Any, lefts: Any, size: tuple[int, int]) -> Any:
        n = x.shape[0]
        rows = (tops[:, None] + self.arange(size[0], tops.dtype))[:, :, None]  # (N, h, 1)
        cols = (lefts[:, None] + self.arange(size[1], lefts.dtype))[:, None, :]  # (N, 1, w)
        picked = x[self.arange(n, torch.int64)[:, None, None], :, rows, cols]  # (N, h, w, C)
        return picked.permute(0, 3, 1, 2)

    @staticmethod
    def one_hot(labels: Any, k: int) -> Any:
        return torch.nn.functional.one_hot(labels.long(), k).to(torch.float32)


@functools.cache
def namespace_on(device: torch.device) -> _Namespace:
    """NumPy's names on ``device``'s tensors (the kernels' ``xp``)."""
    return _Namespace(device)


@functools.cache
def kernels_on(device: torch.device) -> Kernels:
    """The kernels on ``device``'s tensors (eager: each body is a few batched calls)."""

    def host(values: np.ndarray) -> Any:
        values = np.asarray(values)
        if values.dtype.kind == "f":
            values = values.astype(np.float32)  # the kernels compute in float32
        return torch.tensor(values, device=device)  # a copy: parameters may be read-only views

    return Kernels(namespace_on(device), lambda fn: fn, host)
