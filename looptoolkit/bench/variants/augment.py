"""The ``augment`` workload's loops: where a batch's random resized crop, flip and normalise run.

Each loop turns uint8 images ``(N, 3, 256, 256)`` into float32 ``(B, 3, 224, 224)`` batches:
a random resized crop to 224 (torchvision's scale and ratio ranges), a horizontal flip with
probability 1/2, then ``(x - 127.5) / 64`` (`PIPELINE`). The Loader's loops draw every
parameter from the rows' keys (`Pipeline`), so they are checked against the keyed reference
(`reference`) within one level; the others draw from their own generators and are checked for
shape, dtype, range and every row once. Peers (torchvision v2, Kornia, Keras in tf.data) run
only where installed and are listed as "not installed" otherwise. `draw_share` measures the
keyed draw's share of the ops' time.

torchvision: a torchvision wheel built for CUDA beside a CPU build of torch (the only one
that installs beside the project's pinned torch, in an aside venv, ``--no-deps``) fails to
import its compiled ops' fake registrations; `import_torchvision` registers an empty module in
their place first, so the pure-Python transforms import (the trick of
``benchmarks/augment_golden.py``); ``transforms.v2`` on tensors needs none of the compiled ops.
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from looptoolkit.augment import Augment, BatchKeys, HorizontalFlip, RandomResizedCrop
from looptoolkit.augment._base import ImageBatch, Keyed, Op, stream_of
from looptoolkit.bench.variants import MEAN, STD, Context, Variant, kit, loop
from looptoolkit.bench.variants.epochs import EpochPipeline, batch_slices
from looptoolkit.order._order import Order, batch_count

__all__ = [
    "AUGMENT_BASELINE",
    "PIPELINE",
    "SIZE",
    "PerSample",
    "Pipeline",
    "augment_variants",
    "draw_share",
]
__all__ += ["import_torchvision", "levels", "order_positions", "reference", "threads"]

SIZE = 224  # the crop's output side
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)  # torchvision's RandomResizedCrop defaults
PIPELINE = "RandomResizedCrop(224) + HorizontalFlip() + normalise (x - 127.5) / 64 to float32"
WORKERS = 2
AUGMENT_BASELINE = "loader-aug-host"
"""The row every other is set against: the Loader in the loop's own process, on NumPy."""


class Pipeline(Keyed):
    """The workload's ops as one keyed transform: ``Augment`` (uint8 out), then ``normalize``.

    ``flip``: the flip op (a test plants a wrong one); ``placement`` as for ``Augment``.
    """

    def __init__(self, placement: str = "device", flip: Op | None = None) -> None:
        from looptoolkit import normalize

        super().__init__(placement)
        ops = [RandomResizedCrop(SIZE), flip if flip is not None else HorizontalFlip()]
        self.augment = Augment(ops, key="image")
        self.normalize = normalize([MEAN] * 3, [STD] * 3, key="image", dtype="float32")

    def __call__(self, batch: Any, keys: BatchKeys | None = None) -> Any:
        """The batch with its images cropped, flipped and normalised (float32)."""
        return self.normalize(self.augment(batch, keys))


def levels(images: np.ndarray) -> np.ndarray:
    """Normalised float32 images back in uint8 levels (float): ``x * 64 + 127.5``."""
    return images.astype(np.float32) * np.float32(STD) + np.float32(MEAN)


def reference(
    data: dict[str, np.ndarray], ids: np.ndarray, positions: np.ndarray, seed: int
) -> np.ndarray:
    """The keyed rows ``ids`` at ``positions`` of epoch 0, in levels: what a Loader row must be.

    The NumPy ``Augment`` on the host (the rule every placement follows), uint8.
    """
    aug = Pipeline().augment
    out = aug({"image": data["image"].take(ids, axis=0)}, BatchKeys(seed, 0, positions))
    return np.asarray(out["image"])


# -- the Loader's loops -------------------------------------------------------------------------


def loader_host(data: Any, batch_size: int, *, seed: int = 0, flip: Op | None = None) -> Any:
    """``Loader(data, B, transform=Pipeline(placement="host"))``: NumPy, the loop's process."""
    from looptoolkit import Loader

    return Loader(data, batch_size, seed=seed, transform=Pipeline("host", flip))


def loader_device(data: Any, batch_size: int, *, seed: int = 0, device: Any = None) -> Any:
    """``Loader(data, B, device=dev, transform=Pipeline())``: torch ops after the move."""
    from looptoolkit import Loader

    return Loader(data, batch_size, seed=seed, device=device, transform=Pipeline())


