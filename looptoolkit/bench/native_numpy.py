"""Hand-written NumPy and pure-Python loops for ``looptoolkit compare``.

What a NumPy user writes by hand: a permutation per epoch, then one gather per
leaf per batch, with ``take`` (:func:`numpy_manual`) or with fancy indexing
(``numpy_manual(..., gather="index")``); and the pure Python loop
(:func:`pure_python`) of ``random.sample`` and list slices. Given an ``order``
(an ``Order``, a ``Loader`` or a function of the epoch), the NumPy loops yield
exactly the Loader's batches.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from looptoolkit import tree
from looptoolkit._rows import Rows
from looptoolkit.bench.epochs import EpochPipeline, order_length, split_batches
from looptoolkit.order import batch_count, epoch_indices

__all__ = ["numpy_manual", "pure_python"]


def numpy_manual(
    data: Any,
    batch_size: int,
    *,
    seed: int = 0,
    drop_last: bool = False,
    order: Any = None,
    gather: str = "take",
) -> EpochPipeline:
    """The NumPy manual loop: a permutation per epoch, then one gather per leaf per batch.

    Without ``order`` the permutation comes from ``np.random.default_rng([seed,
    epoch])``, so it is reproducible but not the Loader's order; with ``order``
    it yields exactly the Loader's batches.

    Args:
        data: a pytree of NumPy arrays sharing the leading dimension.
        batch_size: rows per batch.
        seed: seed of the per-epoch permutation (without ``order``).
        drop_last: drop the last partial batch.
        order: where the epoch order comes from, instead of the permutation.
        gather: ``"take"`` (``leaf.take(idx, axis=0)``, the fastest hand-written
            gather) or ``"index"`` (``leaf[idx]`` fancy indexing).

    Returns:
        An :class:`~looptoolkit.bench.epochs.EpochPipeline` of batches shaped like ``data``.

    Examples:
        >>> p = numpy_manual({"x": np.arange(5)}, 2, order=lambda e: np.arange(5))
        >>> [b["x"].tolist() for b in p]
        [[0, 1], [2, 3], [4]]
    """
    if gather not in ("take", "index"):
        raise ValueError(f"`gather` must be 'take' or 'index', got {gather!r}.")
    n = Rows(data).n
    leaves, spec = tree.flatten(data)
    leaves = [np.asarray(leaf) for leaf in leaves]

    def epoch_fn(epoch: int) -> Iterator[Any]:
        if order is None:
            indices = np.random.default_rng([seed, epoch]).permutation(n)
        else:
            indices = epoch_indices(order, epoch)
        for idx in split_batches(indices, batch_size, drop_last):
            if gather == "take":
                yield spec.unflatten([leaf.take(idx, axis=0) for leaf in leaves])
            else:
                yield spec.unflatten([leaf[idx] for leaf in leaves])

    length = order_length(order, n, batch_size, drop_last)
    return EpochPipeline(epoch_fn, length, name=f"numpy_manual[{gather}]")


def pure_python(
    data: Sequence[Any], batch_size: int, *, seed: int = 0, drop_last: bool = False
) -> EpochPipeline:
    """Pure Python: ``random.sample`` of a list per epoch, then list slices.

    The first loop of the classic "which loop is fastest" question, on the
    ``index`` workload (a list of sample ids): no framework at all. Batches are
    Python lists.

    Args:
        data: a sequence (a NumPy array is turned into a list once).
        batch_size: items per batch.
        seed: seeds ``random.Random(seed)``, which then draws one sample per epoch.
        drop_last: drop the last partial batch.

    Returns:
        An :class:`~looptoolkit.bench.epochs.EpochPipeline` of lists.

    Examples:
        >>> p = pure_python(range(5), 2)
        >>> sorted(i for b in p for i in b)
        [0, 1, 2, 3, 4]
    """
    items = data.tolist() if isinstance(data, np.ndarray) else list(data)
    n = len(items)
    length = batch_count(n, batch_size, drop_last)
    stop = min(n, length * batch_size)
    rng = random.Random(seed)

    def epoch_fn(epoch: int) -> Iterator[list[Any]]:
        shuffled = rng.sample(items, n)
        for start in range(0, stop, batch_size):
            yield shuffled[start : start + batch_size]

    return EpochPipeline(epoch_fn, length, name="pure_python")
