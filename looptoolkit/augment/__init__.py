"""Random augmentation keyed to the epoch's order, batched where the batch lives.

Every random parameter of a row is a pure function of the Loader's seed, the epoch and
the row's position in the epoch's global order
([`BatchKeys`][looptoolkit._common.keys.BatchKeys]), drawn for the whole batch at once on
the host; each op then runs where the batch is.
"""

from __future__ import annotations

from looptoolkit._common.keys import BatchKeys as BatchKeys
from looptoolkit._common.keys import uniforms as uniforms
from looptoolkit.augment._mixing import CutMix as CutMix
from looptoolkit.augment._mixing import MixUp as MixUp
from looptoolkit.augment._tokens import MaskTokens as MaskTokens

__all__ = ["BatchKeys", "CutMix", "MaskTokens", "MixUp", "uniforms"]
