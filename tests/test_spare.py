"""Arrays written into again: never while a batch, a view or a tensor holds them."""

from __future__ import annotations

import numpy as np
import pytest

from looptoolkit import Loader, normalize
from looptoolkit._common import spare
from looptoolkit._common.spare import Spares

SHAPE = (64, 3, 224, 224)  # float32: 38.5 MB, above SPARE_MIN_BYTES


def test_an_array_is_handed_out_again_only_once_unheld():
    spares = Spares()
    first = spares.empty(SHAPE, np.float32)
    address = first.ctypes.data
    second = spares.empty(SHAPE, np.float32)  # the first is held: new memory
    assert second.ctypes.data != address
    view = first[3]
    del first
    third = spares.empty(SHAPE, np.float32)  # a view still holds the first
    assert third.ctypes.data not in (address, second.ctypes.data)
    del view
    assert spares.empty(SHAPE, np.float32).ctypes.data == address
    assert spares.empty((2, 3), np.float32).shape == (2, 3)  # small: always new


def test_a_tensor_holding_the_array_keeps_it():
    torch = pytest.importorskip("torch")
    spares = Spares()
    array = spares.empty(SHAPE, np.float32)
    address = array.ctypes.data
    tensor = torch.from_numpy(array)
    del array
    assert spares.empty(SHAPE, np.float32).ctypes.data != address
    del tensor
    assert spares.empty(SHAPE, np.float32).ctypes.data == address


def test_normalize_reuses_its_output_and_never_overwrites_a_held_batch():
    images = np.random.default_rng(0).integers(0, 256, (128, *SHAPE[1:]), dtype=np.uint8)
    norm = normalize([127.5] * 3, [64.0] * 3, key="image")
    loader = Loader({"image": images}, 64, shuffle=False, transform=norm)
    want = [(images[i : i + 64].astype(np.float32) - 127.5) / 64 for i in (0, 64)]
    kept = [batch["image"] for batch in loader]  # held: each batch its own memory
    assert kept[0].ctypes.data != kept[1].ctypes.data
    for got, ref in zip(kept, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    addresses = set()
    for _ in range(3):  # batches dropped as the loop goes: their memory comes back
        for batch in loader:
            addresses.add(batch["image"].ctypes.data)
    assert len(addresses) <= 3
    for got, ref in zip(kept, want, strict=True):  # the held batches were not written
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_a_keeper_that_ignored_the_count_would_be_caught(monkeypatch):
    monkeypatch.setattr(spare, "ONE_HOLDER", 1 << 20)  # the planted defect: always free
    with pytest.raises(AssertionError):
        test_normalize_reuses_its_output_and_never_overwrites_a_held_batch()
