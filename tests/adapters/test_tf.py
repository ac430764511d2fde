"""TensorFlow backend: tf.device placement, casts, tf leaves already in place kept."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from looptoolkit import TransferError, to_device  # noqa: E402
from looptoolkit.adapters import get_backend  # noqa: E402
from looptoolkit.adapters.tf import device_name  # noqa: E402
from looptoolkit.device import parse_device  # noqa: E402

HAS_GPU = bool(tf.config.list_physical_devices("GPU"))  # asking starts no runtime


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


_SHRINK_BEFORE_CROSSING = textwrap.dedent(
    """
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from looptoolkit import to_device
    crossing = []
    real = tf.identity
    tf.identity = lambda x, *a, **k: crossing.append((x.dtype.name, x.device)) or real(x, *a, **k)
    with tf.device("/CPU:0"):
        x = tf.fill((4, 3), 1.5)
        y = tf.constant([0, 1, 2, 3], tf.uint8)
    out = to_device({"x": x, "y": y}, "/CPU:1", dtype={"float32": "float16", "uint8": "float32"})
    print(crossing)
    print(out["x"].dtype.name, out["x"].device)
    print(out["y"].dtype.name, out["y"].device, out["y"].numpy().tolist())
    """
)


def test_shrinking_cast_of_a_tf_leaf_runs_on_its_own_device_before_the_copy():
    # Two logical CPUs stand in for two devices; they must be set up before tf
    # starts, hence the fresh interpreter.
    result = subprocess.run(
        [sys.executable, "-c", _SHRINK_BEFORE_CROSSING],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    crossing, x, y = result.stdout.strip().splitlines()[-3:]
    src, dst = "/job:localhost/replica:0/task:0/device:CPU:0", "device:CPU:1"
    # float32 -> float16 is cast on CPU:0, then copied narrow; uint8 is copied, then cast.
    assert crossing == repr([("float16", src), ("uint8", src)])
    assert x.startswith("float16 ") and x.endswith(dst)
    assert y.startswith("float32 ") and dst in y and y.endswith("[0.0, 1.0, 2.0, 3.0]")


def test_take_of_leaves_numpy_cannot_view_in_lists_of_any_length():
    # A string leaf keeps the whole list off the NumPy path: one tf.function,
    # traced per list length, gathers them all.
    backend = get_backend("tf")
    words = tf.constant(["a", "b", "c", "d"])
    nums = tf.constant([[0, 1], [2, 3], [4, 5], [6, 7]])
    idx = np.array([3, 0, 3])
    for leaves in ([words], [words, nums], [nums, words, words], [words]):
        got = backend.take(leaves, idx)
        assert len(got) == len(leaves)
        for g, leaf in zip(got, leaves, strict=True):
            np.testing.assert_array_equal(g.numpy(), leaf.numpy()[idx])


def test_drop_padding_takes_a_tf_mask_and_tf_leaves():
    from looptoolkit.distributed import drop_padding

    batch = {"x": tf.constant([[0, 1], [2, 3], [4, 5]]), "n": np.arange(3)}
    out = drop_padding(batch, tf.constant([True, False, True]))
    np.testing.assert_array_equal(out["x"].numpy(), [[0, 1], [4, 5]])
    np.testing.assert_array_equal(out["n"], [0, 2])
    with pytest.raises(ValueError, match="1-D boolean"):
        drop_padding(batch, tf.constant([1, 0, 1]))


def test_host_paths_do_not_start_tfs_gpu_runtime(monkeypatch):
    """D5: listing logical devices starts tf's runtime, which maps nearly all GPU memory.

    A gather of tf host data, a move to ``"/CPU:0"`` and a synchronisation of the
    host must not ask for them (``list_physical_devices`` starts nothing).
    """
    from looptoolkit import Loader

    def refuse(*args, **kwargs):
        raise AssertionError("tf.config.list_logical_devices called on a host path")

    monkeypatch.setattr(tf.config, "list_logical_devices", refuse)
    data = {"x": tf.constant(np.arange(40.0).reshape(20, 2)), "y": np.arange(20)}
    batches = list(Loader(data, 4, seed=0, device="/CPU:0", prefetch=2))
    assert len(batches) == 5 and all(isinstance(b["y"], tf.Tensor) for b in batches)
    to_device({"a": np.ones(3)}, "/CPU:0")
    get_backend("tf").synchronize(parse_device("/CPU:0"))
