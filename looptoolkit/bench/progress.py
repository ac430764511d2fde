"""What a benchmark says while it runs (`Progress`), and frameworks imported quietly."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import time
from types import ModuleType
from typing import IO, Any

__all__ = ["QUIET_ENV", "Progress", "quiet_env", "quiet_import"]

QUIET_ENV: dict[str, str] = {
    "TF_CPP_MIN_LOG_LEVEL": "3",  # TensorFlow's C++ logs (cpu_feature_guard, ...)
    "GRPC_VERBOSITY": "ERROR",
    "ABSL_MIN_LOG_LEVEL": "3",
    # Three frameworks share one GPU in a comparison: JAX would take 75% of its
    # memory up front and TensorFlow all of it; let both grow as they need.
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
}
"""Environment set (unless already set) before any framework is imported."""


def quiet_env() -> None:
    """Set ``QUIET_ENV`` in ``os.environ`` where the user has not set it."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def quiet_import(name: str) -> ModuleType:
    """Import module ``name`` with ``QUIET_ENV`` set; what it writes shows only if it fails.

    (TensorFlow's absl and oneDNN notices come before its own log level is read.)
    """
    quiet_env()
    if name in sys.modules:
        return sys.modules[name]
    streams, saved, error = (sys.stdout, sys.stderr), [os.dup(1), os.dup(2)], None
    with tempfile.TemporaryFile() as tmp:
        for stream, fd in zip(streams, (1, 2), strict=True):  # file descriptors 1, 2 to tmp
            stream.flush()
            os.dup2(tmp.fileno(), fd)
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            error = e
        finally:
            for stream, fd, copy in zip(streams, (1, 2), saved, strict=True):
                stream.flush()
                os.dup2(copy, fd)
                os.close(copy)
        if error is not None:
            tmp.seek(0)
            sys.stderr.write(tmp.read().decode(errors="replace"))
            raise error
    if name == "tensorflow":
        with contextlib.suppress(ImportError):
            import absl.logging

            absl.logging.set_verbosity(absl.logging.ERROR)
    return module


def _same_file(a: IO[str], b: IO[str]) -> bool:
    """Whether streams ``a`` and ``b`` write to one file, pipe or terminal (``2>&1``)."""
    try:
        x, y = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (AttributeError, OSError, ValueError):  # no file descriptor (io.StringIO, closed)
        return False
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


class Progress:
    """Stages on ``stream`` (stderr), results on stdout.

    A rich bar with the time left on a terminal (``live``), cleared when results are printed.
    Else plain lines, steps at most every ``every_s`` seconds, and none at all where ``stream``
    goes where stdout goes (``> file 2>&1``, a CI log): there the results stay short.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, live: bool | None = None, every_s: float = 2.0
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        if live is None:
            live = self.stream.isatty() and os.environ.get("TERM") != "dumb"
        self.live, self.every_s = live, every_s
        self.silent = not live and _same_file(self.stream, sys.stdout)
        self.started = self._last_line = time.perf_counter()
        self._bar: Any = None

    def elapsed(self) -> float:
        """Seconds since this object was made."""
        return time.perf_counter() - self.started

    def stage(self, text: str) -> None:
        """Start a stage: shown at once, in either mode."""
        self._last_line = float("-inf")
        self.step(text)

    def step(self, text: str, done: int | None = None, total: int | None = None) -> None:
        """Report ``done`` of ``total`` steps in the stage (plain: once ``every_s`` has passed)."""
        if self.silent:
            return
        text = f"[{self.elapsed():4.0f} s] {text}"
        if self.live:
            if self._bar is None:
                from rich.console import Console
                from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
                from rich.progress import Progress as Bar

                columns = (TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn())
                console = Console(file=self.stream, force_terminal=True)
                # Redrawn on each update only: no refresh thread competing with the timed loops.
                off: Any = dict.fromkeys(
                    ("auto_refresh", "redirect_stdout", "redirect_stderr"), False
                )
                self._bar = Bar(*columns, console=console, transient=True, **off)
                self._bar.add_task("", total=None)
                self._bar.start()
            self._bar.update(0, description=text, completed=done or 0, total=total)
            self._bar.refresh()
        elif time.perf_counter() - self._last_line >= self.every_s:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_line = time.perf_counter()

    def clear(self) -> None:
        """Remove the bar (before other output on the same terminal)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def emit(self, text: str = "") -> None:
        """Print result text on stdout, flushed, after clearing the bar."""
        self.clear()
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
        sys.stdout.flush()
