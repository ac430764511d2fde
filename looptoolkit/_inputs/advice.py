"""Read advice: the Loader tells the kernel how its order reads memory-mapped leaves.

Between the order and the gathers in the data flow. A page fault in a
memory-mapped file makes the kernel read ahead around the page (a window of
``WINDOW`` bytes by default), which pays for itself when the next rows read lie
in that window and costs a window per row when they do not. The Loader knows
which: [`advise_reads`][looptoolkit._inputs.advice.advise_reads] looks at the order
options and at each mapped array's bytes per row, and advises ``MADV_RANDOM``
([`looptoolkit._rows.mapped.advise_random`][looptoolkit._rows.mapped.advise_random]) on
the mappings a rank reads scattered, once, when the Loader is made (an order's
kind is the same every epoch). ``docs/loader.md`` ("Memory-mapped data") has the
rule and the measurements behind it.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from looptoolkit._rows.mapped import advise_random
from looptoolkit.mix._columns import Concatenated
from looptoolkit.order._order import DEFAULT_GROUP_SIZE, normalize_shuffle
from looptoolkit.ragged._column import Ragged
from looptoolkit.ragged._layout_options import FitLayout, PackLayout
from looptoolkit.ragged._stored import StoredValues
from looptoolkit.ragged._units import WINDOWED_MIN_RANKS

__all__ = ["WINDOW", "advise_reads", "scattered"]

# Linux's default read-ahead (`read_ahead_kb` 128): what a fault reads around its page.
WINDOW = 128 * 1024
# Below this many bytes of rows a rank reads from one window, the window is mostly wasted
# (a quarter; measured on a 2 GB file, cold cache: docs/loader.md).
USEFUL = WINDOW // 4


def scattered(args: Mapping[str, Any]) -> str | None:
    """How the order of these Loader options reads rows: ``"full"``, ``"grouped"`` or None.

    ``"full"``: shuffled (``shuffle=True``) or drawn (``weights``, ``replacement``):
    each rank's rows lie anywhere. ``"grouped"``: runs of ``group_size`` neighbouring
    rows, each shared out among the ranks. None: in order (``shuffle=False``), or an
    order the user gives (``order_fn``; ``indices`` with ``shuffle=False``), read as given.
    """
    if args.get("order_fn") is not None:
        return None
    if args.get("weights") is not None or args.get("replacement"):
        return "full"
    mode = normalize_shuffle(args.get("shuffle", True))
    return None if mode == "none" else mode


def _arrays(
    leaf: Any, pitch: float | None = None, offsets: bool = True
) -> Iterator[tuple[Any, float]]:
    """The arrays a leaf reads from, each with the bytes of one row of the data in it.

    A ragged column's values (a row: a document's elements) and offsets (unless
    ``offsets`` is False); a mixture's parts (memmaps read in place); a plain array by
    its row stride.
    """
    if isinstance(leaf, Ragged):
        values = leaf.values
        if isinstance(values, np.ndarray | StoredValues):  # a framework's tensor maps no file
            nbytes = getattr(values, "nbytes", None)
            if nbytes is None:
                nbytes = int(np.prod(values.shape)) * np.dtype(values.dtype).itemsize
            yield from _arrays(values, nbytes / max(1, len(leaf)))
        if offsets:
            yield from _arrays(leaf.offsets)
    elif isinstance(leaf, StoredValues):
        yield from _arrays(leaf.array, pitch)
    elif isinstance(leaf, Concatenated):
        for part in leaf.parts:
            yield from _arrays(part, pitch, offsets)
    elif isinstance(leaf, np.ndarray) and leaf.ndim:
        yield leaf, pitch if pitch is not None else abs(leaf.strides[0]) or leaf.itemsize


def _wasted(order: str, pitch: float, group_size: int, world_size: int) -> bool:
    """Whether a rank reads fewer than ``USEFUL`` bytes of rows from a read-ahead window.

    A row costs at least a page. Full orders: one row per window. Grouped: a group's
    ``group_size`` rows lie together and each rank reads ``1 / world_size`` of them,
    so a window (or the group, if smaller) holds ``span / (pitch * world_size)`` of its rows.
    """
    row = max(pitch, mmap.PAGESIZE)
    if order == "full":
        return row < USEFUL
    span = min(group_size * pitch, WINDOW)
    return span / (pitch * world_size) * row < USEFUL


def advise_reads(leaves: list[Any], args: Mapping[str, Any], world_size: int) -> int:
    """Advise ``MADV_RANDOM`` on the mappings of ``leaves`` that the order reads scattered.

    Args:
        leaves: the data's leaves as the Loader reads them (arrays, ragged
            columns, a mixture's columns); those not memory-mapped are left alone.
        args: the Loader's order options (``shuffle``, ``group_size``, ``weights``...).
        world_size: ranks sharing each epoch.

    Returns:
        The number of mappings advised (0 for an order read in sequence).
    """
    order = scattered(args)
    if order is None:
        return 0
    group_size = args.get("group_size") or DEFAULT_GROUP_SIZE
    # A plan of the whole epoch reads every row's offsets in sequence, where read-ahead helps.
    whole = (
        args.get("batch_tokens") is not None
        or isinstance(args.get("layout"), PackLayout | FitLayout)
        or (bool(args.get("group_by_length")) and world_size < WINDOWED_MIN_RANKS)
    )
    arrays = (
        array
        for leaf in leaves
        for array, pitch in _arrays(leaf, offsets=not whole)
        if _wasted(order, pitch, group_size, world_size)
    )
    return advise_random(arrays)
