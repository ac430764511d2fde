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
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch._utils import _flatten_dense_tensors

from looptoolkit.adapters import chunked
from looptoolkit.device import cast_before_copy

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from looptoolkit.device import Target

# Leaves at most this large are packed; larger ones are copied on their own.
PACK_MAX_BYTES = 256 * 1024
# Packing pays from this many small leaves on.
PACK_MIN_LEAVES = 4
_ALIGN = 64
# Up to this many bytes per dtype, packing flattens in C++ and copies once more.
_FLATTEN_COPY_MAX_BYTES = 4 * 1024 * 1024

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


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.type == "cpu":
        return True
    return (a.index or 0) == (b.index or 0) if None in (a.index, b.index) else a.index == b.index


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


def _host_view(leaf: torch.Tensor) -> np.ndarray | None:
    """A zero-copy NumPy view of a host tensor NumPy can gather from, else None."""
    if leaf.device.type != "cpu" or leaf.dtype not in _NUMPY_OK or leaf.layout != torch.strided:
        return None
    try:
        return leaf.detach().numpy()
    except RuntimeError:  # a conjugate or negative view has no NumPy equivalent
        return None


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
            view = _host_view(leaf) if idx_np is not None else None
            if view is not None and idx_np is not None:
                out.append(torch.from_numpy(view.take(idx_np, axis=0)))
                continue
            index = by_device.get(leaf.device)
            if index is None:
                index = torch.as_tensor(idx, dtype=torch.int64).to(leaf.device)
                by_device[leaf.device] = index
            out.append(leaf.index_select(0, index))
        return out

    def take_batches(
        self, leaves: Sequence[torch.Tensor], batches: Iterable[np.ndarray]
    ) -> Iterator[list[torch.Tensor]]:
        """``take(leaves, idx)`` for each ``idx`` of ``batches``, lazily.

        The per-leaf work is done once, not per batch: host leaves are viewed as
        NumPy arrays once; for leaves on a device, the indices of many batches
        are copied in one transfer and each batch's indices are a slice of it.
        """
        views = [_host_view(leaf) for leaf in leaves]
        wrap = torch.from_numpy  # take's results are fresh, writable arrays
        if all(view is not None for view in views):
            for idx in batches:
                yield [wrap(view.take(idx, axis=0)) for view in views]  # type: ignore[union-attr]
            return
        devices = {leaf.device for leaf, view in zip(leaves, views, strict=True) if view is None}
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
                    wrap(view.take(idx, axis=0))
                    if view is not None
                    else leaf.index_select(0, on_device[leaf.device][start:stop])
                    for leaf, view in zip(leaves, views, strict=True)
                ]
                start = stop

    def move(
        self,
        leaves: Sequence[Any],
        target: Target,
        casts: Sequence[str | None],
        non_blocking: bool | None,
        pack: bool | None,
    ) -> list[torch.Tensor]:
        """Move torch tensors (and NumPy arrays sent to torch) to the target device.

        Per leaf this does no more than ``tensor.to(device)`` would: leaves already
        on the device are returned as they are, without a call.
        """
        device = _with_index(resolve_device(target))
        ts, on_host = _as_tensors(leaves)
        after: list[str | None] = list(casts)
        if len(after) != len(ts):
            raise ValueError(f"{len(ts)} leaves but {len(after)} casts.")
        if any(after):
            for i, cast in enumerate(after):
                # Shrinking casts run before the copy, on the leaf's side.
                if cast is not None and cast_before_copy(self.dtype_name(ts[i]), cast):
                    ts[i] = ts[i].to(torch_dtype(cast))
                    after[i] = None
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
            sources = {ts[i].device for i in download}
            for i in download:
                # Queued without waiting; the synchronisation below orders the reads.
                ts[i] = ts[i].to(device, non_blocking=non_blocking is not False)
            for source in sources:
                if source.type == "cuda":
                    torch.cuda.current_stream(source).synchronize()
        if any(after):
            for i, cast in enumerate(after):
                if cast is not None:
                    # Growing casts run after the copy, on the destination.
                    ts[i] = ts[i].to(torch_dtype(cast))
        return ts

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
        for i in upload:
            if i in done:
                continue
            t = ts[i]
            if non_blocking is None:
                # Safe only from pinned memory: the copy is then ordered on the
                # current stream, and the caching host allocator keeps the source alive.
                asynchronous = device.type == "cuda" and t.is_pinned()
            else:
                asynchronous = non_blocking
            ts[i] = t.to(device, non_blocking=asynchronous)

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


