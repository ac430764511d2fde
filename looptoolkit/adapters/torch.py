"""PyTorch backend: gather, pinned / non-blocking / packed transfer, CUDA sync.

Host-to-device copies to CUDA are non-blocking: the copy is ordered on the
current stream, so any later use of the result on that stream (or a
``synchronize``) sees the data; from pageable memory CUDA returns once it has
staged the source. Many small leaves are packed into one pinned buffer, copied
once and split into views on the device. Device-to-host copies are blocking
(pageable results), or, with ``non_blocking=True``, queued into pinned memory and
followed by one stream synchronisation before anything is returned.
Device-to-device copies need no host synchronisation.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch._utils import _flatten_dense_tensors

from looptoolkit._common.target import Target
from looptoolkit.adapters import _tensordict, _torch_cuda
from looptoolkit.adapters._host import chunked, row_gather
from looptoolkit.adapters._protocol import BackendBase, Stager
from looptoolkit.adapters._torch_blocks import BlockStager
from looptoolkit.adapters._torch_gather import gather_view, index_select, take_view
from looptoolkit.adapters._torch_gather import host_view as _host_view

if TYPE_CHECKING:
    from collections.abc import Iterator

# Leaves at most this large are packed; larger ones are copied on their own.
PACK_MAX_BYTES = 256 * 1024
# Packing pays from this many small leaves on.
PACK_MIN_LEAVES = 4
_ALIGN = 64
# Up to this many bytes per dtype, packing flattens in C++ and copies once more.
_FLATTEN_COPY_MAX_BYTES = 4 * 1024 * 1024


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype called ``name`` (NumPy naming)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"torch has no dtype {name!r}.")
    return dtype


# ml_dtypes (NumPy) dtypes torch has too, but torch.from_numpy does not take:
# read through an unsigned integer view of the same width, then reinterpreted.
_VIEW_AS: dict[str, type] = {
    "bfloat16": np.uint16,
    "float8_e4m3fn": np.uint8,
    "float8_e5m2": np.uint8,
}


def from_numpy(x: np.ndarray) -> torch.Tensor:
    """Tensor over a NumPy array, zero-copy where torch allows.

    Read-only arrays are wrapped without a warning; arrays ``torch.from_numpy``
    refuses (negative strides, non-native byte order) are copied first; bfloat16
    and float8 arrays (ml_dtypes) are reinterpreted through an integer view.
    """
    try:
        if x.flags.writeable:
            return torch.from_numpy(x)
        with warnings.catch_warnings():
            # The tensor is only read (copied to a device or gathered from), never written.
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(x)
    except (TypeError, ValueError):
        as_int = _VIEW_AS.get(x.dtype.name)
        if as_int is not None:
            return from_numpy(x.view(as_int)).view(getattr(torch, x.dtype.name))
        if x.dtype.kind not in "biufc" or x.dtype.hasobject:
            raise
        # Negative strides or a byte-swapped dtype: one native, contiguous copy.
        return torch.from_numpy(np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("=")))


_WRITEABLE = attrgetter("flags.writeable")
_IS_CPU = attrgetter("is_cpu")


def _as_tensors(leaves: Sequence[Any]) -> tuple[list[torch.Tensor], bool]:
    """Tensors for ``leaves`` (NumPy arrays wrapped), and whether all came from NumPy.

    The checks run as C-level ``map`` calls: on a batch of 1000 small leaves a
    Python-level test per leaf costs as much as the wrapping itself.
    """
    if leaves and isinstance(leaves[0], np.ndarray):
        try:
            # A leaf without `.flags` (a tensor) raises AttributeError; a dtype or a
            # layout torch.from_numpy refuses, TypeError or ValueError.
            if all(map(_WRITEABLE, leaves)):
                return list(map(torch.from_numpy, leaves)), True
        except (AttributeError, TypeError, ValueError):
            pass  # handled one by one below
    kinds = set(map(type, leaves))
    arrays = [issubclass(k, np.ndarray) for k in kinds]  # np.memmap too
    if not any(arrays):
        return list(leaves), False
    ts = [from_numpy(x) if isinstance(x, np.ndarray) else x for x in leaves]
    return ts, all(arrays)


def resolve_device(target: Target) -> torch.device:
    """The ``torch.device`` for ``target``; raises when that device is not present."""
    if isinstance(target.native, torch.device):
        device = target.native
    elif target.platform == "cpu":
        if target.native is None and (target.index or 0) != 0:
            raise RuntimeError(f"torch has one cpu device, cpu:0; {target} is not present")
        device = torch.device("cpu")
    elif target.index is None:
        device = torch.device(target.platform)
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


def _with_index(device: torch.device) -> torch.device:
    """``device`` with its index filled in, so that ``tensor.device == device`` is exact."""
    if device.index is not None or device.type == "cpu":
        return device
    if device.type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _flatten(tensors: list[torch.Tensor], out: torch.Tensor) -> None:
    """Write ``tensors`` (one dtype), flattened and concatenated, into 1-D ``out``."""
    if out.nbytes <= _FLATTEN_COPY_MAX_BYTES:
        # One C++ call for all the small leaves (DDP's bucket flattening), then one
        # copy into the (pinned) buffer: cheaper than a Python reshape per leaf.
        out.copy_(_flatten_dense_tensors(tensors))
    else:
        torch.cat([t.reshape(-1) for t in tensors], out=out)


def pack_copy(tensors: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Copy host tensors to ``device`` as one buffer; return views of it, one per tensor.

    Tensors are grouped by dtype; each group is concatenated into its region of
    one (pinned, on CUDA) byte buffer, which is copied once and split on the
    device into views of the original shapes. The views do not share memory with
    the inputs, also when ``device`` is the host.
    """
    layout: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        layout.setdefault(t.dtype, []).append(i)
    regions: list[tuple[torch.dtype, list[torch.Tensor], list[int], list[int], int, int]] = []
    offset = 0
    for dtype, members in layout.items():
        group = [tensors[i] for i in members]
        sizes = [t.numel() for t in group]
        numel = sum(sizes)
        regions.append((dtype, group, members, sizes, offset, numel))
        offset += -(-numel * dtype.itemsize // _ALIGN) * _ALIGN
    host = torch.empty(offset, dtype=torch.uint8, pin_memory=device.type == "cuda")
    for dtype, group, _, _, start, numel in regions:
        if numel:
            _flatten(group, host[start : start + numel * dtype.itemsize].view(dtype))
    # From pinned memory the copy is ordered on the current stream, and the caching
    # host allocator keeps `host` alive until the copy has finished.
    moved = host.to(device, non_blocking=device.type == "cuda")
    out: list[torch.Tensor] = list(tensors)
    for dtype, group, members, sizes, start, numel in regions:
        flat = moved[start : start + numel * dtype.itemsize].view(dtype)
        # One C++ split into 1-D views; only leaves of another rank need a view
        # of their shape (torch's own unflatten makes two views per leaf).
        parts = flat.split_with_sizes(sizes)
        for i, part, t in zip(members, parts, group, strict=True):
            out[i] = part if t.dim() == 1 else part.view(t.shape)
    return out


# Batches whose indices go to a device in one transfer (`take_batches`).
_INDEX_CHUNK = 64


def _stageable(leaf: Any) -> np.ndarray | None:
    """A host NumPy view of a tensor or NumPy array that torch can wrap, or None."""
    if isinstance(leaf, torch.Tensor):
        return _host_view(leaf)
    if not isinstance(leaf, np.ndarray):
        return None
    view = leaf.view(np.ndarray) if isinstance(leaf, np.memmap) else leaf
    try:
        torch.from_numpy(np.empty(0, view.dtype))
    except (TypeError, ValueError):  # a dtype torch lacks, a non-native byte order
        return None
    return view


def _wrapped(
    view: np.ndarray, as_dtype: torch.dtype | None, batches: Iterable[np.ndarray]
) -> Iterator[torch.Tensor]:
    """The rows of each batch of a host view as tensors: a NumPy gather, a zero-copy wrap."""
    gathered = map(row_gather(view), batches)
    if as_dtype is None:
        return map(torch.from_numpy, gathered)
    return (torch.from_numpy(rows).view(as_dtype) for rows in gathered)


# Small constants (a normalisation's mean and std) already on each device.
_constants: dict[tuple[Any, ...], torch.Tensor] = {}


class TorchBackend(BackendBase):
    """Backend for ``torch.Tensor`` (and, for containers, TensorDict and tensorclass)."""

    name = "torch"

    def native_target(self, device: Any) -> Target | None:
        """The target of a ``torch.device``."""
        if isinstance(device, torch.device):
            return Target(device, device.type, device.index, home="torch", native=device)
        return None

    def resolve_device(self, target: Target) -> torch.device:
        """The ``torch.device`` for ``target``; raises when that device is not present."""
        return resolve_device(target)

    def owns_object(self, obj: Any) -> bool:
        """Whether ``obj`` is a torch or tensordict object (an ``nn.Module``, a TensorDict)."""
        root = type(obj).__module__.partition(".")[0]
        return root in ("torch", "tensordict") or isinstance(obj, torch.nn.Module)

    def container(self, cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """TensorDict and tensorclass types (only when tensordict is already imported)."""
        return _tensordict.container(cls)

    def move_container(self, cls: type) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """A lazily stacked TensorDict: ``to_device`` moves and casts its parts."""
        return _tensordict.move_container(cls)

    def is_batched_node(self, x: Any) -> bool:
        """TensorDict and tensorclass instances record their batch size."""
        return _tensordict.is_batched_node(x)

    def process_group(self) -> tuple[int, int] | None:
        """Rank and world size of an initialised ``torch.distributed`` process group."""
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
        return None

    def stager(
        self, leaves: Sequence[Any], batch_size: int, target: Target, slots: int
    ) -> Stager | None:
        """On CUDA: block uploads (``_torch_blocks``) or pinned slots on a side stream."""
        if target.platform != "cuda" or target.home != "torch":
            return None
        views = [(i, v) for i, v in enumerate(map(_stageable, leaves)) if v is not None]
        # Many small leaves share one pinned buffer and one copy (as `pack_copy` does
        # for a plain move), gathered straight into it.
        small = [i for i, v in views if batch_size * v[:1].nbytes <= PACK_MAX_BYTES]
        packed = small if len(small) >= PACK_MIN_LEAVES else []
        device = _with_index(resolve_device(target))
        # Also with no leaf to stage (data on the device, dtypes NumPy lacks): the
        # producer's work then still runs on the side stream, ordered both ways.
        return BlockStager(views, batch_size, device, slots, packed)

    def bind_target(self, target: Target) -> Target:
        """``"cuda"`` without an index: the calling thread's current CUDA device, fixed.

        The current device is per thread, and a new thread starts on device 0
        whatever ``torch.cuda.set_device`` said in the thread that made it.
        """
        if target.platform != "cuda" or target.index is not None:
            return target
        if isinstance(target.native, torch.device):
            if target.native.index is not None or target.native.type != "cuda":
                return target
        elif target.native is not None or not isinstance(target.spec, str):
            return target
        if not torch.cuda.is_available():
            return target  # moving there fails, with the reason, when it is tried
        index = torch.cuda.current_device()
        device = torch.device("cuda", index)
        if target.native is not None:
            return Target(device, "cuda", index, home=target.home, native=device)
        return Target(f"{target.spec.strip()}:{index}", "cuda", index, home=target.home)

    def is_array(self, x: object) -> bool:
        """Whether ``x`` is a torch tensor."""
        return isinstance(x, torch.Tensor)

    def dtype_name(self, x: torch.Tensor) -> str:
        """NumPy-style dtype name (``torch.float32`` -> ``"float32"``)."""
        return str(x.dtype).removeprefix("torch.")

    def concatenate(self, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
        """One array of ``leaves``' rows, one after the other (a mixture's columns)."""
        return torch.cat(list(leaves))

    def stack(self, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
        """``torch.stack(leaves)``."""
        return torch.stack(list(leaves))

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
            view, as_dtype = gather_view(leaf) if idx_np is not None else (None, None)
            if view is not None and idx_np is not None:
                out.append(take_view(view, as_dtype, idx_np))
                continue
            index = by_device.get(leaf.device)
            if index is None:
                index = torch.as_tensor(idx, dtype=torch.int64).to(leaf.device)
                by_device[leaf.device] = index
            out.append(index_select(leaf, index))
        return out

    def take_batches(
        self, leaves: Sequence[torch.Tensor], batches: Iterable[np.ndarray]
    ) -> Iterator[Sequence[torch.Tensor]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily.

        The per-leaf work is done once, not per batch. Host leaves are viewed as
        NumPy arrays once, and each batch is one NumPy gather and one zero-copy
        ``torch.from_numpy`` per leaf, the loop run by C-level ``map`` and
        ``zip``: measured faster than gathering a chunk of batches at once and
        splitting it (the gathers stay cache-sized). For leaves on a device, the
        indices of many batches are copied in one transfer and each batch's
        indices are a slice of it.
        """
        pairs = [gather_view(leaf) for leaf in leaves]
        if all(view is not None for view, _ in pairs):
            copies = itertools.tee(batches, len(pairs))
            streams = [
                _wrapped(view, as_dtype, copy)  # type: ignore[arg-type]  # views checked above
                for (view, as_dtype), copy in zip(pairs, copies, strict=True)
            ]
            return zip(*streams, strict=True)
        return self._device_batches(leaves, pairs, batches)

    def _device_batches(
        self,
        leaves: Sequence[torch.Tensor],
        pairs: list[tuple[np.ndarray | None, torch.dtype | None]],
        batches: Iterable[np.ndarray],
    ) -> Iterator[list[torch.Tensor]]:
        devices = {
            leaf.device for leaf, (view, _) in zip(leaves, pairs, strict=True) if view is None
        }
        cuda = any(device.type == "cuda" for device in devices)
        for chunk in chunked(batches, _INDEX_CHUNK):
            flat = from_numpy(np.concatenate(chunk).astype(np.int64, copy=False))
            if cuda:
                # From pinned memory the copy is queued, not waited for: a pageable
                # copy would block until the device has run all queued work.
                flat = flat.pin_memory()
            on_device = {device: flat.to(device, non_blocking=True) for device in devices}
            start = 0
            for idx in chunk:
                stop = start + len(idx)
                yield [
                    take_view(view, as_dtype, idx)
                    if view is not None
                    else index_select(leaf, on_device[leaf.device][start:stop])
                    for leaf, (view, as_dtype) in zip(leaves, pairs, strict=True)
                ]
                start = stop

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[torch.Tensor]:
        """Move torch tensors (and NumPy arrays sent to torch) to the target device.

        Per leaf this does no more than ``tensor.to(device)`` would: leaves already
        on the device are returned as they are, without a call.
        """
        device = _with_index(resolve_device(target))
        ts, on_host = _as_tensors(leaves)
        if device.type == "cpu":
            if on_host or all(map(_IS_CPU, ts)):
                moving = []
            else:
                moving = [i for i, t in enumerate(ts) if not t.is_cpu]
        else:
            moving = [i for i, t in enumerate(ts) if t.device != device]
        upload = [i for i in moving if ts[i].is_cpu]  # host -> device
        download = [i for i in moving if not ts[i].is_cpu]  # device -> host, or across devices

        self._upload(ts, upload, device, non_blocking, pack)
        if download:
            self._download(ts, download, device, non_blocking)
        return ts

    @staticmethod
    def _download(
        ts: list[torch.Tensor], download: list[int], device: torch.device, non_blocking: bool | None
    ) -> None:
        """Device-to-host and device-to-device moves of ``ts[i]`` for ``i`` in ``download``."""
        if device.type != "cpu":
            # Across devices torch orders the copy after the source's current stream
            # and the destination's after the copy: nothing to wait for on the host.
            for i in download:
                ts[i] = ts[i].to(device, non_blocking=non_blocking is not False)
            return
        # A non-blocking copy to the host lands in pinned memory, which torch's
        # caching host allocator keeps (rounded up to a power of two) after the
        # result is freed: only on request. A blocking one is pageable, and ready.
        asynchronous = non_blocking is True
        sources = {ts[i].device for i in download} if asynchronous else set()
        for i in download:
            ts[i] = ts[i].to(device, non_blocking=asynchronous)
        for source in sources:
            if source.type == "cuda":
                # The copies were queued on this stream: once it is done, values are ready.
                torch.cuda.current_stream(source).synchronize()

    def _upload(
        self,
        ts: list[torch.Tensor],
        upload: list[int],
        device: torch.device,
        non_blocking: bool | None,
        pack: bool | None,
    ) -> None:
        if not upload and not pack:
            return
        packed: list[int] = []
        if pack is not False:
            # A tensor that requires grad keeps its own copy: `cat(out=...)` would cut
            # it from the autograd graph (and refuses to).
            if pack:
                # pack=True also packs host-to-host moves, so the path runs (and is
                # tested) on machines without an accelerator.
                packed = [i for i, t in enumerate(ts) if t.is_cpu and not t.requires_grad]
            elif device.type == "cuda":
                small = [
                    i for i in upload if ts[i].nbytes <= PACK_MAX_BYTES and not ts[i].requires_grad
                ]
                if len(small) >= PACK_MIN_LEAVES:
                    packed = small
        if packed:
            moved = pack_copy([ts[i] for i in packed], device)
            for i, t in zip(packed, moved, strict=True):
                ts[i] = t
        done = set(packed)
        # From pinned memory the copy is ordered on the current stream and the caching
        # host allocator keeps the source alive until it is done; from pageable memory
        # CUDA returns once it has staged the source. A blocking copy would add a wait
        # for everything the stream had queued (the step before).
        asynchronous = device.type == "cuda" if non_blocking is None else non_blocking
        for i in upload:
            if i not in done:
                ts[i] = ts[i].to(device, non_blocking=asynchronous)

    def cast(self, x: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
        """``x.to(dtype)``, on its device (a NumPy array: wrapped, then cast on the host).

        A pinned host tensor (a staging slot, a batch pinned for its upload) is cast
        into pinned memory: the copy that follows stays a queued copy from pinned
        memory instead of one the driver stages out of pageable memory.
        """
        if isinstance(x, np.ndarray):
            x = from_numpy(x)
        dtype = torch_dtype(name)
        # Nothing is pinned before CUDA is initialised; asking would initialise it.
        if x.dtype != dtype and x.is_cpu and torch.cuda.is_initialized() and x.is_pinned():
            return _torch_cuda.pinned_empty(tuple(x.shape), dtype).copy_(x)
        return x.to(dtype)

    def constant(self, values: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        """``values`` on ``like``'s device, copied there once per device and reused."""
        key = (values.tobytes(), values.dtype.str, values.shape, like.device)
        tensor = _constants.get(key)
        if tensor is None:
            tensor = _constants[key] = torch.as_tensor(values, device=like.device)
        return tensor

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
