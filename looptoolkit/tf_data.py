"""tf.data integration: the Loader's batches as a ``tf.data.Dataset``.

[`loader_dataset`][looptoolkit.loader_dataset] yields exactly the batches of a
[`Loader`][looptoolkit.Loader] (same order, same sharding) from inside tf.data: the epoch's order is
read on the host once per epoch, cut into index batches inside the pipeline, and every
batch is one ``tf.gather`` per leaf, prefetched. The result goes straight into
``model.fit``.

This module imports tensorflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from looptoolkit._epochs import EpochCursor
from looptoolkit._rows import Rows
from looptoolkit._store_reads import default_group_size, plan_reads
from looptoolkit.loader import Loader
from looptoolkit.order import Order, batch_count, epoch_indices, normalize_shuffle

__all__ = ["as_structure", "gpu_present", "loader_dataset"]


def as_structure(data: Any) -> tuple[Any, int]:
    """``data`` as a structure of tf tensors that tf.data accepts, and its row count.

    tf.data takes tensors, dicts, tuples and namedtuples (a list would become one
    tensor). The leading dimensions are checked as for the Loader.

    Examples:
        >>> structure, n = as_structure({"x": np.zeros((4, 2)), "y": np.arange(4)})
        >>> n, type(structure["x"]).__name__
        (4, 'EagerTensor')
    """
    n = Rows(data).n
    return tf.nest.map_structure(tf.convert_to_tensor, data), n


def gpu_present() -> bool:
    """Whether tf sees a GPU.

    Examples:
        >>> gpu_present() == bool(tf.config.list_logical_devices("GPU"))
        True
    """
    return bool(tf.config.list_logical_devices("GPU"))


def _store_gather(rows: Rows) -> Callable[[tf.Tensor], Any]:
    """A batch of ``rows`` (with store leaves) read by ``tf.numpy_function``."""
    example = rows.take(np.arange(1))
    flat = [np.asarray(x) for x in tf.nest.flatten(example)]

    def read(idx: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(x) for x in tf.nest.flatten(rows.take(idx))]

    def gather(idx: tf.Tensor) -> Any:
        out = tf.numpy_function(read, [idx], [tf.as_dtype(x.dtype) for x in flat], stateful=False)
        for tensor, x in zip(out, flat, strict=True):
            tensor.set_shape([None, *x.shape[1:]])
        return tf.nest.pack_sequence_as(example, out)

    return gather


def _loader_parts(loader: Any, order: Any) -> tuple[Any, int, Any]:
    """Data, batch size and order of a Loader, for ``loader_dataset``."""
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
    start_epoch: int | None = None,
    transform: Callable[[Any], Any] | None = None,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` that yields the Loader's batches; usable directly in ``model.fit``.

    Each iteration of the dataset (``for batch in ds``, or one epoch of
    ``model.fit``) is a pass that follows the Loader's epoch rule: it takes its
    epoch when it starts producing, and when the consumer has received its
    last batch the epoch is done and the next pass runs the next one; a pass
    that ends early (Keras's one-batch look-ahead to build a model on the JAX
    and torch backends, a ``take``) is run again by the next. Given a
    [`Loader`][looptoolkit.Loader] (as ``data`` or ``order``) the dataset shares
    its epoch cursor: ``loader.set_epoch(e)`` chooses the dataset's next epoch
    and a finished pass of either moves both on. The order is read on the
    host once per pass, cut into index batches inside tf.data, each batch is
    one ``tf.gather`` per leaf, prefetched with ``prefetch(tf.data.AUTOTUNE)``
    (``prefetch_to_device`` when ``device`` names a GPU that is present; then a
    pass counts as done when its last batch reaches that buffer). The
    cardinality is known, so Keras shows progress.

    Args:
        data: a tensor / NumPy array, or a dict, tuple or namedtuple of them
            (``(x, y)`` for ``model.fit``); or a [`looptoolkit.Loader`][looptoolkit.Loader], whose
            data, batch size, order and epoch cursor are used.
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
        start_epoch: the epoch the first pass runs (``set_epoch`` on a given
            Loader); None: 0, or where the given Loader's cursor stands.
        transform: a function applied to every batch inside the pipeline
            (traced once by tf), before the prefetch: the same role as the
            Loader's ``transform``. Default: the Loader's own, when ``data`` is a
            Loader.

    Returns:
        The dataset; its element structure is that of ``data``.

    Raises:
        ValueError: ``batch_size < 1``; when a pass starts (as a tf error), the
            given Loader's cursor points into the middle of an epoch (a loaded
            mid-epoch state: tf.data passes run whole epochs).

    Examples:
        >>> import numpy as np
        >>> ds = loader_dataset({"x": np.arange(5)}, 2, order=lambda e: np.arange(5))
        >>> [b["x"].numpy().tolist() for b in ds]
        [[0, 1], [2, 3], [4]]
    """
    cursor: EpochCursor | None = None
    if isinstance(data, Loader):
        if transform is None:
            transform = data.transform
        cursor = data._cursor
        data, batch_size, order = _loader_parts(data, order)
    elif isinstance(order, Loader):
        cursor = order._cursor
        if batch_size is None:
            batch_size = order.batch_size
    if batch_size is None or batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    if cursor is None:
        cursor = EpochCursor(0 if start_epoch is None else start_epoch)
    elif start_epoch is not None:
        cursor.set_epoch(start_epoch)
    rows = Rows(data)
    store = rows.store
    if store is None:
        structure, n = as_structure(data)
    else:  # a store is read a batch at a time, in tf.data's threads
        n = rows.n
        if order is None and group_size is None and normalize_shuffle(shuffle) == "grouped":
            group_size = default_group_size(store)
    if order is None:
        chunk_rows = None if store is None else rows.chunk_rows
        order = Order(
            n, batch_size, shuffle=shuffle, seed=seed, group_size=group_size, chunk_rows=chunk_rows
        )
    if store is not None:
        reads = order.order if isinstance(order, Loader) else order
        if isinstance(reads, Order):
            plan_reads(store, reads, None)
        gather = _store_gather(rows)
    # Samples per epoch, measured: a shard's order is padded, a cut one shorter, and
    # an order function may return any subset of the rows.
    m = len(epoch_indices(order, cursor.epoch))
    full = batch_count(m, batch_size, drop_last=True) * batch_size
    tail = m - full if not drop_last else 0
    length = batch_count(m, batch_size, drop_last)

    def bind() -> tuple[np.ndarray, np.int64]:
        epoch, offset, token = cursor.bind()
        if offset:
            raise ValueError(
                f"loader_dataset runs whole epochs, but its Loader is set to resume epoch "
                f"{epoch} at sample {offset} (a loaded mid-epoch state); iterate the Loader "
                "to finish that epoch, or call `set_epoch`."
            )
        return epoch_indices(order, epoch).astype(np.int64), np.int64(token)

    def complete(token: np.int64) -> np.bool_:
        return np.bool_(cursor.complete(int(token)))

    def epoch_batches(_: tf.Tensor) -> tf.data.Dataset:
        indices, token = tf.numpy_function(bind, [], (tf.int64, tf.int64), stateful=True)
        indices = tf.ensure_shape(indices, [m])
        batches = tf.data.Dataset.from_tensor_slices(tf.reshape(indices[:full], [-1, batch_size]))
        if tail:
            last = tf.data.Dataset.from_tensor_slices(indices[full:][tf.newaxis])
            batches = batches.concatenate(last)
        return batches.enumerate().map(lambda i, idx: (i, token, idx))

    if store is None:
        leaves = tf.nest.flatten(structure)

        def gather(idx: tf.Tensor) -> Any:
            return tf.nest.pack_sequence_as(structure, [tf.gather(leaf, idx) for leaf in leaves])

    def produce(i: tf.Tensor, token: tf.Tensor, idx: tf.Tensor) -> Any:
        batch = gather(idx)
        # The transform takes the batch as one argument, as the Loader's does.
        return i, token, batch if transform is None else transform(batch)

    def delivered(i: tf.Tensor, token: tf.Tensor, batch: Any) -> Any:
        # Runs when the consumer takes the batch (after the prefetch buffer): the
        # pass is done when its last batch is taken, not when it is produced.
        done = tf.cond(
            tf.equal(i, length - 1),
            lambda: tf.numpy_function(complete, [token], tf.bool, stateful=True),
            lambda: tf.constant(False),
        )
        with tf.control_dependencies([done]):
            return tf.nest.map_structure(tf.identity, batch)

    ds = tf.data.Dataset.range(1).flat_map(epoch_batches).map(produce)
    to_gpu = prefetch and device is not None and "GPU" in device.upper() and gpu_present()
    if prefetch and not to_gpu:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    ds = ds.map(delivered)
    if to_gpu:
        assert device is not None
        ds = ds.apply(tf.data.experimental.prefetch_to_device(device))
    ds = ds.apply(tf.data.experimental.assert_cardinality(length))
    # No prefetch may follow the `delivered` map: tf.data's default `inject_prefetch`
    # would add one after it, and a pass would then count as done when its last
    # batch was produced, not taken. (A `.prefetch()` of the user's after this
    # dataset moves that point the same way.)
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)
