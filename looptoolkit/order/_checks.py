"""Checks of an order that would otherwise fail inside an epoch, run at construction.

An epoch that ``drop_last`` leaves without a batch, and batches a sharding of the
device's batch axis cannot split evenly (also for a resumed epoch's last batch).
"""

from __future__ import annotations

from looptoolkit.order._order import Order

__all__ = ["check_not_empty", "check_shards"]


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
