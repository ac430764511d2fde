"""``Augment``: a keyed batch transform that runs image ops in turn on one leaf of a batch.

The last step before a batch leaves for training: the Loader hands each batch and its
[`BatchKeys`][looptoolkit._common.keys.BatchKeys] to a transform whose ``keyed`` is True;
``Augment`` finds the images (and labels) in the batch, runs its ops, each with its own
draw stream, and returns a new batch of the same structure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from looptoolkit._common.keys import BatchKeys
from looptoolkit.augment import _dispatch, _image
from looptoolkit.augment._base import ImageBatch, Keyed, Op, stream_of

__all__ = ["Augment"]

_DTYPES = ("uint8", "float16", "bfloat16", "float32", "float64")


def _dtype_name(dtype: Any) -> str | None:
    """The name of ``dtype`` (a string, a NumPy or a torch dtype), or None."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__ == "torch":
        name = str(dtype).removeprefix("torch.")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"`dtype` must be a dtype or its name, got {dtype!r}.") from None
    if name not in _DTYPES:
        raise ValueError(f"`dtype` must be one of {', '.join(_DTYPES)}, got {dtype!r}.")
    return name


def convert(images: Any, name: str) -> Any:
    """``images`` as dtype ``name``, scaled as torchvision's ``ToDtype(scale=True)``.

    uint8 to float divides by 255; float to uint8 multiplies by ``256 - 1e-3`` and
    truncates; float to float only casts.
    """
    kernels = _dispatch.kernels(images)
    if kernels is not None:
        return kernels.convert(images, name)
    if _image.is_torch(images):
        import torch

        dtype = getattr(torch, name)
        if images.dtype == dtype:
            return images
        if not images.is_floating_point() and dtype.is_floating_point:
            return images.to(dtype) / 255.0
        if images.is_floating_point() and not dtype.is_floating_point:
            return (images * (255.0 + 1.0 - 1e-3)).clamp(0, 255).to(dtype)
        return images.to(dtype)
    if name == "bfloat16":
        raise ValueError("`dtype='bfloat16'` needs torch tensors; NumPy has no bfloat16.")
    target = np.dtype(name)
    if images.dtype == target:
        return images
    source_float = np.issubdtype(images.dtype, np.floating)
    if not source_float and target.kind == "f":
        return (images.astype(target) / target.type(255)).astype(target)
    if source_float and target.kind != "f":
        return np.clip(images * (255.0 + 1.0 - 1e-3), 0, 255).astype(target)
    return images.astype(target)


