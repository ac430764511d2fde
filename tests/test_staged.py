"""The Loader's staged-upload path (the one torch on CUDA takes), run on the CPU.

A backend may offer a ``Stager`` (``Backend.stager``): it gathers some leaves
into its own buffers, the moves and the transform run inside its context (on
CUDA: the side stream), each batch gets a token, and the consumer waits on the
token before the batch is handed out. A stager that stages NumPy leaves on the
host exercises the same pipeline without a GPU. Like ``CudaStager``, it can
yield views of its reused buffers (``views=True``): then only the move's copy
makes a batch its own, as on a GPU.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pytest

import looptoolkit.loader as loader_module
from looptoolkit import Loader
from looptoolkit.adapters import BACKENDS, DEVICE_HOMES, BackendBase, _registry, register_backend


class HostStager:
    """Stages the leaves at ``positions`` into reused buffers; records what happens."""

    def __init__(
        self,
        leaves: list[Any],
        positions: list[int],
        batch_size: int,
        slots: int,
        views: bool = False,
    ):
        self.positions = positions
        self.moved = False  # the move copies the staged leaves
        self.yields_views = views
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
            if self.yields_views:  # as CudaStager: the move's copy makes them the batch's own
                yield [buf[: len(idx)] for buf in out]
            else:  # copies, as a device copy would be: the buffers are reused
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

    def stager_for(rows, batch_size, plan, depth):
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

    def stager_for(rows, b, plan, depth):
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


class Device:
    """An array "on the device" of the toy framework below: a copy of its rows."""

    def __init__(self, values: Any) -> None:
        self.values = np.array(values)  # always a copy: what a device copy makes


class SlottedBackend(BackendBase):
    """A toy accelerator whose staged upload yields views of reused slots (as CUDA's does)."""

    name = "slotted"

    def __init__(self) -> None:
        self.made: list[HostStager] = []

    def is_array(self, x: object) -> bool:
        return isinstance(x, Device)

    def dtype_name(self, x: Device) -> str:
        return x.values.dtype.name

    def take(self, leaves: Any, idx: np.ndarray) -> list[Device]:
        return [Device(leaf.values[idx]) for leaf in leaves]

    def take_batches(self, leaves: Any, batches: Any) -> Any:
        return (self.take(leaves, idx) for idx in batches)

    def stack(self, leaves: Any) -> Device:
        return Device(np.stack([leaf.values for leaf in leaves]))

    def move(self, leaves: Any, target: Any, non_blocking: Any, pack: Any) -> list[Device]:
        return [Device(getattr(leaf, "values", leaf)) for leaf in leaves]

    def cast(self, x: Any, name: str) -> Device:
        return Device(np.asarray(getattr(x, "values", x)).astype(name))

    def constant(self, values: np.ndarray, like: Any) -> Device:
        return Device(values)

    def synchronize(self, target: Any = None) -> None:
        pass

    def resolve_device(self, target: Any) -> str:
        return str(target.spec)

    def stager(self, leaves: Any, batch_size: int, target: Any, slots: int) -> HostStager | None:
        # Every NumPy leaf it is offered, as CudaStager stages every leaf torch can wrap.
        positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, np.ndarray)]
        if not positions:
            return None
        self.made.append(HostStager(list(leaves), positions, batch_size, slots, views=True))
        return self.made[-1]


@pytest.fixture
def slotted(monkeypatch):
    """The toy accelerator, registered under the device name "slot"; the registry restored after."""
    framework = types.ModuleType("slotted_framework")
    adapter = types.ModuleType("slotted_adapter")
    adapter.backend = SlottedBackend()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "slotted_framework", framework)
    monkeypatch.setitem(sys.modules, "slotted_adapter", adapter)
    backends, homes = dict(BACKENDS), dict(DEVICE_HOMES)
    register_backend("slotted", "slotted_adapter", framework="slotted_framework", devices=("slot",))
    yield adapter.backend
    BACKENDS.clear()
    BACKENDS.update(backends)
    DEVICE_HOMES.clear()
    DEVICE_HOMES.update(homes)
    _registry._loaded.pop("slotted", None)
    _registry._owners.clear()


def test_a_stager_yielding_views_of_reused_slots_gives_right_batches(slotted):
    data = {"x": np.random.default_rng(0).standard_normal((160, 3)), "ids": np.arange(160)}
    got = list(Loader(data, 10, seed=5, device="slot", prefetch=2))
    (stager,) = slotted.made
    assert stager.positions == [0, 1]
    want = np.array_split(Loader(data, 10, seed=5).indices(0), 16)
    for batch, idx in zip(got, want, strict=True):
        np.testing.assert_array_equal(batch["ids"].values, idx)
        np.testing.assert_array_equal(batch["x"].values, data["x"][idx])


