"""Scale-out helpers: which rows a process loads, global JAX batches, padded rows.

This module sits beside the data flow rather than in it. Under
``torch.distributed`` the [`Loader`][looptoolkit.Loader] needs nothing from here: it
reads rank and world size from the process group and [`looptoolkit.order`][looptoolkit.order]
gives each rank its share of the epoch. Under multi-process JAX each process
runs a Loader over its share of every global batch (``rank`` = process index,
``world_size`` = process count) and [`global_batch`][looptoolkit.distributed.global_batch] assembles
the process-local batches into one ``jax.Array`` per leaf, sharded over the mesh,
without any process touching another's rows.

The layout, shared with [`looptoolkit.order`][looptoolkit.order] (it is ``DistributedSampler``'s):
global batch ``i`` is positions ``[i*G, (i+1)*G)`` of the epoch's (padded) global order, and process
``p`` of ``P`` loads every ``P``-th of them from ``i*G + p`` on
([`process_positions`][looptoolkit.distributed.process_positions]: positions ``p, p + P, ...`` of
the global batch). [`global_batch`][looptoolkit.distributed.global_batch] concatenates the
processes' rows: on a mesh whose devices of process ``p`` hold block ``[p*G/P, (p+1)*G/P)`` of the
batch axis ([`process_rows`][looptoolkit.distributed.process_rows] says which rows they hold;
[`process_slice`][looptoolkit.distributed.process_slice] is that block), process ``p``'s local batch
becomes that block of the global arrays. So a global batch holds the same samples at any process
count; with several processes its rows are in another order than with one (row ``p*G/P + j`` holds
position ``p + j*P``), which a step that reduces over the batch does not notice.

Nothing here imports a framework at import time: JAX is imported inside the
functions that need it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from looptoolkit.adapters import backend_of
from looptoolkit.device import _tree as _tree

__all__ = [
    "drop_padding",
    "global_batch",
    "process_positions",
    "process_rows",
    "process_slice",
]


def _jax_process(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    if process_index is None or process_count is None:
        try:
            import jax
        except ImportError:
            raise ImportError(
                "jax is not installed; install it with `pip install 'looptoolkit[jax]'`."
            ) from None
        if process_index is None:
            process_index = jax.process_index()
        if process_count is None:
            process_count = jax.process_count()
    return process_index, process_count


def _check_process(global_batch_size: int, process_index: int, process_count: int) -> int:
    """Validated ``G // P``."""
    if process_count < 1:
        raise ValueError(f"`process_count` must be >= 1, got {process_count}.")
    if not 0 <= process_index < process_count:
        raise ValueError(f"`process_index` must be in [0, {process_count}), got {process_index}.")
    if global_batch_size < 1 or global_batch_size % process_count:
        raise ValueError(
            f"`global_batch_size` must be a positive multiple of the process count "
            f"{process_count}, got {global_batch_size}."
        )
    return global_batch_size // process_count


def process_positions(
    global_batch_size: int,
    process_index: int | None = None,
    process_count: int | None = None,
) -> slice:
    """Positions of each global batch, in the epoch's order, that one process loads.

    Process ``p`` of ``P`` loads positions ``p, p + P, p + 2P, ...`` of a global
    batch of ``G`` positions (``DistributedSampler``'s interleaving): exactly what
    ``Loader(data, G // P, rank=p, world_size=P)`` yields for it, batch by batch.
    Indexing batch ``i`` of ``Loader(data, G)`` (one process) with this slice
    gives process ``p``'s batch ``i``.

    Args:
        global_batch_size: rows per global batch, ``G``.
        process_index: this process, ``p``; default ``jax.process_index()``.
        process_count: number of processes, ``P``; default ``jax.process_count()``.

    Returns:
        ``slice(p, G, P)``.

    Raises:
        ValueError: ``G`` is not a positive multiple of ``P``, or ``p`` is outside
            ``[0, P)``.

    Examples:
        >>> process_positions(8, 1, 4)
        slice(1, 8, 4)
        >>> process_positions(8, 0, 1)
        slice(0, 8, 1)
    """
    process_index, process_count = _jax_process(process_index, process_count)
    _check_process(global_batch_size, process_index, process_count)
    return slice(process_index, global_batch_size, process_count)


