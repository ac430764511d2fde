"""The torch kit: ``DataLoader`` as PyTorch users run it, randperm loops, the on-device gather."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, TensorDataset

from looptoolkit import Loader
from looptoolkit._rows.rows import Rows
from looptoolkit.adapters.torch import from_numpy
from looptoolkit.bench.variants import Context, Kit, images, loop, tokens, variant
from looptoolkit.bench.variants.augment import augment_variants
from looptoolkit.bench.variants.epochs import EpochPipeline, batch_slices, order_length
from looptoolkit.bench.variants.mix import mix_variants
from looptoolkit.bench.variants.numpy import each, numpy_manual
from looptoolkit.device import _tree as tree
from looptoolkit.order._order import batch_count, epoch_indices
from looptoolkit.torch_data import GetItemsDataset, keep_batch, make_dataloader


def _tensors(data: Any) -> tuple[list[torch.Tensor], Any]:
    """The leaves as tensors (NumPy arrays zero-copy) and the tree spec."""
    leaves, spec = tree.flatten(data)
    return [x if isinstance(x, torch.Tensor) else from_numpy(np.asarray(x)) for x in leaves], spec


class PerSampleDataset(Dataset):
    """``TensorDataset`` for any pytree: one row per ``__getitem__`` (DataLoader's default path)."""

    def __init__(self, data: Any) -> None:
        self._n, (self._leaves, self._spec) = Rows(data).n, _tensors(data)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Any:
        return tree.unflatten(self._spec, [leaf[i] for leaf in self._leaves])


class OrderSampler(EpochPipeline):
    """Sampler of the epoch orders of an ``Order``, ``Loader`` or function (the Loader's rule)."""

    def __init__(self, order: Any, n: int) -> None:
        super().__init__(lambda epoch: epoch_indices(order, epoch).tolist(), n, name="order")


def dataloader(
    dataset: Any, batch_size: int, *, order: Any = None, seed: int = 0, **kw: Any
) -> DataLoader:
    """A ``DataLoader`` in ``order`` (an `OrderSampler`), or shuffled by a generator of ``seed``."""
    sampler = None if order is None else OrderSampler(order, len(dataset))
    generator = torch.Generator().manual_seed(seed) if order is None else None
    return DataLoader(dataset, batch_size, order is None, sampler, generator=generator, **kw)


def per_sample_dataloader(data: Any, batch_size: int, **kwargs: Any) -> DataLoader:
    """`dataloader` over a `PerSampleDataset` of ``data``: one ``__getitem__`` per sample."""
    return dataloader(PerSampleDataset(data), batch_size, **kwargs)


def getitems_dataloader(data: Any, batch_size: int, **kwargs: Any) -> DataLoader:
    """`dataloader` over ``GetItemsDataset(data)``: lists of ints, one gather per batch."""
    return dataloader(GetItemsDataset(data), batch_size, collate_fn=keep_batch, **kwargs)


def randperm_loop(
    data: Any, batch_size: int, *, seed: int = 0, gather: str = "index", device: Any = None
) -> EpochPipeline:
    """``torch.randperm`` per epoch, then ``leaf[idx]`` or (``"index_select"``) per leaf a batch.

    ``device``: each batch's leaves then go there, ``.to(device, non_blocking=True)``.
    """
    if gather not in ("index", "index_select"):
        raise ValueError(f"`gather` must be 'index' or 'index_select', got {gather!r}.")
    ts, spec = _tensors(data)
    n, on, select = int(ts[0].shape[0]), ts[0].device, gather == "index_select"
    generator = torch.Generator(device=on if on.type == "cuda" else "cpu").manual_seed(seed)
    move: Callable[[list[Any]], list[Any]] = (lambda ts: ts) if device is None else _to(device)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        perm = torch.randperm(n, generator=generator, device=generator.device)
        for idx in batch_slices(perm, batch_size):
            leaves = [t.index_select(0, idx) if select else t[idx] for t in ts]
            yield tree.unflatten(spec, move(leaves))

    return EpochPipeline(epoch_fn, batch_count(n, batch_size), name=f"randperm_loop[{gather}]")


def _to(device: Any) -> Callable[[list[Any]], list[Any]]:
    """Each leaf as a tensor (NumPy zero-copy) on ``device``: what a hand loop writes."""
    return lambda leaves: [torch.as_tensor(x).to(device, non_blocking=True) for x in leaves]


def floor_loop(data: Any, batch_size: int, *, seed: int = 0, device: Any = None) -> EpochPipeline:
    """The best manual loop + ``torch.from_numpy`` per leaf; on a GPU each leaf then goes there.

    The copy is ``.to(device, non_blocking=True)`` from the fresh (pageable) batch, the
    fastest hand loop measured on an H200 for small batches (pinned slots and events cost
    more per batch, `benchmarks/cuda_upload.py`); so the Loader is judged against a loop
    that moves too.
    """
    wrap = each(torch.from_numpy) if device is None else _to(device)
    return numpy_manual(data, batch_size, seed=seed, wrap=wrap)


def tensordataset_dataloader(
    data: Any, batch_size: int, *, seed: int = 0, device: Any = None
) -> EpochPipeline:
    """What a device-resident Loader replaces: a ``DataLoader`` of a ``TensorDataset``.

    ``shuffle=True``, ``pin_memory=True`` on CUDA, and each batch's tensors then
    ``.to(device, non_blocking=True)``.
    """
    tensors, spec = _tensors(data)
    pin = device is not None and torch.device(device).type == "cuda"
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        TensorDataset(*tensors), batch_size, shuffle=True, pin_memory=pin, generator=generator
    )
    move: Callable[[list[Any]], list[Any]] = (lambda ts: ts) if device is None else _to(device)

    def epoch_fn(epoch: int) -> Iterator[Any]:
        for batch in loader:
            yield tree.unflatten(spec, move(list(batch)))

    return EpochPipeline(epoch_fn, len(loader), name="tensordataset")


