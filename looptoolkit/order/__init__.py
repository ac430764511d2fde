"""Epoch orders (the first step of the data flow): which rows each batch of an epoch holds.

The public surface of the order layer. Its modules, by role:

- ``_sources``: the index sources of one epoch (a range, a permutation, groups of
  rows or of a store's chunks), computed a block at a time;
- ``_keyed``: the full shuffle by position, a keyed Feistel bijection of ``[0, n)``;
- ``_sampling``: subsets, weighted and with-replacement draws, custom orders;
- ``_order``: [`Order`][looptoolkit.Order], an epoch's order for one shard, cut into
  batches, padded and sharded;
- ``_epochs``: the epoch cursor, which epoch each pass runs, and the resumable state.
"""

from __future__ import annotations

from looptoolkit.order._options import resolve_rank as resolve_rank
from looptoolkit.order._order import DEFAULT_GROUP_SIZE as DEFAULT_GROUP_SIZE
from looptoolkit.order._order import SHUFFLE_MODES as SHUFFLE_MODES
from looptoolkit.order._order import EpochOrder as EpochOrder
from looptoolkit.order._order import Order as Order
from looptoolkit.order._order import batch_count as batch_count
from looptoolkit.order._order import epoch_indices as epoch_indices
from looptoolkit.order._order import normalize_shuffle as normalize_shuffle

__all__ = [
    "DEFAULT_GROUP_SIZE",
    "SHUFFLE_MODES",
    "EpochOrder",
    "Order",
    "batch_count",
    "epoch_indices",
    "normalize_shuffle",
    "resolve_rank",
]
