"""Random augmentation keyed to the epoch's order, batched where the batch lives.

Every random parameter of a row is a pure function of the Loader's seed, the epoch and
the row's position in the epoch's global order
([`BatchKeys`][looptoolkit._common.keys.BatchKeys]), drawn for the whole batch at once on
the host; each op then runs where the batch is. [`Augment`][looptoolkit.augment.Augment]
runs image ops in turn on a leaf of each batch.
"""

from __future__ import annotations

from looptoolkit._common.keys import BatchKeys as BatchKeys
from looptoolkit._common.keys import uniforms as uniforms
from looptoolkit.augment._affine import RandomAffine as RandomAffine
from looptoolkit.augment._affine import RandomRotation as RandomRotation
from looptoolkit.augment._color import ColorJitter as ColorJitter
from looptoolkit.augment._compose import Augment as Augment
from looptoolkit.augment._geometry import HorizontalFlip as HorizontalFlip
from looptoolkit.augment._geometry import RandomCrop as RandomCrop
from looptoolkit.augment._geometry import RandomErasing as RandomErasing
from looptoolkit.augment._geometry import RandomResizedCrop as RandomResizedCrop
from looptoolkit.augment._geometry import VerticalFlip as VerticalFlip
from looptoolkit.augment._mixing import CutMix as CutMix
from looptoolkit.augment._mixing import MixUp as MixUp
from looptoolkit.augment._tokens import MaskTokens as MaskTokens

__all__ = [
    "Augment",
    "BatchKeys",
    "ColorJitter",
    "CutMix",
    "HorizontalFlip",
    "MaskTokens",
    "MixUp",
    "RandomAffine",
    "RandomCrop",
    "RandomErasing",
    "RandomResizedCrop",
    "RandomRotation",
    "VerticalFlip",
    "uniforms",
]
