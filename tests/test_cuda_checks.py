"""Checks of the CUDA Loader a GPU run makes first (skipped without one; ``pytest -m cuda``).

Each one shows on a single GPU what the CPU tests with a recording fake
(``tests/adapters/test_torch_streams.py``) check by the order of calls: skipped
leaves stay the loop's own, the side stream waits for the loop's stream, batch
memory stays bounded over epochs and under a CPU that runs ahead, uploads do
not wait for a queued step, the staged path (packed leaves, casts, a
transform on the side stream) equals the host Loader, and so do block uploads,
whose kept batches hold their values. One more needs two GPUs.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader, normalize, to_device

pytestmark = pytest.mark.cuda

N = 1024
MIB = 1 << 20


@pytest.fixture
def cycles_per_ms(cuda: Any) -> float:
    """GPU clock cycles per millisecond, for ``torch.cuda._sleep``."""
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # warm up
    start.record()
    torch.cuda._sleep(10_000_000)
    stop.record()
    stop.synchronize()
    return 10_000_000 / start.elapsed_time(stop)


def test_cuda_skipped_leaves_stay_the_loops_own_numpy_arrays(cuda):
    """D1: every kept batch's ids equal the host Loader's, as the NumPy arrays passed."""
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((N, 8)).astype(np.float32), "ids": np.arange(N)}
    want = [b["ids"] for b in Loader(data, 64, seed=5)]
    got = list(Loader(data, 64, seed=5, device=cuda, prefetch=2, skip_keys=["ids"]))
    assert [type(b["ids"]) for b in got] == [np.ndarray] * len(want)
    for batch, ids in zip(got, want, strict=True):
        np.testing.assert_array_equal(batch["ids"], ids)


def test_cuda_the_prefetch_side_stream_sees_what_the_step_wrote(cuda, cycles_per_ms):
    """D3: data on the device, written by the loop's stream after a long kernel."""
    import torch

    x = torch.zeros(N, 8, device=cuda)
    rng = np.random.default_rng(0)
    data = {"x": x, "im": rng.integers(0, 255, (N, 3, 4, 4), dtype=np.uint8)}
    loader = Loader(data, 64, seed=5, device=cuda, prefetch=2)
    list(loader)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(500 * cycles_per_ms))  # queued: x is written 0.5 s from now
    x.fill_(1.0)
    stale = sum(int((b["x"] != 1).any()) for b in loader)
    assert stale == 0


def _images(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"im": rng.integers(0, 255, (n, 3, 64, 64), dtype=np.uint8), "y": np.arange(n)}


def test_cuda_reserved_memory_stays_flat_over_epochs(cuda):
    """D8: one side stream for every pass; a stream per pass strands its cached blocks."""
    import torch

    tf = normalize([127.5] * 3, [127.5] * 3, key="im")
    batch_bytes = 256 * 3 * 64 * 64 * (1 + 4)  # uint8 copy + float32 output
    loader = Loader(_images(4096), 256, device=cuda, prefetch=2, transform=tf)
    reserved = []
    for _ in range(6):
        list(loader)
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved())
    assert reserved[-1] - reserved[1] <= batch_bytes, [r // MIB for r in reserved]


def test_cuda_batch_memory_is_bounded_when_the_cpu_runs_ahead(cuda, cycles_per_ms):
    """D9: peak memory of a loop that never synchronises, its steps slower than the copies."""
    import torch

    prefetch = 2
    tf = normalize([127.5] * 3, [127.5] * 3, key="im")
    batch_bytes = 256 * 3 * 64 * 64 * (1 + 4)
    data = _images(256 * 32)
    list(Loader(data, 256, device=cuda, prefetch=prefetch, transform=tf))  # warm
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    for _ in Loader(data, 256, device=cuda, prefetch=prefetch, transform=tf):
        torch.cuda._sleep(int(20 * cycles_per_ms))  # no sync: the CPU runs ahead
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_reserved() - base
    # At most about 2 * (prefetch + 2) batches alive (docs/gpu.md), with allocator slack;
    # an epoch is 32 batches.
    assert peak <= (2 * (prefetch + 2) + 4) * batch_bytes, peak // MIB


def test_cuda_uploads_do_not_wait_for_a_queued_step_and_downloads_are_pageable(cuda, cycles_per_ms):
    """D7, D10: a pinned upload returns at once; the default never waits longer than a
    blocking copy; a default download is pageable (pinned only with non_blocking=True)."""
    import torch

    pageable = {"im": np.random.default_rng(0).integers(0, 255, (256, 3, 64, 64), np.uint8)}
    pinned = {"im": torch.from_numpy(pageable["im"]).pin_memory()}
    times = {}
    for name, batch, non_blocking in (
        ("pinned", pinned, None),
        ("pageable", pageable, None),
        ("blocking", pageable, False),
    ):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(200 * cycles_per_ms))
        t0 = time.perf_counter()
        to_device(batch, cuda, non_blocking=non_blocking)
        times[name] = time.perf_counter() - t0
        torch.cuda.synchronize()
    assert times["pinned"] < 0.05, times
    assert times["pageable"] <= times["blocking"] + 0.02, times
    src = {"a": torch.ones(4, device=cuda)}
    assert not to_device(src, "cpu")["a"].is_pinned()
    assert to_device(src, "cpu", non_blocking=True)["a"].is_pinned()


