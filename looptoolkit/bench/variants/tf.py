"""The tf kit: tf.data's classic pipeline, the chunked floor, the Loader's ``loader_dataset``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import tensorflow as tf

from looptoolkit import Loader
from looptoolkit.bench.variants import Kit, images, loop, variant
from looptoolkit.bench.variants.epochs import EpochPipeline
from looptoolkit.bench.variants.numpy import aligned_take, chunked_manual, each, numpy_manual
from looptoolkit.tf_data import as_structure, loader_dataset


def classic_dataset(data: Any, batch_size: int, *, seed: int = 0) -> tf.data.Dataset:
    """``from_tensor_slices(data).shuffle(N).batch(B).prefetch(AUTOTUNE)``, reshuffled each pass."""
    structure, n = as_structure(data)
    ds = tf.data.Dataset.from_tensor_slices(structure)
    ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _split(tensors: list[tf.Tensor], sizes: list[int]) -> Iterable[Sequence[tf.Tensor]]:
    """The batches of a chunk: ``tf.split`` of each leaf, by count when the sizes are equal."""
    parts: Any = len(sizes) if sizes[0] == sizes[-1] else sizes
    return zip(*(tf.split(t, parts) for t in tensors), strict=True)


def chunked_floor(data: Any, batch_size: int, *, seed: int = 0) -> EpochPipeline:
    """The tf floor: `chunked_manual` into aligned arrays tf adopts (DLPack), one ``tf.split``."""
    # not tf.convert_to_tensor: it copies each chunk (twice when it is not 64-byte aligned)
    wrap = each(lambda x: tf.experimental.dlpack.from_dlpack(x.__dlpack__()))
    return chunked_manual(data, batch_size, seed=seed, wrap=wrap, split=_split, take=aligned_take)


NAME = "tf"
LABELS = {
    "floor-tf": "floor: chunks of batches gathered with take into aligned arrays, adopted by tf "
    "(DLPack), one tf.split",
    "tf-convert": "best manual loop + tf.convert_to_tensor per leaf per batch",
    "tf-classic": "tf.data: from_tensor_slices.shuffle(N).batch.prefetch",
    "tf-loader-dataset": "tf.data in the Loader's order, one gather per batch, prefetch",
    "loader-tf": "Loader on tf data",
}
_v = partial(variant, NAME, LABELS)
VARIANTS = (
    _v("floor-tf", loop(chunked_floor, host=True), shuffle=None),
    _v("tf-convert", loop(numpy_manual, host=True, wrap=each(tf.convert_to_tensor)), shuffle=None),
    _v("tf-classic", loop(classic_dataset), shuffle=None),
    _v("tf-loader-dataset", loop(loader_dataset, order=True, device_of=NAME, gpu_only=True)),
    _v("loader-tf", loop(Loader), floor="floor-tf"),
    *images(NAME, " (tf.function)"),
)
KIT = Kit(NAME, VARIANTS, leaves=lambda leaves, _: [tf.convert_to_tensor(x) for x in leaves])
