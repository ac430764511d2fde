"""JAX backend: one device_put per move, to a device or a Sharding, casts on the right side."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from looptoolkit import TransferError, to_device  # noqa: E402
from looptoolkit.adapters import get_backend  # noqa: E402
from looptoolkit.adapters.jax import resolve_device  # noqa: E402
from looptoolkit.device import parse_device  # noqa: E402

CPU = jax.devices("cpu")[0]


@pytest.fixture
def device_put_calls(monkeypatch):
    calls = []
    real = jax.device_put

    def spy(x, device=None, **kwargs):
        calls.append((x, device))
        return real(x, device, **kwargs)

    monkeypatch.setattr(jax, "device_put", spy)
    return calls


def test_sharding_moves_all_jax_and_numpy_leaves_with_one_device_put(device_put_calls):
    sharding = jax.sharding.SingleDeviceSharding(CPU)
    batch = {
        "np": [np.arange(4, dtype=np.float32), np.ones((2, 2), np.int32)],
        "jax": (jnp.zeros(3), jnp.arange(2)),
        "other": "kept",
    }
    out = to_device(batch, sharding)
    assert len(device_put_calls) == 1
    staged, where = device_put_calls[0]
    assert where is sharding and len(staged) == 4
    for leaf in (*out["np"], *out["jax"]):
        assert isinstance(leaf, jax.Array) and leaf.sharding == sharding
    np.testing.assert_array_equal(out["np"][0], np.arange(4))
    assert out["other"] == "kept"


def test_jax_device_and_names_resolve():
    assert resolve_device(parse_device(CPU)) is CPU
    assert resolve_device(parse_device("cpu")) == CPU
    assert resolve_device(parse_device("/CPU:0")) == CPU
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(RuntimeError, match="JAX has no gpu device"):
            resolve_device(parse_device("gpu"))


def test_cast_before_copy_for_shrinking_casts_and_after_for_growing_ones(device_put_calls):
    batch = {"f32": np.ones(3, np.float32), "u8": np.arange(3, dtype=np.uint8)}
    out = to_device(batch, CPU, dtype={"float32": "float16", "uint8": "float16"})
    ((staged, _),) = device_put_calls
    # leaves in key order: f32, u8. float32 -> float16 halves the copy; uint8 is
    # copied as uint8 (1 byte) and cast on the device.
    assert [x.dtype.name for x in staged] == ["float16", "uint8"]
    assert out["f32"].dtype == jnp.float16 and out["u8"].dtype == jnp.float16
    np.testing.assert_array_equal(out["u8"], [0, 1, 2])


def test_jax_leaves_stay_jax_for_every_host_name():
    x = jnp.arange(3)
    for device in ("cpu", "/CPU:0", CPU):
        out = to_device({"x": x}, device)["x"]
        assert isinstance(out, jax.Array)
        np.testing.assert_array_equal(out, [0, 1, 2])


def test_cast_jax_cannot_hold_raises_instead_of_truncating():
    if jax.config.jax_enable_x64:
        pytest.skip("x64 enabled")
    with pytest.raises(TransferError, match=r"batch\['x'\].*jax_enable_x64"):
        to_device({"x": np.ones(2, np.float32)}, CPU, dtype="float64")


def test_bfloat16_numpy_leaves_and_casts():
    import ml_dtypes

    x = np.ones(4, ml_dtypes.bfloat16)
    out = to_device({"x": x}, CPU)["x"]
    assert out.dtype == jnp.bfloat16
    out = to_device({"y": np.ones(2, np.float32)}, CPU, dtype={np.float32: jnp.bfloat16})["y"]
    assert out.dtype == jnp.bfloat16


def test_backend_reports_dtype_names():
    assert get_backend("jax").dtype_name(jnp.zeros(1, jnp.bfloat16)) == "bfloat16"