def resident_gather(data: Any, batch_size: int, *, order: Any, device: Any = None) -> EpochPipeline:
    """The bare on-device gather: data and each epoch's order on ``device``, ``index_select``."""
    tensors, spec = _tensors(data)
    tensors = tensors if device is None else [t.to(device) for t in tensors]
    on, n = tensors[0].device, int(tensors[0].shape[0])

    def epoch_fn(epoch: int) -> Iterator[Any]:
        indices = torch.from_numpy(epoch_indices(order, epoch).astype(np.int64)).to(on)
        for idx in batch_slices(indices, batch_size):
            yield tree.unflatten(spec, [t.index_select(0, idx) for t in tensors])

    return EpochPipeline(epoch_fn, order_length(order, n, batch_size), name="resident_gather")


def _workers(ctx: Context) -> DataLoader:
    """The per-sample DataLoader with 2 persistent workers, over clones of the tensors."""
    # forkserver, not fork: jax and tf have started threads in this process, and forking a
    # threaded process can deadlock. Clones: torch moves them to shared memory for the workers.
    tensors, spec = _tensors(ctx.data)
    data = tree.unflatten(spec, [t.clone() for t in tensors])
    options = {
        "multiprocessing_context": "forkserver",
        "persistent_workers": True,
        "num_workers": 2,
    }
    return per_sample_dataloader(data, ctx.batch_size, order=ctx.order("full"), **options)


# -- the tokens workload: what PyTorch and HF users write for variable-length documents ---------


class DocumentDataset(Dataset):
    """One document per ``__getitem__``: a zero-copy tensor of its tokens.

    ``lists``: a dict of a list of ints instead, as an HF ``datasets`` row is.
    """

    def __init__(self, data: Any, *, lists: bool = False) -> None:
        corpus = tokens.Corpus.of(data)
        self._values, self._lists = corpus.values, lists
        self._tensor, self._offsets = from_numpy(corpus.values), corpus.offsets.tolist()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> Any:
        a, b = self._offsets[i], self._offsets[i + 1]
        return {"input_ids": self._values[a:b].tolist()} if self._lists else self._tensor[a:b]


def pad_collate(docs: list[torch.Tensor]) -> tokens.PaddedBatch:
    """The collate PyTorch users write: ``pad_sequence``, the lengths and the mask."""
    lengths = torch.tensor([len(d) for d in docs])
    values = pad_sequence(docs, batch_first=True, padding_value=0)
    return tokens.PaddedBatch(values, torch.arange(values.shape[1]) < lengths[:, None], lengths)


def documents_dataloader(data: Any, batch_size: int, *, collate: str, seed: int = 0) -> DataLoader:
    """``DataLoader(shuffle=True)`` of 32 documents: ``pad_sequence``, or an HF collator.

    ``collate``: ``"pad_sequence"`` (`pad_collate`), ``"hf-pad"`` (``DataCollatorWithPadding``
    with a tokenizer whose pad id is 0) or ``"hf-flatten"`` (``DataCollatorWithFlattening``
    with the flash-attention boundaries).
    """
    del batch_size  # the tokens workload's settings say how many documents a batch has
    fn: Any = pad_collate
    if collate == "hf-pad":
        from tokenizers import Tokenizer, models
        from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast

        vocab = models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]")
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(vocab), pad_token="[PAD]")
        fn = DataCollatorWithPadding(tokenizer)
    elif collate == "hf-flatten":
        from transformers import DataCollatorWithFlattening

        fn = DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    dataset = DocumentDataset(data, lists=collate != "pad_sequence")
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, tokens.SETTINGS.batch, True, generator=generator, collate_fn=fn)


