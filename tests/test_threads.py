"""Many threads at once: to_device on container types never seen before, Loader iteration.

The interpreter is told to switch threads as often as it can, so that the
windows between flattening and registering a type, or between reading and
bumping the epoch counter, are hit; every check is an exact count.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader, to_device

THREADS = 8


@pytest.fixture(autouse=True)
def switch_often() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _run(n: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` in ``n`` threads released together; their results, or their exceptions."""
    start = threading.Barrier(n)
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = work(i)
        except BaseException as e:  # reported by the caller with the others
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _fresh_types() -> list[Callable[[Any], Any]]:
    """Container types made now, so that no thread has met them yet."""

    @dataclasses.dataclass
    class Fields:
        x: Any

    class Items(dict):  # a dict subclass without its own constructor
        pass

    class Sequence(list):
        pass

    return [Fields, lambda x: Items(x=x), lambda x: Sequence([x])]


def _leaf_of(out: Any) -> Any:
    if isinstance(out, dict):
        return out["x"]
    if isinstance(out, list):
        return out[0]
    return out.x


def test_to_device_from_many_threads_on_container_types_never_seen():
    unmoved = 0
    for _ in range(12):
        for make in _fresh_types():

            def move(i: int, make: Callable[[Any], Any] = make) -> Any:
                return to_device({"c": make(np.full(3, i, np.float64))}, "cpu", dtype=np.float32)

            for i, out in enumerate(_run(THREADS, move)):
                assert not isinstance(out, BaseException), out
                leaf = _leaf_of(out["c"])
                unmoved += leaf.dtype != np.float32
                np.testing.assert_array_equal(leaf, np.full(3, i))
    assert unmoved == 0


def test_one_loader_iterated_from_many_threads_runs_whole_epochs_in_order():
    data = {"x": np.arange(40, dtype=np.float32).reshape(20, 2), "y": np.arange(20)}
    loader = Loader(data, 6, seed=7)
    attempts = 6

    def epochs(_: int) -> list[tuple[int, np.ndarray]]:
        done: list[tuple[int, np.ndarray]] = []
        for _ in range(attempts):
            iterator = iter(loader)  # never refused: passes are independent
            rows = np.concatenate([b["y"] for b in iterator])
            assert iterator._progress is not None
            done.append((iterator._progress.epoch, rows))
        return done

    results = _run(4, epochs)
    seen: set[int] = set()
    for result in results:
        assert not isinstance(result, BaseException), result
        for epoch, rows in result:  # each pass a whole epoch, the one it bound
            np.testing.assert_array_equal(rows, loader.indices(epoch))
            seen.add(epoch)
    # The cursor moved one epoch at a time, each time a pass of it finished.
    final = loader.state_dict()[Loader.EPOCH_KEY]
    assert seen == set(range(final)) and final >= attempts


def test_loaders_over_shared_data_in_many_threads_with_prefetch():
    data = {"x": np.arange(300, dtype=np.float64).reshape(100, 3), "y": np.arange(100)}

    def batches(i: int) -> list[np.ndarray]:
        loader = Loader(data, 16, seed=i, device="cpu", prefetch=2, dtype=np.float32)
        out = []
        for batch in loader:
            assert batch["x"].dtype == np.float32
            np.testing.assert_array_equal(batch["x"][:, 0], batch["y"] * 3)
            out.append(batch["y"])
        return out

    for i, result in enumerate(_run(THREADS, batches)):
        assert not isinstance(result, BaseException), result
        want = Loader(data, 16, seed=i).indices(0)
        np.testing.assert_array_equal(np.concatenate(result), want)


def test_threads_starting_one_loader_together_each_get_epoch_zero():
    loader = Loader({"y": np.arange(20)}, 4)
    results = _run(THREADS, lambda _: next(iter(loader))["y"])
    for result in results:
        assert not isinstance(result, BaseException), result
        np.testing.assert_array_equal(result, loader.indices(0)[:4])
    assert loader.state_dict()[Loader.EPOCH_KEY] == 0  # no pass finished
