"""The one timing loop of every benchmark: interleaved rounds after warm-up, medians.

Variants run in one process, interleaved (A B C A B C ...), after warm-up; each reports the
median with min and max over the rounds. On shared, noisy machines a ratio taken in one run is
the figure that holds; an absolute time is context.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from looptoolkit.bench.results import Row

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = [
    "Clock",
    "CudaEventClock",
    "HostClock",
    "Timing",
    "interleave",
    "load_text",
    "machine_info",
]


@dataclass
class Timing:
    """Seconds per round of one variant.

    Examples:
        >>> t = Timing("a", [0.3, 0.1, 0.2])
        >>> t.median, t.min, t.max
        (0.2, 0.1, 0.3)
    """

    name: str
    rounds: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    median = property(lambda self: statistics.median(self.rounds), doc="Median seconds.")
    min = property(lambda self: min(self.rounds), doc="Fastest round.")
    max = property(lambda self: max(self.rounds), doc="Slowest round.")

    def summary(self) -> dict[str, Any]:
        """Name, median, min, max (seconds), the rounds and any extra fields."""
        out = {"name": self.name, "median_s": self.median, "min_s": self.min, "max_s": self.max}
        return {**out, "rounds_s": self.rounds, **self.extra}


class Clock(Protocol):
    """Reads the time of one round: ``start()`` before it, ``stop()`` (seconds) after."""

    def start(self) -> None: ...  # noqa: D102

    def stop(self) -> float: ...  # noqa: D102


class HostClock:
    """``time.perf_counter``, with an optional device synchronisation before each reading."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.sync, self._start = sync, 0.0

    def start(self) -> None:
        """Synchronise, then read the clock."""
        if self.sync is not None:
            self.sync()
        self._start = time.perf_counter()

    def stop(self) -> float:
        """Synchronise, then return the seconds since ``start``."""
        if self.sync is not None:
            self.sync()
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


def interleave(
    variants: Sequence[tuple[str, Callable[[], Any]]],
    *,
    rounds: int,
    warmup: int = 1,
    repeat: int = 1,
    clock: Clock | None = None,
    collect: bool = True,
    progress: Progress | None = None,
    label: str = "timing",
) -> list[Row]:
    """Time each ``(name, fn)`` for ``rounds`` rounds, interleaved, after ``warmup`` rounds.

    A round calls ``fn`` ``repeat`` times between two readings of ``clock`` (default: a
    `HostClock` without sync) and records seconds per call; a ``fn`` that times itself returns
    its seconds as a float, and the round records that. ``collect=False``: the garbage collector
    off meanwhile (as in ``timeit``). ``progress`` gets "round r/R" and the time left.

    Examples:
        >>> [t.name for t in interleave([("a", lambda: 1), ("b", lambda: 2)], rounds=3)]
        ['a', 'b']
        >>> interleave([("own", lambda: 0.5)], rounds=2)[0].rounds_s
        [0.5, 0.5]
    """
    clock = HostClock() if clock is None else clock
    timings = [Row(name, extra={"repeat": repeat} if repeat > 1 else {}) for name, _ in variants]
    enabled = gc.isenabled()
    if not collect:
        gc.collect()
        gc.disable()
    started = time.perf_counter()
    try:
        for r in range(-warmup, rounds):
            if progress is not None:
                done = time.perf_counter() - started
                left = f", about {done / (r + warmup) * (rounds - r):.0f} s left" if r > 0 else ""
                what = f"warm-up round {r + warmup + 1}/{warmup}" if r < 0 else ""
                what = what or f"round {r + 1}/{rounds}"
                progress.step(f"{label}: {what}{left}", max(r, 0), rounds)
            for timing, (_, fn) in zip(timings, variants, strict=True):
                if r < 0:  # warm-up: no clock
                    for _ in range(repeat):
                        fn()
                    continue
                clock.start()
                for _ in range(repeat):
                    own = fn()
                seconds = clock.stop() / repeat
                timing.rounds_s.append(own if type(own) is float else seconds)
    finally:
        if enabled and not gc.isenabled():
            gc.enable()
    if progress is not None:
        progress.step(f"{label}: done in {time.perf_counter() - started:.0f} s")
    return timings


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """CPU, cores, load average (how busy the machine was), GPU, versions of imported frameworks."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    names = ("numpy", "optree", "torch", "tensordict", "jax", "jaxlib", "tensorflow")
    modules = {name: sys.modules[name] for name in names if name in sys.modules}
    info["versions"] = {name: getattr(m, "__version__", "?") for name, m in modules.items()}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
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