def process_slice(
    global_batch_size: int,
    process_index: int | None = None,
    process_count: int | None = None,
) -> slice:
    """Rows of each assembled global batch that hold one process's local batch.

    [`global_batch`][looptoolkit.distributed.global_batch] concatenates the processes' local batches
    in process order, so process ``p`` of ``P`` fills rows ``[p*G/P, (p+1)*G/P)`` of a
    global batch of ``G`` rows. Those rows hold positions
    [`process_positions`][looptoolkit.distributed.process_positions] ``(G, p, P)`` of the global
    batch in the epoch's order (the samples ``Loader(data, G // P, rank=p, world_size=P)`` yields).

    Args:
        global_batch_size: rows per global batch, ``G``.
        process_index: this process, ``p``; default ``jax.process_index()``.
        process_count: number of processes, ``P``; default ``jax.process_count()``.

    Returns:
        The slice of the global arrays' rows that process ``p``'s batch fills.

    Raises:
        ValueError: ``G`` is not a positive multiple of ``P``, or ``p`` is outside
            ``[0, P)``.

    Examples:
        >>> process_slice(8, 1, 4)
        slice(2, 4, None)
        >>> process_slice(8, 0, 1)
        slice(0, 8, None)
    """
    process_index, process_count = _jax_process(process_index, process_count)
    local = _check_process(global_batch_size, process_index, process_count)
    return slice(process_index * local, (process_index + 1) * local)


def process_rows(
    sharding: Any, global_shape: int | tuple[int, ...], process_index: int | None = None
) -> slice:
    """Rows along axis 0 that the devices of one process hold under ``sharding``.

    Compare with [`process_slice`][looptoolkit.distributed.process_slice] to check that a mesh keeps
    each process's devices on its own block of the batch axis (then each process's rows stay
    on its own devices when [`global_batch`][looptoolkit.distributed.global_batch] assembles them).

    Args:
        sharding: a ``jax.sharding.Sharding`` for arrays of ``global_shape``.
        global_shape: shape of the global array, or its number of rows.
        process_index: the process; default ``jax.process_index()``.

    Returns:
        The rows as one slice.

    Raises:
        ValueError: the process holds no rows, or rows that are not one contiguous block.

    Examples:
        >>> import jax
        >>> from jax.sharding import NamedSharding, PartitionSpec
        >>> mesh = jax.make_mesh((jax.device_count(),), ("data",))
        >>> process_rows(NamedSharding(mesh, PartitionSpec("data")), 8)
        slice(0, 8, None)
    """
    process_index, _ = _jax_process(process_index, 1)
    shape = (global_shape,) if isinstance(global_shape, int) else tuple(global_shape)
    rows: set[int] = set()
    for device, index in sharding.devices_indices_map(shape).items():
        if device.process_index == process_index:
            rows.update(range(*index[0].indices(shape[0])))
    if not rows:
        raise ValueError(f"process {process_index} holds no rows under {sharding}.")
    start, stop = min(rows), max(rows) + 1
    if len(rows) != stop - start:
        raise ValueError(
            f"process {process_index} holds rows that are not one block under {sharding}: "
            f"{sorted(rows)}."
        )
    return slice(start, stop)


