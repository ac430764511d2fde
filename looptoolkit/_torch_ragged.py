"""Ragged batches behind torch's ``DataLoader``: the dataset ``make_dataloader`` builds.

Between the ragged plans ([`looptoolkit.ragged._loader`][looptoolkit.ragged._loader]) and the
DataLoader integration ([`looptoolkit.torch_data`][looptoolkit.torch_data]): the batch sampler
yields what the Loader's epoch order yields (the rows of a padded or flat batch, the pieces of
a packed one), and [`RaggedItemsDataset`][looptoolkit._torch_ragged.RaggedItemsDataset] builds
the batch's layout from it in the DataLoader's worker, as the Loader does.

Also [`hf_inputs`][looptoolkit.torch_data.hf_inputs], a batch as a ``transformers`` model's
torch keyword arguments. This module imports torch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import optree
import torch.utils.data

from looptoolkit._common.keys import KeyedBatch, KeyedIndices
from looptoolkit.device._tree import NAMESPACE
from looptoolkit.order._epochs import EpochCursor
from looptoolkit.ragged._hf import hf_inputs as _hf_inputs
from looptoolkit.ragged._loader import RaggedRows
from looptoolkit.ragged._options import Options
from looptoolkit.ragged._units import UnitEpoch, UnitOrder

__all__ = ["PerBatch", "RaggedItemsDataset", "as_tensor", "hf_inputs", "ragged_parts"]

_TENSOR_KINDS = frozenset("biufc")


def as_tensor(leaf: Any) -> Any:
    """A NumPy array of numbers as a torch tensor sharing its memory; anything else as it is.

    Examples:
        >>> type(as_tensor(np.arange(3))).__name__, as_tensor(7)
        ('Tensor', 7)
    """
    if isinstance(leaf, np.ndarray) and leaf.dtype.kind in _TENSOR_KINDS:
        # Shares the gathered batch's memory; a read-only view is copied once.
        return torch.from_numpy(leaf if leaf.flags.writeable else leaf.copy())
    return leaf


class RaggedItemsDataset(torch.utils.data.Dataset[Any]):
    """The dataset ``make_dataloader`` builds over data with ragged leaves.

    ``__getitems__`` takes what the batch sampler yields for one batch (the rows of a padded
    or flat batch, or the pieces of a packed one) and builds the batch's layout
    ([`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat],
    [`Packed`][looptoolkit.Packed]) as the Loader does; NumPy arrays become torch tensors.

    Args:
        rows: the ragged rows of the data, with the layout's options.
        tensors: NumPy arrays of a batch come out as torch tensors.
    """

    def __init__(self, rows: RaggedRows, *, tensors: bool = True) -> None:
        self._rows = rows
        self.tensors = bool(tensors)

    def __len__(self) -> int:
        return self._rows.n

    def __getitem__(self, index: int) -> Any:
        raise TypeError(
            "a ragged dataset is read a batch at a time (`__getitems__`), by a DataLoader "
            "from `make_dataloader`."
        )

    def __getitems__(self, item: Any) -> Any:
        """The batch of ``item``: an index array of rows, or the block of a packed batch."""
        if isinstance(item, KeyedIndices):  # a keyed collate_fn's batch: keys go along
            return KeyedBatch(self.__getitems__(item.indices), item.keys)
        rows = self._rows
        if not hasattr(item, "rows"):  # the rows of a padded or flat batch
            item = np.asarray(item, dtype=np.int64)
        batch = rows.batch(item)
        if not self.tensors:
            return batch
        return optree.tree_map(as_tensor, batch, none_is_leaf=True, namespace=NAMESPACE)

    def __reduce__(self) -> tuple[Any, ...]:
        # Workers started by spawn or forkserver rebuild the rows from the data and options.
        rows = self._rows
        return (_ragged_rebuilt, (type(self), rows.data, rows.opts, self.tensors))

    def __repr__(self) -> str:
        rows = self._rows
        return (
            f"RaggedItemsDataset(<{len(rows.ragged)} ragged and {len(rows.fixed_at)} fixed "
            f"leaves of {rows.n} rows, layout={rows.opts.layout!r}>)"
        )


def _ragged_rebuilt(
    cls: type[RaggedItemsDataset], data: Any, opts: Options, tensors: bool
) -> RaggedItemsDataset:
    """A RaggedItemsDataset unpickled: its rows rebuilt from ``data`` and ``opts``."""
    return cls(RaggedRows(data, opts), tensors=tensors)


def ragged_parts(
    rows: Any, order: Any, *, tensors: bool
) -> tuple[RaggedItemsDataset, Any, EpochCursor]:
    """The dataset, epoch order and epoch cursor of ``make_dataloader`` over ragged rows.

    Args:
        rows: the ragged rows of the data (a mixture's stand for its columns' rows).
        order: their epoch order (``rows.order``): of rows, or of planned batches.
        tensors: NumPy arrays of a batch come out as torch tensors.
    """
    cursor = EpochCursor()
    if isinstance(order, UnitOrder):
        # Planned batches: their count is the epoch's. A partial of `getattr` pickles and
        # deep-copies along with the cursor, which a lambda would not.
        order.current_epoch = functools.partial(getattr, cursor, "epoch")
        return RaggedItemsDataset(rows, tensors=tensors), PerBatch(order), cursor
    return RaggedItemsDataset(rows, tensors=tensors), order, cursor


class PerBatch:
    """A [`UnitOrder`][looptoolkit.ragged._units.UnitOrder] whose epochs yield one item per batch.

    The Loader lays out packed batches a block at a time; a batch sampler hands each batch to
    the dataset on its own (to a worker of its own), so here an epoch yields what each batch
    gathers. Everything else is the order's.
    """

    def __init__(self, order: UnitOrder) -> None:
        self.order = order

    def __getattr__(self, name: str) -> Any:
        order = self.__dict__.get("order")  # absent while unpickling
        if order is None:
            raise AttributeError(name)
        return getattr(order, name)

    def __len__(self) -> int:
        return len(self.order)

    def __repr__(self) -> str:
        return repr(self.order)

    def epoch(self, epoch: int, offset: int = 0) -> _Batches:
        """This rank's batches of ``epoch`` from global batch ``offset`` on, one at a time."""
        return _Batches(self.order.epoch(epoch, offset))


class _Batches:
    """A [`UnitEpoch`][looptoolkit.ragged._units.UnitEpoch] iterated one batch at a time."""

    def __init__(self, schedule: UnitEpoch) -> None:
        self.schedule = schedule

    def __getattr__(self, name: str) -> Any:
        schedule = self.__dict__.get("schedule")
        if schedule is None:
            raise AttributeError(name)
        return getattr(schedule, name)

    def __len__(self) -> int:
        return len(self.schedule)

    def __iter__(self) -> Iterator[Any]:
        schedule = self.schedule
        return (schedule.batch(i) for i in range(len(schedule)))


def hf_inputs(
    batch: Mapping[str, Any],
    *,
    key: str = "input_ids",
    labels: bool = True,
    ignore_index: int = -100,
    flash_attn_kwargs: bool = False,
    use_cache: bool | None = False,
    return_tensors: str = "pt",
) -> dict[str, Any]:
    """The keyword arguments of a ``transformers`` model for a batch of ragged token ids.

    ``batch[key]`` is the token column in the Loader's layout; every other entry is kept (a
    classification label, or ``labels`` of your own, which then win). Other ragged entries
    (a tokenizer's ``token_type_ids``) give their values, shaped as ``input_ids``; a ragged
    ``attention_mask`` is replaced by the one built here.

    - [`Padded`][looptoolkit.Padded] (``layout="pad"``): ``input_ids`` ``(B, L)`` and
      ``attention_mask`` ``(B, L)`` int64, what ``DataCollatorWithPadding`` gives.
    - [`Flat`][looptoolkit.Flat] (``layout="flat"``): ``input_ids`` ``(1, T)`` and
      ``position_ids`` ``(1, T)`` restarting at 0 for every document, what
      ``DataCollatorWithFlattening`` gives, and ``use_cache=False``: transformers 5 finds the
      documents from the position ids when it gets no ``attention_mask`` and builds no cache
      (with a cache, as a Llama config's ``use_cache=True`` asks even in training, the
      documents of a batch would attend to each other); the flash-attention kernels take
      the boundaries below.
    - [`Packed`][looptoolkit.Packed] (``PackLayout`` or ``FitLayout``): ``input_ids`` and
      ``position_ids`` ``(R, seq_len)``, positions restarting at each document piece.

    Args:
        batch: a mapping with the token column at ``key`` (NumPy arrays or torch tensors).
        key: the token column.
        labels: add causal-LM ``labels`` (unless ``batch`` has ``labels``): the token ids with
            ``ignore_index`` at padding. ``Padded`` keeps every document's first token (the
            model shifts the labels by one, so a row's first label is never a target);
            ``Flat`` and ``Packed`` also put ``ignore_index`` at the first token of every
            document (piece), so no loss crosses a boundary, as
            ``DataCollatorWithFlattening`` marks them.
        ignore_index: the label of tokens the loss skips.
        flash_attn_kwargs: for ``Flat`` and ``Packed``, also ``cu_seq_lens_q`` /
            ``cu_seq_lens_k`` (int32 boundaries over the flattened batch) and
            ``max_length_q`` / ``max_length_k`` (a Python int), the names
            ``transformers.modeling_flash_attention_utils.FlashAttentionKwargs`` gives them.
        use_cache: for ``Flat`` and ``Packed``, the model's ``use_cache`` argument; None
            leaves it out (for a model that takes none).
        return_tensors: ``"pt"`` (the default, as the HF collators'): NumPy arrays become
            torch tensors sharing their memory (tensors stay where they are, on their
            device); ``"np"``: NumPy arrays, as ``return_tensors="np"`` gives (tensors are
            copied to the host).

    Returns:
        A new dict of the model's keyword arguments.

    Raises:
        TypeError: ``batch`` is not a mapping, ``batch[key]`` is not a ragged layout, or its
            arrays are neither NumPy nor torch.
        ValueError: ``return_tensors`` is neither ``"pt"`` nor ``"np"``.

    Examples:
        >>> import numpy as np
        >>> import looptoolkit as lt
        >>> col = lt.Ragged(np.array([5, 6, 7, 8, 9]), np.array([0, 3, 5]))
        >>> padded = next(iter(lt.Loader({"input_ids": col}, 2, shuffle=False)))
        >>> kw = hf_inputs(padded)
        >>> type(kw["input_ids"]).__name__, kw["input_ids"].tolist()
        ('Tensor', [[5, 6, 7], [8, 9, 0]])
        >>> kw["attention_mask"].tolist(), kw["labels"].tolist()
        ([[1, 1, 1], [1, 1, 0]], [[5, 6, 7], [8, 9, -100]])
        >>> flat = next(iter(lt.Loader({"input_ids": col}, 2, shuffle=False, layout="flat")))
        >>> kw = hf_inputs(flat, flash_attn_kwargs=True, return_tensors="np")
        >>> kw["input_ids"].tolist(), kw["position_ids"].tolist(), kw["labels"].tolist()
        ([[5, 6, 7, 8, 9]], [[0, 1, 2, 0, 1]], [[-100, 6, 7, -100, 9]])
        >>> kw["cu_seq_lens_q"].tolist(), kw["max_length_q"]
        ([0, 3, 5], 3)
    """
    if return_tensors not in ("pt", "np"):
        raise ValueError(f'`return_tensors` must be "pt" or "np", got {return_tensors!r}.')
    out = _hf_inputs(
        batch,
        key=key,
        labels=labels,
        ignore_index=ignore_index,
        flash_attn_kwargs=flash_attn_kwargs,
        use_cache=use_cache,
    )
    convert = as_tensor if return_tensors == "pt" else _as_numpy
    return {k: convert(v) for k, v in out.items()}


def _as_numpy(leaf: Any) -> Any:
    """A torch tensor as a NumPy array on the host; anything else as it is."""
    if isinstance(leaf, torch.Tensor):
        return leaf.detach().cpu().numpy()
    return leaf
