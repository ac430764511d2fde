"""Errors shared by the core and the adapters (a leaf module: it imports nothing of looptoolkit)."""

from __future__ import annotations

__all__ = ["TransferError"]


class TransferError(RuntimeError):
    """A leaf could not be moved; the message names its key path and the cause.

    Attributes:
        path: the leaf's key path (``batch['im']['image']``), or None when unknown.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path
