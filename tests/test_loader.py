"""Loader: orders, alignment, sharding, resume, backends, prefetch threads, errors."""

from __future__ import annotations

import dataclasses
import gc
import json
import subprocess
import sys
import threading
import time
from collections import namedtuple
from typing import Any

import numpy as np
import optree
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import looptoolkit
from looptoolkit import tree as _tree
from looptoolkit.loader import Loader, LoaderStats
from looptoolkit.order import Order

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Pair = namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Sample:
    image: Any
    label: Any


# -- helpers -------------------------------------------------------------------------


def make_data(n: int, width: int = 3) -> dict[str, np.ndarray]:
    """Every leaf encodes the row index, so gathered rows can be checked for alignment."""
    return {
        "x": np.repeat(np.arange(n, dtype=np.float32)[:, None], width, axis=1),
        "y": np.arange(n, dtype=np.int64),
    }


def to_numpy(leaf: Any) -> np.ndarray:
    if isinstance(leaf, np.ndarray):
        return leaf
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(leaf, torch.Tensor):
        return leaf.detach().cpu().numpy()
    return np.asarray(leaf)


def rows_of(batch: Any) -> np.ndarray:
    """The row ids of a batch, checking that every leaf holds the same rows."""
    leaves = optree.tree_leaves(batch, namespace=_tree.NAMESPACE)
    ids = None
    for leaf in leaves:
        values = to_numpy(leaf)
        flat = values.reshape(len(values), -1)
        assert (flat == flat[:, :1]).all(), "a row mixes values of several samples"
        column = flat[:, 0].astype(np.int64)
        if ids is None:
            ids = column
        else:
            np.testing.assert_array_equal(column, ids, err_msg="leaves are not aligned")
    assert ids is not None
    return ids


def epoch_rows(loader: Any) -> list[np.ndarray]:
    return [rows_of(batch) for batch in loader]


