"""The CUDA Loader's threads, devices and streams, run on the CPU against a recording fake.

``FakeCuda`` stands in for the parts of ``torch.cuda`` the staged upload calls,
with the semantics that matter here: the current device and the current stream
are per thread (a new thread starts on device 0 and its default stream), an
index-less ``torch.cuda.device`` selects the calling thread's current device,
and every event record, stream wait and event synchronisation is logged with
the thread that made it. The torch backend's ``move`` is replaced by one that
copies on the host and logs the device it resolved, the thread's current device
and stream. The checks are the orders the CUDA programming model requires.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from looptoolkit import Loader  # noqa: E402
from looptoolkit._pipeline.stream import Plan  # noqa: E402
from looptoolkit.adapters import _torch_blocks, _torch_cuda  # noqa: E402
from looptoolkit.adapters import torch as torch_adapter  # noqa: E402
from looptoolkit.device import parse_device  # noqa: E402

_ids = itertools.count()


class FakeStream:
    def __init__(self, cuda: FakeCuda, index: int, name: str) -> None:
        self.cuda, self.index, self.name = cuda, index, name
        self.device = torch.device("cuda", index)

    def wait_event(self, event: FakeEvent) -> None:
        self.cuda.log_op("wait", self.name, event.last)

    def synchronize(self) -> None:
        self.cuda.log_op("stream-sync", self.name)


class FakeEvent:
    def __init__(self, cuda: FakeCuda, blocking: bool = False) -> None:
        self.cuda = cuda
        self.last: tuple[int, str] | None = None  # (record id, stream): what a wait waits for

    def record(self, stream: FakeStream | None = None) -> None:
        stream = stream or self.cuda.current_stream()
        self.last = (next(_ids), stream.name)
        self.cuda.log_op("record", stream.name, self.last)

    def synchronize(self) -> None:
        self.cuda.log_op("event-sync", None, self.last)


class FakeCuda:
    """Per-thread current device and stream; logs (thread, op, stream, event)."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.local = threading.local()
        self.log: list[tuple[str, str, str | None, Any]] = []
        self.lock = threading.Lock()
        self.defaults = {i: FakeStream(self, i, f"default{i}") for i in range(count)}
        self.made: list[FakeStream] = []

    def log_op(self, op: str, stream: str | None, event: Any = None) -> None:
        with self.lock:
            self.log.append((threading.current_thread().name, op, stream, event))

    # -- torch.cuda's surface
    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return getattr(self.local, "device", 0)

    def set_device(self, index: int) -> None:
        self.local.device = index

    def _index(self, device: Any) -> int:
        if device is None:
            return self.current_device()
        if isinstance(device, int):
            return device
        index = torch.device(device).index
        return self.current_device() if index is None else index

    @contextlib.contextmanager
    def device(self, device: Any) -> Iterator[None]:
        before = self.current_device()
        self.set_device(self._index(device))
        try:
            yield
        finally:
            self.set_device(before)

    def _streams(self) -> dict[int, FakeStream]:
        if not hasattr(self.local, "streams"):
            self.local.streams = {}
        return self.local.streams

    def current_stream(self, device: Any = None) -> FakeStream:
        index = self._index(device)
        return self._streams().get(index, self.defaults[index])

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        streams = self._streams()
        before = streams.get(stream.index)
        streams[stream.index] = stream
        with self.device(stream.device):
            try:
                yield
            finally:
                if before is None:
                    del streams[stream.index]
                else:
                    streams[stream.index] = before

    def Stream(self, device: Any = None) -> FakeStream:
        stream = FakeStream(self, self._index(device), f"side{len(self.made)}")
        self.made.append(stream)
        return stream

    def Event(self, blocking: bool = False, **_: Any) -> FakeEvent:
        return FakeEvent(self, blocking)


def install(monkeypatch: pytest.MonkeyPatch, cuda: FakeCuda) -> None:
    """Put ``cuda`` in place of the parts of ``torch.cuda`` the staged uploads call."""
    for name in (
        "is_available",
        "device_count",
        "current_device",
        "set_device",
        "device",
        "current_stream",
        "stream",
        "Stream",
        "Event",
    ):
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    monkeypatch.setattr(_torch_cuda, "_side_streams", {})


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """torch.cuda faked; the torch backend's move copies on the host and logs where it went."""
    cuda = FakeCuda()
    install(monkeypatch, cuda)
    # The side stream for every batch: the rules below are its rules. Small batches made in
    # the loop's thread copy on the loop's stream instead (the `direct` tests at the end).
    monkeypatch.setattr(_torch_cuda, "DIRECT_MAX_BYTES", -1)
    monkeypatch.setattr(
        _torch_cuda, "pinned_empty", lambda shape, dtype: torch.empty(shape, dtype=dtype)
    )

    def move(leaves: Any, target: Any, non_blocking: Any, pack: Any) -> list[Any]:
        device = torch_adapter._with_index(torch_adapter.resolve_device(target))
        where = (device.index, cuda.current_device(), cuda.current_stream().name)
        cuda.log_op("move", cuda.current_stream().name, where)
        ts, _ = torch_adapter._as_tensors(leaves)
        return [t.clone() for t in ts]  # a device copy: the batch's own memory

    monkeypatch.setattr(torch_adapter.backend, "move", move)
    return cuda


