"""What a benchmark says while it runs, and frameworks imported quietly.

[`Progress`][looptoolkit.bench.progress.Progress] reports stages on stderr (a rich bar on a
terminal, plain lines elsewhere) and results on stdout;
[`quiet_import`][looptoolkit.bench.progress.quiet_import] swallows a framework's native log lines.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
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


def _flush() -> None:
    """Flush Python's stdout and stderr (before their file descriptors are swapped)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def _captured_fds() -> Iterator[IO[bytes]]:
    """Send whatever is written to file descriptors 1 and 2 to a temporary file meanwhile."""
    _flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as tmp:
        for fd in (1, 2):
            os.dup2(tmp.fileno(), fd)
        try:
            yield tmp
        finally:
            _flush()
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


def quiet_import(name: str) -> ModuleType:
    """Import module ``name`` with ``QUIET_ENV`` set and its native log lines swallowed.

    TensorFlow's absl and oneDNN notices come before its own log level is read; what the import
    wrote is shown only when it raises ``ImportError``.
    """
    quiet_env()
    if name in sys.modules:
        return sys.modules[name]
    with _captured_fds() as tmp:
        try:
            module = importlib.import_module(name)
        except ImportError:
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            if text.strip():
                sys.stderr.write(text)
            raise
    if name == "tensorflow":
        with contextlib.suppress(ImportError):
            import absl.logging

            absl.logging.set_verbosity(absl.logging.ERROR)
    return module


class Progress:
    """Stage-by-stage progress on ``stream`` (stderr); results on stdout, flushed at once.

    Args:
        stream: where progress goes (default: ``sys.stderr``).
        live: a rich progress bar with the time left, removed before results are printed
            (default: when ``stream`` is a terminal); else plain lines, one per stage.
        every_s: in plain mode, the longest silence within a stage before a
            [`step`][looptoolkit.bench.progress.Progress.step] is printed.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, live: bool | None = None, every_s: float = 2.0
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.live, self.every_s = live, every_s
        self.started = self._last_line = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None

    def elapsed(self) -> float:
        """Seconds since this object was made."""
        return time.perf_counter() - self.started

    def _prefix(self) -> str:
        """The elapsed time that starts each line."""
        return f"[{self.elapsed():4.0f} s] "

    def _write_line(self, text: str) -> None:
        """One plain line of progress."""
        self.stream.write(self._prefix() + text + "\n")
        self.stream.flush()
        self._last_line = time.perf_counter()

    def _show(self, text: str, done: int | None, total: int | None) -> None:
        """The live bar: ``text``, and ``done`` of ``total`` with the time left when known."""
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            # Redrawn on each update only: no refresh thread competing with the timed loops.
            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream, force_terminal=True),
                transient=True,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._bar.add_task("", total=None)
            self._bar.start()
        self._bar.update(
            self._task, description=self._prefix() + text, completed=done or 0, total=total
        )
        self._bar.refresh()

    def stage(self, text: str) -> None:
        """Start a stage: printed at once, in either mode."""
        if self.live:
            self._show(text, None, None)
        else:
            self._write_line(text)

    def step(self, text: str, done: int | None = None, total: int | None = None) -> None:
        """Report ``done`` of ``total`` steps in the stage (plain: once ``every_s`` has passed)."""
        if self.live:
            self._show(text, done, total)
        elif time.perf_counter() - self._last_line >= self.every_s:
            self._write_line(text)

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
