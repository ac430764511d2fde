"""GetItemsDataset and make_dataloader: batched fetch behind torch's DataLoader."""

from __future__ import annotations

import signal

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from looptoolkit import GetItemsDataset, Loader  # noqa: E402
from looptoolkit.order import Order  # noqa: E402
from looptoolkit.torch_data import OrderBatchSampler, make_dataloader  # noqa: E402


def make_data(n: int) -> dict[str, np.ndarray]:
    return {
        "x": np.repeat(np.arange(n, dtype=np.float32)[:, None], 3, axis=1),
        "y": np.arange(n, dtype=np.int64),
    }


def test_len_getitem_getitems():
    data = make_data(20)
    ds = GetItemsDataset(data)
    assert len(ds) == 20
    row = ds[7]
    assert row["x"].tolist() == [7.0, 7.0, 7.0] and int(row["y"]) == 7
    assert int(ds[-1]["y"]) == 19
    with pytest.raises(IndexError, match="out of range"):
        ds[20]
    with pytest.raises(TypeError, match="`index` must be an int"):
        ds["a"]  # type: ignore[index]
    batch = ds.__getitems__([3, 0, 19])
    assert batch["y"].tolist() == [3, 0, 19]
    np.testing.assert_array_equal(batch["x"][:, 0], [3, 0, 19])
    with pytest.raises(IndexError, match="out of range"):
        ds.__getitems__([1, 20])
    assert repr(ds) == "GetItemsDataset(<2 numpy leaves of 20 rows>)"


def test_getitems_equals_the_loaders_rows():
    data = {k: torch.from_numpy(v) for k, v in make_data(33).items()}
    ds = GetItemsDataset(data)
    loader = Loader(data, 8, seed=4)
    for idx, batch in zip(Order(33, 8, seed=4).epoch(0), loader, strict=True):
        got = ds.__getitems__(idx.tolist())
        assert isinstance(got["x"], torch.Tensor)
        torch.testing.assert_close(got["x"], batch["x"])
        torch.testing.assert_close(got["y"], batch["y"])


def test_tensordict_rows():
    tensordict = pytest.importorskip("tensordict")
    base = make_data(10)
    td = tensordict.TensorDict({k: torch.from_numpy(v) for k, v in base.items()}, batch_size=[10])
    ds = GetItemsDataset(td)
    row = ds[4]
    assert isinstance(row, tensordict.TensorDict) and tuple(row.batch_size) == ()
    batch = ds.__getitems__([1, 2, 3])
    assert tuple(batch.batch_size) == (3,) and batch["y"].tolist() == [1, 2, 3]


@pytest.mark.parametrize("shuffle", [False, True, "grouped"])
def test_make_dataloader_yields_the_order_s_rows(shuffle):
    data = make_data(50)
    dl = make_dataloader(data, 7, shuffle=shuffle, seed=3, group_size=8, num_workers=0)
    assert isinstance(dl.batch_sampler, OrderBatchSampler)
    assert len(dl) == 8
    order = Order(50, 7, shuffle=shuffle, seed=3, group_size=8)
    for epoch in range(2):
        batches = list(dl)
        assert len(batches) == 8
        for batch, idx in zip(batches, order.epoch(epoch), strict=True):
            assert batch["y"].tolist() == idx.tolist()
            np.testing.assert_array_equal(batch["x"][:, 0], idx)
    dl.batch_sampler.set_epoch(0)
    first = list(dl)
    loader_batches = list(Loader(data, 7, shuffle=shuffle, seed=3, group_size=8))
    for a, b in zip(first, loader_batches, strict=True):
        np.testing.assert_array_equal(a["y"], b["y"])


def test_make_dataloader_shards_and_drop_last():
    data = make_data(23)
    for rank in range(2):
        dl = make_dataloader(data, 4, seed=1, rank=rank, world_size=2, drop_last=True)
        order = Order(23, 4, seed=1, rank=rank, world_size=2, drop_last=True)
        got = [b["y"].tolist() for b in dl]
        assert got == [idx.tolist() for idx in order.epoch(0)]
        assert all(len(b) == 4 for b in got)


def test_make_dataloader_passes_dataloader_options():
    dl = make_dataloader(make_data(10), 5, shuffle=False, timeout=0)
    assert [b["y"].tolist() for b in dl] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_plain_dataloader_with_keep_batch_gathers_whole_batches():
    from torch.utils.data import DataLoader

    from looptoolkit.torch_data import keep_batch

    n = 37
    data = {"x": np.arange(n * 2).reshape(n, 2), "y": torch.arange(n)}
    calls = []
    ds = GetItemsDataset(data)
    original = ds.__getitems__

    def spy(indices):
        calls.append(len(indices))
        return original(indices)

    ds.__getitems__ = spy
    gen = torch.Generator().manual_seed(0)
    dl = DataLoader(ds, batch_size=8, shuffle=True, generator=gen, collate_fn=keep_batch)
    seen = []
    for batch in dl:
        assert np.array_equal(batch["x"][:, 0] // 2, batch["y"].numpy())
        seen.extend(batch["y"].tolist())
    assert sorted(seen) == list(range(n))
    assert calls == [8, 8, 8, 8, 5]


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64, torch.bfloat16])
def test_getitems_gathers_dtypes_index_select_or_numpy_lack(dtype):
    ids = torch.arange(10).to(dtype)
    batch = GetItemsDataset({"ids": ids}).__getitems__([7, 2, 2])
    assert batch["ids"].dtype == dtype
    assert batch["ids"].to(torch.int64).tolist() == [7, 2, 2]


def test_a_list_of_records_is_refused_by_the_dataset_too():
    records = [{"x": np.zeros(2), "y": i} for i in range(4)]
    with pytest.raises(TypeError, match=r"stack_records\(data\)"):
        GetItemsDataset(records)


def test_make_dataloader_refuses_an_epoch_drop_last_would_empty():
    with pytest.raises(ValueError, match="drops every batch"):
        make_dataloader(make_data(5), 8, drop_last=True)


def test_a_pass_dropped_early_receives_its_spawned_workers_batches_before_they_stop():
    # A spawned worker stopped while its last batch is still being sent can abort as its
    # interpreter exits (torch then raises "killed by signal: Aborted" in the iterator's
    # __del__): a pass stopped early receives what its workers were asked for first, and
    # they exit cleanly. Checked on the state, not by waiting for an abort (rare here).
    dl = make_dataloader(make_data(100), 10, num_workers=2, multiprocessing_context="spawn")
    for stop in ("close", "drop"):
        ahead = iter(dl)
        next(ahead)
        it = ahead._it  # torch's multi-process iterator: 2 batches a worker asked for
        assert it._send_idx - it._rcvd_idx == 2 * 2
        if stop == "close":
            ahead.close()
        else:
            del ahead
        assert it._shutdown and it._send_idx == it._rcvd_idx and it._tasks_outstanding == 0
        # None aborted (torch's shutdown terminates one still running after 5 s: SIGTERM).
        assert -signal.SIGABRT not in [w.exitcode for w in it._workers]
        assert dl.state_dict()["epoch"] == 0  # the batches received moved no epoch
