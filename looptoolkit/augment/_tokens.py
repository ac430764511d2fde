"""Masked-language-model masking keyed to the epoch's order: BERT's rule, per token.

A keyed transform of token batches (it is called with the batch and its
[`BatchKeys`][looptoolkit._common.keys.BatchKeys]): [`MaskTokens`][looptoolkit.augment.MaskTokens]
chooses tokens as Hugging Face's ``DataCollatorForLanguageModeling`` does (each token with
``probability``, never a special token or padding; of the chosen, 80% become the mask token,
10% a random token, 10% stay) and hands on the masked ids and the labels (the original id at
chosen tokens, ``ignore_index`` elsewhere), in the layout the ids came in: a
[`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat] or [`Packed`][looptoolkit.Packed]
batch of a ragged column, or a plain ``(B, L)`` array.

A token's draws are a function of (the Loader's seed, the epoch, its row's position in the
epoch's order, its index in the row) only: not of the batch's padded length, the layout, the
other rows of the batch, the worker or the framework. In planned batches (``batch_tokens``,
``group_by_length``) a row's position is its place in the epoch's plan; a packed row
(``PackLayout``, ``FitLayout``) is numbered in the plan as a row of its own. They are drawn
on the host for the whole batch at once; what depends on the ids (which tokens may be
chosen, the new ids) is computed where the ids are, NumPy or torch on any device.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from looptoolkit._common.keys import BatchKeys, uniforms
from looptoolkit.adapters import backend_of
from looptoolkit.augment._base import Keyed
from looptoolkit.ragged._layouts import Flat, Packed, Padded

__all__ = ["MaskTokens"]

_DRAWS = 3  # uniforms per token: chosen or not, what it becomes, the random token


def _check_int(value: Any, name: str, *, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    if low is not None and value < low:
        raise ValueError(f"`{name}` must be >= {low}, got {value}.")
    return int(value)


def _check_fraction(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}.")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"`{name}` must be a probability in [0, 1], got {value!r}.")
    return float(value)


class MaskTokens(Keyed):
    """BERT's masking of token ids for masked-language-model training, keyed per token.

    Each token is chosen with probability ``probability``, never a token of
    ``special_token_ids``, ``pad_token_id`` or padding (where a [`Padded`][looptoolkit.Padded]
    batch's mask is False). Of the chosen tokens, ``mask_fraction`` become ``mask_token_id``,
    ``random_fraction`` a token drawn uniformly from ``[0, vocab_size)`` and the rest keep
    their id: Hugging Face's ``DataCollatorForLanguageModeling`` (``mlm_probability``,
    ``mask_replace_prob``, ``random_replace_prob``). The labels hold the original id at the
    chosen tokens and ``ignore_index`` elsewhere, as int64 (torch: ``torch.long``).

    The batch is a mapping; the ids under ``key`` are a [`Padded`][looptoolkit.Padded]
    ``(B, L)``, [`Flat`][looptoolkit.Flat] ``(T,)`` or [`Packed`][looptoolkit.Packed]
    ``(R, seq_len)`` batch of a ragged column (padding never chosen), or a plain ``(B, L)``
    integer array (padding then is ``pad_token_id``), NumPy or torch. The result is
    a new mapping with the masked ids under ``key`` and the labels under ``labels_key`` (in
    the same layout; an existing entry is replaced).

    A token's draws are a function of the Loader's seed, the epoch, its row's position in the
    epoch's order and its index in the row: the same token is masked the same way in any
    batch, padded to any length or flat, on any worker.

    Args:
        vocab_size: random tokens are drawn from ``[0, vocab_size)``.
        mask_token_id: the id of the mask token.
        probability: the probability that a token is chosen.
        special_token_ids: ids never chosen (``[CLS]``, ``[SEP]``, ...).
        pad_token_id: the padding id, never chosen (and the padding of plain arrays).
        key: the key of the ids in the batch.
        labels_key: the key the labels are added under.
        ignore_index: the label of tokens not chosen (what the loss ignores).
        mask_fraction: the share of chosen tokens that become ``mask_token_id``.
        random_fraction: the share of chosen tokens that become a random token.
        placement: ``"device"`` (the default): after the batch's move; ``"host"``: on the
            host batch, before its copy.

    Raises:
        TypeError: an argument of the wrong kind.
        ValueError: a probability outside ``[0, 1]``, ``mask_fraction + random_fraction > 1``,
            a negative id, or ``key`` equal to ``labels_key``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import BatchKeys
        >>> mask = MaskTokens(vocab_size=100, mask_token_id=3, special_token_ids=(1, 2),
        ...                   pad_token_id=0, probability=0.5)
        >>> ids = np.array([[1, 10, 11, 12, 13, 2], [1, 20, 21, 2, 0, 0]])
        >>> out = mask({"input_ids": ids}, BatchKeys(0, 0, np.array([4, 9])))
        >>> out["input_ids"].shape, out["labels"].dtype
        ((2, 6), dtype('int64'))
        >>> bool((out["labels"][ids <= 2] == -100).all())  # specials and padding: never
        True
    """

    keyed = True
    stream = zlib.crc32(b"MaskTokens")  # the draws' stream, apart from the image ops'

    def __init__(
        self,
        *,
        vocab_size: int,
        mask_token_id: int,
        probability: float = 0.15,
        special_token_ids: Iterable[int] = (),
        pad_token_id: int | None = None,
        key: str = "input_ids",
        labels_key: str = "labels",
        ignore_index: int = -100,
        mask_fraction: float = 0.8,
        random_fraction: float = 0.1,
        placement: str = "device",
    ) -> None:
        super().__init__(placement)
        self.vocab_size = _check_int(vocab_size, "vocab_size", low=1)
        self.mask_token_id = _check_int(mask_token_id, "mask_token_id", low=0)
        self.probability = _check_fraction(probability, "probability")
        if isinstance(special_token_ids, str) or not isinstance(special_token_ids, Iterable):
            raise TypeError(
                "`special_token_ids` must be an iterable of ints, got "
                f"{type(special_token_ids).__name__}."
            )
        self.special_token_ids = tuple(
            _check_int(i, "special_token_ids", low=0) for i in special_token_ids
        )
        self.pad_token_id = (
            None if pad_token_id is None else _check_int(pad_token_id, "pad_token_id", low=0)
        )
        for name, value in (("key", key), ("labels_key", labels_key)):
            if not isinstance(value, str):
                raise TypeError(f"`{name}` must be a str, got {type(value).__name__}.")
        if key == labels_key:
            raise ValueError(f"`labels_key` must differ from `key`, got {key!r} for both.")
        self.key, self.labels_key = key, labels_key
        self.ignore_index = _check_int(ignore_index, "ignore_index")
        self.mask_fraction = _check_fraction(mask_fraction, "mask_fraction")
        self.random_fraction = _check_fraction(random_fraction, "random_fraction")
        if self.mask_fraction + self.random_fraction > 1.0:
            raise ValueError(
                "`mask_fraction` + `random_fraction` must be <= 1, got "
                f"{self.mask_fraction} + {self.random_fraction}."
            )
        # Excluded ids: the specials, then padding.
        excluded = set(self.special_token_ids)
        if self.pad_token_id is not None:
            excluded.add(self.pad_token_id)
        self._excluded = np.array(sorted(excluded), dtype=np.int64)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(vocab_size={self.vocab_size}, "
            f"mask_token_id={self.mask_token_id}, probability={self.probability}, "
            f"special_token_ids={self.special_token_ids}, pad_token_id={self.pad_token_id}, "
            f"key={self.key!r}, labels_key={self.labels_key!r}, "
            f"ignore_index={self.ignore_index}, mask_fraction={self.mask_fraction}, "
            f"random_fraction={self.random_fraction})"
        )

    def draw(self, keys: BatchKeys, length: int) -> np.ndarray:
        """The draws of tokens ``[0, length)`` of each row: uniforms ``(B, length, 3)``.

        Token ``j``'s draws are the row's keyed uniforms ``3j, 3j + 1, 3j + 2``, which do
        not depend on ``length``: a row draws the same in a batch padded to any length.
        """
        return uniforms(keys, self.stream, _DRAWS * length).reshape(-1, length, _DRAWS)

    def __call__(self, batch: Mapping[str, Any], keys: BatchKeys) -> dict[str, Any]:
        """``batch`` with its ids under ``key`` masked and the labels under ``labels_key``.

        Args:
            batch: a mapping with the ids under ``key``.
            keys: the batch's keys, one position per row.

        Returns:
            A new dict: ``batch``'s entries, the masked ids and the labels.

        Raises:
            TypeError: ``batch`` is not a mapping, or the ids are not integer arrays.
            ValueError: no ids under ``key``, ids of the wrong shape, or a key per row missing.
        """
        if not isinstance(batch, Mapping):
            raise TypeError(f"`batch` must be a mapping, got {type(batch).__name__}.")
        if self.key not in batch:
            raise ValueError(
                f"`key` {self.key!r} names no leaf of the batch, whose keys are {sorted(batch)}."
            )
        leaf = batch[self.key]
        where = f"batch[{self.key!r}]"
        if isinstance(leaf, Padded):
            ids, labels = self._padded(leaf.values, leaf.mask, keys, f"{where}.values")
            out_ids: Any = leaf._replace(values=ids)
            out_labels: Any = leaf._replace(values=labels)
        elif isinstance(leaf, Flat):
            ids, labels = self._flat(leaf, keys, f"{where}.values")
            out_ids, out_labels = leaf._replace(values=ids), leaf._replace(values=labels)
        elif isinstance(leaf, Packed):  # each packed row drawn as a row; padding never chosen
            real = leaf.segment_ids != 0
            ids, labels = self._padded(leaf.values, real, keys, f"{where}.values")
            out_ids, out_labels = leaf._replace(values=ids), leaf._replace(values=labels)
        else:
            out_ids, out_labels = self._padded(leaf, None, keys, where)
        return {**batch, self.key: out_ids, self.labels_key: out_labels}

    def _check_ids(self, ids: Any, ndim: int, where: str) -> str:
        backend = backend_of(ids)
        name = backend.name if backend is not None else None
        if name not in ("numpy", "torch"):
            got = type(ids).__name__ if name is None else f"a {name} array"
            raise TypeError(f"`{where}` must be a NumPy array or a torch tensor, got {got}.")
        if name == "torch":
            import torch

            integer = not (ids.dtype.is_floating_point or ids.dtype.is_complex)
            integer = integer and ids.dtype != torch.bool
        else:
            integer = ids.dtype.kind in "iu"
        if not integer:
            raise TypeError(f"`{where}` must hold integer token ids, got dtype {ids.dtype}.")
        if ids.ndim != ndim:
            shape = "(B, L)" if ndim == 2 else "(T,)"
            raise ValueError(f"`{where}` must be {shape}, got shape {tuple(ids.shape)}.")
        return name

    def _check_rows(self, keys: BatchKeys, rows: int) -> None:
        if len(keys.positions) != rows:
            raise ValueError(
                f"`keys` must have a position per row of the batch, got "
                f"{len(keys.positions)} positions for {rows} rows."
            )

    def _padded(self, ids: Any, mask: Any, keys: BatchKeys, where: str) -> tuple[Any, Any]:
        """Masked ids and labels of ``(B, L)`` ids (padding where ``mask`` is False)."""
        self._check_ids(ids, 2, where)
        rows, length = (int(n) for n in ids.shape)
        self._check_rows(keys, rows)
        return self._mask(ids, mask, self.draw(keys, length))

    def _flat(self, leaf: Flat, keys: BatchKeys, where: str) -> tuple[Any, Any]:
        """Masked ids and labels of a flat batch: each token drawn as in its own row."""
        self._check_ids(leaf.values, 1, where)
        cu = np.asarray(_host(leaf.cu_seqlens), dtype=np.int64)
        lengths = np.diff(cu)
        self._check_rows(keys, len(lengths))
        longest = int(lengths.max()) if len(lengths) else 0
        row = np.repeat(np.arange(len(lengths)), lengths)
        index = np.arange(int(cu[-1]) - int(cu[0])) - np.repeat(cu[:-1] - cu[0], lengths)
        return self._mask(leaf.values, None, self.draw(keys, longest)[row, index])

    def _mask(self, ids: Any, mask: Any, u: np.ndarray) -> tuple[Any, Any]:
        """BERT's rule on ``ids`` with draws ``u`` (``(*ids.shape, 3)``), where the ids are."""
        drawn = u[..., 0] < self.probability
        to_mask = u[..., 1] < self.mask_fraction
        to_random = ~to_mask & (u[..., 1] < self.mask_fraction + self.random_fraction)
        random_ids = np.minimum(u[..., 2] * self.vocab_size, self.vocab_size - 1).astype(np.int64)
        if isinstance(ids, np.ndarray):
            eligible = ~np.isin(ids, self._excluded)
            if mask is not None:
                eligible &= np.asarray(mask, dtype=bool)
            chosen = drawn & eligible
            new = np.where(chosen & to_mask, self.mask_token_id, ids)
            new = np.where(chosen & to_random, random_ids, new).astype(ids.dtype)
            labels = np.where(chosen, ids, self.ignore_index).astype(np.int64)
            return new, labels
        import torch

        device = ids.device
        allowed = ~torch.isin(ids, torch.as_tensor(self._excluded, device=device))
        if mask is not None:
            allowed = allowed & mask.to(device=device, dtype=torch.bool)
        picked = torch.as_tensor(drawn, device=device) & allowed
        mask_at = picked & torch.as_tensor(to_mask, device=device)
        random_at = picked & torch.as_tensor(to_random, device=device)
        new_t = torch.where(mask_at, torch.full_like(ids, self.mask_token_id), ids)
        new_t = torch.where(
            random_at, torch.as_tensor(random_ids, device=device).to(ids.dtype), new_t
        )
        ignored = torch.full(ids.shape, self.ignore_index, dtype=torch.long, device=device)
        labels_t = torch.where(picked, ids.long(), ignored)
        return new_t, labels_t


def _host(x: Any) -> Any:
    """A small array on the host (a torch tensor's values, wherever it is)."""
    if isinstance(x, np.ndarray):
        return x
    detach = getattr(x, "detach", None)
    return x.detach().cpu().numpy() if detach is not None else np.asarray(x)
