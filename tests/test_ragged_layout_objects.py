"""The layout objects: their own options checked, the old keywords refused, states kept.

``PadLayout``, ``FlatLayout``, ``PackLayout`` and ``FitLayout`` check their options when
built; an option of another layout is no argument of theirs; the Loader's routes refuse a
layout's option given as a keyword, naming the object to write; the names ``"pad"`` and
``"flat"`` are their default objects; objects and Loaders holding them pickle; the plan
params of a saved state are those written before the objects existed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from typing import Any

import numpy as np
import pytest

import looptoolkit as lt
from looptoolkit import FitLayout, FlatLayout, PackLayout, PadLayout


def column(n: int = 40, seed: int = 0) -> lt.Ragged:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 20, n)
    return lt.Ragged(np.arange(int(lengths.sum())), np.concatenate([[0], np.cumsum(lengths)]))


def values(batches: list[Any]) -> list[list[np.ndarray]]:
    """Every array field of every batch (not the scalar ``max_seqlen``), for comparing epochs."""
    return [[np.asarray(x) for x in b if np.ndim(x) > 0] for b in batches]


def assert_same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(values(a), values(b), strict=True):
        assert len(x) == len(y)
        for u, v in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, v)


# -- each object checks its own options ---------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: PadLayout(pad_value="x"), TypeError, "`pad_value` must be a number, got str"),
        (lambda: PadLayout(pad_value=None), TypeError, "`pad_value` must be a number"),
        (lambda: PadLayout(pad_to_multiple_of=0), ValueError, "`pad_to_multiple_of` must be >= 1"),
        (lambda: PadLayout(pad_to_multiple_of=8.0), TypeError, "`pad_to_multiple_of` must be an"),
        (lambda: PadLayout(buckets=[8, 4]), ValueError, "`buckets` must be increasing"),
        (lambda: PadLayout(buckets=[0, 4]), ValueError, "`buckets` must be increasing positive"),
        (lambda: PadLayout(buckets=[]), TypeError, "`buckets` must be a non-empty list of ints"),
        (lambda: PadLayout(buckets=[1.5, 3]), TypeError, "`buckets` must be a non-empty list"),
        (lambda: PadLayout(buckets=[8], pad_to_multiple_of=4), ValueError, "not both"),
        (lambda: PackLayout(seq_len=0), ValueError, "`seq_len` must be >= 1, got 0"),
        (lambda: PackLayout(seq_len="8"), TypeError, "`seq_len` must be an int, got str"),
        (lambda: PackLayout(seq_len=8, pad_value=[0]), TypeError, "`pad_value` must be a"),
        (lambda: FitLayout(seq_len=True), TypeError, "`seq_len` must be an int, got bool"),
        (lambda: FitLayout(seq_len=8, max_segments=0), ValueError, "`max_segments` must be >= 1"),
        (lambda: FitLayout(seq_len=8, long_rows="cut"), ValueError, "`long_rows` must be one of"),
        (lambda: FitLayout(seq_len=8, pad_value="0"), TypeError, "`pad_value` must be a number"),
    ],
)
def test_each_object_checks_its_options(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: FlatLayout(pad_value=-1), "pad_value"),
        (lambda: PadLayout(seq_len=8), "seq_len"),
        (lambda: PadLayout(long_rows="split"), "long_rows"),
        (lambda: PackLayout(seq_len=8, buckets=[8]), "buckets"),
        (lambda: PackLayout(seq_len=8, max_segments=2), "max_segments"),
        (lambda: FitLayout(seq_len=8, pad_to_multiple_of=8), "pad_to_multiple_of"),
    ],
)
def test_an_option_of_another_layout_cannot_be_written(make, name):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        make()


def test_the_packing_layouts_need_seq_len():
    with pytest.raises(TypeError, match="seq_len"):
        PackLayout()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="seq_len"):
        FitLayout()  # type: ignore[call-arg]


def test_objects_are_frozen_values_with_a_short_repr():
    a, b = PadLayout(buckets=[8, 16]), PadLayout(buckets=(np.int64(8), 16))
    assert a == b and hash(a) == hash(b) and a.buckets == (8, 16)
    assert type(a.buckets[0]) is int
    assert PadLayout() != PadLayout(pad_value=-1)
    assert PackLayout(seq_len=8) != FitLayout(seq_len=8)
    assert len({PackLayout(8), PackLayout(seq_len=8), PackLayout(16)}) == 2
    assert type(PackLayout(seq_len=np.int32(8)).seq_len) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.pad_value = 1  # type: ignore[misc]
    assert repr(PadLayout()) == "PadLayout()"
    assert repr(FlatLayout()) == "FlatLayout()"
    assert repr(PadLayout(pad_to_multiple_of=8)) == "PadLayout(pad_to_multiple_of=8)"
    assert repr(PackLayout(512)) == "PackLayout(seq_len=512)"
    shown = repr(FitLayout(512, long_rows="split", pad_value=-1))
    assert shown == "FitLayout(seq_len=512, long_rows='split', pad_value=-1)"
    assert eval(shown, vars(lt)) == FitLayout(512, long_rows="split", pad_value=-1)


@pytest.mark.parametrize(
    "layout",
    [PadLayout(pad_value=-1, buckets=[8, 32]), FlatLayout(), PackLayout(16), FitLayout(24, 3)],
)
def test_objects_pickle_and_copy_as_equal_objects(layout):
    for clone in (pickle.loads(pickle.dumps(layout)), copy.deepcopy(layout)):
        assert clone == layout and type(clone) is type(layout) and repr(clone) == repr(layout)


# -- the old keywords are refused, naming the object ---------------------------------------

OLD_KEYWORDS = [
    ({"pad_value": -1}, "`pad_value` is an option of the pad, pack and fit layouts: write "
     "`layout=looptoolkit.PadLayout(pad_value=-1)`."),
    ({"pad_to_multiple_of": 8}, "`pad_to_multiple_of` is an option of the pad layout: write "
     "`layout=looptoolkit.PadLayout(pad_to_multiple_of=8)`."),
    ({"buckets": [16, 32]}, "`buckets` is an option of the pad layout: write "
     "`layout=looptoolkit.PadLayout(buckets=[16, 32])`."),
    ({"layout": "pack", "seq_len": 512}, "`seq_len` is an option of the pack and fit layouts: "
     "write `layout=looptoolkit.PackLayout(seq_len=512)`."),
    ({"layout": "fit", "seq_len": 512, "max_segments": 4}, "`seq_len` is an option of the pack "
     "and fit layouts: write `layout=looptoolkit.FitLayout(seq_len=512, max_segments=4)`."),
    ({"max_segments": 4}, "`max_segments` is an option of the fit layout: write "
     "`layout=looptoolkit.FitLayout(seq_len=..., max_segments=4)`."),
    ({"long_rows": "split"}, "`long_rows` is an option of the fit layout: write "
     "`layout=looptoolkit.FitLayout(seq_len=..., long_rows='split')`."),
    ({"layout": PackLayout(64), "pad_value": -1}, "`pad_value` is an option of the pad, pack "
     "and fit layouts: write `layout=looptoolkit.PackLayout(seq_len=64, pad_value=-1)`."),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "message"), OLD_KEYWORDS)
def test_loader_refuses_a_layouts_option_naming_the_object(kwargs, message):
    with pytest.raises(TypeError) as caught:
        lt.Loader({"ids": column()}, 4, **kwargs)
    assert str(caught.value) == message
    # Refused before the data is read: rectangular data gets the same answer.
    with pytest.raises(TypeError, match="is an option of the"):
        lt.Loader({"x": np.arange(8)}, 4, **kwargs)


def test_the_six_keywords_left_the_signature():
    import inspect

    for route in (lt.Loader, lt.Loader.__init__):
        params = set(inspect.signature(route).parameters)
        assert {"layout", "batch_tokens", "group_by_length"} <= params
        assert not params & {
            "pad_value",
            "pad_to_multiple_of",
            "buckets",
            "seq_len",
            "max_segments",
            "long_rows",
        }


@pytest.mark.parametrize(("kwargs", "message"), OLD_KEYWORDS)
def test_make_dataloader_refuses_a_layouts_option_naming_the_object(kwargs, message):
    pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    with pytest.raises(TypeError) as caught:
        make_dataloader({"ids": column()}, 4, **kwargs)
    assert str(caught.value) == message


@pytest.mark.parametrize(("kwargs", "message"), OLD_KEYWORDS)
def test_loader_dataset_takes_no_layout_option(kwargs, message):
    # Its ragged route is a Loader (`loader_dataset(Loader(data, b, layout=...))`): it takes
    # neither `layout` nor a layout's option.
    pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    with pytest.raises(TypeError, match="unexpected keyword argument"):
        loader_dataset({"ids": column()}, 4, **kwargs)


def test_loader_dataset_yields_the_batches_of_a_loader_with_a_layout_object():
    pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    layout = FitLayout(24, long_rows="split")
    want = [b["ids"] for b in lt.Loader({"ids": column()}, 3, seed=1, layout=layout)]
    loader = lt.Loader({"ids": column()}, 3, seed=1, layout=layout)
    got = [lt.Packed(*(np.asarray(x) for x in b["ids"])) for b in loader_dataset(loader)]
    assert_same(got, want)


# -- names are the default objects ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "layout", "kwargs"),
    [
        ("pad", PadLayout(), {"batch_size": 4}),
        (None, PadLayout(), {"batch_size": 4}),
        ("flat", FlatLayout(), {"batch_size": 4}),
        ("pad", PadLayout(), {"batch_size": None, "batch_tokens": 64, "group_by_length": True}),
        ("flat", FlatLayout(), {"batch_size": None, "batch_tokens": 64}),
    ],
)
def test_a_name_is_its_default_object(name, layout, kwargs):
    data = {"ids": column()}
    by_name = list(lt.Loader(data, seed=3, layout=name, **kwargs))
    by_object = list(lt.Loader(data, seed=3, layout=layout, **kwargs))
    assert_same([b["ids"] for b in by_name], [b["ids"] for b in by_object])


def test_a_non_default_object_changes_the_batches():
    # The comparison above has teeth: options given to the object reach the batches.
    data = {"ids": column()}
    plain = [b["ids"] for b in lt.Loader(data, 4, seed=3, layout="pad")]
    rounded = [b["ids"] for b in lt.Loader(data, 4, seed=3, layout=PadLayout(pad_to_multiple_of=8))]
    assert all(b.values.shape[1] % 8 == 0 for b in rounded)
    assert any(a.values.shape != b.values.shape for a, b in zip(plain, rounded, strict=True))
    filled = lt.Loader(data, 4, seed=3, layout=PadLayout(pad_value=-7), shuffle=False)
    first = next(iter(filled))["ids"]
    assert (np.asarray(first.values)[~np.asarray(first.mask)] == -7).all()


@pytest.mark.parametrize(("name", "cls"), [("pack", "PackLayout"), ("fit", "FitLayout")])
def test_a_packing_name_alone_is_refused_naming_its_object(name, cls):
    with pytest.raises(ValueError, match=rf"needs `seq_len`.*`layout=looptoolkit\.{cls}\(seq_len"):
        lt.Loader({"ids": column()}, 4, layout=name)


@pytest.mark.parametrize(
    ("layout", "error", "match"),
    [
        ("nope", ValueError, "`layout` must be one of 'pad', 'flat', 'pack', 'fit', got 'nope'"),
        (3, TypeError, "`layout` must be a layout object .* got int"),
        (PadLayout, TypeError, "`layout` must be a layout object .* got type"),
    ],
)
def test_a_layout_of_a_wrong_kind_or_name_is_refused(layout, error, match):
    with pytest.raises(error, match=match):
        lt.Loader({"ids": column()}, 4, layout=layout)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"layout": PackLayout(8), "batch_size": None, "batch_tokens": 64}, "`batch_tokens` app"),
        ({"layout": FitLayout(32), "batch_size": 2, "group_by_length": True}, "does not apply"),
    ],
)
def test_order_options_that_do_not_go_with_a_layout_object_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lt.Loader({"ids": column()}, **kwargs)


@pytest.mark.parametrize("layout", [PadLayout(), FlatLayout(), PackLayout(8), "flat"])
def test_a_layout_for_data_without_ragged_leaves_is_refused(layout):
    with pytest.raises(ValueError, match="`layout` applies to ragged leaves"):
        lt.Loader({"x": np.arange(8)}, 4, layout=layout)


# -- Loaders holding objects pickle; saved states keep their plan params ---------------------


@pytest.mark.parametrize(
    "layout", [PadLayout(pad_value=-1, buckets=[8, 32]), PackLayout(16), FitLayout(24, 3)]
)
def test_a_loader_with_an_object_pickles_and_copies(layout):
    loader = lt.Loader({"ids": column()}, 3, seed=2, layout=layout)
    assert f"layout={layout!r}" in repr(loader)
    clones = [pickle.loads(pickle.dumps(loader)), copy.deepcopy(loader)]
    want = [b["ids"] for b in loader]
    for clone in clones:
        assert clone._args["layout"] == layout
        assert_same([b["ids"] for b in clone], want)


# The plan params a state recorded before the layout objects: the keys and values of then.
PLANS = [
    (
        PackLayout(seq_len=8),
        {},
        {"layout": "pack", "batch_tokens": None, "seq_len": 8, "group_by_length": False,
         "pad_to_multiple_of": None, "buckets": None, "max_segments": None, "long_rows": "error"},
    ),
    (
        FitLayout(seq_len=24, max_segments=3, long_rows="split"),
        {},
        {"layout": "fit", "batch_tokens": None, "seq_len": 24, "group_by_length": False,
         "pad_to_multiple_of": None, "buckets": None, "max_segments": 3, "long_rows": "split"},
    ),
    (
        PadLayout(buckets=[8, 16, 32]),
        {"group_by_length": True},
        {"layout": "pad", "batch_tokens": None, "seq_len": None, "group_by_length": True,
         "pad_to_multiple_of": None, "buckets": [8, 16, 32], "max_segments": None,
         "long_rows": "error"},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("layout", "kwargs", "plan"), PLANS)
def test_a_state_saved_with_the_plan_params_of_before_resumes(layout, kwargs, plan):
    data = {"ids": column(60)}
    loader = lt.Loader(data, 3, seed=4, layout=layout, **kwargs)
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    assert state["plan"] == plan
    # A state as it was saved before (to JSON, the plan written out), loaded into a new Loader.
    saved = json.loads(json.dumps({**state, "plan": plan}))
    resumed = lt.Loader(data, 3, seed=4, layout=layout, **kwargs)
    resumed.load_state_dict(saved)
    whole = [b["ids"] for b in lt.Loader(data, 3, seed=4, layout=layout, **kwargs)]
    assert_same([b["ids"] for b in resumed], whole[2:])
    # Another plan is still told apart.
    other = {**saved, "plan": {**plan, "layout": "pad" if plan["layout"] != "pad" else "flat"}}
    with pytest.raises(ValueError, match=r"planned with|other epoch orders"):
        lt.Loader(data, 3, seed=4, layout=layout, **kwargs).load_state_dict(other)
