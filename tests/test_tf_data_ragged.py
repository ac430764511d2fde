"""loader_dataset over ragged data: the Loader's layouts inside tf.data, with their specs.

Every check compares with a [`Loader`][looptoolkit.Loader] over the same random corpus and
options: the dataset's batches must be the Loader's, leaf for leaf, epoch for epoch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import looptoolkit as lt  # noqa: E402
from looptoolkit.tf_data import loader_dataset  # noqa: E402

LAYOUTS: list[dict[str, Any]] = [
    {"batch_size": 5, "layout": lt.PadLayout(pad_value=-1)},
    {"batch_size": 4, "layout": lt.PadLayout(buckets=[8, 16, 32])},
    {"batch_size": 4, "layout": "flat"},
    {"batch_size": 3, "layout": lt.PackLayout(seq_len=16)},
    {"batch_size": 2, "layout": lt.FitLayout(seq_len=24, long_rows="truncate")},
    {"batch_size": None, "batch_tokens": 80, "layout": "pad", "group_by_length": True},
]


def corpus(n: int, seed: int, feature: tuple[int, ...] = ()) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 30, size=n)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    values = rng.normal(size=(int(offsets[-1]), *feature)).astype(np.float32)
    return {"x": lt.Ragged(values, offsets), "label": rng.integers(0, 5, size=n)}


def assert_same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        tf.nest.assert_same_structure(g, w)
        for a, b in zip(tf.nest.flatten(g), tf.nest.flatten(w), strict=True):
            a = a.numpy()
            if isinstance(b, int):  # max_seqlen: an int64 scalar in tf.data
                assert a.shape == () and int(a) == b
            else:
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kwargs", LAYOUTS)
def test_batches_are_the_loaders_epoch_after_epoch(kwargs):
    seed = int(np.random.default_rng().integers(1000))
    data = corpus(37, seed)
    ds = loader_dataset(lt.Loader(data, seed=seed, **kwargs))
    loader = lt.Loader(data, seed=seed, **kwargs)
    for _ in range(2):  # each pass run to its end moves on to the next epoch
        assert_same(list(ds), list(loader))


def test_specs_leave_the_rows_and_the_padded_and_token_dimensions_open():
    data = corpus(20, 1, feature=(3,))
    pad = loader_dataset(lt.Loader(data, 4, layout="pad")).element_spec
    assert isinstance(pad["x"], lt.Padded)
    assert pad["x"].values.shape.as_list() == [None, None, 3]
    assert pad["x"].mask.shape.as_list() == [None, None] and pad["x"].mask.dtype == tf.bool
    assert pad["x"].lengths.shape.as_list() == [None]
    assert pad["label"].shape.as_list() == [None]
    flat = loader_dataset(lt.Loader(data, 4, layout="flat")).element_spec["x"]
    assert isinstance(flat, lt.Flat)
    assert flat.values.shape.as_list() == [None, 3] and flat.cu_seqlens.dtype == tf.int32
    assert flat.max_seqlen.shape.as_list() == []
    packed = loader_dataset(lt.Loader(data, 2, layout=lt.PackLayout(seq_len=12))).element_spec["x"]
    assert isinstance(packed, lt.Packed)
    assert packed.values.shape.as_list() == [None, 12, 3]
    assert packed.segment_ids.shape.as_list() == [None, 12]


def test_cardinality_is_known_where_every_epoch_has_as_many_batches():
    data = corpus(30, 2)
    assert int(loader_dataset(lt.Loader(data, 4)).cardinality()) == 8
    packed = lt.Loader(data, 2, layout=lt.PackLayout(seq_len=10))
    assert int(loader_dataset(packed).cardinality()) == len(packed)
    budget = loader_dataset(lt.Loader(data, None, batch_tokens=64))
    assert int(budget.cardinality()) == tf.data.UNKNOWN_CARDINALITY


def test_ragged_data_without_a_loader_is_padded():
    data = corpus(23, 3)
    ds = loader_dataset(data, 4, seed=5)
    assert_same(list(ds), list(lt.Loader(data, 4, seed=5)))


def test_the_loaders_cursor_is_shared_and_a_loaded_state_resumes():
    data = corpus(41, 4)
    kwargs = LAYOUTS[5]
    loader = lt.Loader(data, seed=2, **kwargs)
    ds = loader_dataset(loader)
    loader.set_epoch(3)
    want = lt.Loader(data, seed=2, **kwargs)
    want.set_epoch(3)
    full = list(want)
    assert_same(list(ds), full)
    assert loader.state_dict()["epoch"] == 4
    # A mid-epoch state: the next pass yields the rest of that epoch.
    stop = int(np.random.default_rng().integers(1, len(full)))
    head = lt.Loader(data, seed=2, **kwargs)
    head.set_epoch(3)
    it = iter(head)
    for _ in range(stop):
        next(it)
    resumed = lt.Loader(data, seed=2, **kwargs)
    resumed.load_state_dict(head.state_dict())
    assert_same(list(loader_dataset(resumed)), full[stop:])


def test_transform_runs_on_the_layout():
    data = corpus(12, 5)

    def to_inputs(batch: dict[str, Any]) -> tuple[Any, Any]:
        x = batch["x"]
        return {"values": x.values, "mask": x.mask}, batch["label"]

    ds = loader_dataset(lt.Loader(data, 4, shuffle=False), transform=to_inputs)
    inputs, label = next(iter(ds))
    want = next(iter(lt.Loader(data, 4, shuffle=False)))
    np.testing.assert_array_equal(inputs["mask"].numpy(), want["x"].mask)
    np.testing.assert_array_equal(label.numpy(), want["label"])


def test_ragged_arguments_are_checked():
    data = corpus(10, 6)
    with pytest.raises(TypeError, match="`order` is not offered"):
        loader_dataset(data, 2, order=lambda e: np.arange(10))
    with pytest.raises(ValueError, match="`batch_size` is required"):
        loader_dataset(data)
    with pytest.raises(TypeError, match="brings its own order"):
        loader_dataset(lt.Loader(data, 2), 3)
