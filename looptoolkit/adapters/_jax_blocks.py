"""JAX: block uploads of host rows, K batches gathered, put on the device and split at a time.

A ``jax.device_put`` and a dispatch each cost tens of microseconds on the host,
more than a batch of a few hundred rows takes to cross PCIe. Where host data
(NumPy arrays, memory maps, JAX arrays on the host CPU) goes to one JAX device,
[`JaxBlockStager`][looptoolkit.adapters._jax_blocks.JaxBlockStager] pays those
costs once per block of batches:

- the index arrays of the next batches of the epoch's order are joined, and each
  staged leaf is gathered with one ``take`` into a new 64-byte-aligned host array
  ([`split_chunks`][looptoolkit.adapters.split_chunks] with
  [`aligned_gather`][looptoolkit.adapters.aligned_gather]);
- the block's leaves go to the device in one ``jax.device_put`` of the list;
- one jitted ``split`` cuts them into the block's batches (a block of one batch is
  its batch): no JAX call per batch.

Blocks grow from one batch to ``K`` (1, 2, 4, ... ``K``), so that the first batches
of an epoch are not held up by a whole block's gather; the last block is as
short as the epoch leaves it, on the same path. ``K`` is ``BLOCK_BYTES`` of staged
rows, at most ``BLOCK_MAX_BATCHES`` (``loader.stats.block_batches``). One split
program is compiled per tuple of batch sizes (about log2 K + 2 per batch size).

Every block's host arrays are new: on the CPU, ``jax.device_put`` adopts an
aligned NumPy array without a copy, so a reused host buffer would rewrite the
batches a loop keeps. JAX orders reads after transfers itself: no event, no
stream, nothing to wait for at the hand-over. A ``Sharding`` target keeps the
per-batch move (one ``device_put`` of each batch to the sharding).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any

import jax
import numpy as np

from looptoolkit.adapters._host import aligned_gather, split_chunks

__all__ = [
    "BLOCK_BYTES",
    "BLOCK_MAX_BATCHES",
    "JaxBlockStager",
    "block_batches",
    "growing",
    "split",
    "stageable",
]

# Staged bytes a block holds at most: enough batches that a `device_put` and a
# dispatch are paid once for many, few enough that a block's gather stays in cache
# and its first batch is not long in coming. 0 turns block uploads off (every
# batch gathered by NumPy and moved by its own `device_put`, as before).
BLOCK_BYTES = 4 << 20
# Batches a block holds at most, however small they are.
BLOCK_MAX_BATCHES = 64


@partial(jax.jit, static_argnums=(1,))
def split(leaves: list[jax.Array], sizes: tuple[int, ...]) -> list[list[jax.Array]]:
    """Cut a chunk of batches into its batches in one dispatch.

    One program per distinct tuple of sizes (a full chunk, the epoch's last one).
    """
    starts = np.cumsum((0, *sizes[:-1]))
    return [[leaf[s : s + n] for leaf in leaves] for s, n in zip(starts, sizes, strict=True)]


def block_batches(batch_bytes: int) -> int:
    """``K``, the batches of ``batch_bytes`` staged bytes one block holds (0: no blocks)."""
    if BLOCK_BYTES <= 0:
        return 0
    return max(1, min(BLOCK_MAX_BATCHES, BLOCK_BYTES // max(batch_bytes, 1)))


def growing(most: int) -> Iterator[int]:
    """Block lengths 1, 2, 4, ... up to ``most``, then ``most`` for ever."""
    size = 1
    while True:
        yield size
        size = min(2 * size, most)


def _jax_dtype(dtype: np.dtype) -> bool:
    """Whether JAX holds host arrays of ``dtype`` (numbers, bool, ml_dtypes' floats)."""
    if not dtype.isnative:
        return False
    return dtype.kind in "biufc" or dtype.type.__module__.startswith("ml_dtypes")


def stageable(leaf: Any) -> np.ndarray | None:
    """A host NumPy view of a leaf a block upload gathers from, or None.

    NumPy arrays and memory maps of a dtype JAX holds, and JAX arrays on one host
    CPU device (a zero-copy view). Anything else (arrays on an accelerator or
    spread over devices, stores, object or big-endian dtypes) takes the
    ordinary gather and move.
    """
    if isinstance(leaf, jax.Array):
        devices = leaf.devices()
        if len(devices) != 1 or next(iter(devices)).platform != "cpu":
            return None
        view = np.asarray(leaf)
    elif isinstance(leaf, np.ndarray):
        view = leaf.view(np.ndarray) if isinstance(leaf, np.memmap) else leaf
    else:
        return None
    if view.ndim == 0 or not _jax_dtype(view.dtype):
        return None
    return view


class JaxBlockStager:
    """Block uploads of host leaves to one JAX device (the ``Stager`` protocol).

    Args:
        views: ``(position, host view)`` of each staged leaf, in the data's leaf order.
        batch_size: rows of a full batch (sets ``K``).
        device: the ``jax.Device`` batches go to.
    """

    def __init__(
        self, views: Sequence[tuple[int, np.ndarray]], batch_size: int, device: Any
    ) -> None:
        self.positions: list[int] = [i for i, _ in views]
        self.views: list[np.ndarray] = [v for _, v in views]
        self.device = device
        self.moved = True  # the staged leaves come out of `staged` on the device
        self.stats: Any = None
        row_bytes = sum(v.dtype.itemsize * int(np.prod(v.shape[1:])) for v in self.views)
        self.block_batches = max(1, block_batches(batch_size * row_bytes))

    def staged(self, batches: Iterable[np.ndarray]) -> Iterator[list[Any]]:
        """The staged leaves of each batch, on the device: slices of block uploads."""
        if self.stats is not None:
            self.stats.block_batches = self.block_batches
        device = self.device
        return split_chunks(
            self.views,
            batches,
            lambda rows: jax.device_put(rows, device),
            lambda arrays, sizes: split(arrays, tuple(sizes)),
            aligned_gather,  # new arrays for every block: the device's may alias them
            growing(self.block_batches),
        )

    def context(self) -> AbstractContextManager[Any]:
        """Nothing to enter: JAX orders its transfers and computations itself."""
        return nullcontext()

    def record(self, k: int) -> Any:
        """Nothing to record (no events on JAX)."""
        return None

    def hand_over(self, leaves: Iterable[Any], token: Any) -> None:
        """Nothing to wait for: a read of a batch waits for its transfer in JAX."""
