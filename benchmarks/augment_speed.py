"""Speed of Augment([RandomResizedCrop(224), HorizontalFlip()]) on the host: images/s.

uint8 images 3x256x256, channel-first, batch 128; NumPy arrays, torch tensors, and NumPy
arrays passed through torch (``torch.from_numpy`` in, ``.numpy()`` out). Also the share of
the time spent drawing parameters (target: under 5 %). Run::

    PYTHONPATH=. python benchmarks/augment_speed.py [--batches 5] [--threads 1]

Last run (2 shared cores, --threads 1, torch 2.13 CPU, --batches 3): numpy (through torch)
~4,200 images/s, torch ~3,800, numpy via torch ~4,000 (noise of the shared cores); NumPy
without torch (separable matrix products) ~340 images/s; drawing 0.08 ms of ~31 ms a
batch (0.3 %).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from looptoolkit.augment import Augment, BatchKeys, HorizontalFlip, RandomResizedCrop
from looptoolkit.augment._base import ImageBatch, stream_of

BATCH = 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    images = np.random.default_rng(0).integers(0, 256, (BATCH, 3, 256, 256), dtype=np.uint8)
    aug = Augment([RandomResizedCrop(224), HorizontalFlip()], key=None)
    runs: dict[str, Callable[[BatchKeys], Any]] = {
        "numpy": lambda keys: aug(images, keys),
        "torch": lambda keys: aug(torch.from_numpy(images), keys),
        "numpy via torch": lambda keys: aug(torch.from_numpy(images), keys).numpy(),
    }
    for name, run in runs.items():
        run(BatchKeys(0, 0, np.arange(BATCH)))  # warm the weight cache and torch
        start = time.perf_counter()
        for b in range(args.batches):
            run(BatchKeys(0, 1, np.arange(b * BATCH, (b + 1) * BATCH)))
        seconds = (time.perf_counter() - start) / args.batches
        print(f"{name:>16}: {BATCH / seconds:8.0f} images/s ({seconds * 1e3:.1f} ms a batch)")
    state = ImageBatch(images, "first")
    start = time.perf_counter()
    for b in range(args.batches * 20):
        keys = BatchKeys(0, 1, np.arange(b * BATCH, (b + 1) * BATCH))
        for place, op in enumerate(aug.ops):
            op.draw(keys, stream_of(place, op), state)
    draw = (time.perf_counter() - start) / (args.batches * 20)
    print(f"drawing parameters: {draw * 1e3:.2f} ms a batch")


if __name__ == "__main__":
    main()
