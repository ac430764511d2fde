"""Dataset mixtures: several sources in one epoch by weight (``docs/mixtures.md``).

A layer of its own beside the orders: [`Mix`][looptoolkit.Mix] is data the
[`Loader`][looptoolkit.Loader] takes. It joins its sources' leaves into the
mixture's columns and gives the Loader's [`Order`][looptoolkit.Order] the mixed
order, a pure function of ``(seed, position)``: which source serves each position
(the interleave, ``_interleave``), and which row of that source (the source's own
order, ``_order``). Nothing after the order changes.
"""

from looptoolkit.mix._mix import Mix as Mix

__all__ = ["Mix"]
