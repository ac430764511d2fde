"""Hand-written NumPy and pure-Python loops, and the floors, for ``looptoolkit compare``.

What a NumPy user writes by hand: a permutation per epoch, then one gather per
leaf per batch, with ``take`` ([`numpy_manual`][looptoolkit.bench.native_numpy.numpy_manual], the
fastest hand-written loop and the baseline of every ratio) or with fancy indexing
(``numpy_manual(..., gather="index")``); one permutation of the whole epoch
cut into batch views ([`epoch_views`][looptoolkit.bench.native_numpy.epoch_views]); and the pure
Python loop ([`pure_python`][looptoolkit.bench.native_numpy.pure_python]) of ``random.sample`` and
list slices. Given an ``order`` (an ``Order``, a ``Loader`` or a function of the epoch),
[`numpy_manual`][looptoolkit.bench.native_numpy.numpy_manual] yields exactly the Loader's batches.

The floors bound what any loop can reach on the same data:
[`contiguous_copies`][looptoolkit.bench.native_numpy.contiguous_copies] copies each batch's bytes
(the bandwidth limit) and [`sequential_take`][looptoolkit.bench.native_numpy.sequential_take]
gathers with ``arange`` indices (a perfectly local order); ``numpy_manual(..., wrap=...)`` adds a
framework's cheapest way to make each batch its own, and
[`chunked_manual`][looptoolkit.bench.native_numpy.chunked_manual] the chunked hand loop of
frameworks whose per-call cost dominates (JAX, tf): gather a chunk of batches with ``take``, make
one framework array per leaf, split it into its batches in one call.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from looptoolkit import tree
from looptoolkit._rows import Rows
from looptoolkit.bench.epochs import EpochPipeline, order_length, split_batches
from looptoolkit.order import batch_count, epoch_indices

__all__ = [
    "CHUNK_ROW_BYTES",
    "chunk_batches",
    "chunked_manual",
    "contiguous_copies",
    "epoch_views",
    "numpy_manual",
    "pure_python",
    "sequential_take",
]

# Bytes of rows a chunked hand loop gathers at once, and at most 64 batches:
# measured faster than 16 batches for JAX and tf on the tabular workload
# (the per-call cost is spread wider), still cache-sized.
CHUNK_ROW_BYTES = 4 << 20


def numpy_manual(
    data: Any,
    batch_size: int,
    *,
    seed: int = 0,
    drop_last: bool = False,
    order: Any = None,
    gather: str = "take",
    wrap: Callable[[list[np.ndarray]], list[Any]] | None = None,
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
        wrap: applied to each batch's list of gathered leaves (e.g. one
            ``jax.device_put`` of the list, or ``torch.from_numpy`` per leaf).

    Returns:
        An [`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] of batches shaped like
        ``data``.

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
    take = gather == "take"

    def batches(epoch: int) -> list[np.ndarray]:
        if order is None:
            indices = np.random.default_rng([seed, epoch]).permutation(n)
        else:
            indices = epoch_indices(order, epoch)
        return split_batches(indices, batch_size, drop_last)

    # The loop a user writes for this data, the gather chosen once: a single array
    # is the batch itself, a flat dict is rebuilt with a comprehension, anything
    # else with the tree spec.
    keys = _flat_dict_keys(spec)
    epoch_fn: Callable[[int], Iterator[Any]]
    if wrap is not None:
        rebuild = _rebuilder(spec, keys)
        if keys is not None:
            leaves = [leaves[i] for i in keys.values()]
        if take:

            def epoch_fn(epoch: int) -> Iterator[Any]:
                for idx in batches(epoch):
                    yield rebuild(wrap([x.take(idx, axis=0) for x in leaves]))

        else:

            def epoch_fn(epoch: int) -> Iterator[Any]:
                for idx in batches(epoch):
                    yield rebuild(wrap([x[idx] for x in leaves]))

    elif spec.is_leaf():
        (leaf,) = leaves
        if take:

            def epoch_fn(epoch: int) -> Iterator[Any]:
                for idx in batches(epoch):
                    yield leaf.take(idx, axis=0)

        else:

            def epoch_fn(epoch: int) -> Iterator[Any]:
                for idx in batches(epoch):
                    yield leaf[idx]

    elif keys is not None:
        items = [(key, leaves[i]) for key, i in keys.items()]
        if take:

            def epoch_fn(epoch: int) -> Iterator[Any]:
                for idx in batches(epoch):
                    yield {key: x.take(idx, axis=0) for key, x in items}

        else:

            def epoch_fn(epoch: int) -> Iterator[Any]:
                for idx in batches(epoch):
                    yield {key: x[idx] for key, x in items}

    elif take:

        def epoch_fn(epoch: int) -> Iterator[Any]:
            for idx in batches(epoch):
                yield spec.unflatten([x.take(idx, axis=0) for x in leaves])

    else:

        def epoch_fn(epoch: int) -> Iterator[Any]:
            for idx in batches(epoch):
                yield spec.unflatten([x[idx] for x in leaves])

    length = order_length(order, n, batch_size, drop_last)
    return EpochPipeline(epoch_fn, length, name=f"numpy_manual[{gather}]")


def chunk_batches(leaves: Sequence[np.ndarray], batch_size: int) -> int:
    """Batches per chunk of a chunked hand loop: about 4 MiB of rows, 1 to 64 batches."""
    row = sum(x.itemsize * int(np.prod(x.shape[1:])) for x in leaves) or 1
    return max(1, min(64, CHUNK_ROW_BYTES // (row * batch_size)))


def chunked_manual(
    data: Any,
    batch_size: int,
    *,
    wrap: Callable[[list[np.ndarray]], Any],
    split: Callable[[Any, list[int]], Iterable[Sequence[Any]]],
    seed: int = 0,
    chunk: int | None = None,
) -> EpochPipeline:
    """The chunked hand loop: a chunk of batches gathered with ``take``, wrapped once, split.

    A permutation per epoch (as [`numpy_manual`][looptoolkit.bench.native_numpy.numpy_manual]);
    then for every ``chunk`` batches, one ``take`` per leaf of their concatenated
    indices, ``wrap`` of the gathered leaves (one framework array per leaf:
    ``jax.device_put``, ``tf.convert_to_tensor``) and ``split(arrays, sizes)``
    into the batches' leaves in one call (a jitted slice tuple, ``tf.split``); a
    chunk of one batch (4 MiB of rows a batch or more) is not split. What a
    careful user of a framework with a high per-call cost writes.

    Args:
        data: a pytree of NumPy arrays sharing the leading dimension.
        batch_size: rows per batch.
        wrap: the chunk's gathered leaves -> the framework's arrays.
        split: ``(arrays, sizes)`` -> one sequence of leaves per batch.
        seed: seed of the per-epoch permutation.
        chunk: batches per chunk (None: about 4 MiB of rows, see `chunk_batches`).

    Examples:
        >>> p = chunked_manual(np.arange(5), 2, wrap=list, chunk=2,
        ...                    split=lambda a, s: [[r] for r in np.split(a[0], np.cumsum(s)[:-1])])
        >>> sorted(i for b in p for i in b.tolist())
        [0, 1, 2, 3, 4]
    """
    n, leaves, rebuild = _host(data)
    k = chunk_batches(leaves, batch_size) if chunk is None else chunk
    step = k * batch_size

    def epoch_fn(epoch: int) -> Iterator[Any]:
        indices = np.random.default_rng([seed, epoch]).permutation(n)
        for start in range(0, n, step):
            idx = indices[start : start + step]
            rows = [x.take(idx, axis=0) for x in leaves]
            full, rest = divmod(len(idx), batch_size)
            sizes = [batch_size] * full + ([rest] if rest else [])
            wrapped = wrap(rows)
            if len(sizes) == 1:  # a chunk of one batch (large rows) is that batch: no split
                yield rebuild(wrapped)
                continue
            for batch in split(wrapped, sizes):
                yield rebuild(batch)

    return EpochPipeline(epoch_fn, batch_count(n, batch_size), name=f"chunked_manual[{k}]")


def _flat_dict_keys(spec: Any) -> dict[Any, int] | None:
    """For a plain dict of arrays: its keys in its own order -> their leaf positions; else None."""
    if spec.is_leaf() or spec.type is not dict:
        return None
    if not all(child.is_leaf() for child in spec.children()):
        return None
    positions: dict[Any, int] = spec.unflatten(list(range(spec.num_leaves)))
    return positions


def _rebuilder(spec: Any, keys: dict[Any, int] | None) -> Callable[[Sequence[Any]], Any]:
    """Leaves -> the batch: the one leaf, a dict of ``keys`` (leaves in their order), the tree."""
    if spec.is_leaf():
        return operator.itemgetter(0)
    if keys is not None:
        names = list(keys)
        return lambda leaves: dict(zip(names, leaves, strict=True))
    return spec.unflatten


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
        An [`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] of lists.

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


def _host(data: Any) -> tuple[int, list[np.ndarray], Callable[[Sequence[Any]], Any]]:
    """Rows, the leaves as NumPy arrays, and what turns a list of them into a batch."""
    n = Rows(data).n
    leaves, spec = tree.flatten(data)
    keys = _flat_dict_keys(spec)
    if keys is not None:
        leaves = [leaves[i] for i in keys.values()]
    return n, [np.asarray(leaf) for leaf in leaves], _rebuilder(spec, keys)


def sequential_take(data: Any, batch_size: int, *, drop_last: bool = False) -> EpochPipeline:
    """A floor: ``leaf.take(idx, axis=0)`` with the ``arange`` indices of each batch.

    The same gather as [`numpy_manual`][looptoolkit.bench.native_numpy.numpy_manual], in a perfectly
    local order: what an order with the most locality could reach.

    Examples:
        >>> [b["x"].tolist() for b in sequential_take({"x": np.arange(5)}, 2)]
        [[0, 1], [2, 3], [4]]
    """
    n, leaves, rebuild = _host(data)
    indices = np.arange(n)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        for idx in split_batches(indices, batch_size, drop_last):
            yield rebuild([leaf.take(idx, axis=0) for leaf in leaves])

    return EpochPipeline(epoch_fn, batch_count(n, batch_size, drop_last), name="sequential_take")


def contiguous_copies(data: Any, batch_size: int, *, drop_last: bool = False) -> EpochPipeline:
    """A floor: a contiguous copy of each batch's rows (``leaf[a:b].copy()``): one memcpy.

    Every batch's bytes are copied once into a new array, as a gather must, with
    no index at all: the bandwidth limit of any loop that hands out new arrays.

    Examples:
        >>> [b["x"].tolist() for b in contiguous_copies({"x": np.arange(5)}, 2)]
        [[0, 1], [2, 3], [4]]
    """
    n, leaves, rebuild = _host(data)
    stop = batch_count(n, batch_size, drop_last) * batch_size

    def epoch_fn(epoch: int) -> Iterator[Any]:
        for start in range(0, stop, batch_size):
            end = start + batch_size
            yield rebuild([leaf[start:end].copy() for leaf in leaves])

    return EpochPipeline(epoch_fn, batch_count(n, batch_size, drop_last), name="contiguous_copies")


def epoch_views(
    data: Any, batch_size: int, *, seed: int = 0, drop_last: bool = False
) -> EpochPipeline:
    """One permutation of the whole epoch, then batch views of it.

    On a single 1-D array this is the classic NumPy loop
    ``for batch in rng.permutation(x).reshape(-1, B)``: a shuffled copy of the
    whole array per epoch, then row views (the last partial batch included
    unless ``drop_last``). Several leaves are permuted together (one ``take`` of
    the whole epoch per leaf).

    Examples:
        >>> batches = list(epoch_views(np.arange(6), 3))
        >>> [len(b) for b in batches], sorted(np.concatenate(batches).tolist())
        ([3, 3], [0, 1, 2, 3, 4, 5])
    """
    n, leaves, rebuild = _host(data)
    length = batch_count(n, batch_size, drop_last)
    full = (n // batch_size) * batch_size

    def epoch_fn(epoch: int) -> Iterator[Any]:
        rng = np.random.default_rng([seed, epoch])
        if len(leaves) == 1 and leaves[0].ndim == 1:
            shuffled = [rng.permutation(leaves[0])]
        else:
            perm = rng.permutation(n)
            shuffled = [leaf.take(perm, axis=0) for leaf in leaves]
        rows = [s[:full].reshape(-1, batch_size, *s.shape[1:]) for s in shuffled]
        for i in range(full // batch_size):
            yield rebuild([r[i] for r in rows])
        if length * batch_size > full:
            yield rebuild([s[full:] for s in shuffled])

    return EpochPipeline(epoch_fn, length, name="epoch_views")
