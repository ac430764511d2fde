"""Ragged batches are identical on NumPy, torch, JAX and tf, and keep their framework."""

from __future__ import annotations

import numpy as np
import pytest

import looptoolkit as lt

LAYOUTS = [
    (3, dict(layout=lt.PadLayout(pad_value=-1))),
    (3, dict(layout=lt.PadLayout(buckets=[4, 8, 64]))),
    (3, dict(layout="flat")),
    (None, dict(layout="pad", batch_tokens=64, group_by_length=True)),
    (None, dict(layout="flat", batch_tokens=40)),
    (2, dict(layout=lt.PackLayout(seq_len=16))),
    (2, dict(layout=lt.FitLayout(seq_len=16, long_rows="split"))),
]


def host_corpus() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    lens = rng.integers(1, 30, 40)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    values = rng.standard_normal((offsets[-1], 2)).astype(np.float32)
    return values, offsets, np.arange(40)


def to_numpy(x: object) -> object:
    if isinstance(x, int):
        return x
    return np.asarray(x)


@pytest.mark.parametrize("backend", ["torch", "jax", "tf"])
@pytest.mark.parametrize(("batch", "kwargs"), LAYOUTS)
def test_same_batches_on_every_backend(backend, batch, kwargs):
    values, offsets, labels = host_corpus()
    reference = list(
        lt.Loader({"x": lt.Ragged(values, offsets), "y": labels}, batch, seed=2, **kwargs)
    )
    if backend == "torch":
        torch = pytest.importorskip("torch")
        as_backend, kind = torch.from_numpy, torch.Tensor
    elif backend == "jax":
        jax = pytest.importorskip("jax")

        def as_backend(a):  # on the host, also where JAX's default device is a GPU
            return jax.device_put(a, jax.devices("cpu")[0])

        kind = jax.Array
    else:
        tf = pytest.importorskip("tensorflow")
        as_backend, kind = tf.convert_to_tensor, tf.Tensor
    data = {"x": lt.Ragged(as_backend(values), offsets), "y": as_backend(labels)}
    got = list(lt.Loader(data, batch, seed=2, **kwargs))
    assert len(got) == len(reference)
    for a, b in zip(got, reference, strict=True):
        assert type(a["x"]) is type(b["x"])
        for field_a, field_b in zip(a["x"], b["x"], strict=True):
            if isinstance(field_b, int):
                assert field_a == field_b
                continue
            assert isinstance(field_a, kind)
            np.testing.assert_array_equal(to_numpy(field_a), field_b)
        np.testing.assert_array_equal(to_numpy(a["y"]), b["y"])


def test_jitted_jax_step_compiles_once_per_bucket():
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 200, 500)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    tokens = rng.integers(0, 100, offsets[-1]).astype(np.int32)
    col = lt.Ragged(jax.device_put(tokens, jax.devices("cpu")[0]), offsets)
    traces = []

    @jax.jit
    def step(batch):
        traces.append(batch.values.shape)  # runs once per trace
        return (batch.values * batch.mask).sum()

    buckets = [32, 64, 128, 256]
    loader = lt.Loader(col, 16, layout=lt.PadLayout(buckets=buckets))
    total = 0
    for padded in loader:
        total += int(step(padded))
    assert 1 < len(traces) <= len(buckets)
    assert total == int(np.asarray(col.values).sum())


def test_padded_flat_packed_are_pytrees_for_to_device_and_tf_nest():
    values, offsets, _ = host_corpus()
    batch = next(iter(lt.Loader(lt.Ragged(values, offsets), 2, layout=lt.PackLayout(seq_len=8))))
    moved = lt.to_device(batch, "cpu")
    assert isinstance(moved, lt.Packed) and moved.max_seqlen == batch.max_seqlen
    tf = pytest.importorskip("tensorflow")
    assert len(tf.nest.flatten(batch)) == 5
