"""Graph-ready batches: every batch of a loader copied into one set of fixed buffers.

A step captured with ``torch.cuda.graph`` (or compiled with ``torch.compile(
mode="reduce-overhead")``, which captures CUDA graphs) reads its inputs from the
addresses it saw at capture. [`StaticBatches`][looptoolkit.StaticBatches] sits after
the Loader: it allocates the buffers from the first batch, copies each batch into
them with ``copy_`` on the loop's current stream (the batch is already where the
Loader moved it, so the copy stays on that device), and hands the loop the same
buffers every time. The short last batch is dropped or padded, with a mask.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from looptoolkit.device._tree import flatten, leaf_paths, unflatten

SHORT = ("drop", "pad")


class StaticBatches:
    """A loader's batches, each copied into the same buffers (for CUDA graphs).

    Every leaf of a batch must be a torch tensor (a Loader with a torch ``device``,
    or over torch tensors). On the first batch one buffer per leaf is allocated,
    shaped as a full batch, on the leaf's device; each batch is then copied into
    the buffers (``copy_(..., non_blocking=True)`` on the current stream) and the
    same object, holding the same tensors, is yielded every time: their
    ``data_ptr()`` never changes, across epochs too. Capture a step on them once
    and replay it for every batch.

    The buffers are overwritten by the next batch: use a batch within its step,
    as a CUDA graph's static inputs are used, and ``clone()`` what must outlive it.

    ``len()``, ``set_epoch``, ``state_dict`` and ``load_state_dict`` are the
    loader's (resume is exact); with ``short="drop"`` ``len()`` leaves out the
    short last batch.

    Args:
        loader: a [`Loader`][looptoolkit.Loader] (or any iterable of batches with
            the same structure, whose leaves have the same shape beyond the first
            dimension in every batch). With ``return_mask=True`` its masks are
            carried into the buffers' mask.
        short: what happens to a last batch with fewer rows than the buffers:
            ``"drop"`` skips it; ``"pad"`` copies its rows, fills the rest of every
            buffer with ``pad_value`` and yields ``(batch, mask)`` pairs, ``mask``
            a 1-D bool tensor on the batch's device, True at the real rows (the
            form of the Loader's ``return_mask``). A Loader with
            ``return_mask=True`` gets pairs in both modes, its padding rows False.
        pad_value: the value of padded rows (``short="pad"`` only); 0 by default.

    Raises:
        TypeError: ``loader`` is not iterable, ``pad_value`` is not a number; while
            iterating, a leaf that is not a torch tensor (named by its key path).
        ValueError: ``short`` is unknown, or ``pad_value`` comes with ``"drop"``;
            while iterating, a batch whose leaves do not fit the buffers (another
            shape beyond the rows, dtype, device or structure), or a short batch
            that is not the last.

    Examples:
        >>> import torch
        >>> from looptoolkit import Loader, StaticBatches
        >>> data = {"x": torch.arange(10.0).reshape(5, 2)}
        >>> batches = StaticBatches(Loader(data, 2, shuffle=False), short="pad")
        >>> len(batches)
        3
        >>> seen = [(b["x"].data_ptr(), b["x"].tolist(), m.tolist()) for b, m in batches]
        >>> len({ptr for ptr, _, _ in seen})
        1
        >>> seen[-1][1:]
        ([[8.0, 9.0], [0.0, 0.0]], [True, False])
    """

    def __init__(self, loader: Any, *, short: str = "drop", pad_value: Any = None) -> None:
        if not hasattr(loader, "__iter__"):
            raise TypeError(f"`loader` must be iterable, got {type(loader).__name__}.")
        if short not in SHORT:
            raise ValueError(f'`short` must be "drop" or "pad", got {short!r}.')
        if pad_value is not None:
            if short != "pad":
                raise ValueError('`pad_value` needs `short="pad"`.')
            if isinstance(pad_value, bool) or not isinstance(pad_value, int | float):
                raise TypeError(f"`pad_value` must be a number, got {pad_value!r}.")
        self.loader = loader
        self.short = short
        self.pad_value = 0 if pad_value is None else pad_value
        self._masked = bool(getattr(loader, "return_mask", False))
        self._buffers: list[Any] | None = None  # one per leaf, allocated by the first batch
        self._rows = 0  # the buffers' rows: a full batch
        self._spec: Any = None
        self._paths: list[str] = []
        self._mask: Any = None
        self._mask_rows = 0  # rows the mask is True for now (without a loader's mask)
        self._out: Any = None  # what every step gets, the same object each time

    def __repr__(self) -> str:
        pad = f", pad_value={self.pad_value!r}" if self.short == "pad" else ""
        return f"StaticBatches({self.loader!r}, short={self.short!r}{pad})"

    @property
    def rows(self) -> int | None:
        """Rows of the buffers (a full batch); None before the first batch."""
        return self._rows or None

    def __len__(self) -> int:
        """The loader's batches per epoch, less the short last one with ``short="drop"``."""
        n = len(self.loader)
        if self.short == "drop" and n:
            last = getattr(getattr(self.loader, "order", None), "last_batch_size", None)
            if last is not None and last():
                n -= 1
        return n

    def set_epoch(self, epoch: int) -> None:
        """The loader's [`set_epoch`][looptoolkit.Loader.set_epoch]."""
        self.loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The loader's [`state_dict`][looptoolkit.Loader.state_dict]."""
        return dict(self.loader.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The loader's [`load_state_dict`][looptoolkit.Loader.load_state_dict]."""
        self.loader.load_state_dict(state)

    def __iter__(self) -> Generator[Any, None, None]:
        source = iter(self.loader)
        short_seen = None  # the number of a short batch: any batch after it is an error
        try:
            for i, item in enumerate(source):
                batch, mask = item if self._masked else (item, None)
                if short_seen is not None:
                    raise ValueError(
                        f"batch {short_seen} of the pass was shorter than the buffers "
                        f"({self.rows} rows) but not the last: StaticBatches needs every "
                        "batch but the last to be full (a fixed `batch_size`, no token budget)."
                    )
                if self._fill(batch, mask) < self._rows:
                    short_seen = i
                    if self.short == "drop":
                        continue
                yield self._out
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def _fill(self, batch: Any, mask: Any) -> int:
        """Copy ``batch`` into the buffers (allocated by the first); return its rows.

        A short batch that is to be dropped is checked, not copied.
        """
        import torch

        leaves, spec = flatten(batch)
        if self._buffers is None:
            self._allocate(torch, leaves, spec)
        elif spec != self._spec:
            raise ValueError(
                f"a batch's structure changed: {spec} instead of the buffers' {self._spec}."
            )
        buffers = self._buffers
        assert buffers is not None
        rows = self._rows
        first = leaves[0]
        n = int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() else -1
        for path, leaf, buffer in zip(self._paths, leaves, buffers, strict=True):
            _check(torch, path, leaf, buffer, n)
        if n < rows and self.short == "drop":
            return n
        for leaf, buffer in zip(leaves, buffers, strict=True):
            if n == rows:
                buffer.copy_(leaf, non_blocking=True)
            else:
                buffer[:n].copy_(leaf, non_blocking=True)
                buffer[n:].fill_(self.pad_value)
        if mask is not None:
            carried = torch.as_tensor(mask, dtype=torch.bool)
            self._mask[:n].copy_(carried, non_blocking=True)
            self._mask[n:].fill_(False)
        elif self._mask is not None and n != self._mask_rows:
            self._mask[:n].fill_(True)
            self._mask[n:].fill_(False)
            self._mask_rows = n
        return n

    def _allocate(self, torch: Any, leaves: list[Any], spec: Any) -> None:
        paths = leaf_paths(spec)
        for path, leaf in zip(paths, leaves, strict=True):
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(
                    f"StaticBatches fills torch tensors only: {path} is a "
                    f"{type(leaf).__module__}.{type(leaf).__qualname__}; create the Loader "
                    'with a torch `device` (e.g. device="cuda"), or over torch tensors.'
                )
            if leaf.dim() == 0:
                raise ValueError(f"{path} is a 0-d tensor: a batch's leaves need rows.")
        # A first batch can be short (an epoch of one batch, a resumed pass): the buffers
        # hold a full batch of the loader's `batch_size` when it has one.
        rows = max(int(leaves[0].shape[0]), int(getattr(self.loader, "batch_size", 0) or 0))
        self._buffers = [
            torch.empty((rows, *leaf.shape[1:]), dtype=leaf.dtype, device=leaf.device)
            for leaf in leaves
        ]
        self._spec, self._paths, self._rows = spec, paths, rows
        self._out = unflatten(spec, self._buffers)
        if self._masked or self.short == "pad":
            self._mask = torch.ones(rows, dtype=torch.bool, device=leaves[0].device)
            self._mask_rows = rows
            self._out = (self._out, self._mask)


def _check(torch: Any, path: str, leaf: Any, buffer: Any, n: int) -> None:
    """Raise unless ``leaf`` (``n`` rows) fits ``buffer``, naming it and the fix."""
    if not isinstance(leaf, torch.Tensor):
        raise TypeError(
            f"StaticBatches fills torch tensors only: {path} is a {type(leaf).__qualname__} "
            "in this batch, a tensor in the first."
        )
    if leaf.dtype != buffer.dtype or leaf.device != buffer.device:
        raise ValueError(
            f"{path} is {leaf.dtype} on {leaf.device}, its buffer {buffer.dtype} on "
            f"{buffer.device}: every batch must keep its leaves' dtypes and devices."
        )
    shape, fixed = tuple(leaf.shape), tuple(buffer.shape)
    if shape[1:] != fixed[1:] or shape[0] != n or n > fixed[0]:
        raise ValueError(
            f"{path} has shape {shape}, its buffer {fixed} (a batch of {n} rows): "
            "StaticBatches needs every batch's leaves in the first batch's shapes, rows "
            "aside. Give ragged data one length per batch: `layout=looptoolkit.PadLayout("
            "buckets=[512])` with one length in `buckets` at least the longest row, or "
            "`layout=looptoolkit.PackLayout(seq_len=512)`."
        )