# =============================================================================
# Native pipelines for the cross-framework comparison (`looptoolkit compare`)
#
# `torch.utils.data.DataLoader` the way PyTorch users run it: per-sample
# `__getitem__` + `default_collate` (the default), and over `GetItemsDataset`
# (one `__getitems__` gather per batch); plus `torch.randperm` + indexing. Given
# an `order`, the DataLoaders yield exactly the Loader's batches for the seed.
# =============================================================================

# Imported here, not at the top: this section is appended to the backend module.
from collections.abc import Iterator  # noqa: E402

from torch.utils.data import DataLoader, Dataset, Sampler  # noqa: E402

from looptoolkit import tree as _tree  # noqa: E402
from looptoolkit.adapters.numpy import (  # noqa: E402
    EpochPipeline,
    epoch_indices,
    num_batches,
    order_length,
)


def as_torch(x: Any) -> torch.Tensor:
    """A torch tensor for a NumPy array (zero-copy) or a tensor (as is)."""
    if isinstance(x, torch.Tensor):
        return x
    return from_numpy(np.asarray(x))


class PerSampleDataset(Dataset):
    """A map-style dataset over a pytree of tensors that returns one row at a time.

    What ``torch.utils.data.TensorDataset`` does, for any pytree: ``dataset[i]``
    is the tree of row ``i``, and ``DataLoader``'s ``default_collate`` stacks
    the rows of a batch. It has no ``__getitems__``, so ``DataLoader`` calls
    ``__getitem__`` once per sample: the per-sample path users run by default.

    Args:
        data: a pytree of tensors or NumPy arrays (turned into tensors without a
            copy) sharing the leading dimension.
    """

    def __init__(self, data: Any) -> None:
        leaves, self._spec = _tree.flatten(data)
        self._leaves = [as_torch(leaf) for leaf in leaves]
        sizes = {int(leaf.shape[0]) for leaf in self._leaves}
        if len(sizes) != 1:
            raise ValueError(
                f"every leaf of `data` must have the same length, got {sorted(sizes)}."
            )
        self._n = sizes.pop()

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Any:
        return _tree.unflatten(self._spec, [leaf[i] for leaf in self._leaves])


class OrderSampler(Sampler[int]):
    """A sampler that yields the epoch orders of an ``Order`` (or a ``Loader``).

    Each ``iter()`` is the next epoch, as ``DataLoader`` asks for one iterator
    per epoch; ``set_epoch(e)`` chooses the next one, like ``DistributedSampler``.

    Args:
        order: an ``Order``, a ``Loader`` or a function of the epoch returning
            the sample order.
        n: samples per epoch.
        start_epoch: the epoch of the first ``iter()``.
    """

    def __init__(self, order: Any, n: int, *, start_epoch: int = 0) -> None:
        self.order = order
        self.n = n
        self.epoch = start_epoch

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next ``iter()`` yields."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        return iter(epoch_indices(self.order, epoch).tolist())

    def __len__(self) -> int:
        return self.n


def keep_batch(batch: Any) -> Any:
    """``collate_fn`` for a dataset whose ``__getitems__`` already returns the batch."""
    return batch


def _sampling(
    n: int, order: Any, shuffle: bool, seed: int
) -> tuple[Sampler[int] | None, bool, torch.Generator | None]:
    if order is not None:
        return OrderSampler(order, n), False, None
    return None, shuffle, torch.Generator().manual_seed(seed) if shuffle else None


