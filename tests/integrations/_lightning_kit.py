"""What the Lightning tests share: a quiet CPU trainer, and a checkpoint saved mid-epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def trainer(**kwargs: Any) -> Any:
    """A ``lightning.Trainer`` on the CPU, 2 epochs, nothing logged, saved or validated."""
    import lightning as L

    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 2,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
    }
    return L.Trainer(**{**options, **kwargs})


class SavesAt:
    """A LightningModule mix-in: a checkpoint at ``path`` after batch ``save_at``.

    ``save_at`` is ``(epoch, batch_idx)``, or None for no checkpoint.
    """

    save_at: tuple[int, int] | None = None
    path: Path | None = None
    trainer: Any
    current_epoch: int

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.save_at == (self.current_epoch, batch_idx):
            self.trainer.save_checkpoint(self.path)
