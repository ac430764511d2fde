"""The Loader's fast paths against the plain path, on random inputs.

The fast paths: C-level gather-and-build iterators (NumPy), chunked gathers
wrapped once and split per batch (torch, JAX, tf), batch-sized gathers of
leaves in any memory layout. The plain path: ``leaf[idx]`` of a NumPy copy of
every leaf, for the indices the Loader says it visits. Every sample once per
epoch, rows aligned across leaves, the same values.
"""

from __future__ import annotations

import collections
import tracemalloc
from typing import Any

import numpy as np
import optree
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from looptoolkit import Loader
from looptoolkit import tree as _tree

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Pair = collections.namedtuple("Pair", ["a", "b"])


def host(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return x.numpy()
    return np.asarray(x)


def layouts(base: np.ndarray, layout: str) -> np.ndarray:
    """``base`` (C-ordered, 2-D) in another memory layout, same values."""
    if layout == "fortran":
        return np.asfortranarray(base)
    if layout == "columns":  # a column slice of a wider array
        wide = np.repeat(base, 2, axis=1)
        return wide[:, ::2]
    if layout == "transposed":
        return np.ascontiguousarray(base.T).T
    return base


def make_tree(rng: np.random.Generator, n: int, kind: str, layout: str) -> Any:
    x = layouts(rng.standard_normal((n, 5)).astype(np.float32), layout)
    y = np.arange(n, dtype=np.int64)
    z = rng.integers(0, 255, (n, 2, 3), dtype=np.uint8)
    if kind == "dict":
        return {"y": y, "x": x, "z": z}  # keys not in sorted order
    if kind == "tuple":
        return (x, y)
    if kind == "list":
        return [y, z]
    if kind == "nested":
        return {"pair": Pair(x, y), "extra": [z]}
    return y


def check_epoch(loader: Loader, data: Any, epoch: int) -> None:
    plain_leaves, spec = _tree.flatten(data)
    plain = [np.ascontiguousarray(host(leaf)) for leaf in plain_leaves]
    batches = list(loader)
    order = loader.indices(epoch)
    assert sorted(order.tolist()) == list(range(loader.n))  # every sample once
    start = 0
    for batch in batches:
        leaves, got_spec = _tree.flatten(batch)
        assert got_spec == spec  # same containers, same key order
        idx = order[start : start + len(host(leaves[0]))]
        start += len(idx)
        for got, want in zip(leaves, plain, strict=True):
            np.testing.assert_array_equal(host(got), want[idx])
    assert start == len(order)


@SETTINGS
@given(
    n=st.integers(1, 400),
    batch_size=st.integers(1, 70),
    kind=st.sampled_from(["dict", "tuple", "list", "nested", "leaf"]),
    layout=st.sampled_from(["c", "fortran", "columns", "transposed"]),
    shuffle=st.sampled_from([False, True, "grouped"]),
    seed=st.integers(0, 5),
)
def test_numpy_fast_path_equals_the_plain_gather(n, batch_size, kind, layout, shuffle, seed):
    data = make_tree(np.random.default_rng(seed), n, kind, layout)
    loader = Loader(data, batch_size, shuffle=shuffle, seed=seed, group_size=16)
    for epoch in range(2):
        check_epoch(loader, data, epoch)
    if kind == "dict":
        assert list(next(iter(loader))) == ["y", "x", "z"]


def _to(framework: str, data: Any) -> Any:
    """``data`` with every leaf as an array of ``framework`` (int64 as int32 for JAX)."""
    if framework == "torch":
        torch = pytest.importorskip("torch")
        convert = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    elif framework == "jax":
        jnp = pytest.importorskip("jax.numpy")
        convert = lambda a: jnp.asarray(a.astype(np.int32) if a.dtype == np.int64 else a)  # noqa: E731
    else:
        tf = pytest.importorskip("tensorflow")
        convert = tf.convert_to_tensor
    return optree.tree_map(convert, data, namespace=_tree.NAMESPACE)


@pytest.mark.parametrize("framework", ["torch", "jax", "tf"])
@pytest.mark.parametrize(("n", "batch_size"), [(1, 1), (37, 5), (1000, 7), (3001, 300)])
def test_chunked_framework_paths_equal_the_plain_gather(framework, n, batch_size):
    rng = np.random.default_rng(n)
    data = _to(framework, make_tree(rng, n, "dict", "c"))
    for shuffle in (True, "grouped"):
        loader = Loader(data, batch_size, shuffle=shuffle, seed=3, group_size=64)
        for epoch in range(2):
            check_epoch(loader, data, epoch)


@pytest.mark.parametrize("framework", ["torch", "jax", "tf"])
def test_chunked_paths_resume_shard_and_drop_last_exactly(framework):
    rng = np.random.default_rng(0)
    data = _to(framework, make_tree(rng, 999, "tuple", "c"))
    for rank in range(3):
        full = Loader(data, 10, seed=1, rank=rank, world_size=3, drop_last=True)
        want = [host(b[1]) for b in full]
        assert all(len(w) == 10 for w in want)
        first_run = Loader(data, 10, seed=1, rank=rank, world_size=3, drop_last=True)
        it = iter(first_run)
        first = [host(next(it)[1]) for _ in range(7)]  # chunks gathered ahead of these
        state = first_run.state_dict()
        assert state["offset"] == 7 * 10 * 3  # consumed batches, not gathered chunks
        resumed = Loader(data, 10, seed=1, rank=rank, world_size=3, drop_last=True)
        resumed.load_state_dict(state)
        rest = [host(b[1]) for b in resumed]
        for got, expected in zip(first + rest, want, strict=True):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("layout", ["fortran", "columns", "transposed", "memmap"])
def test_no_leaf_is_copied_whole_to_serve_a_batch(layout, tmp_path):
    n, width, batch = 40_000, 32, 100
    base = np.random.default_rng(0).standard_normal((n, width)).astype(np.float32)
    if layout == "memmap":
        wide = np.lib.format.open_memmap(tmp_path / "x.npy", "w+", np.float32, (n, 2 * width))
        wide[:, :width] = base
        wide.flush()
        leaf = np.load(tmp_path / "x.npy", mmap_mode="r")[:, :width]  # a sliced memmap
    else:
        leaf = layouts(base, layout)
    assert not leaf.flags.c_contiguous
    loader = Loader({"x": leaf}, batch, seed=0)
    it = iter(loader)
    next(it)
    tracemalloc.start()
    for _ in range(20):
        got = next(it)["x"]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    batch_bytes = batch * width * 4
    assert peak < 8 * batch_bytes, f"{peak} bytes allocated for batches of {batch_bytes}"
    np.testing.assert_array_equal(got, base[loader.indices(0)[20 * batch : 21 * batch]])


def test_a_transposed_torch_tensor_is_gathered_at_a_batchs_cost():
    torch = pytest.importorskip("torch")
    from looptoolkit import GetItemsDataset

    base = torch.arange(30_000 * 16, dtype=torch.float32).reshape(16, 30_000)
    leaf = base.T  # (30_000, 16), not contiguous
    ds = GetItemsDataset({"x": leaf})
    loader = Loader({"x": leaf}, 64, seed=0)
    it = iter(loader)
    next(it)
    tracemalloc.start()
    got = next(it)["x"]
    rows = ds.__getitems__([5, 29_999, 0])["x"]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64 * 16 * 4 * 8, f"{peak} bytes for a batch of {64 * 16 * 4}"
    np.testing.assert_array_equal(got.numpy(), leaf.numpy()[loader.indices(0)[64:128]])
    np.testing.assert_array_equal(rows.numpy(), leaf.numpy()[[5, 29_999, 0]])


def test_torch_batches_of_one_chunk_do_not_overlap():
    torch = pytest.importorskip("torch")
    data = {"x": torch.zeros(3000, 4), "y": torch.arange(3000)}
    batches = list(Loader(data, 100, seed=0))
    for batch in batches[:5]:
        batch["x"] += 1  # written in place, as a training step might
    for k, batch in enumerate(batches):
        assert torch.all(batch["x"] == (1.0 if k < 5 else 0.0)), k
    np.testing.assert_array_equal(
        np.concatenate([b["y"].numpy() for b in batches]), Loader(data, 100, seed=0).indices(0)
    )


_TF_DTYPES = ["float32", "float16", "float64", "int64", "int8", "uint8", "bool", "complex64"]


@SETTINGS
@given(
    n=st.integers(1, 500),
    batch_size=st.integers(1, 70),
    dtypes=st.lists(st.sampled_from([*_TF_DTYPES, "bfloat16"]), min_size=1, max_size=3),
    width=st.integers(0, 3),
    chunk_bytes=st.sampled_from([1, 2_000, 4 << 20]),
    seed=st.integers(0, 5),
)
def test_tf_adopted_chunks_equal_the_plain_gather(n, batch_size, dtypes, width, chunk_bytes, seed):
    # Chunks gathered into aligned arrays that tf adopts (numeric dtypes) or
    # converts (bfloat16), split by count or by sizes, chunks of one batch.
    from unittest import mock

    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(seed)
    shape = (n,) if width == 0 else (n, width, 2)
    leaves = [
        tf.cast(tf.convert_to_tensor(rng.integers(0, 100, shape) * (-1) ** i), d)
        for i, d in enumerate(dtypes)
    ]
    data = (*leaves, tf.range(n, dtype=tf.int64))
    with mock.patch("looptoolkit.adapters._host.CHUNK_BYTES", chunk_bytes):
        loader = Loader(data, batch_size, seed=seed)
        for epoch in range(2):
            check_epoch(loader, data, epoch)
        for batch in loader:
            for leaf, want in zip(batch, data, strict=True):
                assert leaf.dtype == want.dtype and leaf.device.endswith("CPU:0")


def test_tf_chunks_are_adopted_aligned_and_not_reused():
    tf = pytest.importorskip("tensorflow")
    from looptoolkit.adapters import get_backend
    from looptoolkit.adapters._host import aligned_gather
    from looptoolkit.adapters.tf import _adopt

    backend = get_backend("tf")
    x = tf.reshape(tf.range(6000, dtype=tf.float32), (3000, 2))
    order = np.random.default_rng(0).permutation(3000)
    rows = [aligned_gather(np.asarray(leaf))(order[:700]) for leaf in (x, tf.range(3000))]
    assert all(r.ctypes.data % 64 == 0 for r in rows)
    for tensor, r in zip(_adopt(rows), rows, strict=True):  # taken over, not copied
        assert np.shares_memory(np.asarray(tensor), r)
    idx = [order[i : i + 100] for i in range(0, 3000, 100)]
    got = list(backend.take_batches([x, tf.range(3000)], iter(idx)))
    for (a, b), i in zip(got, idx, strict=True):  # every batch still holds its rows
        np.testing.assert_array_equal(a.numpy(), backend.take([x], i)[0].numpy())
        np.testing.assert_array_equal(b.numpy(), i)
