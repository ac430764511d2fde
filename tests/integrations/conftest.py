"""Shared set-up of the tests that drive real training stacks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    # The tiny models here gain nothing from intra-op threads; on 2 cores their
    # spinning competes with the DataLoader workers and slows every step ~10x.
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_accelerator_state() -> Iterator[None]:
    # AcceleratorState is a process-wide singleton: each test starts from none and leaves none.
    from helpers import reset_accelerate

    reset_accelerate()
    yield
    reset_accelerate()
