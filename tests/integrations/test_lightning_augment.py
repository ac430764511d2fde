"""Lightning trains on the Loader's augmented batches: keyed, through every route, resumed.

A real ``lightning.Trainer`` fits a tiny model on images augmented by ``Augment`` (as the
Loader's ``transform``, and as ``make_dataloader``'s ``collate_fn`` with 0 and 2
workers); its ``training_step`` records each row's augmented image, per epoch. Each epoch
must be the Loader's own augmentation of that epoch, also after a mid-epoch checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from _lightning_kit import SavesAt, trainer  # noqa: E402

from looptoolkit import Loader  # noqa: E402
from looptoolkit.augment import Augment, ColorJitter, HorizontalFlip, RandomCrop  # noqa: E402
from looptoolkit.torch_data import make_dataloader  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no"),
    pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`"),
]

N, B, SEED = 120, 20, 5


def _data() -> dict[str, np.ndarray]:
    images = np.random.default_rng(0).integers(0, 256, (N, 3, 12, 12), dtype=np.uint8)
    return {"image": images, "id": np.arange(N)}


def _augment() -> Augment:
    ops = [RandomCrop(10, padding=1), HorizontalFlip(), ColorJitter(0.3, 0.3)]
    return Augment(ops, key="image", dtype="float32")


def _reference(epoch: int) -> dict[int, np.ndarray]:
    loader = Loader(_data(), B, seed=SEED, transform=_augment())
    loader.set_epoch(epoch)
    return {
        int(i): np.asarray(image)
        for batch in loader
        for i, image in zip(batch["id"], batch["image"], strict=True)
    }


def _route(name: str) -> Any:
    if name == "loader":
        data = {k: torch.from_numpy(v) for k, v in _data().items()}
        return Loader(data, B, seed=SEED, transform=_augment())
    workers = int(name[-1])
    extra = {"multiprocessing_context": "fork"} if workers else {}
    return make_dataloader(
        _data(), B, seed=SEED, collate_fn=_augment(), num_workers=workers, **extra
    )


class Recorder(SavesAt, L.LightningModule):
    def __init__(self, save_at: tuple[int, int] | None = None, path: Path | None = None) -> None:
        super().__init__()
        self.model = torch.nn.Linear(300, 1)
        self.seen: dict[int, dict[int, np.ndarray]] = {}
        self.save_at, self.path = save_at, path

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        rows = self.seen.setdefault(self.current_epoch, {})
        for i, image in zip(batch["id"].tolist(), batch["image"], strict=True):
            rows[i] = image.numpy().copy()
        return self.model(batch["image"].reshape(len(batch["image"]), -1)).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _same(got: dict[int, np.ndarray], want: dict[int, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for i, image in want.items():
        np.testing.assert_allclose(got[i], image, atol=1 / 255 + 1e-6)  # torch vs NumPy ops


@pytest.mark.parametrize("route", ["loader", "dataloader-w0", "dataloader-w2"])
def test_each_epoch_is_the_loaders_augmentation_of_it(route):
    model = Recorder()
    trainer().fit(model, _route(route))
    assert sorted(model.seen) == [0, 1]
    for epoch in (0, 1):
        _same(model.seen[epoch], _reference(epoch))
    first = model.seen[0]
    assert any(not np.array_equal(first[i], model.seen[1][i]) for i in first)


def test_a_mid_epoch_checkpoint_resumes_the_same_augmentation(tmp_path):
    mid = tmp_path / "mid.ckpt"
    trainer().fit(Recorder(save_at=(1, 2), path=mid), _route("loader"))  # 3 batches in
    resumed = Recorder()
    trainer().fit(resumed, _route("loader"), ckpt_path=mid)
    want = _reference(1)
    later = {int(i) for i in Loader(_data(), B, seed=SEED).indices(1)[3 * B :]}
    assert sorted(resumed.seen) == [1]
    _same(resumed.seen[1], {i: want[i] for i in later})
