"""Batch keys: which rows a batch holds, as the keyed draws of augmentations need them.

A leaf type both sides import: the pipeline makes a
[`BatchKeys`][looptoolkit._common.keys.BatchKeys] for every batch it hands a keyed transform
(the Loader's seed, the epoch, and each row's position in the epoch's global order), and
[`uniforms`][looptoolkit._common.keys.uniforms] turns keys into random numbers: a
counter-based hash of ``(seed, epoch, position, stream, draw)``, vectorised in NumPy, so a
row's numbers depend on nothing else (not the rank, the world size, the worker, the
prefetch mode or the framework) and are the same on every machine.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["BatchKeys", "KeyedBatch", "KeyedCollate", "KeyedIndices", "uniforms"]

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
# splitmix64's constants (Steele, Lea and Flood 2014): its finaliser is a bijection of
# 64-bit words that mixes every input bit into every output bit.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_SHIFT = np.uint64(11)  # 64 - 53 bits of a double's mantissa
_SCALE = 1.0 / (1 << 53)


class BatchKeys(NamedTuple):
    """The keys of a batch's rows: what their random parameters are a function of.

    Attributes:
        seed: the Loader's ``seed``.
        epoch: the epoch the batch belongs to.
        positions: each row's position in the epoch's global order (before sharding), a 1-D
            int64 array, one per row of the batch.

    Examples:
        >>> import numpy as np
        >>> keys = BatchKeys(0, 1, np.arange(3))
        >>> uniforms(keys, stream=7, k=2).shape
        (3, 2)
    """

    seed: int
    epoch: int
    positions: np.ndarray


def _mix(x: Any) -> Any:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def uniforms(keys: BatchKeys, stream: int, k: int) -> np.ndarray:
    """``k`` uniform numbers in ``[0, 1)`` per row, a pure function of the row's key.

    Each number is the hash of ``(seed, epoch, position, stream, j)`` for ``j < k``: rows,
    epochs, streams (an op and its place in a composition) and draws are independent, and
    a row draws the same numbers wherever and however its batch is made.

    Args:
        keys: the batch's keys.
        stream: which draws: one stream per op of a composition (and per kind of parameter).
        k: numbers per row.

    Returns:
        A float64 array ``(len(positions), k)``.

    Examples:
        >>> import numpy as np
        >>> a = uniforms(BatchKeys(0, 0, np.array([5, 9])), stream=1, k=3)
        >>> b = uniforms(BatchKeys(0, 0, np.array([9])), stream=1, k=3)
        >>> bool((a[1] == b[0]).all())  # row 9 draws the same in any batch
        True
    """
    positions = np.asarray(keys.positions, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        # Each field hashed in turn into the state: an injective chain of bijections.
        h = _mix(np.uint64(int(keys.seed) & 0xFFFFFFFFFFFFFFFF) + _GOLDEN)
        h = _mix(h ^ (np.uint64(int(keys.epoch)) + _GOLDEN))
        h = _mix(h ^ (np.uint64(int(stream) & 0xFFFFFFFFFFFFFFFF) + _GOLDEN))
        row = _mix(h ^ (positions + _GOLDEN))
        j = np.arange(1, k + 1, dtype=np.uint64) * _GOLDEN
        words = _mix(row[:, None] ^ j[None, :])
    return (words >> _SHIFT).astype(np.float64) * _SCALE


class KeyedIndices(NamedTuple):
    """A batch's rows and their keys, as a batch sampler hands them to a DataLoader's workers."""

    indices: Any
    keys: BatchKeys


class KeyedBatch(NamedTuple):
    """A gathered batch and its keys, from a dataset's ``__getitems__`` to the collate."""

    batch: Any
    keys: BatchKeys


class KeyedCollate:
    """A keyed ``collate_fn`` (an augmentation) called with each batch and its keys.

    Args:
        fn: the keyed function, ``fn(batch, keys)``.
    """

    keyed = True

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, item: KeyedBatch) -> Any:
        """``fn(batch, keys)`` of a keyed batch."""
        return self.fn(item.batch, item.keys)
