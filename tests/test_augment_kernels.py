"""The augmentation ops' batched kernels: JAX, tf, and torch off the host, as the NumPy path.

Each op runs on a ``jax.Array``, a ``tf.Tensor`` and a torch tensor taking the GPU's path
with the parameters drawn on the host for the same keys and is compared with the same op
on the NumPy array, channel-first and channel-last, uint8 and float32 (tolerances in
``UINT8_LEVELS`` and ``FLOAT_ATOL``); the kernels trace once per op configuration and input
shape; a Loader on each framework's device gives the NumPy Loader's rows; on a device the
resized crop makes no call per row.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader
from looptoolkit.augment import (
    Augment,
    BatchKeys,
    ColorJitter,
    CutMix,
    HorizontalFlip,
    MixUp,
    RandomAffine,
    RandomCrop,
    RandomErasing,
    RandomResizedCrop,
    RandomRotation,
    VerticalFlip,
    _dispatch,
    _geometry,
)
from looptoolkit.augment._base import ImageBatch


class _Framework:
    """A framework whose batched kernels are under test: its arrays, kernels and a device.

    ``torch`` is torch off the host (a GPU's path), tried on the CPU: the test takes the CPU
    out of ``_dispatch.HOST_DEVICES``, so CPU tensors run the kernels a GPU's tensors do.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.module = pytest.importorskip({"tf": "tensorflow"}.get(name, name))

    @property
    def kernels(self) -> Any:
        if self.name == "torch":
            from looptoolkit.augment import _torch

            return _torch.kernels_on(self.module.device("cpu"))
        return importlib.import_module(f"looptoolkit.augment._{self.name}").KERNELS

    def array(self, x: np.ndarray) -> Any:
        if self.name == "jax":
            return self.module.numpy.asarray(x)
        if self.name == "torch":
            return self.module.from_numpy(np.ascontiguousarray(x))
        return self.module.constant(x)

    def owns(self, x: Any) -> bool:
        kind = {"jax": "Array", "tf": "Tensor", "torch": "Tensor"}[self.name]
        return isinstance(x, getattr(self.module, kind))

    def device(self) -> Any:
        if self.name == "jax":
            return self.module.devices("cpu")[0]
        return self.module.device("cpu") if self.name == "torch" else "/CPU:0"


@pytest.fixture(params=["jax", "tf", "torch"])
def fw(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> _Framework:
    framework = _Framework(request.param)
    if request.param == "torch":
        monkeypatch.setattr(_dispatch, "HOST_DEVICES", frozenset())
    return framework


OPS: dict[str, Any] = {
    "hflip": HorizontalFlip(),
    "vflip": VerticalFlip(p=0.7),
    "crop": RandomCrop(20, padding=(3, 5), fill=7),
    "crop_pad_if_needed": RandomCrop((36, 40), pad_if_needed=True),
    "erasing": RandomErasing(p=0.8, value=(1, 2, 3)),
    "resized_crop": RandomResizedCrop((16, 20)),
    "resized_crop_up": RandomResizedCrop(40),
    "resized_crop_plain": RandomResizedCrop(12, antialias=False),
    "color": ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
    "hue": ColorJitter(hue=0.5),
    "affine": RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10, p=0.8),
    "affine_bilinear": RandomAffine(
        20, scale=(0.8, 1.2), shear=(-5, 5, -5, 5), fill=(9, 8, 7), interpolation="bilinear"
    ),
    "rotation": RandomRotation(30),
}
# Largest difference from the NumPy path in uint8 levels (absent: exact). The NumPy path's
# resized crop is torch's fixed-point uint8 kernel where torch is installed; the compiled
# kernel is the float32 separable weights of `_geometry.resize_numpy` (within one level of it, see
# test_resized_crop_is_the_separable_weights).
UINT8_LEVELS = {
    "resized_crop": 2,
    "resized_crop_up": 2,
    "resized_crop_plain": 2,
    "color": 1,
    "hue": 1,
    "affine_bilinear": 1,
}
FLOAT_ATOL = {"affine_bilinear": 1e-4}  # others: 1e-5 (float32 sums in another order)


def _images(dtype: str, channels: str, n: int = 6) -> np.ndarray:
    images = np.random.default_rng(0).integers(0, 256, (n, 3, 29, 37), dtype=np.uint8)
    if dtype == "float32":
        images = images.astype(np.float32) / 255
    return images if channels == "first" else np.ascontiguousarray(images.transpose(0, 2, 3, 1))


def _close(got: Any, want: np.ndarray, name: str) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.uint8:
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16)).max()
        assert diff <= UINT8_LEVELS.get(name, 0), (name, diff)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=FLOAT_ATOL.get(name, 1e-5))


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("channels", ["first", "last"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_each_op_compiled_is_the_numpy_path(fw, name, channels, dtype):
    images = _images(dtype, channels)
    aug = Augment([OPS[name]], key=None, channels=channels)
    keys = BatchKeys(3, 1, np.arange(10, 16))
    got = aug(fw.array(images), keys)
    assert fw.owns(got)
    _close(got, aug(images, keys), name)


def test_resized_crop_is_the_separable_weights(fw):
    images = _images("uint8", "first")
    for op in (
        RandomResizedCrop((16, 20)),
        RandomResizedCrop(40),
        RandomResizedCrop(12, antialias=False),
    ):
        batch = ImageBatch(images)
        params = op.draw(BatchKeys(5, 0, np.arange(6)), 0, batch)
        boxes = zip(params["top"], params["left"], params["height"], params["width"], strict=True)
        want = np.stack([
            _geometry.resize_numpy(images[k, :, t : t + h, x : x + w], op.size, op.antialias)
            for k, (t, x, h, w) in enumerate(boxes)
        ])  # fmt: skip
        got = np.asarray(op.apply(ImageBatch(fw.array(images)), params).images)
        assert np.abs(got.astype(np.int16) - want.astype(np.int16)).max() <= 1


@pytest.mark.parametrize("channels", ["first", "last"])
@pytest.mark.parametrize("op", [MixUp(alpha=0.4, p=0.8), CutMix(p=0.8)], ids=repr)
def test_mixing_ops_compiled_are_the_numpy_path(fw, op, channels):
    images = _images("uint8", channels, n=8)
    labels = np.arange(8) % 5
    aug = Augment([op], key="image", labels="label", num_classes=5, channels=channels)
    keys = BatchKeys(2, 0, np.arange(8))
    want = aug({"image": images, "label": labels}, keys)
    got = aug({"image": fw.array(images), "label": fw.array(labels)}, keys)
    assert fw.owns(got["image"]) and fw.owns(got["label"])
    np.testing.assert_array_equal(np.asarray(got["image"]), want["image"])
    np.testing.assert_allclose(np.asarray(got["label"]), want["label"], atol=1e-6)


def test_dtype_conversion_compiled(fw):
    images = _images("uint8", "first")
    keys = BatchKeys(0, 0, np.arange(6))
    aug = Augment([HorizontalFlip()], key=None, dtype="float32")
    got = aug(fw.array(images), keys)
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), aug(images, keys), atol=1e-7)