def wait_for_threads(baseline: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while threading.active_count() > baseline and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return threading.active_count()


shuffles = st.sampled_from([False, True, "full", "grouped"])


# -- orders and alignment --------------------------------------------------------------


@SETTINGS
@given(
    n=st.integers(1, 300),
    batch_size=st.integers(1, 64),
    shuffle=shuffles,
    group_size=st.integers(1, 80),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
)
def test_every_index_once_per_epoch_rows_aligned(n, batch_size, shuffle, group_size, seed, epoch):
    loader = Loader(make_data(n), batch_size, shuffle=shuffle, group_size=group_size, seed=seed)
    loader.set_epoch(epoch)
    batches = epoch_rows(loader)
    assert len(batches) == len(loader) == -(-n // batch_size)
    assert all(len(b) == batch_size for b in batches[:-1])
    seen = np.concatenate(batches)
    np.testing.assert_array_equal(np.sort(seen), np.arange(n))
    np.testing.assert_array_equal(seen, loader.indices(epoch))
    order = Order(n, batch_size, shuffle=shuffle, group_size=group_size, seed=seed)
    np.testing.assert_array_equal(seen, order.global_order(epoch))


@SETTINGS
@given(
    n=st.integers(1, 200),
    batch_size=st.integers(1, 32),
    world_size=st.integers(1, 4),
    shuffle=shuffles,
    seed=st.integers(0, 1000),
    drop_last=st.booleans(),
)
def test_shards_have_equal_batches_and_cover_the_epoch(
    n, batch_size, world_size, shuffle, seed, drop_last
):
    if drop_last and n // world_size < batch_size:  # every epoch would be empty
        with pytest.raises(ValueError, match="drops every batch"):
            Loader(make_data(n), batch_size, world_size=world_size, rank=0, drop_last=True)
        return
    per_rank = []
    for rank in range(world_size):
        loader = Loader(
            make_data(n),
            batch_size,
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
        )
        batches = epoch_rows(loader)
        assert len(batches) == len(loader)
        order = Order(
            n, batch_size, shuffle=shuffle, seed=seed, rank=rank,
            world_size=world_size, drop_last=drop_last,
        )  # fmt: skip
        expected = list(order.epoch(0))
        assert len(batches) == len(expected)
        for got, want in zip(batches, expected, strict=True):
            np.testing.assert_array_equal(got, want)
        per_rank.append(batches)
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1, "ranks got different numbers of batches"
    for k in range(counts.pop()):
        assert len({len(b[k]) for b in per_rank}) == 1, "batch sizes differ across ranks"
    seen = np.concatenate([np.concatenate(b) for b in per_rank if b] or [np.zeros(0, int)])
    if drop_last:
        assert len(set(seen.tolist())) == len(seen)  # no padding duplicates
        assert all(len(batch) == batch_size for b in per_rank for batch in b)
    else:
        assert set(seen.tolist()) == set(range(n))
        assert len(seen) == -(-n // world_size) * world_size


@SETTINGS
@given(n=st.integers(1, 100), batch_size=st.integers(1, 16), shuffle=shuffles)
def test_drop_last_and_len(n, batch_size, shuffle):
    if n < batch_size:  # every epoch would be empty
        with pytest.raises(ValueError, match="drops every batch"):
            Loader(make_data(n), batch_size, shuffle=shuffle, drop_last=True)
        return
    loader = Loader(make_data(n), batch_size, shuffle=shuffle, drop_last=True)
    batches = epoch_rows(loader)
    assert len(batches) == len(loader) == n // batch_size
    assert all(len(b) == batch_size for b in batches)


def test_epochs_advance_and_set_epoch_fixes_the_next():
    loader = Loader(make_data(50), 8, seed=3)
    first, second = np.concatenate(epoch_rows(loader)), np.concatenate(epoch_rows(loader))
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(second, loader.indices(1))
    loader.set_epoch(0)
    np.testing.assert_array_equal(np.concatenate(epoch_rows(loader)), first)
    loader.set_epoch(7)
    np.testing.assert_array_equal(np.concatenate(epoch_rows(loader)), loader.indices(7))


def test_sequential_and_iterator_len():
    loader = Loader(make_data(10), 4, shuffle=False)
    it = iter(loader)
    assert len(it) == 3
    np.testing.assert_array_equal(rows_of(next(it)), [0, 1, 2, 3])
    assert len(it) == 2
    assert [r.tolist() for r in map(rows_of, it)] == [[4, 5, 6, 7], [8, 9]]
    assert len(it) == 0


def test_grouped_batches_change_between_epochs():
    loader = Loader(make_data(4000), 100, shuffle="grouped", group_size=400, seed=0)
    a = {frozenset(b.tolist()) for b in epoch_rows(loader)}
    b = {frozenset(b.tolist()) for b in epoch_rows(loader)}
    assert not a & b


# -- resume --------------------------------------------------------------------------


@SETTINGS
@given(
    n=st.integers(1, 200),
    batch_size=st.integers(1, 32),
    shuffle=shuffles,
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 3),
    world_size=st.integers(1, 3),
    consumed=st.integers(0, 40),
    drop_last=st.booleans(),
)
def test_resume_yields_exactly_the_rest(
    n, batch_size, shuffle, seed, epoch, world_size, consumed, drop_last
):
    def make(rank: int) -> Loader:
        return Loader(
            make_data(n), batch_size, shuffle=shuffle, seed=seed, rank=rank,
            world_size=world_size, drop_last=drop_last, group_size=16,
        )  # fmt: skip

    if drop_last and n // world_size < batch_size:  # every epoch would be empty
        with pytest.raises(ValueError, match="drops every batch"):
            make(0)
        return
    for rank in range(world_size):
        full = make(rank)
        full.set_epoch(epoch)
        expected = epoch_rows(full)
        k = min(consumed, len(expected))
        loader = make(rank)
        loader.set_epoch(epoch)
        it = iter(loader)
        for _ in range(k):
            next(it)
        state = loader.state_dict()
        assert json.loads(json.dumps(state)) == state  # plain data, checkpointable
        resumed = make(rank)
        resumed.load_state_dict(state)
        if k == len(expected):  # a finished epoch points at the next one
            assert state[Loader.EPOCH_KEY] == epoch + 1
            assert state[Loader.OFFSET_KEY] == 0
            continue
        rest = epoch_rows(resumed)
        assert len(rest) == len(expected) - k
        for got, want in zip(rest, expected[k:], strict=True):
            np.testing.assert_array_equal(got, want)
        # The epoch after the resumed one is a whole epoch.
        full.set_epoch(epoch + 1)
        np.testing.assert_array_equal(
            np.concatenate(epoch_rows(resumed)), np.concatenate(epoch_rows(full))
        )


def test_state_dict_counts_consumed_not_prefetched_batches():
    # A transform counts the batches the background thread has prepared: the state
    # is read only once it has run ahead (four queued behind the two handed out).
    ahead = threading.Event()
    prepared = {"n": 0}

    def count(batch: Any) -> Any:
        prepared["n"] += 1
        if prepared["n"] >= 6:
            ahead.set()
        return batch

    loader = Loader(
        make_data(100), 10, device="cpu", prefetch=4, prefetch_mode="thread", transform=count
    )
    it = iter(loader)
    next(it)
    next(it)
    assert ahead.wait(10), "the background thread did not run ahead"
    state = loader.state_dict()
    assert state[Loader.EPOCH_KEY] == 0 and state[Loader.OFFSET_KEY] == 20
    it.close()
    resumed = Loader(make_data(100), 10)
    resumed.load_state_dict(state)
    np.testing.assert_array_equal(np.concatenate(epoch_rows(resumed)), loader.indices(0)[20:])


def test_resume_at_another_world_size_covers_the_rest():
    n, b = 103, 5
    # Two ranks consume 4 batches each, then the job restarts with three ranks.
    old = [Loader(make_data(n), b, seed=9, rank=r, world_size=2) for r in range(2)]
    consumed = []
    running = [iter(loader) for loader in old]  # the passes still run when the states are taken
    for it in running:
        consumed += [rows_of(next(it)) for _ in range(4)]
    state = old[0].state_dict()
    assert state == old[1].state_dict()
    assert state[Loader.OFFSET_KEY] == 4 * b * 2
    rest = []
    for r in range(3):
        new = Loader(make_data(n), b, seed=9, rank=r, world_size=3)
        # 40 is not a multiple of 3: load_state_dict says so.
        with pytest.raises(ValueError, match="multiple of `world_size` 3"):
            new.load_state_dict(state)
    state = {**state, Loader.OFFSET_KEY: 4 * b * 2}
    for r in range(4):
        new = Loader(make_data(n), b, seed=9, rank=r, world_size=4)
        new.load_state_dict(state)
        rest += epoch_rows(new)
    seen = set(np.concatenate(consumed).tolist()) | set(np.concatenate(rest).tolist())
    assert seen == set(range(n))
    remaining = Order(n, b, seed=9).global_order(0)[40:]
    assert set(np.concatenate(rest).tolist()) >= set(remaining.tolist())


def test_load_state_dict_checks_the_state():
    loader = Loader(make_data(20), 4, seed=1)
    state = loader.state_dict()
    other = Loader(make_data(20), 4, seed=2)
    with pytest.raises(ValueError, match=r"`seed` 1 \(this loader: 2\)"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="missing 'offset'"):
        loader.load_state_dict({k: v for k, v in state.items() if k != Loader.OFFSET_KEY})
    with pytest.raises(ValueError, match="`offset` must be <="):
        loader.load_state_dict({**state, Loader.OFFSET_KEY: 10_000})
    # set_epoch to the loaded epoch keeps the position; another epoch starts it afresh.
    loader.load_state_dict({**state, Loader.EPOCH_KEY: 2, Loader.OFFSET_KEY: 8})
    loader.set_epoch(2)
    assert np.concatenate(epoch_rows(loader)).tolist() == loader.indices(2)[8:].tolist()
    loader.load_state_dict({**state, Loader.EPOCH_KEY: 2, Loader.OFFSET_KEY: 8})
    loader.set_epoch(3)
    assert np.concatenate(epoch_rows(loader)).tolist() == loader.indices(3).tolist()


# -- data kinds ------------------------------------------------------------------------


def test_nested_dict_namedtuple_dataclass():
    n = 37
    base = make_data(n)
    data = {
        "inputs": [Pair(base["x"], base["y"] * 1.0), base["y"].reshape(n, 1, 1)],
        "sample": Sample(image=base["x"].reshape(n, 3, 1), label=base["y"]),
    }
    loader = Loader(data, 8, seed=4)
    batches = list(loader)
    first = batches[0]
    assert isinstance(first["inputs"][0], Pair)
    assert isinstance(first["sample"], Sample)
    assert first["sample"].image.shape == (8, 3, 1)
    seen = np.concatenate([rows_of(b) for b in batches])
    np.testing.assert_array_equal(seen, loader.indices(0))


def test_memmap_data(tmp_path):
    n = 64
    path = tmp_path / "x.npy"
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, 4))
    x[:] = np.arange(n, dtype=np.float32)[:, None]
    x.flush()
    data = {"x": np.load(path, mmap_mode="r"), "y": np.arange(n)}
    assert isinstance(data["x"], np.memmap)
    loader = Loader(data, 10, seed=2)
    batches = list(loader)
    assert all(type(b["x"]) is np.ndarray for b in batches)
    np.testing.assert_array_equal(np.concatenate([rows_of(b) for b in batches]), loader.indices(0))


