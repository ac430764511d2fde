"""How a Loader (or ``make_dataloader``) takes a [`Mix`][looptoolkit.Mix]: columns and an order.

[`prepare`][looptoolkit.mix._loader.prepare] turns the mixture into what every
route already takes: the mixture's columns as data, and the mixed order as the
``order_fn`` of the route's order options (an order computed by position, so
no epoch is ever materialised). [`load`][looptoolkit.mix._loader.load] resumes
a saved mixture state (``_epochs.state_of`` writes it);
[`counted`][looptoolkit.mix._loader.counted] counts rows (and tokens) per source for
``stats``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from looptoolkit._rows.rows import chunk_unit
from looptoolkit.device import _tree as _tree
from looptoolkit.mix._mix import Mix
from looptoolkit.order._epochs import MIX_KEY
from looptoolkit.order._options import OrderOptions
from looptoolkit.order._order import normalize_shuffle
from looptoolkit.ragged._column import Ragged
from looptoolkit.ragged._loader import rows_of as ragged_rows_of
from looptoolkit.stores import StoreArray

__all__ = ["MixedRows", "counted", "load", "mixed_order", "prepare", "rows_of"]


# Options that choose rows of the whole data: a mixture's sources choose their own.
_PER_SOURCE = ("weights", "indices", "order_fn", "num_samples")


def _chunk_rows(data: Any) -> int | None:
    stores = [x for x in _tree.flatten(data)[0] if isinstance(x, StoreArray)]
    return chunk_unit(stores) if stores else None


def _refuse_per_source(args: dict[str, Any]) -> None:
    for name in (*_PER_SOURCE, "replacement"):
        value = args.get(name)
        if value is not None and value is not False:
            raise ValueError(
                f"`{name}` chooses rows of the whole data; a Mix draws from its sources by "
                "their weights: subset or weight a source before mixing it."
            )


def _mixed(mix: Mix, args: dict[str, Any]) -> Any:
    """The mixed order of ``mix`` under a route's order options (an ``order_fn``)."""
    _refuse_per_source(args)
    return mix.order(
        shuffle=normalize_shuffle(args.get("shuffle", True)),
        group_size=args.get("group_size"),
        run_size=args.get("run_size", 1),
        seed=args.get("seed", 0),
        chunk_rows=_chunk_rows,
    )


def prepare(mix: Mix, args: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The data and the order options a route uses for ``mix``.

    Args:
        mix: the mixture.
        args: the route's order options by name.

    Returns:
        ``(columns, args)``: the mixture's columns, and ``args`` with the mixed order as
        ``order_fn``.

    Raises:
        ValueError: an option that chooses rows of the whole data (``weights``,
            ``indices``, ``order_fn``, ``num_samples``, ``replacement``).
    """
    return mix.columns, {**args, "order_fn": _mixed(mix, args)}


class MixedRows:
    """The rows of a [`Mix`][looptoolkit.Mix]: its columns' rows, in the mixed order.

    Everything but the order is the columns' rows' (rectangular or ragged), which this
    object stands for; [`order`][looptoolkit.mix._loader.MixedRows.order] gives them the
    mixed order as their ``order_fn``.

    Args:
        mix: the mixture.
        rows: the rows of its columns.
    """

    def __init__(self, mix: Mix, rows: Any) -> None:
        self.mix = mix
        self.rows = rows

    def __getattr__(self, name: str) -> Any:
        if name in ("mix", "rows"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.rows, name)

    def order(self, opts: OrderOptions) -> Any:
        """The columns' order with the mixed order as its ``order_fn``.

        Raises:
            ValueError: an option that chooses rows of the whole data (``weights``,
                ``indices``, ``order_fn``, ``num_samples``, ``replacement``).
        """
        return self.rows.order(opts.with_order_fn(_mixed(self.mix, opts.args)))


def rows_of(data: Any, batch_size: Any, ragged_args: dict[str, Any], cache_bytes: Any) -> Any:
    """What the rows of ``data`` are, a mixture or not (step 1, below the data's entry).

    A [`Mix`][looptoolkit.Mix] is [`MixedRows`][looptoolkit.mix._loader.MixedRows] over its
    columns' rows; other data goes on to [`looptoolkit.ragged`][looptoolkit.ragged]'s.
    """
    if not isinstance(data, Mix):
        return ragged_rows_of(data, batch_size, ragged_args, cache_bytes)
    return MixedRows(data, ragged_rows_of(data.columns, batch_size, ragged_args, cache_bytes))


def mixed_order(order: Any) -> Any:
    """The mixed order an Order reads from, or None (also for orders of planned batches)."""
    sampling = getattr(order, "sampling", None)  # planned batches: their documents' order's
    if sampling is None or not getattr(sampling, "positional", False):
        return None
    return sampling.order_fn


def load(order: Any, saved: dict[str, Any], epoch: int, offset: int) -> None:
    """Resume the mixture of ``order`` from a saved state (nothing without a mixture).

    Raises:
        ValueError: planned ragged batches (token budgets, length grouping, packed or
            fitted rows) saved with other weights: their offsets count batches of a plan
            made with those weights.
    """
    mixed = mixed_order(order)
    part = saved.get(MIX_KEY)
    if mixed is None or part is None:
        return
    if getattr(order, "plan_params", None) is None:
        mixed.load(part, epoch, offset)
    elif part.get("stages") != mixed.key():
        raise ValueError(
            "`state` was saved with other mixture weights; planned batches (`batch_tokens`, "
            "`group_by_length`, `PackLayout` or `FitLayout`) resume with the weights they were "
            "planned with: keep the saved weights, or change them at an epoch's start."
        )


def counted(
    batches: Iterator[np.ndarray], order: Any, mix: Mix | None, stats: Any
) -> Iterator[Any]:
    """``batches`` (row indices), counting each batch's rows (and tokens) per source.

    ``batches`` as they are without a mixture, without ``stats``, or for planned batches
    (whose items are plans, not rows).
    """
    if mix is None or stats is None or getattr(order, "plan_params", None) is not None:
        return batches
    return _counting(batches, mixed_order(order), mix, stats)


def _counting(batches: Iterator[np.ndarray], mixed: Any, mix: Mix, stats: Any) -> Iterator[Any]:
    names = mix.names
    k = len(names)
    lengths = None
    if isinstance(mix.columns, dict):
        for leaf in _tree.flatten(mix.columns)[0]:
            if isinstance(leaf, Ragged):
                lengths = leaf.lengths
                break
    rows = np.zeros(k, dtype=np.int64)
    tokens = np.zeros(k, dtype=np.int64)
    for idx in batches:
        which = mixed.sources_of(idx)
        rows += np.bincount(which, minlength=k)
        stats.source_rows = dict(zip(names, rows.tolist(), strict=True))
        if lengths is not None:
            tokens += np.bincount(which, weights=lengths[idx], minlength=k).astype(np.int64)
            stats.source_tokens = dict(zip(names, tokens.tolist(), strict=True))
        yield idx
