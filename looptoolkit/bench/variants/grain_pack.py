"""grain's concat-then-split packer on the ``tokens`` workload (a peer; needs ``grain``).

A grain user feeds documents as a ``MapDataset`` of ``{"tokens": array}`` examples, shuffles
it, turns it into an ``IterDataset``, packs it with
``grain.experimental.ConcatThenSplitIterDataset`` into rows of ``seq_len`` and batches the
rows. grain gives each row its ``tokens``, ``tokens_segment_ids`` (the row's pieces from 1,
0 for padding) and ``tokens_positions`` (restarting at each piece); `as_packed` adds the
``cu_seqlens`` and ``max_seqlen`` that a varlen attention kernel takes, as a grain user would.

grain's first-fit packer (``FirstFitPackIterDataset``) is no peer here: it refuses a document
longer than its row (the workload's documents reach 4,000 tokens, the rows 2,048) unless the
documents are truncated first, which drops tokens, and it keeps documents whole in padded rows,
a different batching from the pack floor's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from looptoolkit.bench.variants import tokens
from looptoolkit.bench.variants.epochs import EpochPipeline

__all__ = ["Documents", "as_packed", "epoch_seed", "grain_pack", "grain_variants", "packed"]

KEY = "tokens"


class Documents:
    """The corpus as grain's random-access source: ``{"tokens": view}`` per document."""

    def __init__(self, corpus: tokens.Corpus) -> None:
        self._values, self._offsets = corpus.values, corpus.offsets.tolist()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {KEY: self._values[self._offsets[i] : self._offsets[i + 1]]}


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of grain's shuffle in ``epoch``: a pure function of ``(seed, epoch)``."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def grain_pack(
    data: Any, batch_size: int, *, seed: int = 0, s: tokens.Settings = tokens.SETTINGS
) -> EpochPipeline:
    """Concat-then-split by grain into ``s.rows`` rows of ``s.seq_len`` a batch, its own shuffle.

    ``MapDataset.source(documents).shuffle(seed)`` (a new seed each epoch, `epoch_seed`), then
    `packed`. ``batch_size`` is unused (the settings say how many rows a batch has).
    """
    import grain

    del batch_size
    corpus = tokens.Corpus.of(data)
    source = Documents(corpus)

    def epoch_fn(epoch: int) -> Iterator[tokens.PackedBatch]:
        return packed(grain.MapDataset.source(source).shuffle(seed=epoch_seed(seed, epoch)), s)

    count = tokens.batch_count("pack", corpus.lengths, s)
    return EpochPipeline(epoch_fn, count, name="grain_pack")


def packed(documents: Any, s: tokens.Settings = tokens.SETTINGS) -> Iterator[tokens.PackedBatch]:
    """The packed batches of a grain ``MapDataset`` of documents, in its order.

    ``.to_iter_dataset()`` (grain's default read options),
    ``ConcatThenSplitIterDataset(length_struct={"tokens": seq_len})``, ``.batch(rows)``, each
    batch converted by `as_packed`.
    """
    import grain

    rows = grain.experimental.ConcatThenSplitIterDataset(
        documents.to_iter_dataset(), length_struct={KEY: s.seq_len}
    )
    return map(as_packed, rows.batch(s.rows))


def as_packed(batch: dict[str, np.ndarray]) -> tokens.PackedBatch:
    """A packed batch of grain as the workload's `PackedBatch`: ``cu_seqlens`` from the segments.

    A piece starts at each row start and wherever the segment id changes; the padding (segment
    0, only at the end of the epoch's last row) is a piece of its own, as in the Loader's
    ``Packed``.
    """
    values, segments = batch[KEY], batch[f"{KEY}_segment_ids"]
    seq_len, flat = values.shape[1], segments.reshape(-1)
    size, m = flat.size, int(np.count_nonzero(flat))
    new = np.ones(m, bool)
    new[1:] = flat[1:m] != flat[: m - 1]
    new[::seq_len] = True
    cu = np.append(np.flatnonzero(new), [m, size] if m < size else [size]).astype(np.int32)
    max_seqlen = int(np.diff(cu).max())
    return tokens.PackedBatch(values, segments, batch[f"{KEY}_positions"], cu, max_seqlen)


LABEL = (
    "grain: MapDataset of {'tokens': view}.shuffle(seed).to_iter_dataset(), "
    "ConcatThenSplitIterDataset(seq_len 2,048), batch(4); cu_seqlens from its segment ids "
    "(the conversion counted)"
)


def grain_variants(backend: str) -> tuple[Any, ...]:
    """The grain peer of the pack batching (left out of a run where grain is missing)."""
    from looptoolkit.bench.variants import Variant, loop

    fn = loop(grain_pack, host=True)
    peer = Variant("grain-pack", backend, LABEL, fn, slow=True, needs=("grain",))
    return (tokens.on_tokens(peer, "pack"),)