def data(n: int = 64) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((n, 3)).astype(np.float32), "y": np.arange(n)}


def producer(cuda: FakeCuda, mode: str = "thread") -> list[tuple[str, str, str | None, Any]]:
    """The ops of the thread that makes the batches: the prefetch thread, or the loop's own."""
    name = "looptoolkit-loader-prefetch" if mode == "thread" else "MainThread"
    return [entry for entry in cuda.log if entry[0] == name]


@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_cuda_without_an_index_is_the_constructing_threads_device(fake, mode):
    """D2: every move of the prefetch thread goes to the device current where the Loader was made.

    The prefetch thread's own current device is 0; the Loader is made where
    ``set_device(1)`` was called (the DDP idiom).
    """
    fake.set_device(1)
    for device in ("cuda", torch.device("cuda")):
        loader = Loader(data(), 8, seed=1, device=device, prefetch=2, prefetch_mode=mode)
        fake.log.clear()
        got = list(loader)
        moves = [e[3] for e in producer(fake, mode) if e[1] == "move"]
        assert len(moves) == len(got) == 8
        side = _torch_cuda._side_streams[1].name
        # (device moved to, the thread's current device, its current stream)
        assert set(moves) == {(1, 1, side)}


def test_a_plan_fixes_the_device_where_it_is_built(fake):
    fake.set_device(1)
    assert Plan(parse_device("cuda"), None, None, None, move=True).target.index == 1
    assert Plan(parse_device("cuda:0"), None, None, None, move=True).target.index == 0
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fake.current_device()))
    thread.start()
    thread.join()
    assert out == [0]  # what the fake models: a new thread starts on device 0


def consumer_events(cuda: FakeCuda, stream: str) -> set[Any]:
    return {e[3] for e in cuda.log if e[0] == "MainThread" and e[1] == "record" and e[2] == stream}


@pytest.mark.parametrize("mode", ["thread", "inline"])
@pytest.mark.parametrize("on_own_stream", [False, True])
def test_the_side_stream_waits_for_the_consumer_before_each_batch(fake, on_own_stream, mode):
    """D3: nothing the producer reads is unordered with the consumer's stream.

    Before its first move the side stream waits for an event recorded on the
    consumer's current stream (what the loop had queued when the pass began), and
    before each later batch for one recorded at a hand-over.
    """
    loader = Loader(data(), 8, seed=1, device="cuda:0", prefetch=2, prefetch_mode=mode)
    fake.log.clear()
    stream = fake.Stream(torch.device("cuda", 0)) if on_own_stream else fake.defaults[0]
    with fake.stream(stream) if on_own_stream else contextlib.nullcontext():
        got = list(loader)
    assert len(got) == 8
    side = _torch_cuda._side_streams[0].name
    ours = consumer_events(fake, stream.name)
    waited: list[Any] = []
    moves = 0
    for _, op, where, event in producer(fake, mode):
        if op == "wait" and where == side:
            waited.append(event)
        elif op == "move":
            assert waited and waited[-1] in ours, "a batch was read before waiting for the consumer"
            waited.clear()
            moves += 1
    assert moves == 8


@pytest.mark.parametrize("kind", ["numpy", "bfloat16"])
def test_the_consumer_waits_for_each_batch_before_it_gets_it(fake, kind):
    """D3/D4: the loop's stream waits for the event of the batch it gets, before it gets it.

    ``bfloat16`` torch host data has no NumPy dtype, so no leaf is staged: that
    path too hands batches over through the side stream's event.
    """
    x = torch.arange(64.0).reshape(32, 2)
    leaf = x.to(torch.bfloat16) if kind == "bfloat16" else x.numpy()
    loader = Loader({"x": leaf}, 8, seed=1, device="cuda:0", prefetch=2, prefetch_mode="thread")
    fake.log.clear()
    side = None
    for k, _ in enumerate(loader):
        side = side or _torch_cuda._side_streams[0].name
        marks = [e[3] for e in fake.log if e[1] == "record" and e[2] == side]
        waits = [e[3] for e in fake.log if e[0] == "MainThread" and e[1] == "wait"]
        assert waits[-1] == marks[k], f"batch {k} was handed out before its event was waited for"
        moves = [e for e in producer(fake) if e[1] == "move"]
        assert moves[k][2] == side  # made on the side stream, not the thread's default stream


