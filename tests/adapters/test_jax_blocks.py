"""Block uploads to a JAX device (``_jax_blocks``), run on the CPU backend.

Host data (NumPy, memory maps, JAX arrays on the CPU) with ``device=`` a JAX
device: one ``jax.device_put`` and one jitted split per block of batches, none
per batch. The checks: the calls per epoch, the batches against the per-batch
path (``BLOCK_BYTES = 0``) and the host Loader for every order, cast, transform
and resume point, and kept batches after later blocks (on the CPU,
``device_put`` adopts an aligned NumPy array without a copy, so a reused host
buffer would show). Each check is shown to catch a planted defect.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from looptoolkit import Loader  # noqa: E402
from looptoolkit.adapters import _host, _jax_blocks, get_backend  # noqa: E402
from looptoolkit.device import parse_device  # noqa: E402

CPU = jax.devices("cpu")[0]
N = 1003  # a short last batch for every batch size below


def _data(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((N, 3)).astype(np.float32),
        "y": rng.integers(0, 10**6, N),  # int64: JAX holds it as int32 (x64 off)
        "img": rng.integers(0, 256, (N, 2, 2), dtype=np.uint8),
        "id": np.arange(N),
    }


@pytest.fixture
def puts(monkeypatch):
    """Every ``jax.device_put`` call, with the number of leaves it put."""
    calls: list[int] = []
    real = jax.device_put

    def counting(x, *args, **kwargs):
        calls.append(len(x) if isinstance(x, list) else 1)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(jax, "device_put", counting)
    return calls


@pytest.fixture
def splits(monkeypatch):
    calls: list[tuple[int, ...]] = []
    real = _jax_blocks.split

    def counting(leaves, sizes):
        calls.append(sizes)
        return real(leaves, sizes)

    monkeypatch.setattr(_jax_blocks, "split", counting)
    return calls


def _host_batches(batches: list[Any]) -> list[dict[str, np.ndarray]]:
    return [{k: np.asarray(v) for k, v in b.items()} for b in batches]


def _blocks_of(batches: int, most: int) -> int:
    """Blocks of an epoch of ``batches`` batches growing 1, 2, 4, ... ``most``."""
    sizes = itertools.accumulate(_jax_blocks.growing(most))
    return next(i + 1 for i, total in enumerate(sizes) if total >= batches)


def check_calls(loader: Loader, puts: list[int], leaves: int = 4, epochs: int = 2) -> None:
    """At most one ``device_put`` (of all ``leaves``) per block and epoch, none per batch."""
    for _ in range(epochs):
        puts.clear()
        batches = list(loader)
        k = loader.stats.block_batches
        assert k >= 2, k
        blocks = _blocks_of(len(batches), k)
        assert len(puts) <= blocks < len(batches), (len(puts), blocks, len(batches))
        assert all(n == leaves for n in puts)


def check_equal(got: list[Any], want: list[Any], dtypes: bool = True) -> None:
    """Same batches, leaf by leaf: values (and dtypes, where asked)."""
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            x, y = np.asarray(a[key]), np.asarray(b[key])
            assert x.shape == y.shape, key
            if dtypes:
                assert x.dtype == y.dtype, key
            np.testing.assert_array_equal(x, y, err_msg=key)


def check_kept(loader: Loader, host: Loader, epochs: int = 2) -> None:
    """Every batch of ``epochs`` epochs, kept to the end, still equals the host Loader's."""
    kept = [batch for _ in range(epochs) for batch in loader]
    want = [batch for _ in range(epochs) for batch in host]
    check_equal(kept, want, dtypes=False)


def _loader(data: Any, batch_size: int = 64, **kwargs: Any) -> Loader:
    return Loader(data, batch_size, device=CPU, stats=True, **kwargs)


def test_stager_for_a_jax_device_and_not_for_a_sharding():
    backend = get_backend("jax")
    leaves = [np.zeros((8, 2), np.float32), None, np.array(["a"] * 8, object)]
    stager = backend.stager(leaves, 4, parse_device(CPU), 3)
    assert isinstance(stager, _jax_blocks.JaxBlockStager)
    assert stager.positions == [0] and stager.moved
    sharding = jax.sharding.SingleDeviceSharding(CPU)
    assert backend.stager(leaves, 4, parse_device(sharding), 3) is None
    assert backend.stager([None], 4, parse_device(CPU), 3) is None


