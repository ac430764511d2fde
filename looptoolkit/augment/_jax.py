"""The image ops' kernels on JAX arrays: ``jax.jit`` of the shared kernel bodies.

[`KERNELS`][looptoolkit.augment._jax.KERNELS] runs the bodies of
[`_kernels`][looptoolkit.augment._kernels] with ``jax.numpy`` (products at the highest
precision, so that accelerators do not round them to bfloat16), compiled once per op
configuration and input shape. A row's crop is a ``lax.dynamic_slice`` under ``vmap``.

This module imports jax, and is itself imported only when a JAX array reaches an op (a
``jax.Array`` can only exist once jax is imported), so ``import looptoolkit.augment``
imports no framework.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from looptoolkit.augment._kernels import Kernels

__all__ = ["KERNELS", "TRACES"]


class _Namespace:
    """``jax.numpy`` with the kernels' few primitives of their own."""

    float32 = jnp.float32
    int32 = jnp.int32

    def __getattr__(self, name: str) -> Any:
        return getattr(jnp, name)

    @staticmethod
    def is_float(x: Any) -> bool:
        return bool(jnp.issubdtype(x.dtype, jnp.floating))

    @staticmethod
    def is_float_dtype(dtype: Any) -> bool:
        return bool(jnp.issubdtype(dtype, jnp.floating))

    @staticmethod
    def cast(x: Any, dtype: Any) -> Any:
        return jnp.asarray(x).astype(dtype)

    @staticmethod
    def arange(n: int, dtype: Any) -> Any:
        return jnp.arange(n, dtype=dtype)

    @staticmethod
    def pad(x: Any, widths: Any, value: Any) -> Any:
        return jnp.pad(x, widths, constant_values=value)

    @staticmethod
    def take(x: Any, rows: Any) -> Any:
        return jnp.take(x, rows, axis=0)

    @staticmethod
    def einsum(spec: str, a: Any, b: Any) -> Any:
        return jnp.einsum(spec, a, b, precision=lax.Precision.HIGHEST)

    @staticmethod
    def crops(x: Any, tops: Any, lefts: Any, size: tuple[int, int]) -> Any:
        shape = (x.shape[1], *size)

        def one(image: Any, t: Any, u: Any) -> Any:
            return lax.dynamic_slice(image, (0, t, u), shape)

        return jax.vmap(one)(x, tops, lefts)

    @staticmethod
    def one_hot(labels: Any, k: int) -> Any:
        return jax.nn.one_hot(labels, k, dtype=jnp.float32)


def _host(values: np.ndarray) -> np.ndarray:
    """Host parameters in the dtypes JAX keeps without x64: int32, float32 or bool."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int32)
    if values.dtype.kind == "f":
        return values.astype(np.float32)
    return values


KERNELS = Kernels(_Namespace(), jax.jit, _host)
"""The kernels on JAX arrays."""

TRACES = KERNELS.traces
"""Traces of each kernel, by name: a trace is a compilation, one per configuration and shape."""
