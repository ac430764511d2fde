"""tf.data integration: the Loader's batches as a ``tf.data.Dataset``.

[`loader_dataset`][looptoolkit.loader_dataset] yields exactly the batches of a
[`Loader`][looptoolkit.Loader] (same order, same sharding) from inside tf.data: the epoch's order is
read on the host once per epoch, cut into index batches inside the pipeline, and every
batch is one ``tf.gather`` per leaf, prefetched. The result goes straight into
``model.fit``.

This module imports tensorflow.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from looptoolkit._common.keys import BatchKeys
from looptoolkit._rows.rows import Rows
from looptoolkit._rows.store_reads import default_group_size, plan_reads
from looptoolkit.loader import Loader
from looptoolkit.mix import Mix
from looptoolkit.mix._loader import prepare as mix_prepare
from looptoolkit.order._epochs import EpochCursor
from looptoolkit.order._order import Order, batch_count, epoch_indices, normalize_shuffle
from looptoolkit.ragged._column import find_ragged
from looptoolkit.ragged._layouts import Padded
from looptoolkit.ragged._units import UnitOrder

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
    if isinstance(data, Mix):  # the Loader's order reads the mixture's columns
        data = loader._rows.data
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

    Ragged data (variable-length rows, see [`Ragged`][looptoolkit.Ragged]) comes as a Loader
    over it, with its layout and plan: each batch is built by the Loader's code on the host
    (``tf.numpy_function``) and equals the Loader's; the layout's NamedTuple
    ([`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat],
    [`Packed`][looptoolkit.Packed]) is kept in the element spec, with ``None`` for the rows
    and for the padded or token dimension, and ``max_seqlen`` as an int64 scalar. Planned
    batches whose count changes from epoch to epoch (``batch_tokens``, ``group_by_length``,
    ``"fit"``) leave the cardinality unknown; a Loader's loaded mid-epoch state is resumed.
    Ragged data given directly is padded (``layout="pad"``) in batches of ``batch_size``.

    Args:
        data: a tensor / NumPy array, or a dict, tuple or namedtuple of them
            (``(x, y)`` for ``model.fit``); or a [`looptoolkit.Loader`][looptoolkit.Loader], whose
            data, batch size, order and epoch cursor are used (its layout too, over ragged
            data).
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
            mid-epoch state: tf.data passes of rectangular data run whole epochs).
        TypeError: ``order`` with ragged data, or ``order`` or another ``batch_size``
            with a Loader over ragged data (it brings its own).

    Examples:
        >>> import numpy as np
        >>> ds = loader_dataset({"x": np.arange(5)}, 2, order=lambda e: np.arange(5))
        >>> [b["x"].numpy().tolist() for b in ds]
        [[0, 1], [2, 3], [4]]
    """
    if not isinstance(data, Loader) and find_ragged(data) is not None:
        if order is not None:
            raise TypeError(
                "`order` is not offered with ragged data; pass a Loader with the order "
                "and layout: `loader_dataset(Loader(data, batch_size, layout=...))`."
            )
        if batch_size is None:
            raise ValueError("`batch_size` is required (or pass a Loader with `batch_tokens`).")
        data = Loader(data, batch_size, shuffle=shuffle, seed=seed, group_size=group_size,
                      drop_last=drop_last)  # fmt: skip
    if isinstance(data, Loader) and data._ragged:
        if order is not None or batch_size not in (None, data.batch_size):
            raise TypeError(
                "a Loader over ragged data brings its own order and batch size; pass neither."
            )
        if start_epoch is not None:
            data.set_epoch(start_epoch)
        return _ragged_dataset(
            data, data.transform if transform is None else transform, prefetch, device
        )
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
    mixed = None  # a mixture: its columns as data, its order as the order's `order_fn`
    if isinstance(data, Mix):
        options: dict[str, Any] = {"shuffle": shuffle, "seed": seed, "group_size": group_size}
        data, options = mix_prepare(data, options)
        mixed = options["order_fn"]
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
            n,
            batch_size,
            shuffle=shuffle,
            seed=seed,
            group_size=group_size,
            chunk_rows=chunk_rows,
            order_fn=mixed,
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

    keyed = None
    if transform is not None and getattr(transform, "keyed", False):
        first = rows.take(np.arange(min(batch_size, n)))
        keyed = _keyed(transform, order, seed, batch_size, tf.nest.map_structure(np.asarray, first))

    def bind() -> tuple[np.ndarray, np.int64, np.int64]:
        epoch, offset, token = cursor.bind()
        if offset:
            raise ValueError(
                f"loader_dataset runs whole epochs, but its Loader is set to resume epoch "
                f"{epoch} at sample {offset} (a loaded mid-epoch state); iterate the Loader "
                "to finish that epoch, or call `set_epoch`."
            )
        return epoch_indices(order, epoch).astype(np.int64), np.int64(token), np.int64(epoch)

    def complete(token: np.int64) -> np.bool_:
        return np.bool_(cursor.complete(int(token)))

    def epoch_batches(_: tf.Tensor) -> tf.data.Dataset:
        indices, token, epoch = tf.numpy_function(
            bind, [], (tf.int64, tf.int64, tf.int64), stateful=True
        )
        indices = tf.ensure_shape(indices, [m])
        batches = tf.data.Dataset.from_tensor_slices(tf.reshape(indices[:full], [-1, batch_size]))
        if tail:
            last = tf.data.Dataset.from_tensor_slices(indices[full:][tf.newaxis])
            batches = batches.concatenate(last)
        return batches.enumerate().map(lambda i, idx: (i, token, epoch, idx))

    if store is None:
        leaves = tf.nest.flatten(structure)

        def gather(idx: tf.Tensor) -> Any:
            return tf.nest.pack_sequence_as(structure, [tf.gather(leaf, idx) for leaf in leaves])

    def produce(i: tf.Tensor, token: tf.Tensor, epoch: tf.Tensor, idx: tf.Tensor) -> Any:
        batch = gather(idx)
        # The transform takes the batch as one argument, as the Loader's does; a keyed one
        # its keys too, on the host.
        last = tf.equal(i, length - 1)
        if keyed is not None:
            return last, token, keyed(epoch, i, batch)
        return last, token, batch if transform is None else transform(batch)

    ds = tf.data.Dataset.range(1).flat_map(epoch_batches).map(produce)
    return _deliver(ds, complete, prefetch, device, length)


