"""torch on CUDA: the Loader's staged upload (pinned buffers, a side stream, events).

Host leaves are gathered straight into pinned buffers (one per leaf and slot,
reused across batches) and copied non-blocking on a side stream, in the
prefetch thread, under the Loader's device (an index fixed in the thread that
built the Loader). The order between the two threads' streams:

- the side stream waits for the consumer's stream before it reads anything: for
  what the consumer had queued when the pass began, then, before each batch,
  for the consumer's latest hand-over. A gather of device data or a transform
  that reads tensors the step writes sees the step's writes;
- an event is recorded on the side stream after each batch, and the consumer's
  current stream waits for it at the hand-over (``hand_over``), before the loop
  gets the batch;
- a slot is refilled only after the event of the batch last copied out of it.
  Since that batch's side-stream work waited for the consumer, the producer runs
  at most about ``2 * slots`` batches ahead of the consumer's stream on the GPU,
  however far the consumer's CPU runs ahead; so does the batch memory held;
- the batch's output tensors are marked as used by the consumer's stream
  (``record_stream``), so that the allocator reuses their memory only after the
  consumer's stream has passed the point where they were freed.

One side stream per device, made once per process and shared by every Loader:
the caching allocator reuses a freed block only on the stream that allocated
it, so a new stream per pass would strand each pass's cached blocks.

Batches made in the consumer's own thread (``prefetch_mode="inline"``, the
default for data in memory) whose staged rows hold at most ``DIRECT_MAX_BYTES``
skip the side stream: their copies are queued on the consumer's current stream,
which orders them with the step by itself, and the side stream's bookkeeping
(switching streams, cross-stream events, ``record_stream``: tens of
microseconds a batch on the CPU) would cost more than the copy it lets run
beside the step. An event after each batch still guards its slot, and a batch
handed out while another stream is current waits for that event there, as a
side-stream batch does. Those batches are staged a block of batches at a time
by the subclass the torch backend uses,
[`BlockStager`][looptoolkit.adapters._torch_blocks.BlockStager] (one gather per leaf,
one copy and one event a block); one at a time, as here, only with
``_torch_blocks.BLOCK_BYTES = 0``.

Small leaves (``packed``) share one pinned buffer per slot, at aligned offsets:
they are gathered into it, copied with one transfer and split on the device, so
the move finds them there already. Nothing is allocated in pinned memory per
batch; the slots are allocated when the first batch is staged one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

import numpy as np
import torch

__all__ = ["DIRECT_MAX_BYTES", "CudaStager", "pinned_empty", "side_stream", "upload"]

_ALIGN = 64  # bytes: every packed leaf starts at a multiple of any dtype's size

# Staged bytes a batch up to which batches made in the consumer's thread are copied on its
# own stream: such a copy takes the GPU under about 50 us, less than the side stream's
# bookkeeping costs the CPU per batch.
DIRECT_MAX_BYTES = 1 << 20

_side_streams: dict[int, Any] = {}
_side_lock = threading.Lock()


def side_stream(device: torch.device) -> Any:
    """The side stream of CUDA ``device`` (with an index), made on first use and reused."""
    assert device.index is not None
    with _side_lock:
        stream = _side_streams.get(device.index)
        if stream is None:
            stream = _side_streams[device.index] = torch.cuda.Stream(device)
        return stream


def pinned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in page-locked host memory."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def upload(buffer: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A pinned buffer's copy on ``device``, queued on the current stream."""
    return buffer.to(device, non_blocking=True)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype


