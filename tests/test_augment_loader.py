"""Augmentation in the Loader's routes: a row is augmented the same wherever its batch is made.

The keyed rule end to end, with real ops: the same augmented rows after a resume (also
after ``SIGKILL``), at another world size, with 0, 1 and 2 DataLoader workers (fork and
spawn), in each prefetch mode, resident or not, on the host before the copy or after it,
on NumPy, torch, JAX and tf; other rows in another epoch.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader, Mix
from looptoolkit.augment import (
    Augment,
    ColorJitter,
    HorizontalFlip,
    MixUp,
    RandomErasing,
    RandomResizedCrop,
)

N, B, SEED = 48, 8, 11
COMPILED_LEVELS = 6  # see test_jax_and_tf_on_the_host_and_on_their_devices_get_the_same_rows


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (N, 3, 20, 24), dtype=np.uint8)
    return {"image": image, "label": np.arange(N) % 5, "id": np.arange(N)}


def _aug(**kwargs: Any) -> Augment:
    ops = [
        RandomResizedCrop(12),
        HorizontalFlip(),
        ColorJitter(0.4, 0.4, 0.4, 0.1),
        RandomErasing(p=0.5),
    ]
    return Augment(ops, key="image", **kwargs)


def _rows(batches: Iterable[Any]) -> dict[int, np.ndarray]:
    """Row id -> its augmented image (as NumPy)."""
    out: dict[int, np.ndarray] = {}
    for batch in batches:
        images = np.asarray(batch["image"])
        for i, image in zip(np.asarray(batch["id"]).tolist(), images, strict=True):
            assert i not in out
            out[i] = image
    return out


def _same(got: dict[int, np.ndarray], want: dict[int, np.ndarray], atol: int = 0) -> None:
    assert sorted(got) == sorted(want)
    for i, image in want.items():
        diff = np.abs(got[i].astype(np.int16) - image.astype(np.int16)).max()
        assert diff <= atol, (i, diff)


REFERENCE = _rows(Loader(_data(), B, seed=SEED, transform=_aug()))


def test_the_rows_are_augmented():
    first = np.stack([REFERENCE[i] for i in range(N)])
    assert first.shape == (N, 3, 12, 12)
    assert len({first[i].tobytes() for i in range(N)}) == N


def test_another_epoch_augments_otherwise():
    loader = Loader(_data(), B, seed=SEED, transform=_aug())
    loader.set_epoch(1)
    other = _rows(loader)
    assert sum((other[i] != REFERENCE[i]).any() for i in range(N)) > 0.9 * N


@pytest.mark.parametrize("world_size", [2, 3])
def test_any_world_size_augments_each_row_the_same(world_size):
    got: dict[int, np.ndarray] = {}
    for rank in range(world_size):
        loader = Loader(
            _data(), B, seed=SEED, transform=_aug(), rank=rank, world_size=world_size,
            pad_shards=False,
        )  # fmt: skip
        got.update(_rows(loader))
    _same(got, REFERENCE)


@pytest.mark.parametrize(
    "options",
    [{"prefetch_mode": "thread"}, {"device": "cpu"}, {"device": "cpu", "resident": True}],
)
def test_every_mode_augments_each_row_the_same(options):
    _same(_rows(Loader(_data(), B, seed=SEED, transform=_aug(), **options)), REFERENCE)


def test_a_resume_augments_the_rest_the_same():
    first = Loader(_data(), B, seed=SEED, transform=_aug())
    it = iter(first)
    got = _rows(next(it) for _ in range(3))
    state = first.state_dict()
    second = Loader(_data(), 5, seed=SEED, transform=_aug())  # another batch size
    second.load_state_dict(state)
    got.update(_rows(second))
    _same(got, REFERENCE)


def test_a_resume_after_sigkill_augments_the_rest_the_same(tmp_path):
    script = textwrap.dedent(
        f"""
        import json, os, signal, sys
        import numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_augment_loader import _aug, _data, B, SEED
        from looptoolkit import Loader
        loader = Loader(_data(), B, seed=SEED, transform=_aug())
        seen = []
        for k, batch in enumerate(loader):
            seen += np.asarray(batch["id"]).tolist()
            np.save({str(tmp_path / "images")!r} + str(k) + ".npy", batch["image"])
            if k == 2:
                state = loader.state_dict()
                with open({str(tmp_path / "state.json")!r}, "w") as f:
                    json.dump({{"state": state, "seen": seen}}, f)
                os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=120)
    assert done.returncode == -signal.SIGKILL
    saved = json.loads((tmp_path / "state.json").read_text())
    images = np.concatenate([np.load(tmp_path / f"images{k}.npy") for k in range(3)])
    got = dict(zip(saved["seen"], images, strict=True))
    resumed = Loader(_data(), B, seed=SEED, transform=_aug())
    resumed.load_state_dict(saved["state"])
    got.update(_rows(resumed))
    _same(got, REFERENCE)


