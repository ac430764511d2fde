"""JAX input loops for ``looptoolkit compare``.

The loops JAX users write: a host gather then one ``jax.device_put`` (to a
device or a ``Sharding``), a device-resident one with the epoch order on the
device and one jitted gather per batch, and the naive
``jax.random.permutation`` + ``jnp.take`` loop. Given an ``order``, the first
two yield exactly the Loader's batches. `chunked_floor` is the JAX floor:
the chunked hand loop, one ``jax.device_put`` per chunk of batches and one
jitted split.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from looptoolkit import tree
from looptoolkit.adapters.jax import resolve_device
from looptoolkit.bench.epochs import EpochPipeline, order_length, split_batches
from looptoolkit.bench.native_numpy import chunked_manual
from looptoolkit.device import parse_device
from looptoolkit.order import batch_count, epoch_indices

__all__ = [
    "chunked_floor",
    "host_gather_device_put",
    "naive_loop",
    "placement",
    "resident_gather",
]


def placement(device: Any = None) -> Any:
    """The ``jax.Device`` or ``Sharding`` for ``device``: a device, a sharding, a string, or None.

    None is JAX's default device; strings are looptoolkit device names
    (``"cpu"``, ``"gpu"``, ``"cuda:0"``, ``"tpu"``).
    """
    if device is None:
        return jax.devices()[0]
    return resolve_device(parse_device(device))


def _host_leaves(data: Any) -> tuple[list[np.ndarray], Any]:
    leaves, spec = tree.flatten(data)
    return [np.asarray(leaf) for leaf in leaves], spec


def _index_dtype(n: int) -> Any:
    # int32 unless the data needs more (JAX without x64 has no int64 arrays).
    return np.int32 if n < 2**31 else np.int64


@partial(jax.jit, static_argnums=(1,))
def _split(leaves: list[jax.Array], sizes: tuple[int, ...]) -> list[list[jax.Array]]:
    # One dispatch cuts a chunk into its batches (a program per distinct sizes tuple).
    starts = np.cumsum((0, *sizes[:-1]))
    return [[leaf[s : s + n] for leaf in leaves] for s, n in zip(starts, sizes, strict=True)]


def chunked_floor(
    data: Any, batch_size: int, *, seed: int = 0, device: Any = None, chunk: int | None = None
) -> EpochPipeline:
    """The JAX floor: a chunk of batches gathered on the host, one ``device_put``, one split.

    [`chunked_manual`][looptoolkit.bench.native_numpy.chunked_manual] with
    ``jax.device_put(rows, device)`` of the chunk's leaves and one jitted slice
    tuple into its batches: a JAX call per chunk, not per batch.
    """
    where = placement(device)
    put = jax.device_put
    return chunked_manual(
        data,
        batch_size,
        seed=seed,
        chunk=chunk,
        wrap=lambda rows: put(rows, where),
        split=lambda arrays, sizes: _split(arrays, tuple(sizes)),
    )


def host_gather_device_put(
    data: Any,
    batch_size: int,
    *,
    order: Any,
    device: Any = None,
    drop_last: bool = False,
) -> EpochPipeline:
    """Gather on the host with NumPy, then one ``jax.device_put`` of the batch.

    The common JAX input loop for in-memory data: rows are gathered from host
    arrays (``np.take``), and the whole batch (every leaf) is put on ``device``
    with one ``jax.device_put``; with a ``jax.sharding.Sharding`` it is split
    across its devices.

    Args:
        data: a pytree of NumPy (or JAX, read back once) arrays.
        batch_size: rows per batch (divisible by the sharding's batch axis when
            sharded).
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        device: a ``jax.Device``, a ``Sharding``, a device string, or None (default device).
        drop_last: drop the last partial batch.

    Returns:
        An [`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] of batches of JAX arrays.
    """
    leaves, spec = _host_leaves(data)
    n = int(leaves[0].shape[0])
    where = placement(device)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        for idx in split_batches(epoch_indices(order, epoch), batch_size, drop_last):
            batch = [np.take(leaf, idx, axis=0) for leaf in leaves]
            yield tree.unflatten(spec, jax.device_put(batch, where))

    length = order_length(order, n, batch_size, drop_last)
    return EpochPipeline(epoch_fn, length, name="host_gather_device_put")


@partial(jax.jit, static_argnames=("size",))
def _slice_take(
    leaves: list[jax.Array], order: jax.Array, start: jax.Array, size: int
) -> list[jax.Array]:
    idx = jax.lax.dynamic_slice_in_dim(order, start, size)
    return [jnp.take(leaf, idx, axis=0, mode="clip") for leaf in leaves]


def resident_gather(
    data: Any,
    batch_size: int,
    *,
    order: Any,
    device: Any = None,
    drop_last: bool = False,
) -> EpochPipeline:
    """Device-resident data and order; one jitted gather per batch.

    The data is put on ``device`` once. Each epoch's order is put there once;
    each batch is one jitted call that slices the order and gathers every leaf
    (one dispatch per batch, whatever the number of leaves).

    Args:
        data: a pytree of NumPy or JAX arrays.
        batch_size: rows per batch.
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        device: a ``jax.Device``, a ``Sharding``, a device string, or None (default device).
        drop_last: drop the last partial batch.

    Returns:
        An [`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] of batches of JAX arrays.
    """
    leaves, spec = tree.flatten(data)
    where = placement(device)
    resident = jax.device_put(list(leaves), where)
    n = int(resident[0].shape[0])
    index_dtype = _index_dtype(n)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        host = epoch_indices(order, epoch).astype(index_dtype)
        m = len(host)
        indices = jax.device_put(host, where)
        for start in range(0, batch_count(m, batch_size, drop_last) * batch_size, batch_size):
            size = min(batch_size, m - start)
            yield tree.unflatten(spec, _slice_take(resident, indices, start, size))

    length = order_length(order, n, batch_size, drop_last)
    return EpochPipeline(epoch_fn, length, name="resident_gather")


def naive_loop(
    data: Any, batch_size: int, *, seed: int = 0, drop_last: bool = False
) -> EpochPipeline:
    """The naive JAX loop: ``jax.random.permutation`` per epoch, eager ``jnp.take`` per leaf.

    What a first JAX input loop looks like; the order is JAX's, not the Loader's.

    Args:
        data: a pytree of NumPy or JAX arrays (put on the default device once).
        batch_size: rows per batch.
        seed: ``jax.random.key(seed)``, folded with the epoch number.
        drop_last: drop the last partial batch.

    Returns:
        An [`EpochPipeline`][looptoolkit.bench.epochs.EpochPipeline] of batches of JAX arrays.
    """
    leaves, spec = tree.flatten(data)
    arrays = [jnp.asarray(leaf) for leaf in leaves]
    n = int(arrays[0].shape[0])
    key = jax.random.key(seed)
    length = batch_count(n, batch_size, drop_last)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        perm = jax.random.permutation(jax.random.fold_in(key, epoch), n)
        for start in range(0, length * batch_size, batch_size):
            idx = perm[start : start + batch_size]
            yield tree.unflatten(spec, [jnp.take(x, idx, axis=0) for x in arrays])

    return EpochPipeline(epoch_fn, length, name="naive_loop")
