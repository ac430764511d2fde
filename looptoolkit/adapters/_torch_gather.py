"""torch rows on the host and on a device: which dtypes gather how.

Host tensors are gathered with NumPy's ``take`` on a zero-copy view: torch's own
indexing runs OpenMP threads that slow down many-fold when another thread (a
prefetcher) is busy. A dtype NumPy lacks (bfloat16, float8, complex32) is viewed
as the bits of a same-width integer dtype, gathered, and viewed back; so is a
dtype ``index_select`` lacks (uint16, uint32, uint64 token ids) on a device.
"""

from __future__ import annotations

import numpy as np
import torch

from looptoolkit.adapters._host import gather_rows

__all__ = ["gather_view", "host_view", "index_select", "take_view"]

# The dtypes both NumPy (through a zero-copy view) and `index_select` handle.
_COMMON = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}
_COMMON |= {torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128}
_NUMPY_OK = frozenset(_COMMON | {torch.uint16, torch.uint32, torch.uint64})
# Dtypes `index_select` gathers. Rows of any other dtype (uint16-64, float8,
# complex32) are gathered as the bits of a same-width integer dtype.
_INDEX_SELECT_OK = frozenset(_COMMON | {torch.bfloat16})
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def host_view(leaf: torch.Tensor) -> np.ndarray | None:
    """A zero-copy NumPy view of a host tensor NumPy can gather from, else None."""
    if leaf.device.type != "cpu" or leaf.dtype not in _NUMPY_OK or leaf.layout != torch.strided:
        return None
    try:
        return leaf.detach().numpy()
    except RuntimeError:  # a conjugate or negative view has no NumPy equivalent
        return None


def _bits_view(leaf: torch.Tensor) -> torch.Tensor:
    """``leaf`` viewed as the same-width integer dtype, or ``leaf`` itself where none fits."""
    bits = _BITS.get(leaf.dtype.itemsize)
    if bits is None or leaf.dtype == bits:
        return leaf
    try:
        return leaf.view(bits)
    except RuntimeError:  # a quantized or sub-byte dtype: gathered as it is
        return leaf


def index_select(leaf: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of ``leaf``; a dtype ``index_select`` lacks is gathered as its bits."""
    if leaf.dtype in _INDEX_SELECT_OK:
        return leaf.index_select(0, index)
    bits = _bits_view(leaf)
    rows = bits.index_select(0, index)
    return rows if bits is leaf else rows.view(leaf.dtype)


def gather_view(leaf: torch.Tensor) -> tuple[np.ndarray | None, torch.dtype | None]:
    """A NumPy view to gather a host leaf's rows from, and the dtype to view them as.

    A dtype NumPy lacks (bfloat16, float8, complex32) is gathered as the bits of a
    same-width integer dtype and viewed back (None: the rows keep the view's dtype).
    """
    view = host_view(leaf)
    if view is not None or leaf.device.type != "cpu" or leaf.dtype in _NUMPY_OK:
        return view, None
    bits = _bits_view(leaf)
    view = None if bits is leaf else host_view(bits)
    return (view, leaf.dtype) if view is not None else (None, None)


def take_view(view: np.ndarray, as_dtype: torch.dtype | None, idx: np.ndarray) -> torch.Tensor:
    rows = torch.from_numpy(gather_rows(view, idx))  # fresh, writable arrays
    return rows if as_dtype is None else rows.view(as_dtype)