def test_mixed_backends_in_one_pytree():
    torch = pytest.importorskip("torch")
    base = make_data(30)
    data = {"x": torch.from_numpy(base["x"]), "y": base["y"]}
    loader = Loader(data, 7, seed=5)
    batches = list(loader)
    assert isinstance(batches[0]["x"], torch.Tensor)
    assert isinstance(batches[0]["y"], np.ndarray)
    np.testing.assert_array_equal(np.concatenate([rows_of(b) for b in batches]), loader.indices(0))


@SETTINGS
@given(
    n=st.integers(1, 120),
    batch_size=st.integers(1, 20),
    shuffle=shuffles,
    seed=st.integers(0, 100),
    world_size=st.integers(1, 3),
)
def test_torch_data_same_order_as_numpy(n, batch_size, shuffle, seed, world_size):
    torch = pytest.importorskip("torch")
    base = make_data(n)
    tdata = {k: torch.from_numpy(v) for k, v in base.items()}
    for rank in range(world_size):
        kwargs = dict(shuffle=shuffle, seed=seed, rank=rank, world_size=world_size)
        a = list(Loader(base, batch_size, **kwargs))
        b = list(Loader(tdata, batch_size, **kwargs))
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert isinstance(y["x"], torch.Tensor) and y["x"].dtype == torch.float32
            np.testing.assert_array_equal(rows_of(x), rows_of(y))


