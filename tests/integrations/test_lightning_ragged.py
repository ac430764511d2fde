"""PyTorch Lightning trains on exactly the Loader's epochs of ragged data, and resumes exactly.

A real ``lightning.Trainer`` fits a tiny embedding model on padded, padding-free and packed
batches (a ``Loader`` of torch tensors passed directly, and ``make_dataloader`` with 0 and 2
workers); ``training_step`` records the documents and real tokens of each batch. Each epoch must
hold every document once and show exactly the Loader's epoch; a run resumed from a mid-epoch
checkpoint trains on the rest of that epoch, so the two runs together cover it once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from _lightning_kit import SavesAt, trainer  # noqa: E402
from _ragged import VOCAB, assert_epoch, corpus, epoch_shown, shown  # noqa: E402

import looptoolkit as lt  # noqa: E402
from looptoolkit.torch_data import make_dataloader  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`"),
]

N, SEED = 60, 5
DATA = corpus(N)

# route, options: each layout once, each route once.
CASES = {
    "loader-pad": ("loader", {"batch_size": 8, "layout": "pad"}),
    "w0-flat": ("w0", {"batch_size": 8, "layout": "flat"}),
    "w2-pack": ("w2", {"batch_size": 2, "layout": lt.PackLayout(seq_len=16)}),
    "loader-budget": ("loader", {"batch_size": None, "batch_tokens": 48, "group_by_length": True}),
    "w0-budget": ("w0", {"batch_size": None, "batch_tokens": 48, "group_by_length": True}),
}


def _route(name: str, options: dict[str, Any]) -> Any:
    if name == "loader":
        col = DATA["input_ids"]
        data = {
            "input_ids": lt.Ragged(torch.from_numpy(col.values), col.offsets),
            "row": torch.from_numpy(DATA["row"]),
        }
        return lt.Loader(data, seed=SEED, **options)
    workers = int(name[-1])
    extra = {"multiprocessing_context": "fork"} if workers else {}
    return make_dataloader(DATA, seed=SEED, num_workers=workers, **options, **extra)


class Recorder(SavesAt, L.LightningModule):
    """Token embeddings trained on every real token; records what each batch shows."""

    def __init__(self, save_at: tuple[int, int] | None = None, path: Path | None = None) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, 4)
        self.seen: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.save_at, self.path = save_at, path

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        rows, tokens = shown(batch)
        self.seen.setdefault(self.current_epoch, []).append((rows, tokens))
        return self.embedding(torch.from_numpy(tokens)).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("case", list(CASES))
def test_epochs_and_a_mid_epoch_resume_are_the_loaders(case, tmp_path):
    route, options = CASES[case]
    mid = tmp_path / "mid.ckpt"
    stop = 2  # the checkpoint is taken after batch 2 of epoch 1
    first = Recorder(save_at=(1, stop), path=mid)
    trainer().fit(first, _route(route, options))
    assert sorted(first.seen) == [0, 1]
    for epoch in (0, 1):
        want = epoch_shown(DATA, epoch, seed=SEED, **options)
        assert_epoch(first.seen[epoch], want)
        assert set(want[0].tolist()) == set(range(N))  # every document, in every layout

    resumed = Recorder()
    trainer().fit(resumed, _route(route, options), ckpt_path=mid)
    assert sorted(resumed.seen) == [1]
    # The first run's batches up to the checkpoint and the resumed run's: epoch 1 once.
    assert_epoch(
        first.seen[1][: stop + 1] + resumed.seen[1], epoch_shown(DATA, 1, seed=SEED, **options)
    )