def _keyed(
    transform: Callable[..., Any], order: Any, seed: int, batch_size: int, example: Any
) -> Callable[[tf.Tensor, tf.Tensor, Any], Any]:
    """A keyed transform (an augmentation) run on the host in tf.data, with each batch's keys.

    The keys are the Loader's: its seed, the epoch, each row's position in the epoch's
    global order (for an order function, the position in the epoch it returns). The
    transform runs in ``tf.numpy_function`` on the batch as NumPy; its output's structure
    and dtypes are those of ``example`` (the first rows) transformed once here.
    """
    source = order.order if isinstance(order, Loader) else order

    def keys(epoch: int, i: int, rows: int) -> BatchKeys:
        if isinstance(source, Order):
            return BatchKeys(source.seed, epoch, source.epoch(epoch).positions(i))
        return BatchKeys(seed, epoch, i * batch_size + np.arange(rows, dtype=np.int64))

    rows = len(tf.nest.flatten(example)[0])
    probe = transform(example, BatchKeys(seed, 0, np.arange(rows, dtype=np.int64)))
    flat = [np.asarray(x) for x in tf.nest.flatten(probe)]
    dtypes = [tf.as_dtype(x.dtype) for x in flat]
    shapes = [(None, *x.shape[1:]) for x in flat]

    def run(epoch: np.int64, i: np.int64, *leaves: np.ndarray) -> list[np.ndarray]:
        batch = tf.nest.pack_sequence_as(example, list(leaves))
        out = transform(batch, keys(int(epoch), int(i), len(leaves[0])))
        return [np.asarray(x) for x in tf.nest.flatten(out)]

    def apply(epoch: tf.Tensor, i: tf.Tensor, batch: Any) -> Any:
        out = tf.numpy_function(run, [epoch, i, *tf.nest.flatten(batch)], dtypes)
        out = [tf.ensure_shape(x, s) for x, s in zip(out, shapes, strict=True)]
        return tf.nest.pack_sequence_as(probe, out)

    return apply