def test_one_device_put_and_one_split_per_block(puts, splits, monkeypatch):
    loader = _loader(_data())
    check_calls(loader, puts)
    assert loader.stats.block_batches == _jax_blocks.BLOCK_MAX_BATCHES
    assert len(splits) <= 2 * _blocks_of(len(loader), _jax_blocks.BLOCK_MAX_BATCHES)
    # A byte budget of 4 batches: blocks 1, 2, 4, 4, ...
    batch_bytes = 64 * sum(v[:1].nbytes for v in _data().values())
    monkeypatch.setattr(_jax_blocks, "BLOCK_BYTES", 4 * batch_bytes)
    loader = _loader(_data())
    check_calls(loader, puts)
    assert loader.stats.block_batches == 4
    splits.clear()
    list(loader)
    # 16 batches: blocks of 1, 2, 4, 4, 4 and the short last batch alone (a block of
    # one batch is its batch: no split)
    assert splits == [(64, 64), (64,) * 4, (64,) * 4, (64,) * 4]


def test_blocks_off_is_the_per_batch_path(puts, monkeypatch):
    monkeypatch.setattr(_jax_blocks, "BLOCK_BYTES", 0)
    loader = _loader(_data())
    puts.clear()
    assert len(list(loader)) == len(loader) == len(puts)
    assert loader.stats.block_batches == 0


ORDERS: dict[str, dict[str, Any]] = {
    "sequential": {"shuffle": False},
    "full": {"shuffle": True, "seed": 3},
    "grouped": {"shuffle": "grouped", "group_size": 100},
    "weighted": {"weights": np.linspace(0.1, 1, N), "num_samples": 700},
    "replacement": {"replacement": True},
    "subset": {"indices": np.arange(5, N, 3)},
    "rank": {"rank": 1, "world_size": 3},
    "rank-unpadded": {"rank": 2, "world_size": 3, "pad_shards": False},
    "drop-last": {"drop_last": True},
}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("batch_size", [1, 64, 300])
def test_batches_equal_the_per_batch_path_and_the_host_loader(order, batch_size, monkeypatch):
    data, kwargs = _data(batch_size), ORDERS[order]
    blocks = list(_loader(data, batch_size, **kwargs))
    host = list(Loader(data, batch_size, **kwargs))
    monkeypatch.setattr(_jax_blocks, "BLOCK_BYTES", 0)
    plain = list(_loader(data, batch_size, **kwargs))
    check_equal(blocks, plain)
    check_equal(blocks, host, dtypes=False)
    for batch in blocks:
        assert all(isinstance(v, jax.Array) and v.devices() == {CPU} for v in batch.values())
        assert batch["y"].dtype == jax.dtypes.canonicalize_dtype(np.int64)
    if order in ("full", "grouped", "subset", "sequential"):  # every sample once an epoch
        ids = np.concatenate([np.asarray(b["id"]) for b in blocks])
        want = np.arange(N) if order != "subset" else kwargs["indices"]
        np.testing.assert_array_equal(np.sort(ids), want)
    for batch in blocks:  # rows aligned across leaves
        ids = np.asarray(batch["id"])
        np.testing.assert_array_equal(np.asarray(batch["x"]), data["x"][ids])
        np.testing.assert_array_equal(np.asarray(batch["img"]), data["img"][ids])


CASES: dict[str, dict[str, Any]] = {
    # uint8 -> float32 grows: staged as uint8, cast on the device after the block
    "grow-cast": {"dtype": {"uint8": "float32"}},
    # float32 -> float16 shrinks: that leaf is cast on the host, outside the block
    "shrink-cast": {"dtype": "float16"},
    "skip-keys": {"skip_keys": ["img"]},
    "transform": {"transform": lambda b: {**b, "x": b["x"] * 2 + 1}},
    "thread": {"prefetch_mode": "thread", "prefetch": 3},
    "prefetch-1": {"prefetch": 1},
}


@pytest.mark.parametrize("case", CASES)
def test_casts_skip_keys_transforms_and_threads_as_today(case, monkeypatch):
    data, kwargs = _data(7), CASES[case]
    loader = _loader(data, 50, shuffle=True, seed=1, **kwargs)
    blocks = list(loader)
    assert loader.stats.block_batches >= 2
    monkeypatch.setattr(_jax_blocks, "BLOCK_BYTES", 0)
    plain = list(_loader(data, 50, shuffle=True, seed=1, **kwargs))
    check_equal(blocks, plain)
    if case == "skip-keys":
        assert all(isinstance(b["img"], np.ndarray) for b in blocks)


def test_only_host_leaves_are_staged(monkeypatch):
    data = {"np": _data()["x"], "jax": jnp.arange(N), "bf16": jnp.ones((N, 2), jnp.bfloat16)}
    stager = get_backend("jax").stager(list(data.values()), 8, parse_device(CPU), 3)
    assert stager is not None and len(stager.positions) == 3
    blocks = list(_loader(data, 70))
    monkeypatch.setattr(_jax_blocks, "BLOCK_BYTES", 0)
    check_equal(blocks, list(_loader(data, 70)))