def test_torch_after_the_move_and_numpy_before_it_agree():
    torch = pytest.importorskip("torch")
    device = torch.device("cpu")
    on_torch = _rows(Loader(_data(), B, seed=SEED, device=device, transform=_aug()))
    _same(on_torch, REFERENCE, atol=1)
    host = Loader(_data(), B, seed=SEED, device=device, transform=_aug(placement="host"))
    batch = next(iter(host))
    assert isinstance(batch["image"], torch.Tensor)  # augmented on the host, then moved
    _same(_rows(host), REFERENCE)


def test_jax_and_tf_on_the_host_and_on_their_devices_get_the_same_rows():
    jax = pytest.importorskip("jax")
    tf = pytest.importorskip("tensorflow")
    for device in (jax.devices("cpu")[0], "/CPU:0"):
        loader = Loader(_data(), B, seed=SEED, device=device, transform=_aug(placement="host"))
        _same(_rows(loader), REFERENCE)
    for device, kind in ((jax.devices("cpu")[0], jax.Array), ("/CPU:0", tf.Tensor)):
        on_device = Loader(_data(), B, seed=SEED, device=device, transform=_aug())
        assert isinstance(next(iter(on_device))["image"], kind)
        # The resized crop's float32 weights are within 2 levels of torch's fixed-point
        # uint8 kernel; ColorJitter's three factors (up to 1.4 each) and truncating casts
        # then widen a level to a few, on a few percent of the pixels (measured: 5 levels,
        # 2-8%).
        got = _rows(on_device)
        assert sorted(got) == sorted(REFERENCE)
        diff = np.stack([np.abs(got[i].astype(np.int16) - REFERENCE[i]) for i in range(N)])
        assert diff.max() <= COMPILED_LEVELS and (diff > 0).mean() < 0.1


@pytest.mark.parametrize(
    ("workers", "context"), [(0, None), (1, "fork"), (2, "fork"), (2, "spawn")]
)
def test_dataloader_workers_augment_each_row_the_same(workers, context):
    pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    extra = {} if context is None else {"multiprocessing_context": context}
    dl = make_dataloader(_data(), B, seed=SEED, collate_fn=_aug(), num_workers=workers, **extra)
    _same(_rows(dl), REFERENCE, atol=1)  # torch tensors in the workers


