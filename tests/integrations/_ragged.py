"""The ragged corpus the training-stack tests share, and what a batch shows of it.

A batch is reduced to what a model trained on: the documents (a fixed ``row`` leaf, one per
row or document piece) and the real tokens in order. An epoch of a stack must show exactly what
the same epoch of a [`Loader`][looptoolkit.Loader] with the same options shows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import looptoolkit as lt

VOCAB = 50


def corpus(n: int, seed: int = 0) -> dict[str, Any]:
    """``n`` documents of 1-12 random tokens, and each one's row number."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 13, size=n)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    tokens = rng.integers(1, VOCAB, size=int(offsets[-1]))
    return {"input_ids": lt.Ragged(tokens, offsets), "row": np.arange(n)}


def _np(x: Any) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def shown(batch: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(documents, real tokens)`` of a batch in the Loader's layout."""
    ids = batch["input_ids"]
    if isinstance(ids, lt.Padded):
        tokens = _np(ids.values)[_np(ids.mask)]
    elif isinstance(ids, lt.Flat):
        tokens = _np(ids.values)
    else:
        tokens = _np(ids.values)[_np(ids.segment_ids) > 0]
    return _np(batch["row"]).copy(), tokens.copy()


def epoch_shown(data: dict[str, Any], epoch: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(documents, tokens)`` of epoch ``epoch`` of a Loader over ``data`` with ``kwargs``."""
    loader = lt.Loader(data, **kwargs)
    loader.set_epoch(epoch)
    return joined([shown(b) for b in loader])


def joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The documents and tokens of several batches, concatenated."""
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows, tokens = zip(*parts, strict=True)
    return np.concatenate(rows), np.concatenate(tokens)


def assert_epoch(
    got: list[tuple[np.ndarray, np.ndarray]], want: tuple[np.ndarray, np.ndarray]
) -> None:
    """The documents and tokens of ``got`` are ``want``'s, in order."""
    rows, tokens = joined(got)
    np.testing.assert_array_equal(rows, want[0])
    np.testing.assert_array_equal(tokens, want[1])
