"""What a benchmark says while it runs: one line per stage, and frameworks imported quietly.

[`Progress`][looptoolkit.bench.progress.Progress] reports every stage of a run on stderr: on a
terminal as a rich progress bar with the time left (removed before results are printed);
anywhere else (a log file, a pipe) as plain lines, one per stage, plus a line
within a long stage whenever a couple of seconds have passed since the last one.
Results go to stdout through [`Progress.emit`][looptoolkit.bench.progress.Progress.emit], flushed at
once, so that a log of ``2>&1`` keeps them in order.

[`quiet_import`][looptoolkit.bench.progress.quiet_import] imports a framework without the log lines
its native code writes straight to the process's stderr (TensorFlow's absl and oneDNN notices
come before its own log level is read); what was written is shown only when
the import fails.
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


@contextlib.contextmanager
def _captured_fds() -> Iterator[IO[bytes]]:
    """Send whatever is written to file descriptors 1 and 2 to a temporary file meanwhile."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield tmp
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def quiet_import(name: str) -> ModuleType:
    """Import module ``name`` with ``QUIET_ENV`` set and its native log lines swallowed.

    Raises:
        ImportError: as ``import`` does; what the import wrote is printed first.
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
    """Stage-by-stage progress on stderr; results on stdout.

    Args:
        stream: where progress goes (default: ``sys.stderr``).
        live: a rich progress bar, redrawn in place (default: when ``stream`` is a terminal).
        every_s: in plain mode, the longest silence within a stage before a
            [`step`][looptoolkit.bench.progress.Progress.step] is printed.

    Examples:
        >>> import io
        >>> out = io.StringIO()
        >>> p = Progress(out, live=False)
        >>> p.stage("tabular: checking 3 variants")
        >>> out.getvalue().split("] ")[1].strip()
        'tabular: checking 3 variants'
    """

    def __init__(
        self, stream: IO[str] | None = None, *, live: bool | None = None, every_s: float = 2.0
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.live = live
        self.every_s = every_s
        self.started = time.perf_counter()
        self._last_line = self.started
        self._bar: Any = None
        self._task: Any = None

    def elapsed(self) -> float:
        """Seconds since this object was made."""
        return time.perf_counter() - self.started

    def _prefix(self) -> str:
        return f"[{self.elapsed():4.0f} s] "

    def _write_line(self, text: str) -> None:
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
        """Report progress within the current stage (``done`` of ``total`` steps, if known).

        On a terminal the bar shows it at once; in plain mode it is printed only
        when ``every_s`` seconds have passed since the last line.
        """
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
