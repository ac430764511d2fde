"""The Loader's construction-time checks: what would otherwise fail inside an epoch.

Run once by [`Loader`][looptoolkit.Loader] before the first batch: an epoch that
``drop_last`` would leave empty, and a move of a few rows of every leaf to the
``device`` (an absent device, an impossible ``dtype``, batches a JAX sharding
cannot split). Errors name the leaf as the user's ``data[...]``, with its own
shape.
"""

from __future__ import annotations

import operator
from typing import Any

from looptoolkit._common.errors import TransferError
from looptoolkit._common.target import Target
from looptoolkit._rows.rows import Rows
from looptoolkit.adapters import batch_shards
from looptoolkit.device import _tree as _tree
from looptoolkit.device._move import describe_leaf, to_device
from looptoolkit.order._order import Order

__all__ = ["check_not_empty", "check_shards", "probe", "resident"]


def check_not_empty(order: Order) -> None:
    """Refuse an order whose epochs hold no batch (``drop_last`` with too few rows).

    Raises:
        ValueError: with ``drop_last``, this shard has fewer rows than ``batch_size``.
    """
    if len(order) == 0:
        rows = order.per_rank()
        if rows == 0 and not order.pad_shards:
            raise ValueError(
                f"rank {order.rank} of {order.world_size} gets no rows: the epoch has "
                f"{order.length} and `pad_shards=False` does not pad it."
            )
        shard = f"the {rows} rows of this shard" if order.world_size > 1 else f"the {rows} rows"
        raise ValueError(
            f"`batch_size` {order.batch_size} is larger than {shard}, so `drop_last=True` "
            f"drops every batch; pass a `batch_size` of at most {rows}, or `drop_last=False`."
        )


def check_shards(order: Order, shards: int, offset: int = 0) -> None:
    """Refuse batches that a sharding of ``shards`` devices cannot split evenly.

    Raises:
        ValueError: ``batch_size``, or the last batch of an epoch started (or
            resumed) at ``offset``, is no multiple of ``shards``.
    """
    b = order.batch_size
    if b % shards:
        raise ValueError(
            f"`batch_size` must be a multiple of the {shards} shards of `device`'s batch "
            f"axis, got {b}."
        )
    last = order.last_batch_size(offset)
    if last % shards:
        where = f"resumed at offset {offset} " if offset else ""
        raise ValueError(
            f"the last batch of an epoch {where}has {last} rows, which do not split over the "
            f"{shards} shards of `device`'s batch axis; pass `drop_last=True`."
        )


def _as_data_error(error: TransferError, rows: Rows, moved: list[Any]) -> TransferError:
    """``error`` naming the leaf as ``data[...]``, described by its own shape, not ``moved``'s."""
    assert error.path is not None
    path = "data" + error.path[len("batch") :]
    message = str(error).replace(error.path, path, 1)
    paths = _tree.leaf_paths(rows.spec)
    if error.path in paths:
        i = paths.index(error.path)
        described = describe_leaf(moved[i]), describe_leaf(rows.leaves[i])
        message = message.replace(f"({described[0]})", f"({described[1]})", 1)
    return TransferError(message, path)


def probe(
    rows: Rows,
    target: Target,
    order: Order,
    dtype: Any,
    non_blocking: bool | None,
    skip_keys: Any = None,
) -> tuple[int, bool]:
    """Move a few rows of every leaf to ``target``, as a batch would be moved.

    Returns:
        The shards of ``target``'s batch axis (1 unless it is a sharding), for
        [`check_shards`][looptoolkit._pipeline.probe.check_shards] of a resumed epoch; and
        whether the move kept every leaf and container as it was (host arrays
        to ``"cpu"``, no cast): then a batch's move is a no-op the Loader skips.

    Raises:
        TransferError: a leaf cannot be moved or cast (named as ``data[...]``).
        ValueError: the batches do not split over a sharding's batch axis.
    """
    shards = batch_shards(target, rows.leaves[0])
    if shards > 1:
        check_shards(order, shards)
    leaves = [leaf[:shards] for leaf in rows.leaves]
    try:
        batch = rows.build(leaves)
        moved = to_device(
            batch, target, dtype=dtype, non_blocking=non_blocking, skip_keys=skip_keys
        )
    except TransferError as e:
        if e.path is None or not e.path.startswith("batch"):
            raise
        raise _as_data_error(e, rows, leaves) from e.__cause__
    # The route of a leaf depends on its type and dtype only, the same in every batch:
    # a move that returns these rows as they were returns every batch as it was.
    (out, spec), (given, given_spec) = _tree.flatten(moved), _tree.flatten(batch)
    kept = spec == given_spec and len(out) == len(given) and all(map(operator.is_, out, given))
    return shards, kept


def resident(rows: Rows, data: Any, target: Target, dtype: Any, non_blocking: bool | None) -> Rows:
    """The rows of ``data`` moved to ``target`` once, for gathers on the device.

    Raises:
        TransferError: a leaf cannot be moved or cast (named as ``data[...]``).
    """
    try:
        moved = to_device(data, target, dtype=dtype, non_blocking=non_blocking)
    except TransferError as e:
        if e.path is None or not e.path.startswith("batch"):
            raise
        raise _as_data_error(e, rows, rows.leaves) from e.__cause__
    return Rows(moved)
