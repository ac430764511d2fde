"""Loop statistics: where a training loop's time goes, waiting for data or in the step.

The outermost wrapper of a Loader's epoch when it is created with ``stats=True``:
[`timed`][looptoolkit._pipeline.stats.timed] counts the time inside ``next`` as waiting and the
time between batches as the user's step, into a [`LoaderStats`][looptoolkit.LoaderStats].
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from typing import Any

__all__ = ["LoaderStats", "timed"]


class LoaderStats:
    """Where the time of a training loop goes: waiting for data, or in the step.

    Measured by a [`Loader`][looptoolkit.Loader] created with ``stats=True``, over every epoch
    since creation (or the last [`reset`][looptoolkit.LoaderStats.reset]).

    Attributes:
        batches: batches handed to the loop.
        wait_s: seconds the loop spent waiting for the next batch (inside ``next``).
        step_s: seconds between handing out a batch and being asked for the next
            one: the user's step.
        tokens: with ragged leaves, the real elements of the batches built (the first
            ragged leaf's); 0 otherwise.
        token_slots: the elements those batches hold, padding included.
        rows: the rows those batches hold (documents for ``"pad"``/``"flat"``, packed rows
            for ``"pack"``/``"fit"``).
        truncated_tokens: elements cut off by ``long_rows="truncate"``.
        built: batches built with ragged leaves (prefetched ones included).
        source_rows: with a [`Mix`][looptoolkit.Mix], the rows of the batches built
            (prefetched ones included) by source name; empty otherwise.
        source_tokens: with a Mix of ragged sources (``"pad"``/``"flat"`` batches), the
            elements of the first ragged leaf in those rows, by source name.
        prefetch_mode: where the Loader makes its batches: ``"thread"`` (one
            background thread, ahead of the loop) or ``"inline"`` (the loop's own
            thread, moves issued ahead); see the Loader's ``prefetch_mode``.
        block_batches: batches per block upload where batches go to a CUDA device
            with torch, or from the host to a JAX device, in blocks (gathered,
            copied and handed over K at a time: the largest block, ``K``); 0 where
            each batch is moved by itself.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader
        >>> loader = Loader({"x": np.zeros((8, 2))}, 4, stats=True)
        >>> for batch in loader:
        ...     pass
        >>> loader.stats.batches, 0.0 <= loader.stats.data_wait_fraction <= 1.0
        (2, True)
        >>> loader.stats.prefetch_mode
        'inline'
    """

    __slots__ = (
        "batches",
        "block_batches",
        "built",
        "prefetch_mode",
        "remote",
        "rows",
        "source_rows",
        "source_tokens",
        "step_s",
        "token_slots",
        "tokens",
        "truncated_tokens",
        "wait_s",
    )

    def __init__(self, prefetch_mode: str = "inline") -> None:
        self.prefetch_mode = prefetch_mode
        self.block_batches = 0  # how batches are made, not a count: `reset` keeps it
        # The counts of the data's reads from a bucket (a store's `remote_reads`), or None.
        self.remote: Any = None
        self.reset()

    @property
    def remote_reads(self) -> dict[str, int]:
        """Requests and bytes of the data in a bucket, in this process since the Loader was made.

        ``requests`` (LISTs and retries included), ``bytes_fetched``, ``bytes_used``
        (the objects' bytes the reads took), ``retries``, ``cache_hits`` and
        ``cache_bytes`` (served by the disk cache), ``in_flight_bound`` (the most
        requests allowed in flight), ``max_in_flight`` (reached) and
        ``ahead_bytes_bound`` (the most bytes fetched ahead of the reads). Empty without
        such data. Not reset by [`reset`][looptoolkit.LoaderStats.reset].
        """
        return self.remote() if self.remote is not None else {}

    @property
    def data_wait_fraction(self) -> float:
        """Share of the loop's time spent waiting for data (0 when nothing was timed).

        Near 1: the loop is data-bound, the model waits for batches. Near 0: the
        step dominates and faster loading would not help.
        """
        total = self.wait_s + self.step_s
        return self.wait_s / total if total > 0 else 0.0

    @property
    def padding_efficiency(self) -> float:
        """Real elements over the elements the batches hold (1.0: no padding; ragged leaves)."""
        return self.tokens / self.token_slots if self.token_slots else 1.0

    @property
    def rows_per_batch(self) -> float:
        """Mean rows per batch built (ragged leaves; 0 when none was built)."""
        return self.rows / self.built if self.built else 0.0

    def add_tokens(self, tokens: int, slots: int, rows: int, truncated: int) -> None:
        """Count one ragged batch: its real elements, its elements with padding, its rows."""
        self.tokens += tokens
        self.token_slots += slots
        self.rows += rows
        self.truncated_tokens += truncated
        self.built += 1

    def reset(self) -> None:
        """Start counting again from zero."""
        self.batches = 0
        self.wait_s = 0.0
        self.step_s = 0.0
        self.tokens = 0
        self.token_slots = 0
        self.rows = 0
        self.truncated_tokens = 0
        self.built = 0
        self.source_rows: dict[str, int] = {}
        self.source_tokens: dict[str, int] = {}

    def as_dict(self) -> dict[str, float | str]:
        """The counters, the data-wait fraction, the prefetch mode (and ragged data's tokens)."""
        out: dict[str, float | str] = {
            "batches": self.batches,
            "wait_s": self.wait_s,
            "step_s": self.step_s,
            "data_wait_fraction": self.data_wait_fraction,
            "prefetch_mode": self.prefetch_mode,
        }
        if self.block_batches:
            out["block_batches"] = self.block_batches
        remote = self.remote_reads
        if remote:
            out.update({f"remote_{k}": v for k, v in remote.items()})
        if self.built:
            out.update(
                tokens=self.tokens,
                token_slots=self.token_slots,
                truncated_tokens=self.truncated_tokens,
                padding_efficiency=self.padding_efficiency,
                rows_per_batch=self.rows_per_batch,
            )
        return out

    def __repr__(self) -> str:
        tokens = (
            f", padding_efficiency={self.padding_efficiency:.3f}, "
            f"rows_per_batch={self.rows_per_batch:.1f}, truncated_tokens={self.truncated_tokens}"
            if self.built
            else ""
        )
        blocks = f", block_batches={self.block_batches}" if self.block_batches else ""
        return (
            f"LoaderStats(batches={self.batches}, wait_s={self.wait_s:.6f}, "
            f"step_s={self.step_s:.6f}, data_wait_fraction={self.data_wait_fraction:.3f}, "
            f"prefetch_mode={self.prefetch_mode!r}{blocks}{tokens})"
        )


def timed(source: Iterator[Any], stats: LoaderStats) -> Generator[Any, None, None]:
    """``source``, with time inside ``next`` counted as waiting and time outside as step."""
    clock = time.perf_counter
    last = None
    try:
        while True:
            start = clock()
            if last is not None:
                stats.step_s += start - last
            try:
                item = next(source)
            except StopIteration:
                return
            last = clock()
            stats.wait_s += last - start
            stats.batches += 1
            yield item
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