class CudaStager:
    """A ``looptoolkit.adapters.Stager`` for torch tensors and NumPy arrays going to CUDA.

    Built in the consumer's thread (when a pass starts): it records there an
    event on the consumer's current stream, which the side stream waits for
    before the pass's first batch.

    Args:
        views: ``(position, host view)`` of each leaf to stage: its position in the
            data's leaves and a NumPy view of it whose dtype torch has. May be
            empty: the stager then only orders the streams (data on the device,
            dtypes NumPy lacks).
        batch_size: rows per batch (the buffers' size).
        device: the CUDA device, with its index.
        slots: buffers per leaf (prefetch depth + 1).
        packed: positions (as in ``views``) of the leaves to copy packed in one
            transfer per batch.
    """

    def __init__(
        self,
        views: Sequence[tuple[int, np.ndarray]],
        batch_size: int,
        device: torch.device,
        slots: int,
        packed: Iterable[int] = (),
    ) -> None:
        if device.index is None:
            # The consumer's thread: its current device is the one the user selected.
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.index: int = device.index
        self.stream = side_stream(device)
        self.slots = slots
        # Made in the consumer's thread: batches made there too, and small, skip the side
        # stream (decided when the first batch is made, in the thread that makes them).
        self._owner = threading.get_ident()
        self.batch_bytes = sum(batch_size * view[:1].nbytes for _, view in views)
        self.direct: bool | None = None
        self.moved = False  # the batches' leaves are pinned host tensors, moved by the Loader
        self.batch_size = batch_size
        self.events: list[Any] = [None] * slots
        self.positions: list[int] = [i for i, _ in views]
        self.views: list[np.ndarray] = [view for _, view in views]
        self.buffers: list[list[torch.Tensor]] = []
        self.arrays: list[list[np.ndarray]] = []
        # What the side stream waits for before the next batch: the consumer's stream
        # as of the latest hand-over (here: as of the start of the pass).
        self.consumer = torch.cuda.Event()
        self.consumer.record(torch.cuda.current_stream(device))
        # (index in `views`, byte offset, bytes, dtype, row shape) of each packed leaf
        together = set(packed)
        self.layout: list[tuple[int, int, int, torch.dtype, tuple[int, ...]]] = []
        size = 0
        for j, (i, view) in enumerate(views):
            if i in together:
                nbytes = batch_size * view[:1].nbytes
                self.layout.append((j, size, nbytes, _torch_dtype(view.dtype), view.shape[1:]))
                size += -(-nbytes // _ALIGN) * _ALIGN
        self.pack_bytes = size
        self.packs: list[torch.Tensor | None] = []

    def _allocate(self) -> None:
        """The pinned slots, made when the first batch is staged one at a time."""
        if self.buffers:
            return
        batch_size, size = self.batch_size, self.pack_bytes
        with torch.cuda.device(self.device):
            for _ in range(self.slots):
                pack = pinned_empty((size,), torch.uint8) if self.layout else None
                tensors: list[torch.Tensor] = [
                    pinned_empty((batch_size, *view.shape[1:]), _torch_dtype(view.dtype))
                    for view in self.views
                ]
                for j, start, nbytes, dtype, rows in self.layout:
                    assert pack is not None
                    tensors[j] = pack[start : start + nbytes].view(dtype).view(batch_size, *rows)
                self.packs.append(pack)
                self.buffers.append(tensors)
                self.arrays.append([t.numpy() for t in tensors])

    def staged(self, batches: Iterable[np.ndarray]) -> Iterator[list[Any]]:
        """Batches of the staged leaves (in the order of ``positions``), run inside ``context``.

        Pinned host tensors, but the packed leaves: those are already on the
        device, copied with one transfer on the side stream.
        """
        self._allocate()
        for k, idx in enumerate(batches):
            slot = k % self.slots
            event = self.events[slot]
            if event is not None:
                event.synchronize()  # the copy out of this slot has finished
            n = len(idx)
            arrays, tensors = self.arrays[slot], self.buffers[slot]
            for view, out in zip(self.views, arrays, strict=True):
                if view.flags.c_contiguous:
                    # mode="clip" lets `take` write into `out` directly (no buffering).
                    view.take(idx, axis=0, out=out[:n], mode="clip")
                else:  # `take` would copy the whole leaf first; indexing costs a batch
                    out[:n] = view[idx]
            leaves = list(tensors) if n == self.batch_size else [t[:n] for t in tensors]
            pack = self.packs[slot]
            if pack is not None:
                moved = upload(pack, self.device)
                for j, start, nbytes, dtype, rows in self.layout:
                    part = moved[start : start + nbytes].view(dtype)
                    leaves[j] = part.view(self.batch_size, *rows)[:n]
            yield leaves

    def context(self) -> AbstractContextManager[Any]:
        """The device and the side stream, entered in the producer's thread.

        The side stream first waits for what the consumer had queued when the
        pass began. Direct (the consumer's thread, small batches): the device
        only, and the consumer's current stream.
        """
        if self.direct is None:
            here = threading.get_ident() == self._owner
            self.direct = here and self.batch_bytes <= DIRECT_MAX_BYTES
        if self.direct:
            if torch.cuda.current_device() == self.index:
                return nullcontext()
            return torch.cuda.device(self.device)
        stack = ExitStack()
        # A new thread's current device is 0 whatever the consumer's is: every CUDA
        # call of the producer (allocations, copies, the transform) runs under ours.
        stack.enter_context(torch.cuda.device(self.device))
        stack.enter_context(torch.cuda.stream(self.stream))
        self.stream.wait_event(self.consumer)
        return stack

    def record(self, k: int) -> Any:
        """Record the event of batch ``k`` on the side stream.

        What the side stream runs next (batch ``k + 1``) waits for the consumer's
        stream as of its latest hand-over.
        """
        # A blocking event: waiting for it (a slot's reuse) yields the CPU.
        event = torch.cuda.Event(blocking=True)
        if self.direct:
            # Queued on the consumer's current stream: the token says which one.
            stream = torch.cuda.current_stream(self.index)
            event.record(stream)
            self.events[k % self.slots] = event
            return event, stream
        event.record(self.stream)
        self.events[k % self.slots] = event
        self.stream.wait_event(self.consumer)
        return event

    def hand_over(self, leaves: Iterable[Any], token: Any) -> None:
        """Make the consumer's current stream wait for the batch of ``leaves``.

        Direct: nothing when the batch was queued on the stream current now;
        else that stream waits for the batch, as for the side stream.
        """
        current = torch.cuda.current_stream(self.index)
        if self.direct:
            token, stream = token
            if current == stream:
                return
        current.wait_event(token)
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and leaf.is_cuda:
                leaf.record_stream(current)
        consumer = torch.cuda.Event()
        consumer.record(current)
        self.consumer = consumer  # one assignment: the producer reads one event or the other
