"""Loader on the inputs real code hands it: records, token ids, numpy ints, loops in loops.

Each test here pins down one trap that once yielded wrong batches, or none,
without an error.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest

import looptoolkit
from looptoolkit import Loader, stack_records


def _data(n: int) -> dict[str, np.ndarray]:
    return {"x": np.arange(n * 2, dtype=np.float32).reshape(n, 2), "y": np.arange(n)}


# -- per-sample records ----------------------------------------------------------------


def test_a_list_of_records_is_refused_saying_how_to_stack_it():
    records = [{"x": np.full(3, i, np.float32), "y": i} for i in range(10)]
    with pytest.raises(TypeError, match=r"data is a list of 10 per-sample records \(each a dict\)"):
        Loader(records, 4)
    with pytest.raises(TypeError, match=r"looptoolkit\.stack_records\(data\['train'\]\)"):
        Loader({"train": records}, 4)


@pytest.mark.parametrize(
    "records",
    [
        [np.full(3, i) for i in range(10)],  # more arrays than each has rows
        [np.array(float(i)) for i in range(4)],  # 0-d arrays
        [float(i) for i in range(4)],  # plain values
        [(np.full(2, i), i) for i in range(4)],  # tuples
    ],
    ids=["arrays", "zero_d", "values", "tuples"],
)
def test_other_lists_of_records_are_refused(records):
    with pytest.raises(TypeError, match="per-sample records"):
        Loader(records, 2)


def test_a_list_or_tuple_of_columns_is_still_columns():
    columns = [np.zeros((5, 3)), np.ones((5, 3))]
    assert [b[0].shape for b in Loader(columns, 2, shuffle=False)] == [(2, 3), (2, 3), (1, 3)]
    pairs = (np.zeros((5, 2)), np.arange(5))
    assert len(Loader(pairs, 2)) == 3


def test_stack_records_makes_the_columns_the_loader_batches():
    records = [{"x": np.full(3, i, np.float32), "y": i, "tag": f"s{i}"} for i in range(5)]
    columns = stack_records(records)
    assert columns["x"].shape == (5, 3) and columns["x"].dtype == np.float32
    assert columns["y"].tolist() == [0, 1, 2, 3, 4] and columns["tag"].tolist()[1] == "s1"
    (batch,) = Loader(columns, 5, shuffle=False)
    np.testing.assert_array_equal(batch["x"][:, 0], np.arange(5))


def test_stack_records_keeps_each_framework_and_container():
    torch = pytest.importorskip("torch")
    from helpers import Point

    records = [Point(torch.full((2,), i), np.int64(i)) for i in range(3)]
    columns = stack_records(records)
    assert type(columns) is Point and isinstance(columns.x, torch.Tensor)
    assert columns.x.shape == (3, 2) and columns.y.tolist() == [0, 1, 2]


def test_stack_records_names_the_field_that_cannot_be_stacked():
    with pytest.raises(ValueError, match=r"records\[0\]\['x'\] has shape \[3\] and records\[1\]"):
        stack_records([{"x": np.zeros(3)}, {"x": np.zeros(4)}])
    with pytest.raises(ValueError, match=r"`records\[1\]` has another structure"):
        stack_records([{"x": np.zeros(3)}, {"z": np.zeros(3)}])
    with pytest.raises(TypeError, match="non-empty list or tuple"):
        stack_records([])


# -- integer types ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(20,), (10, 2)])
@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_torch_unsigned_token_ids_are_gathered(dtype, shape):
    torch = pytest.importorskip("torch")
    ids = torch.arange(20).to(getattr(torch, dtype)).reshape(shape)
    batches = list(Loader({"ids": ids}, 4, seed=1))
    got = torch.cat([b["ids"] for b in batches])
    assert got.dtype == ids.dtype
    order = Loader({"ids": ids}, 4, seed=1).indices(0)
    np.testing.assert_array_equal(got.to(torch.int64).numpy(), ids.to(torch.int64).numpy()[order])


def test_state_dict_holds_plain_ints_whatever_integer_types_were_passed():
    torch = pytest.importorskip("torch")
    loader = Loader(_data(20), np.int64(4), seed=np.int64(3))
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert {type(v) for v in state.values()} <= {int, str, bool, type(None)}
    assert state[Loader.OFFSET_KEY] == 4 and loader.batch_size == 4
    assert json.loads(json.dumps(state)) == state
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == state


@pytest.mark.parametrize("integer", [np.int32, np.int64, np.uint16])
def test_batch_size_of_a_numpy_integer_type_becomes_a_python_int(integer):
    # An np.int32 batch size made the offset an np.int32, which wraps past 2**31 rows.
    loader = Loader(_data(12), integer(4), shuffle=False, rank=1, world_size=2)
    assert type(loader.batch_size) is int
    it = iter(loader)
    next(it)
    offset = loader.state_dict()[Loader.OFFSET_KEY]
    assert type(offset) is int and offset == 8


# -- independent passes, one epoch rule --------------------------------------------


def test_a_loop_nested_in_a_loop_over_the_same_loader_runs_its_own_pass():
    loader = Loader(_data(10), 4, shuffle=False)
    outer = []
    for batch in loader:
        outer.append(batch["y"].tolist())
        inner = [b["y"].tolist() for b in loader]  # a whole pass of its own
        assert inner == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert outer == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # Each inner pass finished the epoch the cursor pointed at (0, 1, 2); the outer
    # pass bound epoch 0 before the cursor moved, so its end moved nothing more.
    assert loader.state_dict()[Loader.EPOCH_KEY] == 3


def test_a_second_iterator_is_independent_and_state_describes_the_last_bound():
    loader = Loader(_data(10), 4, shuffle=False)
    first = iter(loader)
    second = iter(loader)  # never raises
    assert next(first)["y"].tolist() == [0, 1, 2, 3]
    state = loader.state_dict()
    assert (state[Loader.EPOCH_KEY], state[Loader.OFFSET_KEY]) == (0, 4)
    assert next(second)["y"].tolist() == [0, 1, 2, 3]  # its own pass over epoch 0
    assert next(second)["y"].tolist() == [4, 5, 6, 7]
    assert loader.state_dict()[Loader.OFFSET_KEY] == 8  # the pass bound last
    loader.load_state_dict(state)  # allowed while passes run; they keep their epoch
    assert next(first)["y"].tolist() == [4, 5, 6, 7]
    first.close(), second.close()
    assert [b["y"].tolist() for b in loader] == [[4, 5, 6, 7], [8, 9]]  # the loaded state
    third = iter(loader)
    assert len(third) == 3  # epoch 1, not bound yet
    del third  # dropped unstarted: it moved nothing
    np.testing.assert_array_equal(next(iter(loader))["y"], loader.indices(1)[:4])


def test_an_iterator_past_its_last_batch_does_not_block_the_next_epoch():
    loader = Loader(_data(8), 4, shuffle=False)
    it = iter(loader)
    next(it), next(it)  # every batch handed out, StopIteration not reached yet
    assert loader.state_dict()[Loader.EPOCH_KEY] == 1
    assert len(it) == 0
    loader.set_epoch(0)
    assert next(iter(loader))["y"].tolist() == [0, 1, 2, 3]


def test_zip_of_a_loader_with_itself_yields_the_same_epoch_twice():
    loader = Loader(_data(8), 4)
    pairs = list(zip(loader, loader, strict=True))
    assert len(pairs) == 2
    for a, b in pairs:
        np.testing.assert_array_equal(a["y"], b["y"])
    assert loader.state_dict()[Loader.EPOCH_KEY] == 1


# -- drop_last -------------------------------------------------------------------------


def test_drop_last_with_a_batch_larger_than_the_shard_raises_at_construction():
    with pytest.raises(ValueError, match=r"`batch_size` 8 is larger than the 5 rows, so"):
        Loader(_data(5), 8, drop_last=True)
    with pytest.raises(ValueError, match=r"the 5 rows of this shard.*at most 5"):
        Loader(_data(10), 8, drop_last=True, rank=1, world_size=2)
    assert len(Loader(_data(5), 5, drop_last=True)) == 1
    assert len(Loader(_data(5), 8)) == 1  # without drop_last: one short batch


# -- the background thread -------------------------------------------------------------


def _failing_loader(monkeypatch: Any, error: BaseException) -> Loader:
    import looptoolkit.device._move as device_module  # every batch moves through its _move_tree

    # A cast makes the move real (a move that keeps every leaf as it is is skipped).
    loader = Loader(
        _data(30), 10, device="cpu", dtype=np.float64, prefetch=2, prefetch_mode="thread"
    )

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(device_module, "_move_tree", failing)
    return loader


def test_system_exit_in_the_background_thread_keeps_its_code(monkeypatch):
    loader = _failing_loader(monkeypatch, SystemExit(3))
    with pytest.raises(SystemExit) as info:
        list(loader)
    assert info.value.code == 3 and isinstance(info.value.__cause__, SystemExit)


def test_an_exception_whose_constructor_takes_other_arguments_keeps_its_type(monkeypatch):
    class NeedsKeyword(Exception):
        def __init__(self, message: str, *, status: int) -> None:
            super().__init__(message)
            self.status = status

    loader = _failing_loader(monkeypatch, NeedsKeyword("bad batch", status=7))
    with pytest.raises(NeedsKeyword, match="bad batch") as info:
        list(loader)
    assert info.value.status == 7 and info.value.args == ("bad batch",)
    assert "background thread" in info.value.__notes__[-1]


def test_an_exception_with_its_own_new_is_raised_as_itself(monkeypatch):
    class OwnNew(Exception):
        def __new__(cls, code: int, *, reason: str) -> OwnNew:
            return super().__new__(cls, code)

        def __init__(self, code: int, *, reason: str) -> None:
            super().__init__(code)
            self.reason = reason

    error = OwnNew(5, reason="r")
    loader = _failing_loader(monkeypatch, error)
    with pytest.raises(OwnNew) as info:
        list(loader)
    assert info.value is error and info.value.reason == "r"
    assert "background thread" in info.value.__notes__[-1]


# -- the construction-time probe -------------------------------------------------------


def test_a_device_error_at_construction_shows_the_leafs_own_shape():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(looptoolkit.TransferError) as info:
        Loader({"im": {"image": np.zeros((100, 4), np.uint8)}}, 10, device="cuda")
    assert "data['im']['image'] (numpy uint8 [100, 4])" in str(info.value)
    assert info.value.path == "data['im']['image']"


# -- containers with attributes ------------------------------------------------------------


def test_attributes_of_the_data_containers_are_columns_or_metadata():
    import dataclasses

    @dataclasses.dataclass
    class Columns:
        x: Any

    data = Columns(np.arange(6))
    data.mask = np.arange(6) % 2 == 0  # type: ignore[attr-defined]  # an array: a column
    data.describe = repr  # type: ignore[attr-defined]  # anything else: metadata
    (batch,) = Loader(data, 6, shuffle=False)
    assert batch.x.tolist() == list(range(6)) and batch.mask.tolist() == [True, False] * 3
    assert batch.describe is repr


def test_a_tokenizer_output_is_batched_as_its_own_type():
    from helpers import BatchEncodingLike

    torch = pytest.importorskip("torch")
    encoding = BatchEncodingLike(
        {"input_ids": np.arange(12).reshape(6, 2), "mask": np.ones((6, 2))}, encoding="e"
    )
    (host,) = Loader(encoding, 6, shuffle=False)  # warnings are errors here
    assert type(host) is BatchEncodingLike and host._encodings == "e"
    assert host["input_ids"].tolist() == np.arange(12).reshape(6, 2).tolist()
    device = torch.device("cpu")
    for batch in Loader(encoding, 4, device=device, dtype=torch.float16):
        assert type(batch) is BatchEncodingLike and batch.moved_to is device
        assert batch["input_ids"].dtype == torch.int64 and batch["mask"].dtype == torch.float16


# -- DataLoader habits -------------------------------------------------------------------


def test_a_tensor_dataset_is_taken_as_its_tensors():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    x, y = torch.arange(20.0).reshape(10, 2), torch.arange(10)
    ds = TensorDataset(x, y)
    loader = Loader(ds, 4, shuffle=False)
    want = list(DataLoader(ds, batch_size=4))
    got = list(loader)
    assert len(got) == len(want) == 3 and loader.data is ds
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        assert torch.equal(gx, wx) and torch.equal(gy, wy)
    import pickle

    assert len(list(pickle.loads(pickle.dumps(loader)))) == 3


def test_other_datasets_are_refused_with_the_line_to_write():
    torch = pytest.importorskip("torch")

    class Samples(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> Any:
            return {"x": np.full(2, i)}

    with pytest.raises(
        TypeError, match=r"stack_records\(\[ds\[i\] for i in range\(len\(ds\)\)\]\)"
    ):
        Loader(Samples(), 2)

    class Batched:  # any object that answers `__getitems__` is a dataset too
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> Any:
            return i

        def __getitems__(self, idx: Any) -> Any:
            return idx

    with pytest.raises(TypeError, match=r"`data` is a dataset .*Batched"):
        Loader(Batched(), 2)


@pytest.mark.parametrize(
    ("name", "equivalent"),
    [
        ("num_workers", "make_dataloader"),
        ("pin_memory", '`device="cuda"`'),
        ("collate_fn", "`transform=fn`"),
        ("sampler", "`order_fn=`"),
        ("persistent_workers", "drop it"),
        ("batch_sampler", "`batch_size=`"),
        ("prefetch_factor", "`prefetch=`"),
        ("worker_init_fn", "`seed=`"),
        ("generator", "`seed=`"),
        ("timeout", "drop it"),
    ],
)
def test_dataloader_arguments_are_refused_with_the_loaders_equivalent(name, equivalent):
    with pytest.raises(TypeError, match=rf"^`Loader` takes no `{name}` \(a `DataLoader`.*"):
        Loader(_data(8), 4, **{name: 1})
    with pytest.raises(TypeError) as caught:
        Loader(_data(8), 4, **{name: 1})
    assert equivalent in str(caught.value)


def test_the_loaders_signature_repr_and_pickling_are_unchanged_by_the_check():
    import inspect
    import pickle

    params = inspect.signature(Loader).parameters
    assert list(params)[:3] == ["data", "batch_size", "shuffle"] and len(params) == 30
    loader = Loader(_data(8), 4, seed=2)
    assert repr(loader).startswith("Loader(<2 numpy leaves of 8 rows>, batch_size=4")
    assert [b["y"].tolist() for b in pickle.loads(pickle.dumps(loader))] == [
        b["y"].tolist() for b in loader
    ]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Loader(_data(8), 4, bogus=1)


def test_a_subclass_may_take_a_dataloader_name_for_itself():
    class WithWorkers(Loader):
        def __init__(self, data: Any, batch_size: int, num_workers: int = 0) -> None:
            super().__init__(data, batch_size)
            self.num_workers = num_workers

    assert WithWorkers(_data(4), 2, num_workers=3).num_workers == 3