def global_batch(local_batch: Any, sharding: Any) -> Any:
    """Assemble process-local batches into global ``jax.Array`` leaves.

    Every process calls this with its own rows (a Loader built with ``rank=jax.process_index()``,
    ``world_size=jax.process_count()``); each array leaf becomes one global array of ``local rows *
    process count`` rows, sharded by ``sharding``, through
    ``jax.make_array_from_process_local_data``. Each process's rows fill the rows its devices hold
    ([`process_rows`][looptoolkit.distributed.process_rows]); on a mesh where that is block ``p``
    ([`process_slice`][looptoolkit.distributed.process_slice], true for ``jax.make_mesh`` on usual
    topologies) the global batch is the concatenation of the local batches in process order. No
    process sends rows to another. With one process this is ``jax.device_put``.

    Args:
        local_batch: a pytree (any container [`to_device`][looptoolkit.to_device]
            accepts) of NumPy or JAX arrays; other leaves are returned unchanged.
        sharding: a ``jax.sharding.Sharding`` that splits axis 0 over processes,
            e.g. ``NamedSharding(mesh, PartitionSpec("data"))``.

    Returns:
        The same containers around global arrays.

    Raises:
        TypeError: an array leaf of another framework (torch, tf); its key path is named.
        TransferError: a leaf could not be placed (its key path is named).

    Examples:
        >>> import jax
        >>> from jax.sharding import NamedSharding, PartitionSpec
        >>> mesh = jax.make_mesh((jax.device_count(),), ("data",))
        >>> sharding = NamedSharding(mesh, PartitionSpec("data"))
        >>> batch = global_batch({"x": np.ones((8, 2)), "n": 3}, sharding)
        >>> type(batch["x"]).__name__, batch["x"].shape, batch["n"]
        ('ArrayImpl', (8, 2), 3)
    """
    import jax

    from looptoolkit.device._move import TransferError

    leaves, spec = _tree.flatten(local_batch)
    positions: list[int] = []
    for i, leaf in enumerate(leaves):
        backend = backend_of(leaf)
        if backend is None:
            continue
        if backend.name not in ("numpy", "jax"):
            path = _tree.leaf_paths(spec)[i]
            raise TypeError(
                f"{path} is a {backend.name} array; `global_batch` takes NumPy or JAX arrays."
            )
        positions.append(i)
    out = list(leaves)
    arrays = [leaves[i] for i in positions]
    try:
        placed = jax.make_array_from_process_local_data(sharding, arrays)
    except Exception as e:
        paths = _tree.leaf_paths(spec)
        for i in positions:  # find the leaf that failed, to name it
            try:
                jax.make_array_from_process_local_data(sharding, leaves[i])
            except Exception as leaf_error:
                raise TransferError(
                    f"cannot assemble {paths[i]} (shape {list(leaves[i].shape)}) into a "
                    f"global array with {sharding}: {leaf_error}",
                    paths[i],
                ) from e
        raise
    for i, value in zip(positions, placed, strict=True):
        out[i] = value
    return _tree.unflatten(spec, out)


def _mask_to_numpy(mask: Any) -> np.ndarray:
    if isinstance(mask, np.ndarray):
        return mask
    backend = backend_of(mask)
    if backend is not None and backend.name == "torch":
        # np.asarray refuses a tensor on a device or one that requires grad.
        return np.asarray(mask.detach().cpu().numpy())
    return np.asarray(mask)  # tf and JAX arrays copy themselves to the host


def drop_padding(batch: Any, mask: Any) -> Any:
    """Keep only the real rows of a batch: those where ``mask`` is True.

    A sharded epoch is padded (by wrapping around) so that every rank gets the
    same number of full batches; the padded rows repeat samples. Sums and means
    weighted by the mask are exact without this; use it where rows must be
    collected (predictions for a metric over the whole evaluation set).

    Args:
        batch: a pytree of arrays of any framework, all with the mask's length.
        mask: 1-D boolean array (any framework), True for real rows.

    Returns:
        The same containers with the masked rows of every array leaf; other
        leaves are returned unchanged.

    Raises:
        ValueError: ``mask`` is not 1-D boolean.

    Examples:
        >>> import numpy as np
        >>> drop_padding({"x": np.arange(4)}, np.array([True, True, True, False]))
        {'x': array([0, 1, 2])}
    """
    keep = _mask_to_numpy(mask)
    if keep.ndim != 1 or keep.dtype != np.bool_:
        raise ValueError(
            f"`mask` must be a 1-D boolean array, got {keep.dtype} with shape {list(keep.shape)}."
        )
    if keep.all():
        return batch
    idx = np.flatnonzero(keep)
    leaves, spec = _tree.flatten(batch)
    out = list(leaves)
    groups: dict[str, tuple[Any, list[int]]] = {}
    for i, leaf in enumerate(leaves):
        backend = backend_of(leaf)
        if backend is not None:
            groups.setdefault(backend.name, (backend, []))[1].append(i)
    for backend, positions in groups.values():
        taken = backend.take([leaves[i] for i in positions], idx)
        for i, value in zip(positions, taken, strict=True):
            out[i] = value
    return _tree.unflatten(spec, out)
