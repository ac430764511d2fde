"""NumPy backend: transfers on the host apply casts only; NumPy never leaves the host."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from looptoolkit._common.dtypes import as_numpy_dtype  # noqa: E402
from looptoolkit.adapters import backend_of, get_backend  # noqa: E402
from looptoolkit.device import parse_device, transfer  # noqa: E402

backend = get_backend("numpy")


def test_move_to_host_returns_uncast_leaves_as_they_are_and_casts_the_others():
    a, b = np.arange(3, dtype=np.uint8), np.ones(2)
    out = transfer(backend, [a, b], parse_device("cpu"), [None, "float16"])
    assert out[0] is a
    assert out[1].dtype == np.float16 and out[1] is not b
    np.testing.assert_array_equal(out[1], b)


def test_numpy_cannot_be_placed_on_an_accelerator():
    with pytest.raises(ValueError, match="NumPy arrays live on the host"):
        backend.move([np.ones(1)], parse_device("cuda"), None, None)


def test_memmap_and_zero_d_are_numpy_leaves(tmp_path):
    m = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="w+", shape=(4,))
    assert backend_of(m) is backend
    assert backend_of(np.array(3.0)) is backend
    assert backend_of(np.float32(3.0)) is None  # a NumPy scalar is a value, not an array
    assert backend.dtype_name(np.zeros(1, np.int16)) == "int16"


def test_as_numpy_dtype_knows_ml_dtypes():
    assert as_numpy_dtype("float32") == np.float32
    pytest.importorskip("ml_dtypes")
    assert as_numpy_dtype("bfloat16").name == "bfloat16"
    x = np.ones(2, np.float32)
    out = transfer(backend, [x], parse_device("cpu"), ["bfloat16"])[0]
    assert out.dtype.name == "bfloat16"


def test_host_chunks_cut_gather_and_split_every_batch_once():
    from looptoolkit.adapters import chunked, split_chunks

    assert [len(c) for c in chunked(iter(range(7)), 3)] == [3, 3, 1]
    assert list(chunked(iter([]), 3)) == []
    x = np.arange(40).reshape(20, 2)
    batches = [np.array([5, 1, 19]), np.array([0]), np.array([7, 7]), np.array([3, 2, 4])]
    seen = []

    def gather(view):  # a gather of the caller's choosing, one per view
        seen.append(view.shape)
        return lambda idx: view[idx] * 10

    out = split_chunks(
        [x, x[:, 0]],
        iter(batches),
        lambda rows: rows,
        lambda rows, sizes: zip(*(np.split(r, np.cumsum(sizes)[:-1]) for r in rows), strict=True),
        gather,
    )
    got = list(out)
    assert seen == [(20, 2), (20,)]
    assert len(got) == len(batches)
    for (a, b), idx in zip(got, batches, strict=True):
        np.testing.assert_array_equal(a, x[idx] * 10)
        np.testing.assert_array_equal(b, x[idx, 0] * 10)
