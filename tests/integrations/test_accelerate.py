"""accelerate trains on exactly the Loader's epochs, before and after a resume.

A real ``Accelerator(cpu=True)`` prepares a tiny linear model, its optimizer
and a ``make_dataloader`` result (0 and 2 workers); the loop records the row
ids of each batch. Epochs 0-2 must be ``Loader.indices(e)``: in a plain
``for epoch in range(3)`` loop, and across accelerate's resume pattern
(``save_state`` in the middle of epoch 1, then ``load_state``, ``set_epoch``
and ``skip_first_batches`` in fresh objects).

``accelerator.prepare`` rebuilds the loader as accelerate's ``DataLoaderShard``
around a plain ``DataLoader`` that shares the original batch sampler, so the
``EpochDataLoader``'s own ``state_dict`` is not behind the wrapper (its
``state_dict()`` raises ``AttributeError``: the plain base loader has none).
The last test pins down the state route that does work: the original object,
kept by the user, shares the epoch cursor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from accelerate import Accelerator  # noqa: E402
from helpers import reset_accelerate  # noqa: E402

from looptoolkit import Loader  # noqa: E402
from looptoolkit.torch_data import make_dataloader  # noqa: E402

N, B, SEED = 1000, 100, 3
WORKERS = [0, 2]


def _numpy_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((N, 8)).astype(np.float32),
        "y": rng.standard_normal(N).astype(np.float32),
        "id": np.arange(N),
    }


REFERENCE = Loader(_numpy_data(), B, seed=SEED)


pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")


class Run:
    """An Accelerator with a prepared linear model, optimizer and ``make_dataloader``."""

    def __init__(self, workers: int) -> None:
        torch.manual_seed(0)
        self.accelerator = Accelerator(cpu=True)
        extra = {"multiprocessing_context": "fork"} if workers else {}
        self.original = make_dataloader(_numpy_data(), B, seed=SEED, num_workers=workers, **extra)
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        self.model, self.optimizer, self.dl = self.accelerator.prepare(
            model, optimizer, self.original
        )

    def step(self, batch: dict[str, Any], seen: list[np.ndarray]) -> None:
        seen.append(batch["id"].numpy().copy())
        prediction = self.model(batch["x"]).squeeze(1)
        self.accelerator.backward(torch.nn.functional.mse_loss(prediction, batch["y"]))
        self.optimizer.step()
        self.optimizer.zero_grad()


def _assert_epoch(rows: list[np.ndarray], epoch: int, start: int = 0) -> None:
    np.testing.assert_array_equal(np.concatenate(rows), REFERENCE.indices(epoch)[start:])


@pytest.mark.parametrize("workers", WORKERS)
def test_training_epochs_are_the_loader_epochs(workers):
    run = Run(workers)
    seen: dict[int, list[np.ndarray]] = {}
    for epoch in range(3):
        for batch in run.dl:
            run.step(batch, seen.setdefault(epoch, []))
    assert sorted(seen) == [0, 1, 2]
    for epoch in range(3):
        assert all(len(rows) == B for rows in seen[epoch])
        _assert_epoch(seen[epoch], epoch)


@pytest.mark.parametrize("workers", WORKERS)
def test_resume_with_save_state_and_skip_first_batches(workers, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    first = Run(workers)
    epoch0: list[np.ndarray] = []
    for batch in first.dl:
        first.step(batch, epoch0)
    epoch1_first: list[np.ndarray] = []
    for i, batch in enumerate(first.dl):
        first.step(batch, epoch1_first)
        if i == 4:  # 5 batches of epoch 1 trained on: save, and stop this run
            first.accelerator.save_state(str(checkpoint))
            saved_weights = first.model.weight.detach().clone()
            break
    _assert_epoch(epoch0, 0)

    # A new process, in effect: new Accelerator, model, optimizer and loader.
    reset_accelerate()
    resumed = Run(workers)
    resumed.accelerator.load_state(str(checkpoint))
    torch.testing.assert_close(resumed.model.weight, saved_weights)
    resumed.dl.set_epoch(1)
    epoch1_rest: list[np.ndarray] = []
    for batch in resumed.accelerator.skip_first_batches(resumed.dl, 5):
        resumed.step(batch, epoch1_rest)
    resumed.dl.set_epoch(2)
    epoch2: list[np.ndarray] = []
    for batch in resumed.dl:
        resumed.step(batch, epoch2)

    assert len(epoch1_first) == len(epoch1_rest) == 5
    _assert_epoch(epoch1_first + epoch1_rest, 1)
    _assert_epoch(epoch2, 2)


@pytest.mark.parametrize("workers", WORKERS)
def test_state_route_through_the_original_loader(workers):
    run = Run(workers)
    # The wrapper's batch sampler is the original's: set_epoch and the cursor reach it.
    assert run.dl.batch_sampler is run.original.batch_sampler
    for epoch in range(2):
        for batch in run.dl:
            run.step(batch, [])
        # Between epochs the original's state is the next epoch. Inside one it is
        # not the position: a plain DataLoader does not tell the batch sampler
        # which batches the loop received (skip_first_batches resumes instead).
        state = run.original.state_dict()
        assert (state["epoch"], state["offset"]) == (epoch + 1, 0)

    # A mid-epoch state in the Loader's format, loaded into the original
    # loader: accelerate's wrapper sets its own epoch count at every pass, so
    # set that epoch on the wrapper too (the loaded offset is kept).
    loader = Loader(_numpy_data(), B, seed=SEED)
    loader.set_epoch(1)
    for i, _ in enumerate(loader):
        if i == 4:
            mid_epoch1 = loader.state_dict()
            break
    assert (mid_epoch1["epoch"], mid_epoch1["offset"]) == (1, 5 * B)
    fresh = Run(workers)
    fresh.original.load_state_dict(mid_epoch1)
    fresh.dl.set_epoch(1)
    rest: list[np.ndarray] = []
    for batch in fresh.dl:
        fresh.step(batch, rest)
    _assert_epoch(rest, 1, start=5 * B)
    epoch2: list[np.ndarray] = []
    for batch in fresh.dl:  # the wrapper counted the pass: epoch 2 without set_epoch
        fresh.step(batch, epoch2)
    _assert_epoch(epoch2, 2)


def test_prepare_keeps_the_original_batch_sampler_but_not_its_state_dict():
    # Documents what the wrapper exposes, so that a change in accelerate shows here.
    run = Run(0)
    assert type(run.dl.base_dataloader) is torch.utils.data.DataLoader
    assert not hasattr(run.dl.base_dataloader, "state_dict")
    with pytest.raises(AttributeError):
        run.dl.state_dict()
