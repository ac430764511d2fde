"""The Loader's staged-upload path (the one torch on CUDA takes), run on the CPU.

A backend may offer a ``Stager`` (``Backend.stager``): it gathers some leaves
into its own buffers, the moves and the transform run inside its context (on
CUDA: the side stream), each batch gets a token, and the consumer waits on the
token before the batch is handed out. A stager that stages NumPy leaves on the
host exercises the same pipeline without a GPU.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pytest

import looptoolkit.loader as loader_module
from looptoolkit import Loader


class HostStager:
    """Stages the leaves at ``positions`` into reused buffers; records what happens."""

    def __init__(self, leaves: list[Any], positions: list[int], batch_size: int, slots: int):
        self.positions = positions
        self.views = [leaves[i] for i in positions]
        self.buffers = [
            [np.empty((batch_size, *v.shape[1:]), v.dtype) for v in self.views]
            for _ in range(slots)
        ]
        self.slots = slots
        self.inside = threading.local()
        self.recorded: list[int] = []
        self.handed: list[int] = []
        self.transform_inside: list[bool] = []

    def staged(self, batches: Iterable[np.ndarray]) -> Iterator[list[Any]]:
        for k, idx in enumerate(batches):
            out = self.buffers[k % self.slots]
            for view, buf in zip(self.views, out, strict=True):
                view.take(idx, axis=0, out=buf[: len(idx)])
            # Copies, as a device copy would be: the buffers are reused.
            yield [buf[: len(idx)].copy() for buf in out]

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        self.inside.on = True
        try:
            yield
        finally:
            self.inside.on = False

    def record(self, k: int) -> int:
        assert getattr(self.inside, "on", False)
        self.recorded.append(k)
        return k

    def hand_over(self, leaves: Iterable[Any], token: int) -> None:
        assert threading.current_thread() is threading.main_thread()
        self.handed.append(token)


@pytest.mark.parametrize("mode", ["inline", "thread"])
def test_staged_and_plain_leaves_merge_into_the_right_batches(monkeypatch, mode):
    rng = np.random.default_rng(0)
    data = {
        "a": rng.standard_normal((97, 3)).astype(np.float32),
        "b": np.arange(97),
        "c": rng.integers(0, 9, (97, 2), dtype=np.uint8),
    }
    made: list[HostStager] = []

    def stager_for(rows, batch_size, target, depth):
        # Stage "b" and "c" (leaf positions 1 and 2); "a" goes the plain way.
        made.append(HostStager(rows.leaves, [1, 2], batch_size, depth + 1))
        return made[-1]

    monkeypatch.setattr(loader_module, "stager_for", stager_for)

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        made[-1].transform_inside.append(bool(getattr(made[-1].inside, "on", False)))
        return {**batch, "sum": batch["a"].sum(axis=1)}

    # A cast makes the move real (a move that keeps every leaf as it is is skipped).
    cast = {np.int64: np.int32}
    loader = Loader(
        data,
        10,
        seed=2,
        device="cpu",
        dtype=cast,
        prefetch=2,
        prefetch_mode=mode,
        transform=transform,
    )
    got = []
    for batch in loader:
        # The loop's step never runs inside the stager's context (on CUDA: its side stream).
        assert not getattr(made[-1].inside, "on", False)
        got.append(batch)
    (stager,) = made
    assert len(got) == len(loader) == 10
    order = loader.indices(0)
    for k, batch in enumerate(got):
        idx = order[k * 10 : (k + 1) * 10]
        for key in ("a", "b", "c"):
            np.testing.assert_array_equal(batch[key], data[key][idx])
        np.testing.assert_allclose(batch["sum"], data["a"][idx].sum(axis=1))
    assert stager.recorded == list(range(10))
    assert stager.handed == list(range(10))  # each batch waited on its own token, in order
    assert stager.transform_inside == [True] * 10  # the transform ran in the stager's context


@pytest.mark.parametrize("mode", ["inline", "thread"])
def test_staged_path_resumes_exactly(monkeypatch, mode):
    data = {"x": np.arange(50.0), "y": np.arange(50)}
    made: list[HostStager] = []

    def stager_for(rows, b, target, depth):
        made.append(HostStager(rows.leaves, [0], b, depth + 1))
        return made[-1]

    monkeypatch.setattr(loader_module, "stager_for", stager_for)
    kwargs = {"device": "cpu", "dtype": {np.int64: np.int32}, "prefetch": 3, "prefetch_mode": mode}
    loader = Loader(data, 7, seed=1, **kwargs)
    it = iter(loader)
    first = [next(it)["y"] for _ in range(3)]
    state = loader.state_dict()
    it.close()
    resumed = Loader(data, 7, seed=1, **kwargs)
    resumed.load_state_dict(state)
    rest = [b["y"] for b in resumed]
    np.testing.assert_array_equal(np.concatenate(first + rest), loader.indices(0))
    assert len(made) == 2 and made[1].handed == list(range(len(rest)))