def hf_padded(batch: Any) -> tokens.PaddedBatch:
    """``DataCollatorWithPadding``'s batch as a padded batch."""
    mask = batch["attention_mask"]
    return tokens.PaddedBatch(batch["input_ids"], mask.bool(), mask.sum(1))


def hf_flat(batch: Any) -> tokens.FlatBatch:
    """``DataCollatorWithFlattening``'s batch as a padding-free batch."""
    ids, positions, cu = batch["input_ids"][0], batch["position_ids"][0], batch["cu_seq_lens_q"]
    return tokens.FlatBatch(ids, cu, positions, int(batch["max_length_q"]))


NAME = "torch"
LABELS = {
    "floor-torch": "floor: best manual loop + torch.from_numpy per leaf (on a GPU: + .to(device))",
    "torch-index": "torch.randperm + x[idx] per leaf (torch's indexing; on a GPU: + .to(device))",
    "torch-index-select": "torch.randperm + index_select per leaf (on a GPU: + .to(device))",
    "dl-per-sample": "DataLoader: per-sample __getitem__ + default_collate, 0 workers",
    "dl-per-sample-w2": "the same DataLoader with 2 workers (persistent, forkserver)",
    "dl-getitems": "DataLoader over GetItemsDataset: lists of ints to __getitems__",
    "dl-getitems-arrays": "make_dataloader: GetItemsDataset + batches of index arrays",
    "loader-torch": "Loader on torch data (on a GPU: pinned, non-blocking copies)",
    "loader-torch-res": "Loader, data resident on the GPU",
    "dl-tensordataset": "DataLoader(TensorDataset, shuffle=True, pin_memory=True) + .to(device): "
    "what a resident Loader replaces",
    "torch-res-gather": "bare on-device index_select (the GPU reference)",
    "dl-pad-sequence": "DataLoader(shuffle=True) of tensor views, collate: pad_sequence + mask",
    "hf-pad": "DataLoader of {'input_ids': list} + HF DataCollatorWithPadding",
    "hf-flatten": "DataLoader of {'input_ids': list} + HF DataCollatorWithFlattening "
    "(flash-attention boundaries)",
}
_HF = {"needs": ("transformers",), "slow": True}
_v = partial(variant, NAME, LABELS)
VARIANTS = (
    _v("floor-torch", loop(floor_loop, host=True, device_of=NAME, gpu_only=True), shuffle=None),
    _v(
        "torch-index",
        loop(randperm_loop, gather="index", device_of=NAME, gpu_only=True),
        shuffle=None,
    ),
    _v(
        "torch-index-select",
        loop(randperm_loop, gather="index_select", device_of=NAME, gpu_only=True),
        shuffle=None,
    ),
    _v("dl-per-sample", loop(per_sample_dataloader, order=True)),
    _v("dl-per-sample-w2", _workers, slow=True),
    _v("dl-getitems", loop(getitems_dataloader, order=True)),
    _v("dl-getitems-arrays", loop(make_dataloader, shuffle=True)),
    _v("loader-torch", loop(Loader, device_of=NAME, gpu_only=True), floor="floor-torch"),
    *images(NAME),
    _v(
        "loader-torch-res",
        loop(Loader, device_of=NAME, resident=True),
        accelerator=True,
        floor="torch-res-gather",
    ),
    _v("torch-res-gather", loop(resident_gather, order=True, device_of=NAME), accelerator=True),
    _v(
        "dl-tensordataset",
        loop(tensordataset_dataloader, host=True, device_of=NAME),
        accelerator=True,
        slow=True,
    ),
    *(
        tokens.on_tokens(_v(name, loop(documents_dataloader, host=True, collate=how), **kw), b)
        for name, how, b, kw in (
            ("dl-pad-sequence", "pad_sequence", "pad", {}),
            ("hf-pad", "hf-pad", "pad", {"convert": hf_padded, **_HF}),
            ("hf-flatten", "hf-flatten", "flat", {"convert": hf_flat, **_HF}),
        )
    ),
    *mix_variants(NAME, ("torchdata-mix",), slow=("torchdata-mix",)),
    *augment_variants(NAME),
)
KIT = Kit(
    NAME,
    VARIANTS,
    lambda leaves, _: [torch.from_numpy(x) for x in leaves],
    None,
    torch.cuda.is_available,
)
