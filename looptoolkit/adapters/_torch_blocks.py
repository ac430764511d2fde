"""torch on CUDA: block uploads, K batches gathered, copied and handed over at a time.

A batch of a few hundred rows crosses PCIe in microseconds, while each copy call,
event and pinned slot costs about as much to issue on the host. Where batches
are made in the consumer's own thread and copied on its current stream (the
``direct`` staged upload of [`CudaStager`][looptoolkit.adapters._torch_cuda.CudaStager]:
``prefetch_mode="inline"``, the default for data in memory, with batches of at
most ``DIRECT_MAX_BYTES``), [`BlockStager`][looptoolkit.adapters._torch_blocks.BlockStager]
pays those costs once per block of batches:

- the index arrays of the next batches of the epoch's order are joined, and each
  staged leaf is gathered with one ``take`` into its region of one pinned block
  (all staged leaves packed, at aligned offsets, as the packed small leaves of a
  slot are);
- the used part of the block is copied with one non-blocking copy, on the
  consumer's current stream, into a fresh device tensor from torch's caching
  allocator, and one event is recorded after it;
- each batch is a slice of that device tensor per leaf: no CUDA call per batch.

Blocks grow from one batch to ``K`` (1, 2, 4, ... up to ``K``), so that the
first batches of an epoch, or of a short epoch, are not held up by a whole
block's gather; the last block is as short as the epoch leaves it, on the same
path. ``K`` is ``BLOCK_BYTES`` of staged rows, at most ``BLOCK_MAX_BATCHES``
(``loader.stats.block_batches``). A resumed epoch starts its blocks at its
resume offset.

The rules that keep batches exact:

- a pinned block is refilled only after the event of the copy out of it (a ring
  of ``BLOCK_SLOTS``); nothing else waits on the host;
- a device block is never reused while a batch of it is alive: each block is a
  new tensor, kept alive by its batches' views, and the allocator hands its
  memory out again only after the last view is freed (on the stream it was
  allocated on, in stream order);
- the copy, any cast and the transform of a batch are queued on the stream
  current when the batch is made; a batch made while another stream is current
  than the one its block was copied on makes that stream wait for the block's
  event first (once per block and stream) and marks the block as used there;
  a batch handed out while another stream is current than the one it was made
  on makes that stream wait for an event recorded on the stream it was made on.

Batches made in the prefetch thread (side stream, an event per batch), larger
batches, and batches with no leaf to stage (data already on the device, dtypes
NumPy lacks) take the per-batch staged upload of ``CudaStager``; ragged
layouts and stores are not staged at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from looptoolkit.adapters import _torch_cuda

__all__ = ["BLOCK_BYTES", "BLOCK_MAX_BATCHES", "BLOCK_SLOTS", "BlockStager", "block_batches"]

# Staged bytes a block holds at most: 4 MiB crosses PCIe in about 100 us, long
# enough that a copy call's and an event's few microseconds are paid once for
# many batches, short enough that the first batch of a block is not long in coming.
# 0 turns block uploads off (batches staged one at a time, as before).
BLOCK_BYTES = 4 << 20
# Batches a block holds at most, however small they are.
BLOCK_MAX_BATCHES = 64
# Pinned blocks per pass, reused in turn once the copy out of each has finished.
BLOCK_SLOTS = 2

_ALIGN = 64  # bytes: every leaf's region starts at a multiple of any dtype's size


def block_batches(batch_bytes: int) -> int:
    """``K``, the batches of ``batch_bytes`` staged bytes one block holds (0: no blocks)."""
    if BLOCK_BYTES <= 0:
        return 0
    return max(1, min(BLOCK_MAX_BATCHES, BLOCK_BYTES // max(batch_bytes, 1)))


class BlockStager(_torch_cuda.CudaStager):
    """``CudaStager`` with block uploads where batches are copied on the consumer's stream.

    Arguments as ``CudaStager``'s. ``stats``: the Loader's
    [`LoaderStats`][looptoolkit.LoaderStats] (or None), given ``block_batches``
    when a pass uploads blocks.
    """

    def __init__(
        self,
        views: Sequence[tuple[int, np.ndarray]],
        batch_size: int,
        device: torch.device,
        slots: int,
        packed: Iterable[int] = (),
    ) -> None:
        super().__init__(views, batch_size, device, slots, packed)
        self.stats: Any = None
        # Bytes of one row of each staged leaf, its torch dtype and row shape.
        self.rows: list[tuple[int, torch.dtype, tuple[int, ...]]] = [
            (int(view[:1].nbytes), _torch_cuda._torch_dtype(view.dtype), view.shape[1:])
            for view in self.views
        ]
        self.block_batches = block_batches(self.batch_bytes)
        self.blocks = False  # decided with `direct`, when the pass's first batch is made
        self.ring: list[torch.Tensor] = []
        self.ring_arrays: list[np.ndarray] = []
        self.ring_events: list[Any] = [None] * BLOCK_SLOTS
        # Per batch: the stream current when it was made; per block: its copy's stream.
        self.made_on: Any = None
        self.issued = -1  # the last batch made
        # (stream made on, stream handed out on) -> the last batch covered by a wait
        self.covered: dict[tuple[Any, Any], int] = {}

    def staged(self, batches: Iterable[np.ndarray]) -> Iterator[list[Any]]:
        """Batches of the staged leaves: on the device, slices of block uploads, where used.

        Else (the prefetch thread, large batches, nothing to stage) as ``CudaStager``'s.
        """
        self.blocks = bool(self.direct and self.block_batches and self.views)
        self.moved = self.blocks  # the staged leaves come out of `staged` on the device
        if not self.blocks:
            yield from super().staged(batches)
            return
        if self.stats is not None:
            self.stats.block_batches = self.block_batches
        source = iter(batches)
        size = 1
        for b in itertools.count():
            chunk = list(itertools.islice(source, size))
            if not chunk:
                return
            stream = torch.cuda.current_stream(self.index)
            leaves, event = self._upload(chunk, b % BLOCK_SLOTS)
            waited = {stream}
            start = 0
            for idx in chunk:
                stop = start + len(idx)
                # The first batch is made right after the copy: under the copy's stream.
                current = torch.cuda.current_stream(self.index) if start else stream
                if current not in waited:
                    # Made under another stream than its block's copy (the loop switched):
                    # that stream reads the block only after the copy, once per block.
                    current.wait_event(event)
                    if leaves[0].is_cuda:
                        leaves[0].record_stream(current)  # one storage: the whole block
                    waited.add(current)
                self.made_on = current
                yield [leaf[start:stop] for leaf in leaves]
                start = stop
            size = min(2 * size, self.block_batches)

    def _upload(self, chunk: Sequence[np.ndarray], slot: int) -> tuple[list[torch.Tensor], Any]:
        """The staged leaves of ``chunk``'s batches on the device (one copy), and its event."""
        if not self.ring:
            capacity = sum(
                -(-self.block_batches * self.batch_size * nbytes // _ALIGN) * _ALIGN
                for nbytes, _, _ in self.rows
            )
            with torch.cuda.device(self.device):
                for _ in range(BLOCK_SLOTS):
                    self.ring.append(_torch_cuda.pinned_empty((capacity,), torch.uint8))
                    self.ring_arrays.append(self.ring[-1].numpy())
        idx = chunk[0] if len(chunk) == 1 else np.concatenate(chunk)
        n = len(idx)
        event = self.ring_events[slot]
        if event is not None:
            event.synchronize()  # the copy out of this pinned block has finished
        host = self.ring_arrays[slot]
        regions: list[tuple[int, int]] = []
        offset = 0
        for view, (nbytes, _, shape) in zip(self.views, self.rows, strict=True):
            size = n * nbytes
            out = host[offset : offset + size].view(view.dtype).reshape((n, *shape))
            if view.flags.c_contiguous:
                # mode="clip" lets `take` write into `out` directly (no buffering).
                view.take(idx, axis=0, out=out, mode="clip")
            else:  # `take` would copy the whole leaf first; indexing costs the block
                out[...] = view[idx]
            regions.append((offset, size))
            offset += -(-size // _ALIGN) * _ALIGN
        moved = _torch_cuda.upload(self.ring[slot][:offset], self.device)
        # A blocking event: waiting for it (the pinned block's reuse) yields the CPU.
        event = self.ring_events[slot] = torch.cuda.Event(blocking=True)
        event.record(torch.cuda.current_stream(self.index))
        leaves = [
            moved[start : start + size].view(dtype).view(n, *shape)
            for (start, size), (_, dtype, shape) in zip(regions, self.rows, strict=True)
        ]
        return leaves, event

    def record(self, k: int) -> Any:
        """Blocks: no CUDA call; the token names the batch and the stream it was made on."""
        if not self.blocks:
            return super().record(k)
        self.issued = k
        return k, self.made_on

    def hand_over(self, leaves: Iterable[Any], token: Any) -> None:
        """Blocks: nothing when the batch is handed out on the stream it was made on.

        Else that stream waits for an event recorded now on the stream the batch was
        made on (its copy, cast and transform, and every batch made there since),
        unless an earlier wait covered it, and the batch's tensors are marked as used
        there.
        """
        if not self.blocks:
            super().hand_over(leaves, token)
            return
        k, made_on = token
        current = torch.cuda.current_stream(self.index)
        if current == made_on:
            return
        key = (made_on, current)
        if self.covered.get(key, -1) < k:
            event = torch.cuda.Event()
            event.record(made_on)
            current.wait_event(event)
            self.covered[key] = self.issued
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and leaf.is_cuda:
                leaf.record_stream(current)
