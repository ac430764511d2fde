"""The registry of loop variants that ``looptoolkit compare`` checks and times.

A [`Variant`][looptoolkit.bench.variants.Variant] builds one loop over a backend's copy of a
workload's data ([`looptoolkit.bench.workloads`][looptoolkit.bench.workloads]): the hand-written
loops (the fastest of them, permutation + ``take``, is the baseline of every ratio), the floors that
bound what any loop can reach, each framework's native pipeline, and the
[`Loader`][looptoolkit.Loader]. Variants that reproduce the Loader's order say
which (``shuffle``); the harness checks their batches against a NumPy gather
of that order, and the others for coverage, before timing anything.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from looptoolkit import tree as _tree
from looptoolkit.bench.targets import BASELINE
from looptoolkit.bench.workloads import Context, jax_device, tf_device, torch_device

__all__ = ["BASELINE", "VARIANTS", "Variant"]

Factory = Callable[[Context], Iterable[Any]]


@dataclass(frozen=True)
class Variant:
    """One loop to time.

    Attributes:
        name: short name (``--variants`` filters on it; at most 18 characters).
        backend: whose arrays it runs on (``"numpy"``, ``"torch"``, ``"jax"``, ``"tf"``).
        label: what it is, in one line.
        factory: builds the loop (an iterable over epochs: a pass run to the end moves on).
        shuffle: the Loader order it reproduces exactly (``"full"``, ``"grouped"``), or
            None for a loop with its own order (checked for coverage and alignment).
        workloads: the workloads it applies to (None: all).
        slow: verified on its first batches and always timed on a bounded number
            of batches per round (scaled to an epoch).
        accelerator: runs only when the device is an accelerator.
        convert: turns a batch into the workload's structure (pure Python yields lists).
        requires: modules that must import for it to run.
        floor: the variant that bounds this one from below (Loader rows report
            their distance to it).
    """

    name: str
    backend: str
    label: str
    factory: Factory
    shuffle: str | None = "full"
    workloads: tuple[str, ...] | None = None
    slow: bool = False
    accelerator: bool = False
    convert: Callable[[Any], Any] | None = None
    requires: tuple[str, ...] = ()
    floor: str | None = None

    @property
    def is_floor(self) -> bool:
        """Whether this variant is a floor rather than a loop to choose."""
        return self.name.startswith("floor-")

    def missing(self) -> str | None:
        """Why this variant cannot run here (a module that does not import), or None."""
        for module in self.requires:
            try:
                importlib.import_module(module)
            except ImportError as e:
                return f"needs {module} ({e})"
        return None


# -- factories -----------------------------------------------------------------


def _loader(ctx: Context, *, shuffle: str, **kwargs: Any) -> Iterable[Any]:
    from looptoolkit import Loader

    return Loader(
        ctx.data,
        ctx.batch_size,
        shuffle=True if shuffle == "full" else shuffle,
        seed=ctx.seed,
        **kwargs,
    )


def _pure_python(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_numpy import pure_python

    return pure_python(ctx.data, ctx.batch_size, seed=ctx.seed)


def _numpy_manual(gather: str) -> Factory:
    def factory(ctx: Context) -> Iterable[Any]:
        from looptoolkit.bench.native_numpy import numpy_manual

        return numpy_manual(ctx.data, ctx.batch_size, seed=ctx.seed, gather=gather)

    return factory


def _epoch_views(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_numpy import epoch_views

    return epoch_views(ctx.data, ctx.batch_size, seed=ctx.seed)


def _memcpy(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_numpy import contiguous_copies

    return contiguous_copies(ctx.workload.data, ctx.batch_size)


def _sequential_take(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_numpy import sequential_take

    return sequential_take(ctx.workload.data, ctx.batch_size)


def _torch_floor(ctx: Context) -> Iterable[Any]:
    """The best manual loop on the host data + ``torch.from_numpy`` per leaf (zero-copy)."""
    import torch

    from looptoolkit.bench.native_numpy import numpy_manual

    from_numpy = torch.from_numpy

    def wrap(leaves: list[np.ndarray]) -> list[Any]:
        return [from_numpy(x) for x in leaves]

    return numpy_manual(ctx.workload.data, ctx.batch_size, seed=ctx.seed, wrap=wrap)


def _jax_floor(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_jax import chunked_floor

    return chunked_floor(
        ctx.workload.data, ctx.batch_size, seed=ctx.seed, device=jax_device(ctx.device)
    )


def _tf_floor(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_tf import chunked_floor

    return chunked_floor(ctx.workload.data, ctx.batch_size, seed=ctx.seed)


def _tf_convert(ctx: Context) -> Iterable[Any]:
    """The best manual loop + one ``tf.convert_to_tensor`` per leaf per batch."""
    import tensorflow as tf

    from looptoolkit.bench.native_numpy import numpy_manual

    convert = tf.convert_to_tensor

    def wrap(leaves: list[np.ndarray]) -> list[Any]:
        return [convert(x) for x in leaves]

    return numpy_manual(ctx.workload.data, ctx.batch_size, seed=ctx.seed, wrap=wrap)


def _randperm(gather: str) -> Factory:
    def factory(ctx: Context) -> Iterable[Any]:
        from looptoolkit.bench.native_torch import randperm_loop

        return randperm_loop(ctx.data, ctx.batch_size, seed=ctx.seed, gather=gather)

    return factory


def _per_sample(workers: int) -> Factory:
    def factory(ctx: Context) -> Iterable[Any]:
        from looptoolkit.bench.native_torch import per_sample_dataloader

        kwargs: dict[str, Any] = {}
        data = ctx.data
        if workers:
            # forkserver, not fork: jax and tf have started threads in this process,
            # and forking a threaded process can deadlock. The workers persist across
            # epochs, as a user would set them for a many-epoch run; the tensors are
            # cloned so that torch can move them to shared memory for the workers.
            leaves, spec = _tree.flatten(data)
            data = _tree.unflatten(spec, [leaf.clone() for leaf in leaves])
            kwargs = {"multiprocessing_context": "forkserver", "persistent_workers": True}
        return per_sample_dataloader(
            data, ctx.batch_size, order=ctx.order("full"), num_workers=workers, **kwargs
        )

    return factory


def _getitems(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_torch import getitems_dataloader

    return getitems_dataloader(ctx.data, ctx.batch_size, order=ctx.order("full"))


def _make_dataloader(ctx: Context) -> Iterable[Any]:
    from looptoolkit.torch_data import make_dataloader

    return make_dataloader(ctx.data, ctx.batch_size, shuffle=True, seed=ctx.seed)


def _loader_torch(ctx: Context) -> Iterable[Any]:
    device = torch_device(ctx.device) if ctx.accelerated else None
    return _loader(ctx, shuffle="full", device=device)


def _loader_torch_resident(ctx: Context) -> Iterable[Any]:
    return _loader(ctx, shuffle="full", device=torch_device(ctx.device), resident=True)


def _torch_resident_gather(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_torch import resident_gather

    return resident_gather(
        ctx.data, ctx.batch_size, order=ctx.order("full"), device=torch_device(ctx.device)
    )


def _jax_naive(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_jax import naive_loop

    return naive_loop(ctx.data, ctx.batch_size, seed=ctx.seed)


def _jax_device_put(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_jax import host_gather_device_put

    return host_gather_device_put(
        ctx.workload.data, ctx.batch_size, order=ctx.order("full"), device=jax_device(ctx.device)
    )


def _jax_resident(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_jax import resident_gather

    return resident_gather(
        ctx.data, ctx.batch_size, order=ctx.order("full"), device=jax_device(ctx.device)
    )


def _tf_classic(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_tf import classic_dataset

    return classic_dataset(ctx.data, ctx.batch_size, seed=ctx.seed)


def _tf_loader_dataset(ctx: Context) -> Iterable[Any]:
    from looptoolkit.tf_data import loader_dataset

    device = tf_device(ctx.device) if ctx.accelerated else None
    return loader_dataset(ctx.data, ctx.batch_size, order=ctx.order("full"), device=device)


def _as_array(batch: Any) -> Any:
    return np.asarray(batch)


def _images(backend: str, way: str) -> Factory:
    def factory(ctx: Context) -> Iterable[Any]:
        from looptoolkit.bench.native_images import images_factory

        return images_factory(backend, way)(ctx)

    return factory


def _to_uint8(batch: Any) -> Any:
    from looptoolkit.bench.native_images import to_uint8

    return to_uint8(batch)


_IMAGES_LABELS = {
    "host": "normalise on the host (NumPy), then to_device float32",
    "step": "Loader(device=dev) copies uint8; normalise in the consumer's thread",
    "transform": "Loader(device=dev, transform=normalize(...)): uint8 copy + normalise, prefetched",
}
_STEP_HOW = {"torch": "", "jax": " (jax.jit)", "tf": " (tf.function)"}


def _images_set(backend: str) -> list[Variant]:
    """The three ways of feeding normalised float32 images to ``backend`` (images workload)."""
    short = {"host": "host", "step": "step", "transform": "trans"}
    return [
        Variant(
            f"img-{short[way]}-{backend}",
            backend,
            _IMAGES_LABELS[way] + (_STEP_HOW[backend] if way == "step" else ""),
            _images(backend, way),
            workloads=("images",),
            convert=_to_uint8,
            requires=_LOADER,
        )
        for way in ("host", "step", "transform")
    ]


_LOADER = ("looptoolkit.loader", "looptoolkit.order")
_ORDER = ("looptoolkit.order",)
_TORCH_DATA = ("looptoolkit.torch_data", *_ORDER)

VARIANTS: list[Variant] = [
    Variant(
        "python",
        "numpy",
        "pure Python: random.sample of a list, then slices",
        _pure_python,
        shuffle=None,
        workloads=("index",),
        convert=_as_array,
    ),
    Variant(
        BASELINE,
        "numpy",
        "best manual loop: permutation + take per leaf (the baseline)",
        _numpy_manual("take"),
        shuffle=None,
    ),
    Variant(
        "numpy-index",
        "numpy",
        "NumPy fancy-index loop: permutation + x[idx] per leaf",
        _numpy_manual("index"),
        shuffle=None,
    ),
    Variant(
        "numpy-epoch",
        "numpy",
        "permutation(x).reshape(-1, B): one shuffled copy per epoch, then row views",
        _epoch_views,
        shuffle=None,
        workloads=("index",),
    ),
    Variant(
        "floor-memcpy",
        "numpy",
        "floor: a contiguous copy of each batch's bytes",
        _memcpy,
        shuffle=None,
    ),
    Variant(
        "floor-seq-take",
        "numpy",
        "floor: take with arange indices (a perfectly local order)",
        _sequential_take,
        shuffle=None,
    ),
    Variant(
        "loader-numpy",
        "numpy",
        "Loader, full shuffle",
        lambda ctx: _loader(ctx, shuffle="full"),
        requires=_LOADER,
        floor=BASELINE,
    ),
    Variant(
        "loader-numpy-bg",
        "numpy",
        "Loader, full shuffle, device='cpu', prefetch=2 (a background thread)",
        lambda ctx: _loader(ctx, shuffle="full", device="cpu", prefetch=2),
        requires=_LOADER,
        floor=BASELINE,
    ),
    Variant(
        "loader-grouped",
        "numpy",
        "Loader, grouped shuffle",
        lambda ctx: _loader(ctx, shuffle="grouped"),
        shuffle="grouped",
        requires=_LOADER,
        floor="floor-seq-take",
    ),
    Variant(
        "loader-runs",
        "numpy",
        "Loader, grouped shuffle in runs of 16 rows (run_size=16)",
        lambda ctx: _loader(ctx, shuffle="grouped", run_size=16),
        shuffle=None,
        requires=_LOADER,
        floor="floor-seq-take",
    ),
    Variant(
        "floor-torch",
        "torch",
        "floor: best manual loop + torch.from_numpy per leaf",
        _torch_floor,
        shuffle=None,
    ),
    Variant(
        "torch-index",
        "torch",
        "torch.randperm + x[idx] per leaf (torch's indexing)",
        _randperm("index"),
        shuffle=None,
    ),
    Variant(
        "torch-index-select",
        "torch",
        "torch.randperm + index_select per leaf",
        _randperm("index_select"),
        shuffle=None,
    ),
    Variant(
        "dl-per-sample",
        "torch",
        "DataLoader: per-sample __getitem__ + default_collate, 0 workers",
        _per_sample(0),
        requires=_ORDER,
    ),
    Variant(
        "dl-per-sample-w2",
        "torch",
        "the same DataLoader with 2 workers (persistent, forkserver)",
        _per_sample(2),
        slow=True,
        requires=_ORDER,
    ),
    Variant(
        "dl-getitems",
        "torch",
        "DataLoader over GetItemsDataset: lists of ints to __getitems__",
        _getitems,
        requires=_TORCH_DATA,
    ),
    Variant(
        "dl-getitems-arrays",
        "torch",
        "make_dataloader: GetItemsDataset + batches of index arrays",
        _make_dataloader,
        requires=_TORCH_DATA,
    ),
    Variant(
        "loader-torch",
        "torch",
        "Loader on torch data (on a GPU: pinned, non-blocking copies)",
        _loader_torch,
        requires=_LOADER,
        floor="floor-torch",
    ),
    *_images_set("torch"),
    Variant(
        "loader-torch-res",
        "torch",
        "Loader, data resident on the GPU",
        _loader_torch_resident,
        accelerator=True,
        requires=_LOADER,
        floor="torch-res-gather",
    ),
    Variant(
        "torch-res-gather",
        "torch",
        "bare on-device index_select (the GPU reference)",
        _torch_resident_gather,
        accelerator=True,
        requires=_ORDER,
    ),
    Variant(
        "floor-jax",
        "jax",
        "floor: chunks of batches gathered with take, one jax.device_put, one jitted split",
        _jax_floor,
        shuffle=None,
    ),
    Variant(
        "jax-naive",
        "jax",
        "jax.random.permutation + eager jnp.take per leaf",
        _jax_naive,
        shuffle=None,
    ),
    Variant(
        "jax-device-put",
        "jax",
        "NumPy gather + one jax.device_put per batch",
        _jax_device_put,
        requires=_ORDER,
    ),
    Variant(
        "jax-resident",
        "jax",
        "data and order on the device, one jitted gather per batch",
        _jax_resident,
        requires=_ORDER,
    ),
    Variant(
        "loader-jax",
        "jax",
        "Loader on JAX data",
        lambda ctx: _loader(ctx, shuffle="full"),
        requires=_LOADER,
        floor="floor-jax",
    ),
    *_images_set("jax"),
    Variant(
        "floor-tf",
        "tf",
        "floor: chunks of batches gathered with take, one "
        "tf.convert_to_tensor per leaf, one tf.split",
        _tf_floor,
        shuffle=None,
    ),
    Variant(
        "tf-convert",
        "tf",
        "best manual loop + tf.convert_to_tensor per leaf per batch",
        _tf_convert,
        shuffle=None,
    ),
    Variant(
        "tf-classic",
        "tf",
        "tf.data: from_tensor_slices.shuffle(N).batch.prefetch",
        _tf_classic,
        shuffle=None,
    ),
    Variant(
        "tf-loader-dataset",
        "tf",
        "tf.data in the Loader's order, one gather per batch, prefetch",
        _tf_loader_dataset,
        requires=_ORDER,
    ),
    Variant(
        "loader-tf",
        "tf",
        "Loader on tf data",
        lambda ctx: _loader(ctx, shuffle="full"),
        requires=_LOADER,
        floor="floor-tf",
    ),
    *_images_set("tf"),
]
"""Every variant, in the order the tables list them (grouped by backend)."""
