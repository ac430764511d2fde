"""The HF Trainer trains a causal LM on exactly the Loader's ragged epochs, padded and padding-free.

A real ``transformers.Trainer`` fits a 2-layer Llama built from a config (no download) for 2
epochs on ``make_dataloader(..., collate_fn=hf_inputs)`` returned from ``get_train_dataloader``
and prepared by the Trainer's accelerator: padded batches (``input_ids``, ``attention_mask``)
and padding-free ones (``input_ids`` and ``position_ids`` of shape ``(1, T)``, as
``DataCollatorWithFlattening`` gives). ``compute_loss`` records the documents and the real
tokens of every batch. Each epoch must be the Loader's; a new Trainer resumed from the
mid-epoch checkpoint trains on the rest of epoch 1, so the two runs cover it once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _ragged import VOCAB, assert_epoch, corpus, epoch_shown  # noqa: E402
from helpers import reset_accelerate  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402

from looptoolkit.torch_data import hf_inputs, make_dataloader  # noqa: E402

N, B, SEED = 48, 8, 2
STEPS = N // B  # optimizer steps per epoch
DATA = corpus(N, seed=3)
CONFIG = LlamaConfig(
    vocab_size=VOCAB,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    max_position_embeddings=16,
)


pytestmark = pytest.mark.usefixtures("fresh_accelerator_state")


class RecordingTrainer(Trainer):
    """Trains on a ragged ``make_dataloader``; records the documents and tokens of each batch."""

    layout = "pad"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []

    def get_train_dataloader(self) -> Any:
        dl = make_dataloader(
            DATA, self._train_batch_size, seed=SEED, layout=self.layout, collate_fn=hf_inputs
        )
        return self.accelerator.prepare(dl)

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        rows = inputs.pop("row").numpy().copy()
        ids = inputs["input_ids"]
        if self.layout == "pad":
            tokens = ids[inputs["attention_mask"].bool()]
        else:  # one row of every document's tokens, positions restarting at each
            assert ids.shape[0] == 1 and inputs["position_ids"].shape == ids.shape
            assert "attention_mask" not in inputs
            tokens = ids[0]
        self.seen.append((rows, tokens.numpy().copy()))
        return super().compute_loss(model, inputs, *args, **kwargs)


def _trainer(output_dir: Path, layout: str) -> RecordingTrainer:
    reset_accelerate()
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=2,
        per_device_train_batch_size=B,
        use_cpu=True,
        report_to=[],
        save_strategy="steps",
        save_steps=STEPS + 2,  # inside epoch 1
        logging_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
        seed=0,
    )
    trainer = RecordingTrainer(model=LlamaForCausalLM(CONFIG), args=args)
    trainer.layout = layout
    return trainer


@pytest.mark.parametrize("layout", ["pad", "flat"])
def test_epochs_and_a_mid_epoch_resume_are_the_loaders(layout, tmp_path):
    first = _trainer(tmp_path / "first", layout)
    first.train()
    assert len(first.seen) == 2 * STEPS
    for epoch in (0, 1):
        want = epoch_shown(DATA, epoch, batch_size=B, seed=SEED, layout=layout)
        assert_epoch(first.seen[epoch * STEPS : (epoch + 1) * STEPS], want)
        assert sorted(want[0].tolist()) == list(range(N))

    resumed = _trainer(tmp_path / "resumed", layout)  # a new Trainer, model and loader
    resumed.train(resume_from_checkpoint=str(tmp_path / "first" / f"checkpoint-{STEPS + 2}"))
    assert len(resumed.seen) == STEPS - 2
    assert_epoch(
        first.seen[STEPS : STEPS + 2] + resumed.seen,
        epoch_shown(DATA, 1, batch_size=B, seed=SEED, layout=layout),
    )
