"""One pass over an epoch of a Loader: the iterator the user's ``for`` loop holds.

The step between the Loader's epoch stream
([`looptoolkit._pipeline.stream`][looptoolkit._pipeline.stream]) and the user's loop: it binds the
epoch when its first batch is asked for, counts the batches it hands out (what ``state_dict``
describes), completes the epoch on the cursor after the last one, and closes the stream when the
loop leaves early, telling the cursor how far it got (two such passes in a row that got as far
ran the same batches: the cursor warns).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from looptoolkit._pipeline.stream import Progress

__all__ = ["CLOSED", "UNSTARTED", "LoaderIterator"]


class LoaderIterator:
    """One pass over an epoch of a ``Loader``; ``len()`` is the number of batches left.

    The pass takes its epoch from the Loader's cursor when its first batch is asked for (an
    ``iter()`` that is never advanced takes nothing), and moves the cursor to the next epoch when it
    hands out its last batch. Leaving the loop early (``break``, an exception, dropping the
    iterator, [`close`][looptoolkit.loader.LoaderIterator.close]) stops the background thread, if
    there is one, and leaves the cursor where it was: the next pass runs the same epoch again. An
    exception while producing a batch reaches the loop and ends the pass the same way.
    """

    __slots__ = ("__weakref__", "_era", "_loader", "_progress", "_source", "_token")

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._source: Iterator[Any] = UNSTARTED
        self._progress: Progress | None = None
        self._token = self._era = -1

    def __iter__(self) -> LoaderIterator:
        return self

    def __next__(self) -> Any:
        if self._source is UNSTARTED:  # the first batch asked for: bind the epoch
            try:
                self._loader._bind(self)
            except BaseException:
                self._source = CLOSED
                raise
        try:
            item = next(self._source)
        except StopIteration:
            self._source = CLOSED
            raise
        except BaseException:
            self.close()  # an error ends the pass; the cursor stays where it was
            raise
        progress = self._progress
        progress.consumed += 1  # type: ignore[union-attr]  # set when bound
        if progress.consumed == progress.total:  # type: ignore[union-attr]
            self._loader._cursor.complete(self._token)
        return item

    def __len__(self) -> int:
        progress = self._progress
        if self._source is CLOSED:
            return 0
        if progress is None:  # not bound yet: what the cursor's pass would yield
            return self._loader._order.num_batches(self._loader._cursor.offset)
        return progress.total - progress.consumed

    def close(self) -> None:
        """Stop the pass: the background thread (if any) ends and nothing more is yielded."""
        early = self._running()
        source, self._source = self._source, CLOSED
        if hasattr(source, "close"):
            source.close()
        if early:
            self._ended_early()

    def __del__(self) -> None:
        # A pass dropped before its end (a `break` drops it at once) ended early too; the
        # stream's generator stops its thread as it is collected.
        if self._running():
            self._ended_early()

    def _ended_early(self) -> None:
        progress = self._progress
        assert progress is not None  # running: bound
        self._loader._cursor.ended_early(progress.epoch, self._era, progress.consumed)

    def _running(self) -> bool:
        """Bound, neither closed nor past its epoch's last batch."""
        progress = self._progress
        return (
            progress is not None
            and self._source is not CLOSED
            and progress.consumed < progress.total
        )


UNSTARTED: Iterator[Any] = iter(())  # the source of a pass not bound yet


CLOSED: Iterator[Any] = iter(())  # the source of a closed or finished pass
