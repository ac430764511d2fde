"""Block uploads (torch on CUDA, batches made in the loop's thread), run on the CPU.

``BlockCuda`` extends the recording fake of ``test_torch_streams.py`` with the
copies: every upload of the staged path is logged with the stream it was queued
on, its pinned source and a snapshot of what the source held when the copy was
queued. A copy stays in flight until an event recorded after it on its stream
is synchronised (or queried); a pinned source rewritten while a copy out of it
is in flight is a violation (on real CUDA the device would get the new rows).
"Device" tensors are host clones the fake remembers, so that the move finds
them already there and a batch handed out can be traced to the copy that made
it. The checks: copies and events per epoch, the stream orders, the batches
against the per-batch staged path and the host order, kept batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_torch_streams import FakeCuda, FakeEvent, install  # noqa: E402

from looptoolkit import Loader  # noqa: E402
from looptoolkit.adapters import _torch_blocks, _torch_cuda  # noqa: E402
from looptoolkit.adapters import torch as torch_adapter  # noqa: E402


class Copy:
    def __init__(self, source: Any, stream: str) -> None:
        self.source, self.snapshot, self.stream = source, source.clone(), stream
        self.done = False


class BlockEvent(FakeEvent):
    def record(self, stream: Any = None) -> None:
        super().record(stream)
        name = self.last[1]
        self.covers = [c for c in self.cuda.copies if c.stream == name and not c.done]

    def synchronize(self) -> None:
        super().synchronize()
        for copy in getattr(self, "covers", []):
            self.cuda.complete(copy)

    def query(self) -> bool:
        for copy in getattr(self, "covers", []):
            self.cuda.complete(copy)
        return True


class BlockCuda(FakeCuda):
    def __init__(self) -> None:
        super().__init__()
        self.copies: list[Copy] = []
        self.on_device: dict[int, Copy] = {}  # storage of a "device" tensor -> its copy
        self.violations: list[str] = []

    def Event(self, blocking: bool = False, **_: Any) -> BlockEvent:
        return BlockEvent(self, blocking)

    def check(self, copy: Copy) -> None:
        if not torch.equal(copy.source, copy.snapshot):
            self.violations.append("a pinned block was rewritten while a copy out of it ran")

    def complete(self, copy: Copy) -> None:
        if not copy.done:
            self.check(copy)
            copy.done = True

    def upload(self, buffer: Any, device: Any) -> Any:
        storage = buffer.untyped_storage().data_ptr()
        for copy in self.copies:
            if not copy.done and copy.source.untyped_storage().data_ptr() == storage:
                self.check(copy)  # still in flight: the gather before this copy rewrote it
        stream = self.current_stream().name
        copy = Copy(buffer, stream)
        self.copies.append(copy)
        self.log_op("copy", stream, copy)
        out = buffer.clone()
        self.on_device[out.untyped_storage().data_ptr()] = copy
        return out

    def finish(self) -> list[str]:
        """The violations, once every copy still in flight has been checked."""
        for copy in self.copies:
            if not copy.done:
                self.check(copy)
        return self.violations

    def copy_of(self, tensor: Any) -> Copy | None:
        return self.on_device.get(tensor.untyped_storage().data_ptr())

    def ordered(self, tensor: Any) -> bool:
        """Whether the stream current now is ordered after the copy ``tensor`` came from.

        True for a tensor no copy made. Ordered: the copy was queued on that stream,
        or the stream waited for an event recorded on the copy's stream after the copy.
        """
        copy = self.copy_of(tensor) if isinstance(tensor, torch.Tensor) else None
        current = self.current_stream().name
        if copy is None or copy.stream == current:
            return True
        at = next(i for i, e in enumerate(self.log) if e[1] == "copy" and e[3] is copy)
        recorded = {e[3]: i for i, e in enumerate(self.log) if e[1] == "record"}
        return any(
            op == "wait" and where == current and event[1] == copy.stream and recorded[event] > at
            for _, op, where, event in self.log
        )

    def unordered(self, batch: dict[str, Any]) -> list[str]:
        """The leaves of ``batch`` whose copies the current stream is not ordered after."""
        return [key for key, leaf in batch.items() if not self.ordered(leaf)]


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> BlockCuda:
    fake = BlockCuda()
    install(monkeypatch, fake)
    monkeypatch.setattr(
        _torch_cuda, "pinned_empty", lambda shape, dtype: torch.empty(shape, dtype=dtype)
    )
    monkeypatch.setattr(_torch_cuda, "upload", fake.upload)

    def move(leaves: Any, target: Any, non_blocking: Any, pack: Any) -> list[Any]:
        ts, _ = torch_adapter._as_tensors(leaves)
        out = []
        for t in ts:
            if not fake.ordered(t):  # the batch's cast, transform would read it unordered
                fake.violations.append("a batch was made on a stream not ordered after its copy")
            if fake.copy_of(t) is not None:
                out.append(t)  # already on the device: no call, as torch's move
            else:
                fake.log_op("move", fake.current_stream().name)
                out.append(t.clone())
        return out

    monkeypatch.setattr(torch_adapter.backend, "move", move)
    return fake


def data(n: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    """``x`` holds its row number in column 0, ``y`` is the row number: rows are traceable."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    x[:, 0] = np.arange(n)
    return {"x": x, "y": np.arange(n), "z": rng.integers(0, 255, (n, 2, 2)).astype(np.uint8)}


