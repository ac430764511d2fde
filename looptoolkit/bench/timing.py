"""The one timing loop of every benchmark (interleaved rounds after warm-up), and the machine."""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from looptoolkit.bench.results import Row

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["Clock", "CudaEventClock", "HostClock", "interleave", "load_text", "machine_info"]


class HostClock:
    """``time.perf_counter``, with an optional device synchronisation before each reading."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self._sync, self._start = sync or (lambda: None), 0.0

    def start(self) -> None:
        """Synchronise, then read the clock."""
        self._sync()
        self._start = time.perf_counter()

    def stop(self) -> float:
        """Synchronise, then return the seconds since ``start``."""
        self._sync()
        return time.perf_counter() - self._start


class CudaEventClock:
    """CUDA events recorded around the round on the current stream (needs torch with CUDA)."""

    def __init__(self) -> None:
        import torch

        self._cuda = torch.cuda
        self._begin, self._end = (torch.cuda.Event(enable_timing=True) for _ in range(2))

    def start(self) -> None:
        """Wait for the device, then record the start event."""
        self._cuda.synchronize()
        self._begin.record()

    def stop(self) -> float:
        """Record the end event, wait for it, return the seconds between the events."""
        self._end.record()
        self._end.synchronize()
        return float(self._begin.elapsed_time(self._end)) / 1e3


Clock = HostClock | CudaEventClock
"""What reads a round: ``start()`` before it, ``stop()`` (seconds) after."""


def interleave(
    calls: Sequence[tuple[str, Callable[[], Any]]],
    *,
    rounds: int,
    warmup: int = 1,
    repeat: int = 1,
    clock: Clock | None = None,
    collect: bool = True,
    progress: Progress | None = None,
    label: str = "timing",
) -> list[Row]:
    """Time each ``(name, fn)`` for ``rounds`` rounds, interleaved (A B C A B C ...).

    After ``warmup`` rounds, a round calls ``fn`` ``repeat`` times between two readings of
    ``clock`` (default: a `HostClock`) and records seconds per call, or the float ``fn`` returns
    (it timed itself). ``collect=False``: no garbage collection meanwhile (as in ``timeit``).
    On a shared, noisy machine a ratio taken in one run is the figure that holds.

    Examples:
        >>> rows = interleave([("a", lambda: 1), ("own", lambda: 0.5)], rounds=2)
        >>> [row.name for row in rows], rows[1].rounds_s, rows[1].median_s
        (['a', 'own'], [0.5, 0.5], 0.5)
    """
    clock = HostClock() if clock is None else clock
    rows = [Row(name, extra={"repeat": repeat} if repeat > 1 else {}) for name, _ in calls]
    enabled = gc.isenabled()
    if not collect:
        gc.collect()
        gc.disable()
    started = time.perf_counter()
    try:
        for r in range(-warmup, rounds):
            if progress is not None:
                spent = time.perf_counter() - started
                left = f", about {spent / (r + warmup) * (rounds - r):.0f} s left" if r > 0 else ""
                what = f"warm-up {r + warmup + 1}/{warmup}" if r < 0 else f"round {r + 1}/{rounds}"
                progress.step(f"{label}: {what}{left}", max(r, 0), rounds)
            for row, (_, fn) in zip(rows, calls, strict=True):
                if r >= 0:  # warm-up rounds read no clock
                    clock.start()
                for _ in range(repeat):
                    own = fn()
                if r >= 0:
                    seconds = clock.stop() / repeat
                    row.rounds_s.append(own if type(own) is float else seconds)
    finally:
        if enabled:
            gc.enable()
    if progress is not None:
        progress.step(f"{label}: done in {time.perf_counter() - started:.0f} s")
    return rows


def machine_info() -> dict[str, Any]:
    """CPU, cores, load average (how busy the machine was), GPU, versions of imported frameworks."""
    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((s.partition(":")[2] for s in f if s.startswith("model name")), "").strip()
    names = (
        "numpy",
        "optree",
        "torch",
        "tensordict",
        "jax",
        "jaxlib",
        "tensorflow",
        "transformers",
        "datasets",
        "torchdata",
        "grain",
        "torchvision",
        "kornia",
        "keras",
        "zarr",
        "obstore",
        "s3fs",
        "pyarrow",
        "streaming",
        "litdata",
    )
    info: dict[str, Any] = {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else [],
        "versions": {
            n: getattr(sys.modules[n], "__version__", "?") for n in names if n in sys.modules
        },
    }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpu"], info["cuda"] = torch.cuda.get_device_name(), torch.version.cuda
    return info


def load_text(machine: dict[str, Any]) -> str:
    """``"; load average 1.9 / 2.5 / 2.6 (...)"`` from ``machine_info``, or ``""``.

    Examples:
        >>> load_text({"load_average": [1.5, 2.0, 2.25], "cores": 2})
        '; load average 1.5 / 2 / 2.25 (1 / 5 / 15 min, at the end; 2 cores)'
    """
    if not (load := machine.get("load_average")):
        return ""
    figures = " / ".join(f"{x:g}" for x in load[:3])
    return f"; load average {figures} (1 / 5 / 15 min, at the end; {machine['cores']} cores)"
