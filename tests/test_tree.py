"""looptoolkit.tree: flatten / unflatten keep every container, key paths name leaves."""

from __future__ import annotations

import collections
import dataclasses
import types
import warnings

import numpy as np
import pytest
from helpers import (
    InitDict,
    PlainDict,
    Point3,
    Record,
    WithInitFalse,
    assert_same_tree,
    corpus,
)

from looptoolkit import ContainerRebuildWarning
from looptoolkit import tree as _tree

CASES = corpus()


def identity_leaves(got, want, path):
    assert got is want, f"{path}: leaf replaced"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_flatten_unflatten_round_trip_keeps_containers(case):
    tree = case.build()
    leaves, spec = _tree.flatten(tree)
    out = _tree.unflatten(spec, leaves, strict=True)
    assert_same_tree(out, tree, identity_leaves)
    if case.lossy:  # nothing inside changed: the container itself comes back
        assert out["d"] is tree["d"]


def test_flatten_typed_reports_leaf_types():
    leaves, _, types_ = _tree.flatten_typed({"a": [np.ones(2), 1], "b": (None, "s")})
    assert types_ == {np.ndarray, int, type(None), str}
    assert len(leaves) == 4


def test_none_is_a_leaf_and_comes_back_in_place():
    leaves, spec = _tree.flatten({"a": None, "b": [None, 1]})
    assert leaves == [None, None, 1]
    assert _tree.unflatten(spec, ["x", "y", 2]) == {"a": "x", "b": ["y", 2]}


def test_leaf_paths_render_as_code():
    tree = {
        "im": {"image": np.zeros(1)},
        "seq": [np.zeros(1), Point3(np.zeros(1), 2)],
        "rec": Record(np.zeros(1), 1),
    }
    _, spec = _tree.flatten(tree)
    paths = _tree.leaf_paths(spec)
    assert "batch['im']['image']" in paths
    assert "batch['seq'][0]" in paths
    assert "batch['seq'][1].x" in paths or "batch['seq'][1][0]" in paths
    assert any(p.startswith("batch['rec']") and "features" in p for p in paths)
    assert len(paths) == len(_tree.flatten(tree)[0])


def test_dict_comes_back_in_insertion_order():
    # optree orders a dict's leaves by sorted key, and restores the insertion order.
    tree = {"z": 1, "a": 2, "m": 3}
    leaves, spec = _tree.flatten(tree)
    out = _tree.unflatten(spec, leaves)
    assert list(out) == ["z", "a", "m"] and out == tree


def test_dataclass_rebuild_runs_no_init_and_keeps_init_false_and_extra_attributes():
    w = WithInitFalse(np.ones(2))
    w.count = 5
    w.extra = "x"
    _, spec = _tree.flatten(w)
    out = _tree.unflatten(spec, [np.zeros(2), 6, "c"])
    assert type(out) is WithInitFalse and out is not w
    assert out.count == 6 and out.cache == "c" and out.extra == "x"
    np.testing.assert_array_equal(out.data, np.zeros(2))
    assert w.count == 5, "the input must not be modified"


def test_arrays_in_any_container_set_as_an_attribute_are_leaves_and_move():
    from looptoolkit import to_device

    @dataclasses.dataclass
    class Batch:
        x: object

    b = Batch(np.ones(2))
    b.history = collections.UserList([np.arange(3)])
    b.log = collections.UserList([np.zeros(1), np.ones(1)])
    b.inner = types.SimpleNamespace(w=np.full(2, 7.0))
    b.name, b.step, b.path = "run", 3, b"raw"  # plain values: metadata
    leaves, _ = _tree.flatten(b)
    assert len(leaves) == 5 and all(isinstance(leaf, np.ndarray) for leaf in leaves)
    out = to_device(b, "cpu", dtype=np.float16)
    assert out.history[0].dtype == np.int64 and out.history[0].tolist() == [0, 1, 2]
    assert type(out.log) is collections.UserList and out.log[1].dtype == np.float16
    assert out.inner.w.dtype == np.float16
    assert out.x.dtype == np.float16 and (out.name, out.step, out.path) == ("run", 3, b"raw")
    assert b.log[1].dtype == np.float64  # the input is left as it was


def test_dataclass_init_false_field_never_set_stays_unset():
    @dataclasses.dataclass
    class Lazy:
        x: object
        later: object = dataclasses.field(init=False)

    leaves, spec = _tree.flatten(Lazy(np.ones(1)))
    out = _tree.unflatten(spec, leaves)
    assert not hasattr(out, "later")
    assert out.x is leaves[0]


def test_frozen_and_slots_dataclasses_rebuild():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        a: object
        b: object

    leaves, spec = _tree.flatten(Slotted(1, np.ones(1)))
    out = _tree.unflatten(spec, ["new", leaves[1]])
    assert type(out) is Slotted and out.a == "new"
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.a = 2


