"""PyTorch backend: gather, pinned / non-blocking / packed transfer, CUDA sync.

Host-to-device copies are non-blocking only from pinned memory, where the copy
is ordered on the current stream, so any later use of the result on that
stream (or a ``synchronize``) sees the data. Many small leaves are packed into
one pinned buffer, copied once and split into views on the device. Device-to-host
copies are queued non-blocking and followed by one stream synchronisation
before anything is returned.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from looptoolkit.device import cast_before_copy

if TYPE_CHECKING:
    from looptoolkit.device import Target

# Leaves at most this large are packed; larger ones are copied on their own.
PACK_MAX_BYTES = 256 * 1024
# Packing pays from this many small leaves on.
PACK_MIN_LEAVES = 4
_ALIGN = 64

_NUMPY_OK = frozenset(
    {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
     torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128}
)  # fmt: skip


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype called ``name`` (NumPy naming)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"torch has no dtype {name!r}.")
    return dtype


def from_numpy(x: np.ndarray) -> torch.Tensor:
    """Zero-copy tensor over a NumPy array (read-only arrays too, without a warning)."""
    if x.flags.writeable:
        return torch.from_numpy(x)
    with warnings.catch_warnings():
        # The tensor is only read (copied to a device or gathered from), never written.
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(x)


def resolve_device(target: Target) -> torch.device:
    """The ``torch.device`` for ``target``; raises when that device is not present."""
    if isinstance(target.native, torch.device):
        device = target.native
    elif target.platform == "cpu":
        device = torch.device("cpu")
    else:
        device = torch.device(target.platform, target.index)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"CUDA is not available to torch {torch.__version__}")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise RuntimeError(f"cuda:{device.index} is not present ({count} CUDA device(s))")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("MPS is not available")
    return device


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.type == "cpu":
        return True
    return (a.index or 0) == (b.index or 0) if None in (a.index, b.index) else a.index == b.index


def pack_copy(tensors: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Copy host tensors to ``device`` as one buffer; return views of it, one per tensor.

    Tensors are grouped by dtype; each group is concatenated into its region of
    one (pinned, on CUDA) byte buffer, which is copied once and split on the
    device into views of the original shapes.
    """
    layout: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        layout.setdefault(t.dtype, []).append(i)
    regions: list[tuple[torch.dtype, list[int], int, int]] = []
    offset = 0
    for dtype, members in layout.items():
        numel = sum(tensors[i].numel() for i in members)
        nbytes = numel * dtype.itemsize
        regions.append((dtype, members, offset, numel))
        offset += -(-nbytes // _ALIGN) * _ALIGN
    host = torch.empty(offset, dtype=torch.uint8, pin_memory=device.type == "cuda")
    for dtype, members, start, numel in regions:
        region = host[start : start + numel * dtype.itemsize].view(dtype)
        torch.cat([tensors[i].reshape(-1) for i in members], out=region)
    # From pinned memory the copy is ordered on the current stream, and the caching
    # host allocator keeps `host` alive until the copy has finished.
    moved = host.to(device, non_blocking=device.type == "cuda")
    out: list[torch.Tensor] = [tensors[0]] * len(tensors)
    for dtype, members, start, numel in regions:
        flat = moved[start : start + numel * dtype.itemsize].view(dtype)
        parts = flat.split([tensors[i].numel() for i in members])
        for i, part in zip(members, parts, strict=True):
            out[i] = part.view(tensors[i].shape)
    return out


class TorchBackend:
    """Backend for ``torch.Tensor``."""

    name = "torch"

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a torch tensor."""
        return isinstance(x, torch.Tensor)

    def length(self, x: torch.Tensor) -> int:
        """Leading dimension of ``x``."""
        return int(x.shape[0])

    def dtype_name(self, x: torch.Tensor) -> str:
        """NumPy-style dtype name (``torch.float32`` -> ``"float32"``)."""
        return str(x.dtype).removeprefix("torch.")

    def take(self, leaves: Sequence[torch.Tensor], idx: Any) -> list[torch.Tensor]:
        """Gather rows of each leaf.

        On the host, NumPy's ``take`` on a zero-copy view is used where the dtype
        allows: torch's own indexing runs OpenMP threads that slow down many-fold
        when another thread (a prefetcher) is busy. On a device, ``index_select``.
        """
        out = []
        idx_np = idx if isinstance(idx, np.ndarray) else None
        by_device: dict[torch.device, torch.Tensor] = {}
        for leaf in leaves:
            if leaf.device.type == "cpu" and leaf.dtype in _NUMPY_OK and idx_np is not None:
                out.append(torch.from_numpy(np.take(leaf.detach().numpy(), idx_np, axis=0)))
                continue
            index = by_device.get(leaf.device)
            if index is None:
                index = torch.as_tensor(idx, dtype=torch.int64).to(leaf.device)
                by_device[leaf.device] = index
            out.append(leaf.index_select(0, index))
        return out

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[torch.Tensor]:
        """Move torch tensors (and NumPy arrays sent to torch) to the target device."""
        device = resolve_device(target)
        out: list[Any] = [None] * len(leaves)
        upload: list[int] = []  # host -> device
        download: list[int] = []  # device -> host
        for i, (leaf, cast) in enumerate(zip(leaves, casts, strict=True)):
            t = from_numpy(leaf) if isinstance(leaf, np.ndarray) else leaf
            if cast is not None and cast_before_copy(self.dtype_name(t), cast):
                t = t.to(torch_dtype(cast))
                casts_i: str | None = None
            else:
                casts_i = cast
            out[i] = (t, casts_i)
            if _same_device(t.device, device):
                continue
            (upload if t.device.type == "cpu" else download).append(i)

        self._upload(out, upload, device, non_blocking, pack)
        if download:
            sources = {out[i][0].device for i in download}
            for i in download:
                t, cast = out[i]
                # Queued without waiting; the synchronisation below orders the reads.
                out[i] = (t.to(device, non_blocking=non_blocking is not False), cast)
            for source in sources:
                if source.type == "cuda":
                    torch.cuda.current_stream(source).synchronize()
        result = []
        for t, cast in out:
            result.append(t if cast is None else t.to(torch_dtype(cast)))
        return result

    def _upload(
        self,
        out: list[Any],
        upload: list[int],
        device: torch.device,
        non_blocking: bool | None,
        pack: bool | None,
    ) -> None:
        if not upload and not pack:
            return
        packed: list[int] = []
        if pack is not False:
            small = [i for i in upload if out[i][0].nbytes <= PACK_MAX_BYTES]
            if pack or (device.type == "cuda" and len(small) >= PACK_MIN_LEAVES):
                # pack=True also packs host-to-host moves, so the path runs (and is
                # tested) on machines without an accelerator.
                packed = small if not pack else [
                    i for i, (t, _) in enumerate(out) if t.device.type == "cpu"
                ]
        if packed:
            moved = pack_copy([out[i][0] for i in packed], device)
            for i, t in zip(packed, moved, strict=True):
                out[i] = (t, out[i][1])
        rest = sorted(set(upload) - set(packed))
        for i in rest:
            t, cast = out[i]
            if non_blocking is None:
                blocking_ok = device.type == "cuda" and t.is_pinned()
            else:
                blocking_ok = non_blocking
            out[i] = (t.to(device, non_blocking=blocking_ok), cast)

    def synchronize(self, target: Target | None = None) -> None:
        """Wait for the CUDA device of ``target`` (all devices when None)."""
        if not torch.cuda.is_available():
            return
        if target is None:
            torch.cuda.synchronize()
        else:
            device = resolve_device(target)
            if device.type == "cuda":
                torch.cuda.synchronize(device)


backend = TorchBackend()
