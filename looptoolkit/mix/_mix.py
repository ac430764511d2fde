"""``Mix``: several sources in one epoch by weight, as data the Loader takes.

A [`Mix`][looptoolkit.Mix] checks its sources and weights once, joins the
sources' leaves into the mixture's columns
([`looptoolkit.mix._columns`][looptoolkit.mix._columns]) and, for the Loader's
order options, makes the mixed order
([`MixedOrder`][looptoolkit.mix._order.MixedOrder]) that the Loader's
[`Order`][looptoolkit.Order] reads each epoch from. Everything after the order
(sharding, padding, layouts, moves, resume) is the Loader's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from looptoolkit._rows.rows import expand_stores
from looptoolkit.device import _tree as _tree
from looptoolkit.mix._columns import concatenate
from looptoolkit.mix._interleave import Interleave, rational_weights
from looptoolkit.mix._order import MixedOrder, fingerprint
from looptoolkit.order._sampling import Sampling
from looptoolkit.ragged._column import Ragged, find_ragged
from looptoolkit.stores import StoreArray

__all__ = ["EPOCHS", "SOURCE_OPTIONS", "Mix"]

EPOCHS = ("first_exhausted", "all_exhausted")
# What each source's own order may take besides the Loader's shuffle (as the Loader does).
SOURCE_OPTIONS = ("indices", "weights", "replacement", "num_samples")


def _length(leaf: Any) -> int:
    shape = getattr(leaf, "shape", None)
    if isinstance(leaf, Ragged) or shape is None:
        return len(leaf)
    return int(shape[0])


def _signature(leaf: Any) -> tuple[str, tuple[int, ...]]:
    """A leaf's dtype and row shape (a ragged column's: its values')."""
    x = leaf.values if isinstance(leaf, Ragged) else leaf
    kind = "ragged " if isinstance(leaf, Ragged) else ""
    return kind + str(getattr(x, "dtype", type(x).__name__)), tuple(getattr(x, "shape", ())[1:])


