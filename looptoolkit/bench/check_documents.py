"""Check a variable-length loop before timing it: every document's tokens once, layouts consistent.

Works from the batches alone, whoever made them: a padded batch's rows, a flat batch's
``cu_seqlens`` pieces and a packed stream are matched to the corpus's documents by content (each
document has at least 8 tokens; its first 8 find it), and each layout's fields are checked
against one another (mask and lengths, positions restarting at each piece, segment numbering).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from itertools import islice
from typing import Any

import numpy as np

from looptoolkit.bench.check import Check
from looptoolkit.bench.variants import Context, Variant, kit
from looptoolkit.bench.variants.tokens import SETTINGS, Corpus, Settings, layout_of
from looptoolkit.bench.workloads import host_array

__all__ = ["Documents", "check_documents", "layout_fields"]

KEY = 8  # tokens that identify a document (the shortest has 8)
FIELDS = {
    "pad": ("values", "mask", "lengths"),
    "flat": ("values", "cu_seqlens", "position_ids", "max_seqlen"),
    "pack": ("values", "segment_ids", "position_ids", "cu_seqlens", "max_seqlen"),
}


def layout_fields(batch: Any, layout: str) -> dict[str, Any]:
    """A batch's fields of ``layout`` by name (NumPy arrays; ``max_seqlen`` an int)."""
    out = {name: getattr(batch, name) for name in FIELDS[layout]}
    return {k: v if k == "max_seqlen" else host_array(v) for k, v in out.items()}


class Documents:
    """The corpus's documents, found by their tokens; each may be found once."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus, self.seen = corpus, np.zeros(corpus.n, bool)
        firsts = corpus.values[corpus.offsets[:-1, None] + np.arange(KEY)]
        self._index: dict[bytes, list[int]] = {}
        for i, key in enumerate(map(bytes, np.ascontiguousarray(firsts, np.int64))):
            self._index.setdefault(key, []).append(i)

    def tokens(self, doc: int) -> np.ndarray:
        """The tokens of document ``doc``."""
        o = self.corpus.offsets
        return self.corpus.values[o[doc] : o[doc + 1]]

    def find(self, tokens: np.ndarray, whole: bool) -> int | None:
        """An unseen document that is ``tokens`` (``whole``) or starts with them; marks it seen."""
        key = bytes(np.ascontiguousarray(tokens[:KEY], np.int64))
        for doc in self._index.get(key, []) if len(tokens) >= KEY else []:
            mine = self.tokens(doc)
            if whole and len(mine) != len(tokens):
                continue
            if not self.seen[doc] and np.array_equal(mine[: len(tokens)], tokens):
                self.seen[doc] = True
                return doc
        return None


class Stream:
    """A packed stream read batch by batch: documents one after the other, each whole, once."""

    def __init__(self, documents: Documents) -> None:
        self.docs, self.buffer = documents, np.zeros(0, np.int64)
        self.doc: int | None = None
        self.offset = self.at = 0  # into the current document; the buffer's stream position
        self.starts: list[int] = []  # documents' stream positions

    def feed(self, tokens: np.ndarray) -> str | None:
        """Read the next real tokens of the stream; why they are not the next documents, or None."""
        self.buffer = np.concatenate([self.buffer, tokens.astype(np.int64)])
        while len(self.buffer):
            if self.doc is None:
                if len(self.buffer) < KEY:
                    return None  # the next batch tells which document starts here
                self.doc = self.docs.find(self.buffer[:KEY], False)
                if self.doc is None:
                    return f"has tokens at stream position {self.at} that start no unseen document"
                self.offset = 0
                self.starts.append(self.at)
            mine = self.docs.tokens(self.doc)
            k = min(len(mine) - self.offset, len(self.buffer))
            if not np.array_equal(self.buffer[:k], mine[self.offset : self.offset + k]):
                return f"cuts document {self.doc} at stream position {self.at}"
            self.buffer, self.offset, self.at = self.buffer[k:], self.offset + k, self.at + k
            if self.offset == len(mine):
                self.doc = None
        return None

    def finish(self) -> str | None:
        """Why the stream does not end at the end of a document, or None."""
        if len(self.buffer) or self.doc is not None:
            return "ends inside a document"
        return None


def _pad(f: dict[str, Any], docs: Documents, batching: str, s: Settings) -> str | None:
    """Why a padded batch is wrong, or None."""
    values, mask, lengths = f["values"], f["mask"].astype(bool), f["lengths"].astype(np.int64)
    b, width = values.shape[:2] if values.ndim == 2 else (0, 0)
    if values.ndim != 2 or mask.shape != values.shape or lengths.shape != (b,) or b == 0:
        return f"has values {list(values.shape)}, mask {list(mask.shape)}, lengths {lengths.shape}"
    if width != lengths.max() or not np.array_equal(mask, np.arange(width) < lengths[:, None]):
        return "has a mask or width that does not follow its lengths"
    if values[~mask].any():
        return "has padding that is not 0"
    if batching == "budget" and b * width > s.budget:
        return f"has {b} x {width} tokens, over the budget of {s.budget}"
    if batching != "budget" and b > s.batch:
        return f"has {b} rows, batch size {s.batch}"
    for row, k in zip(values, lengths.tolist(), strict=True):
        if docs.find(row[:k], True) is None:
            return "has a row that is no unseen document"
    return None


def _flat(f: dict[str, Any], docs: Documents, s: Settings) -> str | None:
    """Why a padding-free batch is wrong, or None."""
    values, cu, positions = f["values"], f["cu_seqlens"].astype(np.int64), f["position_ids"]
    sizes = np.diff(cu)
    if values.ndim != 1 or cu[0] != 0 or cu[-1] != len(values) or (sizes <= 0).any():
        return f"has values {list(values.shape)} and cu_seqlens that do not bound them"
    if len(sizes) > s.batch:
        return f"has {len(sizes)} documents, batch size {s.batch}"
    if not np.array_equal(positions, np.arange(len(values)) - np.repeat(cu[:-1], sizes)):
        return "has position_ids that do not restart at each document"
    if f["max_seqlen"] != sizes.max():
        return f"has max_seqlen {f['max_seqlen']}, its longest document has {sizes.max()}"
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        if docs.find(values[a:b], True) is None:
            return "has a piece that is no unseen document"
    return None


def _pack(f: dict[str, Any], stream: Stream, s: Settings, pieces: list[int]) -> str | None:
    """Why packed rows are wrong, or None; each piece's stream position goes to ``pieces``."""
    values, segments, positions = f["values"], f["segment_ids"], f["position_ids"]
    r = len(values)
    if values.ndim != 2 or values.shape[1] != s.seq_len or not 0 < r <= s.rows:
        return f"has values {list(values.shape)}, not up to {s.rows} rows of {s.seq_len}"
    if segments.shape != values.shape or positions.shape != values.shape:
        return "has segment_ids or position_ids of another shape than its values"
    real = (segments > 0).reshape(-1)
    m = int(real.sum())
    if not real[:m].all() or values.reshape(-1)[m:].any() or positions.reshape(-1)[m:].any():
        return "has padding before real tokens, or padding that is not 0"
    seg = segments.reshape(-1)[:m].astype(np.int64)
    row_start = np.arange(m) % s.seq_len == 0
    new = row_start | np.append(True, seg[1:] != seg[:-1])
    if not ((seg[row_start] == 1).all() and (np.diff(seg)[~new[1:]] == 0).all()):
        return "has segment_ids that do not number each row's pieces from 1"
    if not (np.diff(seg)[new[1:] & ~row_start[1:]] == 1).all():
        return "has segment_ids that do not number each row's pieces from 1"
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, m))
    cu, size = f["cu_seqlens"].astype(np.int64), values.size
    # the padding of a row is a piece of its own in cu_seqlens (the Loader's Packed)
    pieces_cu = np.append(starts, [m, size] if m < size else [size])
    if not np.array_equal(cu, pieces_cu):
        return "has cu_seqlens that do not bound its pieces (and its padding)"
    if not np.array_equal(positions.reshape(-1)[:m], np.arange(m) - np.repeat(starts, sizes)):
        return "has position_ids that do not restart at each piece"
    if f["max_seqlen"] != np.diff(pieces_cu).max():
        return f"has max_seqlen {f['max_seqlen']}, its longest piece has {np.diff(cu).max()}"
    pieces += (starts + stream.at + len(stream.buffer)).tolist()
    return stream.feed(values.reshape(-1)[:m])