def test_torch_data_bfloat16_and_non_numpy_dtypes():
    torch = pytest.importorskip("torch")
    n = 20
    data = {
        "x": torch.arange(n, dtype=torch.bfloat16)[:, None].repeat(1, 3),
        "y": torch.arange(n),
    }
    batches = list(Loader(data, 6, seed=1))
    assert batches[0]["x"].dtype == torch.bfloat16
    for batch in batches:
        np.testing.assert_array_equal(batch["x"][:, 0].float().numpy(), batch["y"].numpy())


@pytest.mark.parametrize("shuffle", [False, "full", "grouped"])
def test_jax_data_same_order_as_numpy(shuffle):
    jax = pytest.importorskip("jax")
    base = make_data(53)
    jdata = {k: jax.numpy.asarray(v) for k, v in base.items()}
    for world_size, rank in [(1, 0), (2, 1)]:
        kwargs = dict(shuffle=shuffle, seed=11, rank=rank, world_size=world_size)
        a = list(Loader(base, 8, group_size=10, **kwargs))
        b = list(Loader(jdata, 8, group_size=10, **kwargs))
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert isinstance(y["x"], jax.Array)
            np.testing.assert_array_equal(rows_of(x), rows_of(y))


def test_jax_resident_and_accelerator_path():
    jax = pytest.importorskip("jax")
    base = make_data(70)
    cpu = jax.devices("cpu")[0]
    expected = epoch_rows(Loader(base, 4, seed=2))
    resident = Loader(base, 4, seed=2, device=cpu, resident=True)
    got = list(resident)
    assert isinstance(got[0]["x"], jax.Array)
    for batch, want in zip(got, expected, strict=True):
        np.testing.assert_array_equal(rows_of(batch), want)
    # The accelerator path (16 batches per transfer and dispatch), run on the CPU.
    from looptoolkit.adapters import jax as jax_adapter

    leaves = [jax.numpy.asarray(base["x"]), jax.numpy.asarray(base["y"])]
    batches = list(jax_adapter._take_on_device(leaves, iter(Order(70, 4, seed=2).epoch(0)), cpu))
    assert len(batches) == len(expected) > jax_adapter._CHUNK
    for batch, want in zip(batches, expected, strict=True):
        np.testing.assert_array_equal(rows_of(batch), want)


