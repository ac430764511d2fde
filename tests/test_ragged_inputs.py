"""Ragged inputs: every source becomes a Ragged leaf at construction, or is refused with the fix."""

from __future__ import annotations

import numpy as np
import pytest

import looptoolkit as lt

ROWS = [
    np.arange(3, dtype=np.int32),
    np.arange(10, 11, dtype=np.int32),
    np.arange(20, 25, dtype=np.int32),
]


def tokens_of(loader: lt.Loader, key: str | None = None) -> list[list[int]]:
    out = []
    for batch in loader:
        padded = batch if key is None else batch[key]
        values, lengths = np.asarray(padded.values), np.asarray(padded.lengths)
        out += [v[:n].tolist() for v, n in zip(values, lengths, strict=True)]
    return out


def expected() -> list[list[int]]:
    return [r.tolist() for r in ROWS]


def test_ragged_validates_offsets():
    with pytest.raises(ValueError, match="start at 0 and end at len"):
        lt.Ragged(np.arange(5), np.array([0, 2, 4]))
    with pytest.raises(ValueError, match="non-decreasing"):
        lt.Ragged(np.arange(5), np.array([0, 3, 2, 5]))
    with pytest.raises(TypeError, match="integers"):
        lt.Ragged(np.arange(5), np.array([0.0, 5.0]))
    with pytest.raises(TypeError, match="must be an array"):
        lt.Ragged([1, 2], np.array([0, 2]))
    col = lt.Ragged.from_rows(ROWS)
    assert len(col) == 3 and col.lengths.tolist() == [3, 1, 5] and col[1].tolist() == [10]
    assert "3 rows" in repr(col)


def test_from_rows_refuses_mixed_rows():
    with pytest.raises(ValueError, match=r"rows\[1\] is float64"):
        lt.Ragged.from_rows([np.zeros(2, np.int32), np.zeros(3)])


def test_list_of_variable_length_arrays_is_a_ragged_column():
    loader = lt.Loader(list(ROWS), 8, shuffle=False)
    assert tokens_of(loader) == expected()
    assert "ragged: data>" in repr(loader)  # says which leaf it read as a ragged column
    nested = lt.Loader({"ids": list(ROWS), "y": np.arange(3)}, 2)
    assert "ragged: data['ids']>" in repr(nested)


def test_a_list_of_equal_length_arrays_as_the_data_is_refused_with_both_readings():
    """``[a, b]`` of one length could be two columns or two documents: refused, both fixes named.

    A tuple is always a container of columns, and a list of 2-D columns stays one.
    """
    with pytest.raises(TypeError, match=r"Ragged\.from_rows\(data\)`.*`tuple\(data\)`"):
        lt.Loader([np.arange(4), np.arange(4) * 2], 2)
    batches = list(lt.Loader((np.arange(4), np.arange(4) * 2), 2, shuffle=False))
    assert isinstance(batches[0], tuple) and batches[0][1].tolist() == [0, 2]
    columns = list(lt.Loader([np.zeros((4, 2)), np.ones((4, 2))], 2, shuffle=False))
    assert isinstance(columns[0], list) and columns[0][1].shape == (2, 2)


def test_mismatched_columns_still_name_both_leaves():
    with pytest.raises(ValueError, match="share the leading dimension"):
        lt.Loader({"x": np.zeros((3, 2)), "y": np.zeros(4)}, 2)


def test_object_array_of_arrays_is_ragged_never_objects():
    obj = np.empty(3, dtype=object)
    obj[:] = ROWS
    batch = next(iter(lt.Loader({"ids": obj, "y": np.arange(3)}, 3, shuffle=False)))
    assert batch["ids"].values.dtype == np.int32
    assert tokens_of(lt.Loader({"ids": obj}, 3, shuffle=False), "ids") == expected()


def test_object_array_mixing_arrays_and_objects_is_refused():
    mixed = np.empty(3, dtype=object)
    mixed[:] = [np.arange(2), "text", np.arange(3)]
    with pytest.raises(TypeError, match="holds arrays and other objects"):
        lt.Loader({"s": mixed}, 2)


def test_object_array_of_python_objects_stays_a_column_of_objects():
    names = np.array(["a", "bb", None], dtype=object)
    batch = next(iter(lt.Loader({"s": names}, 3, shuffle=False)))
    assert batch["s"].tolist() == ["a", "bb", None]


