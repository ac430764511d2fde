"""PyTorch backend: device resolution, NumPy wrapping, casts, packing, non-blocking policy.

The CUDA tests (marked ``cuda``) run where torch sees a GPU and are skipped elsewhere.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from looptoolkit import TransferError, to_device  # noqa: E402
from looptoolkit.adapters import torch as torch_adapter  # noqa: E402
from looptoolkit.adapters.torch import (  # noqa: E402
    PACK_MAX_BYTES,
    from_numpy,
    pack_copy,
    resolve_device,
)
from looptoolkit.device import parse_device  # noqa: E402

CPU = torch.device("cpu")


def mixed_small_leaves() -> list[torch.Tensor]:
    """Small leaves of many dtypes and shapes, 0-d, empty and non-contiguous ones."""
    g = torch.Generator().manual_seed(0)
    return [
        torch.tensor([True, False, True]),
        torch.randint(0, 255, (5,), dtype=torch.uint8, generator=g),
        torch.randint(-(2**40), 2**40, (2, 3), dtype=torch.int64, generator=g),
        torch.randn(4, generator=g).to(torch.float16),
        torch.randn(3, 2, generator=g),
        torch.randn(2, 2, generator=g).to(torch.bfloat16),
        torch.tensor(3.5),
        torch.tensor(7, dtype=torch.int64),
        torch.empty(0),
        torch.empty(0, 3, dtype=torch.uint8),
        torch.randn(3, 4, generator=g).t(),  # non-contiguous
        torch.arange(10, dtype=torch.int32)[::2],  # strided view
        torch.randn(1, 1, 1, generator=g, dtype=torch.float64),
        torch.tensor([1 + 2j], dtype=torch.complex64),
    ]


def storage_range(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = storage_range(a), storage_range(b)
    return a1 > a0 and b1 > b0 and a0 < b1 and b0 < a1


@pytest.fixture
def to_calls(monkeypatch):
    """Every ``Tensor.to`` call: (source dtype, source device, args, kwargs)."""
    calls: list[tuple[Any, ...]] = []
    real = torch.Tensor.to

    def spy(self, *args, **kwargs):
        calls.append((self.dtype, self.device, args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    return calls


@pytest.fixture
def packed_inputs(monkeypatch):
    """The tensors each ``pack_copy`` call received."""
    seen: list[list[torch.Tensor]] = []
    real = torch_adapter.pack_copy

    def spy(tensors, device):
        seen.append(list(tensors))
        return real(tensors, device)

    monkeypatch.setattr(torch_adapter, "pack_copy", spy)
    return seen


# -- devices ---------------------------------------------------------------------------


def test_resolve_device():
    assert resolve_device(parse_device("cpu")) == CPU
    assert resolve_device(parse_device(CPU)) is CPU
    assert resolve_device(parse_device("/CPU:0")) == CPU
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available to torch"):
            resolve_device(parse_device("cuda"))


# -- NumPy leaves ---------------------------------------------------------------------------


def test_from_numpy_is_zero_copy_and_quiet_for_read_only_arrays():
    x = np.arange(4.0)
    assert from_numpy(x).data_ptr() == x.ctypes.data
    x.flags.writeable = False
    t = from_numpy(x)  # warnings are errors in this suite
    assert t.data_ptr() == x.ctypes.data


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6)[::-1],  # negative stride
        np.arange(6, dtype=">i4"),  # big-endian
        np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-2],
    ],
    ids=["negative_stride", "byte_swapped", "negative_stride_2d"],
)
def test_arrays_torch_from_numpy_refuses_are_copied(array):
    out = to_device({"x": array}, CPU)["x"]
    assert isinstance(out, torch.Tensor)
    np.testing.assert_array_equal(out.numpy(), array)


def test_ml_dtypes_bfloat16_numpy_leaves_become_bfloat16_tensors():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    out = to_device({"x": x}, CPU)["x"]
    assert out.dtype == torch.bfloat16
    assert out.float().tolist() == [1.5, -2.0, 3.25]


def test_object_arrays_cannot_go_to_torch():
    with pytest.raises(TransferError, match=r"batch\['o'\] \(numpy object \[1\]\)"):
        to_device({"o": np.array([object()])}, CPU)


def test_memmap_leaves(tmp_path):
    m = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="w+", shape=(3,))
    m[:] = [1, 2, 3]
    out = to_device([m, np.ones(1)], CPU)
    assert all(isinstance(t, torch.Tensor) for t in out)
    assert out[0].tolist() == [1, 2, 3]


# -- no per-leaf work when nothing moves (the CPU path) ------------------------------------


@pytest.mark.parametrize("non_blocking", [None, True, False])
def test_host_leaves_to_host_make_no_copy_and_no_call(to_calls, non_blocking):
    tensors = [torch.ones(2), torch.arange(3)]
    arrays = [np.ones(2), np.arange(3)]
    out = to_device({"t": tensors, "a": arrays}, CPU, non_blocking=non_blocking)
    assert to_calls == []
    assert all(a is b for a, b in zip(out["t"], tensors, strict=True))
    for t, a in zip(out["a"], arrays, strict=True):
        assert isinstance(t, torch.Tensor) and t.data_ptr() == a.ctypes.data


def test_upload_to_another_device_and_cast_after_it():
    # "meta" is a device every torch has: the host-to-device path without a GPU.
    meta = torch.device("meta")
    batch = {"u8": np.zeros((2, 3), np.uint8), "f32": torch.ones(4), "n": 1}
    out = to_device(batch, meta, dtype={"uint8": "float16"})
    assert out["u8"].device.type == "meta" and out["u8"].dtype == torch.float16
    assert out["u8"].shape == (2, 3)
    assert out["f32"].device.type == "meta" and out["n"] == 1


# -- dtype: the cast runs on the side that moves fewer bytes -----------------------------------


def test_growing_cast_is_copied_narrow_and_shrinking_cast_is_copied_cast(packed_inputs):
    batch = {
        "a_f32": np.linspace(0, 1, 6, dtype=np.float32),
        "b_u8": np.arange(6, dtype=np.uint8),
        "c_i64": torch.arange(6),
    }
    mapping = {np.float32: np.float16, torch.uint8: torch.float16, "int64": "int32"}
    out = to_device(batch, CPU, dtype=mapping, pack=True)
    (copied,) = packed_inputs
    # Key order a, b, c. float32 -> float16 and int64 -> int32 shrink: cast first.
    # uint8 -> float16 grows: copied as uint8, cast after the copy.
    assert [t.dtype for t in copied] == [torch.float16, torch.uint8, torch.int32]
    assert out["a_f32"].dtype == torch.float16 and out["b_u8"].dtype == torch.float16
    assert out["c_i64"].dtype == torch.int32
    assert out["b_u8"].tolist() == list(range(6))
    torch.testing.assert_close(out["a_f32"], torch.linspace(0, 1, 6).half())


def test_single_dtype_casts_floating_torch_leaves_only():
    batch = {"f": torch.ones(2, dtype=torch.float64), "i": torch.arange(2), "b": torch.ones(1) > 0}
    out = to_device(batch, CPU, dtype=torch.bfloat16)
    assert out["f"].dtype == torch.bfloat16
    assert out["i"] is batch["i"] and out["b"] is batch["b"]


# -- packing ------------------------------------------------------------------------------------


def test_pack_copy_values_dtypes_shapes_and_no_aliasing():
    leaves = mixed_small_leaves()
    out = pack_copy(leaves, CPU)
    for got, want in zip(out, leaves, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape and got.device == CPU
        assert torch.equal(got, want)
        assert not overlaps(got, want)
    # One buffer for all of them: the point of packing.
    nonempty = [t for t in out if t.numel()]
    assert len({t.untyped_storage().data_ptr() for t in nonempty}) == 1


def test_pack_true_through_to_device_on_cpu(packed_inputs):
    leaves = mixed_small_leaves()
    arrays = [np.arange(5, dtype=np.int16), np.array(2.5, np.float32), np.zeros((0,), bool)]
    tree = {"t": leaves, "np": arrays, "meta": "kept"}
    out = to_device(tree, CPU, pack=True)
    assert len(packed_inputs) == 1 and len(packed_inputs[0]) == len(leaves) + len(arrays)
    for got, want in zip(out["t"], leaves, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        assert not overlaps(got, want)
    for got, want in zip(out["np"], arrays, strict=True):
        assert isinstance(got, torch.Tensor) and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)
    leaves[4].add_(1)  # the inputs can change without changing the outputs
    assert not torch.equal(out["t"][4], leaves[4])
    assert out["meta"] == "kept"


def test_many_small_leaves_pack_equal_to_per_leaf():
    g = torch.Generator().manual_seed(1)
    tree = {
        f"k{i}": [(torch.randn(8, generator=g), torch.tensor(i)) for _ in range(50)]
        for i in range(20)
    }
    packed = to_device(tree, CPU, pack=True)
    plain = to_device(tree, CPU, pack=False)
    for a, b in zip(_flat(packed), _flat(plain), strict=True):
        assert torch.equal(a, b) and a.dtype == b.dtype


def test_leaves_that_require_grad_are_not_packed_and_keep_their_graph():
    w = torch.ones(3, requires_grad=True)
    out = to_device({"w": w, "x": torch.zeros(2)}, CPU, pack=True)
    assert out["w"] is w
    (out["w"] * 2).sum().backward()
    assert w.grad is not None


def test_large_leaves_flatten_by_cat_into_the_buffer():
    big = torch.arange(PACK_MAX_BYTES * 5, dtype=torch.uint8)  # above the C++ flatten size
    small = torch.arange(3, dtype=torch.uint8)
    out = pack_copy([big, small, big[::2]], CPU)
    assert torch.equal(out[0], big) and torch.equal(out[1], small)
    assert torch.equal(out[2], big[::2])


def _flat(tree: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for v in tree.values():
        for pair in v:
            out.extend(pair)
    return out


# -- torch containers and objects ------------------------------------------------------------


def test_nn_module_is_moved_by_its_own_to():
    pytest.importorskip("tensorflow")  # "/CPU:0" is tf's spelling of a device
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    out = to_device({"model": model, "x": np.ones(2)}, "/CPU:0")
    assert out["model"] is model


def test_torch_size_in_a_batch_comes_back_as_is_without_a_warning():
    # torch.Size is a tuple subclass with its own constructor: nothing inside it moves.
    shape = torch.ones(2, 3).shape
    out = to_device({"shape": shape, "x": np.ones(2)}, CPU, strict=True)
    assert out["shape"] is shape


def test_tensordict_keeps_batch_size_and_nesting():
    tensordict = pytest.importorskip("tensordict")
    td = tensordict.TensorDict({"a": torch.ones(3, 2), "n": {"b": torch.arange(3)}}, batch_size=[3])
    out = to_device(collections.OrderedDict(td=td), CPU, dtype="float16")
    assert type(out["td"]) is tensordict.TensorDict and out["td"].batch_size == (3,)
    assert out["td"]["a"].dtype == torch.float16 and out["td"]["n", "b"].dtype == torch.int64


# -- CUDA ----------------------------------------------------------------------------------------


@pytest.mark.cuda
def test_cuda_uploads_are_non_blocking_from_pinned_and_pageable_memory(cuda, to_calls):
    pinned = torch.arange(1 << 20, dtype=torch.uint8).pin_memory()  # 1 MiB: not packed
    pageable = torch.arange(1 << 20, dtype=torch.uint8)
    out = to_device({"p": pinned, "q": pageable}, cuda, pack=False)
    # Keys in order p, q: a blocking copy would wait for the stream's queued work.
    assert [(c[1].type, c[2], c[3]) for c in to_calls] == [
        ("cpu", (cuda,), {"non_blocking": True}),
        ("cpu", (cuda,), {"non_blocking": True}),
    ]
    # Reading on the current stream is ordered after the copy: correct at once.
    assert torch.equal(out["p"].cpu(), pinned) and torch.equal(out["q"].cpu(), pageable)


@pytest.mark.cuda
def test_cuda_download_synchronises_once_and_values_are_ready(cuda, monkeypatch):
    syncs = []
    real = torch.cuda.Stream.synchronize
    monkeypatch.setattr(torch.cuda.Stream, "synchronize", lambda s: syncs.append(s) or real(s))
    src = [torch.arange(1 << 16, device=cuda) * (i + 1) for i in range(10)]
    out = to_device({"x": src}, "cpu", non_blocking=True)
    assert len(syncs) == 1
    for i, t in enumerate(out["x"]):
        assert t.device.type == "cpu" and t.is_pinned()
        assert torch.equal(t, torch.arange(1 << 16) * (i + 1))  # no extra synchronize
    default = to_device({"x": src}, "cpu")  # blocking copies: pageable, ready, no stream sync
    assert len(syncs) == 1
    assert not any(t.is_pinned() for t in default["x"])
    assert all(torch.equal(a, b) for a, b in zip(default["x"], out["x"], strict=True))


@pytest.mark.cuda
def test_cuda_packed_transfer_of_1000_leaves_equals_per_leaf(cuda, packed_inputs):
    g = torch.Generator().manual_seed(2)
    tree = {
        f"k{i}": [(torch.randn(16, generator=g), torch.tensor(i), torch.ones(4) > 0)
                  for _ in range(25)]
        for i in range(14)
    }  # fmt: skip
    packed = to_device(tree, cuda)  # pack=None: many small leaves to CUDA are packed
    assert len(packed_inputs) == 1 and len(packed_inputs[0]) == 14 * 25 * 3
    per_leaf = to_device(tree, cuda, pack=False)
    for a, b, src in zip(_flat(packed), _flat(per_leaf), _flat(tree), strict=True):
        assert a.device == cuda and a.dtype == src.dtype and a.shape == src.shape
        assert torch.equal(a, b) and torch.equal(a.cpu(), src)


@pytest.mark.cuda
def test_cuda_uint8_is_copied_then_cast_on_the_device(cuda, to_calls):
    image = torch.randint(0, 255, (64, 3, 32, 32), dtype=torch.uint8)
    out = to_device({"image": image}, cuda, dtype={torch.uint8: torch.float16})
    copies = [c for c in to_calls if c[1].type == "cpu"]
    assert copies and all(dtype == torch.uint8 for dtype, *_ in copies)
    casts = [c for c in to_calls if c[1].type == "cuda"]
    assert casts and casts[0][0] == torch.uint8  # the cast ran on the GPU
    assert out["image"].dtype == torch.float16 and out["image"].device == cuda
    assert torch.equal(out["image"].cpu(), image.half())


@pytest.mark.cuda
def test_cuda_float32_is_cast_before_the_copy(cuda, to_calls):
    x = torch.randn(256, 256)
    out = to_device({"x": x}, cuda, dtype=torch.float16)
    copies = [c for c in to_calls if c[1].type == "cpu" and c[2] and c[2][0] == cuda]
    assert copies and all(dtype == torch.float16 for dtype, *_ in copies)
    assert torch.equal(out["x"].cpu(), x.half())


@pytest.mark.cuda
def test_cuda_leaf_already_there_is_returned_as_is_and_bad_index_is_named(cuda):
    x = torch.ones(2, device=cuda)
    assert to_device({"x": x}, "cuda")["x"] is x
    missing = torch.cuda.device_count()
    with pytest.raises(TransferError, match=rf"batch\['x'\].*cuda:{missing} is not present"):
        to_device({"x": torch.ones(1)}, f"cuda:{missing}")


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bfloat16,
        torch.float8_e4m3fn,
        pytest.param(
            torch.complex32,
            marks=pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental"),
        ),
    ],
)
def test_host_dtypes_numpy_lacks_are_gathered_by_numpy_bit_for_bit(dtype):
    from looptoolkit.adapters._torch_gather import gather_view, index_select

    bits = torch.randint(0, 256, (50, 3, 4), dtype=torch.uint8)
    leaf = bits.view(dtype)  # every bit pattern, NaNs included
    view, as_dtype = gather_view(leaf)
    assert view is not None and as_dtype == dtype  # the NumPy path, not index_select
    assert np.shares_memory(view, bits.numpy())  # a view, not a copy
    idx = np.array([49, 0, 7, 7, 3])
    (taken,) = torch_adapter.backend.take([leaf], idx)
    want = index_select(leaf, torch.from_numpy(idx))
    assert taken.dtype == dtype
    np.testing.assert_array_equal(taken.view(torch.uint8).numpy(), want.view(torch.uint8).numpy())
    chunked = [b[0] for b in torch_adapter.backend.take_batches([leaf], [idx[:2], idx[2:]])]
    np.testing.assert_array_equal(
        torch.cat(chunked).view(torch.uint8).numpy(), want.view(torch.uint8).numpy()
    )


# -- the CUDA copy policy, on the CPU ------------------------------------------------------------


class FakeCudaLeaf:
    """A tensor "on" a CUDA device: records how it is moved (the real one needs a GPU)."""

    def __init__(self, index: int, calls: list[Any]) -> None:
        self.device = torch.device("cuda", index)
        self.is_cpu = False
        self.requires_grad = False
        self.calls = calls

    def to(self, device: Any, non_blocking: bool = False) -> Any:
        self.calls.append(("to", str(device), non_blocking))
        return torch.zeros(1) if device.type == "cpu" else FakeCudaLeaf(device.index, self.calls)


@pytest.fixture
def two_gpus(monkeypatch):
    """torch sees two CUDA devices; ``.to`` and stream synchronisations are recorded."""
    calls: list[Any] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    class Stream:
        def __init__(self, device: Any) -> None:
            self.device = device

        def synchronize(self) -> None:
            calls.append(("sync", str(self.device)))

    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    real = torch.Tensor.to

    def to(self, *args, **kwargs):
        if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
            calls.append(("upload", bool(self.is_pinned()), kwargs.get("non_blocking")))
            return self
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    return calls


def test_pageable_uploads_to_cuda_do_not_block(two_gpus):
    """D7: a blocking copy is a copy plus a wait for everything the stream had queued.

    CUDA returns from a pageable host-to-device ``cudaMemcpyAsync`` once it has
    staged the source, so non-blocking is safe from pageable memory too.
    """
    to_device({"q": torch.ones(1 << 20, dtype=torch.uint8)}, "cuda:0", pack=False)
    assert two_gpus == [("upload", False, True)]
    two_gpus.clear()
    to_device({"q": torch.ones(4)}, "cuda:0", pack=False, non_blocking=False)
    assert two_gpus == [("upload", False, False)]  # what the caller asked for


def test_downloads_are_pageable_unless_asked(two_gpus):
    """D10: pinned results only on request.

    torch pins the output of a non-blocking device-to-host copy, and its caching
    host allocator keeps that memory once the result is freed.
    """
    backend = torch_adapter.backend
    backend.move(
        [FakeCudaLeaf(0, two_gpus), FakeCudaLeaf(0, two_gpus)], parse_device("cpu"), None, None
    )
    assert two_gpus == [("to", "cpu", False)] * 2  # blocking, pageable, ready: no sync
    two_gpus.clear()
    backend.move(
        [FakeCudaLeaf(0, two_gpus), FakeCudaLeaf(1, two_gpus)], parse_device("cpu"), True, None
    )
    assert two_gpus[:2] == [("to", "cpu", True)] * 2
    assert sorted(two_gpus[2:]) == [("sync", "cuda:0"), ("sync", "cuda:1")]  # once per source


def test_moves_across_devices_wait_for_nothing_on_the_host(two_gpus):
    """D12: torch orders a copy across devices after the source's current stream
    and the destination's current stream after the copy."""
    backend = torch_adapter.backend
    backend.move([FakeCudaLeaf(0, two_gpus)], parse_device("cuda:1"), None, None)
    assert two_gpus == [("to", "cuda:1", True)]  # no host synchronisation


def test_a_pinned_tensor_is_cast_into_pinned_memory(monkeypatch):
    """D11: a shrinking cast before an upload from a pinned slot stays in pinned memory.

    Cast into pageable memory, the upload that follows is one the driver stages
    through a bounce buffer. Without CUDA initialised nothing is pinned, and the
    check is not made (it would initialise CUDA).
    """
    from looptoolkit.adapters import _torch_cuda

    made = []

    def pinned_empty(shape, dtype):
        made.append((shape, dtype))
        return torch.empty(shape, dtype=dtype)

    monkeypatch.setattr(_torch_cuda, "pinned_empty", pinned_empty)
    x = torch.randn(4, 3)[:, :2]  # not contiguous: the cast still keeps its values
    backend = torch_adapter.backend
    assert backend.cast(x, "float16").equal(x.to(torch.float16)) and made == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: True)
    out = backend.cast(x, "float16")
    assert made == [((4, 2), torch.float16)]
    assert out.dtype == torch.float16 and out.equal(x.to(torch.float16))
    assert backend.cast(x, "float32") is x  # no cast, no copy
