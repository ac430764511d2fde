"""tf.data integration: the Loader's batches as a ``tf.data.Dataset``.

:func:`loader_dataset` yields exactly the batches of a :class:`~looptoolkit.Loader`
(same order, same sharding) from inside tf.data: the epoch's order is read on
the host once per epoch, cut into index batches inside the pipeline, and every
batch is one ``tf.gather`` per leaf, prefetched. The result goes straight into
``model.fit``.

This module imports tensorflow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from looptoolkit._rows import Rows
from looptoolkit.loader import Loader
from looptoolkit.order import Order, batch_count, epoch_indices

__all__ = ["as_structure", "gpu_present", "loader_dataset"]


def as_structure(data: Any) -> tuple[Any, int]:
    """``data`` as a structure of tf tensors that tf.data accepts, and its row count.

    tf.data takes tensors, dicts, tuples and namedtuples (a list would become one
    tensor). The leading dimensions are checked as for the Loader.
    """
    n = Rows(data).n
    return tf.nest.map_structure(tf.convert_to_tensor, data), n


def gpu_present() -> bool:
    """Whether tf sees a GPU."""
    return bool(tf.config.list_logical_devices("GPU"))


class _EpochCounter:
    """The epoch the next iteration of a dataset yields; each iteration takes the next."""

    def __init__(self, start: int) -> None:
        self.next_epoch = start
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            epoch, self.next_epoch = self.next_epoch, self.next_epoch + 1
        return epoch


def _loader_parts(loader: Any, order: Any) -> tuple[Any, int, Any]:
    """Data, batch size and order of a Loader, for :func:`loader_dataset`."""
    data = loader.data
    return data, int(loader.batch_size), loader if order is None else order


def loader_dataset(
    data: Any,
    batch_size: int | None = None,
    *,
    order: Any = None,
    shuffle: bool | str = True,
    seed: int = 0,
    group_size: int | None = None,
    drop_last: bool = False,
    prefetch: bool = True,
    device: str | None = None,
    start_epoch: int = 0,
    transform: Callable[[Any], Any] | None = None,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` that yields the Loader's batches; usable directly in ``model.fit``.

    Each iteration of the dataset (``for batch in ds``, or one epoch of
    ``model.fit``) is the next epoch: its order is read once, on the host,
    cut into batches of indices inside tf.data, and each batch is one
    ``tf.gather`` per leaf inside the pipeline, prefetched with
    ``prefetch(tf.data.AUTOTUNE)`` (``prefetch_to_device`` when ``device`` names
    a GPU that is present). The cardinality is known, so Keras shows progress.

    Args:
        data: a tensor / NumPy array, or a dict, tuple or namedtuple of them
            (``(x, y)`` for ``model.fit``); or a :class:`looptoolkit.Loader`, whose
            data, batch size and order are used.
        batch_size: rows per batch (default: the Loader's, when ``data`` or
            ``order`` is one).
        order: an ``Order``, a ``Loader`` or a function of the epoch; default:
            ``Order(n, batch_size, shuffle=shuffle, seed=seed, group_size=group_size)``.
        shuffle: ``True``/``"full"``, ``"grouped"`` or ``False``, as for the Loader.
        seed: as for the Loader.
        group_size: as for the Loader (grouped shuffle).
        drop_last: drop the last partial batch.
        prefetch: prefetch batches (``AUTOTUNE``, or to the GPU named by ``device``).
        device: ``"/GPU:0"`` to prefetch batches onto that GPU; None keeps them
            where tf.data produces them (the host).
        start_epoch: the epoch the first iteration yields.
        transform: a function applied to every batch inside the pipeline
            (``Dataset.map``, traced once by tf), before the prefetch: the same
            role as the Loader's ``transform``. Default: the Loader's own, when
            ``data`` is a Loader.

    Returns:
        The dataset; its element structure is that of ``data``.

    Examples:
        >>> import numpy as np
        >>> ds = loader_dataset({"x": np.arange(5)}, 2, order=lambda e: np.arange(5))
        >>> [b["x"].numpy().tolist() for b in ds]
        [[0, 1], [2, 3], [4]]
    """
    if isinstance(data, Loader):
        if transform is None:
            transform = data.transform
        data, batch_size, order = _loader_parts(data, order)
    elif isinstance(order, Loader) and batch_size is None:
        batch_size = order.batch_size
    if batch_size is None or batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    structure, n = as_structure(data)
    if order is None:
        order = Order(n, batch_size, shuffle=shuffle, seed=seed, group_size=group_size)
    leaves = tf.nest.flatten(structure)
    counter = _EpochCounter(start_epoch)
    # Samples per epoch, measured: a shard's order is padded, a cut one shorter, and
    # an order function may return any subset of the rows.
    m = len(epoch_indices(order, start_epoch))
    full = batch_count(m, batch_size, drop_last=True) * batch_size
    tail = m - full if not drop_last else 0
    length = batch_count(m, batch_size, drop_last)

    def next_order() -> np.ndarray:
        return epoch_indices(order, counter.take()).astype(np.int64)

    def epoch_batches(_: tf.Tensor) -> tf.data.Dataset:
        indices = tf.numpy_function(next_order, [], tf.int64, stateful=True)
        indices = tf.ensure_shape(indices, [m])
        batches = tf.data.Dataset.from_tensor_slices(tf.reshape(indices[:full], [-1, batch_size]))
        if tail:
            last = tf.data.Dataset.from_tensor_slices(indices[full:][tf.newaxis])
            batches = batches.concatenate(last)
        return batches

    def gather(idx: tf.Tensor) -> Any:
        return tf.nest.pack_sequence_as(structure, [tf.gather(leaf, idx) for leaf in leaves])

    ds = tf.data.Dataset.range(1).flat_map(epoch_batches).map(gather)
    ds = ds.apply(tf.data.experimental.assert_cardinality(length))
    if transform is not None:
        fn = transform
        if type(structure) is tuple:
            # tf.data passes a tuple's parts as separate arguments; the transform
            # takes the batch as one, as the Loader's does.
            def fn(*parts: Any) -> Any:
                return transform(parts)

        ds = ds.map(fn)
    if prefetch:
        if device is not None and "GPU" in device.upper() and gpu_present():
            ds = ds.apply(tf.data.experimental.prefetch_to_device(device))
        else:
            ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds
