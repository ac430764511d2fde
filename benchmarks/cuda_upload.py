"""Per-batch cost of getting shuffled host batches onto a CUDA GPU: hand loops and the Loader.

Run from the repository root on a machine with a CUDA GPU::

    python -m benchmarks.cuda_upload [--rounds 3] [--profile]

Two workloads of ``looptoolkit compare`` (``index``: one int64 leaf; ``tabular``: float32
(N, 64) + int64 ids; N = 300,000, batch 300, 1,000 batches an epoch). Per workload it times
whole epochs (the best of ``--rounds``, after a warm-up; a device synchronisation before and
after each) of:

- three hand loops: ``take`` + ``torch.from_numpy(...).to(dev, non_blocking=True)`` from the
  fresh (pageable) batch; the same through ``.pin_memory()``; ``take`` into a ring of three
  pinned buffers, each reused after an event recorded behind its copy;
- the Loader with ``device=`` as a user writes it (defaults: batches issued ahead in the loop's
  thread, uploaded in blocks of ``K`` batches: ``K`` is printed), the same with block uploads
  off (each batch staged by itself, as before them), with ``prefetch=0``, and with
  ``prefetch_mode="thread"``.

``--profile`` adds a cProfile of one epoch of the default Loader on ``tabular``. No step runs:
this is the cost the loop adds to a step. Last measured: docs/gpu.md ("Measured").
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

N, B = 300_000, 300


def _timeit(torch: Any, name: str, fn: Callable[[], None], rounds: int) -> None:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    best = min(times)
    print(f"{name:46s} {best * 1e3:8.2f} ms/epoch {best / (N // B) * 1e6:7.1f} us/batch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    import torch

    from looptoolkit import Loader
    from looptoolkit.adapters import _torch_blocks

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure", file=sys.stderr)
        return 2
    dev = torch.device("cuda", torch.cuda.current_device())
    print(f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}")
    rng = np.random.default_rng(0)
    perm = rng.permutation(N)
    tabular = {"x": rng.standard_normal((N, 64)).astype(np.float32), "y": np.arange(N)}

    def pageable(data: dict[str, np.ndarray]) -> Callable[[], None]:
        def run() -> None:
            for i in range(0, N, B):
                idx = perm[i : i + B]
                {
                    k: torch.from_numpy(v.take(idx, axis=0)).to(dev, non_blocking=True)
                    for k, v in data.items()
                }

        return run

    def pinned(data: dict[str, np.ndarray]) -> Callable[[], None]:
        def run() -> None:
            for i in range(0, N, B):
                idx = perm[i : i + B]
                {
                    k: torch.from_numpy(v.take(idx, axis=0)).pin_memory().to(dev, non_blocking=True)
                    for k, v in data.items()
                }

        return run

    def ring(data: dict[str, np.ndarray], slots: int = 3) -> Callable[[], None]:
        buffers = [
            {
                k: torch.from_numpy(np.empty((B, *v.shape[1:]), v.dtype)).pin_memory()
                for k, v in data.items()
            }
            for _ in range(slots)
        ]
        arrays = [{k: t.numpy() for k, t in b.items()} for b in buffers]
        events: list[Any] = [None] * slots

        def run() -> None:
            for j, i in enumerate(range(0, N, B)):
                s = j % slots
                if events[s] is not None:
                    events[s].synchronize()
                idx = perm[i : i + B]
                for k, v in data.items():
                    v.take(idx, axis=0, out=arrays[s][k], mode="clip")
                    buffers[s][k].to(dev, non_blocking=True)
                events[s] = torch.cuda.Event()
                events[s].record()

        return run

    def loader(data: dict[str, np.ndarray], blocks: bool = True, **kw: Any) -> Callable[[], None]:
        it = Loader(data, B, seed=0, device=dev, **kw)

        def run() -> None:
            budget = _torch_blocks.BLOCK_BYTES
            _torch_blocks.BLOCK_BYTES = budget if blocks else 0  # read when a pass starts
            try:
                for _ in it:
                    pass
            finally:
                _torch_blocks.BLOCK_BYTES = budget

        return run

    def block_batches(data: dict[str, np.ndarray]) -> int:
        counted = Loader(data, B, seed=0, device=dev, stats=True)
        for _ in counted:
            pass
        return counted.stats.block_batches

    for name, data in (("index", {"i": np.arange(N)}), ("tabular", tabular)):
        print(f"--- {name} (block uploads of K = {block_batches(data)} batches)")
        for label, fn in (
            ("hand: take + .to(non_blocking), pageable", pageable(data)),
            ("hand: take + pin_memory() + .to(non_blocking)", pinned(data)),
            ("hand: take into a pinned ring of 3 + events", ring(data)),
            ("Loader(device=...)", loader(data)),
            ("Loader(device=...), block uploads off", loader(data, blocks=False)),
            ("Loader(device=..., prefetch=0)", loader(data, prefetch=0)),
            ('Loader(device=..., prefetch_mode="thread")', loader(data, prefetch_mode="thread")),
        ):
            _timeit(torch, label, fn, args.rounds)
    if args.profile:
        run = loader(tabular)
        run()
        profile = cProfile.Profile()
        profile.enable()
        run()
        torch.cuda.synchronize()
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