def _deliver(
    ds: tf.data.Dataset,
    complete: Callable[[np.int64], np.bool_],
    prefetch: bool,
    device: str | None,
    length: int | None,
) -> tf.data.Dataset:
    """``(last, token, batch)`` elements as batches; a pass completes when its last is taken.

    ``last`` tells the last batch of a pass, ``token`` is the pass's cursor token; ``length``
    is the cardinality (None: unknown, each epoch's count is known when its pass starts).
    """

    def delivered(last: tf.Tensor, token: tf.Tensor, batch: Any) -> Any:
        # Runs when the consumer takes the batch (after the prefetch buffer): the
        # pass is done when its last batch is taken, not when it is produced.
        done = tf.cond(
            last,
            lambda: tf.numpy_function(complete, [token], tf.bool, stateful=True),
            lambda: tf.constant(False),
        )
        with tf.control_dependencies([done]):
            return tf.nest.map_structure(tf.identity, batch)

    to_gpu = prefetch and device is not None and "GPU" in device.upper() and gpu_present()
    if prefetch and not to_gpu:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    ds = ds.map(delivered)
    if to_gpu:
        assert device is not None
        ds = ds.apply(tf.data.experimental.prefetch_to_device(device))
    if length is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(length))
    # No prefetch may follow the `delivered` map: tf.data's default `inject_prefetch`
    # would add one after it, and a pass would then count as done when its last
    # batch was produced, not taken. (A `.prefetch()` of the user's after this
    # dataset moves that point the same way.)
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def _ragged_dataset(
    loader: Loader, transform: Callable[[Any], Any] | None, prefetch: bool, device: str | None
) -> tf.data.Dataset:
    """The batches of a Loader over ragged data, built on the host inside tf.data.

    A pass binds the Loader's cursor, and each batch is built by the Loader's own code
    (``tf.numpy_function``), so its values are the Loader's. The padded and token dimensions
    are ``None`` in the specs; a layout's NamedTuple keeps its structure, ``max_seqlen`` is
    an int64 scalar. A keyed transform (``MaskTokens``) runs there too, on the host, with the
    Loader's keys of each batch; its output's structure is that of the first batch's.
    """
    rows: Any = loader._rows
    order: Any = loader._order
    cursor = loader._cursor
    keyed = getattr(transform, "keyed", False)

    def build(schedule: Any, i: int) -> Any:
        batch = rows.batch(schedule.batch(i))
        if keyed:
            assert transform is not None
            keys = BatchKeys(order.seed, schedule.epoch, schedule.positions(i))
            batch = transform(batch, keys)  # type: ignore[call-arg]
        return _host_batch(batch)

    example = build(order.epoch(0), 0) if keyed else _host_batch(rows.first_rows(2))
    flat = tf.nest.flatten(example)
    dtypes = [tf.as_dtype(x.dtype) for x in flat]
    shapes = tf.nest.flatten(_ragged_shapes(example))
    passes: dict[int, Any] = {}  # the schedules of passes begun, by pass number
    counter = itertools.count()
    lock = threading.Lock()

    def bind() -> tuple[np.int64, np.int64, np.int64]:
        epoch, offset, token = cursor.bind()
        schedule = order.epoch(epoch, offset)
        with lock:
            key = next(counter)
            passes[key] = schedule
            for old in [k for k in passes if k < key - 3]:  # passes ended early
                del passes[old]
        return np.int64(key), np.int64(len(schedule)), np.int64(token)

    def read(key: np.int64, i: np.int64) -> list[np.ndarray]:
        with lock:
            schedule = passes[int(key)]
        return tf.nest.flatten(build(schedule, int(i)))

    def complete(token: np.int64) -> np.bool_:
        return np.bool_(cursor.complete(int(token)))

    def epoch_batches(_: tf.Tensor) -> tf.data.Dataset:
        key, count, token = tf.numpy_function(bind, [], (tf.int64,) * 3, stateful=True)
        return tf.data.Dataset.range(count).map(lambda i: (i, count, key, token))

    def produce(i: tf.Tensor, count: tf.Tensor, key: tf.Tensor, token: tf.Tensor) -> Any:
        out = tf.numpy_function(read, [key, i], dtypes, stateful=True)
        for tensor, shape in zip(out, shapes, strict=True):
            tensor.set_shape(shape)
        batch = tf.nest.pack_sequence_as(example, out)
        last = tf.equal(i, count - 1)
        return last, token, batch if transform is None or keyed else transform(batch)

    ds = tf.data.Dataset.range(1).flat_map(epoch_batches).map(produce)
    fixed = not isinstance(order, UnitOrder) or order.opts.layout == "pack"
    return _deliver(ds, complete, prefetch, device, len(order) if fixed else None)


def _host_batch(batch: Any) -> Any:
    """A batch's leaves as NumPy arrays (Python ints as int64 scalars)."""
    return tf.nest.map_structure(
        lambda x: np.int64(x) if isinstance(x, int) else np.asarray(x), batch
    )


def _ragged_shapes(example: Any) -> Any:
    """The static shape of each leaf: ``None`` for the rows and the padded / token dimensions."""

    def unknown(x: Any, padded: bool = False) -> tf.TensorShape:
        shape: list[int | None] = list(x.shape)
        if shape:
            shape[0] = None
        if padded and len(shape) > 1:
            shape[1] = None
        return tf.TensorShape(shape)

    def walk(x: Any) -> Any:
        if isinstance(x, Padded):
            return Padded(unknown(x.values, True), unknown(x.mask, True), unknown(x.lengths))
        return unknown(x)

    return _map_layouts(walk, example)


def _map_layouts(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``fn`` of each layout NamedTuple and each other leaf of ``tree``."""
    if isinstance(tree, Padded):
        return fn(tree)
    if isinstance(tree, dict):
        return type(tree)((k, _map_layouts(fn, v)) for k, v in tree.items())
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_map_layouts(fn, v) for v in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(_map_layouts(fn, v) for v in tree)
    return fn(tree)