def test_arrow_list_columns_and_hf_datasets():
    pa = pytest.importorskip("pyarrow")
    arr = pa.array([r.tolist() for r in ROWS], type=pa.list_(pa.int32()))
    assert tokens_of(lt.Loader({"ids": arr}, 3, shuffle=False), "ids") == expected()
    large = pa.chunked_array([arr.slice(0, 2), arr.slice(2)]).cast(pa.large_list(pa.int32()))
    assert tokens_of(lt.Loader({"ids": large}, 3, shuffle=False), "ids") == expected()
    table = pa.table({"ids": arr, "label": pa.array([0, 1, 2])})
    batch = next(iter(lt.Loader(table, 3, shuffle=False)))
    assert isinstance(batch["ids"], lt.Padded) and batch["label"].tolist() == [0, 1, 2]
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"ids": [r.tolist() for r in ROWS], "label": [5, 6, 7]})
    batch = next(iter(lt.Loader(ds, 3, shuffle=False)))
    assert batch["label"].tolist() == [5, 6, 7]
    assert [
        v[:n].tolist() for v, n in zip(batch["ids"].values, batch["ids"].lengths, strict=True)
    ] == expected()


def test_arrow_values_are_not_copied():
    pa = pytest.importorskip("pyarrow")
    arr = pa.array([r.tolist() for r in ROWS], type=pa.list_(pa.int32()))
    from looptoolkit.ragged._column import find_ragged

    col = find_ragged({"ids": arr})["ids"]
    assert np.shares_memory(col.values, np.frombuffer(arr.values.buffers()[1], dtype=np.int32))


def test_jagged_nested_tensor_is_ragged_and_checked_at_construction():
    torch = pytest.importorskip("torch")
    nt = torch.nested.nested_tensor([torch.as_tensor(r) for r in ROWS], layout=torch.jagged)
    batch = next(iter(lt.Loader({"ids": nt}, 3, shuffle=False)))
    assert isinstance(batch["ids"].values, torch.Tensor)
    got = [v[:n].tolist() for v, n in zip(batch["ids"].values, batch["ids"].lengths, strict=True)]
    assert got == expected()
    with pytest.warns(UserWarning, match="prototype stage"):
        strided = torch.nested.nested_tensor([torch.as_tensor(r) for r in ROWS])
    assert tokens_of(lt.Loader({"ids": strided}, 3, shuffle=False), "ids") == expected()


def test_tf_ragged_tensor():
    tf = pytest.importorskip("tensorflow")
    rt = tf.ragged.constant([r.tolist() for r in ROWS], dtype=tf.int32)
    batch = next(iter(lt.Loader({"ids": rt}, 3, shuffle=False)))
    assert isinstance(batch["ids"].values, tf.Tensor)
    assert tokens_of(lt.Loader({"ids": rt}, 3, shuffle=False), "ids") == expected()
    deep = tf.RaggedTensor.from_row_splits(rt, [0, 1, 3])
    with pytest.raises(TypeError, match="ragged rank 2"):
        lt.Loader({"ids": deep}, 2)


def test_ragged_options_without_ragged_data_are_refused():
    with pytest.raises(ValueError, match="`layout` applies to ragged leaves"):
        lt.Loader({"x": np.zeros((4, 2))}, 2, layout="pad")
    with pytest.raises(ValueError, match="`batch_size` is required"):
        lt.Loader({"x": np.zeros((4, 2))})


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(layout="nope"), ValueError, "`layout` must be one of"),
        (dict(layout="pack"), ValueError, r"needs `seq_len`.*PackLayout\(seq_len=\.\.\.\)"),
        (dict(layout="pad", seq_len=4), TypeError, r"PackLayout\(seq_len=4\)"),
        (dict(layout="flat", buckets=[4]), TypeError, r"PadLayout\(buckets=\[4\]\)"),
        (dict(layout=lt.PackLayout(4), group_by_length=True), ValueError, "does not apply"),
        (dict(layout=lt.FitLayout(8), batch_tokens=64), ValueError, "`batch_tokens` applies"),
        (dict(batch_tokens=64), ValueError, "not both"),
        (dict(layout=3), TypeError, "`layout` must be a layout object"),
        (dict(resident=True, device="cpu"), ValueError, "`resident` is not offered"),
        (dict(layout=lt.PackLayout(4), pad_shards=False), ValueError, "pad_shards=False"),
    ],
)
def test_bad_options_are_refused_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        lt.Loader({"ids": lt.Ragged.from_rows(ROWS)}, 2, **kwargs)


def test_ragged_leaves_of_unequal_lengths_cannot_share_a_plan():
    a = lt.Ragged.from_rows(ROWS)
    b = lt.Ragged.from_rows([np.zeros(1), np.zeros(1), np.zeros(1)])
    batch = next(iter(lt.Loader({"a": a, "b": b}, 3, shuffle=False)))
    assert batch["a"].values.shape == (3, 5) and batch["b"].values.shape == (3, 1)
    with pytest.raises(ValueError, match=r"differ at row 0"):
        lt.Loader({"a": a, "b": b}, 3, layout=lt.PackLayout(seq_len=4))