def test_memmap_leaves(tmp_path, monkeypatch):
    data = _data(2)
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", "w+", np.float32, (N, 3))
    mm[:] = data["x"]
    mm.flush()
    data["x"] = np.load(tmp_path / "x.npy", mmap_mode="r")
    blocks = list(_loader(data, 64))
    check_equal(blocks, list(Loader(data, 64)), dtypes=False)
    monkeypatch.setattr(_jax_blocks, "BLOCK_BYTES", 0)
    check_equal(blocks, list(_loader(data, 64)))


@pytest.mark.parametrize("stop", [1, 2, 5, 6, 14])
def test_resume_mid_block_yields_exactly_the_rest(stop):
    data = _data(4)
    loader = _loader(data, 64, shuffle="grouped", group_size=128)
    whole = list(loader)
    loader.set_epoch(0)
    it = iter(loader)
    head = [next(it) for _ in range(stop)]
    state = loader.state_dict()
    del it
    resumed = _loader(data, 64, shuffle="grouped", group_size=128)
    resumed.load_state_dict(state)
    check_equal(head + list(resumed), whole)


@pytest.mark.parametrize("batch_size", [1, 64])
def test_kept_batches_keep_their_values(batch_size):
    data = _data(5)
    check_kept(_loader(data, batch_size, seed=9), Loader(data, batch_size, seed=9))


# -- planted defects: each check above catches its own


def test_planted_reused_host_block_is_caught(monkeypatch):
    buffers: dict[int, np.ndarray] = {}

    def reusing(view: np.ndarray) -> Any:
        def gather(idx: np.ndarray) -> np.ndarray:
            rows = len(idx)
            buf = buffers.get(id(view))
            if buf is None or len(buf) < rows:
                buf = buffers[id(view)] = _host.aligned_gather(view)(np.zeros(4096, np.intp))
            out = buf[:rows]
            view.take(idx, 0, out, "clip")
            return out

        return gather

    monkeypatch.setattr(_jax_blocks, "aligned_gather", reusing)
    data = _data(5)
    with pytest.raises(AssertionError):
        check_kept(_loader(data, 64, seed=9), Loader(data, 64, seed=9))


def test_planted_off_by_one_split_is_caught(monkeypatch):
    def off_by_one(leaves, sizes):
        starts = np.cumsum((0, *sizes[:-1])) + 1  # one row late
        n = leaves[0].shape[0]
        return [
            [jnp.take(leaf, np.arange(s, s + k) % n, axis=0) for leaf in leaves]
            for s, k in zip(starts, sizes, strict=True)
        ]

    monkeypatch.setattr(_jax_blocks, "split", off_by_one)
    data = _data()
    with pytest.raises(AssertionError):
        check_equal(list(_loader(data, 64)), list(Loader(data, 64)), dtypes=False)


def test_planted_device_put_per_batch_is_caught(puts, monkeypatch):
    def per_batch(self, batches):
        if self.stats is not None:
            self.stats.block_batches = self.block_batches
        for idx in batches:
            yield jax.device_put([v[idx] for v in self.views], self.device)

    monkeypatch.setattr(_jax_blocks.JaxBlockStager, "staged", per_batch)
    loader = _loader(_data())
    check_equal(list(loader), list(Loader(_data(), 64, seed=0)), dtypes=False)  # still right
    with pytest.raises(AssertionError):
        check_calls(loader, puts)


@pytest.mark.parametrize("shuffle", ["full", "grouped"])
def test_orders_made_block_by_block_at_scale(shuffle):
    # From 2**20 rows the full order is a keyed bijection and both orders are made a
    # block of positions at a time: a block upload holds many batches' index arrays
    # at once, which must not be views of a buffer the order reuses.
    n = (1 << 20) + 5
    data = {"id": np.arange(n, dtype=np.int32)}
    got = np.concatenate([np.asarray(b["id"]) for b in _loader(data, 1000, shuffle=shuffle)])
    want = np.concatenate([b["id"] for b in Loader(data, 1000, shuffle=shuffle)])
    np.testing.assert_array_equal(got, want)


_SECOND_DEVICE = """
import jax, numpy as np
from looptoolkit import Loader
from looptoolkit.adapters import _jax_blocks

cpu0, cpu1 = jax.devices("cpu")[:2]
data = {"x": np.arange(3000.0, dtype=np.float32).reshape(1000, 3),
        "id": jax.device_put(np.arange(1000), cpu0)}  # a JAX leaf on another CPU device
loader = Loader(data, 48, device=cpu1, stats=True)
blocks = list(loader)
assert loader.stats.block_batches >= 2
assert all(v.devices() == {cpu1} for b in blocks for v in b.values())
_jax_blocks.BLOCK_BYTES = 0
plain = list(Loader(data, 48, device=cpu1))
for a, b in zip(blocks, plain, strict=True):
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].devices() == b[k].devices()
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
print("ok")
"""


def test_another_device_of_several():
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SECOND_DEVICE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
