"""The augmentation ops on JAX arrays: the NumPy path's outputs, compiled once per shape.

Each op runs on a ``jax.Array`` with the parameters drawn on the host for the same keys and
is compared with the same op on the NumPy array, channel-first and channel-last, uint8
and float32 (tolerances in ``UINT8_LEVELS`` and ``FLOAT_ATOL``); the kernels trace once per
op configuration and input shape; a Loader on a JAX device gives the NumPy Loader's rows.
"""

from __future__ import annotations

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
    _geometry,
)
from looptoolkit.augment._base import ImageBatch

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
_jax = pytest.importorskip("looptoolkit.augment._jax")

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
# resized crop is torch's fixed-point uint8 kernel where torch is installed; the JAX kernel
# is the float32 separable weights of `_geometry.resize_numpy` (within one level of it, see
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
def test_each_op_on_jax_is_the_numpy_path(name, channels, dtype):
    images = _images(dtype, channels)
    aug = Augment([OPS[name]], key=None, channels=channels)
    keys = BatchKeys(3, 1, np.arange(10, 16))
    got = aug(jnp.asarray(images), keys)
    assert isinstance(got, jax.Array)
    assert got.devices() == {jax.devices("cpu")[0]}
    _close(got, aug(images, keys), name)


def test_resized_crop_is_the_separable_weights():
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
        got = np.asarray(op.apply(ImageBatch(jnp.asarray(images)), params).images)
        assert np.abs(got.astype(np.int16) - want.astype(np.int16)).max() <= 1


@pytest.mark.parametrize("channels", ["first", "last"])
@pytest.mark.parametrize("op", [MixUp(alpha=0.4, p=0.8), CutMix(p=0.8)], ids=repr)
def test_mixing_ops_on_jax_are_the_numpy_path(op, channels):
    images = _images("uint8", channels, n=8)
    labels = np.arange(8) % 5
    aug = Augment([op], key="image", labels="label", num_classes=5, channels=channels)
    keys = BatchKeys(2, 0, np.arange(8))
    want = aug({"image": images, "label": labels}, keys)
    got = aug({"image": jnp.asarray(images), "label": jnp.asarray(labels)}, keys)
    assert isinstance(got["image"], jax.Array) and isinstance(got["label"], jax.Array)
    np.testing.assert_array_equal(np.asarray(got["image"]), want["image"])
    np.testing.assert_allclose(np.asarray(got["label"]), want["label"], atol=1e-6)


def test_dtype_conversion_on_jax():
    images = _images("uint8", "first")
    keys = BatchKeys(0, 0, np.arange(6))
    aug = Augment([HorizontalFlip()], key=None, dtype="float32")
    got = aug(jnp.asarray(images), keys)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), aug(images, keys), atol=1e-7)


def test_each_kernel_traces_once_per_shape():
    aug = Augment([RandomResizedCrop(8), HorizontalFlip(), ColorJitter(0.3, hue=0.1)], key=None)
    images = _images("uint8", "first", n=4)[:, :, :17, :19]  # a shape no other test uses
    aug(jnp.asarray(images), BatchKeys(0, 0, np.arange(4)))
    before = dict(_jax.TRACES)
    for epoch in range(1, 4):  # other keys, other values, same shape: no new trace
        other = np.roll(images, epoch, axis=0)
        aug(jnp.asarray(other), BatchKeys(0, epoch, np.arange(4, 8)))
    assert dict(_jax.TRACES) == before
    aug(jnp.asarray(images[:3]), BatchKeys(0, 0, np.arange(3)))  # a new shape traces once
    grown = {k: _jax.TRACES[k] - before.get(k, 0) for k in ("resized_crop", "flip", "color")}
    assert grown == {"resized_crop": 1, "flip": 1, "color": 1}


def test_a_broadcast_of_row_zero_is_caught(monkeypatch):
    images = _images("uint8", "first")
    keys = BatchKeys(3, 0, np.arange(6))
    aug = Augment([RandomCrop(20, padding=4)], key=None)
    want = aug(images, keys)
    host = _jax._host
    monkeypatch.setattr(_jax, "_host", lambda p: host(np.broadcast_to(np.asarray(p)[:1], p.shape)))
    with pytest.raises(AssertionError):
        _close(aug(jnp.asarray(images), keys), want, "crop")


def test_importing_augment_imports_no_jax():
    code = "import sys, looptoolkit.augment; assert 'jax' not in sys.modules, 'jax'"
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


def test_a_loader_on_a_jax_device_gives_the_numpy_rows():
    ops = [
        RandomCrop(20, padding=2),
        HorizontalFlip(),
        RandomErasing(p=0.5),
        RandomRotation(15, p=0.5),
        CutMix(p=0.5),
    ]
    aug = Augment(ops, key="image", labels="label", num_classes=5)
    want = _by_id(Loader(_data(40), 8, seed=4, transform=aug))
    loader = Loader(_data(40), 8, seed=4, device=jax.devices("cpu")[0], transform=aug)
    batch = next(iter(loader))
    assert isinstance(batch["image"], jax.Array) and isinstance(batch["label"], jax.Array)
    got = _by_id(loader)
    assert sorted(got) == sorted(want)
    for i, (image, label) in want.items():
        np.testing.assert_array_equal(got[i][0], image)
        np.testing.assert_allclose(got[i][1], label, atol=1e-6)
