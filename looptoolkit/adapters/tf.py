"""TensorFlow backend: ``tf.gather`` in one ``tf.function`` per batch, ``tf.device`` moves.

tf leaves are placed with ``tf.device("/GPU:0")``-style names; NumPy leaves sent
to tf become ``tf.Tensor`` on the named device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from looptoolkit.adapters.numpy import as_numpy_dtype
from looptoolkit.device import cast_before_copy

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from looptoolkit.device import Target

_gathers: dict[int, Callable[..., Any]] = {}


def _gather_fn(count: int) -> Callable[..., Any]:
    fn = _gathers.get(count)
    if fn is None:

        @tf.function(reduce_retracing=True)
        def gather(leaves: list[tf.Tensor], idx: tf.Tensor) -> list[tf.Tensor]:
            return [tf.gather(leaf, idx) for leaf in leaves]

        fn = _gathers[count] = gather
    return fn


_host_devices: dict[str, bool] = {}


def _host_views(leaves: Sequence[tf.Tensor]) -> list[np.ndarray] | None:
    """Zero-copy NumPy views of the leaves when all are numeric host tensors, else None."""
    for leaf in leaves:
        host = _host_devices.get(leaf.device)
        if host is None:
            host = _host_devices[leaf.device] = (
                tf.DeviceSpec.from_string(leaf.device).device_type == "CPU"
            )
        if not host or leaf.dtype == tf.string or leaf.dtype.is_quantized:
            return None
    return [np.asarray(leaf) for leaf in leaves]


def _from_numpy(rows: list[np.ndarray]) -> list[tf.Tensor]:
    """Host tensors from NumPy arrays; on the host even where a GPU is the default."""
    if not tf.config.list_logical_devices("GPU"):
        return [tf.convert_to_tensor(r) for r in rows]
    with tf.device("/CPU:0"):
        return [tf.convert_to_tensor(r) for r in rows]


def device_name(target: Target) -> str:
    """The tf device name (``"/GPU:0"``) for ``target``; raises when it is not present."""
    kind = "CPU" if target.platform == "cpu" else "GPU"
    if target.platform not in ("cpu", "cuda"):
        raise RuntimeError(f"tf has no {target.platform} devices here")
    index = target.index or 0
    present = tf.config.list_logical_devices(kind)
    if index >= len(present):
        raise RuntimeError(f"tf has {len(present)} {kind} device(s); asked for {kind}:{index}")
    return f"/{kind}:{index}"


class TfBackend:
    """Backend for ``tf.Tensor``."""

    name = "tf"

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a tf tensor."""
        return isinstance(x, tf.Tensor)

    def length(self, x: tf.Tensor) -> int:
        """Leading dimension of ``x``."""
        return int(x.shape[0])

    def dtype_name(self, x: tf.Tensor) -> str:
        """The dtype's name."""
        return str(x.dtype.name)

    def take(self, leaves: Sequence[tf.Tensor], idx: Any) -> list[tf.Tensor]:
        """Gather rows of every leaf: on the host with NumPy, elsewhere in one ``tf.function``.

        A ``tf.function`` call costs about 0.2 ms; NumPy's ``take`` on zero-copy views
        of host tensors, converted back, a few microseconds per leaf.
        """
        views = _host_views(leaves)
        if views is not None and isinstance(idx, np.ndarray):
            return _from_numpy([view.take(idx, axis=0) for view in views])
        return list(_gather_fn(len(leaves))(list(leaves), tf.convert_to_tensor(idx)))

    def take_batches(
        self, leaves: Sequence[tf.Tensor], batches: Iterable[np.ndarray]
    ) -> Iterator[list[tf.Tensor]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily.

        Host leaves are viewed as NumPy arrays once per call, not once per batch.
        """
        views = _host_views(leaves)
        for idx in batches:
            if views is None:
                yield self.take(leaves, idx)
            else:
                yield _from_numpy([view.take(idx, axis=0) for view in views])

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[tf.Tensor]:
        """Copy tf tensors (and NumPy arrays sent to tf) to the named device."""
        name = device_name(target)
        # A tensor's full name ends with e.g. "device:CPU:0"; one already there is
        # returned as is, as torch's `.to` does.
        suffix = "device:" + name.removeprefix("/")
        out = []
        with tf.device(name):
            for leaf, cast in zip(leaves, casts, strict=True):
                if isinstance(leaf, np.ndarray):
                    if cast is not None and cast_before_copy(leaf.dtype.name, cast):
                        leaf, cast = leaf.astype(as_numpy_dtype(cast)), None
                    x = tf.convert_to_tensor(leaf)
                else:
                    if cast is not None and cast_before_copy(leaf.dtype.name, cast):
                        leaf, cast = tf.cast(leaf, cast), None
                    x = leaf if leaf.device.endswith(suffix) else tf.identity(leaf)
                out.append(x if cast is None else tf.cast(x, cast))
        return out

    def synchronize(self, target: Target | None = None) -> None:
        """Wait for queued work on tf's GPUs (host ops complete eagerly)."""
        if tf.config.list_logical_devices("GPU"):
            tf.test.experimental.sync_devices()


backend = TfBackend()


# =============================================================================
# Native pipelines for the cross-framework comparison (`looptoolkit compare`)
#
# tf.data pipelines: `loader_dataset` yields the Loader's batches with the
# batch-level gather inside tf.data (usable directly in `model.fit`), and
# `classic_dataset` is the usual `from_tensor_slices().shuffle(N).batch()`.
# =============================================================================

# Imported here, not at the top: this section is appended to the backend module.
import threading  # noqa: E402

from looptoolkit.adapters.numpy import epoch_indices, num_batches  # noqa: E402


def _tf_structure(data: Any) -> Any:
    # tf.data takes tensors, dicts, tuples and namedtuples (lists would become tensors).
    return tf.nest.map_structure(tf.convert_to_tensor, data)


def _length(structure: Any) -> int:
    sizes = {int(t.shape[0]) for t in tf.nest.flatten(structure)}
    if len(sizes) != 1:
        raise ValueError(f"every leaf of `data` must have the same length, got {sorted(sizes)}.")
    return sizes.pop()


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

    Returns:
        The dataset; its element structure is that of ``data``.

    Examples:
        >>> import numpy as np
        >>> ds = loader_dataset({"x": np.arange(5)}, 2, order=lambda e: np.arange(5))
        >>> [b["x"].numpy().tolist() for b in ds]
        [[0, 1], [2, 3], [4]]
    """
    from looptoolkit.loader import Loader

    if isinstance(data, Loader):
        data, batch_size, order = _loader_parts(data, order)
    elif isinstance(order, Loader) and batch_size is None:
        batch_size = order.batch_size
    if batch_size is None or batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    structure = _tf_structure(data)
    n = _length(structure)
    if order is None:
        from looptoolkit.order import Order

        order = Order(n, batch_size, shuffle=shuffle, seed=seed, group_size=group_size)
    leaves = tf.nest.flatten(structure)
    counter = _EpochCounter(start_epoch)
    m = n  # samples per epoch, unless the order is a shard's (padded) or cut (drop_last)
    if getattr(order, "world_size", 1) != 1 or getattr(order, "drop_last", False):
        m = len(epoch_indices(order, start_epoch))
    full = m - m % batch_size
    tail = m - full if not drop_last else 0
    length = num_batches(m, batch_size, drop_last)

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
    if prefetch:
        if device is not None and "GPU" in device.upper() and gpu_present():
            ds = ds.apply(tf.data.experimental.prefetch_to_device(device))
        else:
            ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds


def classic_dataset(
    data: Any,
    batch_size: int,
    *,
    seed: int = 0,
    buffer_size: int | None = None,
    drop_last: bool = False,
    prefetch: bool = True,
) -> tf.data.Dataset:
    """The classic tf.data pipeline: ``from_tensor_slices(data).shuffle(N).batch(B).prefetch()``.

    Per-sample elements shuffled in a buffer of ``buffer_size`` (default: all of
    them, a full shuffle), reshuffled every iteration, then batched. Its order
    is tf's, not the Loader's.

    Args:
        data: a tensor / NumPy array, or a dict, tuple or namedtuple of them.
        batch_size: rows per batch.
        seed: the shuffle's seed.
        buffer_size: shuffle buffer (default: the dataset size).
        drop_last: ``drop_remainder`` of ``batch``.
        prefetch: end with ``prefetch(tf.data.AUTOTUNE)``.

    Returns:
        The dataset; each iteration is a new shuffle.
    """
    structure = _tf_structure(data)
    n = _length(structure)
    ds = tf.data.Dataset.from_tensor_slices(structure)
    ds = ds.shuffle(buffer_size or n, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=drop_last)
    return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds
