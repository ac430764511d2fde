"""torch on CUDA: the Loader's staged upload (pinned buffers, a side stream, events).

Host leaves are gathered straight into pinned buffers (one per leaf and slot,
reused across batches), copied non-blocking on a side stream, and an event is
recorded after each batch. A slot is refilled only after its copy has
finished; the consumer's stream waits for the batch's event, and every tensor
made on the side stream is marked as used by the consumer's stream
(``record_stream``) so that its memory is not reused too early.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import Any

import numpy as np
import torch

__all__ = ["CudaStager"]


class CudaStager:
    """A ``looptoolkit.adapters.Stager`` for torch tensors and NumPy arrays going to CUDA.

    Args:
        views: ``(position, host view)`` of each leaf to stage: its position in the
            data's leaves and a NumPy view of it whose dtype torch has.
        batch_size: rows per batch (the buffers' size).
        device: the CUDA device.
        slots: buffers per leaf (prefetch depth + 1).
    """

    def __init__(
        self,
        views: Sequence[tuple[int, np.ndarray]],
        batch_size: int,
        device: torch.device,
        slots: int,
    ) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.slots = slots
        self.events: list[Any] = [None] * slots
        self.positions: list[int] = [i for i, _ in views]
        self.views: list[np.ndarray] = [view for _, view in views]
        self.buffers: list[list[torch.Tensor]] = []
        self.arrays: list[list[np.ndarray]] = []
        for _ in range(slots):
            tensors = [
                torch.empty(
                    (batch_size, *view.shape[1:]),
                    dtype=torch.from_numpy(np.empty(0, view.dtype)).dtype,
                    pin_memory=True,
                )
                for view in self.views
            ]
            self.buffers.append(tensors)
            self.arrays.append([t.numpy() for t in tensors])

    def staged(self, batches: Iterable[np.ndarray]) -> Iterator[list[Any]]:
        """Pinned batches of the staged leaves (in the order of ``positions``)."""
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
            yield [t[:n] for t in tensors]

    def context(self) -> AbstractContextManager[Any]:
        """The side stream on the target device."""
        stack = ExitStack()
        stack.enter_context(torch.cuda.device(self.device))
        stack.enter_context(torch.cuda.stream(self.stream))
        return stack

    def record(self, k: int) -> Any:
        """Record the event of batch ``k`` on the side stream."""
        event = torch.cuda.Event()
        event.record(self.stream)
        self.events[k % self.slots] = event
        return event

    def hand_over(self, leaves: Iterable[Any], token: Any) -> None:
        """Make the consumer's current stream wait for the batch of ``leaves``."""
        current = torch.cuda.current_stream(self.device)
        current.wait_event(token)
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and leaf.is_cuda:
                leaf.record_stream(current)
