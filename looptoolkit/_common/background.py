"""Prefetch: one background thread that runs a batch source ahead of the loop.

The last step before the user's loop when a Loader has a ``device``: the thread
pulls batches (gathered and moved) from a generator into a bounded queue, up
to ``depth`` ahead. An exception in the thread reaches the consumer as a copy
of the same type, arguments and attributes (a ``SystemExit`` keeps its code),
with a note saying where it came from, chained to the original; leaving the
loop early (``break``, an exception, dropping the iterator) stops the thread;
a long read in the thread can ask [`stopping`][looptoolkit._common.background.stopping]
between its parts and end early, so that a stop waits for one part, not a batch.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import types
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["END", "Prefetcher", "Stopped", "stopping"]

# How often a blocked queue operation wakes up to check for shutdown (seconds).
_POLL_S = 0.05
# How long shutting down waits for the background thread to finish its batch.
_JOIN_S = 10.0


# The stop event of the pass whose background thread is the current thread.
_local = threading.local()


class Stopped(Exception):
    """Raised by a read in the background thread that was told to stop (never reaches a user)."""


def stopping() -> bool:
    """Whether the current thread is a Loader's background thread that was told to stop."""
    stop: threading.Event | None = getattr(_local, "stop", None)
    return stop is not None and stop.is_set()


class _End:
    """Put in the queue after the last batch."""


END = _End()


class _Failure:
    """An exception raised in the background thread, carried to the consumer."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _put(q: queue.Queue[Any], stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
        except queue.Full:
            continue
        return True
    return False


def _produce(batches: Iterator[Any], q: queue.Queue[Any], stop: threading.Event) -> None:
    # Runs in the background thread. It holds the queue, the event and the batch
    # source, never the consumer's iterator, so dropping that iterator frees it.
    _local.stop = stop
    try:
        while not stop.is_set():
            try:
                item = next(batches)
            except StopIteration:
                _put(q, stop, END)
                return
            if not _put(q, stop, item):
                return
    except BaseException as e:  # everything goes to the consumer, which re-raises it
        _put(q, stop, _Failure(e))
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def _shutdown(stop: threading.Event, q: queue.Queue[Any], thread: threading.Thread) -> None:
    stop.set()
    try:  # free a slot so that a blocked `put` returns and sees the event
        while True:
            q.get_nowait()
    except queue.Empty:
        pass
    if thread is not threading.current_thread():
        thread.join(_JOIN_S)


_NOTE = "Raised in looptoolkit.Loader's background thread"


def _reraise(error: BaseException) -> BaseException:
    """The exception to raise in the consumer for ``error``, raised in the background thread.

    A copy made without calling the constructor (which may take other
    arguments): the same type, ``args``, attributes and C-level fields (a
    ``SystemExit``'s ``code``, an ``OSError``'s ``errno``), with a note saying
    where it came from. The caller chains the original as its ``__cause__``.
    Where even that is impossible (a ``__new__`` that insists on its own
    arguments), the original object itself, with the note.
    """
    cls = type(error)
    try:
        new = cls.__new__(cls, *error.args)
    except Exception:
        error.add_note(_NOTE + ".")
        return error
    new.args = error.args
    for klass in cls.__mro__:
        if klass is BaseException:
            break
        for name, attr in vars(klass).items():
            # Fields set by a C constructor (SystemExit.code, OSError.errno, StopIteration.value).
            fields = (types.MemberDescriptorType, types.GetSetDescriptorType)
            if isinstance(attr, fields) and not name.startswith("__"):
                with contextlib.suppress(AttributeError, TypeError, ValueError):
                    value = getattr(error, name)
                    # An unset C field reads as None; setting None would make it set.
                    if value is not None or getattr(new, name, None) is not None:
                        setattr(new, name, value)
    state = getattr(error, "__dict__", None)
    if state:
        new.__dict__.update(state)
    new.__notes__ = [
        *getattr(error, "__notes__", ()),
        _NOTE + "; the original, with the thread's traceback, is chained above.",
    ]
    return new


class Prefetcher:
    """Runs a batch source in one daemon thread, ``depth`` batches ahead."""

    def __init__(self, batches: Iterator[Any], depth: int) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        stop = threading.Event()
        self.thread = threading.Thread(
            target=_produce,
            args=(batches, self.queue, stop),
            name="looptoolkit-loader-prefetch",
            daemon=True,
        )
        self.thread.start()
        # Stops the thread when the consumer's generator is collected, closed or fails.
        self.close = weakref.finalize(self, _shutdown, stop, self.queue, self.thread)

    def get(self) -> Any:
        """The next item; ``END`` after the last one."""
        get = self.queue.get
        while True:
            try:
                item = get(timeout=_POLL_S)
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    raise RuntimeError(
                        "looptoolkit.Loader's background thread ended without a result."
                    ) from None
                continue
            if isinstance(item, _Failure):
                self.close()
                original = item.error
                error = _reraise(original)
                try:
                    if error is original:
                        raise error
                    raise error from original
                finally:
                    # This frame is in the exception's traceback: holding the
                    # exception in its locals would make a reference cycle that
                    # keeps the failed pass (and its batches) alive until a gc run.
                    del item, original, error
            if item is END:
                self.close()
            return item
