"""Prefetch: one background thread that runs a batch source ahead of the loop.

The last step before the user's loop when a Loader has a ``device``: the thread
pulls batches (gathered and moved) from a generator into a bounded queue, up
to ``depth`` ahead. An exception in the thread reaches the consumer, re-raised
with its type and chained to the original; leaving the loop early (``break``, an
exception, dropping the iterator) stops the thread.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["END", "Prefetcher"]

# How often a blocked queue operation wakes up to check for shutdown (seconds).
_POLL_S = 0.05
# How long shutting down waits for the background thread to finish its batch.
_JOIN_S = 10.0


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


def _reraise(error: BaseException) -> BaseException:
    """The exception to raise in the consumer for one raised in the background thread."""
    message = f"{type(error).__name__} in looptoolkit.Loader's background thread: {error}"
    try:
        new = type(error)(message)
    except Exception:  # an exception type that takes other arguments
        new = RuntimeError(message)
    else:
        new.__dict__.update(getattr(error, "__dict__", {}))
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
                raise _reraise(item.error) from item.error
            if item is END:
                self.close()
            return item