def test_one_side_stream_per_device_for_every_pass_and_loader(fake):
    """D8: a new stream per pass would strand each pass's cached blocks in its own pool."""
    loader = Loader(data(), 8, seed=1, device="cuda:0", prefetch=2)
    for _ in range(3):
        list(loader)
    list(Loader(data(), 16, device="cuda:0", prefetch=1))
    assert len(fake.made) == 1


def test_the_producer_runs_a_bounded_number_of_batches_ahead_of_the_consumers_stream(fake):
    """D9: batch memory held does not grow with how far the consumer's CPU runs ahead.

    Before refilling a slot the producer waits (on the CPU) for the event of the
    batch last staged there; that batch's side-stream work came after a wait for
    the consumer's stream as of the latest hand-over. So when batch ``j`` is
    staged, the consumer's stream has run past the hand-over of batch ``j - d``
    with ``d`` at most ``2 * (prefetch + 2)`` (the queue holds ``prefetch``
    batches, one more is being made, and the consumer may have taken a batch
    without having handed it over yet): the batches alive on the GPU are bounded
    by the prefetch depth, not by the CPU's lead.
    """
    prefetch = 2
    slots = prefetch + 1
    loader = Loader(
        data(256), 8, seed=1, device="cuda:0", prefetch=prefetch, prefetch_mode="thread"
    )
    fake.log.clear()
    list(loader)
    side = _torch_cuda._side_streams[0].name
    handed = [e[3] for e in fake.log if e[0] == "MainThread" and e[1] == "record"]
    recorded = [e[3] for e in fake.log if e[1] == "record" and e[2] == side]
    # The consumer's event waited for before each side-stream batch event.
    last_wait: Any = None
    waited_before: dict[Any, Any] = {}
    for _, op, where, event in fake.log:
        if op == "wait" and where == side:
            last_wait = event
        elif op == "record" and where == side:
            waited_before[event] = last_wait
    synced = [e[3] for e in producer(fake) if e[1] == "event-sync"]
    assert len(synced) == len(recorded) - slots
    for j, event in enumerate(synced, start=slots):  # batch j reuses the slot of batch j - slots
        consumer = waited_before[event]
        m = handed.index(consumer)  # 0: the pass's start, k + 1: the hand-over of batch k
        assert j - (m - 1) <= 2 * (prefetch + 2), (j, m)


def test_small_staged_leaves_are_gathered_packed_and_copied_once(fake, monkeypatch):
    """D11: small leaves go to the device in one copy out of the stager's pinned slot.

    Before, each batch's small leaves were copied from the slots into a fresh
    pageable concatenation, then into a fresh pinned buffer, then copied: two
    host copies more, and a pinned allocation per batch in the prefetch thread.
    """
    uploads: list[torch.Tensor] = []

    def upload(buffer: torch.Tensor, device: Any) -> torch.Tensor:
        assert buffer.dtype == torch.uint8 and buffer.dim() == 1
        uploads.append(buffer.clone())  # the "device" copy
        return uploads[-1]

    monkeypatch.setattr(_torch_cuda, "upload", upload)
    seen: list[list[Any]] = []
    move = torch_adapter.backend.move

    def spy(leaves: Any, target: Any, non_blocking: Any, pack: Any) -> list[Any]:
        seen.append(list(leaves))
        return move(leaves, target, non_blocking, pack)

    monkeypatch.setattr(torch_adapter.backend, "move", spy)
    rng = np.random.default_rng(0)
    data = {f"s{i}": rng.standard_normal((50, i + 1)).astype(np.float32) for i in range(5)}
    data["b"] = rng.integers(0, 2, 50).astype(bool)
    data["big"] = rng.standard_normal((50, 70000)).astype(np.float32)  # 2.8 MB a batch of 10
    loader = Loader(data, 10, seed=3, device="cuda:0", prefetch=2)
    seen.clear()
    got = list(loader)
    want = list(Loader(data, 10, seed=3))
    assert len(uploads) == len(got) == 5  # one copy per batch for the six small leaves
    for batch, host, leaves, up in zip(got, want, seen, uploads, strict=True):
        for key in data:
            np.testing.assert_array_equal(batch[key].numpy(), host[key])
        on_device = [x for x in leaves if x.untyped_storage().data_ptr() == up.data_ptr()]
        assert len(on_device) == 6  # the move got them already there


