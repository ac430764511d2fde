"""The ``images`` variant set of ``looptoolkit compare``: where the uint8 -> float32 work runs.

Three ways to feed normalised float32 images to a backend's device, each in
the Loader's order (so every batch is checked exactly against it):

- ``host``: the Loader over the host data (no device); each batch is normalised
  in NumPy in the consumer's thread, then moved, float32, with
  [`looptoolkit.to_device`][looptoolkit.to_device] (4 bytes per pixel to copy);
- ``step``: ``Loader(host data, device=dev)`` copies uint8 (1 byte per pixel,
  prefetched); each batch is normalised in the consumer's thread after it
  arrives, as a training step would (compiled once on JAX and tf, as a step is);
- ``transform``: ``Loader(host data, device=dev, transform=normalize(...))``:
  the copy and the normalisation both in the prefetch thread.

Mean 127.5 and std 64.0 for every channel: ``x * 64 + 127.5`` recovers the
uint8 values exactly in float32, which is what
[`to_uint8`][looptoolkit.bench.native_images.to_uint8] does to check a batch. On a CPU the "device"
is the host: these measure the host side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from looptoolkit.adapters import get_backend
from looptoolkit.bench.epochs import EpochPipeline
from looptoolkit.bench.workloads import Context, host_array
from looptoolkit.device import parse_device

__all__ = ["MEAN", "STD", "WAYS", "images_factory", "normalizer", "target", "to_uint8"]

MEAN = 127.5
STD = 64.0
CHANNELS = 3
WAYS = ("host", "step", "transform")


def normalizer() -> Callable[[Any], Any]:
    """The images workload's transform: ``batch["image"]`` as float32, ``(x - 127.5) / 64``."""
    from looptoolkit import normalize

    return normalize([MEAN] * CHANNELS, [STD] * CHANNELS, key="image", dtype="float32")


def target(backend: str, ctx: Context) -> Any:
    """The device a backend's batches go to: its own device for ``--device``.

    A ``torch.device``, a jax Device, ``"/CPU:0"``: the backend's ``resolve_device``.
    """
    return get_backend(backend).resolve_device(parse_device(ctx.device))


def to_uint8(batch: Any) -> dict[str, Any]:
    """A normalised batch mapped back to the workload's structure (uint8 images).

    Exact in float32 for mean 127.5 and std 64.

    Raises:
        TypeError: the image is not float32 (not normalised; the check reports it).
    """
    image = host_array(batch["image"])
    if image.dtype != np.float32:
        raise TypeError(f"the image is {image.dtype}, not normalised float32.")
    image = (image * np.float32(STD) + np.float32(MEAN)).astype(np.uint8)
    return {"image": image, "label": batch["label"]}


def _compiled(backend: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` as a step runs it: the backend's ``compile_transform`` (jit on JAX and tf)."""
    return get_backend(backend).compile_transform(fn)


def _mapped(loader: Any, fn: Callable[[Any], Any], name: str) -> Iterable[Any]:
    """``fn`` on every batch of ``loader``, in the consumer's thread; each ``iter()`` an epoch."""

    def epoch(_: int) -> Iterator[Any]:
        iterator = iter(loader)  # the epoch the Loader's cursor points at
        try:
            for batch in iterator:
                yield fn(batch)
        finally:
            iterator.close()

    return EpochPipeline(epoch, len(loader), name=name)


def images_factory(backend: str, way: str) -> Callable[[Context], Iterable[Any]]:
    """The factory of one images variant: ``way`` (one of ``WAYS``) on ``backend``."""
    if way not in WAYS:
        raise ValueError(f"`way` must be one of {WAYS}, got {way!r}.")

    def factory(ctx: Context) -> Iterable[Any]:
        from looptoolkit import Loader, to_device

        dev = target(backend, ctx)
        norm = normalizer()
        kwargs: dict[str, Any] = {"shuffle": True, "seed": ctx.seed}
        host = ctx.workload.data
        if way == "host":
            loader = Loader(host, ctx.batch_size, **kwargs)
            return _mapped(loader, lambda b: to_device(norm(b), dev), f"img-host-{backend}")
        if way == "step":
            loader = Loader(host, ctx.batch_size, device=dev, **kwargs)
            return _mapped(loader, _compiled(backend, norm), f"img-step-{backend}")
        return Loader(host, ctx.batch_size, device=dev, transform=norm, **kwargs)

    return factory