class Mix:
    """Several sources mixed by weight: data for [`Loader`][looptoolkit.Loader].

    The mixed order serves each position from one source by a deterministic
    interleave: every source's count over every prefix of the stream stays
    within one sample of ``weight * position`` (below ``1 - 1 / (2K - 2)`` for
    ``K`` sources), so every batch holds each source in proportion. Each source
    is visited in its own order (the Loader's ``shuffle``, ``group_size`` and
    ``run_size`` over the source's rows, from the source's own stream of the
    Loader's ``seed``) and has its own epochs: a source that runs out starts its
    next epoch, in a new order, while the others go on. The mixed stream goes
    on across the mixture's epochs; the mixture's epoch ``e`` is its positions
    ``[e * N, (e + 1) * N)``. ``docs/mixtures.md`` has the guide.

    Args:
        sources: a mapping of names to data (or a sequence, named ``"0"``,
            ``"1"``, ...). Each is anything the Loader takes: a pytree of arrays,
            memmaps, store arrays or ragged columns, all with the same leaves
            (structure, dtypes and row shapes).
        weights: one positive weight per source (a mapping by name, or a sequence
            in the sources' order), normalised to sum to 1; None: in proportion to
            the sources' rows. Weights are rationals ``m / D`` with ``D <= 262144``:
            exact for ratios of small integers (0.7 / 0.3, 1 : 2 : 3), otherwise
            rounded to multiples of ``1 / D``.
        schedule: instead of ``weights``, stages ``[(position, weights), ...]``:
            each ``weights`` serves from its ``position`` of the mixed stream (in
            samples, counted across epochs: one step of a Loader is
            ``batch_size * world_size`` positions) until the next stage's; the first
            position must be 0 and positions must increase.
        epoch: positions per epoch of the mixture: an int; ``"first_exhausted"``
            (until the first source has given all its rows once, as HF
            ``interleave_datasets`` and grain name it); ``"all_exhausted"`` (until
            every source has, the smaller ones starting over); None (the default):
            the sources' rows added up.
        source_key: a key to add to every batch (the sources must be dicts): the
            index of the source each row came from, as ``uint8``/``int16``.
        by: ``"rows"`` (the default): weights count rows (documents of a ragged
            source); ``"tokens"``: weights count the elements of the first ragged
            leaf, converted to row weights by each source's mean row length (so the
            token proportions hold on average, the row counts exactly).
        source_options: per source name, the options of its own order that the
            Loader takes for all the data: ``indices`` (a subset of its rows),
            ``weights`` (one per row, drawn as ``WeightedRandomSampler``), with
            ``replacement`` and ``num_samples`` (its draws per epoch). A source's
            epoch is then its subset or its draw.

    Raises:
        TypeError: sources that are not a mapping or a sequence, a weight that is not
            a number, ``source_key`` with sources that are not dicts.
        ValueError: no source, an empty source, sources with different leaves, dtypes
            or row shapes (named, with the fix), weights that are zero, negative, NaN
            or not one per source, a schedule that does not start at 0 or does not
            increase, an unknown ``epoch`` or ``by``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, Mix
        >>> web = {"x": np.zeros(70, dtype=np.int64)}
        >>> code = {"x": np.ones(30, dtype=np.int64)}
        >>> mix = Mix({"web": web, "code": code}, weights={"web": 0.7, "code": 0.3})
        >>> [int(b["x"].sum()) for b in Loader(mix, 10)]  # 3 code rows in every batch
        [3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
    """

    def __init__(
        self,
        sources: Mapping[str, Any] | Sequence[Any],
        weights: Mapping[str, float] | Sequence[float] | None = None,
        *,
        schedule: Sequence[tuple[int, Mapping[str, float] | Sequence[float]]] | None = None,
        epoch: int | str | None = None,
        source_key: str | None = None,
        by: str = "rows",
        source_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if isinstance(sources, Mapping):
            self.names = [str(k) for k in sources]
            given = list(sources.values())
        elif isinstance(sources, Sequence) and not isinstance(sources, str | bytes):
            self.names = [str(i) for i in range(len(sources))]
            given = list(sources)
        else:
            raise TypeError(
                f"`sources` must be a mapping of names to data or a sequence of data, "
                f"got {type(sources).__name__}."
            )
        if not given:
            raise ValueError("`sources` must hold at least one source, got none.")
        if by not in ("rows", "tokens"):
            raise ValueError(f'`by` must be "rows" or "tokens", got {by!r}.')
        self.by = by
        self.sources = [
            self._normalize(name, data) for name, data in zip(self.names, given, strict=True)
        ]
        # Pickled as its sources as read (store objects as their picklable wrappers).
        named = dict(zip(self.names, self.sources, strict=True))
        self._init_args = (named, weights, schedule, epoch, source_key, by, source_options)
        flat = [_tree.flatten(data) for data in self.sources]
        self._check_leaves(flat)
        self.sizes = [
            self._size(name, leaves) for name, (leaves, _) in zip(self.names, flat, strict=True)
        ]
        self.options = self._check_options(source_options)
        # Draws per epoch of each source: its rows, or its subset's or its weighted draw's.
        self.epoch_sizes = [
            Sampling(n, "full", seed=0, **opts).length
            for n, opts in zip(self.sizes, self.options, strict=True)
        ]
        self.spec = flat[0][1]
        self.source_key = source_key
        paths = _tree.leaf_paths(self.spec, "data")
        columns = self.spec.unflatten(
            [concatenate([leaves[i] for leaves, _ in flat], paths[i]) for i in range(len(paths))]
        )
        if source_key is not None:
            if type(columns) is not dict:
                raise TypeError(
                    "`source_key` adds a key to every batch: the sources must be dicts, "
                    f"got {type(self.sources[0]).__name__}."
                )
            if source_key in columns:
                raise ValueError(f"`source_key` {source_key!r} is already a key of the sources.")
            kind = np.uint8 if len(self.sizes) <= 256 else np.int16
            columns[source_key] = np.repeat(np.arange(len(self.sizes), dtype=kind), self.sizes)
        self.columns = columns
        self.bases = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.intp)
        self._row_weights = self._token_scale(flat) if by == "tokens" else None
        if schedule is not None:
            if weights is not None:
                raise ValueError("`weights` and `schedule` cannot be combined; give one.")
            self.stages = self._check_schedule(schedule)
        else:
            w = self._check_weights(weights, "`weights`") if weights is not None else None
            self.stages = [(0, w if w is not None else [float(n) for n in self.epoch_sizes])]
        self.weights = self.stages[0][1]
        self.interleave = Interleave(
            [(start, rational_weights(self._scaled(w)), None) for start, w in self.stages],
            len(self.sizes),
        )
        self.epoch = epoch
        self.length = self._epoch_length(epoch)

    # -- checks ------------------------------------------------------------------------

    def _normalize(self, name: str, data: Any) -> Any:
        if isinstance(data, Mix):
            raise TypeError(f"source {name!r} is a Mix; mixtures of mixtures are not offered.")
        ragged = find_ragged(data)  # list and Arrow columns first, then stores' arrays
        return expand_stores(data if ragged is None else ragged)

    def _check_leaves(self, flat: list[tuple[list[Any], Any]]) -> None:
        leaves0, spec0 = flat[0]
        paths = _tree.leaf_paths(spec0, "data")
        for name, (leaves, spec) in zip(self.names[1:], flat[1:], strict=True):
            if spec != spec0:
                raise ValueError(
                    f"every source of a Mix must have the same leaves; source {self.names[0]!r} "
                    f"is {spec0} and source {name!r} is {spec}: give them the same keys."
                )
            for path, a, b in zip(paths, leaves0, leaves, strict=True):
                if _signature(a) != _signature(b):
                    raise ValueError(
                        f"{path} must have one dtype and row shape in every source; "
                        f"source {self.names[0]!r} has {_signature(a)} and source {name!r} has "
                        f"{_signature(b)}: cast them alike (`.astype(...)`) first."
                    )

    def _size(self, name: str, leaves: list[Any]) -> int:
        for leaf in leaves:
            if not isinstance(leaf, Ragged | StoreArray) and not hasattr(leaf, "shape"):
                raise TypeError(f"source {name!r} holds a {type(leaf).__name__}, not an array.")
        sizes = {_length(leaf) for leaf in leaves}
        if len(sizes) != 1:
            raise ValueError(
                f"source {name!r} has leaves of different lengths {sorted(sizes)}; "
                "every leaf of a source needs one row per sample."
            )
        n = sizes.pop()
        if n == 0:
            raise ValueError(f"source {name!r} is empty; drop it from the Mix.")
        return n

    def _check_options(self, given: Any) -> list[dict[str, Any]]:
        if given is None:
            return [{} for _ in self.names]
        if not isinstance(given, Mapping):
            raise TypeError(
                f"`source_options` must map source names to options, got {type(given).__name__}."
            )
        unknown = [k for k in given if str(k) not in self.names]
        if unknown:
            raise ValueError(f"`source_options` names unknown sources {unknown} ({self.names}).")
        out = []
        for name, n in zip(self.names, self.sizes, strict=True):
            opts = dict(given.get(name, {}))
            bad = sorted(set(opts) - set(SOURCE_OPTIONS))
            if bad:
                raise ValueError(
                    f"`source_options` of {name!r} takes {', '.join(SOURCE_OPTIONS)}; got {bad}."
                )
            try:
                Sampling(n, "full", seed=0, **opts)
            except (TypeError, ValueError) as e:
                raise type(e)(f"`source_options` of {name!r}: {e}") from None
            out.append(opts)
        return out

    def _check_weights(self, weights: Any, what: str) -> list[float]:
        if isinstance(weights, Mapping):
            unknown = [k for k in weights if str(k) not in self.names]
            missing = [k for k in self.names if k not in map(str, weights)]
            if unknown or missing:
                raise ValueError(
                    f"{what} must name every source once: "
                    + (f"unknown {unknown}" if unknown else f"missing {missing}")
                    + f" (sources: {self.names})."
                )
            by_name = {str(k): v for k, v in weights.items()}
            values = [by_name[k] for k in self.names]
        elif isinstance(weights, Sequence | np.ndarray) and not isinstance(weights, str | bytes):
            values = list(
                np.asarray(weights).tolist() if isinstance(weights, np.ndarray) else weights
            )
            if len(values) != len(self.names):
                raise ValueError(
                    f"{what} must have one weight per source ({len(self.names)}), "
                    f"got {len(values)}."
                )
        else:
            raise TypeError(
                f"{what} must be a mapping of source names to numbers or a sequence of numbers, "
                f"got {type(weights).__name__}."
            )
        out = []
        for name, v in zip(self.names, values, strict=True):
            if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
                raise TypeError(f"{what} of source {name!r} must be a number, got {v!r}.")
            f = float(v)
            if math.isnan(f) or math.isinf(f):
                raise ValueError(f"{what} of source {name!r} must be finite, got {v!r}.")
            if f < 0:
                raise ValueError(f"{what} of source {name!r} must be > 0, got {v!r}.")
            if f == 0:
                raise ValueError(
                    f"{what} of source {name!r} is 0; drop the source from the Mix "
                    "(or, in a schedule, give it a small positive weight)."
                )
            out.append(f)
        return out

    def _check_schedule(self, schedule: Any) -> list[tuple[int, list[float]]]:
        if not isinstance(schedule, Sequence) or not schedule:
            raise TypeError(
                "`schedule` must be a non-empty list of `(position, weights)` pairs, "
                f"got {schedule!r}."
            )
        stages: list[tuple[int, list[float]]] = []
        for item in schedule:
            if not isinstance(item, Sequence) or len(item) != 2:
                raise TypeError(
                    f"`schedule` items must be `(position, weights)` pairs, got {item!r}."
                )
            position, w = item
            if isinstance(position, bool) or not isinstance(position, int | np.integer):
                raise TypeError(f"`schedule` positions must be ints, got {position!r}.")
            position = int(position)
            if not stages and position != 0:
                raise ValueError(f"`schedule` must start at position 0, got {position}.")
            if stages and position <= stages[-1][0]:
                raise ValueError(
                    f"`schedule` positions must increase, got {position} after {stages[-1][0]}."
                )
            stages.append((position, self._check_weights(w, f"`schedule` at {position}")))
        return stages

    def _token_scale(self, flat: list[tuple[list[Any], Any]]) -> list[float]:
        for i, leaf in enumerate(flat[0][0]):
            if isinstance(leaf, Ragged):
                means = [float(leaves[i].lengths.mean()) for leaves, _ in flat]
                return [1.0 / max(m, 1e-12) for m in means]
        raise ValueError(
            '`by="tokens"` counts the elements of a ragged leaf; the sources have none.'
        )

    def _scaled(self, w: Sequence[float]) -> list[float]:
        if self._row_weights is None:
            return list(w)
        return [a * b for a, b in zip(w, self._row_weights, strict=True)]

    def _epoch_length(self, epoch: Any) -> int:
        if epoch is None:
            return int(sum(self.epoch_sizes))
        if isinstance(epoch, str):
            if epoch not in EPOCHS:
                raise ValueError(
                    f"`epoch` must be an int, None, {EPOCHS[0]!r} or {EPOCHS[1]!r}, got {epoch!r}."
                )
            ends = [self.interleave.position_of(s, n) for s, n in enumerate(self.epoch_sizes)]
            return min(ends) if epoch == "first_exhausted" else max(ends)
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 1:
            raise ValueError(f"`epoch` must be an int >= 1, None or a name, got {epoch!r}.")
        return int(epoch)

    # -- what the Loader uses ----------------------------------------------------------

    def order(
        self,
        *,
        shuffle: Any,
        group_size: int | None,
        run_size: int,
        seed: int,
        chunk_rows: Callable[[Any], int | None] | None = None,
    ) -> MixedOrder:
        """The mixed order for the Loader's order options (an ``order_fn`` computed by position)."""
        units = [None if chunk_rows is None else chunk_rows(data) for data in self.sources]
        key = fingerprint(
            self.sizes, self.epoch_sizes, str(shuffle), group_size, run_size, self.epoch
        )
        return MixedOrder(
            self.sizes,
            self.bases,
            self.interleave,
            self.length,
            shuffle=shuffle,
            group_size=group_size,
            run_size=run_size,
            seed=seed,
            chunk_rows=units,
            fingerprint=key,
            options=self.options,
        )

    def __len__(self) -> int:
        """Positions per epoch of the mixture."""
        return self.length

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, self._init_args)

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {n} rows" for k, n in zip(self.names, self.sizes, strict=True))
        return f"Mix({{{parts}}}, weights={self.weights}, epoch={self.length})"


def _rebuild(*args: Any) -> Mix:
    sources, weights, schedule, epoch, source_key, by, options = args
    return Mix(
        sources,
        weights,
        schedule=schedule,
        epoch=epoch,
        source_key=source_key,
        by=by,
        source_options=options,
    )