def test_device_cpu_moves_ragged_batches_and_pickles():
    import pickle

    col = lt.Ragged.from_rows(ROWS)
    loader = lt.Loader({"ids": col}, 2, device="cpu", dtype={np.int32: np.int64}, seed=3)
    batches = list(loader)
    assert batches[0]["ids"].values.dtype == np.int64
    again = pickle.loads(pickle.dumps(loader))
    assert [b["ids"].values.tolist() for b in again] != [] and len(again) == len(loader)


def test_memmap_values_are_read_a_batch_at_a_time(tmp_path):
    values = np.arange(1000, dtype=np.int32)
    path = tmp_path / "tokens.bin"
    values.tofile(path)
    mm = np.memmap(path, dtype=np.int32, mode="r")
    offsets = np.arange(0, 1001, 10)
    loader = lt.Loader({"ids": lt.Ragged(mm, offsets)}, 4, layout="flat", seed=1)
    got = np.sort(np.concatenate([b["ids"].values for b in loader]))
    np.testing.assert_array_equal(got, values)
    assert not isinstance(next(iter(loader))["ids"].values, np.memmap)


@pytest.mark.parametrize("kind", ["zarr", "hdf5"])
def test_values_in_a_chunked_store_are_read_by_whole_chunks(tmp_path, kind):
    values = np.arange(40_000, dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(np.full(800, 50))])
    if kind == "zarr":
        zarr = pytest.importorskip("zarr")
        stored = zarr.open_array(
            tmp_path / "t.zarr", mode="w", shape=values.shape, chunks=(4096,), dtype="int32"
        )
        stored[:] = values
    else:
        h5py = pytest.importorskip("h5py")
        f = h5py.File(tmp_path / "t.h5", "w")
        stored = f.create_dataset("t", data=values, chunks=(4096,), compression="gzip")
    col = lt.Ragged(stored, offsets)
    loader = lt.Loader(
        {"ids": col}, 8, layout=lt.PackLayout(seq_len=256), shuffle="grouped", group_size=64
    )
    got = np.concatenate([b["ids"].values[b["ids"].segment_ids > 0] for b in loader])
    np.testing.assert_array_equal(np.sort(got), values)
    chunks = -(-len(values) // 4096)
    assert col.values.reads <= 2 * chunks, "each chunk decoded about once per epoch"


@pytest.mark.parametrize("mode", ["inline", "thread"])
def test_transform_device_and_prefetch_take_ragged_batches(mode):
    torch = pytest.importorskip("torch")
    col = lt.Ragged.from_rows([np.arange(n, dtype=np.float32) for n in range(1, 30)])
    plain = list(lt.Loader({"ids": col}, 4, seed=3, layout="flat"))

    def double(batch):
        ids = batch["ids"]
        return {"ids": ids._replace(values=ids.values * 2)}

    loader = lt.Loader(
        {"ids": col}, 4, seed=3, layout="flat", device=torch.device("cpu"), transform=double,
        prefetch=2, prefetch_mode=mode, dtype=torch.float64,
    )  # fmt: skip
    got = list(loader)
    assert len(got) == len(plain)
    for a, b in zip(got, plain, strict=True):
        assert isinstance(a["ids"], lt.Flat) and isinstance(a["ids"].values, torch.Tensor)
        assert a["ids"].values.dtype == torch.float64
        np.testing.assert_array_equal(a["ids"].values.numpy(), b["ids"].values * 2)
        np.testing.assert_array_equal(a["ids"].cu_seqlens.numpy(), b["ids"].cu_seqlens)
        assert a["ids"].max_seqlen == b["ids"].max_seqlen


def test_values_on_an_accelerator_are_refused_when_the_column_is_made():
    """torch's meta device stands in for CUDA here: neither is the host."""
    torch = pytest.importorskip("torch")
    offsets = np.array([0, 2, 5])
    with pytest.raises(ValueError, match=r"batched on the host.*`device=` move each batch"):
        lt.Ragged(torch.empty(5, device="meta"), offsets)
    with pytest.raises(ValueError, match="batched on the host"):
        lt.Loader({"ids": lt.Ragged(torch.empty(5, device="meta"), offsets)}, 2)
    nested = torch.nested.nested_tensor(
        [torch.arange(2.0), torch.arange(3.0)], layout=torch.jagged, device="meta"
    )
    with pytest.raises(ValueError, match="batched on the host"):
        lt.Loader(nested, 2)

    from looptoolkit.ragged._column import _refuse_accelerator

    class OnGpu:  # tf names the device in a string
        device = "/job:localhost/replica:0/task:0/device:GPU:0"

    with pytest.raises(ValueError, match="device:GPU:0"):
        _refuse_accelerator(OnGpu())
    OnGpu.device = OnGpu.device.replace("GPU", "CPU")
    _refuse_accelerator(OnGpu())  # tf on the host passes
