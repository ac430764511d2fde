"""Epoch-driven pipelines: the shape every comparison pipeline shares.

Each native pipeline under [`looptoolkit.bench`][looptoolkit.bench] is an
[`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] (or a framework object that behaves like
one): which epoch each ``iter()`` runs is the [`Loader`][looptoolkit.Loader]'s rule, kept by the
same epoch cursor, so the harness drives every variant the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from looptoolkit._epochs import EpochCursor, pass_over
from looptoolkit.order import batch_count

__all__ = ["EpochPipeline", "order_length", "split_batches"]


def split_batches(
    indices: np.ndarray, batch_size: int, drop_last: bool = False
) -> list[np.ndarray]:
    """Cut an epoch's order into consecutive batches (views of ``indices``).

    Examples:
        >>> [b.tolist() for b in split_batches(np.arange(5), 2)]
        [[0, 1], [2, 3], [4]]
        >>> len(split_batches(np.arange(5), 2, drop_last=True))
        2
    """
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    stop = batch_count(len(indices), batch_size, drop_last) * batch_size
    return [indices[start : start + batch_size] for start in range(0, stop, batch_size)]


def order_length(order: Any, n: int, batch_size: int, drop_last: bool = False) -> int:
    """Batches per epoch: ``len(order)`` for an ``Order`` or ``Loader`` of that batch size.

    Otherwise (a function, another batch size) counted from ``n`` samples.
    """
    if order is not None and getattr(order, "batch_size", None) == batch_size:
        try:
            return len(order)
        except TypeError:
            pass
    return batch_count(n, batch_size, drop_last)


class EpochPipeline:
    """An iterable over epochs, by the Loader's rule: a pass run to the end moves to the next epoch.

    Args:
        epoch_fn: yields the batches of the epoch it is given.
        length: batches per epoch.
        name: shown by ``repr``.
        start_epoch: the epoch the first ``iter()`` yields.

    Examples:
        >>> p = EpochPipeline(lambda e: iter([e, e]), 2, name="twice")
        >>> list(p), list(p), len(p)
        ([0, 0], [1, 1], 2)
    """

    def __init__(
        self,
        epoch_fn: Callable[[int], Iterator[Any]],
        length: int,
        *,
        name: str = "pipeline",
        start_epoch: int = 0,
    ) -> None:
        self._epoch_fn = epoch_fn
        self._length = length
        self.name = name
        self.cursor = EpochCursor(start_epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next pass runs."""
        return self.cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next ``iter()`` yields."""
        self.cursor.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        # The Loader's epoch rule (the one cursor): bound at the first batch, done at the end.
        return pass_over(self.cursor, self._epoch_fn)

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return f"EpochPipeline({self.name}, batches={self._length}, next_epoch={self.cursor.epoch})"
