"""Where a Loader makes its batches: the loop's own thread ("inline") or a background thread.

``prefetch_mode="auto"`` keeps in-memory data in the loop's thread (moves issued
``prefetch`` batches ahead) and reads stores in a background thread; both modes
yield exactly the batches of the plain Loader, resume at the same place, and
report which one ran.
"""

from __future__ import annotations

import threading
from typing import Any

import h5py
import numpy as np
import pytest

import looptoolkit.device._move as device_module
from looptoolkit import Loader

MODES = ["inline", "thread"]


def _random_data(rng: np.random.Generator, n: int) -> dict[str, Any]:
    return {
        "x": rng.standard_normal((n, 3)).astype(np.float32),
        "ids": np.arange(n, dtype=np.int64),
        "m": {"u": rng.integers(0, 255, (n, 2, 2), dtype=np.uint8)},
    }


def _as_lists(batches: list[Any]) -> list[Any]:
    return [
        (b["x"].dtype.name, b["x"].tolist(), b["ids"].tolist(), b["m"]["u"].tolist())
        for b in batches
    ]


def _kwargs(rng: np.random.Generator) -> dict[str, Any]:
    world = int(rng.integers(1, 4))
    return {
        "shuffle": [False, True, "grouped"][int(rng.integers(0, 3))],
        "seed": int(rng.integers(0, 1000)),
        "group_size": 8,
        "world_size": world,
        "rank": int(rng.integers(0, world)),
        "drop_last": bool(rng.integers(0, 2)),
    }


@pytest.mark.parametrize("trial", range(6))
def test_both_modes_yield_the_plain_loaders_batches(trial):
    rng = np.random.default_rng(trial)
    n, b = int(rng.integers(40, 120)), int(rng.integers(1, 17))
    data, kwargs = _random_data(rng, n), _kwargs(rng)
    # A cast makes the move real, so batches are issued ahead; without one the move is skipped.
    dtype = np.float64 if trial % 2 else None
    reference = Loader(data, b, device="cpu", dtype=dtype, prefetch=0, **kwargs)
    want = [_as_lists(list(reference)) for _ in range(2)]
    for mode in MODES:
        for prefetch in (1, 3):
            loader = Loader(
                data, b, device="cpu", dtype=dtype, prefetch=prefetch, prefetch_mode=mode, **kwargs
            )
            assert loader.prefetch_mode == mode
            assert [_as_lists(list(loader)) for _ in range(2)] == want, (mode, prefetch)
    if dtype is None:  # the plain Loader, no device at all
        assert _as_lists(list(Loader(data, b, **kwargs))) == want[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("trial", range(4))
def test_resume_at_a_random_batch_is_exact(mode, trial):
    rng = np.random.default_rng(100 + trial)
    n, b = int(rng.integers(40, 120)), int(rng.integers(1, 9))
    data, kwargs = _random_data(rng, n), _kwargs(rng)
    make = lambda: Loader(  # noqa: E731  # the same arguments twice
        data, b, device="cpu", dtype=np.float64, prefetch=2, prefetch_mode=mode, **kwargs
    )
    loader = make()
    everything = _as_lists(list(make()))
    stop = int(rng.integers(0, len(loader) + 1))
    it = iter(loader)
    head = [next(it) for _ in range(stop)]
    state = loader.state_dict()  # counts the batches handed out, not those issued ahead
    it.close()
    resumed = make()
    resumed.load_state_dict(state)
    assert _as_lists(head) + _as_lists(list(resumed)) == everything


def test_inline_mode_starts_no_thread_and_issues_moves_ahead():
    issued: list[int] = []

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        issued.append(int(batch["ids"][0]))  # the transform runs when a batch is issued
        return batch

    data = {"ids": np.arange(100, dtype=np.int64), "x": np.zeros((100, 2), np.float32)}
    baseline = threading.active_count()
    recorded = Loader(
        data, 10, shuffle=False, device="cpu", dtype=np.float64, prefetch=3, transform=transform
    )
    assert recorded.prefetch_mode == "inline"
    for k, batch in enumerate(recorded):
        assert threading.active_count() == baseline
        assert threading.current_thread() is threading.main_thread()
        # Batches k+1..k+3 were issued before batch k was handed out (the last ones excepted).
        assert len(issued) == min(k + 4, 10)
        assert int(batch["ids"][0]) == 10 * k


def test_a_move_that_keeps_every_leaf_is_skipped(monkeypatch):
    calls = {"n": 0}
    real = device_module._move_tree

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return real(*args, **kwargs)

    data = {"x": np.arange(40.0).reshape(20, 2), "y": np.arange(20)}
    kept = Loader(data, 5, device="cpu")
    cast = Loader(data, 5, device="cpu", dtype=np.float32)
    monkeypatch.setattr(device_module, "_move_tree", counting)
    assert [b["y"].tolist() for b in kept] == [b["y"].tolist() for b in Loader(data, 5)]
    assert calls["n"] == 0
    batches = list(cast)
    assert calls["n"] == len(cast) and batches[0]["x"].dtype == np.float32


def test_an_error_comes_after_the_batches_issued_before_it():
    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        if int(batch["ids"][0]) == 30:
            raise ValueError("bad batch")
        return batch

    data = {"ids": np.arange(100, dtype=np.int64)}
    for mode in MODES:
        loader = Loader(
            data,
            10,
            shuffle=False,
            device="cpu",
            dtype={np.int64: np.int32},
            prefetch=3,
            prefetch_mode=mode,
            transform=transform,
        )
        got = []
        with pytest.raises(ValueError, match="bad batch") as info:
            for batch in loader:
                got.append(int(batch["ids"][0]))
        assert got == [0, 10, 20], mode
        assert any("batch 3 of epoch 0" in note for note in info.value.__notes__)
        state = loader.state_dict()
        assert (state[Loader.EPOCH_KEY], state[Loader.OFFSET_KEY]) == (0, 0)


def test_the_thread_mode_runs_a_thread_and_stops_it():
    data = {"x": np.zeros((100, 2), np.float32)}
    loader = Loader(data, 10, device="cpu", prefetch=2, prefetch_mode="thread", stats=True)
    assert loader.prefetch_mode == loader.stats.prefetch_mode == "thread"
    names = []
    for i, _ in enumerate(loader):
        names = [t.name for t in threading.enumerate() if t.name.startswith("looptoolkit-loader")]
        if i == 2:
            break
    assert names == ["looptoolkit-loader-prefetch"]


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((200, 3)).astype(np.float32)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(20, 3), compression="gzip")
    with h5py.File(tmp_path / "d.h5", "r") as f:
        yield f, x


