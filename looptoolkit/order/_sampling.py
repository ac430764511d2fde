"""What an epoch draws from the rows: a permutation, a subset, a weighted draw or a custom order.

Part of the order step ([`looptoolkit.order`][looptoolkit.order]):
[`Sampling`][looptoolkit.order._sampling.Sampling] checks the options DataLoader users bring
(``weights``, ``replacement``, ``num_samples``, ``indices``, ``order_fn``) once, at construction,
and gives each epoch's global order as a source of
[`looptoolkit.order._sources`][looptoolkit.order._sources]. Everything is a pure function of
``(seed, epoch)``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from looptoolkit._common.errors import check_int
from looptoolkit.order import _keyed as _keyed
from looptoolkit.order._sources import Mapped, Materialized, Source, draw

__all__ = ["Sampling"]


def _fingerprint(values: np.ndarray) -> int:
    """A checksum of an array's values: a saved state names the weights or subset it used."""
    return zlib.crc32(np.ascontiguousarray(values).view(np.uint8).data) & 0xFFFFFFFF


def _check_weights(weights: Any, n: int) -> np.ndarray:
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"`weights` must be a 1-D array of numbers, got {type(weights).__name__}."
        ) from e
    if w.shape != (n,):
        raise ValueError(f"`weights` must have shape ({n},) (one per row), got {list(w.shape)}.")
    if not np.isfinite(w).all():
        raise ValueError("`weights` must be finite; got NaN or infinite weights.")
    if (w < 0).any():
        raise ValueError(f"`weights` must be >= 0, got {w.min()!r} at row {int(w.argmin())}.")
    if not w.any():
        raise ValueError("`weights` must not be all zero.")
    return w


