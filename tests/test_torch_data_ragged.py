"""make_dataloader over ragged data: the Loader's layouts and plans behind torch's DataLoader.

Every check compares with a [`Loader`][looptoolkit.Loader] over the same random corpus and
options: the DataLoader's batches must be the Loader's, leaf for leaf, epoch for epoch.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import optree
import pytest

torch = pytest.importorskip("torch")

import looptoolkit as lt  # noqa: E402
from looptoolkit._torch_ragged import RaggedItemsDataset  # noqa: E402
from looptoolkit.torch_data import make_dataloader  # noqa: E402

LAYOUTS: list[dict[str, Any]] = [
    {"batch_size": 5, "layout": "pad"},
    {"batch_size": 5, "layout": lt.PadLayout(pad_to_multiple_of=8, pad_value=-1)},
    {"batch_size": 4, "layout": "flat"},
    {"batch_size": 3, "layout": lt.PackLayout(seq_len=16)},
    {"batch_size": 2, "layout": lt.FitLayout(seq_len=24, long_rows="split")},
    {"batch_size": None, "batch_tokens": 80, "layout": "pad", "group_by_length": True},
    {"batch_size": None, "batch_tokens": 60, "layout": "flat"},
    {"batch_size": 4, "group_by_length": True},
]


def corpus(n: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 30, size=n)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    values = rng.integers(1, 1000, size=int(offsets[-1]))
    return {"input_ids": lt.Ragged(values, offsets), "label": rng.integers(0, 5, size=n)}


def leaves(batch: Any) -> list[Any]:
    out = []
    for x in optree.tree_leaves(batch, none_is_leaf=True):
        out.append(x.numpy() if isinstance(x, torch.Tensor) else x)
    return out


def assert_same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert optree.tree_structure(g) == optree.tree_structure(w)
        for a, b in zip(leaves(g), leaves(w), strict=True):
            if isinstance(b, np.ndarray):
                assert isinstance(a, np.ndarray) and a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)
            else:
                assert a == b


@pytest.mark.parametrize("kwargs", LAYOUTS)
def test_batches_are_the_loaders_epoch_after_epoch(kwargs):
    seed = int(np.random.default_rng().integers(1000))
    data = corpus(41, seed)
    loader = lt.Loader(data, seed=seed, **kwargs)
    dl = make_dataloader(data, seed=seed, **kwargs)
    for _ in range(2):  # each pass run to its end moves both on to the next epoch
        got = list(dl)
        assert all(isinstance(x, torch.Tensor) for b in got for x in leaves_of_tensors(b))
        assert_same(got, list(loader))
    dl.set_epoch(5)
    loader.set_epoch(5)
    assert_same(list(dl), list(loader))


def leaves_of_tensors(batch: Any) -> list[Any]:
    return [x for x in optree.tree_leaves(batch) if not isinstance(x, int)]


@pytest.mark.parametrize("kwargs", [LAYOUTS[0], LAYOUTS[3], LAYOUTS[5]])
def test_workers_give_the_same_batches(kwargs):
    data = corpus(37, 3)
    want = list(lt.Loader(data, seed=3, **kwargs))
    dl = make_dataloader(data, seed=3, num_workers=2, **kwargs)
    assert_same(list(dl), want)


@pytest.mark.parametrize("kwargs", [LAYOUTS[1], LAYOUTS[2], LAYOUTS[4], LAYOUTS[5]])
def test_resume_mid_epoch_gives_the_rest(kwargs):
    seed = int(np.random.default_rng().integers(1000))
    data = corpus(53, seed)
    want = list(lt.Loader(data, seed=seed, **kwargs))
    stop = int(np.random.default_rng().integers(1, len(want)))
    dl = make_dataloader(data, seed=seed, **kwargs)
    it = iter(dl)
    head = [next(it) for _ in range(stop)]
    state = dl.state_dict()
    again = make_dataloader(data, seed=seed, **kwargs)
    again.load_state_dict(state)
    assert_same(head + list(again), want)
    # The state is the Loader's: a Loader resumes from it too.
    loader = lt.Loader(data, seed=seed, **kwargs)
    loader.load_state_dict(state)
    assert_same(list(loader), want[stop:])


@pytest.mark.parametrize("kwargs", [LAYOUTS[0], LAYOUTS[3], LAYOUTS[6]])
def test_ranks_get_the_loaders_shards(kwargs):
    data = corpus(45, 7)
    for rank in range(2):
        want = list(lt.Loader(data, seed=7, rank=rank, world_size=2, **kwargs))
        got = list(make_dataloader(data, seed=7, rank=rank, world_size=2, **kwargs))
        assert_same(got, want)


def test_torch_values_and_numpy_batches():
    data = corpus(20, 1)
    col = data["input_ids"]
    tdata = {"input_ids": lt.Ragged(torch.from_numpy(col.values), col.offsets)}
    got = list(make_dataloader(tdata, 6, shuffle=False, layout="flat"))
    want = list(lt.Loader({"input_ids": col}, 6, shuffle=False, layout="flat"))
    assert_same(got, want)
    kept = list(make_dataloader(data, 6, shuffle=False, tensors=False))
    assert isinstance(kept[0]["input_ids"].values, np.ndarray)
    assert_same(kept, list(lt.Loader(data, 6, shuffle=False)))


def test_collate_fn_sees_the_layout():
    data = corpus(12, 2)

    def to_kwargs(batch: dict[str, Any]) -> dict[str, Any]:
        ids = batch["input_ids"]
        return {"input_ids": ids.values, "attention_mask": ids.mask, "labels": batch["label"]}

    batch = next(iter(make_dataloader(data, 4, shuffle=False, collate_fn=to_kwargs)))
    want = next(iter(lt.Loader(data, 4, shuffle=False)))
    np.testing.assert_array_equal(batch["attention_mask"].numpy(), want["input_ids"].mask)


def test_dataset_pickles_and_refuses_single_rows():
    data = corpus(10, 4)
    dl = make_dataloader(data, 3, layout=lt.PackLayout(seq_len=8), shuffle=False)
    ds = dl.dataset
    assert isinstance(ds, RaggedItemsDataset) and len(ds) == 10
    item = next(iter(dl.batch_sampler))
    clone = pickle.loads(pickle.dumps(ds))
    assert_same([clone.__getitems__(item)], [ds.__getitems__(item)])
    assert "layout='pack'" in repr(ds)
    with pytest.raises(TypeError, match="a batch at a time"):
        ds[0]


def test_ragged_options_are_checked():
    data = corpus(10, 5)
    with pytest.raises(ValueError, match="applies to ragged leaves"):
        make_dataloader({"x": np.arange(4)}, 2, layout="flat")
    with pytest.raises(ValueError, match="`batch_size` is required"):
        make_dataloader({"x": np.arange(4)}, None)
    with pytest.raises(ValueError, match=r"needs `seq_len`.*looptoolkit\.PackLayout"):
        make_dataloader(data, 2, layout="pack")
    with pytest.raises(ValueError, match="not both"):
        make_dataloader(data, 2, batch_tokens=50)
    with pytest.raises(ValueError, match="cache_bytes"):
        make_dataloader(data, 2, cache_bytes=1 << 20)


def test_values_in_a_zarr_store_are_read_in_each_worker(tmp_path):
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng()
    lens = rng.integers(1, 40, size=90)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    values = rng.integers(0, 1000, size=int(offsets[-1])).astype(np.int32)
    stored = zarr.open_array(
        tmp_path / "t.zarr", mode="w", shape=values.shape, chunks=(256,), dtype="int32"
    )
    stored[:] = values
    kwargs: dict[str, Any] = {"batch_size": 4, "layout": lt.PackLayout(seq_len=32), "seed": 1}
    want = list(lt.Loader({"ids": lt.Ragged(values, offsets)}, **kwargs))
    data = {"ids": lt.Ragged(stored, offsets)}
    dl = make_dataloader(data, num_workers=2, **kwargs)
    assert_same(list(dl), want)
    # Spawned workers get the dataset pickled: the store pickles as what reopens it.
    clone = pickle.loads(pickle.dumps(dl.dataset))
    dl.set_epoch(0)
    first = next(iter(dl.batch_sampler))
    assert_same([clone.__getitems__(first)], want[:1])


@pytest.mark.parametrize("kwargs", [LAYOUTS[3], LAYOUTS[5]])
def test_planned_dataloaders_pickle_and_deep_copy_with_their_cursor(kwargs):
    data = corpus(47, 8)
    dl = make_dataloader(data, seed=4, **kwargs)
    for copied in (copy.deepcopy(dl), pickle.loads(pickle.dumps(dl))):
        copied.set_epoch(3)
        loader = lt.Loader(data, seed=4, **kwargs)
        loader.set_epoch(3)
        want = list(loader)
        assert len(copied) == len(want)
        assert_same(list(copied), want)
        assert copied.state_dict()["epoch"] == 4 and dl.state_dict()["epoch"] == 0


def test_a_state_near_the_end_of_a_longer_epoch_loads():
    # Token budgets plan a different number of batches in each epoch: a state is checked
    # against its own epoch's plan, not the one the fresh loader points at.
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 60, 300)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    data = {"ids": lt.Ragged(rng.integers(0, 9, int(offsets[-1])), offsets)}
    kwargs: dict[str, Any] = {"batch_size": None, "batch_tokens": 120, "layout": "pad"}
    counts = []
    for epoch in range(6):
        loader = lt.Loader(data, **kwargs)
        loader.set_epoch(epoch)
        counts.append(len(loader))
    longest = int(np.argmax(counts))
    assert counts[longest] > counts[0]
    dl = make_dataloader(data, **kwargs)
    dl.set_epoch(longest)
    want = list(dl)
    dl.set_epoch(longest)
    it = iter(dl)
    for _ in range(counts[longest] - 1):
        next(it)
    state = dl.state_dict()
    for fresh in (make_dataloader(data, **kwargs), lt.Loader(data, **kwargs)):
        fresh.load_state_dict(state)
        assert_same([_numpy(b) for b in fresh], [_numpy(b) for b in want[-1:]])


def _numpy(batch: Any) -> Any:
    return optree.tree_map(
        lambda x: x.numpy() if isinstance(x, torch.Tensor) else x, batch, none_is_leaf=True
    )
