"""NumPy backend: host arrays, including ``np.memmap``.

NumPy leaves stay NumPy when the target is the host (``"cpu"``); for any other
target :mod:`looptoolkit.device` hands them to the framework the device names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from looptoolkit.device import Target


def as_numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype for a dtype name, ``bfloat16`` and friends through ml_dtypes."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # ships with jax and tensorflow; only needed for their dtypes

        return np.dtype(getattr(ml_dtypes, name))


def _plain(leaf: np.ndarray) -> np.ndarray:
    # A memmap's own `take` returns a memmap object; a plain view returns an ndarray.
    return leaf.view(np.ndarray) if isinstance(leaf, np.memmap) else leaf


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
        """One ``take`` per leaf; a memmap yields an in-memory ndarray.

        ``take`` copies whole rows where fancy indexing (``x[idx]``) walks the
        rows element by element: about 1.7x faster on 2-D rows.
        """
        return [_plain(leaf).take(idx, axis=0) for leaf in leaves]

    def take_batches(
        self, leaves: Sequence[np.ndarray], batches: Iterable[np.ndarray]
    ) -> Iterator[list[np.ndarray]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily."""
        views = [_plain(leaf) for leaf in leaves]
        for idx in batches:
            yield [view.take(idx, axis=0) for view in views]

    def move(
        self,
        leaves: Sequence[np.ndarray],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[np.ndarray]:
        """NumPy arrays only ever stay on the host: this applies the casts."""
        if target.platform != "cpu" or (target.native is None and (target.index or 0) != 0):
            raise ValueError(
                f"NumPy arrays live on the host (one device, cpu:0); cannot place them on {target}."
            )
        return [
            leaf if cast is None else leaf.astype(as_numpy_dtype(cast))
            for leaf, cast in zip(leaves, casts, strict=True)
        ]

    def synchronize(self, target: Target | None = None) -> None:
        """Nothing to wait for on the host."""


backend = NumpyBackend()


# =============================================================================
# Native pipelines for the cross-framework comparison (`looptoolkit compare`)
#
# The seed talk's two baselines, and the small pieces every adapter's native
# pipeline shares: reading an epoch's sample order from an `Order`, a `Loader`
# or a function, cutting it into batches, and an iterable where each `iter()`
# is the next epoch (as with the Loader).
# =============================================================================

# Imported here, not at the top: this section is appended to the backend module.
import contextlib  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402


def epoch_indices(order: Any, epoch: int) -> np.ndarray:
    """The sample order of ``epoch`` as a 1-D NumPy integer array.

    Args:
        order: a :class:`looptoolkit.Loader` (``indices(epoch)``), a
            :class:`looptoolkit.order.Order` (``epoch(epoch).indices()``: this
            shard's order, as the Loader gathers it), or a function of the epoch
            returning the order.
        epoch: the epoch number.

    Returns:
        The indices, in the order the epoch visits them.

    Raises:
        TypeError: ``order`` is none of those.

    Examples:
        >>> epoch_indices(lambda e: np.arange(4)[::-1], 0)
        array([3, 2, 1, 0])
    """
    if callable(getattr(order, "indices", None)):
        indices = order.indices(epoch)
    elif callable(getattr(order, "epoch", None)):
        indices = order.epoch(epoch).indices()
    elif callable(getattr(order, "global_order", None)):
        indices = order.global_order(epoch)
    elif callable(order):
        indices = order(epoch)
    else:
        raise TypeError(
            "`order` must be an Order, a Loader or a function of the epoch, "
            f"got {type(order).__name__}."
        )
    return np.asarray(indices)


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
    stop = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    return [indices[start : start + batch_size] for start in range(0, stop, batch_size)]


def order_length(order: Any, n: int, batch_size: int, drop_last: bool = False) -> int:
    """Batches per epoch: ``len(order)`` for an ``Order`` or ``Loader`` of that batch size.

    Otherwise (a function, another batch size) counted from ``n`` samples.
    """
    if order is not None and getattr(order, "batch_size", None) == batch_size:
        with contextlib.suppress(TypeError):
            return len(order)
    return num_batches(n, batch_size, drop_last)


def num_batches(n: int, batch_size: int, drop_last: bool = False) -> int:
    """Batches per epoch for ``n`` samples.

    Examples:
        >>> num_batches(10, 3), num_batches(10, 3, drop_last=True)
        (4, 3)
    """
    return n // batch_size if drop_last else -(-n // batch_size)


class EpochPipeline:
    """An iterable over epochs: each ``iter()`` yields the batches of the next epoch.

    The native pipelines of every adapter return one, so that they can be driven
    exactly like a :class:`looptoolkit.Loader` (``for batch in pipeline`` once per
    epoch, ``set_epoch(e)`` to choose the next one, ``len()`` batches per epoch).

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
        self.epoch = start_epoch

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next ``iter()`` yields."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        return self._epoch_fn(epoch)

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return f"EpochPipeline({self.name}, batches={self._length}, next_epoch={self.epoch})"


def _leading_length(leaves: Sequence[Any]) -> int:
    if not leaves:
        raise ValueError("`data` has no array leaves.")
    sizes = {int(leaf.shape[0]) for leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(f"every leaf of `data` must have the same length, got {sorted(sizes)}.")
    return sizes.pop()


def numpy_manual(
    data: Any,
    batch_size: int,
    *,
    seed: int = 0,
    drop_last: bool = False,
    order: Any = None,
) -> EpochPipeline:
    """The NumPy manual loop: a permutation per epoch, then ``leaf[idx]`` per leaf per batch.

    The baseline every ratio in ``looptoolkit compare`` is taken against: what a
    NumPy user writes by hand. Without ``order`` the permutation comes from
    ``np.random.default_rng([seed, epoch])``, so it is reproducible but not the
    Loader's order; with ``order`` (an ``Order``, a ``Loader`` or a function of
    the epoch) it yields exactly the Loader's batches.

    Args:
        data: a pytree of NumPy arrays sharing the leading dimension.
        batch_size: rows per batch.
        seed: seed of the per-epoch permutation (without ``order``).
        drop_last: drop the last partial batch.
        order: where the epoch order comes from, instead of the permutation.

    Returns:
        An :class:`EpochPipeline` of batches with the structure of ``data``.

    Examples:
        >>> p = numpy_manual({"x": np.arange(5)}, 2, order=lambda e: np.arange(5))
        >>> [b["x"].tolist() for b in p]
        [[0, 1], [2, 3], [4]]
    """
    from looptoolkit import tree

    leaves, spec = tree.flatten(data)
    n = _leading_length(leaves)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        if order is None:
            indices = np.random.default_rng([seed, epoch]).permutation(n)
        else:
            indices = epoch_indices(order, epoch)
        for idx in split_batches(indices, batch_size, drop_last):
            yield tree.unflatten(spec, [leaf[idx] for leaf in leaves])

    length = order_length(order, n, batch_size, drop_last)
    return EpochPipeline(epoch_fn, length, name="numpy_manual")


def pure_python(
    data: Sequence[Any], batch_size: int, *, seed: int = 0, drop_last: bool = False
) -> EpochPipeline:
    """Pure Python: ``random.sample`` of a list per epoch, then list slices.

    The seed talk's first loop, on the ``index`` workload (a list of sample ids):
    no framework at all. Batches are Python lists.

    Args:
        data: a sequence (a NumPy array is turned into a list once).
        batch_size: items per batch.
        seed: seeds ``random.Random(seed)``, which then draws one sample per epoch.
        drop_last: drop the last partial batch.

    Returns:
        An :class:`EpochPipeline` of lists.

    Examples:
        >>> p = pure_python(range(5), 2)
        >>> sorted(i for b in p for i in b)
        [0, 1, 2, 3, 4]
    """
    import random

    items = data.tolist() if isinstance(data, np.ndarray) else list(data)
    n = len(items)
    stop = n - n % batch_size if drop_last else n
    rng = random.Random(seed)

    def epoch_fn(epoch: int) -> Iterator[list[Any]]:
        shuffled = rng.sample(items, n)
        for start in range(0, stop, batch_size):
            yield shuffled[start : start + batch_size]

    return EpochPipeline(epoch_fn, num_batches(n, batch_size, drop_last), name="pure_python")