def _check_rows(values: Any, n: int, name: str) -> np.ndarray:
    """``values`` as a 1-D intp array of rows in ``[0, n)``."""
    rows = np.asarray(values)
    if rows.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {list(rows.shape)}.")
    if len(rows) == 0:
        raise ValueError(f"{name} must not be empty.")
    if rows.dtype == np.bool_ or not np.issubdtype(rows.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array, got dtype {rows.dtype}.")
    low, high = int(rows.min()), int(rows.max())
    if low < 0 or high >= n:
        bad = low if low < 0 else high
        raise ValueError(f"{name} must be rows in [0, {n}), got {bad}.")
    return rows.astype(np.intp, copy=False)


class Sampling:
    """The rows an epoch visits, before sharding, checked once.

    ``kind`` names it (what a saved state records): ``"permutation"`` (every
    row, shuffled by ``shuffle``), ``"indices"``, ``"weights"``,
    ``"replacement"`` or ``"custom"``.

    What an epoch costs each rank: draws with replacement (uniform or weighted) of
    ``KEYED_MIN_ROWS`` (2**20) or more per epoch are computed by position, so a rank
    computes only its own, O(log n) a weighted draw, after the cumulative weights
    (8 bytes a row, computed once for every epoch); fewer draws are drawn whole
    ([`draw`][looptoolkit.order._sources.draw]). A weighted draw without replacement is
    drawn whole at any size, on every rank and every epoch: O(n + k log k) time
    (``num_samples`` k; O(n log n) for the default k = n), O(n) memory.

    Args:
        n: rows of the data.
        shuffle: the normalised shuffle mode (``"none"``, ``"full"``, ``"grouped"``).
        weights: one non-negative weight per row, or None.
        replacement: draw with replacement.
        num_samples: rows drawn per epoch with ``weights`` or ``replacement``
            (default ``n``).
        indices: the rows to visit (a subset, any order), or None.
        order_fn: ``(seed, epoch) -> rows``, or None.
        seed: the order's seed (``order_fn`` is called with it once here, to
            learn the epoch length).

    Raises:
        TypeError: an option of a wrong kind.
        ValueError: a wrong value, or a combination that is not offered.
    """

    def __init__(
        self,
        n: int,
        shuffle: str,
        *,
        weights: Any = None,
        replacement: bool = False,
        num_samples: int | None = None,
        indices: Any = None,
        order_fn: Callable[[int, int], Any] | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(replacement, bool | np.bool_):
            raise TypeError(f"`replacement` must be a bool, got {type(replacement).__name__}.")
        self.n = n
        self.replacement = bool(replacement)
        self.weights: np.ndarray | None = None
        self.subset: np.ndarray | None = None
        self.order_fn = order_fn
        self.fingerprint: int | None = None
        self._cdf: np.ndarray | None = None  # the cumulative weights, once, for every epoch
        drawn = weights is not None or self.replacement
        given = [
            name
            for name, value in (("weights", weights), ("indices", indices), ("order_fn", order_fn))
            if value is not None
        ]
        if self.replacement and weights is None:
            given.insert(0, "replacement")
        if len(given) > 1:
            raise ValueError(f"`{given[0]}` and `{given[1]}` cannot be combined.")
        if drawn and shuffle != "full":
            raise ValueError(
                f"`{given[0]}` draws a random order; it needs `shuffle=True`, got {shuffle!r}."
            )
        if num_samples is not None and not drawn:
            raise ValueError("`num_samples` needs `weights` or `replacement=True`.")
        # An order computed by position (a mixture's): it reads ``source(seed, epoch)``
        # segment by segment, never a whole epoch, and applies ``shuffle`` itself.
        self.positional = order_fn is not None and callable(getattr(order_fn, "source", None))
        if order_fn is not None and shuffle == "grouped" and not self.positional:
            raise ValueError("`order_fn` gives the whole order; it cannot be `shuffle='grouped'`.")
        if weights is not None:
            self.kind = "weights"
            self.weights = _check_weights(weights, n)
            self.fingerprint = _fingerprint(self.weights)
        elif self.replacement:
            self.kind = "replacement"
        elif indices is not None:
            self.kind = "indices"
            self.subset = _check_rows(indices, n, "`indices`")
            self.fingerprint = _fingerprint(self.subset.astype(np.int64))
        elif self.positional:
            self.kind = str(getattr(order_fn, "kind", "custom"))
            self.fingerprint = getattr(order_fn, "fingerprint", None)
        elif order_fn is not None:
            if not callable(order_fn):
                raise TypeError(f"`order_fn` must be callable, got {type(order_fn).__name__}.")
            self.kind = "custom"
        else:
            self.kind = "permutation"
        if drawn:
            k = n if num_samples is None else check_int("num_samples", num_samples, minimum=1)
            if not self.replacement:
                assert self.weights is not None
                positive = int(np.count_nonzero(self.weights))
                if k > positive:
                    raise ValueError(
                        f"`num_samples` {k} is more than the {positive} rows of non-zero weight; "
                        "pass `replacement=True` to draw rows more than once."
                    )
            self.length = k
        elif self.subset is not None:
            self.length = len(self.subset)
        elif self.positional:
            self.length = int(getattr(order_fn, "length"))  # noqa: B009 (a protocol attribute)
        elif order_fn is not None:
            self.length = -1  # learnt from the first call, below
            self.length = len(self.custom(seed, 0))
        else:
            self.length = n

    def __getstate__(self) -> dict[str, Any]:
        # The cumulative weights are a cache: a copy (a worker's) computes its own.
        return {**self.__dict__, "_cdf": None}

    @property
    def keyed(self) -> bool | None:
        """Whether the epoch's draws are computed by position (``KEYED_MIN_ROWS`` draws or more).

        For draws with replacement, uniform or weighted; None for the samplings that
        are neither (weighted draws without replacement, subsets' own arrays, custom
        orders): a subset's permutation is the full order's, of its length.
        """
        if self.replacement:
            return self.length >= _keyed.KEYED_MIN_ROWS
        return None

    def cumulative_weights(self) -> np.ndarray:
        """``np.cumsum(weights)`` in float64: computed on first use, kept for every epoch."""
        assert self.weights is not None
        if self._cdf is None:
            self._cdf = np.cumsum(self.weights, dtype=np.float64)
        return self._cdf

    def custom(self, seed: int, epoch: int) -> np.ndarray:
        """``order_fn(seed, epoch)``, checked: 1-D integers in ``[0, n)``, the epoch length."""
        assert self.order_fn is not None
        rows = _check_rows(self.order_fn(seed, epoch), self.n, f"`order_fn`({seed}, {epoch})")
        if self.length >= 0 and len(rows) != self.length:
            raise ValueError(
                f"`order_fn`({seed}, {epoch}) returned {len(rows)} rows, but epoch 0 had "
                f"{self.length}: every epoch must have the same length."
            )
        return rows

    def source(self, seed: int, epoch: int, permutation: Callable[[int], Source]) -> Source | None:
        """The epoch's global order; None: the plain ``permutation`` of ``n`` rows."""
        if self.kind == "permutation":
            return None
        if self.kind == "indices":
            assert self.subset is not None
            return Mapped(permutation(self.length), self.subset)
        if self.positional:
            assert self.order_fn is not None
            source: Source = self.order_fn.source(seed, epoch)  # type: ignore[attr-defined]
            return source
        if self.kind == "custom":
            return Materialized(self.custom(seed, epoch))
        if self.keyed:  # draws by position: no k-long array
            if self.weights is None:
                return _keyed.KeyedDraws(self.n, self.length, seed, epoch)
            cdf = self.cumulative_weights()
            return _keyed.KeyedWeightedDraws(cdf, self.length, seed, epoch)
        # Fewer draws, or weighted ones without replacement (the race needs all n keys).
        return Materialized(draw(seed, epoch, self.weights, self.length, self.n, self.replacement))