def check_documents(
    variant: Variant, loop: Iterable[Any], ctx: Context, limit: int | None = None
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of a variable-length loop.

    Every document once, whole (a packed stream: in some order, each piece where a document or a
    row starts), the layout's fields consistent, the batch within its size or budget; the
    padding efficiency (real tokens / tokens in the batches) goes to ``Check.extra``.
    """
    batching = variant.batching or "pad"
    layout, s = layout_of(batching), SETTINGS
    corpus = Corpus.of(ctx.workload.data)
    docs, ready, convert = Documents(corpus), kit(variant.backend).ready, variant.convert
    stream, pieces = Stream(docs), list[int]()
    how = f"documents: every token once, {layout} layout consistent"
    count, real, held, ended, iterator = 0, 0, 0, False, iter(loop)
    try:
        for batch in islice(iterator, limit):
            if ready is not None:
                ready(batch)
            f = layout_fields(convert(batch) if convert else batch, layout)
            if ended:
                problem: str | None = "follows the padded end of the stream"
            elif layout == "pad":
                problem = _pad(f, docs, batching, s)
            elif layout == "flat":
                problem = _flat(f, docs, s)
            else:
                problem = _pack(f, stream, s, pieces)
                ended = bool((f["segment_ids"] == 0).any())
            if problem is not None:
                return Check(False, how, count + 1, f"batch {count} {problem}")
            count, held = count + 1, held + int(f["values"].size)
            real += int(f["values"].size if layout != "pad" else f["lengths"].sum())
            if layout == "pack":
                real -= int((f["segment_ids"] == 0).sum())
    finally:
        with contextlib.suppress(Exception):
            iterator.close()  # type: ignore[attr-defined]
    extra = {"padding_efficiency": real / held if held else 0.0, "checked_tokens": real}
    if limit is not None and count >= limit:
        return Check(True, how + f", first {count} batches", count, extra=extra)
    if layout == "pack":
        rows = set(range(0, stream.at, s.seq_len))
        if why := stream.finish():
            return Check(False, how, count, f"the stream {why}")
        if set(pieces) != rows | set(stream.starts):
            return Check(False, how, count, "pieces do not start where documents or rows do")
    if not docs.seen.all():
        return Check(False, how, count, f"{int((~docs.seen).sum())} documents never appeared")
    return Check(True, how, count, extra=extra)
