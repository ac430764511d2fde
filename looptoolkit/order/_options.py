"""The order options of a route, checked once: which rows each epoch visits, for which rank.

Step 2 of a Loader's construction ("which rows when") starts here:
[`OrderOptions`][looptoolkit.order._options.OrderOptions] holds the options that choose an
epoch's rows (``shuffle``, ``seed``, draws, subsets, a custom order) with the batch size and the
resolved rank and world size; the rows object of the data builds its order from them
(rectangular rows, a store's chunk-aware order, planned ragged batches, a mixture).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from looptoolkit.order._order import check_rank, normalize_shuffle

__all__ = ["ORDER_ARGS", "OrderOptions", "resolve_rank"]

# The options an Order takes by name, beside the batch size and the shard.
ORDER_ARGS = (
    "shuffle", "seed", "group_size", "run_size", "drop_last", "weights", "replacement",
    "num_samples", "indices", "order_fn", "pad_shards",
)  # fmt: skip


def resolve_rank(
    rank: int | None, world_size: int | None, group: tuple[int, int] | None = None
) -> tuple[int, int]:
    """``(rank, world_size)`` of this process, validated.

    When both are None they are ``group``, the process group the caller found
    (the Loader and the integrations ask
    [`process_group`][looptoolkit.adapters.process_group] where they are built;
    orders know no framework), and ``(0, 1)`` without one.

    Args:
        rank: this process's shard, in ``[0, world_size)``, or None.
        world_size: the number of shards, ``>= 1``, or None.
        group: ``(rank, world_size)`` of an initialised process group, or None.

    Returns:
        ``(rank, world_size)`` as Python ints.

    Raises:
        TypeError: either is not an int (a bool is not accepted).
        ValueError: only one of them is None, ``world_size < 1``, or ``rank``
            is outside ``[0, world_size)``.

    Examples:
        >>> resolve_rank(None, None)
        (0, 1)
        >>> resolve_rank(1, 4)
        (1, 4)
        >>> resolve_rank(None, None, group=(3, 4))
        (3, 4)
    """
    if rank is None and world_size is None:
        return (0, 1) if group is None else check_rank(*group)
    if rank is None or world_size is None:
        raise ValueError(
            "`rank` and `world_size` must both be given or both be None, "
            f"got rank={rank!r}, world_size={world_size!r}."
        )
    return check_rank(rank, world_size)


class OrderOptions(NamedTuple):
    """The order options of a route: the ``Order`` keywords, the batch size, the shard.

    Attributes:
        args: the options by name (``ORDER_ARGS``), as given.
        batch_size: rows per batch (None where ragged data counts tokens instead).
        rank: this process's rank, resolved.
        world_size: the number of ranks, resolved.
        reads: the options as the user gave them, which say how the order reads the rows
            (read advice): a mixture's order is its sources' shuffles, not a custom one.
    """

    args: dict[str, Any]
    batch_size: int | None
    rank: int
    world_size: int
    reads: dict[str, Any]

    @classmethod
    def of(
        cls,
        args: dict[str, Any],
        batch_size: Any,
        rank: int | None,
        world_size: int | None,
        group: tuple[int, int] | None,
    ) -> OrderOptions:
        """The options checked: ``shuffle`` a known mode, the shard resolved.

        Args:
            args: a route's arguments; those of ``ORDER_ARGS`` are taken.
            batch_size: rows per batch, or None.
            rank: this process's shard, or None.
            world_size: the number of shards, or None.
            group: ``(rank, world_size)`` of an initialised process group, or None.

        Raises:
            ValueError: an unknown ``shuffle``, or a rank outside ``[0, world_size)``.
            TypeError: a rank or world size that is not an int.
        """
        normalize_shuffle(args["shuffle"])
        rank, world_size = resolve_rank(rank, world_size, group)
        options = {k: args[k] for k in ORDER_ARGS}
        return cls(options, batch_size, rank, world_size, options)

    def with_order_fn(self, order_fn: Callable[[int, int], Any]) -> OrderOptions:
        """These options with ``order_fn`` in place of the built-in shuffles (a mixture's)."""
        return self._replace(args={**self.args, "order_fn": order_fn})