@pytest.mark.parametrize("fw", ["jax", "tf"], indirect=True)  # torch's kernels run eagerly
def test_each_kernel_traces_once_per_shape(fw):
    aug = Augment([RandomResizedCrop(8), HorizontalFlip(), ColorJitter(0.3, hue=0.1)], key=None)
    images = _images("uint8", "first", n=4)[:, :, :17, :19]  # a shape no other test uses
    traces = fw.kernels.traces
    aug(fw.array(images), BatchKeys(0, 0, np.arange(4)))
    before = dict(traces)
    for epoch in range(1, 4):  # other keys, other values, same shape: no new trace
        other = np.roll(images, epoch, axis=0)
        aug(fw.array(other), BatchKeys(0, epoch, np.arange(4, 8)))
    assert dict(traces) == before
    aug(fw.array(images[:3]), BatchKeys(0, 0, np.arange(3)))  # a new shape traces once
    grown = {k: traces[k] - before.get(k, 0) for k in ("resized_crop", "flip", "color")}
    assert grown == {"resized_crop": 1, "flip": 1, "color": 1}


def test_a_broadcast_of_row_zero_is_caught(fw, monkeypatch):
    images = _images("uint8", "first")
    keys = BatchKeys(3, 0, np.arange(6))
    aug = Augment([RandomCrop(20, padding=4)], key=None)
    want = aug(images, keys)
    host = fw.kernels.host
    planted = lambda p: host(np.broadcast_to(np.asarray(p)[:1], p.shape))  # noqa: E731
    monkeypatch.setattr(fw.kernels, "host", planted)
    with pytest.raises(AssertionError):
        _close(aug(fw.array(images), keys), want, "crop")
    monkeypatch.undo()
    _close(aug(fw.array(images), keys), want, "crop")


def test_importing_augment_imports_no_framework():
    code = (
        "import sys, looptoolkit.augment\n"
        "for name in ('jax', 'tensorflow', 'torch'): assert name not in sys.modules, name"
    )
    subprocess.run([sys.executable, "-X", "dev", "-W", "error", "-c", code], check=True)


def _data(n: int) -> dict[str, np.ndarray]:
    image = np.random.default_rng(0).integers(0, 256, (n, 3, 20, 24), dtype=np.uint8)
    return {"image": image, "label": np.arange(n) % 5, "id": np.arange(n)}


def _by_id(loader: Loader) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for batch in loader:
        for i, image, label in zip(
            np.asarray(batch["id"]).tolist(),
            np.asarray(batch["image"]),
            np.asarray(batch["label"]),
            strict=True,
        ):
            out[i] = (image, label)
    return out


def test_a_loader_on_a_compiling_device_gives_the_numpy_rows(fw):
    ops = [
        RandomCrop(20, padding=2),
        HorizontalFlip(),
        RandomErasing(p=0.5),
        RandomRotation(15, p=0.5),
        CutMix(p=0.5),
    ]
    aug = Augment(ops, key="image", labels="label", num_classes=5)
    want = _by_id(Loader(_data(40), 8, seed=4, transform=aug))
    loader = Loader(_data(40), 8, seed=4, device=fw.device(), transform=aug)
    batch = next(iter(loader))
    assert fw.owns(batch["image"]) and fw.owns(batch["label"])
    got = _by_id(loader)
    assert sorted(got) == sorted(want)
    for i, (image, label) in want.items():
        np.testing.assert_array_equal(got[i][0], image)
        np.testing.assert_allclose(got[i][1], label, atol=1e-6)


def test_resized_crop_on_a_device_makes_no_call_per_row(monkeypatch):
    torch = pytest.importorskip("torch")

    def per_row(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("interpolate called: a launch per row")

    images = torch.empty((5, 3, 29, 37), dtype=torch.uint8, device="meta")  # not the CPU
    op = RandomResizedCrop((16, 20))
    batch = ImageBatch(images)
    params = op.draw(BatchKeys(0, 0, np.arange(5)), 0, batch)
    monkeypatch.setattr(torch.nn.functional, "interpolate", per_row)
    out = op.apply(batch, params).images
    assert out.device.type == "meta" and tuple(out.shape) == (5, 3, 16, 20)
    with pytest.raises(AssertionError, match="per row"):  # the host path does loop
        op.apply(ImageBatch(torch.zeros((5, 3, 29, 37), dtype=torch.uint8)), params)
