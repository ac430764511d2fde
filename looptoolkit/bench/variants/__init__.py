"""The loops ``looptoolkit compare`` checks and times, declared as data, one module per backend.

Each backend module (``.numpy``, ``.torch``, ``.jax``, ``.tf``) holds its loops and its `Kit`;
`kit`, `register_kit` and `variants` find them, so the harness never asks for a framework by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from looptoolkit.adapters import get_backend
from looptoolkit.bench.targets import BASELINE as BASELINE
from looptoolkit.bench.variants.epochs import EpochPipeline as EpochPipeline
from looptoolkit.bench.variants.epochs import split_batches as split_batches
from looptoolkit.bench.workloads import Workload, host_array
from looptoolkit.device import _tree as _tree
from looptoolkit.device._move import parse_device
from looptoolkit.order._order import Order

Factory = Callable[["Context"], Iterable[Any]]


@dataclass(frozen=True)
class Variant:
    """One loop to time.

    Attributes:
        name: short name (``--variants`` filters on it; at most 18 characters).
        backend: whose arrays it runs on (its kit's ``name``); ``label``: what it is, one line.
        factory: builds the loop, an iterable over epochs, from a `Context`.
        shuffle: the Loader order it yields exactly, or None: its own (checked for coverage).
        workloads: the workloads it applies to (None: all).
        slow: checked on its first batches and timed on a bounded number of them.
        accelerator: runs only when the device is an accelerator.
        convert: turns a batch into the workload's structure (pure Python yields lists).
        floor: the variant that bounds it from below (Loader rows report their ratio to it);
            ``"a|b"``: the faster of the two in the run.
        batching: on the ``tokens`` workload, the batches it makes (``pad``, ``grouped``,
            ``budget``, ``pack``, ``flat``; `looptoolkit.bench.variants.tokens`).
        needs: modules it imports beyond its backend; left out where one is not installed
            (``listed``: shown as a "not installed" row instead).
        mix: on the ``mix`` workload, the mixture it draws (a key of
            `looptoolkit.bench.variants.mix.MIXES`); its batches' deviation from the weights is
            measured.
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
    floor: str | None = None
    batching: str | None = None
    needs: tuple[str, ...] = ()
    mix: str | None = None
    listed: bool = False

    is_floor = property(lambda self: self.name.startswith("floor-"), doc="A floor, not a loop.")


def variant(backend: str, labels: dict[str, str], name: str, fn: Factory, **kw: Any) -> Variant:
    """The `Variant` ``name`` of ``backend``, labelled ``labels[name]``."""
    return Variant(name, backend, labels[name], fn, **kw)


@dataclass
class Context:
    """What a factory gets: the workload, its data as the backend's arrays, the device, the seed."""

    workload: Workload
    data: Any
    device: str
    seed: int = 0
    _orders: dict[str, Order] = field(default_factory=dict)

    batch_size = property(lambda self: self.workload.batch_size, doc="Rows per batch.")

    def order(self, shuffle: str) -> Order:
        """The Loader's ``Order`` for this workload and seed (``"full"`` or ``"grouped"``)."""
        if shuffle not in self._orders:
            n, seed = self.workload.n, self.seed
            self._orders[shuffle] = Order(n, self.batch_size, shuffle=shuffle, seed=seed)
        return self._orders[shuffle]


@dataclass(frozen=True)
class Kit:
    """One backend's variants (in table order), and what the harness needs to run them.

    ``leaves(host leaves, device)`` makes the backend's arrays (None: NumPy as is); ``ready``
    blocks until a batch is computed (JAX is asynchronous); ``gpu`` says whether the framework
    sees a CUDA GPU (the default ``--device``).
    """

    name: str
    variants: tuple[Variant, ...]
    leaves: Callable[[list[np.ndarray], str], list[Any]] | None = None
    ready: Callable[[Any], Any] | None = None
    gpu: Callable[[], bool] | None = None

    def data(self, host: Any, device: str) -> Any:
        """The workload's host data (a NumPy tree) as this backend's arrays."""
        if self.leaves is None:
            return host
        leaves, spec = _tree.flatten(host)
        return _tree.unflatten(spec, self.leaves(leaves, device))

    def device(self, device: str) -> Any:
        """This backend's device for a compare ``--device``: its ``resolve_device``."""
        return get_backend(self.name).resolve_device(parse_device(device))


_KITS: dict[str, Kit | str] = {b: f"{__name__}.{b}" for b in ("numpy", "torch", "jax", "tf")}


def register_kit(kit: Kit) -> None:
    """Add a backend's kit (listed after the built-in ones), or replace the one of its name."""
    _KITS[kit.name] = kit


def kit(name: str) -> Kit:
    """The kit of backend ``name`` (a built-in one imported on first use), else ValueError."""
    entry = _KITS.get(name)
    if entry is None:
        raise ValueError(f"no variants for backend {name!r}; kits: {', '.join(_KITS)}.")
    if isinstance(entry, str):
        entry = _KITS[name] = importlib.import_module(entry).KIT
    return entry


def variants(backends: Iterable[str] | None = None) -> list[Variant]:
    """The variants of ``backends`` (default: every kit), in table order: numpy, torch, jax, tf."""
    chosen = [kit(name).name for name in (_KITS if backends is None else backends)]
    return [v for name in _KITS if name in chosen for v in kit(name).variants]


def __getattr__(name: str) -> Any:
    if name == "VARIANTS":  # every kit's variants: imports every framework
        return variants()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def loop(
    fn: Callable[..., Iterable[Any]],
    *,
    host: bool = False,
    order: bool = False,
    seed: bool = True,
    device_of: str | None = None,
    gpu_only: bool = False,
    **kwargs: Any,
) -> Factory:
    """A factory calling ``fn(data, batch_size, **kwargs)`` with what the context supplies.

    ``data``: the backend's (``host``: NumPy); ``order=`` the Loader's full shuffle, else ``seed=``
    (if ``seed``); ``device=`` the ``device_of`` backend's device (``gpu_only``: None on the CPU).
    """

    def factory(ctx: Context) -> Iterable[Any]:
        extra = dict(kwargs)
        if order:
            extra["order"] = ctx.order("full")
        elif seed:
            extra["seed"] = ctx.seed
        if device_of is not None:
            on = ctx.device != "cpu" or not gpu_only
            extra["device"] = kit(device_of).device(ctx.device) if on else None
        return fn(ctx.workload.data if host else ctx.data, ctx.batch_size, **extra)

    return factory


# -- the images set: where the uint8 -> float32 work of an image batch runs ----------------------

MEAN, STD = 127.5, 64.0  # x * 64 + 127.5 recovers uint8 exactly in float32
_WAYS = {
    "host": "normalise on the host (NumPy), then to_device float32",
    "step": "Loader(device=dev) copies uint8; normalise in the consumer's thread",
    "trans": "Loader(device=dev, transform=normalize(...)): uint8 copy + normalise, prefetched",
}


def normalizer() -> Callable[[Any], Any]:
    """The images workload's transform: ``batch["image"]`` as float32, ``(x - 127.5) / 64``."""
    from looptoolkit import normalize

    return normalize([MEAN] * 3, [STD] * 3, key="image", dtype="float32")


def to_uint8(batch: Any) -> dict[str, Any]:
    """A normalised batch mapped back to uint8 images, exactly (TypeError if not float32)."""
    image = host_array(batch["image"])
    if image.dtype != np.float32:
        raise TypeError(f"the image is {image.dtype}, not normalised float32.")
    image = (image * np.float32(STD) + np.float32(MEAN)).astype(np.uint8)
    return {"image": image, "label": batch["label"]}


def images(backend: str, compiled: str = "") -> tuple[Variant, ...]:
    """The ``img-*`` variants of ``backend``; ``compiled`` names its ``compile_transform``."""
    labels = {f"img-{way}-{backend}": text for way, text in _WAYS.items()}
    labels[f"img-step-{backend}"] += compiled
    options = {"workloads": ("images",), "convert": to_uint8}
    return tuple(
        variant(backend, labels, name, partial(_images, backend, way), **options)
        for name, way in zip(labels, _WAYS, strict=True)
    )


def _images(backend: str, way: str, ctx: Context) -> Iterable[Any]:
    """One ``way`` of feeding normalised float32 images to ``backend``, in the Loader's order."""
    from looptoolkit import Loader, to_device

    dev, norm = kit(backend).device(ctx.device), normalizer()
    data, size = ctx.workload.data, ctx.batch_size
    if way == "trans":
        return Loader(data, size, seed=ctx.seed, device=dev, transform=norm)
    epoch: Callable[[int], Iterable[Any]]
    if way == "host":  # each epoch is the one the Loader's cursor points at
        loader = Loader(data, size, seed=ctx.seed)
        epoch = lambda _: (to_device(norm(b), dev) for b in loader)  # noqa: E731
    else:
        loader = Loader(data, size, seed=ctx.seed, device=dev)
        fn = get_backend(backend).compile_transform(norm)
        epoch = lambda _: map(fn, loader)  # noqa: E731
    return EpochPipeline(epoch, len(loader), name=f"img-{way}-{backend}")
