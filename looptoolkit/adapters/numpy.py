"""NumPy backend: host arrays, including ``np.memmap``.

NumPy leaves stay NumPy when the target is the host (``"cpu"``); for any other
target [`looptoolkit.device`][looptoolkit.device] hands them to the framework the device names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from looptoolkit._common.dtypes import as_numpy_dtype
from looptoolkit.adapters._host import gather_rows, row_gather, zip_gathers
from looptoolkit.adapters._protocol import BackendBase

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from looptoolkit._common.target import Target


def _plain(leaf: np.ndarray) -> np.ndarray:
    # A memmap's own `take` returns a memmap object; a plain view returns an ndarray.
    return leaf.view(np.ndarray) if isinstance(leaf, np.memmap) else leaf


class NumpyBackend(BackendBase):
    """Backend for ``numpy.ndarray`` (and subclasses such as ``np.memmap``)."""

    name = "numpy"

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a NumPy array."""
        return isinstance(x, np.ndarray)

    def dtype_name(self, x: np.ndarray) -> str:
        """The dtype's name."""
        return x.dtype.name

    def stack(self, leaves: Sequence[np.ndarray]) -> np.ndarray:
        """``np.stack(leaves)`` (memmaps read into memory)."""
        return np.stack([_plain(leaf) for leaf in leaves])

    def take(self, leaves: Sequence[np.ndarray], idx: np.ndarray) -> list[np.ndarray]:
        """One gather per leaf, at a batch's cost whatever the layout; a memmap yields an ndarray.

        ``take`` copies whole rows where fancy indexing (``x[idx]``) walks the
        rows element by element: about 2.3x faster on 2-D C-ordered rows. A leaf
        in any other layout is gathered by fancy indexing, since ``take`` would
        copy all of it first.
        """
        return [gather_rows(_plain(leaf), idx) for leaf in leaves]

    def take_batches(
        self, leaves: Sequence[np.ndarray], batches: Iterable[np.ndarray]
    ) -> Iterator[tuple[np.ndarray, ...]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily, the loop in C."""
        return zip_gathers([row_gather(_plain(leaf)) for leaf in leaves], batches)

    def resolve_device(self, target: Target) -> str:
        """``"cpu"``: the one device NumPy arrays live on; raises for any other."""
        if target.platform != "cpu" or (target.native is None and (target.index or 0) != 0):
            raise ValueError(
                f"NumPy arrays live on the host (one device, cpu:0); cannot place them on {target}."
            )
        return "cpu"

    def move(
        self,
        leaves: Sequence[np.ndarray],
        target: Target,
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[np.ndarray]:
        """NumPy arrays only ever stay on the host: the leaves as they are."""
        self.resolve_device(target)
        return list(leaves)

    def cast(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x.astype(name)``."""
        return x.astype(as_numpy_dtype(name))

    def constant(self, values: np.ndarray, like: np.ndarray) -> np.ndarray:
        """``values`` as they are."""
        return values

    def synchronize(self, target: Target | None = None) -> None:
        """Nothing to wait for on the host."""


backend = NumpyBackend()
