"""Fixtures shared by the test suite; markers are declared in pyproject.toml."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def cuda() -> Any:
    """The current CUDA ``torch.device``; skips the test without torch or a CUDA GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda", torch.cuda.current_device())