def test_a_mixture_augments_each_row_by_its_place_in_the_mixed_order():
    data = _data()
    half = {k: v[: N // 2] for k, v in data.items()}
    rest = {k: v[N // 2 :] for k, v in data.items()}
    mix = Mix({"a": half, "b": rest}, [0.5, 0.5])
    first = Loader(mix, B, seed=SEED, transform=_aug())
    it = iter(first)
    got = [np.asarray(b["image"]) for b in (next(it) for _ in range(2))]
    state = first.state_dict()
    again = Loader(mix, B, seed=SEED, transform=_aug())
    again.load_state_dict(state)
    rest_batches = [np.asarray(b["image"]) for b in again]
    whole = [np.asarray(b["image"]) for b in Loader(mix, B, seed=SEED, transform=_aug())]
    assert len(got) + len(rest_batches) == len(whole)
    for a, b in zip(got + rest_batches, whole, strict=True):
        np.testing.assert_array_equal(a, b)


def test_mixup_mixes_the_same_pairs_after_a_resume():
    aug = Augment([MixUp(alpha=0.4)], key="image", labels="label", num_classes=5)
    whole = [
        (np.asarray(b["image"]), np.asarray(b["label"]))
        for b in Loader(_data(), B, seed=SEED, transform=aug)
    ]
    first = Loader(_data(), B, seed=SEED, transform=aug)
    it = iter(first)
    got = [(np.asarray(b["image"]), np.asarray(b["label"])) for b in (next(it) for _ in range(2))]
    again = Loader(_data(), B, seed=SEED, transform=aug)
    again.load_state_dict(first.state_dict())
    got += [(np.asarray(b["image"]), np.asarray(b["label"])) for b in again]
    for (a, la), (b, lb) in zip(got, whole, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
    assert whole[0][1].shape == (B, 5) and np.allclose(whole[0][1].sum(axis=1), 1.0)


def _docs() -> dict[str, Any]:
    rng = np.random.default_rng(1)
    lengths = rng.integers(3, 12, N)
    return {"ids": [list(rng.integers(5, 100, n)) for n in lengths], "doc": np.arange(N)}


def _masked(loader: Loader) -> dict[int, tuple[list[int], list[int]]]:
    """Document id -> (its masked ids, its labels), whatever the layout."""
    out = {}
    for batch in loader:
        ids, labels = batch["ids"], batch["labels"]
        if hasattr(ids, "mask"):  # padded
            rows = [
                (ids.values[r][ids.mask[r]].tolist(), labels.values[r][ids.mask[r]].tolist())
                for r in range(len(ids.lengths))
            ]
        else:  # flat
            cut = ids.cu_seqlens
            rows = [
                (ids.values[a:b].tolist(), labels.values[a:b].tolist())
                for a, b in itertools.pairwise(cut.tolist())
            ]
        for doc, row in zip(np.asarray(batch["doc"]).tolist(), rows, strict=True):
            out[doc] = row
    return out


def test_masked_documents_are_the_same_in_any_layout_batch_and_world_size():
    from looptoolkit import FlatLayout
    from looptoolkit.augment import MaskTokens

    mask = MaskTokens(vocab_size=100, mask_token_id=3, key="ids", probability=0.3)
    padded = _masked(Loader(_docs(), B, seed=SEED, transform=mask))
    assert any(label != -100 for _, labels in padded.values() for label in labels)
    flat = _masked(Loader(_docs(), 5, seed=SEED, transform=mask, layout=FlatLayout()))
    assert flat == padded
    ranks: dict[int, tuple[list[int], list[int]]] = {}
    for rank in range(2):
        ranks.update(
            _masked(Loader(_docs(), B, seed=SEED, transform=mask, rank=rank, world_size=2))
        )
    assert ranks == padded


def test_loader_dataset_augments_each_row_as_the_loader_does():
    tf = pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    loader = Loader(_data(), B, seed=SEED, transform=_aug())
    ds = loader_dataset(loader)
    _same(_rows(ds), REFERENCE)
    assert isinstance(next(iter(ds))["image"], tf.Tensor)
    loader.set_epoch(1)
    other = _rows(ds)
    assert sum((other[i] != REFERENCE[i]).any() for i in range(N)) > 0.9 * N
    sharded: dict[int, np.ndarray] = {}
    for rank in range(2):
        sharded.update(_rows(loader_dataset(Loader(
            _data(), B, seed=SEED, transform=_aug(), rank=rank, world_size=2, pad_shards=False
        ))))  # fmt: skip
    _same(sharded, REFERENCE)


def test_static_batches_carry_the_augmented_rows():
    torch = pytest.importorskip("torch")
    from looptoolkit import StaticBatches

    loader = Loader(_data(), B, seed=SEED, device=torch.device("cpu"), transform=_aug())
    static = StaticBatches(loader)
    got: dict[int, np.ndarray] = {}
    pointers = set()
    for batch in static:  # the same buffers each time: copy the rows out within the step
        pointers.add(batch["image"].data_ptr())
        for i, image in zip(batch["id"].tolist(), batch["image"].numpy(), strict=True):
            got[i] = image.copy()
    assert len(pointers) == 1
    _same(got, REFERENCE, atol=1)  # torch tensors after the move
