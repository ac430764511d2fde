"""Epochs for the comparison loops: the Loader's rule (`EpochPipeline`) and cutting an order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from looptoolkit.order._epochs import EpochCursor, pass_over
from looptoolkit.order._order import batch_count


def batch_slices(indices: Any, batch_size: int) -> Iterator[Any]:
    """Consecutive batch-sized slices of an epoch's order (any sliceable array), lazily."""
    return (indices[start : start + batch_size] for start in range(0, len(indices), batch_size))


def split_batches(indices: np.ndarray, batch_size: int) -> list[Any]:
    """Cut an epoch's order into consecutive batches (views of ``indices``).

    Examples:
        >>> [b.tolist() for b in split_batches(np.arange(5), 2)]
        [[0, 1], [2, 3], [4]]
    """
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    return list(batch_slices(indices, batch_size))


def order_length(order: Any, n: int, batch_size: int) -> int:
    """Batches per epoch: ``len(order)`` of an ``Order`` or ``Loader`` of this batch size."""
    same = getattr(order, "batch_size", None) == batch_size
    return len(order) if same else batch_count(n, batch_size)


class EpochPipeline:
    """An iterable over epochs, by the Loader's rule: a pass run to the end moves to the next epoch.

    Examples:
        >>> p = EpochPipeline(lambda e: iter([e, e]), 2, name="twice")
        >>> list(p), list(p), len(p)
        ([0, 0], [1, 1], 2)
    """

    def __init__(
        self, epoch_fn: Callable[[int], Iterable[Any]], length: int, *, name: str = ""
    ) -> None:
        self._epoch_fn, self._length, self.name = epoch_fn, length, name
        self.cursor = EpochCursor()

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next ``iter()`` yields."""
        self.cursor.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        return pass_over(self.cursor, self._epoch_fn)

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return f"EpochPipeline({self.name}, batches={self._length}, next_epoch={self.cursor.epoch})"
