"""A ragged batch as a ``transformers`` model's keyword arguments.

After the layouts ([`looptoolkit.ragged._layouts`][looptoolkit.ragged._layouts]), at the edge of
the model: [`hf_inputs`][looptoolkit.torch_data.hf_inputs] maps a batch whose token column is a
[`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat] or [`Packed`][looptoolkit.Packed]
to what a Hugging Face model's ``forward`` takes, as ``DataCollatorWithPadding`` and
``DataCollatorWithFlattening`` build it: ``input_ids`` with ``attention_mask`` (padded), or
``input_ids`` and ``position_ids`` that restart at every document (padding-free), causal-LM
``labels``, and optionally flash-attention's ``cu_seq_lens_q`` / ``max_length_q`` pair. It reads
NumPy arrays or torch tensors and imports no framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from looptoolkit.ragged._layouts import Flat, Packed, Padded

__all__ = ["hf_inputs"]


def hf_inputs(
    batch: Mapping[str, Any],
    *,
    key: str = "input_ids",
    labels: bool = True,
    ignore_index: int = -100,
    flash_attn_kwargs: bool = False,
    use_cache: bool | None = False,
) -> dict[str, Any]:
    """The keyword arguments of a ``transformers`` model, in the batch's own arrays.

    The framework-free core of
    [`looptoolkit.torch_data.hf_inputs`][looptoolkit.torch_data.hf_inputs] (documented there),
    which also makes them torch tensors: here NumPy in, NumPy out; torch in, torch out.

    Examples:
        >>> import numpy as np
        >>> import looptoolkit as lt
        >>> col = lt.Ragged(np.array([5, 6, 7, 8, 9]), np.array([0, 3, 5]))
        >>> padded = next(iter(lt.Loader({"input_ids": col}, 2, shuffle=False)))
        >>> kw = hf_inputs(padded)
        >>> kw["input_ids"].tolist(), kw["attention_mask"].tolist(), kw["labels"].tolist()
        ([[5, 6, 7], [8, 9, 0]], [[1, 1, 1], [1, 1, 0]], [[5, 6, 7], [8, 9, -100]])
        >>> flat = next(iter(lt.Loader({"input_ids": col}, 2, shuffle=False, layout="flat")))
        >>> kw = hf_inputs(flat, flash_attn_kwargs=True)
        >>> kw["input_ids"].tolist(), kw["position_ids"].tolist(), kw["labels"].tolist()
        ([[5, 6, 7, 8, 9]], [[0, 1, 2, 0, 1]], [[-100, 6, 7, -100, 9]])
        >>> kw["cu_seq_lens_q"].tolist(), kw["max_length_q"]
        ([0, 3, 5], 3)
    """
    if not isinstance(batch, Mapping):
        raise TypeError(f"`batch` must be a mapping, got {type(batch).__name__}.")
    ids = batch.get(key)
    if not isinstance(ids, Padded | Flat | Packed):
        raise TypeError(
            f"`batch[{key!r}]` must be a ragged layout (Padded, Flat or Packed), got "
            f"{type(ids).__name__}; build the batch with a Loader over a `Ragged` column."
        )
    ops = _ops(ids.values)
    # Other ragged entries (a tokenizer's own `attention_mask`, `token_type_ids`) are laid out
    # like the tokens: their values, shaped as `input_ids`; the mask is built here, below.
    out = {k: _values(v) for k, v in batch.items() if k != key and not _own_mask(k, v)}
    add_labels = labels and "labels" not in out
    if isinstance(ids, Padded):
        out[key] = ids.values
        out["attention_mask"] = ops.int64(ids.mask)
        if add_labels:
            out["labels"] = ops.where(ids.mask, ids.values, ignore_index)
        return out
    if isinstance(ids, Flat):
        values, positions = ids.values[None], ids.position_ids[None]
        real = None
    else:
        values, positions, real = ids.values, ids.position_ids, ids.segment_ids > 0
    out[key] = values
    out["position_ids"] = ops.int64(positions)
    if add_labels:
        inside = positions > 0  # not the first token of a document (piece)
        if real is not None:
            inside = inside & real
        out["labels"] = ops.where(inside, values, ignore_index)
    if use_cache is not None:
        out["use_cache"] = use_cache
    if flash_attn_kwargs:
        out["cu_seq_lens_q"] = out["cu_seq_lens_k"] = ids.cu_seqlens
        out["max_length_q"] = out["max_length_k"] = int(ids.max_seqlen)
    return out


def _own_mask(name: str, value: Any) -> bool:
    """A ragged ``attention_mask`` entry, which the layout's own mask replaces."""
    return name == "attention_mask" and isinstance(value, Padded | Flat | Packed)


def _values(value: Any) -> Any:
    """A ragged layout's values shaped as ``input_ids`` (``(1, T)`` for Flat); others as is."""
    if isinstance(value, Flat):
        return value.values[None]
    if isinstance(value, Padded | Packed):
        return value.values
    return value


class _NumPy:
    @staticmethod
    def int64(x: Any) -> Any:
        return x.astype(np.int64)

    @staticmethod
    def where(keep: Any, x: Any, fill: int) -> Any:
        return np.where(keep, x, np.asarray(fill, dtype=x.dtype))


class _Torch:
    @staticmethod
    def int64(x: Any) -> Any:
        return x.long()

    @staticmethod
    def where(keep: Any, x: Any, fill: int) -> Any:
        return x.masked_fill(~keep, fill)


def _ops(values: Any) -> type[_NumPy] | type[_Torch]:
    """The array operations for ``values``: NumPy's, or torch's (read by duck typing)."""
    if isinstance(values, np.ndarray):
        return _NumPy
    if hasattr(values, "masked_fill") and hasattr(values, "long"):  # a torch tensor
        return _Torch
    raise TypeError(
        f"`hf_inputs` reads NumPy arrays or torch tensors, got {type(values).__name__}; build "
        "the batches with `make_dataloader` or a Loader with `device=`."
    )
