"""The local S3 server of the bucket tests: started once per session, a clean view per test.

Registered in ``conftest.py`` (``pytest_plugins``). Use ``s3`` for the server (no faults,
no latency, counters at zero) and ``bucket`` for a new bucket of one's own in it:

    def test_reads(s3, bucket):
        s3.put(bucket, "x.bin", b"...")
        s3.latency_s = 0.02
        s3.faults.add("503", times=2)
        ...  # read it from s3.endpoint, then check s3.stats
"""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from looptoolkit.bench.s3local import LocalS3


@pytest.fixture(scope="session")
def local_s3() -> Iterator[LocalS3]:
    """The session's server and proxy, as other tests left them (prefer ``s3``)."""
    with LocalS3() as s3:
        yield s3


@pytest.fixture
def s3(local_s3: LocalS3) -> Iterator[LocalS3]:
    """The session's server with no faults, no latency and its counters at zero."""
    local_s3.faults.clear()
    local_s3.latency_s = 0.0
    local_s3.reset_stats()
    yield local_s3
    local_s3.faults.clear()  # a test that failed half-way leaves nothing behind
    local_s3.latency_s = 0.0


def resumed_epoch(data: Any, batch_size: int, epoch: int, keys: Any) -> dict[str, np.ndarray]:
    """Epoch ``epoch`` of a grouped Loader over ``data``, stopped after a third of its batches
    and resumed from its ``state_dict`` by a Loader over a pickled copy of ``data`` (a new
    process's view): the rows of ``keys`` of every batch, in order.
    """
    from looptoolkit import Loader

    loader = Loader(data, batch_size, shuffle="grouped")
    loader.set_epoch(epoch)
    iterator = iter(loader)
    first = [next(iterator) for _ in range(len(loader) // 3)]
    state = loader.state_dict()
    del iterator
    resumed = Loader(pickle.loads(pickle.dumps(data)), batch_size, shuffle="grouped")
    resumed.load_state_dict(state)
    rest = list(resumed)
    return {k: np.concatenate([b[k] for b in first + rest]) for k in keys}


@pytest.fixture
def settled(s3: LocalS3) -> Iterator[None]:
    """The test ends with no request left open at the proxy (a stalled one abandoned).

    Use it for a module with ``pytestmark = pytest.mark.usefixtures("settled")``.
    """
    yield
    end = time.monotonic() + 10
    while s3.stats.snapshot()["in_flight"] and time.monotonic() < end:
        time.sleep(0.05)


@pytest.fixture
def bucket(s3: LocalS3) -> str:
    """A new, empty bucket of the test's own (the server's data outlives tests)."""
    return s3.make_bucket(f"test-{uuid.uuid4().hex[:20]}")