def test_cuda_staged_packed_cast_and_transformed_batches_equal_the_host_loaders(cuda):
    """The staged path: packed small leaves, a shrinking cast, a transform on the side stream."""
    rng = np.random.default_rng(0)
    data: dict[str, np.ndarray] = {
        f"f{i}": rng.standard_normal((N, 4)).astype(np.float32) for i in range(5)
    }
    data["im"] = rng.integers(0, 255, (N, 3, 8, 8), dtype=np.uint8)
    tf = normalize([100.0] * 3, [50.0] * 3, key="im")
    host = list(Loader(data, 64, seed=3, transform=tf))
    got = list(
        Loader(
            data, 64, seed=3, device=cuda, prefetch=2, transform=tf, dtype={np.float32: np.float16}
        )
    )
    assert len(got) == len(host)
    for g, h in zip(got, host, strict=True):
        for key, value in h.items():
            want = np.asarray(value) if key == "im" else np.asarray(value).astype(np.float16)
            np.testing.assert_allclose(g[key].float().cpu().numpy(), want, atol=1e-2)


def test_cuda_without_an_index_follows_the_constructing_threads_device(cuda):
    """D2: the DDP idiom, ``set_device(k)`` then ``device="cuda"`` (needs two GPUs)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    data = {"x": np.ones((256, 4), np.float32), "y": np.arange(256)}
    before = torch.cuda.current_device()
    torch.cuda.set_device(1)
    try:
        batches = list(Loader(data, 64, device="cuda", prefetch=2))
    finally:
        torch.cuda.set_device(before)
    assert {b["x"].device for b in batches} == {torch.device("cuda", 1)}


def test_cuda_block_uploads_equal_the_host_loader_and_kept_batches_hold(cuda, cycles_per_ms):
    """Block uploads: batches (cloned on the stream they are used on) equal the host Loader's,
    with the GPU behind the CPU and the loop on a stream of its own for part of the epoch, and
    batches kept to the end still hold their values."""
    import torch

    rng = np.random.default_rng(0)
    n = 4 * N
    data = {
        "x": rng.standard_normal((n, 8)).astype(np.float32),
        "y": np.arange(n),
        "im": rng.integers(0, 255, (n, 3, 4, 4), dtype=np.uint8),
    }
    want = list(Loader(data, 64, seed=3))
    loader = Loader(data, 64, seed=3, device=cuda, stats=True)
    own = torch.cuda.Stream(cuda)
    clones, kept = [], []
    it = iter(loader)
    for k in range(len(want)):
        stream = own if 20 <= k < 40 else torch.cuda.current_stream(cuda)
        with torch.cuda.stream(stream):
            torch.cuda._sleep(int(cycles_per_ms * 0.2))  # the step: the GPU falls behind
            batch = next(it)
            clones.append({key: value.clone() for key, value in batch.items()})
            if k % 5 == 0:
                kept.append((k, batch))
    assert next(it, None) is None
    torch.cuda.synchronize()
    assert loader.stats.block_batches > 1
    for k, batch in enumerate(clones):
        for key in data:
            np.testing.assert_array_equal(batch[key].cpu().numpy(), want[k][key])
    for k, batch in kept:
        for key in data:
            np.testing.assert_array_equal(batch[key].cpu().numpy(), want[k][key])
