"""The batched kernels on torch tensors off the CPU: the shared bodies, run eagerly.

On the host torch's own per-image kernels measure fastest (``_geometry.resize``); on a GPU a
launch per row is what the ops must not do, so there the resized crop runs the body of
[`_kernels`][looptoolkit.augment._kernels] that every compiling framework runs: each row's
separable weights built on the device, then two batched products for the whole batch.
[`kernels_on`][looptoolkit.augment._torch.kernels_on] gives the kernels of one device.

This module imports torch, and is itself imported only when a torch tensor off the CPU
reaches an op.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from looptoolkit.augment._kernels import Kernels

__all__ = ["kernels_on"]


class _Namespace:
    """The NumPy names of the kernel bodies on torch tensors of one device."""

    float32 = torch.float32
    int32 = torch.int32

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __getattr__(self, name: str) -> Any:
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

    @staticmethod
    def transpose(x: Any, perm: tuple[int, ...]) -> Any:
        return x.permute(*perm)

    def arange(self, n: int, dtype: Any) -> Any:
        return torch.arange(n, dtype=dtype, device=self.device)


@functools.cache
def kernels_on(device: torch.device) -> Kernels:
    """The kernels on ``device``'s tensors (eager: each body is a few batched calls)."""

    def host(values: np.ndarray) -> Any:
        return torch.as_tensor(np.asarray(values), device=device)

    return Kernels(_Namespace(device), lambda fn: fn, host)
