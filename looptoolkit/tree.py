"""Pytree helpers on optree: the containers looptoolkit looks into (public surface).

Re-exports [`looptoolkit.tree`][looptoolkit.tree], which lives with
the transfer layer it serves.
"""

from __future__ import annotations

from looptoolkit.device._tree import MOVE_NAMESPACE as MOVE_NAMESPACE
from looptoolkit.device._tree import NAMESPACE as NAMESPACE
from looptoolkit.device._tree import ContainerRebuildWarning as ContainerRebuildWarning
from looptoolkit.device._tree import flatten as flatten
from looptoolkit.device._tree import flatten_typed as flatten_typed
from looptoolkit.device._tree import leaf_paths as leaf_paths
from looptoolkit.device._tree import looks_into as looks_into
from looptoolkit.device._tree import unflatten as unflatten

__all__ = [
    "MOVE_NAMESPACE",
    "NAMESPACE",
    "ContainerRebuildWarning",
    "flatten",
    "flatten_typed",
    "leaf_paths",
    "looks_into",
    "unflatten",
]