class Augment(Keyed):
    """Run image ops in turn on a leaf of each batch, every parameter keyed to the rows.

    A transform for the Loader (``keyed = True``: it is called with the batch's keys).
    Each op draws from its own stream, so a row's parameters depend only on the Loader's
    seed, the epoch, the row's position in the epoch's order and the op's place here.

    Args:
        ops: the ops, applied in order.
        key: where the images are: a key of a dict batch (or an index of a tuple batch), or
            None when the batch is the images array itself.
        labels: where the labels are, for ops that change them (MixUp, CutMix), or None.
        num_classes: the number of classes, for ops that turn class ids into soft labels.
        channels: the images' layout: ``"first"`` ``(N, C, H, W)`` or ``"last"``
            ``(N, H, W, C)``.
        dtype: the output images' dtype (a name, a NumPy or a torch dtype), or None to keep
            the input's; uint8 to float scales to ``[0, 1]``.
        placement: ``"device"`` (the default): after the batch's move, where it lives (a
            GPU's batched ops); ``"host"``: on the host batch before its copy (the data's
            NumPy or torch arrays, before any ``dtype`` cast of the Loader).

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import Augment, BatchKeys, HorizontalFlip
        >>> aug = Augment([HorizontalFlip(p=1.0)], key="image")
        >>> batch = {"image": np.arange(8, dtype=np.uint8).reshape(1, 1, 2, 4)}
        >>> aug(batch, BatchKeys(0, 0, np.array([0])))["image"][0, 0]
        array([[3, 2, 1, 0],
               [7, 6, 5, 4]], dtype=uint8)
    """

    def __init__(
        self,
        ops: Sequence[Op],
        *,
        key: str | int | None = "image",
        labels: str | int | None = None,
        num_classes: int | None = None,
        channels: str = "first",
        dtype: Any = None,
        placement: str = "device",
    ) -> None:
        super().__init__(placement)
        if isinstance(ops, Op) or not isinstance(ops, Sequence):
            raise TypeError(f"`ops` must be a list of ops, got {ops!r}.")
        for op in ops:
            if not isinstance(op, Op):
                raise TypeError(f"`ops` must hold augmentation ops, got {op!r}.")
        if channels not in ("first", "last"):
            raise ValueError(f"`channels` must be 'first' or 'last', got {channels!r}.")
        if labels is not None and key is None:
            raise ValueError("`labels` needs a dict or tuple batch; pass `key=` for the images.")
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
            raise ValueError(f"`num_classes` must be an int >= 1, got {num_classes!r}.")
        self.ops = list(ops)
        self.key = key
        self.labels = labels
        self.num_classes = num_classes
        self.channels = channels
        self.dtype = dtype
        self._dtype = _dtype_name(dtype)

    def __repr__(self) -> str:
        args = [repr(self.ops), f"key={self.key!r}"]
        for name in ("labels", "num_classes", "dtype"):
            if getattr(self, name) is not None:
                args.append(f"{name}={getattr(self, name)!r}")
        if self.channels != "first":
            args.append(f"channels={self.channels!r}")
        if self.placement != "device":
            args.append(f"placement={self.placement!r}")
        return f"Augment({', '.join(args)})"

    def _leaf(self, batch: Any, key: str | int, what: str) -> Any:
        where = f"batch[{key!r}]"
        if isinstance(batch, Mapping):
            if key not in batch:
                raise ValueError(
                    f"No {what} at {where}: the batch's keys are {sorted(map(str, batch))}; "
                    f"pass `{'key' if what == 'images' else 'labels'}=` naming the leaf."
                )
            return batch[key]
        if isinstance(batch, tuple | list) and isinstance(key, int):
            if not -len(batch) <= key < len(batch):
                raise ValueError(f"No {what} at {where}: the batch has {len(batch)} leaves.")
            return batch[key]
        raise TypeError(
            f"`key` {key!r} needs a dict batch (or an int for a tuple batch), got a "
            f"{type(batch).__name__}; pass `key=None` when the batch is the images array."
        )

    def _check(self, images: Any, keys: BatchKeys) -> None:
        where = "the batch" if self.key is None else f"batch[{self.key!r}]"
        if not hasattr(images, "shape") or not hasattr(images, "dtype"):
            raise TypeError(f"{where} must be an array or a tensor, got {type(images).__name__}.")
        if not isinstance(images, np.ndarray) and not (
            _image.is_torch(images) or _dispatch.kernels(images) is not None
        ):
            raise TypeError(
                f"{where} is a {type(images).__module__}.{type(images).__name__}; the ops run "
                "on NumPy arrays, torch tensors, JAX arrays and tf tensors: pass "
                "`placement='host'` to augment the host batch before its copy."
            )
        if len(images.shape) != 4:
            layout = "(N, C, H, W)" if self.channels == "first" else "(N, H, W, C)"
            raise ValueError(
                f"{where} must be a 4-D batch of images {layout}, got shape "
                f"{tuple(images.shape)}; batch single images before augmenting."
            )
        width = images.shape[1] if self.channels == "first" else images.shape[3]
        if width not in (1, 3, 4):
            other = "last" if self.channels == "first" else "first"
            raise ValueError(
                f"{where} has {width} channels on its `channels={self.channels!r}` axis, "
                f"not 1, 3 or 4: shape {tuple(images.shape)}; pass `channels={other!r}` "
                "if the channels are on the other side."
            )
        name = getattr(images.dtype, "name", None) or str(images.dtype).removeprefix("torch.")
        if name != "uint8" and not _image.is_float(images):
            raise TypeError(f"{where} must be uint8 or floating point images, got {name}.")
        if len(keys.positions) != images.shape[0]:
            raise ValueError(
                f"`keys` has {len(keys.positions)} positions for a batch of "
                f"{images.shape[0]} images."
            )

    def __call__(self, batch: Any, keys: BatchKeys | None = None) -> Any:
        """The batch with its images (and labels) augmented; ``batch`` is left as it is.

        Args:
            batch: a dict (or tuple) batch holding the images, or the images array.
            keys: the batch's keys; the Loader passes them to keyed transforms.

        Returns:
            A new batch of the same structure.

        Raises:
            TypeError: without ``keys``, or for images of a wrong kind.
            ValueError: for a missing leaf or images of a wrong shape.
        """
        if not isinstance(keys, BatchKeys):
            raise TypeError(
                "`Augment` draws each row's parameters from the batch's keys, which the "
                "Loader passes to transforms with `keyed = True`; called by hand, pass "
                f"`keys=BatchKeys(seed, epoch, positions)`, got {keys!r}."
            )
        images = batch if self.key is None else self._leaf(batch, self.key, "images")
        labels = None if self.labels is None else self._leaf(batch, self.labels, "labels")
        self._check(images, keys)
        state = ImageBatch(images, self.channels, labels, self.num_classes)
        for place, op in enumerate(self.ops):
            state = op.apply(state, op.draw(keys, stream_of(place, op), state))
        out_images = state.images if self._dtype is None else convert(state.images, self._dtype)
        if self.key is None:
            return out_images
        updates = {self.key: out_images}
        if self.labels is not None and state.labels is not labels:
            updates[self.labels] = state.labels
        if isinstance(batch, Mapping):
            return {**batch, **updates}
        out = list(batch)
        for k, v in updates.items():
            out[k] = v  # type: ignore[index]
        return type(batch)(out) if isinstance(batch, tuple) else out