def test_tf_data_same_order_as_numpy():
    tf = pytest.importorskip("tensorflow")
    base = make_data(41)
    tdata = {k: tf.constant(v) for k, v in base.items()}
    for shuffle in (False, "full", "grouped"):
        a = list(Loader(base, 6, shuffle=shuffle, seed=3, group_size=7))
        b = list(Loader(tdata, 6, shuffle=shuffle, seed=3, group_size=7))
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert isinstance(y["x"], tf.Tensor)
            np.testing.assert_array_equal(rows_of(x), rows_of(y))


def test_tensordict_data():
    torch = pytest.importorskip("torch")
    tensordict = pytest.importorskip("tensordict")
    n = 23
    base = make_data(n)
    td = tensordict.TensorDict(
        {
            "x": torch.from_numpy(base["x"]),
            "inner": tensordict.TensorDict({"y": torch.from_numpy(base["y"])}, batch_size=[n]),
        },
        batch_size=[n],
    )
    loader = Loader(td, 5, seed=6)
    batches = list(loader)
    assert all(isinstance(b, tensordict.TensorDict) for b in batches)
    assert [tuple(b.batch_size) for b in batches] == [(5,)] * 4 + [(3,)]
    assert tuple(batches[0]["inner"].batch_size) == (5,)
    seen = np.concatenate([rows_of(b) for b in batches])
    np.testing.assert_array_equal(seen, loader.indices(0))
    # Moved (to "cpu"), in the background thread, too.
    moved = list(Loader({"td": td}, 5, seed=6, device="cpu"))
    assert isinstance(moved[0]["td"], tensordict.TensorDict)
    np.testing.assert_array_equal(np.concatenate([rows_of(b) for b in moved]), seen)


# -- device, prefetch and threads ------------------------------------------------------


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_prefetch_on_cpu_yields_the_same_batches(framework):
    data: Any = make_data(97)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        data = {k: torch.from_numpy(v) for k, v in data.items()}
    plain = epoch_rows(Loader(data, 10, seed=8))
    for prefetch in (0, 1, 3):
        loader = Loader(data, 10, seed=8, device="cpu", prefetch=prefetch)
        got = list(loader)
        assert type(got[0]["x"]) is type(data["x"])
        assert [r.tolist() for r in map(rows_of, got)] == [r.tolist() for r in plain]


def test_resident_and_dtype_on_cpu():
    data = make_data(31)
    loader = Loader(data, 8, seed=1, device="cpu", resident=True, dtype=np.float16)
    batches = list(loader)
    assert batches[0]["x"].dtype == np.float16 and batches[0]["y"].dtype == np.int64
    np.testing.assert_array_equal(np.concatenate([rows_of(b) for b in batches]), loader.indices(0))
    cast = list(Loader(data, 8, seed=1, device="cpu", dtype=np.float16, prefetch=0))
    assert cast[0]["x"].dtype == np.float16


def test_no_thread_without_device():
    baseline = threading.active_count()
    loader = Loader(make_data(100), 10)
    for _ in loader:
        assert threading.active_count() == baseline


def test_break_stops_the_background_thread():
    baseline = threading.active_count()
    loader = Loader(make_data(1000), 10, device="cpu", prefetch=2, prefetch_mode="thread")
    for i, _ in enumerate(loader):
        if i == 0:
            assert threading.active_count() == baseline + 1
        if i == 3:
            break
    assert wait_for_threads(baseline) == baseline


def test_exception_in_the_loop_stops_the_background_thread():
    baseline = threading.active_count()
    loader = Loader(make_data(1000), 10, device="cpu", prefetch=2, prefetch_mode="thread")

    def run() -> None:
        for i, _ in enumerate(loader):
            if i == 2:
                raise KeyError("user error")

    with pytest.raises(KeyError, match="user error"):
        run()
    assert wait_for_threads(baseline) == baseline


