"""Device transfer, the last step of the data flow: [`to_device`][looptoolkit.to_device].

The public surface of the transfer layer. Its modules, by role:

- ``_fields`` and ``_containers``: the container rules (which types are looked into,
  rebuilt how), below everything that flattens a batch;
- ``_tree``: optree helpers on those rules (re-exported as [`looptoolkit.tree`][looptoolkit.tree]);
- ``_move``: ``to_device``, one call per backend per batch, the dtype cast on the
  cheaper side of the copy.
"""

from __future__ import annotations

from looptoolkit.device._move import Target as Target
from looptoolkit.device._move import TransferError as TransferError
from looptoolkit.device._move import cast_before_copy as cast_before_copy
from looptoolkit.device._move import describe_leaf as describe_leaf
from looptoolkit.device._move import dtype_name as dtype_name
from looptoolkit.device._move import mover as mover
from looptoolkit.device._move import parse_device as parse_device
from looptoolkit.device._move import to_device as to_device
from looptoolkit.device._move import transfer as transfer

__all__ = [
    "Target",
    "TransferError",
    "cast_before_copy",
    "describe_leaf",
    "dtype_name",
    "mover",
    "parse_device",
    "to_device",
    "transfer",
]
