"""The JAX kit: host gather + ``device_put``, resident jitted gathers, naive loop, chunked floor."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from looptoolkit import Loader
from looptoolkit.adapters.jax import resolve_device
from looptoolkit.bench.variants import Kit, images, loop, variant
from looptoolkit.bench.variants.epochs import EpochPipeline, batch_slices, order_length
from looptoolkit.bench.variants.numpy import aligned_take, chunked_manual
from looptoolkit.device import _tree as tree
from looptoolkit.device._move import parse_device
from looptoolkit.order._order import batch_count, epoch_indices


def placement(device: Any = None) -> Any:
    """The ``jax.Device`` or ``Sharding`` for a device, a sharding, a device string, or None."""
    return jax.devices()[0] if device is None else resolve_device(parse_device(device))


@partial(jax.jit, static_argnums=(1,))
def _split(leaves: list[jax.Array], sizes: tuple[int, ...]) -> list[list[jax.Array]]:
    """One dispatch cuts a chunk into its batches (a program per distinct ``sizes``)."""
    starts = np.cumsum((0, *sizes[:-1]))
    return [[leaf[s : s + n] for leaf in leaves] for s, n in zip(starts, sizes, strict=True)]


def chunked_floor(
    data: Any, batch_size: int, *, seed: int = 0, device: Any = None
) -> EpochPipeline:
    """The JAX floor: `chunked_manual` into aligned arrays, a ``jax.device_put``, a jitted split."""
    where, put = placement(device), jax.device_put
    wrap, split = (lambda rows: put(rows, where)), (lambda a, sizes: _split(a, tuple(sizes)))
    return chunked_manual(data, batch_size, seed=seed, wrap=wrap, split=split, take=aligned_take)


def host_gather_device_put(
    data: Any, batch_size: int, *, order: Any, device: Any = None
) -> EpochPipeline:
    """Rows gathered on the host (``np.take``), one ``jax.device_put`` a batch (or a sharding)."""
    leaves, spec = tree.flatten(data)
    leaves, where = [np.asarray(x) for x in leaves], placement(device)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        for idx in batch_slices(epoch_indices(order, epoch), batch_size):
            batch = [np.take(leaf, idx, axis=0) for leaf in leaves]
            yield tree.unflatten(spec, jax.device_put(batch, where))

    length = order_length(order, len(leaves[0]), batch_size)
    return EpochPipeline(epoch_fn, length, name="host_gather_device_put")


@partial(jax.jit, static_argnames=("size",))
def _slice_take(leaves: list[jax.Array], order: jax.Array, start: Any, size: int) -> list[Any]:
    """The batch at ``start`` of a device-resident order, gathered from every leaf."""
    idx = jax.lax.dynamic_slice_in_dim(order, start, size)
    return [jnp.take(leaf, idx, axis=0, mode="clip") for leaf in leaves]


def resident_gather(data: Any, batch_size: int, *, order: Any, device: Any = None) -> EpochPipeline:
    """Data and each epoch's order put on ``device`` once; one jitted gather per batch."""
    leaves, spec = tree.flatten(data)
    where = placement(device)
    resident = jax.device_put(list(leaves), where)
    n = int(resident[0].shape[0])
    index_dtype = np.int32 if n < 2**31 else np.int64  # JAX without x64 has no int64

    def epoch_fn(epoch: int) -> Iterator[Any]:
        host = epoch_indices(order, epoch).astype(index_dtype)
        m, indices = len(host), jax.device_put(host, where)
        for start in range(0, m, batch_size):
            size = min(batch_size, m - start)
            yield tree.unflatten(spec, _slice_take(resident, indices, start, size))

    return EpochPipeline(epoch_fn, order_length(order, n, batch_size), name="resident_gather")


def naive_loop(data: Any, batch_size: int, *, seed: int = 0) -> EpochPipeline:
    """The naive loop: data on the device once, ``jax.random.permutation``, eager ``jnp.take``."""
    leaves, spec = tree.flatten(data)
    arrays = [jnp.asarray(leaf) for leaf in leaves]
    n, key = int(arrays[0].shape[0]), jax.random.key(seed)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        perm = jax.random.permutation(jax.random.fold_in(key, epoch), n)
        for idx in batch_slices(perm, batch_size):
            yield tree.unflatten(spec, [jnp.take(x, idx, axis=0) for x in arrays])

    return EpochPipeline(epoch_fn, batch_count(n, batch_size), name="naive_loop")


NAME = "jax"
LABELS = {
    "floor-jax": "floor: chunks of batches gathered with take, one jax.device_put, one jitted "
    "split",
    "jax-naive": "jax.random.permutation + eager jnp.take per leaf",
    "jax-device-put": "NumPy gather + one jax.device_put per batch",
    "jax-resident": "data and order on the device, one jitted gather per batch",
    "loader-jax": "Loader on JAX data",
}
_v = partial(variant, NAME, LABELS)
VARIANTS = (
    _v("floor-jax", loop(chunked_floor, host=True, device_of=NAME), shuffle=None),
    _v("jax-naive", loop(naive_loop), shuffle=None),
    _v("jax-device-put", loop(host_gather_device_put, host=True, order=True, device_of=NAME)),
    _v("jax-resident", loop(resident_gather, order=True, device_of=NAME)),
    _v("loader-jax", loop(Loader), floor="floor-jax"),
    *images(NAME, " (jax.jit)"),
)
KIT = Kit(
    NAME,
    VARIANTS,
    leaves=lambda leaves, device: jax.device_put(leaves, placement(device)),
    ready=jax.block_until_ready,
    gpu=lambda: any(d.platform == "gpu" for d in jax.devices()),
)