def test_stores_are_read_in_a_thread_unless_told_otherwise(store):
    f, x = store
    auto = Loader({"x": f["x"]}, 16, seed=4, stats=True)
    inline = Loader({"x": f["x"]}, 16, seed=4, prefetch_mode="inline")
    assert auto.prefetch_mode == auto.stats.prefetch_mode == "thread"
    assert inline.prefetch_mode == "inline"
    want = [x[idx].tolist() for idx in np.array_split(auto.indices(0), range(16, 200, 16))]
    for loader, threads in ((auto, 1), (inline, 0)):
        got = []
        for batch in loader:
            # (The process's thread for direct file reads, `looptoolkit-read`, is not a
            # pass's: it serves every pass that reads chunks straight from a file.)
            running = [t for t in threading.enumerate() if t.name.startswith("looptoolkit-loader")]
            assert len(running) == threads
            got.append(batch["x"].tolist())
        assert got == want


def test_stats_say_which_mode_ran():
    data = {"x": np.zeros((20, 2), np.float32)}
    for kwargs, mode in (
        ({}, "inline"),
        ({"device": "cpu"}, "inline"),
        ({"device": "cpu", "prefetch": 0}, "inline"),
        ({"device": "cpu", "prefetch_mode": "thread"}, "thread"),
    ):
        loader = Loader(data, 5, stats=True, **kwargs)
        list(loader)
        assert loader.stats.prefetch_mode == mode
        assert loader.stats.as_dict()["prefetch_mode"] == mode
        assert f"prefetch_mode={mode!r}" in repr(loader.stats)


def test_prefetch_mode_is_validated_and_echoed():
    data = {"x": np.zeros((20, 2), np.float32)}
    with pytest.raises(TypeError, match="`prefetch_mode` must be a str, got int"):
        Loader(data, 5, prefetch_mode=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`prefetch_mode` must be one of 'auto', 'thread'"):
        Loader(data, 5, prefetch_mode="background")
    with pytest.raises(ValueError, match="needs `prefetch >= 1`, got 0"):
        Loader(data, 5, prefetch=0, prefetch_mode="thread")
    assert "prefetch_mode='inline'" in repr(Loader(data, 5, prefetch_mode="inline"))
    assert "prefetch_mode='auto'" in repr(Loader(data, 5))