def _dataloader(
    dataset: Any,
    batch_size: int,
    order: Any,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    num_workers: int,
    kwargs: dict[str, Any],
) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` in the Loader's order, or DataLoader's own."""
    sampler, shuffle, generator = _sampling(len(dataset), order, shuffle, seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        sampler=sampler,
        generator=generator,
        drop_last=drop_last,
        num_workers=num_workers,
        **kwargs,
    )


def per_sample_dataloader(
    data: Any,
    batch_size: int,
    *,
    order: Any = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    num_workers: int = 0,
    **kwargs: Any,
) -> DataLoader:
    """``DataLoader`` over :class:`PerSampleDataset`: one ``__getitem__`` per sample.

    The loop PyTorch users write by default. With ``order`` the samples come in
    the Loader's order (an :class:`OrderSampler`), so the batches equal the
    Loader's; without it, ``shuffle=True`` is DataLoader's own ``RandomSampler``
    seeded with ``seed``.

    Args:
        data: a pytree of tensors or NumPy arrays.
        batch_size: samples per batch.
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        shuffle: without ``order``: DataLoader's ``shuffle``.
        seed: without ``order``: seeds DataLoader's generator.
        drop_last: drop the last partial batch.
        num_workers: DataLoader worker processes.
        **kwargs: passed to ``DataLoader`` (``pin_memory``, ``persistent_workers``,
            ``multiprocessing_context``, ...).

    Returns:
        The ``DataLoader``; each ``iter()`` is the next epoch.
    """
    return _dataloader(
        PerSampleDataset(data), batch_size, order, shuffle, seed, drop_last, num_workers, kwargs
    )


def getitems_dataloader(
    data: Any,
    batch_size: int,
    *,
    order: Any = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    num_workers: int = 0,
    **kwargs: Any,
) -> DataLoader:
    """``DataLoader`` over :class:`looptoolkit.GetItemsDataset`: one gather per batch.

    DataLoader's sampler and ``BatchSampler`` still build each batch as a list of
    ints, which ``__getitems__`` gathers in one call; ``collate_fn`` passes the
    gathered batch through. With ``order`` the batches equal the Loader's.

    Args:
        data: a pytree of tensors or NumPy arrays.
        batch_size: samples per batch.
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        shuffle: without ``order``: DataLoader's ``shuffle``.
        seed: without ``order``: seeds DataLoader's generator.
        drop_last: drop the last partial batch.
        num_workers: DataLoader worker processes.
        **kwargs: passed to ``DataLoader``.

    Returns:
        The ``DataLoader``; each ``iter()`` is the next epoch.
    """
    from looptoolkit.dataset import GetItemsDataset

    kwargs.setdefault("collate_fn", keep_batch)
    return _dataloader(
        GetItemsDataset(data), batch_size, order, shuffle, seed, drop_last, num_workers, kwargs
    )


def randperm_loop(
    data: Any, batch_size: int, *, seed: int = 0, drop_last: bool = False
) -> EpochPipeline:
    """``torch.randperm`` per epoch, then ``leaf[idx]`` per leaf per batch.

    The loop a PyTorch user writes by hand for in-memory tensors (torch's own
    indexing, with its OpenMP threads). The order is torch's, not the Loader's.

    Args:
        data: a pytree of tensors or NumPy arrays (on any one device).
        batch_size: rows per batch.
        seed: seeds the ``torch.Generator`` once; each epoch draws the next permutation.
        drop_last: drop the last partial batch.

    Returns:
        An :class:`~looptoolkit.adapters.numpy.EpochPipeline` of batches shaped like ``data``.
    """
    leaves, spec = _tree.flatten(data)
    tensors = [as_torch(leaf) for leaf in leaves]
    n = int(tensors[0].shape[0])
    device = tensors[0].device
    generator = torch.Generator(device=device if device.type == "cuda" else "cpu")
    generator.manual_seed(seed)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        perm = torch.randperm(n, generator=generator, device=generator.device)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            idx = perm[start : start + batch_size]
            yield _tree.unflatten(spec, [t[idx] for t in tensors])

    return EpochPipeline(epoch_fn, num_batches(n, batch_size, drop_last), name="randperm_loop")


def resident_gather(
    data: Any,
    batch_size: int,
    *,
    order: Any,
    device: Any = None,
    drop_last: bool = False,
) -> EpochPipeline:
    """Device-resident data, ``index_select`` on the device: the bare on-device gather.

    The data is copied to ``device`` once; each epoch's order is copied once;
    each batch is one ``index_select`` per leaf on a slice of it. The reference
    loop for a device-resident Loader.

    Args:
        data: a pytree of tensors or NumPy arrays.
        batch_size: rows per batch.
        order: an ``Order``, a ``Loader`` or a function of the epoch.
        device: where the data lives (default: where it is).
        drop_last: drop the last partial batch.

    Returns:
        An :class:`~looptoolkit.adapters.numpy.EpochPipeline` of batches on ``device``.
    """
    leaves, spec = _tree.flatten(data)
    tensors = [as_torch(leaf) for leaf in leaves]
    if device is not None:
        tensors = [t.to(device) for t in tensors]
    on = tensors[0].device
    n = int(tensors[0].shape[0])

    def epoch_fn(epoch: int) -> Iterator[Any]:
        indices = torch.from_numpy(epoch_indices(order, epoch).astype(np.int64)).to(on)
        m = len(indices)
        for start in range(0, m - m % batch_size if drop_last else m, batch_size):
            idx = indices[start : start + batch_size]
            yield _tree.unflatten(spec, [t.index_select(0, idx) for t in tensors])

    length = order_length(order, n, batch_size, drop_last)
    return EpochPipeline(epoch_fn, length, name="resident_gather")
