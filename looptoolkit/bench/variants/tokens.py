"""The ``tokens`` workload's hand loops: vectorised NumPy plans and layouts, the floors.

A corpus is one flat token array and ``n + 1`` offsets. Each layout has two hand loops, the
faster of which is its floor: ``"copy"`` (slice copies into a new array) and ``"take"`` (one
``take`` of a repeat-built index). Every plan is a pure function of ``(seed, epoch)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from looptoolkit.bench.variants.epochs import EpochPipeline, split_batches

__all__ = ["LAYOUTS", "SETTINGS", "Corpus", "FlatBatch", "PackedBatch", "PaddedBatch"]
__all__ += ["Settings", "hand_loop", "make_corpus", "plan"]


@dataclass(frozen=True)
class Settings:
    """The batches of the workload: documents per batch, budget, packed rows and their length."""

    batch: int = 32
    budget: int = 8192  # tokens per batch, padding counted
    seq_len: int = 2048
    rows: int = 4  # packed rows per batch: 8,192 tokens, as the budget
    window: int = 50  # batches per length-sorted window (HF's megabatches)


SETTINGS = Settings()
LAYOUTS = ("pad", "group", "budget", "pack", "flat")
"""The workload's batchings: their output layout is `layout_of` each."""


def layout_of(batching: str) -> str:
    """The output layout of a batching: ``pad``, ``flat`` or ``pack``."""
    return "pad" if batching in ("pad", "group", "budget") else batching


class PaddedBatch(NamedTuple):
    """A padded batch: ``values (B, L)``, ``mask (B, L)`` bool, ``lengths (B,)``."""

    values: Any
    mask: Any
    lengths: Any


class FlatBatch(NamedTuple):
    """A padding-free batch: ``values (T,)``, ``cu_seqlens (B + 1,)``, ``position_ids (T,)``."""

    values: Any
    cu_seqlens: Any
    position_ids: Any
    max_seqlen: int


class PackedBatch(NamedTuple):
    """Packed rows: ``values``, ``segment_ids``, ``position_ids`` ``(R, S)``, ``cu_seqlens``."""

    values: Any
    segment_ids: Any
    position_ids: Any
    cu_seqlens: Any
    max_seqlen: int


@dataclass(frozen=True)
class Corpus:
    """Documents as one flat ``values`` array and ``offsets`` (``n + 1``, from 0 to the total)."""

    values: np.ndarray
    offsets: np.ndarray

    n = property(lambda self: len(self.offsets) - 1, doc="Documents.")
    lengths = property(lambda self: np.diff(self.offsets), doc="Tokens per document.")
    total = property(lambda self: int(self.offsets[-1]), doc="Tokens.")

    @classmethod
    def of(cls, data: Any) -> Corpus:
        """The corpus of a workload's data (``{"values": ..., "offsets": ...}``)."""
        return cls(np.asarray(data["values"]), np.asarray(data["offsets"], dtype=np.int64))


def make_corpus(n: int, seed: int = 0, vocab: int = 50_257) -> dict[str, np.ndarray]:
    """``n`` documents of lognormal lengths (median 250, sigma 0.9, in [8, 4000]), int32 tokens.

    Examples:
        >>> c = make_corpus(1000)
        >>> c["offsets"].shape, c["values"].dtype, int(c["offsets"][-1]) == len(c["values"])
        ((1001,), dtype('int32'), True)
    """
    rng = np.random.default_rng([seed, 33])
    lengths = np.clip(np.rint(rng.lognormal(np.log(250.0), 0.9, n)), 8, 4000).astype(np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, vocab, int(offsets[-1]), dtype=np.int32)
    return {"values": values, "offsets": offsets}


# -- plans: each epoch's documents per batch ------------------------------------------------------


def _permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


def _grouped(lengths: np.ndarray, s: Settings, seed: int, epoch: int) -> list[np.ndarray]:
    """Windows of ``window`` batches sorted by length (longest first), full batches shuffled.

    The last, partial batch stays last.
    """
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(len(lengths))
    window = np.arange(len(perm)) // (s.window * s.batch)
    batches = split_batches(perm[np.lexsort((-lengths[perm], window))], s.batch)
    full = len(lengths) // s.batch
    return [batches[i] for i in rng.permutation(full)] + batches[full:]