def test_abandoned_iterator_stops_the_background_thread():
    baseline = threading.active_count()
    loader = Loader(make_data(1000), 10, device="cpu", prefetch=2, prefetch_mode="thread")
    it = iter(loader)
    next(it)
    cycle: list[Any] = [it]
    cycle.append(cycle)  # only the garbage collector can free it
    del it, cycle
    assert wait_for_threads(baseline) == baseline
    # A new iteration after an abandoned one is the next epoch and works.
    assert len(list(loader)) == len(loader)
    assert wait_for_threads(baseline) == baseline


def test_close_and_full_epoch_stop_the_background_thread():
    baseline = threading.active_count()
    loader = Loader(make_data(100), 10, device="cpu", prefetch=1, prefetch_mode="thread")
    it = iter(loader)
    next(it)
    it.close()
    assert wait_for_threads(baseline) == baseline
    assert list(it) == []
    list(loader)
    assert wait_for_threads(baseline) == baseline


def test_background_exception_is_raised_in_the_consumer(monkeypatch):
    import looptoolkit.device._move as device_module  # every batch moves through its _move_tree

    baseline = threading.active_count()
    # A cast makes the move real: a move that keeps every leaf as it is is skipped.
    loader = Loader(
        make_data(100), 10, device="cpu", dtype=np.float64, prefetch=2, prefetch_mode="thread"
    )
    real = device_module._move_tree
    calls = {"n": 0}

    def failing(tree: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise looptoolkit.TransferError("cannot move batch['x']: boom", "batch['x']")
        return real(tree, *args, **kwargs)

    monkeypatch.setattr(device_module, "_move_tree", failing)
    got = []
    with pytest.raises(looptoolkit.TransferError, match="background thread") as info:
        for batch in loader:
            got.append(batch)
    assert len(got) == 2
    assert isinstance(info.value.__cause__, looptoolkit.TransferError)
    assert "boom" in str(info.value) and info.value.path == "batch['x']"
    assert wait_for_threads(baseline) == baseline


def test_background_exception_of_an_unusual_type_keeps_its_type(monkeypatch):
    import looptoolkit.device._move as device_module  # every batch moves through its _move_tree

    class Odd(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(a, b)

    loader = Loader(make_data(30), 10, device="cpu", dtype=np.float64, prefetch_mode="thread")

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise Odd(1, 2)

    monkeypatch.setattr(device_module, "_move_tree", failing)
    with pytest.raises(Odd, match=r"looptoolkit\.Loader's background thread") as info:
        list(loader)
    assert info.value.args == (1, 2) and type(info.value.__cause__) is Odd


def test_absent_device_fails_at_construction():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(looptoolkit.TransferError, match="CUDA"):
        Loader(make_data(10), 2, device="cuda")


def test_stats():
    loader = Loader(make_data(50), 10, stats=True)
    assert isinstance(loader.stats, LoaderStats)
    for _ in loader:
        time.sleep(0.002)
    stats = loader.stats
    assert stats.batches == 5
    assert stats.step_s >= 0.009
    assert 0 < stats.data_wait_fraction < 1
    assert set(stats.as_dict()) == {
        "batches",
        "wait_s",
        "step_s",
        "data_wait_fraction",
        "prefetch_mode",
    }
    stats.reset()
    assert stats.batches == 0 and stats.data_wait_fraction == 0
    with pytest.raises(ValueError, match="`stats` is off"):
        _ = Loader(make_data(5), 2).stats


def test_repr_echoes_arguments():
    text = repr(Loader(make_data(12), 3, shuffle="grouped", group_size=4, seed=5))
    assert text.startswith("Loader(<2 numpy leaves of 12 rows>, batch_size=3")
    assert "shuffle='grouped'" in text and "group_size=4" in text and "seed=5" in text


# -- bad arguments -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "kwargs", "error", "message"),
    [
        ({"x": np.zeros(10), "y": np.zeros(9)}, {}, ValueError,
         r"data\['x'\] has 10 rows and data\['y'\] has 9"),
        ({"a": [np.zeros(4), np.zeros((5, 2))]}, {}, ValueError,
         r"data\['a'\]\[0\] has 4 rows and data\['a'\]\[1\] has 5"),
        ({}, {}, ValueError, "at least one array, got an empty pytree"),
        ([], {}, ValueError, "at least one array, got an empty pytree"),
        ({"x": np.zeros(3), "s": "text"}, {}, TypeError, r"data\['s'\] is a builtins.str"),
        ({"x": np.zeros(3), "n": None}, {}, TypeError, r"data\['n'\] is a builtins.NoneType"),
        ({"x": np.array(1.0)}, {}, ValueError, r"data\['x'\] is 0-d"),
        ({"x": np.zeros((0, 2))}, {}, ValueError, "at least one row"),
        (None, {"batch_size": 0}, ValueError, r"`batch_size` must be >= 1, got 0\."),
        (None, {"batch_size": 2.0}, TypeError, "`batch_size` must be an int"),
        (None, {"shuffle": "random"}, ValueError, "`shuffle` must be"),
        (None, {"shuffle": 1.5}, TypeError, "`shuffle` must be"),
        (None, {"group_size": 0}, ValueError, r"`group_size` must be >= 1, got 0\."),
        (None, {"rank": 2, "world_size": 2}, ValueError, r"`rank` must be in \[0, world_size\)"),
        (None, {"rank": 0}, ValueError, "both be given"),
        (None, {"prefetch": -1}, ValueError, r"`prefetch` must be >= 0, got -1\."),
        (None, {"resident": True}, ValueError, "`resident` needs a `device`"),
        (None, {"dtype": np.float16}, ValueError, "`dtype` needs a `device`"),
        (None, {"non_blocking": True}, ValueError, "`non_blocking` needs a `device`"),
        (None, {"device": "nonsense"}, ValueError, "not a known device"),
        (None, {"device": "cpu", "dtype": "nonsense"}, TypeError, "not a dtype"),
    ],
)  # fmt: skip
def test_bad_arguments_raise_at_construction(data, kwargs, error, message):
    kwargs = {"batch_size": 2, **kwargs}
    with pytest.raises(error, match=message):
        Loader(make_data(6) if data is None else data, kwargs.pop("batch_size"), **kwargs)


def test_set_epoch_checks_its_argument():
    loader = Loader(make_data(4), 2)
    with pytest.raises(ValueError, match=r"`epoch` must be >= 0, got -1\."):
        loader.set_epoch(-1)
    with pytest.raises(TypeError, match="`epoch` must be an int"):
        loader.set_epoch(1.0)  # type: ignore[arg-type]


def test_import_loader_imports_no_framework():
    code = (
        "import sys, json, numpy as np, looptoolkit, looptoolkit.loader\n"
        "loader = looptoolkit.Loader({'x': np.arange(10)}, 3, stats=True)\n"
        "assert sum(len(b['x']) for b in loader) == 10\n"
        "print(json.dumps([m for m in ('torch', 'jax', 'tensorflow', 'tensordict') "
        "if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", code],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout) == []


