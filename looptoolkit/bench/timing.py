"""Interleaved timing, machine description and result files, shared by every benchmark.

Protocol (BENCHMARKS.md): variants run interleaved (A B C A B C ...) after
warm-up, in one process; each variant reports the median with min and max over
the rounds. Absolute times are context; ratios taken in one run are the result.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Timing", "interleave", "machine_info", "progress", "write_results"]


@dataclass
class Timing:
    """Seconds per round of one variant."""

    name: str
    rounds: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        """Median seconds per round."""
        return statistics.median(self.rounds)

    @property
    def min(self) -> float:
        """Fastest round."""
        return min(self.rounds)

    @property
    def max(self) -> float:
        """Slowest round."""
        return max(self.rounds)

    def summary(self) -> dict[str, Any]:
        """Name, median, min, max (seconds), the rounds and any extra fields."""
        return {
            "name": self.name,
            "median_s": self.median,
            "min_s": self.min,
            "max_s": self.max,
            "rounds_s": self.rounds,
            **self.extra,
        }


def progress(total: int, description: str) -> Any:
    """A rich progress bar on a terminal, or a no-op object elsewhere."""
    try:
        from rich.progress import Progress
    except ImportError:
        return _NoProgress()
    bar = Progress(transient=True, disable=not sys.stderr.isatty())
    bar.start()
    task = bar.add_task(description, total=total)
    return _RichProgress(bar, task)


class _NoProgress:
    def advance(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class _RichProgress:
    def __init__(self, bar: Any, task: Any) -> None:
        self.bar, self.task = bar, task

    def advance(self, n: int = 1) -> None:
        self.bar.advance(self.task, n)

    def close(self) -> None:
        self.bar.stop()


def interleave(
    variants: Sequence[tuple[str, Callable[[], Any]]],
    *,
    rounds: int,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    description: str = "timing",
) -> list[Timing]:
    """Time each ``(name, fn)`` for ``rounds`` rounds, interleaved, after ``warmup`` calls.

    ``sync`` (a device synchronisation) runs before each clock read.
    """
    timings = [Timing(name) for name, _ in variants]
    bar = progress(rounds * len(variants), description)
    try:
        for _ in range(warmup):
            for _, fn in variants:
                fn()
            if sync is not None:
                sync()
        for _ in range(rounds):
            for timing, (_, fn) in zip(timings, variants, strict=True):
                if sync is not None:
                    sync()
                start = time.perf_counter()
                fn()
                if sync is not None:
                    sync()
                timing.rounds.append(time.perf_counter() - start)
                bar.advance()
    finally:
        bar.close()
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
    """CPU, cores, GPU, and the version of every framework already imported."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    versions = {}
    for name in ("numpy", "optree", "torch", "tensordict", "jax", "jaxlib", "tensorflow"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", "?")
    info["versions"] = versions
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def write_results(
    directory: str | Path, stem: str, payload: dict[str, Any], markdown: str
) -> list[Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` under ``directory``; return the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"{stem}.json"
    md_path = out / f"{stem}.md"
    json_path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    md_path.write_text(markdown)
    return [json_path, md_path]


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Timing):
        return obj.summary()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return str(obj)