def test_prefetch_0_makes_every_cuda_call_in_the_loops_thread(fake):
    """D6: with ``prefetch=0`` nothing runs in another thread, so a CUDA-graph capture in
    the loop (``capture_error_mode="global"``, the default) meets no other thread's
    allocation, copy or synchronisation; no side stream either."""
    loader = Loader(data(), 8, seed=1, device="cuda:0", prefetch=0)
    fake.log.clear()
    for _ in loader:
        assert not [t for t in threading.enumerate() if t.name == "looptoolkit-loader-prefetch"]
    assert {entry[0] for entry in fake.log} == {"MainThread"}
    moves = [e[3] for e in fake.log if e[1] == "move"]
    assert moves == [(0, 0, "default0")] * 8  # on the loop's own current stream
    assert fake.made == []


# -- direct: small batches made in the loop's thread, copied on the loop's current stream --------


@pytest.fixture
def direct(fake: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """Batches staged one at a time (block uploads off: ``test_torch_blocks.py``)."""
    monkeypatch.setattr(_torch_cuda, "DIRECT_MAX_BYTES", 1 << 20)
    monkeypatch.setattr(_torch_blocks, "BLOCK_BYTES", 0)
    return fake


def moves_by_stream(cuda: FakeCuda) -> list[str | None]:
    return [e[2] for e in cuda.log if e[0] == "MainThread" and e[1] == "move"]


@pytest.mark.parametrize("on_own_stream", [False, True])
def test_direct_small_batches_copy_on_the_loops_current_stream(direct, on_own_stream):
    loader = Loader(data(), 8, seed=1, device="cuda:0", prefetch=2)
    want = list(Loader(data(), 8, seed=1))
    direct.log.clear()
    stream = direct.Stream(torch.device("cuda", 0)) if on_own_stream else direct.defaults[0]
    with direct.stream(stream) if on_own_stream else contextlib.nullcontext():
        got = list(loader)
    assert len(got) == len(want) == 8
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g["x"].numpy(), w["x"])
        np.testing.assert_array_equal(g["y"].numpy(), w["y"])
    assert moves_by_stream(direct) == [stream.name] * 8
    side = _torch_cuda._side_streams[0].name
    assert not [e for e in direct.log if e[2] == side], "the side stream was used"
    # Nothing to wait for: every batch was queued on the stream it is used on.
    assert not [e for e in direct.log if e[1] == "wait"]


def test_direct_a_batch_used_on_another_stream_waits_for_its_copy_there(direct):
    """Batches issued ahead on the default stream, used under a stream of the loop's own."""
    loader = Loader(data(), 8, seed=1, device="cuda:0", prefetch=2)
    own = direct.Stream(torch.device("cuda", 0))
    it = iter(loader)
    next(it)  # issues batches 0..2 on the default stream
    records = {e[3]: e[2] for e in direct.log if e[1] == "record"}  # event -> its stream
    with direct.stream(own):
        direct.log.clear()
        rest = list(it)
    assert len(rest) == 7
    waits = [e[3] for e in direct.log if e[1] == "wait" and e[2] == own.name]
    # Batches 1 and 2 were copied on the default stream: the loop's stream waits for each
    # (their events, in order); the batches issued under its own stream need no wait.
    assert len(waits) == 2 and all(records[w] == "default0" for w in waits)
    assert waits == sorted(waits)
    assert set(moves_by_stream(direct)) == {own.name}


def test_direct_a_slot_is_refilled_after_the_event_of_its_last_copy(direct):
    prefetch, slots = 2, 3
    loader = Loader(data(256), 8, seed=1, device="cuda:0", prefetch=prefetch)
    direct.log.clear()
    list(loader)
    # the pass's start mark, then one event after each batch's copy
    recorded = [e[3] for e in direct.log if e[1] == "record" and e[2] == "default0"][1:]
    synced = [e[3] for e in direct.log if e[1] == "event-sync"]
    assert len(recorded) == 32 and synced == recorded[: len(recorded) - slots]


@pytest.mark.parametrize("case", ["thread", "large"])
def test_direct_only_in_the_loops_thread_and_for_small_batches(direct, monkeypatch, case):
    if case == "large":
        monkeypatch.setattr(_torch_cuda, "DIRECT_MAX_BYTES", 8 * 4 * 3 - 1)  # one x batch
    mode = "thread" if case == "thread" else "inline"
    loader = Loader(data(), 8, seed=1, device="cuda:0", prefetch=2, prefetch_mode=mode)
    direct.log.clear()
    assert len(list(loader)) == 8
    side = _torch_cuda._side_streams[0].name
    moves = [e[2] for e in producer(direct, mode) if e[1] == "move"]
    assert moves == [side] * 8
