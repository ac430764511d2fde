"""The HF Trainer trains on exactly the Loader's epochs, before and after a resume.

A real ``transformers.Trainer`` fits a 1-layer BERT built from a config (no
download) for 3 epochs of 10 steps, on a ``make_dataloader`` result (0 and 2
workers) returned from ``get_train_dataloader`` and prepared by the Trainer's
accelerator, as the Trainer prepares its own loader. ``compute_loss`` records
the row ids of each batch it trains on. Epochs 0-2 must be
``Loader.indices(e)``; a new Trainer resumed from the mid-epoch checkpoint
(step 15, inside epoch 1) trains on the rest of epoch 1 then epoch 2, and one
resumed from the end-of-epoch checkpoint (step 10) on epochs 1 and 2.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers import reset_accelerate  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import seed_worker  # noqa: E402

from looptoolkit import Loader  # noqa: E402
from looptoolkit.torch_data import make_dataloader  # noqa: E402

N, B, SEED = 1000, 100, 3
STEPS = N // B  # optimizer steps per epoch (no gradient accumulation)
WORKERS = [0, 2]


def _numpy_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(0, 64, (N, 8), dtype=np.int64),
        "attention_mask": np.ones((N, 8), dtype=np.int64),
        "labels": rng.integers(0, 2, N, dtype=np.int64),
        "row_id": np.arange(N),
    }


REFERENCE = Loader(_numpy_data(), B, seed=SEED)

CONFIG = BertConfig(
    vocab_size=64,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
    num_labels=2,
)


pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")


class RecordingTrainer(Trainer):
    """Trains on ``make_dataloader``; records the row ids of every batch it trains on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows: list[np.ndarray] = []

    def get_train_dataloader(self) -> Any:
        # The DataLoader arguments and the accelerator.prepare of Trainer._get_dataloader.
        args = self.args
        dataloader = make_dataloader(
            _numpy_data(),
            self._train_batch_size,
            seed=SEED,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            multiprocessing_context=args.dataloader_multiprocessing_context,
            prefetch_factor=args.dataloader_prefetch_factor,
            in_order=args.dataloader_in_order,
            worker_init_fn=partial(
                seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index
            ),
        )
        return self.accelerator.prepare(dataloader)

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self.rows.append(inputs.pop("row_id").numpy().copy())
        return super().compute_loss(model, inputs, *args, **kwargs)


def _trainer(output_dir: Path, workers: int) -> RecordingTrainer:
    reset_accelerate()
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=3,
        per_device_train_batch_size=B,
        use_cpu=True,
        report_to=[],
        save_strategy="steps",
        save_steps=5,  # checkpoints at the end of epoch 0 (step 10) and inside epoch 1 (15)
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=workers,
        dataloader_multiprocessing_context="fork" if workers else None,
        remove_unused_columns=False,
        seed=0,
    )
    return RecordingTrainer(model=BertForSequenceClassification(CONFIG), args=args)


@pytest.fixture(scope="module", params=WORKERS, ids=lambda w: f"workers{w}")
def first_run(request: Any, tmp_path_factory: Any) -> tuple[int, Path, list[np.ndarray]]:
    """A 3-epoch run that saves a checkpoint every 5 steps: workers, its output dir, its rows."""
    workers = request.param
    output_dir = tmp_path_factory.mktemp(f"trainer-w{workers}")
    trainer = _trainer(output_dir, workers)
    trainer.train()
    reset_accelerate()
    return workers, output_dir, trainer.rows


def _assert_rows(rows: list[np.ndarray], expected: np.ndarray) -> None:
    assert all(len(batch) == B for batch in rows)
    np.testing.assert_array_equal(np.concatenate(rows), expected)


def test_training_epochs_are_the_loader_epochs(first_run):
    _, output_dir, rows = first_run
    assert len(rows) == 3 * STEPS
    for epoch in range(3):
        _assert_rows(rows[epoch * STEPS : (epoch + 1) * STEPS], REFERENCE.indices(epoch))
    assert (output_dir / "checkpoint-10").is_dir() and (output_dir / "checkpoint-15").is_dir()


def test_resume_from_a_mid_epoch_checkpoint(first_run, tmp_path):
    workers, output_dir, _ = first_run
    trainer = _trainer(tmp_path, workers)  # a new Trainer, model and loader
    trainer.train(resume_from_checkpoint=str(output_dir / "checkpoint-15"))
    assert len(trainer.rows) == STEPS // 2 + STEPS
    _assert_rows(trainer.rows[: STEPS // 2], REFERENCE.indices(1)[STEPS // 2 * B :])
    _assert_rows(trainer.rows[STEPS // 2 :], REFERENCE.indices(2))


def test_resume_from_an_end_of_epoch_checkpoint(first_run, tmp_path):
    workers, output_dir, _ = first_run
    trainer = _trainer(tmp_path, workers)
    trainer.train(resume_from_checkpoint=str(output_dir / "checkpoint-10"))
    assert len(trainer.rows) == 2 * STEPS
    _assert_rows(trainer.rows[:STEPS], REFERENCE.indices(1))
    _assert_rows(trainer.rows[STEPS:], REFERENCE.indices(2))
