"""Where the batches go: step 3 of a Loader's construction, the delivery plan.

[`Delivery`][looptoolkit._pipeline.delivery.Delivery] holds the device options (``device``,
``prefetch``, ``prefetch_mode``, ``resident``, ``dtype``, ``non_blocking``, ``stats``,
``return_mask``, ``transform``, ``jit_transform``, ``skip_keys``) and checks them as a group;
[`route`][looptoolkit._pipeline.delivery.Delivery.route] fits them to the rows and the order
(a probe move of a few rows, the dataset put on the device once with ``resident``, where the
batches are made), and the [`Route`][looptoolkit._pipeline.delivery.Route] it returns turns
each epoch's index batches into the stream of batches a pass hands out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from looptoolkit._common.errors import check_int
from looptoolkit._common.target import Target
from looptoolkit._pipeline import probe as _probe
from looptoolkit._pipeline.stats import LoaderStats, timed
from looptoolkit._pipeline.stream import (
    MODES,
    KeysOf,
    Plan,
    Progress,
    Transform,
    ahead,
    choose_mode,
    prefetched,
    stager_for,
    with_masks,
)
from looptoolkit.device._move import parse_device
from looptoolkit.ragged._loader import ragged_probe

__all__ = ["Delivery", "Route"]


class Delivery:
    """The device options of a Loader, checked as a group (see the Loader's arguments).

    Raises:
        ValueError: ``prefetch < 0``, an unknown ``prefetch_mode``, ``"thread"`` with
            ``prefetch=0``, ``skip_keys`` without a ``device`` (or with ``resident``),
            ``resident``, ``dtype`` or ``non_blocking`` without a ``device``, an unknown
            device string.
        TypeError: a ``prefetch_mode`` that is not a str, a ``transform`` that is not
            callable.
    """

    def __init__(
        self,
        device: Any,
        prefetch: int,
        prefetch_mode: str,
        resident: bool,
        dtype: Any,
        non_blocking: bool | None,
        stats: bool,
        return_mask: bool,
        transform: Callable[[Any], Any] | None,
        jit_transform: bool,
        skip_keys: Any,
    ) -> None:
        prefetch = check_int("prefetch", prefetch, minimum=0)
        if not isinstance(prefetch_mode, str):
            raise TypeError(f"`prefetch_mode` must be a str, got {type(prefetch_mode).__name__}.")
        if prefetch_mode not in MODES:
            raise ValueError(
                f"`prefetch_mode` must be one of {', '.join(map(repr, MODES))}, "
                f"got {prefetch_mode!r}."
            )
        if prefetch_mode == "thread" and prefetch == 0:
            raise ValueError("`prefetch_mode='thread'` needs `prefetch >= 1`, got 0.")
        if transform is not None and not callable(transform):
            raise TypeError(f"`transform` must be callable, got {type(transform).__name__}.")
        if skip_keys is not None and (device is None or resident):
            raise ValueError(
                "`skip_keys` needs a `device` and `resident=False`: they are the leaves "
                "a batch's move leaves where they are."
            )
        if device is None:
            for name, value in (("resident", resident), ("dtype", dtype)):
                if value is not None and value is not False:
                    raise ValueError(
                        f'`{name}` needs a `device` ("cpu" keeps host arrays on the host).'
                    )
            if non_blocking is not None:
                raise ValueError("`non_blocking` needs a `device`.")
        self.target: Target | None = None if device is None else parse_device(device)
        self.prefetch = prefetch
        self.prefetch_mode = prefetch_mode
        self.resident = bool(resident)
        self.dtype = dtype
        self.non_blocking = non_blocking
        self.stats = bool(stats)
        self.return_mask = bool(return_mask)
        self.transform, self.jit_transform = transform, bool(jit_transform)
        self.skip_keys = skip_keys

    # The options of this group, by the Loader's names for them.
    ARGS = (
        "device", "prefetch", "prefetch_mode", "resident", "dtype", "non_blocking", "stats",
        "return_mask", "transform", "jit_transform", "skip_keys",
    )  # fmt: skip

    @classmethod
    def of(cls, args: dict[str, Any]) -> Delivery:
        """The delivery options among a Loader's arguments, checked."""
        return cls(**{name: args[name] for name in cls.ARGS})

    def route(self, rows: Any, order: Any) -> Route:
        """Fit the delivery to ``rows`` and ``order``, once, at construction.

        With a ``device``: the dataset goes to it once (``resident``), or a few rows go, to
        fail here rather than in the middle of an epoch; a move that keeps every leaf as
        it is (host arrays to ``"cpu"``, no cast) is skipped for every batch.

        Raises:
            ValueError: what the rows do not offer (``resident`` for stores, ``resident``
                and ``return_mask`` for ragged leaves); batches a sharding cannot split.
            TransferError: ``device`` is not present, or ``dtype`` cannot be applied.
        """
        rows.check_delivery(self.resident, self.return_mask)
        transform = None
        if self.transform is not None:
            keys = None
            if getattr(self.transform, "keyed", False):
                keys = KeysOf(order)
            transform = Transform(self.transform, self.jit_transform, self.skip_keys, keys)
        shards = 1  # of the device's batch axis: what a resumed epoch must split into
        kept = True  # whether moving a batch keeps it as it is (then it is not moved)
        target, dtype, non_blocking = self.target, self.dtype, self.non_blocking
        if target is not None:
            if self.resident:
                rows = _probe.resident(rows, rows.data, target, dtype, non_blocking)
            elif rows.ragged_paths:
                kept = ragged_probe(rows, target, dtype, non_blocking, self.skip_keys)
            else:
                shards, kept = _probe.probe(
                    rows, target, order, dtype, non_blocking, self.skip_keys
                )
        plan = Plan(
            target,
            dtype,
            non_blocking,
            transform,
            move=not kept,
            skip_keys=self.skip_keys,
        )
        store = rows.store
        mode = choose_mode(self.prefetch_mode, self.prefetch, store is not None)
        if store is not None:  # a span read in the background too, but never in "inline"
            store.background = mode == "thread" and self.prefetch > 0
        stats = LoaderStats(mode) if self.stats else None
        if stats is not None and store is not None and store.remote():
            stats.remote = store.remote_reads
        elif stats is not None and getattr(rows, "remote_reads", None) and rows.remote():
            stats.remote = rows.remote_reads  # ragged leaves in a bucket (token files)
        rows.stats = stats  # ragged rows count tokens; a staged upload, its blocks
        return Route(rows, plan, mode, self.prefetch, stats, self.return_mask, shards)


class Route:
    """The delivery fitted to its rows: each epoch's index batches to the batches handed out.

    Attributes:
        rows: the rows batches are gathered from (on the device with ``resident``).
        plan: the move, cast and transform of each batch.
        mode: where batches are made, ``"thread"`` or ``"inline"`` (the loop's thread).
        prefetch: batches prepared ahead.
        stats: the wait and step times, or None.
        return_mask: whether batches come with their padding masks.
        shards: of the device's batch axis (1 unless it is a sharding).
    """

    def __init__(
        self,
        rows: Any,
        plan: Plan,
        mode: str,
        prefetch: int,
        stats: LoaderStats | None,
        return_mask: bool,
        shards: int,
    ) -> None:
        self.rows = rows
        self.plan = plan
        self.mode = mode
        self.prefetch = prefetch
        self.stats = stats
        self.return_mask = return_mask
        self.shards = shards

    def stream(
        self, batches: Iterator[Any], schedule: Any, progress: Progress, batch_size: Any
    ) -> Iterator[Any]:
        """The batches of one pass: gathered, moved and transformed, in the mode chosen.

        Args:
            batches: the epoch's index batches (or planned ragged batches) from its offset.
            schedule: the epoch's order for this shard (its padding masks).
            progress: the pass's position, counted as batches are handed out.
            batch_size: rows per batch (None for planned ragged batches).
        """
        rows, plan = self.rows, self.plan
        stager = None
        if plan.move and self.prefetch > 0 and not rows.ragged_paths:
            assert plan.target is not None
            stager = stager_for(rows, batch_size, plan, self.prefetch)
        source: Iterator[Any]
        if self.mode == "thread":
            # A store's reads (decoding releases the GIL) are handed over in blocks.
            store = rows.store
            block = 1 if plan.move or store is None else store.handoff
            source = prefetched(rows, batches, progress, plan, self.prefetch, stager, block)
        else:
            # Only a move can run asynchronously; a host gather or transform has nothing
            # to overlap with, so nothing is made ahead of time.
            depth = self.prefetch if plan.move else 0
            source = ahead(rows, batches, progress, plan, depth, stager)
        if self.return_mask:
            source = with_masks(source, schedule, batch_size)
        if self.stats is not None:
            source = timed(source, self.stats)
        return source