def budget_window(n: int) -> int:
    """Documents per length-sorted window of a token-budget epoch: ``max(256, 2 * sqrt(n))``."""
    return max(256, 2 * math.isqrt(max(n, 1)))


def budget_starts(descending: list[int], window: int, budget: int) -> list[int]:
    """Greedy batch starts over windows of lengths sorted longest first, no batch across windows.

    A batch starting at a document of length ``L`` takes ``budget // L`` documents (the first is
    the longest, so ``count * L <= budget``), or the rest of its window.

    Examples:
        >>> budget_starts([5, 3, 2, 2, 9, 1], 4, 10)
        [0, 2, 4, 5]
    """
    starts, n = [], len(descending)
    for w0 in range(0, n, window):
        at, end = w0, min(w0 + window, n)
        while at < end:
            starts.append(at)
            at = min(end, at + max(1, budget // descending[at]))
    return starts


def _budget(lengths: np.ndarray, s: Settings, seed: int, epoch: int) -> list[np.ndarray]:
    """A token budget with padding counted, greedy within length-sorted windows, shuffled.

    Windows of `budget_window` documents of the shuffle, sorted longest first; the batches of
    all windows shuffled.
    """
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(len(lengths))
    window = budget_window(len(perm))
    order = perm[np.lexsort((-lengths[perm], np.arange(len(perm)) // window))]
    starts = budget_starts(lengths[order].tolist(), window, s.budget)
    batches = np.split(order, starts[1:])
    return [batches[i] for i in rng.permutation(len(batches))]


def plan(
    batching: str, lengths: np.ndarray, *, seed: int = 0, epoch: int = 0, s: Settings = SETTINGS
) -> list[np.ndarray]:
    """The documents of each batch of an epoch (``pack``: the epoch's document order, one array).

    Examples:
        >>> [b.tolist() for b in plan("pad", np.ones(5, int), s=Settings(batch=2))]
        [[2, 4], [3, 0], [1]]
    """
    if batching in ("pad", "flat"):
        return split_batches(_permutation(len(lengths), seed, epoch), s.batch)
    if batching == "group":
        return _grouped(lengths, s, seed, epoch)
    if batching == "budget":
        return _budget(lengths, s, seed, epoch)
    if batching == "pack":
        return [_permutation(len(lengths), seed, epoch)]
    raise ValueError(f"`batching` must be one of {', '.join(LAYOUTS)}, got {batching!r}.")


# -- layouts: one batch from its documents --------------------------------------------------------


def _sources(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The token positions of documents at ``starts`` with ``lengths``, one after the other."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(
        int(ends[-1]) if len(ends) else 0
    )


def _concat(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, how: str) -> np.ndarray:
    """Documents at ``starts`` concatenated: slice copies, or one ``take``."""
    if how == "take":
        return values.take(_sources(starts, lengths))
    ends = starts + lengths
    return np.concatenate(
        [values[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    )


def padded(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, how: str) -> PaddedBatch:
    """Documents as ``(B, L)`` rows padded with 0, ``L`` the longest: slice copies, or a take."""
    width = int(lengths.max())
    mask = np.arange(width) < lengths[:, None]
    if how == "take":
        out = np.zeros((len(starts), width), values.dtype)
        out[mask] = values.take(_sources(starts, lengths))
        return PaddedBatch(out, mask, lengths)
    out = np.zeros((len(starts), width), values.dtype)
    for row, a, k in zip(out, starts.tolist(), lengths.tolist(), strict=True):
        row[:k] = values[a : a + k]
    return PaddedBatch(out, mask, lengths)


def flat(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, how: str) -> FlatBatch:
    """Documents concatenated, ``cu_seqlens`` (int32), positions restarting at each document."""
    cu = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=cu[1:])
    positions = np.arange(int(cu[-1])) - np.repeat(cu[:-1].astype(np.int64), lengths)
    return FlatBatch(_concat(values, starts, lengths, how), cu, positions, int(lengths.max()))


def packed_rows(
    corpus: Corpus, order: np.ndarray, seq_len: int, rows: int, how: str
) -> Iterator[PackedBatch]:
    """Concat-then-split: the documents of ``order`` as one stream cut into rows of ``seq_len``.

    Batches of ``rows`` rows; the last row of the epoch padded with 0 (segment 0, position 0).
    ``segment_ids`` number the document pieces of each row from 1; positions restart at each
    piece; ``cu_seqlens`` (int32) bound the pieces of the flattened batch, the padding counted
    as a piece of its own (the Loader's `Packed`). The pieces (the
    documents' parts, cut again at row starts) are planned for the whole epoch at once.
    """
    lengths = corpus.lengths[order]
    cum = np.zeros(len(order) + 1, np.int64)
    np.cumsum(lengths, out=cum[1:])
    total, step = int(cum[-1]), seq_len * rows
    cuts = np.union1d(cum[:-1], np.arange(0, total, seq_len))  # every piece's start
    doc = np.searchsorted(cum, cuts, "right") - 1
    src = (corpus.offsets[order][doc] + cuts - cum[doc]).tolist()
    sizes = np.diff(np.append(cuts, total))
    row_first = np.searchsorted(cuts, cuts // seq_len * seq_len)
    segment = (np.arange(len(cuts)) - row_first + 1).astype(np.int32)
    bounds = np.searchsorted(cuts, np.arange(0, total + step, step)).tolist()
    values, size_list, cut_list = corpus.values, sizes.tolist(), cuts.tolist()
    for b, p0 in enumerate(range(0, total, step)):
        i, j = bounds[b], bounds[b + 1]
        m = min(step, total - p0)
        r = -(-m // seq_len)
        out = np.zeros(r * seq_len, values.dtype)
        if how == "take":
            out[:m] = values.take(_sources(np.asarray(src[i:j]), sizes[i:j]))
        else:
            for a, c, k in zip(cut_list[i:j], src[i:j], size_list[i:j], strict=True):
                out[a - p0 : a - p0 + k] = values[c : c + k]
        size = r * seq_len  # the padding of the epoch's last row is a piece of cu_seqlens
        cu = np.append(cuts[i:j] - p0, [m, size] if m < size else [size]).astype(np.int32)
        segments = np.zeros(size, np.int32)
        segments[:m] = np.repeat(segment[i:j], sizes[i:j])
        positions = np.zeros(size, np.int64)
        positions[:m] = np.arange(m) - np.repeat(cuts[i:j] - p0, sizes[i:j])
        shape = (r, seq_len)
        yield PackedBatch(
            out.reshape(shape),
            segments.reshape(shape),
            positions.reshape(shape),
            cu,
            max(int(sizes[i:j].max()), size - m),
        )


# -- the hand loops ---------------------------------------------------------------------------


def batch_count(
    batching: str, lengths: np.ndarray, s: Settings = SETTINGS, *, seed: int = 0, epoch: int = 0
) -> int:
    """Batches per epoch (a token budget's: of that epoch; the others' are the same in all)."""
    if batching == "pack":
        return -(-int(lengths.sum()) // (s.seq_len * s.rows))
    if batching == "budget":
        return len(_budget(lengths, s, seed, epoch))
    return -(-len(lengths) // s.batch)


def hand_loop(
    data: Any, batch_size: int, *, batching: str, how: str, seed: int = 0, s: Settings = SETTINGS
) -> EpochPipeline:
    """The vectorised NumPy loop of ``batching`` (``how``: ``"copy"`` or ``"take"``), per epoch.

    Plans the epoch (`plan`) and builds each batch with one copy per document (``"copy"``) or
    one ``take`` of a repeat-built index (``"take"``). ``batch_size`` is the settings' (unused).
    """
    del batch_size  # the settings say how many documents a batch has
    if how not in ("copy", "take"):
        raise ValueError(f"`how` must be 'copy' or 'take', got {how!r}.")
    corpus = Corpus.of(data)
    lengths, offsets, values = corpus.lengths, corpus.offsets, corpus.values
    make: Callable[..., Any] = flat if batching == "flat" else padded

    def epoch_fn(epoch: int) -> Iterator[Any]:
        batches = plan(batching, lengths, seed=seed, epoch=epoch, s=s)
        if batching == "pack":
            return packed_rows(corpus, batches[0], s.seq_len, s.rows, how)
        return (make(values, offsets[i], lengths[i], how) for i in batches)

    name = f"hand_loop[{batching}, {how}]"
    return EpochPipeline(epoch_fn, batch_count(batching, lengths, s, seed=seed), name=name)


def ragged_loader(data: Any, batch_size: int, *, batching: str, seed: int = 0) -> Any:
    """The Loader over the corpus as a ``Ragged`` column, making ``batching``'s batches."""
    from looptoolkit import Loader, PackLayout, Ragged

    del batch_size  # the settings say how many documents a batch has
    corpus, s = Corpus.of(data), SETTINGS
    column = Ragged(corpus.values, corpus.offsets)
    if batching == "pack":
        return Loader(column, s.rows, seed=seed, layout=PackLayout(seq_len=s.seq_len))
    if batching == "budget":
        budget = s.budget
        return Loader(column, seed=seed, layout="pad", batch_tokens=budget, group_by_length=True)
    grouped = batching == "group"
    layout = "flat" if batching == "flat" else "pad"
    return Loader(column, s.batch, seed=seed, layout=layout, group_by_length=grouped)


_WHAT = {
    "pad": "full shuffle, 32 documents padded",
    "group": "length-grouped (windows of 50 batches sorted, batches shuffled), 32 padded",
    "budget": "token budget of 8,192 with padding (windows of 2 sqrt(n) of the shuffle sorted, "
    "greedy, batches shuffled)",
    "pack": "concat-then-split into 4 rows of 2,048, segment and position ids, cu_seqlens",
    "flat": "full shuffle, 32 documents concatenated, cu_seqlens and position ids",
}
_HOW = {"copy": "a slice copy per document", "take": "one take of a repeat-built index"}
_LOADER = {
    "pad": 'layout="pad"',
    "group": 'layout="pad", group_by_length=True',
    "budget": 'layout="pad", batch_tokens=8192, group_by_length=True',
    "pack": "layout=PackLayout(seq_len=2048), 4 rows",
    "flat": 'layout="flat"',
}


def floor_name(batching: str, how: str) -> str:
    """The name of a floor: ``floor-<batching>-<how>``."""
    return f"floor-{batching}-{how}"


def floor_of(batching: str) -> str:
    """What a row of ``batching`` is judged against: the faster of its two hand loops."""
    return "|".join(floor_name(batching, how) for how in _HOW)


LOADERS = {b: f"loader-{b}" for b in LAYOUTS}
"""The Loader row of each batching."""


def numpy_variants(backend: str) -> tuple[Any, ...]:
    """The hand loops (two floors per batching) and the Loader rows, for the NumPy kit."""
    from looptoolkit.bench.variants import Variant, loop

    out: list[Variant] = []
    for b in LAYOUTS:
        for how, text in _HOW.items():
            label = f"floor: {_WHAT[b]}; {text}"
            fn = loop(hand_loop, host=True, batching=b, how=how)
            out.append(Variant(floor_name(b, how), backend, label, fn, None, ("tokens",)))
            out[-1] = on_tokens(out[-1], b)
    for b in LAYOUTS:
        fn = loop(ragged_loader, host=True, batching=b)
        label = f"Loader(Ragged(values, offsets), {_LOADER[b]})"
        out.append(on_tokens(Variant(LOADERS[b], backend, label, fn, None), b))
    return tuple(out)


def on_tokens(v: Any, batching: str) -> Any:
    """``v`` on the tokens workload, in its own order, making ``batching``'s batches.

    It is judged against that batching's floor (`floor_of`).
    """
    from dataclasses import replace

    return replace(
        v, workloads=("tokens",), batching=batching, floor=floor_of(batching), shuffle=None
    )
