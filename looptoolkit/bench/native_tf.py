"""tf input loops for ``looptoolkit compare``: tf.data's classic pipeline and the tf floor.

``from_tensor_slices(data).shuffle(N).batch(B).prefetch()``: per-sample
elements shuffled in a buffer, then batched. The Loader's own tf.data pipeline
is [`looptoolkit.tf_data.loader_dataset`][looptoolkit.loader_dataset]. `chunked_floor` is the tf
floor: the chunked hand loop, one ``tf.convert_to_tensor`` per leaf per chunk
of batches and one ``tf.split``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import tensorflow as tf

from looptoolkit.bench.epochs import EpochPipeline
from looptoolkit.bench.native_numpy import chunked_manual
from looptoolkit.tf_data import as_structure

__all__ = ["chunked_floor", "classic_dataset"]


def classic_dataset(
    data: Any,
    batch_size: int,
    *,
    seed: int = 0,
    drop_last: bool = False,
    prefetch: bool = True,
) -> tf.data.Dataset:
    """The classic tf.data pipeline: ``from_tensor_slices(data).shuffle(N).batch(B).prefetch()``.

    Per-sample elements shuffled in a buffer that holds all of them (a full
    shuffle), reshuffled every iteration, then batched. Its order is tf's, not
    the Loader's.

    Args:
        data: a tensor / NumPy array, or a dict, tuple or namedtuple of them.
        batch_size: rows per batch.
        seed: the shuffle's seed.
        drop_last: ``drop_remainder`` of ``batch``.
        prefetch: end with ``prefetch(tf.data.AUTOTUNE)``.

    Returns:
        The dataset; each iteration is a new shuffle.
    """
    structure, n = as_structure(data)
    ds = tf.data.Dataset.from_tensor_slices(structure)
    ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=drop_last)
    return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds


def chunked_floor(
    data: Any, batch_size: int, *, seed: int = 0, chunk: int | None = None
) -> EpochPipeline:
    """The tf floor: a chunk of batches gathered on the host, one tensor per leaf, one split.

    [`chunked_manual`][looptoolkit.bench.native_numpy.chunked_manual] with
    ``tf.convert_to_tensor`` of each of the chunk's leaves and one ``tf.split``
    per leaf into its batches: two eager tf calls per leaf per chunk, not per batch.
    """
    convert, split = tf.convert_to_tensor, tf.split

    def wrap(rows: list[Any]) -> list[tf.Tensor]:
        return [convert(r) for r in rows]

    def cut(tensors: list[tf.Tensor], sizes: list[int]) -> Iterable[Sequence[tf.Tensor]]:
        return zip(*(split(t, sizes) for t in tensors), strict=True)

    return chunked_manual(data, batch_size, seed=seed, chunk=chunk, wrap=wrap, split=cut)
