"""Fixtures shared by the test suite; markers are declared in pyproject.toml."""

from __future__ import annotations

import os
from typing import Any

# Before any framework is imported: on a GPU, tf would map nearly all the memory of
# every GPU when its runtime starts, and JAX 75 % of it when its client does, and
# the torch tests in the same process would run out of memory.
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import pytest

# The local S3 server of the bucket tests (the fixtures `local_s3`, `s3` and `bucket`), and
# the local GCS and Azure emulators (`local_gcs`, `gcs_bucket`, `local_azure`, `azure_container`).
pytest_plugins = ["s3_fixtures", "gcs_azure_fixtures"]


@pytest.fixture
def cuda() -> Any:
    """The current CUDA ``torch.device``; skips the test without torch or a CUDA GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda", torch.cuda.current_device())
