"""Lightning DDP on two CPU processes (``ddp_spawn``, gloo): each rank records its rows.

Run by ``test_lightning.py`` as ``python _lightning_ddp.py ROUTE OUT``; writes
``OUT.<rank>`` with ``{epoch: [row ids, ...]}``. The loaders are made in the
DataModule's hook, after the process group exists, so each takes its shard
from it; ``use_distributed_sampler=False`` leaves the sharding to them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import lightning as L
import numpy as np
import torch

from looptoolkit import Loader, make_dataloader

N, B, SEED = 1000, 50, 4


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 8)).astype(np.float32)
    return {"x": x, "y": x.sum(1), "id": np.arange(N)}


class Data(L.LightningDataModule):
    def __init__(self, route: str) -> None:
        super().__init__()
        self.route = route

    def train_dataloader(self) -> Any:
        if self.route == "loader":
            return Loader({k: torch.from_numpy(v) for k, v in data().items()}, B, seed=SEED)
        return make_dataloader(data(), B, seed=SEED)


class Model(L.LightningModule):
    def __init__(self, out: str) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.out = out
        self.rows: dict[int, list[int]] = {}

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.rows.setdefault(self.current_epoch, []).extend(batch["id"].tolist())
        return torch.nn.functional.mse_loss(self.net(batch["x"]).squeeze(1), batch["y"])

    def on_train_end(self) -> None:
        with open(f"{self.out}.{self.global_rank}", "w") as f:
            json.dump(self.rows, f)

    def teardown(self, stage: str) -> None:
        # Each rank's process group ends before its process does: left to the interpreter's
        # exit, gloo's threads were at times destroyed while running (SIGABRT, "terminate
        # called without an active exception") after the training had ended.
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    route, out = sys.argv[1], sys.argv[2]
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_epochs=2,
        use_distributed_sampler=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Model(out), datamodule=Data(route))