def loader_workers(data: Any, batch_size: int, *, seed: int = 0) -> Any:
    """``make_dataloader(data, B, collate_fn=Pipeline(), num_workers=2)``: torch in workers."""
    from looptoolkit.torch_data import make_dataloader

    return make_dataloader(data, batch_size, seed=seed, collate_fn=Pipeline(), num_workers=WORKERS)


# -- per-sample loops in a DataLoader: the habit, and torchvision v2 ------------------------------


def crop_box(height: int, width: int, rand: Any) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` by torchvision's ``RandomResizedCrop.get_params``; ``rand()``: [0, 1).

    Ten tries at a random area and log-uniform aspect ratio, then the central crop clipped to
    the ratio range.
    """
    area = height * width
    for _ in range(10):
        target = area * (SCALE[0] + (SCALE[1] - SCALE[0]) * rand())
        log_ratio = np.log(RATIO[0]) + (np.log(RATIO[1]) - np.log(RATIO[0])) * rand()
        aspect = float(np.exp(log_ratio))
        w, h = round((target * aspect) ** 0.5), round((target / aspect) ** 0.5)
        if 0 < w <= width and 0 < h <= height:
            return int(rand() * (height - h + 1)), int(rand() * (width - w + 1)), h, w
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        h, w = height, round(height * RATIO[1])
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class PerSample:
    """A map-style dataset for ``DataLoader``: ``{"image": transform(row), "label"}`` per row.

    The row is a zero-copy uint8 tensor of the images; a plain class (``DataLoader`` needs only
    ``__len__`` and ``__getitem__``), so spawned workers can unpickle it too.
    """

    def __init__(self, data: dict[str, np.ndarray], transform: Any) -> None:
        import torch

        self.images, self.labels = torch.from_numpy(data["image"]), torch.from_numpy(data["label"])
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": self.transform(self.images[i]), "label": self.labels[i]}


def hand_crop(image: Any) -> Any:
    """One image as a hand-written ``__getitem__`` does it with torch ops, no torchvision.

    A crop box by `crop_box` from torch's generator, the crop as float32, ``F.interpolate``
    (bilinear, antialias) to 224, ``flip(-1)`` with probability 1/2, then normalised.
    """
    import torch
    import torch.nn.functional as F

    top, left, h, w = crop_box(image.shape[-2], image.shape[-1], lambda: float(torch.rand(())))
    crop = image[:, top : top + h, left : left + w].unsqueeze(0).float()
    out = F.interpolate(crop, size=(SIZE, SIZE), mode="bilinear", antialias=True)[0]
    if float(torch.rand(())) < 0.5:
        out = out.flip(-1)
    return (out - MEAN) / STD


def import_torchvision() -> Any:
    """``torchvision.transforms.v2``, importable beside a CPU torch (see the module's notes)."""
    name = "torchvision._meta_registrations"
    sys.modules.setdefault(name, types.ModuleType(name))
    from torchvision.transforms import v2

    return v2


def torchvision_v2() -> Any:
    """The torchvision v2 per-sample transform: ``RandomResizedCrop(224)``, flip, ``Normalize``."""
    import torch

    v2 = import_torchvision()
    return v2.Compose(
        [
            v2.RandomResizedCrop(SIZE, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32),
            v2.Normalize([MEAN] * 3, [STD] * 3),
        ]
    )


def per_sample(
    data: dict[str, np.ndarray], batch_size: int, *, how: str, workers: int, seed: int = 0
) -> Any:
    """A ``DataLoader(shuffle=True)`` of per-sample transforms (``how``: hand or torchvision)."""
    import torch
    from torch.utils.data import DataLoader

    transform = hand_crop if how == "hand" else torchvision_v2()
    torch.manual_seed(seed)  # the transforms draw from torch's global generator
    generator = torch.Generator().manual_seed(seed)
    # Typed as a Dataset; DataLoader only calls len() and [] on a map-style one.
    dataset: Any = PerSample(data, transform)
    return DataLoader(dataset, batch_size, shuffle=True, generator=generator, num_workers=workers)


# -- batched peers: Kornia, Keras preprocessing layers in tf.data --------------------------------


def kornia_batched(data: Any, batch_size: int, *, seed: int = 0, device: Any = None) -> Any:
    """Kornia on each batch of the plain Loader: ``RandomResizedCrop``, ``RandomHorizontalFlip``.

    The uint8 batch as float32 (Kornia's ops take floats), then normalised.
    """
    import kornia.augmentation as K
    import torch

    from looptoolkit import Loader

    torch.manual_seed(seed)
    ops = torch.nn.Sequential(K.RandomResizedCrop((SIZE, SIZE)), K.RandomHorizontalFlip())
    loader = Loader(data, batch_size, seed=seed, device=device)

    def epoch_fn(_: int) -> Iterator[dict[str, Any]]:
        for batch in loader:
            images = ops(batch["image"].float())
            yield {"image": (images - MEAN) / STD, "label": batch["label"]}

    return EpochPipeline(epoch_fn, len(loader), name="kornia_batched")


def keras_tfdata(data: dict[str, np.ndarray], batch_size: int, *, seed: int = 0) -> Any:
    """Keras 3 preprocessing layers in a ``tf.data`` map, on channels-last batches.

    Keras 3 has no random resized crop; the closest: ``RandomZoom`` zooming in by an
    independent random height and width factor in ``[0.28, 1]`` of the side (areas of 0.08
    to 1, centred), ``Resizing(224, 224)``, ``RandomFlip("horizontal")``, then normalised.
    Per epoch ``Dataset.from_tensor_slices(permutation).batch(B)``, then a map gathering each
    batch (``tf.gather``, transposed to NHWC) and running the layers; no ``prefetch`` (in an
    interleaved run it would work on while the other loops are timed). Yields NHWC (`to_nchw`).
    """
    import keras
    import tensorflow as tf

    images, labels = tf.constant(data["image"]), tf.constant(data["label"])
    zoom = (-0.72, 0.0)
    layers = [
        keras.layers.RandomZoom(zoom, zoom, seed=seed),
        keras.layers.Resizing(SIZE, SIZE),
        keras.layers.RandomFlip("horizontal", seed=seed),
    ]

    @tf.autograph.experimental.do_not_convert  # plain tf ops: nothing for AutoGraph to convert
    def augment(idx: Any) -> dict[str, Any]:
        x = tf.transpose(tf.gather(images, idx), [0, 2, 3, 1])
        for layer in layers:
            x = layer(x, training=True)
        return {"image": (tf.cast(x, tf.float32) - MEAN) / STD, "label": tf.gather(labels, idx)}

    n = len(data["label"])

    def epoch_fn(epoch: int) -> Any:
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        return iter(tf.data.Dataset.from_tensor_slices(perm).batch(batch_size).map(augment))

    return EpochPipeline(epoch_fn, batch_count(n, batch_size), name="keras_tfdata")


def to_nchw(batch: Any) -> dict[str, Any]:
    """A channels-last batch as the workload's ``(B, 3, H, W)`` NumPy images (for the check)."""
    return {"image": np.asarray(batch["image"]).transpose(0, 3, 1, 2), "label": batch["label"]}


# -- what each loop runs on, the keyed draw's share ---------------------------------------------

_THREADS = {
    "loader-aug-host": "process",
    "loader-aug-torch": "process",
    "loader-aug-dl-w2": "workers",
    "hand-crop-w0": "process",
    "hand-crop-w2": "workers",
    "tv-v2-w0": "process",
    "tv-v2-w2": "workers",
    "kornia-batched": "process",
    "keras-tfdata": "tf",
}


def threads(name: str) -> str:
    """The CPU threads loop ``name`` works on: ``"PxT"``, processes x torch threads in each.

    ``"tf"``: the loop's process and tf.data's thread pools.

    Examples:
        >>> threads("tv-v2-w2"), threads("keras-tfdata")
        ('2x1', 'tf')
    """
    where = _THREADS.get(name, "process")
    if where == "workers":
        return f"{WORKERS}x1"  # DataLoader sets 1 torch thread in each worker
    if where == "tf":
        return "tf"
    torch = sys.modules.get("torch")
    return f"1x{torch.get_num_threads()}" if torch is not None else "1x1"


def draw_share(data: dict[str, np.ndarray], batch_size: int, *, batches: int = 4) -> dict:
    """Milliseconds a batch drawing the keyed parameters and running the ops, and the share.

    The NumPy ``Augment`` of the workload, on its first ``batches`` batches, each op's
    ``draw`` and ``apply`` timed apart (the normalise is not an op that draws).
    """
    aug = Pipeline("host").augment
    draw = ops = 0.0
    clock = time.perf_counter
    for b, idx in enumerate(batch_slices(np.arange(batches * batch_size), batch_size)):
        keys = BatchKeys(0, 0, idx)
        state = ImageBatch(data["image"][idx], "first")
        for place, op in enumerate(aug.ops):
            start = clock()
            params = op.draw(keys, stream_of(place, op), state)
            mid = clock()
            state = op.apply(state, params)
            end = clock()
            if b:  # the first batch warms the caches
                draw, ops = draw + mid - start, ops + end - mid
    n = max(batches - 1, 1)
    return {"draw_ms": draw * 1e3 / n, "ops_ms": ops * 1e3 / n, "share": draw / ops if ops else 0.0}


_LABELS = {
    "loader-aug-host": "Loader(NumPy, transform=Augment+normalize, placement='host'): the "
    "loop's process, no workers",
    "loader-aug-torch": "Loader(device=torch.device), Augment+normalize after the move (torch "
    "ops where the batch lives; cuda on a GPU)",
    "loader-aug-dl-w2": "make_dataloader(collate_fn=Augment+normalize, num_workers=2)",
    "hand-crop-w0": "DataLoader, per-sample __getitem__: crop box, F.interpolate (float32, "
    "antialias), flip, normalise; 0 workers",
    "hand-crop-w2": "the same hand-written per-sample loop, DataLoader with 2 workers",
    "tv-v2-w0": "torchvision.transforms.v2 per sample (RandomResizedCrop, RandomHorizontalFlip, "
    "ToDtype, Normalize), DataLoader, 0 workers",
    "tv-v2-w2": "torchvision.transforms.v2 per sample, DataLoader with 2 workers",
    "kornia-batched": "Kornia batched: RandomResizedCrop + RandomHorizontalFlip on float32 "
    "batches of the plain Loader, then normalised",
    "keras-tfdata": "Keras 3 layers in a tf.data map: RandomZoom (closest to a resized crop) + "
    "Resizing(224) + RandomFlip, NHWC",
}


def _on(backend: str, name: str, factory: Any, **kw: Any) -> Variant:
    """The augment workload's variant ``name`` (its label from `_LABELS`)."""
    kw.setdefault("shuffle", None)
    return Variant(name, backend, _LABELS[name], factory, workloads=("augment",), **kw)


def _loader_torch(ctx: Context) -> Any:
    return loader_device(ctx.workload.data, ctx.batch_size, seed=ctx.seed, device=_device(ctx))


def _kornia(ctx: Context) -> Any:
    return kornia_batched(ctx.workload.data, ctx.batch_size, seed=ctx.seed, device=_device(ctx))


def _device(ctx: Context) -> Any:
    return kit("torch").device(ctx.device)


def augment_variants(backend: str) -> tuple[Variant, ...]:
    """The ``augment`` workload's variants of ``backend`` (numpy, torch or tf), in table order.

    ``shuffle="full"``: the Loader's keyed rows, checked against the reference; peers are
    ``listed`` (a "not installed" row where their module is missing).
    """
    host = partial(loop, host=True)
    if backend == "numpy":
        return (_on(backend, "loader-aug-host", host(loader_host), shuffle="full"),)
    if backend == "tf":
        peer = {"needs": ("keras",), "listed": True, "convert": to_nchw}
        return (_on(backend, "keras-tfdata", host(keras_tfdata), **peer),)
    tv = {"needs": ("torchvision",), "listed": True}
    return (
        _on(backend, "loader-aug-torch", _loader_torch, shuffle="full"),
        _on(backend, "loader-aug-dl-w2", host(loader_workers), shuffle="full"),
        _on(backend, "hand-crop-w0", host(per_sample, how="hand", workers=0)),
        _on(backend, "hand-crop-w2", host(per_sample, how="hand", workers=WORKERS)),
        _on(backend, "tv-v2-w0", host(per_sample, how="tv", workers=0), **tv),
        _on(backend, "tv-v2-w2", host(per_sample, how="tv", workers=WORKERS), **tv),
        _on(backend, "kornia-batched", _kornia, needs=("kornia",), listed=True),
    )


def order_positions(order: Order) -> np.ndarray:
    """Each row's position in epoch 0 of ``order`` (the keys a Loader row draws from)."""
    from looptoolkit.order._order import epoch_indices

    indices = epoch_indices(order, 0)
    positions = np.empty(len(indices), np.int64)
    positions[indices] = np.arange(len(indices))
    return positions
