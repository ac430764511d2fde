"""PyTorch Lightning trains on exactly the Loader's epochs, through every route.

A real ``lightning.Trainer`` fits a tiny model; its ``training_step`` records
the row ids of each batch, per epoch. Epochs 0-2 must be ``Loader.indices(e)``:
with a ``Loader`` passed directly, with ``make_dataloader`` (0 and 2 workers),
with a validation loader and its sanity check, with ``limit_train_batches``,
and across an end-of-epoch and a mid-epoch checkpoint resume. Lightning sets the
epoch before every pass, so its capped passes never warn of a repeated epoch.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from looptoolkit import Loader, RepeatedEpochWarning  # noqa: E402
from looptoolkit.torch_data import make_dataloader  # noqa: E402

# Every other warning is an error: Lightning's "your dataloader is not resumable"
# among them, which a mid-epoch resume with these loaders must not raise.
pytestmark = [
    # The tests pass no validation loader to some runs, on purpose.
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no"),
    # The resumed runs need no ModelCheckpoint callback of their own.
    pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`"),
]

N, B, SEED = 1000, 100, 11


def _numpy_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 8)).astype(np.float32)
    return {"x": x, "y": x.sum(1), "id": np.arange(N)}


REFERENCE = Loader(_numpy_data(), B, seed=SEED)


def _route(name: str) -> Any:
    data = _numpy_data()
    if name == "loader":
        return Loader({k: torch.from_numpy(v) for k, v in data.items()}, B, seed=SEED)
    workers = int(name[-1])
    extra = {"multiprocessing_context": "fork"} if workers else {}
    return make_dataloader(data, B, seed=SEED, num_workers=workers, **extra)


class Recorder(L.LightningModule):
    """A linear model whose training step records the rows it trains on."""

    def __init__(self, save_at: tuple[int, int] | None = None, path: Path | None = None) -> None:
        super().__init__()
        self.model = torch.nn.Linear(8, 1)
        self.seen: dict[int, list[np.ndarray]] = {}
        self.val_batches = 0
        self.save_at, self.path = save_at, path

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.seen.setdefault(self.current_epoch, []).append(batch["id"].numpy().copy())
        return torch.nn.functional.mse_loss(self.model(batch["x"]).squeeze(1), batch["y"])

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.save_at == (self.current_epoch, batch_idx):
            self.trainer.save_checkpoint(self.path)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_batches += 1

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def epochs(self) -> dict[int, np.ndarray]:
        return {e: np.concatenate(rows) for e, rows in self.seen.items()}


def _trainer(**kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 3,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return L.Trainer(**{**options, **kwargs})


ROUTES = ["loader", "dataloader-w0", "dataloader-w2"]


@pytest.mark.parametrize("route", ROUTES)
def test_fit_with_a_validation_loader_and_its_sanity_check(route):
    model = Recorder()
    val = _route(route)  # shuffled too: its sanity check and passes must shift nothing
    _trainer(num_sanity_val_steps=2).fit(model, _route(route), val_dataloaders=val)
    seen = model.epochs()
    assert sorted(seen) == [0, 1, 2]
    for epoch in range(3):
        np.testing.assert_array_equal(seen[epoch], REFERENCE.indices(epoch))
    assert model.val_batches == 2 + 3 * len(REFERENCE)


@pytest.mark.parametrize("route", ["loader", "dataloader-w2"])
def test_limit_train_batches_trains_on_the_start_of_each_epoch(route):
    model = Recorder()
    _trainer(limit_train_batches=4, limit_val_batches=0).fit(model, _route(route))
    for epoch, rows in model.epochs().items():
        np.testing.assert_array_equal(rows, REFERENCE.indices(epoch)[: 4 * B])


@pytest.mark.parametrize("route", ["loader", "dataloader-w0"])
def test_capped_training_and_validation_with_a_sanity_check_do_not_warn(route):
    # Lightning calls `set_epoch` on `loader.sampler` before each training epoch and each
    # validation, the sanity check's included; the sanity check and the first validation
    # set the same epoch and take as many batches: a set_epoch between them, not in a row.
    model = Recorder()
    trainer = _trainer(num_sanity_val_steps=2, limit_train_batches=4, limit_val_batches=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, _route(route), val_dataloaders=_route(route))
    assert [w for w in caught if issubclass(w.category, RepeatedEpochWarning)] == []
    assert sorted(model.epochs()) == [0, 1, 2]
    for epoch, rows in model.epochs().items():  # a new epoch each time: set_epoch was called
        np.testing.assert_array_equal(rows, REFERENCE.indices(epoch)[: 4 * B])
    assert model.val_batches == 2 + 3 * 2


@pytest.mark.parametrize("route", ROUTES)
def test_resume_from_an_end_of_epoch_and_a_mid_epoch_checkpoint(route, tmp_path):
    mid = tmp_path / "mid.ckpt"
    first = Recorder(save_at=(1, 4), path=mid)  # after 5 batches of epoch 1
    end = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, filename="end-{epoch}", save_top_k=-1, save_on_train_epoch_end=True
    )
    _trainer(enable_checkpointing=True, callbacks=[end], limit_val_batches=0).fit(
        first, _route(route)
    )
    for epoch in range(3):
        np.testing.assert_array_equal(first.epochs()[epoch], REFERENCE.indices(epoch))

    # From the end of epoch 0: epochs 1 and 2, whole.
    after_end = Recorder()
    _trainer(limit_val_batches=0).fit(
        after_end, _route(route), ckpt_path=tmp_path / "end-epoch=0.ckpt"
    )
    assert sorted(after_end.epochs()) == [1, 2]
    for epoch in (1, 2):
        np.testing.assert_array_equal(after_end.epochs()[epoch], REFERENCE.indices(epoch))

    # From the middle of epoch 1: the rest of it, then epoch 2.
    after_mid = Recorder()
    _trainer(limit_val_batches=0).fit(after_mid, _route(route), ckpt_path=mid)
    np.testing.assert_array_equal(after_mid.epochs()[1], REFERENCE.indices(1)[5 * B :])
    np.testing.assert_array_equal(after_mid.epochs()[2], REFERENCE.indices(2))


class Predictor(Recorder):
    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self.seen.setdefault(len(self.seen) if batch_idx == 0 else len(self.seen) - 1, []).append(
            batch["id"].numpy().copy()
        )
        return self.model(batch["x"])


@pytest.mark.filterwarnings("ignore:You are using a custom batch sampler `OrderBatchSampler`")
def test_predict_rebuilds_the_dataloader_and_keeps_its_orders_and_cursor():
    # Lightning re-creates a DataLoader for prediction (to track indices) and sets
    # its sampler's epoch to the fit loop's (0 here) before each predict: the copy
    # keeps the batch sampler, its orders and its epoch cursor.
    model, dl = Predictor(), _route("dataloader-w0")
    trainer = _trainer()
    trainer.predict(model, dl)
    assert dl.state_dict()[Loader.EPOCH_KEY] == 1  # the copy's pass finished epoch 0
    trainer.predict(model, dl)
    for epoch in (0, 1):
        np.testing.assert_array_equal(model.epochs()[epoch], REFERENCE.indices(0))


@pytest.mark.slow
def test_ddp_on_two_processes_gives_each_rank_its_shard(tmp_path):
    # One route: the two share Lightning's DDP path, and each run costs ~20 s.
    route = "loader"
    import json
    import subprocess
    import sys

    script = Path(__file__).with_name("_lightning_ddp.py")
    out = tmp_path / "rows"
    done = subprocess.run(
        [sys.executable, str(script), route, str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = {"id": np.arange(1000)}
    for rank in range(2):
        rows = json.loads((tmp_path / f"rows.{rank}").read_text())
        shard = Loader(data, 50, seed=4, rank=rank, world_size=2)
        for epoch in (0, 1):
            np.testing.assert_array_equal(rows[str(epoch)], shard.indices(epoch))


def _mixture(tensors: bool = False) -> Any:
    from looptoolkit import Mix

    data = _numpy_data()
    if tensors:
        data = {k: torch.from_numpy(v) for k, v in data.items()}
    cuts = {"a": slice(0, 600), "b": slice(600, N)}
    halves = {name: {k: v[s] for k, v in data.items()} for name, s in cuts.items()}
    return Mix(halves, {"a": 0.7, "b": 0.3}, epoch=N)


@pytest.mark.parametrize("route", ["loader", "dataloader-w2"])
def test_a_mixture_trains_on_its_epochs_and_resumes_mid_epoch(route, tmp_path):
    def loader() -> Any:
        if route == "loader":
            return Loader(_mixture(tensors=True), B, seed=SEED)
        return make_dataloader(
            _mixture(), B, seed=SEED, num_workers=2, multiprocessing_context="fork"
        )

    reference = Loader(_mixture(), B, seed=SEED)  # the columns' rows are the data's ids
    mid = tmp_path / "mid.ckpt"
    first = Recorder(save_at=(1, 4), path=mid)
    _trainer(limit_val_batches=0).fit(first, loader())
    for epoch in range(3):
        rows = first.epochs()[epoch]
        np.testing.assert_array_equal(rows, reference.indices(epoch))
        for batch in rows.reshape(-1, B):  # 70 rows of a, 30 of b in every batch
            assert int((batch >= 600).sum()) == 30
    after_mid = Recorder()
    _trainer(limit_val_batches=0).fit(after_mid, loader(), ckpt_path=mid)
    np.testing.assert_array_equal(after_mid.epochs()[1], reference.indices(1)[5 * B :])
    np.testing.assert_array_equal(after_mid.epochs()[2], reference.indices(2))
