"""Workloads and the registry of loop variants that ``looptoolkit compare`` times.

A workload is a NumPy pytree with a row-id leaf (every row's own index, so
that any batch can be checked: right rows, each once). A :class:`Variant`
builds one loop over a backend's copy of that data: the seed talk's baselines,
each framework's native pipeline (:mod:`looptoolkit.adapters`), and the
:class:`~looptoolkit.Loader`. Variants that reproduce the Loader's order say
which (``shuffle``); the harness checks their batches against a NumPy gather of
that order, and the others for coverage, before timing anything.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from looptoolkit import tree as _tree

__all__ = [
    "BACKEND_ORDER",
    "VARIANTS",
    "WORKLOADS",
    "Context",
    "Variant",
    "Workload",
    "backend_data",
    "make_workload",
]

BACKEND_ORDER = ("numpy", "torch", "jax", "tf")

# name -> (description, rows, rows in --quick, batch size, batch size in --quick)
WORKLOADS: dict[str, tuple[str, int, int, int, int]] = {
    "index": ("arange(N) sample ids (the seed talk's setting)", 300_000, 3_000, 300, 30),
    "tabular": ('{"x": float32 (N, 64), "y": int64 row id}', 300_000, 3_000, 300, 30),
    "images": ('{"image": uint8 (N, 3, 64, 64), "label": int64 row id}', 50_000, 512, 256, 32),
}  # fmt: skip


@dataclass
class Workload:
    """The data of one workload, on the host.

    Attributes:
        name: ``"index"``, ``"tabular"`` or ``"images"``.
        description: what the data is.
        data: the NumPy pytree.
        batch_size: rows per batch.
        id_path: key path of the row-id leaf (``"batch"`` when the data is that leaf).
    """

    name: str
    description: str
    data: Any
    batch_size: int
    id_path: str

    @property
    def n(self) -> int:
        """Rows."""
        leaves, _ = _tree.flatten(self.data)
        return int(leaves[0].shape[0])

    @property
    def num_batches(self) -> int:
        """Batches per epoch (last partial batch counted)."""
        return -(-self.n // self.batch_size)

    @property
    def nbytes(self) -> int:
        """Bytes of data."""
        leaves, _ = _tree.flatten(self.data)
        return sum(int(leaf.nbytes) for leaf in leaves)


def make_workload(name: str, *, quick: bool = False, seed: int = 0) -> Workload:
    """Build the ``name`` workload (BENCHMARKS.md sizes, or tiny ones with ``quick``).

    Row ids stand in for labels so that every batch can be checked; gathering
    them costs what gathering labels costs.
    """
    description, rows, quick_rows, batch, quick_batch = WORKLOADS[name]
    n, batch_size = (quick_rows, quick_batch) if quick else (rows, batch)
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    data: Any
    if name == "index":
        data, id_path = ids, "batch"
    elif name == "tabular":
        data = {"x": rng.standard_normal((n, 64), dtype=np.float32), "y": ids}
        id_path = "batch['y']"
    elif name == "images":
        data = {"image": rng.integers(0, 256, (n, 3, 64, 64), dtype=np.uint8), "label": ids}
        id_path = "batch['label']"
    else:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}.")
    description = f"{description}, N = {n:_}, batch {batch_size}"
    return Workload(name, description, data, batch_size, id_path)


def backend_data(host: Any, backend: str, device: str) -> Any:
    """``host`` (a NumPy pytree) as arrays of ``backend``.

    torch: zero-copy CPU tensors. jax: arrays on the device (the accelerator
    when ``device`` is not ``"cpu"``; int64 becomes int32 without x64). tf:
    tensors. The host data of host-gather variants stays NumPy.
    """
    if backend == "numpy":
        return host
    leaves, spec = _tree.flatten(host)
    if backend == "torch":
        import torch

        return _tree.unflatten(spec, [torch.from_numpy(leaf) for leaf in leaves])
    if backend == "jax":
        import jax

        return _tree.unflatten(spec, jax.device_put(leaves, jax_device(device)))
    if backend == "tf":
        import tensorflow as tf

        return _tree.unflatten(spec, [tf.convert_to_tensor(leaf) for leaf in leaves])
    raise ValueError(f"unknown backend {backend!r}.")


def jax_device(device: str) -> Any:
    """The JAX device for a compare ``--device`` (its first GPU, or the CPU)."""
    import jax

    return jax.devices("cpu" if device == "cpu" else "gpu")[0]


def torch_device(device: str) -> Any:
    """The torch device for a compare ``--device``."""
    import torch

    return torch.device(device)


@dataclass
class Context:
    """What a variant's factory gets.

    Attributes:
        workload: the workload (host data, batch size).
        data: the workload's data as arrays of the variant's backend.
        device: the compare device (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        seed: the seed every order is drawn from.
    """

    workload: Workload
    data: Any
    device: str
    seed: int = 0
    _orders: dict[str, Any] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        """Rows per batch."""
        return self.workload.batch_size

    @property
    def accelerated(self) -> bool:
        """Whether the compare device is an accelerator."""
        return self.device != "cpu"

    def order(self, shuffle: str) -> Any:
        """The Loader's ``Order`` for this workload and seed (``"full"`` or ``"grouped"``)."""
        order = self._orders.get(shuffle)
        if order is None:
            from looptoolkit.order import Order

            order = Order(self.workload.n, self.batch_size, shuffle=shuffle, seed=self.seed)
            self._orders[shuffle] = order
        return order


Factory = Callable[[Context], Iterable[Any]]


@dataclass(frozen=True)
class Variant:
    """One loop to time.

    Attributes:
        name: short name (``--variants`` filters on it).
        backend: whose arrays it runs on (``"numpy"``, ``"torch"``, ``"jax"``, ``"tf"``).
        label: what it is, in a few words.
        factory: builds the loop (an iterable whose every ``iter()`` is the next epoch).
        shuffle: the Loader order it reproduces exactly (``"full"``, ``"grouped"``), or
            None for a loop with its own order (checked for coverage and alignment).
        workloads: the workloads it applies to (None: all).
        slow: verified on its first batches and always timed on a bounded number
            of batches per round (scaled to an epoch).
        accelerator: runs only when the device is an accelerator.
        convert: turns a batch into the workload's structure (pure Python yields lists).
        requires: modules that must import for it to run.
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


def _numpy_manual(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_numpy import numpy_manual

    return numpy_manual(ctx.data, ctx.batch_size, seed=ctx.seed, gather="index")


def _randperm(ctx: Context) -> Iterable[Any]:
    from looptoolkit.bench.native_torch import randperm_loop

    return randperm_loop(ctx.data, ctx.batch_size, seed=ctx.seed)


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

    device = "/GPU:0" if ctx.accelerated else None
    return loader_dataset(ctx.data, ctx.batch_size, order=ctx.order("full"), device=device)


def _as_array(batch: Any) -> Any:
    return np.asarray(batch)


_LOADER = ("looptoolkit.loader", "looptoolkit.order")
_ORDER = ("looptoolkit.order",)

VARIANTS: list[Variant] = [
    Variant("python", "numpy", "pure Python: random.sample + slices", _pure_python,
            shuffle=None, workloads=("index",), convert=_as_array),
    Variant("numpy-manual", "numpy", "NumPy manual: permutation + x[idx] per leaf",
            _numpy_manual, shuffle=None),
    Variant("loader-numpy", "numpy", "Loader, full shuffle",
            lambda ctx: _loader(ctx, shuffle="full"), requires=_LOADER),
    Variant("loader-numpy-prefetch", "numpy",
            "Loader, full shuffle, device='cpu' + prefetch=2 (background thread)",
            lambda ctx: _loader(ctx, shuffle="full", device="cpu", prefetch=2),
            requires=_LOADER),
    Variant("loader-numpy-grouped", "numpy", "Loader, grouped shuffle",
            lambda ctx: _loader(ctx, shuffle="grouped"), shuffle="grouped", requires=_LOADER),
    Variant("torch-randperm", "torch", "torch.randperm + x[idx] per leaf", _randperm,
            shuffle=None),
    Variant("dataloader-per-sample", "torch",
            "DataLoader per-sample __getitem__ + default_collate, 0 workers",
            _per_sample(0), requires=_ORDER),
    Variant("dataloader-per-sample-w2", "torch",
            "DataLoader per-sample, 2 workers (persistent, forkserver)",
            _per_sample(2), slow=True, requires=_ORDER),
    Variant("dataloader-getitems", "torch", "DataLoader over GetItemsDataset (__getitems__)",
            _getitems, requires=("looptoolkit.torch_data", *_ORDER)),
    Variant("dataloader-getitems-batched", "torch",
            "make_dataloader: GetItemsDataset + the Loader's batch sampler (index arrays)",
            _make_dataloader, requires=("looptoolkit.torch_data",)),
    Variant("loader-torch", "torch", "Loader on torch data (+ pinned non-blocking copy on GPU)",
            _loader_torch, requires=_LOADER),
    Variant("loader-torch-resident", "torch", "Loader, data resident on the GPU",
            _loader_torch_resident, accelerator=True, requires=_LOADER),
    Variant("torch-resident-gather", "torch", "bare on-device index_select (GPU reference)",
            _torch_resident_gather, accelerator=True, requires=_ORDER),
    Variant("jax-naive", "jax", "jax.random.permutation + eager jnp.take per leaf", _jax_naive,
            shuffle=None),
    Variant("jax-device-put", "jax", "NumPy gather + one jax.device_put per batch",
            _jax_device_put, requires=_ORDER),
    Variant("jax-resident", "jax", "device-resident data and order, jitted gather",
            _jax_resident, requires=_ORDER),
    Variant("loader-jax", "jax", "Loader on JAX data",
            lambda ctx: _loader(ctx, shuffle="full"), requires=_LOADER),
    Variant("tf-classic", "tf", "tf.data from_tensor_slices.shuffle(N).batch.prefetch",
            _tf_classic, shuffle=None),
    Variant("tf-loader-dataset", "tf", "tf.data with the Loader's order, batch gather, prefetch",
            _tf_loader_dataset, requires=_ORDER),
    Variant("loader-tf", "tf", "Loader on tf data",
            lambda ctx: _loader(ctx, shuffle="full"), requires=_LOADER),
]  # fmt: skip
"""Every variant, in the order the tables list them (grouped by backend)."""

BASELINE = "numpy-manual"
"""The variant every ratio is taken against."""
