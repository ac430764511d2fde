"""The tf kit: tf.data's classic pipeline, the chunked floor, the Loader's ``loader_dataset``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np
import tensorflow as tf

from looptoolkit import Loader
from looptoolkit.bench.variants import Kit, images, loop, tokens, variant
from looptoolkit.bench.variants.augment import augment_variants
from looptoolkit.bench.variants.epochs import EpochPipeline
from looptoolkit.bench.variants.mix import mix_variants
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


BUCKETS = [64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072]  # upper lengths


def documents_dataset(data: Any, batch_size: int, *, bucket: bool, seed: int = 0) -> Any:
    """tf.data over the documents as a ``tf.RaggedTensor``: shuffle, then batches of 32.

    ``padded_batch``, or ``bucket_by_sequence_length`` (`BUCKETS`, padded to the batch's
    longest). Each element is ``(tokens, length)``: the lengths give the batch's mask.
    """
    del batch_size  # the tokens workload's settings say how many documents a batch has
    corpus, size = tokens.Corpus.of(data), tokens.SETTINGS.batch
    column = tf.RaggedTensor.from_row_splits(corpus.values, corpus.offsets)
    ds = tf.data.Dataset.from_tensor_slices(column).map(lambda x: (x, tf.shape(x)[0]))
    ds = ds.shuffle(corpus.n, seed=seed, reshuffle_each_iteration=True)
    if bucket:
        sizes = [size] * (len(BUCKETS) + 1)
        ds = ds.bucket_by_sequence_length(lambda _, k: k, BUCKETS, sizes)
    else:
        ds = ds.padded_batch(size)
    return ds.prefetch(tf.data.AUTOTUNE)


def as_padded(batch: Any) -> tokens.PaddedBatch:
    """A ``(values, lengths)`` batch as a padded batch."""
    values, lengths = (x.numpy() for x in batch)
    return tokens.PaddedBatch(values, np.arange(values.shape[1]) < lengths[:, None], lengths)


NAME = "tf"
LABELS = {
    "floor-tf": "floor: chunks of batches gathered with take into aligned arrays, adopted by tf "
    "(DLPack), one tf.split",
    "tf-convert": "best manual loop + tf.convert_to_tensor per leaf per batch",
    "tf-classic": "tf.data: from_tensor_slices.shuffle(N).batch.prefetch",
    "tf-loader-dataset": "tf.data in the Loader's order, one gather per batch, prefetch",
    "loader-tf": "Loader on tf data",
    "tf-padded-batch": "tf.data: RaggedTensor slices, shuffle(N), padded_batch(32), prefetch",
    "tf-bucket": "tf.data: RaggedTensor slices, shuffle(N), bucket_by_sequence_length (32 a "
    "batch), prefetch",
}
_DOCS = {"convert": as_padded, "slow": True}
_v = partial(variant, NAME, LABELS)
VARIANTS = (
    _v("floor-tf", loop(chunked_floor, host=True), shuffle=None),
    _v("tf-convert", loop(numpy_manual, host=True, wrap=each(tf.convert_to_tensor)), shuffle=None),
    _v("tf-classic", loop(classic_dataset), shuffle=None),
    _v("tf-loader-dataset", loop(loader_dataset, order=True, device_of=NAME, gpu_only=True)),
    _v("loader-tf", loop(Loader), floor="floor-tf"),
    *images(NAME, " (tf.function)"),
    tokens.on_tokens(
        _v("tf-padded-batch", loop(documents_dataset, host=True, bucket=False), **_DOCS), "pad"
    ),
    tokens.on_tokens(
        _v("tf-bucket", loop(documents_dataset, host=True, bucket=True), **_DOCS), "group"
    ),
    *mix_variants(NAME, ("tf-mix",), slow=("tf-mix",)),
    *augment_variants(NAME),
)
KIT = Kit(NAME, VARIANTS, leaves=lambda leaves, _: [tf.convert_to_tensor(x) for x in leaves])
