"""NumPy backend: host arrays, including ``np.memmap``.

NumPy leaves stay NumPy when the target is the host (``"cpu"``); for any other
target :mod:`looptoolkit.device` hands them to the framework the device names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from looptoolkit.device import Target


def as_numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype for a dtype name, ``bfloat16`` and friends through ml_dtypes."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # ships with jax and tensorflow; only needed for their dtypes

        return np.dtype(getattr(ml_dtypes, name))


class NumpyBackend:
    """Backend for ``numpy.ndarray`` (and subclasses such as ``np.memmap``)."""

    name = "numpy"

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a NumPy array."""
        return isinstance(x, np.ndarray)

    def length(self, x: np.ndarray) -> int:
        """Leading dimension of ``x``."""
        return int(x.shape[0])

    def dtype_name(self, x: np.ndarray) -> str:
        """The dtype's name."""
        return x.dtype.name

    def take(self, leaves: Sequence[np.ndarray], idx: np.ndarray) -> list[np.ndarray]:
        """One ``np.take`` per leaf; a memmap yields an in-memory ndarray."""
        return [np.take(leaf, idx, axis=0) for leaf in leaves]

    def move(
        self,
        leaves: Sequence[np.ndarray],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[np.ndarray]:
        """NumPy arrays only ever stay on the host: this applies the casts."""
        if target.platform != "cpu":
            raise ValueError(f"NumPy arrays live on the host; cannot place them on {target}.")
        return [
            leaf if cast is None else leaf.astype(as_numpy_dtype(cast))
            for leaf, cast in zip(leaves, casts, strict=True)
        ]

    def synchronize(self, target: Target | None = None) -> None:
        """Nothing to wait for on the host."""


backend = NumpyBackend()
