"""Loader(transform=...): where it runs, what the loop gets, its errors; normalize everywhere."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import looptoolkit
from looptoolkit import Loader, normalize


def make_data(n: int = 50) -> dict[str, np.ndarray]:
    return {
        "image": (
            np.arange(n, dtype=np.uint8)[:, None, None, None] * np.ones((1, 3, 2, 2), np.uint8)
        ),
        "label": np.arange(n, dtype=np.int64),
    }


class Recorder:
    """A transform that records which thread ran it and on which rows."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.labels: list[list[int]] = []
        self.lock = threading.Lock()

    def __call__(self, batch: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        with self.lock:
            self.threads.append(threading.get_ident())
            self.labels.append(np.asarray(batch["label"]).tolist())
        return np.asarray(batch["image"]).astype(np.float32) / 255.0, np.asarray(batch["label"])


@pytest.mark.parametrize("prefetch", [1, 3])
def test_transform_runs_once_per_batch_in_the_prefetch_thread(prefetch):
    rec = Recorder()
    loader = Loader(
        make_data(),
        8,
        seed=1,
        device="cpu",
        prefetch=prefetch,
        prefetch_mode="thread",
        transform=rec,
    )
    got = list(loader)
    assert len(got) == len(loader) == 7
    assert len(rec.threads) == 7
    assert threading.get_ident() not in rec.threads
    assert len(set(rec.threads)) == 1
    # What the loop receives is the transform's output, batch for batch.
    order = loader.indices(0)
    for k, (image, label) in enumerate(got):
        np.testing.assert_array_equal(label, order[k * 8 : (k + 1) * 8])
        assert rec.labels[k] == label.tolist()
        assert image.dtype == np.float32
        np.testing.assert_allclose(image[:, 0, 0, 0], label.astype(np.float32) / 255.0)


@pytest.mark.parametrize(
    "kwargs", [{}, {"device": "cpu", "prefetch": 0}, {"device": "cpu", "prefetch": 2}]
)
def test_without_prefetch_the_transform_runs_in_the_consumers_thread(kwargs):
    rec = Recorder()
    loader = Loader(make_data(), 8, seed=1, transform=rec, **kwargs)
    assert len(list(loader)) == 7
    assert rec.threads == [threading.get_ident()] * 7


def test_transform_runs_after_the_cast():
    seen: list[Any] = []

    def record(batch):
        seen.append(batch["image"].dtype)
        return batch

    loader = Loader(make_data(), 10, device="cpu", dtype={np.uint8: np.float16}, transform=record)
    list(loader)
    assert seen == [np.dtype(np.float16)] * 5


def test_resume_len_and_sharding_are_unchanged_by_a_transform():
    data = make_data(53)
    plain = Loader(data, 5, seed=4, rank=1, world_size=2)
    moved = Loader(data, 5, seed=4, rank=1, world_size=2, transform=lambda b: b["label"] * 10)
    assert len(moved) == len(plain)
    want = [b["label"] * 10 for b in plain]
    it = iter(moved)
    first = [next(it) for _ in range(2)]
    state = moved.state_dict()
    it.close()
    resumed = Loader(data, 5, seed=4, rank=1, world_size=2, transform=lambda b: b["label"] * 10)
    resumed.load_state_dict(state)
    rest = list(resumed)
    got = first + rest
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("kwargs", [{}, {"device": "cpu", "prefetch": 2}])
def test_a_failing_transform_names_its_epoch_and_batch(kwargs):
    def failing(batch):
        if int(np.asarray(batch["label"])[0]) == 30:
            raise ValueError("bad batch")
        return batch

    loader = Loader(make_data(), 10, shuffle=False, transform=failing, **kwargs)
    loader.set_epoch(2)
    with pytest.raises(ValueError, match="bad batch") as info:
        list(loader)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "batch 3 of epoch 2" in notes


def test_a_resumed_epoch_numbers_batches_from_the_epochs_start():
    def failing(batch):
        if int(np.asarray(batch["label"])[0]) == 40:
            raise KeyError("late")
        return batch

    loader = Loader(make_data(), 10, shuffle=False, transform=failing)
    loader.load_state_dict({**loader.state_dict(), Loader.OFFSET_KEY: 20})
    with pytest.raises(KeyError) as info:
        list(loader)
    assert "batch 4 of epoch 0" in "\n".join(info.value.__notes__)


def test_transform_must_be_callable():
    with pytest.raises(TypeError, match="`transform` must be callable, got int"):
        Loader(make_data(), 4, transform=3)


def test_stats_count_batches_with_a_transform():
    loader = Loader(make_data(), 10, stats=True, transform=lambda b: b)
    list(loader)
    assert loader.stats.batches == 5


def test_normalize_on_numpy():
    data = make_data(6)
    out = normalize([10.0, 20.0, 30.0], [2.0, 4.0, 5.0], key="image")(data)
    assert out["image"].dtype == np.float32
    want = (
        data["image"].astype(np.float32) - np.array([10, 20, 30], np.float32)[:, None, None]
    ) / np.array([2, 4, 5], np.float32)[:, None, None]
    np.testing.assert_allclose(out["image"], want, rtol=1e-6)
    np.testing.assert_array_equal(out["label"], data["label"])
    assert normalize(1.0, 2.0)(np.array([3.0])).tolist() == [1.0]


def _as_framework(name: str, x: np.ndarray) -> Any:
    if name == "numpy":
        return x
    if name == "torch":
        return pytest.importorskip("torch").from_numpy(x)
    if name == "jax":
        return pytest.importorskip("jax").numpy.asarray(x)
    return pytest.importorskip("tensorflow").convert_to_tensor(x)


@pytest.mark.parametrize(
    ("framework", "dtype"),
    [
        (framework, dtype)
        for framework in ("numpy", "torch", "jax", "tf")
        for dtype in ("float16", "bfloat16", "float64")
        if (framework, dtype) != ("jax", "float64")  # JAX without x64 has no float64
    ],
)
def test_normalize_returns_the_dtype_asked_for(framework, dtype):
    from looptoolkit._common.dtypes import dtype_name

    if dtype == "bfloat16" and framework == "numpy":
        pytest.importorskip("ml_dtypes")
    images = make_data(4)["image"]
    transform = normalize([1.0, 2.0, 3.0], [2.0, 2.0, 4.0], dtype=dtype)
    for _ in range(2):  # the second call reuses the constants made by the first
        out = transform(_as_framework(framework, images))
        assert dtype_name(out.dtype) == dtype, (framework, out.dtype)
        if framework == "torch":
            got = out.double().numpy()
        elif framework == "tf":
            got = out.numpy().astype(np.float64)
        else:
            got = np.asarray(out).astype(np.float64)
        rtol = 1e-2 if dtype == "bfloat16" else 1e-3
        np.testing.assert_allclose(got, _expected(images), rtol=rtol, atol=0.05)


def test_normalize_errors():
    with pytest.raises(ValueError, match="`std` must not be 0"):
        normalize(0.0, [1.0, 0.0])
    with pytest.raises(ValueError, match="3 channels but axis 1 of the array has 2"):
        normalize([1.0] * 3, [1.0] * 3)(np.zeros((4, 2, 5)))
    with pytest.raises(TypeError, match="needs an array"):
        normalize(0.0, 1.0)([1, 2])


def _expected(images: np.ndarray) -> np.ndarray:
    mean = np.array([1.0, 2.0, 3.0], np.float32)[:, None, None]
    std = np.array([2.0, 2.0, 4.0], np.float32)[:, None, None]
    return (images.astype(np.float32) - mean) / std


def test_normalize_in_a_torch_loader():
    torch = pytest.importorskip("torch")
    data = {k: torch.from_numpy(v) for k, v in make_data().items()}
    loader = Loader(
        data, 8, seed=3, transform=normalize([1.0, 2.0, 3.0], [2.0, 2.0, 4.0], key="image")
    )
    for batch in loader:
        assert batch["image"].dtype == torch.float32
        np.testing.assert_allclose(
            batch["image"].numpy(),
            _expected(make_data()["image"][batch["label"].numpy()]),
            rtol=1e-6,
        )


def test_jax_transform_is_compiled_once_per_batch_shape():
    jax = pytest.importorskip("jax")
    traces = {"n": 0}

    def step(batch):
        traces["n"] += 1  # runs when traced, not on every call of the compiled function
        return normalize([1.0, 2.0, 3.0], [2.0, 2.0, 4.0], key="image")(batch)

    data = make_data()
    loader = Loader(data, 8, seed=3, device=jax.devices("cpu")[0], transform=step)
    batches = list(loader)
    assert len(batches) == 7
    assert traces["n"] == 2  # one trace for the 8-row batches, one for the last 2-row batch
    for batch in batches:
        assert isinstance(batch["image"], jax.Array)
        labels = np.asarray(batch["label"])
        np.testing.assert_allclose(
            np.asarray(batch["image"]), _expected(data["image"][labels]), rtol=1e-6
        )
    eager = {"n": 0}

    def plain(batch):
        eager["n"] += 1
        return batch

    list(Loader(data, 8, device=jax.devices("cpu")[0], transform=plain, jit_transform=False))
    assert eager["n"] == 7


def test_tf_transform_runs_through_tf_function():
    tf = pytest.importorskip("tensorflow")
    traces = {"n": 0}

    def step(batch):
        traces["n"] += 1
        return normalize([1.0, 2.0, 3.0], [2.0, 2.0, 4.0], key="image")(batch)

    data = make_data()
    loader = Loader(data, 8, seed=3, device="/CPU:0", transform=step)
    batches = list(loader)
    assert len(batches) == 7 and traces["n"] <= 2
    for batch in batches:
        assert isinstance(batch["image"], tf.Tensor)
        labels = batch["label"].numpy()
        np.testing.assert_allclose(
            batch["image"].numpy(), _expected(data["image"][labels]), rtol=1e-6
        )


def test_normalize_is_public():
    assert looptoolkit.normalize is normalize


@pytest.mark.cuda
@pytest.mark.parametrize("side", [False, True])
def test_cuda_transform_runs_with_the_copies_and_is_ordered(cuda, side, monkeypatch):
    """Small batches made in the loop's thread: on its own stream; else on the side stream."""
    torch = pytest.importorskip("torch")
    from looptoolkit.adapters import _torch_cuda

    if side:
        monkeypatch.setattr(_torch_cuda, "DIRECT_MAX_BYTES", -1)
    streams: list[Any] = []

    def on_device(batch):
        streams.append(torch.cuda.current_stream(cuda))
        # Work queued where the copies ran: the consumer must see its result.
        return {"image": batch["image"].float().mul_(2.0), "label": batch["label"]}

    data = make_data(4096)
    loader = Loader(data, 256, seed=1, device=cuda, prefetch=2, transform=on_device)
    default = torch.cuda.default_stream(cuda)
    for batch in loader:
        labels = batch["label"].cpu().numpy()
        want = data["image"][labels].astype(np.float32) * 2
        np.testing.assert_array_equal(batch["image"].cpu().numpy(), want)
    assert streams and all((s != default) is side for s in streams)


def test_normalize_on_torch_never_writes_the_callers_tensor():
    torch = pytest.importorskip("torch")
    from looptoolkit import normalize

    norm = normalize([127.5] * 3, [64.0] * 3, dtype="float32")
    x = torch.randint(0, 256, (4, 3, 5, 6), dtype=torch.uint8)
    want = (x.to(torch.float32) - 127.5) / 64
    torch.testing.assert_close(norm(x), want)  # uint8 in: scaled in place in the cast's copy
    floats = x.to(torch.float32)
    before = floats.clone()
    torch.testing.assert_close(norm(floats), want)  # float32 in: no copy made, so none written
    torch.testing.assert_close(floats, before, rtol=0, atol=0)