def test_subclass_without_constructor_is_rebuilt_as_itself_with_its_attributes():
    d = PlainDict(b=1, a=2)
    d.meta = "m"
    leaves, spec = _tree.flatten(d)
    out = _tree.unflatten(spec, leaves)
    assert type(out) is PlainDict and list(out) == ["b", "a"] and out.meta == "m"

    class MyList(list):
        pass

    class MyDeque(collections.deque):
        pass

    for tree in (MyList([1, 2]), MyDeque([1, 2], maxlen=4)):
        leaves, spec = _tree.flatten(tree)
        out = _tree.unflatten(spec, leaves)
        assert type(out) is type(tree) and list(out) == [1, 2]
    assert out.maxlen == 4


def test_defaultdict_subclass_keeps_factory():
    class Counts(collections.defaultdict):
        pass

    tree = Counts(int, {"b": 1, "a": 2})
    leaves, spec = _tree.flatten(tree)
    out = _tree.unflatten(spec, leaves)
    assert type(out) is Counts and out.default_factory is int and list(out) == ["b", "a"]


def test_unbuildable_container_warns_and_becomes_its_base_when_a_leaf_changed():
    x, y = np.ones(3), np.zeros(3)
    tree = {"d": InitDict({"k": x, "n": 1})}
    leaves, spec = _tree.flatten(tree)
    assert leaves == [x, 1] or leaves[0] is x
    with pytest.warns(ContainerRebuildWarning, match=r"InitDict has its own constructor"):
        out = _tree.unflatten(spec, [y, 1])
    assert type(out["d"]) is dict and out["d"]["k"] is y and list(out["d"]) == ["k", "n"]


def test_unbuildable_container_under_strict_raises_type_error_naming_its_path():
    inner = InitDict({"k": np.ones(1)})
    tree = {"outer": [1, {"inner": inner}], "same": InitDict({"k": 2})}
    leaves, spec = _tree.flatten(tree)
    changed = [np.zeros(1) if isinstance(v, np.ndarray) else v for v in leaves]
    message = r"batch\['outer'\]\[1\]\['inner'\] is a .*InitDict, which cannot be rebuilt"
    with pytest.raises(TypeError, match=message):
        _tree.unflatten(spec, changed, strict=True, tree=tree)
    # strictness does not leak into the next call
    with pytest.warns(ContainerRebuildWarning):
        out = _tree.unflatten(spec, changed)
    assert out["same"] is tree["same"]  # unchanged inside: kept as it is


def test_tuple_subclass_with_its_own_constructor_and_only_values_comes_back_as_is():
    class Shape(tuple):
        def __new__(cls, dims):
            return super().__new__(cls, dims)

    shape = Shape([2, 3])
    leaves, spec = _tree.flatten({"shape": shape, "x": np.ones(1)})
    out = _tree.unflatten(spec, leaves, strict=True)
    assert out["shape"] is shape


def test_read_only_mapping_is_rebuilt_as_dict_with_a_warning():
    x = np.ones(2)
    tree = {"m": types.MappingProxyType({"k": x})}
    leaves, spec = _tree.flatten(tree)
    assert _tree.unflatten(spec, leaves)["m"] is tree["m"]
    with pytest.warns(ContainerRebuildWarning, match="mapping that cannot be rebuilt"):
        out = _tree.unflatten(spec, [x.copy()])
    assert type(out["m"]) is dict and list(out["m"]) == ["k"]
    with pytest.raises(TypeError, match=r"batch\['m'\] .*a read-only mapping"):
        _tree.unflatten(spec, [x.copy()], strict=True, tree=tree)


def test_arrays_are_never_treated_as_containers():
    leaves, _ = _tree.flatten([np.ones((2, 2)), np.float32(1)])
    assert len(leaves) == 2


def test_flatten_does_not_warn_for_buildable_trees():
    tree = {"a": PlainDict(x=np.ones(1)), "b": collections.OrderedDict(y=[1, (2,)])}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        leaves, spec = _tree.flatten(tree)
        _tree.unflatten(spec, [np.zeros(1) if isinstance(v, np.ndarray) else v for v in leaves])


NT2 = collections.namedtuple("NT2", "a b")


class NT2WithNew(NT2):
    def __new__(cls, a):
        return super().__new__(cls, a, 0)


def test_namedtuple_subclass_with_its_own_constructor_is_rebuilt_as_its_base():
    torch = pytest.importorskip("torch")
    import looptoolkit as lt

    tree = {"p": NT2WithNew(np.ones(2))}
    with pytest.warns(lt.ContainerRebuildWarning, match="NT2WithNew"):
        out = lt.to_device(tree, torch.device("cpu"))
    assert type(out["p"]) is NT2
    assert isinstance(out["p"].a, torch.Tensor) and out["p"].b == 0
    with pytest.raises(TypeError, match=r"batch\['p'\].*NT2WithNew"):
        lt.to_device(tree, torch.device("cpu"), strict=True)
    same = lt.to_device(tree, "cpu")  # nothing inside changes: the same object back
    assert same["p"] is tree["p"]
