"""accelerate trains on exactly the Loader's epochs of ragged data, before and after a resume.

A real ``Accelerator(cpu=True)`` prepares a tiny embedding model, its optimizer and a
``make_dataloader`` result over ragged data (padded with 2 workers, padding-free with none,
token budgets); the loop records the documents and real tokens of each batch. Epochs must show
exactly the Loader's, and accelerate's resume pattern (``save_state`` inside epoch 1, then
``load_state``, ``set_epoch`` and ``skip_first_batches`` in fresh objects) must train on the
rest of epoch 1, so the two runs together cover it once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from _ragged import VOCAB, assert_epoch, corpus, epoch_shown, shown  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from helpers import reset_accelerate  # noqa: E402

from looptoolkit import PadLayout  # noqa: E402
from looptoolkit.torch_data import make_dataloader  # noqa: E402

N, SEED = 60, 3
DATA = corpus(N, seed=1)
CASES = {
    "pad-w2": (2, {"batch_size": 8, "layout": PadLayout(pad_to_multiple_of=4)}),
    "flat-w0": (0, {"batch_size": 8, "layout": "flat"}),
    "budget-w0": (0, {"batch_size": None, "batch_tokens": 40, "layout": "flat"}),
}


pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")


class Run:
    """An Accelerator with a prepared embedding model, optimizer and ragged ``make_dataloader``."""

    def __init__(self, workers: int, options: dict[str, Any]) -> None:
        torch.manual_seed(0)
        self.accelerator = Accelerator(cpu=True)
        extra = {"multiprocessing_context": "fork"} if workers else {}
        dl = make_dataloader(DATA, seed=SEED, num_workers=workers, **options, **extra)
        model = torch.nn.Embedding(VOCAB, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.model, self.optimizer, self.dl = self.accelerator.prepare(model, optimizer, dl)

    def step(self, batch: dict[str, Any], seen: list[tuple[np.ndarray, np.ndarray]]) -> None:
        rows, tokens = shown(batch)
        seen.append((rows, tokens))
        loss = self.model(torch.from_numpy(tokens)).pow(2).mean()
        self.accelerator.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()


@pytest.mark.parametrize("case", list(CASES))
def test_epochs_and_a_resume_with_skip_first_batches(case, tmp_path):
    workers, options = CASES[case]
    checkpoint = tmp_path / "checkpoint"
    first = Run(workers, options)
    epoch0: list[tuple[np.ndarray, np.ndarray]] = []
    for batch in first.dl:
        first.step(batch, epoch0)
    want0 = epoch_shown(DATA, 0, seed=SEED, **options)
    assert_epoch(epoch0, want0)
    assert sorted(want0[0].tolist()) == list(range(N))
    stop = 3
    epoch1_first: list[tuple[np.ndarray, np.ndarray]] = []
    for i, batch in enumerate(first.dl):
        first.step(batch, epoch1_first)
        if i == stop - 1:
            first.accelerator.save_state(str(checkpoint))
            saved = first.model.weight.detach().clone()
            break

    reset_accelerate()
    resumed = Run(workers, options)
    resumed.accelerator.load_state(str(checkpoint))
    torch.testing.assert_close(resumed.model.weight, saved)
    resumed.dl.set_epoch(1)
    epoch1_rest: list[tuple[np.ndarray, np.ndarray]] = []
    for batch in resumed.accelerator.skip_first_batches(resumed.dl, stop):
        resumed.step(batch, epoch1_rest)
    assert epoch1_rest
    assert_epoch(epoch1_first + epoch1_rest, epoch_shown(DATA, 1, seed=SEED, **options))
    resumed.dl.set_epoch(2)  # as accelerate's resume pattern does for the next epochs
    epoch2: list[tuple[np.ndarray, np.ndarray]] = []
    for batch in resumed.dl:
        resumed.step(batch, epoch2)
    assert_epoch(epoch2, epoch_shown(DATA, 2, seed=SEED, **options))