def test_skipped_leaves_never_pass_through_a_staging_slot(slotted):
    """A skipped leaf is never moved, so nothing would copy it out of a reused slot."""
    data = {"x": np.random.default_rng(0).standard_normal((160, 3)), "ids": np.arange(160)}
    loader = Loader(data, 10, seed=5, device="slot", prefetch=2, skip_keys=["ids"])
    got = list(loader)  # every batch kept: a slot refilled later would change an earlier batch
    (stager,) = slotted.made
    assert stager.positions == [1]  # only "x" (leaves are in key order: "ids", "x")
    want = [b["ids"] for b in Loader(data, 10, seed=5)]
    assert [type(b["ids"]) for b in got] == [np.ndarray] * 16  # the type passed
    for batch, ids in zip(got, want, strict=True):
        np.testing.assert_array_equal(batch["ids"], ids)
        np.testing.assert_array_equal(batch["x"].values, data["x"][ids])
    assert not any(np.shares_memory(a["ids"], b["ids"]) for a, b in itertools.pairwise(got))


# -- the staged batch's leaves moved as a list (no flatten of the built batch) ---------------------


Point = __import__("collections").namedtuple("Point", "a b")


def _trees(n: int, seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    ids, im = np.arange(n), rng.integers(0, 255, (n, 2, 2), dtype=np.uint8)
    return [
        x,
        {"x": x, "ids": ids},
        {"outer": {"x": x, "pair": (ids, im)}, "p": Point(im, x)},
        [x, {"im": im}],
    ]


def _values(batch: Any) -> list[np.ndarray]:
    from looptoolkit import tree

    leaves, _ = tree.flatten(batch)
    return [np.asarray(getattr(leaf, "values", leaf)) for leaf in leaves]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "extra", [{}, {"dtype": {np.float32: np.float16}}, {"transform": "double"}]
)
@pytest.mark.parametrize("prefetch", [0, 2])
def test_moving_staged_leaves_as_a_list_equals_moving_the_built_batch(
    slotted, monkeypatch, seed, extra, prefetch
):
    """The list path against the tree path (``Plan.leaf_move`` off) on random trees and sizes.

    ``prefetch=2``: the staged batches; ``prefetch=0``: the gathered ones, moved inline.
    """
    from looptoolkit._pipeline.stream import Plan

    rng = np.random.default_rng(seed)
    n, batch = int(rng.integers(20, 90)), int(rng.integers(3, 17))
    kwargs = dict(extra)
    if kwargs.get("transform") == "double":
        from looptoolkit import tree

        def double(b: Any) -> Any:
            leaves, spec = tree.flatten(b)
            return tree.unflatten(spec, [type(x)(x.values * 2) for x in leaves])

        kwargs["transform"] = double
    for data in _trees(n, seed):
        calls: list[bool] = []
        real = Plan.leaf_move

        def spy(self: Any, rows: Any, real: Any = real, calls: list[bool] = calls) -> Any:
            out = real(self, rows)
            calls.append(out is not None)
            return out

        monkeypatch.setattr(Plan, "leaf_move", spy)
        opts = dict(seed=seed, device="slot", prefetch=prefetch, **kwargs)
        fast = list(Loader(data, batch, **opts))
        monkeypatch.setattr(Plan, "leaf_move", lambda self, rows: None)
        plain = list(Loader(data, batch, **opts))
        monkeypatch.setattr(Plan, "leaf_move", real)
        assert calls == [True]  # the list path ran
        assert len(fast) == len(plain) == -(-n // batch)
        for f, p in zip(fast, plain, strict=True):
            assert type(f) is type(p)
            got, want = _values(f), _values(p)
            assert [g.dtype for g in got] == [w.dtype for w in want]
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)


def test_leaves_the_list_path_cannot_take_go_through_the_tree(slotted):
    from looptoolkit._pipeline.stream import Plan
    from looptoolkit._rows.rows import Rows
    from looptoolkit.device import parse_device

    data = {"x": np.ones((8, 2)), "meta": {"ids": np.arange(8)}}
    target = parse_device("slot")
    plan = Plan(target, None, None, None, move=True)
    assert plan.leaf_move(Rows(data)) is not None
    skipping = Plan(target, None, None, None, move=True, skip_keys=["meta"])
    assert skipping.leaf_move(Rows(data)) is None
    torch = pytest.importorskip("torch")
    other = {"x": np.ones((8, 2)), "t": torch.ones(8)}  # a torch leaf routes to torch, not here
    assert plan.leaf_move(Rows(other)) is None