@SETTINGS
@given(
    n=st.integers(1, 60),
    batch_size=st.integers(1, 9),
    world_size=st.integers(1, 4),
    consumed=st.integers(0, 5),
)
def test_return_mask_marks_padding(n, batch_size, world_size, consumed):
    real = []
    for rank in range(world_size):
        loader = Loader(
            make_data(n), batch_size, seed=1, rank=rank, world_size=world_size, return_mask=True
        )
        pairs = list(loader)
        assert len(pairs) == len(loader)
        for batch, mask in pairs:
            assert mask.dtype == np.bool_ and mask.shape == (len(batch["y"]),)
            real += batch["y"][mask].tolist()
        # Resumed: the masks follow the remaining batches.
        loader = Loader(
            make_data(n), batch_size, seed=1, rank=rank, world_size=world_size, return_mask=True
        )
        it = iter(loader)
        for _ in range(min(consumed, len(loader))):
            next(it)
        resumed = Loader(
            make_data(n), batch_size, seed=1, rank=rank, world_size=world_size, return_mask=True
        )
        resumed.load_state_dict(loader.state_dict())
        if min(consumed, len(loader)) < len(loader):
            for (_, want), (_, got) in zip(pairs[consumed:], resumed, strict=True):
                np.testing.assert_array_equal(got, want)
    assert sorted(real) == list(range(n))


def test_absent_device_names_the_data_leaf_at_construction():
    import looptoolkit as lt

    with pytest.raises(lt.TransferError, match=r"data\['y'\].*cpu:5"):
        Loader({"y": np.arange(8)}, 4, device="cpu:5")


