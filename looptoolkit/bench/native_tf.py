"""tf.data's classic input pipeline for ``looptoolkit compare``.

``from_tensor_slices(data).shuffle(N).batch(B).prefetch()``: per-sample
elements shuffled in a buffer, then batched. The Loader's own tf.data pipeline
is [`looptoolkit.tf_data.loader_dataset`][looptoolkit.loader_dataset].
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from looptoolkit.tf_data import as_structure

__all__ = ["classic_dataset"]


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
