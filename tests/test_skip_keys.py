"""``skip_keys``: leaves left exactly where they are, in ``to_device`` and the Loader's move."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader, to_device


@dataclasses.dataclass
class Batch:
    image: Any
    ids: Any


def test_to_device_leaves_skipped_keys_as_they_are_wherever_they_sit():
    ids = np.array(["a", "b"])
    meta = {"w": np.ones(2), "n": np.zeros(2)}
    tree = {"x": np.ones(2), "meta": meta, "nested": [Batch(np.ones(2), ids)], "gen": iter(())}
    out = to_device(tree, "cpu", dtype=np.float16, skip_keys=["ids", ("meta", "w"), "gen"])
    assert out["x"].dtype == np.float16 and out["meta"]["n"].dtype == np.float16
    assert out["nested"][0].image.dtype == np.float16
    assert out["nested"][0].ids is ids  # a field name matches anywhere
    assert out["meta"]["w"] is meta["w"]  # a key path matches its own leaf only
    assert out["gen"] is tree["gen"]  # even what to_device could not look into
    plain = to_device(tree | {"gen": 0}, "cpu", dtype=np.float16)
    assert plain["meta"]["w"].dtype == np.float16


def test_skip_keys_of_a_wrong_kind_are_refused():
    with pytest.raises(TypeError, match="`skip_keys` must be a key name"):
        to_device({"x": np.ones(2)}, "cpu", skip_keys=3)


def test_the_loader_gathers_skipped_leaves_but_does_not_move_cast_or_transform_them():
    data = {"x": np.arange(20.0).reshape(10, 2), "name": np.array([f"r{i}" for i in range(10)])}
    seen = []

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        seen.append(batch["name"])  # held out: None here
        return {"x": batch["x"] * 2, "name": batch["name"]}

    loader = Loader(
        data,
        4,
        shuffle=False,
        device="cpu",
        dtype=np.float32,
        skip_keys="name",
        transform=transform,
    )
    batches = list(loader)
    assert seen == [None, None, None]
    for batch, rows in zip(batches, ([0, 1, 2, 3], [4, 5, 6, 7], [8, 9]), strict=True):
        assert batch["x"].dtype == np.float32
        np.testing.assert_array_equal(batch["x"][:, 0], np.array(rows) * 4)
        np.testing.assert_array_equal(batch["name"], data["name"][rows])


def test_a_transform_that_changes_the_structure_under_skip_keys_is_a_clear_error():
    data = {"x": np.ones((4, 2)), "name": np.array(list("abcd"))}
    loader = Loader(data, 2, device="cpu", skip_keys="name", transform=lambda b: b["x"])
    with pytest.raises(ValueError, match="must return the batch's structure"):
        next(iter(loader))


def test_skip_keys_need_a_move():
    data = {"x": np.ones((4, 2)), "name": np.array(list("abcd"))}
    with pytest.raises(ValueError, match="`skip_keys` needs a `device`"):
        Loader(data, 2, skip_keys="name")
    with pytest.raises(ValueError, match="`resident=False`"):
        Loader(data, 2, device="cpu", resident=True, skip_keys="name")


def test_jax_jit_transform_with_string_leaves_held_out():
    jax = pytest.importorskip("jax")
    data = {"x": np.arange(8.0).reshape(4, 2), "name": np.array(list("abcd"))}
    loader = Loader(
        data,
        2,
        shuffle=False,
        device=jax.devices()[0],
        skip_keys="name",
        transform=lambda b: {"x": b["x"] + 1, "name": b["name"]},
    )
    batch = next(iter(loader))
    assert isinstance(batch["x"], jax.Array) and batch["name"].tolist() == ["a", "b"]
    np.testing.assert_array_equal(np.asarray(batch["x"])[:, 0], [1, 3])


def test_make_dataloader_refuses_skip_keys_it_could_not_honour():
    pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    with pytest.raises(TypeError, match="takes no `skip_keys`"):
        make_dataloader({"x": np.ones((4, 2))}, 2, skip_keys="x")


def test_a_tuple_of_names_is_a_collection_of_names():
    # As accelerate's `skip_keys`: ("meta", "ids") is two names, matched at any depth.
    ids = np.array([1.0, 2.0])  # cast to float16 unless skipped
    tree = {"x": np.ones(2), "ids": ids, "inner": {"meta": np.ones(2), "ids": ids}}
    for skip in (("meta", "ids"), ["meta", "ids"], {"meta", "ids"}):
        out = to_device(tree, "cpu", dtype=np.float16, skip_keys=skip)
        assert out["ids"] is ids and out["inner"]["ids"] is ids
        assert out["inner"]["meta"] is tree["inner"]["meta"]  # nested: skipped too
        assert out["x"].dtype == np.float16
    # A key path is a tuple inside a list: only the leaves under it.
    out = to_device(tree, "cpu", dtype=np.float16, skip_keys=[("inner", "meta")])
    assert out["inner"]["meta"] is tree["inner"]["meta"]
    assert out["ids"].dtype == np.float16  # not skipped
    # Names and paths mix, in a list or a tuple.
    for skip in (["x", ("inner", "meta")], ("x", ("inner", "meta"))):
        out = to_device(tree, "cpu", dtype=np.float16, skip_keys=skip)
        assert out["x"] is tree["x"] and out["inner"]["meta"] is tree["inner"]["meta"]
        assert out["ids"].dtype == np.float16


def test_an_ambiguous_tuple_is_refused_with_both_spellings():
    tree = {"meta": [np.ones(2), np.ones(2)]}
    with pytest.raises(ValueError, match=r"ambiguous.*\[\('meta', 0\)\]"):
        to_device(tree, "cpu", skip_keys=("meta", 0))
    out = to_device(tree, "cpu", dtype=np.float16, skip_keys=[("meta", 0)])
    assert out["meta"][0] is tree["meta"][0] and out["meta"][1].dtype == np.float16
    with pytest.raises(ValueError, match="ambiguous"):
        Loader({"x": np.ones((4, 2))}, 2, device="cpu", skip_keys=("x", 1))


def test_the_loader_skips_nested_keys_named_in_a_tuple():
    data = {
        "x": np.arange(20.0).reshape(10, 2),
        "meta": {"ids": np.arange(10.0), "w": np.ones(10)},
        "ids": np.arange(10.0),
    }
    loader = Loader(data, 4, shuffle=False, device="cpu", dtype=np.float16, skip_keys=("ids",))
    batch = next(iter(loader))
    assert batch["x"].dtype == np.float16 and batch["meta"]["w"].dtype == np.float16
    assert batch["ids"].dtype == np.float64 and batch["meta"]["ids"].dtype == np.float64
    np.testing.assert_array_equal(batch["meta"]["ids"], np.arange(4.0))