def ramp(batches: int, k: int) -> list[int]:
    """Batches per block over an epoch of ``batches``: 1, 2, 4, ... up to ``k``."""
    sizes, size = [], 1
    while batches > 0:
        sizes.append(min(size, batches))
        batches -= sizes[-1]
        size = min(2 * size, k)
    return sizes


def host(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    return {
        k: v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in batch.items()
    }


def same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = host(g), host(w)
        assert g.keys() == w.keys()
        for key in w:
            assert g[key].dtype == w[key].dtype, (k, key)
            np.testing.assert_array_equal(g[key], w[key], err_msg=f"batch {k}, {key}")


@contextlib.contextmanager
def per_batch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Block uploads off: each batch staged by itself (the path before blocks)."""
    with monkeypatch.context() as m:
        m.setattr(_torch_blocks, "BLOCK_BYTES", 0)
        yield


def test_one_copy_and_one_event_per_block_none_per_batch(cuda, monkeypatch):
    monkeypatch.setattr(_torch_blocks, "BLOCK_MAX_BATCHES", 8)
    calls = []
    move = torch_adapter.backend.move
    monkeypatch.setattr(
        torch_adapter.backend,
        "move",
        lambda *a: calls.append(1) or move(*a),  # type: ignore[func-returns-value]
    )
    loader = Loader(data(), 10, seed=1, device="cuda:0", stats=True)
    calls.clear()  # the probe's move of a few rows, when the Loader was made
    for _ in range(2):  # two epochs, the same counts
        cuda.log.clear()
        got = list(loader)
        blocks = ramp(100, 8)  # 1, 2, 4, then blocks of 8, the last of 5
        assert len(got) == 100 and len(blocks) == 15
        copies = [e for e in cuda.log if e[1] == "copy"]
        assert len(copies) == len(blocks)  # all staged leaves packed: one copy a block
        # Exactly the block's rows of x, y and z (12, 8, 4 bytes a row), each region aligned.
        want = [sum(-(-n * 10 * b // 64) * 64 for b in (12, 8, 4)) for n in blocks]
        assert [c[3].source.numel() for c in copies] == want
        records = [e for e in cuda.log if e[1] == "record"]
        assert len(records) == len(blocks) + 1  # + the pass's start mark (its stager's)
        assert not [e for e in cuda.log if e[1] in ("move", "wait")]
        # The pinned ring: a block waits for the copy out of its slot two blocks before.
        syncs = [e for e in cuda.log if e[1] == "event-sync"]
        assert len(syncs) == len(blocks) - _torch_blocks.BLOCK_SLOTS
        assert {e[0] for e in cuda.log} == {"MainThread"}
    assert loader.stats.block_batches == 8
    assert loader.stats.as_dict()["block_batches"] == 8
    assert calls == []  # every leaf on the device, nothing cast: no move is called
    assert not cuda.finish()


def test_a_shrinking_cast_runs_on_the_host_before_its_copy(cuda, monkeypatch):
    # float32 -> float16 halves what crosses: that leaf is cast on the host and moved by
    # itself (not staged into the block); the others still go in one copy a block.
    monkeypatch.setattr(_torch_blocks, "BLOCK_MAX_BATCHES", 8)
    moved: list[str] = []
    move = torch_adapter.backend.move
    monkeypatch.setattr(
        torch_adapter.backend,
        "move",
        lambda leaves, *a: moved.extend(str(x.dtype) for x in leaves) or move(leaves, *a),  # type: ignore[func-returns-value]
    )
    cast = {np.float32: np.float16, np.uint8: np.float32}
    loader = Loader(data(), 10, seed=1, device="cuda:0", dtype=cast)
    moved.clear()
    cuda.log.clear()
    got = list(loader)
    blocks = ramp(100, 8)
    copies = [e for e in cuda.log if e[1] == "copy"]
    assert len(copies) == len(blocks)
    # The block holds y and z (8 and 4 bytes a row), not x.
    want = [sum(-(-n * 10 * b // 64) * 64 for b in (8, 4)) for n in blocks]
    assert [c[3].source.numel() for c in copies] == want
    # x reaches the move already half its bytes (cast on the host), once a batch; y and
    # z, slices of the block, are on the device already.
    assert moved[::3] == ["torch.float16"] * 100 and len(moved) == 300
    assert all(host(b)["x"].dtype == np.float16 for b in got)
    assert all(host(b)["z"].dtype == np.float32 for b in got)  # uint8 grows: after the copy
    same(got, list(Loader(data(), 10, seed=1, device="cpu", dtype=cast)))
    assert not cuda.finish()


def test_k_comes_from_the_byte_budget(cuda, monkeypatch):
    monkeypatch.setattr(_torch_blocks, "BLOCK_BYTES", 10 * 20 * 4)  # 4 batches of 10 rows
    loader = Loader({"x": np.zeros((100, 5), np.float32)}, 10, device="cuda:0", stats=True)
    cuda.log.clear()
    assert len(list(loader)) == 10
    assert loader.stats.block_batches == 4
    assert len([e for e in cuda.log if e[1] == "copy"]) == len(ramp(10, 4)) == 4
    assert _torch_blocks.block_batches(10**9) == 1  # a batch over the budget: blocks of one


def kwargs_cases() -> dict[str, dict[str, Any]]:
    rng = np.random.default_rng(5)
    return {
        "full": {},
        "sequential": {"shuffle": False},
        "grouped": {"group_size": 50},
        "runs": {"run_size": 4},
        "weighted": {"weights": rng.random(1000), "num_samples": 700},
        "subset": {"indices": rng.choice(1000, 333, replace=False)},
        "rank": {"rank": 1, "world_size": 3},
        "drop_last": {"drop_last": True},
        "skip_keys": {"skip_keys": ["z"]},
        "dtype": {"dtype": {np.float32: np.float16, np.uint8: np.float32}},
        "transform": {"transform": lambda b: {**b, "x": b["x"] * 2, "s": b["z"][:, 0, 0] + 1}},
        "mask": {"return_mask": True, "rank": 0, "world_size": 3},
    }


@pytest.mark.parametrize("case", list(kwargs_cases()))
def test_blocks_give_the_per_batch_paths_batches(cuda, monkeypatch, case):
    """Every order, rank, skip_keys, cast, transform: the batches of the path without blocks."""
    monkeypatch.setattr(_torch_blocks, "BLOCK_MAX_BATCHES", 4)
    kw = kwargs_cases()[case]
    d = data()
    loader = Loader(d, 9, seed=3, device="cuda:0", stats=True, **kw)
    cuda.log.clear()
    got = [list(loader) for _ in range(2)]
    assert loader.stats.block_batches == 4
    batches = len(got[0]) + len(got[1])
    assert 0 < len([e for e in cuda.log if e[1] == "copy"]) < batches / 2
    with per_batch(monkeypatch):
        reference = Loader(d, 9, seed=3, device="cuda:0", **kw)
        want = [list(reference) for _ in range(2)]
    host_loader = Loader(d, 9, seed=3, **{k: v for k, v in kw.items() if k in HOST_ARGS})
    for epoch in range(2):
        if case == "mask":
            batches = [b for b, _ in got[epoch]]
            for (_, g), (_, w) in zip(got[epoch], want[epoch], strict=True):
                np.testing.assert_array_equal(g, w)
            same(batches, [b for b, _ in want[epoch]])
            continue
        same(got[epoch], want[epoch])
        # Rows aligned across leaves, and in the host order.
        ys = np.concatenate([host(b)["y"] for b in got[epoch]])
        xs = np.concatenate([host(b)["x"][:, 0] for b in got[epoch]])
        scale = 2 if case == "transform" else 1
        np.testing.assert_array_equal(xs, ys.astype(xs.dtype) * scale)
        np.testing.assert_array_equal(ys, np.concatenate([b["y"] for b in host_loader]))
        if case == "skip_keys":
            assert all(isinstance(b["z"], np.ndarray) for b in got[epoch])
        if case in ("full", "sequential", "grouped", "runs", "skip_keys", "dtype"):
            np.testing.assert_array_equal(np.sort(ys), np.arange(1000))  # every sample once
        host_loader.set_epoch(epoch + 1)
    assert not cuda.finish()


@pytest.mark.parametrize("seed", range(12))
def test_blocks_on_random_inputs_give_the_host_loaders_batches(cuda, monkeypatch, seed):
    """Random sizes, batch sizes, block caps, dtypes and row shapes; values and dtypes equal."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(_torch_blocks, "BLOCK_MAX_BATCHES", int(rng.integers(1, 10)))
    n = int(rng.integers(1, 400))
    dtypes = [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_, np.float16]
    d = {"row": np.arange(n)}
    for i in range(int(rng.integers(1, 5))):
        shape = (n, *rng.integers(1, 4, int(rng.integers(0, 3))))
        d[f"l{i}"] = (rng.standard_normal(shape) * 50).astype(dtypes[rng.integers(len(dtypes))])
    if rng.random() < 0.3:
        d["t"] = np.asfortranarray(rng.standard_normal((n, 3)))[:, ::2]  # not contiguous
    kw = {"seed": seed, "drop_last": bool(rng.random() < 0.3), "shuffle": bool(rng.random() < 0.8)}
    batch_size = int(rng.integers(1, 41))
    loader = Loader(d, batch_size, device="cuda:0", prefetch=int(rng.integers(1, 4)), **kw)
    host_loader = Loader(d, batch_size, **kw)
    for epoch in range(2):
        loader.set_epoch(epoch)
        host_loader.set_epoch(epoch)
        got = list(loader)
        same(got, list(host_loader))
        if got and not kw["drop_last"]:
            rows = np.concatenate([b["row"].numpy() for b in got])
            np.testing.assert_array_equal(np.sort(rows), np.arange(n))
    assert [e for e in cuda.log if e[1] == "copy"] or n < batch_size  # blocks were used
    assert not cuda.finish()


HOST_ARGS = {
    "shuffle",
    "group_size",
    "run_size",
    "weights",
    "num_samples",
    "indices",
    "rank",
    "world_size",
    "drop_last",
}


def test_memmap_leaves_are_uploaded_in_blocks(cuda, tmp_path):
    d = data(300)
    mapped = {}
    for key, value in d.items():
        path = tmp_path / f"{key}.npy"
        np.save(path, value)
        mapped[key] = np.load(path, mmap_mode="r")
    loader = Loader(mapped, 16, seed=2, device="cuda:0", stats=True)
    cuda.log.clear()
    got = list(loader)
    assert loader.stats.block_batches > 1
    assert len([e for e in cuda.log if e[1] == "copy"]) == len(ramp(19, loader.stats.block_batches))
    same(got, [dict(b) for b in Loader(d, 16, seed=2)])


@pytest.mark.parametrize("taken", [0, 1, 4, 5, 6, 20])
def test_a_resumed_epoch_starts_its_blocks_at_the_resume_offset(cuda, monkeypatch, taken):
    """Stopped mid-block (blocks of 1, 2, 4, 4, ...: batch 5 is inside the fourth)."""
    monkeypatch.setattr(_torch_blocks, "BLOCK_MAX_BATCHES", 4)
    d = data(500)
    loader = Loader(d, 9, seed=7, device="cuda:0")
    loader.set_epoch(1)
    it = iter(loader)
    first = [next(it) for _ in range(taken)]
    state = loader.state_dict()
    it.close()
    resumed = Loader(d, 9, seed=7, device="cuda:0")
    resumed.load_state_dict(state)
    cuda.log.clear()
    rest = list(resumed)
    assert len([e for e in cuda.log if e[1] == "copy"]) == len(ramp(len(rest), 4))
    whole = Loader(d, 9, seed=7)
    whole.set_epoch(1)
    same(first + rest, list(whole))
    assert not cuda.finish()


def test_a_kept_batch_keeps_its_values_after_many_more_blocks(cuda, monkeypatch):
    monkeypatch.setattr(_torch_blocks, "BLOCK_MAX_BATCHES", 4)
    d = data(2000)
    loader = Loader(d, 10, seed=4, device="cuda:0")
    want = list(Loader(d, 10, seed=4))
    kept = {}
    for k, batch in enumerate(loader):
        if k % 7 == 0:
            kept[k] = batch  # the loop keeps it; everything else is dropped
    assert len(kept) == 29
    for k, batch in kept.items():
        same([batch], [want[k]])
    assert not cuda.finish()


@pytest.mark.parametrize("prefetch", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_block_is_used_before_its_copy_is_ordered_on_the_loops_stream(cuda, prefetch, seed):
    """Inline: a batch's copy was queued on the stream current where the batch is made and
    where it is handed out, or that stream waited for the copy's stream after the copy.

    The loop switches between the default stream and one of its own at random: batches
    issued ahead under one are made (cast) or handed out under the other, and blocks
    are copied on both.
    """
    d = data(600)
    loader = Loader(d, 10, seed=1, device="cuda:0", prefetch=prefetch, dtype={np.uint8: np.float32})
    want = list(Loader(d, 10, seed=1, device="cuda:0", dtype={np.uint8: np.float32}))
    own = cuda.Stream(torch.device("cuda", 0))
    on_own = np.random.default_rng(seed).random(60) < 0.5
    got, bad = [], []
    it = iter(loader)
    for k in range(60):
        with cuda.stream(own) if on_own[k] else contextlib.nullcontext():
            batch = next(it)
            bad += [(k, key) for key in cuda.unordered(batch)]
            got.append(batch)
    assert next(it, None) is None
    assert not bad, bad
    same(got, want)
    copies = {e[2] for e in cuda.log if e[1] == "copy"}
    assert copies <= {"default0", own.name}
    assert [e for e in cuda.log if e[1] == "wait"]  # the switches needed waits
    assert not cuda.finish()


@pytest.mark.parametrize(("prefetch", "on_own"), [(1, [6]), (2, [5, 6])])
def test_a_switch_of_stream_at_a_block_boundary_is_waited_for(cuda, prefetch, on_own):
    """Blocks of 1, 2, 4, 8 batches (0 | 1-2 | 3-6 | 7-14), the loop on its own stream at
    batches ``on_own``, ``z`` cast on the device (so each batch's making is checked).

    ``prefetch=1``, own stream at batch 6: batch 7 opens a block copied on the own stream,
    batch 6 (made under the default stream) is handed out under it: the hand-over waits.
    ``prefetch=2``, own stream at 5 and 6: batches 7 and 8 are made there (their block
    copied there); batches 5 and 6, made under the default stream, are covered by one wait
    at the hand-over of batch 5. Back on the default stream, batch 9 is made there from
    the block copied on the own stream: the default stream waits for that copy first.
    """
    d = data(300)
    cast = {np.uint8: np.float32}
    loader = Loader(d, 10, seed=1, device="cuda:0", prefetch=prefetch, dtype=cast)
    own = cuda.Stream(torch.device("cuda", 0))
    got, bad = [], []
    it = iter(loader)
    for k in range(30):
        with cuda.stream(own) if k in on_own else contextlib.nullcontext():
            batch = next(it)
            bad += [(k, key) for key in cuda.unordered(batch)]
            got.append(batch)
    assert not bad, bad
    same(got, list(Loader(d, 10, seed=1, device="cuda:0", dtype=cast)))
    waits = [e[2] for e in cuda.log if e[1] == "wait"]
    assert waits.count(own.name) == 1
    if prefetch == 2:
        assert waits.count("default0") == 2  # batch 9's making, batch 7's hand-over
    assert not cuda.finish()


def test_batches_made_in_the_prefetch_thread_are_staged_one_at_a_time(cuda):
    loader = Loader(data(), 10, seed=1, device="cuda:0", prefetch_mode="thread", stats=True)
    cuda.log.clear()
    got = list(loader)
    assert len(got) == 100 and loader.stats.block_batches == 0
    assert len([e for e in cuda.log if e[1] == "move"]) == 100 * 3
    same(got, list(Loader(data(), 10, seed=1)))


@pytest.mark.parametrize("case", ["large", "bfloat16", "prefetch0"])
def test_where_blocks_do_not_apply_batches_are_moved_one_at_a_time(cuda, monkeypatch, case):
    """Batches over ``DIRECT_MAX_BYTES``, nothing to stage (a dtype NumPy lacks), no staging."""
    d: dict[str, Any] = {"x": np.arange(400.0, dtype=np.float32).reshape(100, 4)}
    kw: dict[str, Any] = {}
    if case == "large":
        monkeypatch.setattr(_torch_cuda, "DIRECT_MAX_BYTES", 10 * 16 - 1)  # one batch
    elif case == "bfloat16":
        d = {"x": torch.from_numpy(d["x"]).to(torch.bfloat16)}
    else:
        kw["prefetch"] = 0
    loader = Loader(d, 10, seed=1, device="cuda:0", stats=True, **kw)
    cuda.log.clear()
    got = list(loader)
    assert len(got) == 10 and loader.stats.block_batches == 0
    assert len([e for e in cuda.log if e[1] == "move"]) == 10
    assert not [e for e in cuda.log if e[1] == "copy"]
    want = list(Loader(d, 10, seed=1))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g["x"], torch.as_tensor(w["x"]))  # dtypes too
