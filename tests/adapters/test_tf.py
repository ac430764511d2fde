"""TensorFlow backend: tf.device placement, casts, tf leaves already in place kept."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from looptoolkit import TransferError, to_device  # noqa: E402
from looptoolkit.adapters import get_backend  # noqa: E402
from looptoolkit.adapters.tf import device_name  # noqa: E402
from looptoolkit.device import parse_device  # noqa: E402

HAS_GPU = bool(tf.config.list_logical_devices("GPU"))


def test_device_names():
    assert device_name(parse_device("/CPU:0")) == "/CPU:0"
    assert device_name(parse_device("cpu")) == "/CPU:0"
    if not HAS_GPU:
        with pytest.raises(RuntimeError, match=r"tf has 0 GPU device\(s\); asked for GPU:0"):
            device_name(parse_device("/GPU:0"))
    with pytest.raises(RuntimeError, match="tf has no tpu devices"):
        device_name(parse_device("tpu"))


def test_numpy_leaves_become_tf_tensors_on_the_named_device():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = to_device({"x": x, "s": "kept"}, "/CPU:0")
    assert isinstance(out["x"], tf.Tensor) and out["x"].device.endswith("CPU:0")
    np.testing.assert_array_equal(out["x"].numpy(), x)
    assert out["s"] == "kept"


def test_tf_leaf_already_on_the_device_is_returned_as_is():
    x = tf.ones(3)
    assert to_device({"x": x}, "/CPU:0")["x"] is x
    assert to_device({"x": x}, "cpu")["x"] is x


def test_casts_on_both_sides(monkeypatch):
    seen = []
    real = tf.convert_to_tensor
    monkeypatch.setattr(
        tf, "convert_to_tensor", lambda v, *a, **k: seen.append(v) or real(v, *a, **k)
    )
    batch = {"f32": np.ones(2, np.float32), "u8": np.arange(2, dtype=np.uint8)}
    out = to_device(batch, "/CPU:0", dtype={"float32": "float16", "uint8": "float16"})
    # float32 is cast on the host (fewer bytes to copy), uint8 after the copy.
    assert [v.dtype.name for v in seen] == ["float16", "uint8"]
    assert out["f32"].dtype == tf.float16 and out["u8"].dtype == tf.float16
    np.testing.assert_array_equal(out["u8"].numpy(), [0, 1])


def test_bfloat16_cast_of_numpy_leaves():
    out = to_device({"x": np.ones(2, np.float32)}, "/CPU:0", dtype={"float32": "bfloat16"})
    assert out["x"].dtype == tf.bfloat16
    out = to_device({"x": tf.ones(2)}, "/CPU:0", dtype="float16")
    assert out["x"].dtype == tf.float16


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_gpu_without_gpu_names_the_leaf():
    with pytest.raises(TransferError, match=r"batch\['im'\]\['image'\] \(numpy uint8 \[2\]\)"):
        to_device({"im": {"image": np.zeros(2, np.uint8)}}, "/GPU:0")


def test_backend_reports_dtype_names():
    assert get_backend("tf").dtype_name(tf.zeros(1, tf.bfloat16)) == "bfloat16"
