"""Variable-length data: ragged columns and their batch layouts.

A layer of its own beside the rectangular path: [`Ragged`][looptoolkit.Ragged] columns
(``looptoolkit.ragged._column``), the vectorised plans of an epoch (``_plans``), the layouts
of a batch (``_layouts``: [`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat],
[`Packed`][looptoolkit.Packed]), the layout objects a Loader's ``layout=`` takes, each with its
own options (``_layout_options``: [`PadLayout`][looptoolkit.PadLayout],
[`FlatLayout`][looptoolkit.FlatLayout], [`PackLayout`][looptoolkit.PackLayout],
[`FitLayout`][looptoolkit.FitLayout]) and what plugs them into the
[`Loader`][looptoolkit.Loader] (``_loader``). ``docs/ragged.md`` is the guide.
"""

from __future__ import annotations

from looptoolkit.ragged._column import Ragged as Ragged
from looptoolkit.ragged._layout_options import FitLayout as FitLayout
from looptoolkit.ragged._layout_options import FlatLayout as FlatLayout
from looptoolkit.ragged._layout_options import PackLayout as PackLayout
from looptoolkit.ragged._layout_options import PadLayout as PadLayout
from looptoolkit.ragged._layouts import Flat as Flat
from looptoolkit.ragged._layouts import Packed as Packed
from looptoolkit.ragged._layouts import Padded as Padded

__all__ = [
    "FitLayout",
    "Flat",
    "FlatLayout",
    "PackLayout",
    "Packed",
    "PadLayout",
    "Padded",
    "Ragged",
]