# -- CUDA paths (skipped without a GPU; run with `pytest -m cuda` on a GPU machine) ---


def _cuda_data(n: int = 1000):
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((n, 8)).astype(np.float32),
        "im": rng.integers(0, 255, (n, 3, 4, 4), dtype=np.uint8),
        "idx": np.arange(n),
    }


def _host_batches(data, **kwargs):
    return [{k: np.asarray(v) for k, v in b.items()} for b in Loader(data, 64, seed=5, **kwargs)]


@pytest.mark.cuda
@pytest.mark.parametrize("prefetch", [0, 2])
def test_cuda_prefetch_yields_the_host_batches_on_the_device(cuda, prefetch):
    torch = pytest.importorskip("torch")
    data = _cuda_data()
    want = _host_batches(data)
    loader = Loader(data, 64, seed=5, device=cuda, prefetch=prefetch)
    got = list(loader)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g["x"].device.type == "cuda" and g["im"].dtype == torch.uint8
        for key in w:
            np.testing.assert_array_equal(g[key].cpu().numpy(), w[key])


@pytest.mark.cuda
def test_cuda_prefetch_casts_uint8_on_the_device(cuda):
    torch = pytest.importorskip("torch")
    data = _cuda_data()
    want = _host_batches(data)
    loader = Loader(data, 64, seed=5, device=cuda, dtype={np.uint8: np.float16})
    for g, w in zip(loader, want, strict=True):
        assert g["im"].dtype == torch.float16 and g["im"].device.type == "cuda"
        np.testing.assert_array_equal(g["im"].cpu().numpy(), w["im"].astype(np.float16))


@pytest.mark.cuda
def test_cuda_resident_loader_gathers_on_the_device(cuda):
    data = _cuda_data()
    want = _host_batches(data)
    loader = Loader(data, 64, seed=5, device=cuda, resident=True)
    for epoch in range(2):
        got = list(loader)
        expected = want if epoch == 0 else _host_batches_epoch(data, 1)
        for g, w in zip(got, expected, strict=True):
            assert g["x"].device.type == "cuda"
            for key in w:
                np.testing.assert_array_equal(g[key].cpu().numpy(), w[key])


def _host_batches_epoch(data, epoch):
    loader = Loader(data, 64, seed=5)
    loader.set_epoch(epoch)
    return [{k: np.asarray(v) for k, v in b.items()} for b in loader]


@pytest.mark.cuda
def test_cuda_break_in_prefetch_leaves_no_thread(cuda):
    import threading
    import time

    before = threading.active_count()
    loader = Loader(_cuda_data(), 64, device=cuda, prefetch=3)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before


@pytest.mark.cuda
def test_cuda_jax_device_put_to_the_gpu(cuda):
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax has no GPU")
    data = _cuda_data()
    want = _host_batches(data)
    for g, w in zip(Loader(data, 64, seed=5, device=gpus[0]), want, strict=True):
        assert g["x"].devices() == {gpus[0]}
        for key in w:
            np.testing.assert_array_equal(np.asarray(g[key]), w[key])


def test_the_loader_takes_rank_and_world_size_from_a_loaded_process_group(monkeypatch):
    # A stand-in for a loaded framework with a process group; the real one (torch
    # with gloo ranks) is exercised in tests/test_distributed.py.
    from looptoolkit.adapters import BackendBase, _registry

    group: list[tuple[int, int] | None] = [(1, 2)]

    class Grouped(BackendBase):
        def is_array(self, x: object) -> bool:
            return False

        def process_group(self) -> tuple[int, int] | None:
            return group[0]

    backend = Grouped()
    monkeypatch.setattr(_registry, "loaded_backends", lambda: [backend])
    data = np.arange(8)
    loader = Loader(data, 2, shuffle=False)
    assert (loader.rank, loader.world_size) == (1, 2)
    np.testing.assert_array_equal(loader.indices(0), [1, 3, 5, 7])
    explicit = Loader(data, 2, shuffle=False, rank=0, world_size=1)
    assert (explicit.rank, explicit.world_size) == (0, 1)  # explicit values win
    group[0] = None
    assert Loader(data, 2, shuffle=False).world_size == 1
