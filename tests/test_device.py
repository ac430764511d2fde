"""looptoolkit.to_device: the DESIGN.md contract, on every container and every framework."""

from __future__ import annotations

import collections
import copy
import dataclasses
import threading
import warnings
from typing import Any

import numpy as np
import pytest
from helpers import (
    FrozenRecord,
    InitDict,
    Movable,
    Point,
    Record,
    assert_same_tree,
    corpus,
    cpu_devices,
    expected_framework,
    framework_of,
    installed,
    leaf_checker,
    optional,
    to_framework,
    to_numpy,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from looptoolkit import ContainerRebuildWarning, TransferError, to_device
from looptoolkit._common.dtypes import cast_before_copy, dtype_name
from looptoolkit._common.target import Target
from looptoolkit.device import parse_device

CASES = corpus()
DEVICES = cpu_devices()


# -- every container, every framework, every way to name the host ------------------------


@pytest.mark.parametrize("device", [d for _, d in DEVICES], ids=[n for n, _ in DEVICES])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_moves_to_host_keeping_structure_types_and_values(case, device):
    tree = case.build()
    if case.lossy and framework_of(tree["d"]["k"]) == expected_framework("numpy", device):
        out = to_device(tree, device, strict=True)
        assert out["d"] is tree["d"]  # nothing inside changed: nothing to rebuild
        return
    if case.lossy:
        with pytest.warns(ContainerRebuildWarning):
            out = to_device(tree, device)
        assert type(out["d"]) is dict  # rebuilt as its base, its array still moved
        leaf_checker(device)(out["d"]["k"], tree["d"]["k"], "batch['d']['k']")
        return
    out = to_device(tree, device)
    assert_same_tree(out, tree, leaf_checker(device))


def test_numpy_leaves_go_to_the_framework_the_device_names():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert type(to_device(x, "cpu")) is np.ndarray
    assert to_device(x, "cpu") is x  # nothing to do on the host
    for name, device in DEVICES:
        out = to_device({"x": x}, device)["x"]
        want = {"str_cpu": "numpy", "torch_device": "torch", "jax_device": "jax"}
        assert framework_of(out) == want.get(name, "tf"), name
        np.testing.assert_array_equal(to_numpy(out), x)


def test_non_array_leaves_are_returned_as_they_are():
    leaves = [1, 2.5, "s", b"b", None, True, np.float32(2), object(), int, 10**30]
    out = to_device(list(leaves), "cpu", dtype="float16")
    assert all(a is b for a, b in zip(out, leaves, strict=True))


# -- hypothesis: any nesting, checked against the move_to users write by hand ---------------

_DTYPES = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]
_SHAPES = [(), (0,), (3,), (2, 3)]
_CASTS: list[Any] = [None, "float16", {"uint8": "float32"}, {np.int64: np.int32, "bool": "uint8"}]


@st.composite
def array_leaves(draw: st.DrawFn) -> Any:
    dtype = draw(st.sampled_from(_DTYPES))
    shape = draw(st.sampled_from(_SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    data = (rng.standard_normal(shape) * 20).astype(dtype)
    return to_framework(draw(st.sampled_from(installed())), data)


_plain = st.one_of(
    st.integers(-5, 5), st.text(max_size=2), st.none(), st.binary(max_size=2), st.just(1.5)
)
_keys = st.text("abcxyz", min_size=1, max_size=2)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_keys, children, max_size=3),
        st.dictionaries(_keys, children, max_size=3).map(collections.OrderedDict),
        st.dictionaries(_keys, children, max_size=3).map(
            lambda d: collections.defaultdict(list, d)
        ),
        st.lists(children, max_size=3).map(lambda x: collections.deque(x, maxlen=len(x) + 1)),
        st.builds(Point, children, children),
        st.builds(Record, children, children),
        st.builds(FrozenRecord, children, children),
    )


trees = st.recursive(st.one_of(array_leaves(), _plain), _containers, max_leaves=10)


def _target_dtype(name: str, dtype: Any) -> str | None:
    if dtype is None:
        return None
    if isinstance(dtype, dict):
        return {np.dtype(k).name: np.dtype(v).name for k, v in dtype.items()}.get(name)
    return dtype if name.startswith(("float", "bfloat")) else None


def move_ref(x: Any, device: Any, dtype: Any) -> Any:
    """A plain recursive move_to: the reference the library must agree with."""
    source = framework_of(x)
    if source is not None:
        host = to_numpy(x)
        cast = _target_dtype(host.dtype.name, dtype)
        if cast is not None:
            host = host.astype(cast)
        dest = source if source != "numpy" else expected_framework("numpy", device)
        return to_framework(dest, host)
    if isinstance(x, collections.defaultdict):
        return type(x)(x.default_factory, {k: move_ref(v, device, dtype) for k, v in x.items()})
    if isinstance(x, dict):
        return type(x)((k, move_ref(v, device, dtype)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(move_ref(v, device, dtype) for v in x))
    if isinstance(x, collections.deque):
        return collections.deque((move_ref(v, device, dtype) for v in x), maxlen=x.maxlen)
    if isinstance(x, (list, tuple)):
        return type(x)(move_ref(v, device, dtype) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        new = copy.copy(x)
        for f in dataclasses.fields(x):
            object.__setattr__(new, f.name, move_ref(getattr(x, f.name), device, dtype))
        return new
    return x


def _same_leaf(got: Any, want: Any, path: str) -> None:
    if framework_of(want) is None:
        assert got is want, path
        return
    assert framework_of(got) == framework_of(want), f"{path}: {type(got)} vs {type(want)}"
    a, b = to_numpy(got), to_numpy(want)
    assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{path}: {a.dtype}{a.shape} {b.dtype}"
    np.testing.assert_array_equal(a, b, err_msg=path)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    tree=trees,
    device=st.sampled_from([d for _, d in DEVICES]),
    dtype=st.sampled_from(_CASTS),
)
def test_any_tree_matches_a_hand_written_move_to(tree, device, dtype):
    want = move_ref(tree, device, dtype)
    got = to_device(tree, device, dtype=dtype)
    assert_same_tree(got, want, _same_leaf)


# -- devices -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "platform", "index", "home"),
    [
        ("cpu", "cpu", None, None),
        ("CPU:0", "cpu", 0, None),
        ("cuda", "cuda", None, "torch"),
        (" cuda:1 ", "cuda", 1, "torch"),
        ("mps", "mps", None, "torch"),
        ("gpu", "cuda", None, "jax"),
        ("gpu:2", "cuda", 2, "jax"),
        ("tpu", "tpu", None, "jax"),
        ("/GPU:0", "cuda", 0, "tf"),
        ("/CPU:0", "cpu", 0, "tf"),
        ("/device:GPU:1", "cuda", 1, "tf"),
        ("/job:worker/replica:0/task:0/device:CPU:0", "cpu", 0, "tf"),
    ],
)
def test_parse_device_strings(spec, platform, index, home):
    target = parse_device(spec)
    assert (target.platform, target.index, target.home) == (platform, index, home)
    assert parse_device(target) is target


@pytest.mark.parametrize("spec", ["cdua", "cuda:x", "/TPU:0", "/GPU:a", "", "gpu:-1", "cuda:"])
def test_unknown_device_string_raises_value_error(spec):
    with pytest.raises(ValueError, match=r"`device` .* is not a known device; use one of"):
        parse_device(spec)
    with pytest.raises(ValueError, match="is not a known device"):
        to_device({"x": np.ones(1)}, spec)


@pytest.mark.parametrize("device", [3, None, ["cpu"], b"cpu", np.float32(0)])
def test_wrong_device_type_raises_type_error(device):
    with pytest.raises(TypeError, match=r"`device` must be a string, a torch.device"):
        to_device({"x": np.ones(1)}, device)


def test_framework_device_objects_parse():
    torch = optional("torch")
    if torch is not None:
        t = parse_device(torch.device("cuda", 1))
        assert (t.platform, t.index, t.home, t.native) == ("cuda", 1, "torch", t.spec)
    jax = optional("jax")
    if jax is not None:
        d = jax.devices("cpu")[0]
        assert parse_device(d) == Target(d, "cpu", d.id, home="jax", native=d)
        sharding = jax.sharding.SingleDeviceSharding(d)
        t = parse_device(sharding)
        assert (t.platform, t.home, t.native) == ("cpu", "jax", sharding)


# -- dtype policy ------------------------------------------------------------------------


def test_dtype_names_from_every_framework_and_strings():
    assert dtype_name(np.float16) == "float16"
    assert dtype_name(np.dtype("uint8")) == "uint8"
    assert dtype_name("bfloat16") == "bfloat16"
    assert dtype_name("float") == "float64"  # NumPy's meaning of a bare string
    assert dtype_name(float) == "float64"
    torch = optional("torch")
    if torch is not None:
        assert dtype_name(torch.uint8) == "uint8"
        assert dtype_name(torch.bfloat16) == "bfloat16"
        assert dtype_name("torch.float") == "float32"
        assert dtype_name("torch.half") == "float16"
    tf = optional("tf")
    if tf is not None:
        assert dtype_name(tf.float16) == "float16"
        assert dtype_name(tf.bfloat16) == "bfloat16"
    jax = optional("jax")
    if jax is not None:
        import jax.numpy as jnp

        assert dtype_name(jnp.bfloat16) == "bfloat16"


@pytest.mark.parametrize("dtype", ["floatx", 3, object(), None])
def test_wrong_dtype_raises_type_error(dtype):
    with pytest.raises(TypeError, match=r"`dtype` .* is not a dtype"):
        dtype_name(dtype)
    if dtype is not None:
        with pytest.raises(TypeError, match="is not a dtype"):
            to_device({"x": np.ones(1)}, "cpu", dtype=dtype)
        with pytest.raises(TypeError, match="is not a dtype"):
            to_device({"x": np.ones(1)}, "cpu", dtype={np.uint8: dtype})


@pytest.mark.parametrize(
    ("source", "target", "before"),
    [
        ("float32", "float16", True),  # 4 -> 2 bytes: cast first, copy half
        ("float64", "float32", True),
        ("int64", "int32", True),
        ("uint8", "float16", False),  # 1 -> 2 bytes: copy uint8, cast on the device
        ("uint8", "float32", False),
        ("float16", "bfloat16", False),  # same size: cast on the (faster) device
        ("int32", "float32", False),
        ("bool", "float32", False),
    ],
)
def test_cast_runs_on_the_side_that_moves_fewer_bytes(source, target, before):
    assert cast_before_copy(source, target) is before


def test_single_dtype_applies_to_floating_leaves_only():
    batch = {
        "f64": np.ones(2),
        "f16": np.ones(2, np.float16),
        "i64": np.arange(2),
        "u8": np.zeros(2, np.uint8),
        "b": np.ones(2, bool),
    }
    out = to_device(batch, "cpu", dtype=np.float32)
    assert {k: v.dtype.name for k, v in out.items()} == {
        "f64": "float32",
        "f16": "float32",
        "i64": "int64",
        "u8": "uint8",
        "b": "bool",
    }


def test_dtype_mapping_keys_of_every_framework():
    batch = {"u8": np.arange(4, dtype=np.uint8), "i64": np.arange(4), "f32": np.ones(4, "f4")}
    mappings: list[dict[Any, Any]] = [
        {np.uint8: np.float16, "int64": "int32"},
        {np.dtype("uint8"): "float16", np.int64: np.int32},
    ]
    torch, tf = optional("torch"), optional("tf")
    if torch is not None:
        mappings.append({torch.uint8: torch.float16, torch.int64: torch.int32})
    if tf is not None:
        mappings.append({tf.uint8: tf.float16, tf.int64: tf.int32})
    for mapping in mappings:
        out = to_device(batch, "cpu", dtype=mapping)
        assert out["u8"].dtype == np.float16 and out["i64"].dtype == np.int32
        assert out["f32"] is batch["f32"]  # not in the mapping: untouched
        np.testing.assert_array_equal(out["u8"], np.arange(4))


def test_cast_of_numpy_leaves_on_the_host_converts_values():
    x = np.array([0, 128, 255], np.uint8)
    out = to_device({"x": x}, "cpu", dtype={"uint8": "float16"})["x"]
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, [0.0, 128.0, 255.0])


# -- errors --------------------------------------------------------------------------------


def _no_cuda() -> bool:
    torch = optional("torch")
    return torch is None or not torch.cuda.is_available()


@pytest.mark.skipif(_no_cuda() is False, reason="this machine has CUDA")
@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_cuda_without_cuda_names_the_leaf_and_the_cause(framework):
    pytest.importorskip("torch")
    image = to_framework(framework, np.zeros((2, 3), np.uint8))
    batch = {"label": 3, "im": {"image": image}}
    with pytest.raises(TransferError, match=r"batch\['im'\]\['image'\]") as info:
        to_device(batch, "cuda")
    assert "CUDA is not available" in str(info.value)
    assert info.value.path == "batch['im']['image']"


def test_gpu_name_for_tf_without_a_gpu_raises_transfer_error():
    tf = pytest.importorskip("tensorflow")
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(TransferError, match=r"batch\['x'\].*'/GPU:0'.*0 GPU device"):
        to_device({"x": np.ones(2)}, "/GPU:0")


def test_impossible_cast_of_a_string_array_names_the_leaf():
    batch = {"meta": {"names": np.array(["a", "b"])}, "x": np.ones(2)}
    with pytest.raises(TransferError, match=r"batch\['meta'\]\['names'\].* as float32") as info:
        to_device(batch, "cpu", dtype={np.dtype("<U1"): np.float32})
    assert "could not convert string to float" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.skipif(not hasattr(np, "float128"), reason="no float128 on this platform")
def test_impossible_cast_for_torch_names_the_leaf():
    torch = pytest.importorskip("torch")
    batch = {"w": [torch.ones(2)]}
    with pytest.raises(TransferError, match=r"batch\['w'\]\[0\].*torch has no dtype 'float128'"):
        to_device(batch, "cpu", dtype={"float32": "float128"})


def test_unbuildable_container_strict_raises_and_lenient_warns_but_moves():
    batch = {"extra": [InitDict({"k": np.arange(3)})]}
    with pytest.raises(TypeError, match=r"batch\['extra'\]\[0\] is a .*InitDict"):
        to_device(batch, "cpu", dtype={"int64": "int32"}, strict=True)
    device = cpu_devices()[-1][1]
    with pytest.warns(ContainerRebuildWarning, match="rebuilt as dict"):
        out = to_device(batch, device, dtype={"int64": "int32"})
    assert type(out["extra"][0]) is dict
    k = out["extra"][0]["k"]
    assert to_numpy(k).dtype == np.int32 and to_numpy(k).tolist() == [0, 1, 2]
    # nothing to rebuild when the leaves stay as they are, strict or not
    assert to_device(batch, "cpu", strict=True)["extra"][0] is batch["extra"][0]


def test_unbuildable_container_inside_a_mapping_with_its_own_to_is_named_by_its_full_path():
    from helpers import BatchEncodingLike

    torch = pytest.importorskip("torch")
    encoding = BatchEncodingLike({"ids": torch.arange(3), "meta": InitDict({"k": np.arange(3)})})
    with pytest.raises(TypeError, match=r"^batch\['enc'\]\['meta'\] is a .*InitDict"):
        to_device({"enc": encoding}, torch.device("cpu"), strict=True)


def test_rebuild_warning_points_at_the_callers_line():
    with pytest.warns(ContainerRebuildWarning) as record:
        to_device({"d": InitDict({"k": np.ones(1)})}, "cpu", dtype="float16")
    assert record[0].filename == __file__


def test_object_whose_own_to_fails_names_its_path():
    class Broken:
        def to(self, device):
            raise RuntimeError("nope")

    with pytest.raises(TransferError, match=r"batch\['b'\] \(Broken\) with its own .*nope"):
        to_device({"b": Broken()}, "cpu")


# -- objects with their own .to ---------------------------------------------------------------


@pytest.mark.parametrize("device", [d for _, d in DEVICES], ids=[n for n, _ in DEVICES])
def test_objects_with_their_own_to_are_moved_by_it(device):
    m = Movable(np.ones(2))
    out = to_device({"m": m, "n": [m]}, device)
    assert out["m"].device is device and out["m"].payload is m.payload
    torch = optional("torch")
    if torch is not None:
        # nn.Module.to gets the torch.device the target names, also for "/CPU:0" or a
        # jax device, which torch does not understand.
        seen = []
        model = torch.nn.Linear(2, 2)
        real_to = model.to
        model.to = lambda d: seen.append(d) or real_to(d)  # type: ignore[method-assign]
        assert to_device({"model": model}, device)["model"] is model
        assert seen == [torch.device("cpu")]


def test_a_class_as_a_leaf_is_not_an_object_to_move():
    assert to_device({"cls": Movable}, "cpu")["cls"] is Movable


def test_no_warning_on_the_common_paths():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for case in CASES:
            if not case.lossy:
                for _, device in DEVICES:
                    to_device(case.build(), device)


def test_absent_cpu_index_is_an_error_for_every_framework():
    import looptoolkit as lt

    with pytest.raises(lt.TransferError, match=r"batch\['x'\].*cpu:3"):
        lt.to_device({"x": np.ones(2)}, "cpu:3")
    torch = pytest.importorskip("torch")
    with pytest.raises(lt.TransferError, match=r"batch\['t'\].*cpu:3"):
        lt.to_device({"t": torch.ones(2)}, "cpu:3")
    assert lt.to_device({"t": torch.ones(2)}, "cpu:0")["t"].device.type == "cpu"


# -- containers of real libraries (issue: nothing silently left behind) -------------------


def test_a_mapping_with_its_own_to_is_moved_by_it_and_keeps_its_type():
    from helpers import BatchEncodingLike

    torch = pytest.importorskip("torch")
    ids = torch.arange(6).reshape(2, 3)
    encoding = BatchEncodingLike({"input_ids": ids, "attention_mask": ids > 0}, encoding="e")
    device = torch.device("cpu")
    out = to_device({"enc": encoding, "x": np.ones(2)}, device)  # warnings are errors here
    assert type(out["enc"]) is BatchEncodingLike
    assert out["enc"].moved_to is device and out["enc"]._encodings == "e"
    assert out["enc"]["input_ids"] is ids  # its .to moved it: already on the host
    assert isinstance(out["x"], torch.Tensor)


def test_a_dataclass_that_is_a_mapping_moves_its_entries_with_its_fields():
    from helpers import ModelOutputLike

    output = ModelOutputLike(logits=np.ones((2, 3)), hidden_states=(np.zeros(2), np.zeros(2)))
    out = to_device(output, "cpu", dtype=np.float32)
    assert type(out) is ModelOutputLike and list(out.keys()) == ["logits", "hidden_states"]
    assert out.logits.dtype == np.float32 and out["logits"] is out.logits
    assert out["hidden_states"] is out.hidden_states
    assert [h.dtype for h in out["hidden_states"]] == [np.float32, np.float32]
    assert out.loss is None and "loss" not in out
    assert output.logits.dtype == np.float64 and output["logits"] is output.logits  # untouched


def test_a_dataclass_mapping_entry_that_is_not_a_field_is_moved_too():
    from helpers import ModelOutputLike

    output = ModelOutputLike(logits=np.ones(2))
    output["extra"] = np.ones(3)  # an entry (and an attribute) that is no field
    out = to_device(output, "cpu", dtype=np.float32)
    assert out["extra"].dtype == np.float32 and out.logits.dtype == np.float32
    assert out.extra is out["extra"] and output.extra.dtype == np.float64


def test_arrays_inside_sets_are_moved_and_the_set_types_kept():
    torch = pytest.importorskip("torch")
    a, b = torch.ones(2), torch.zeros(3)
    out = to_device({"f": frozenset([a]), "s": {b, "label"}}, "cpu", dtype=torch.float16)
    assert type(out["f"]) is frozenset and type(out["s"]) is set
    (fa,) = out["f"]
    assert fa.dtype == torch.float16 and fa.shape == (2,)
    (sb,) = [x for x in out["s"] if isinstance(x, torch.Tensor)]
    assert sb.dtype == torch.float16 and "label" in out["s"]


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: (x for x in [np.ones(2)]), "generator"),
        (lambda: iter([np.ones(2)]), "list_iterator"),
        (lambda: map(np.ones, [2]), "map"),
        (lambda: {"k": np.ones(2)}.values(), "dict_values"),
    ],
    ids=["generator", "iterator", "map", "dict_values"],
)
def test_an_iterator_or_a_view_raises_naming_its_path(make, kind):
    with pytest.raises(TypeError, match=rf"^batch\['b'\]\[1\] is a {kind}, which to_device cannot"):
        to_device({"a": np.ones(1), "b": [1, make()]}, "cpu")


def test_an_open_file_is_a_value_not_an_iterator(tmp_path):
    with open(tmp_path / "f.txt", "w") as f:
        assert to_device({"f": f, "x": np.ones(1)}, "cpu")["f"] is f


def test_a_namedtuple_subclass_keeps_its_instance_attributes():
    from helpers import Tagged, tagged

    out = to_device({"p": tagged(np.ones(2), 1, "train")}, "cpu", dtype=np.float32)
    assert type(out["p"]) is Tagged and out["p"].tag == "train"
    assert out["p"].x.dtype == np.float32 and out["p"].y == 1


def test_attrs_classes_and_simple_namespaces_are_containers():
    import types

    from helpers import AttrsLike

    tree = {"a": AttrsLike(np.ones(2), 3), "n": types.SimpleNamespace(x=np.ones(1), name="n")}
    out = to_device(tree, "cpu", dtype=np.float32)
    assert type(out["a"]) is AttrsLike and out["a"].image.dtype == np.float32
    assert out["a"].label == 3 and tree["a"].image.dtype == np.float64
    assert type(out["n"]) is types.SimpleNamespace and out["n"].x.dtype == np.float32
    assert out["n"].name == "n"


def test_user_dict_and_user_list_are_rebuilt_as_themselves():
    tree = collections.UserDict(x=collections.UserList([np.ones(1)]))
    out = to_device(tree, "cpu", dtype=np.float32)
    assert type(out) is collections.UserDict and type(out["x"]) is collections.UserList
    assert out["x"][0].dtype == np.float32


def test_tensordict_keeps_dimension_names_and_lock():
    torch = pytest.importorskip("torch")
    tensordict = pytest.importorskip("tensordict")
    td = tensordict.TensorDict(
        {"x": torch.ones(2, 3), "nested": {"y": torch.zeros(2, 4)}},
        batch_size=[2],
        names=["batch"],
        lock=True,
    )
    out = to_device({"td": td}, torch.device("cpu"), dtype=torch.float16)["td"]
    assert out.names == ["batch"] and out.is_locked and out.batch_size == td.batch_size
    assert out["nested"].names == ["batch"]
    assert out["x"].dtype == torch.float16 and out["nested", "y"].dtype == torch.float16


def test_a_lazily_stacked_tensordict_is_cast():
    torch = pytest.importorskip("torch")
    tensordict = pytest.importorskip("tensordict")
    parts = [tensordict.TensorDict({"x": torch.ones(3)}, []) for _ in range(2)]
    lazy = tensordict.LazyStackedTensorDict.lazy_stack(parts, dim=0)
    out = to_device({"lazy": lazy}, torch.device("cpu"), dtype=torch.float16)["lazy"]
    assert type(out) is type(lazy) and out.stack_dim == 0 and out.batch_size == (2,)
    assert out["x"].dtype == torch.float16 and lazy["x"].dtype == torch.float32


def test_a_container_registered_by_another_thread_mid_flatten_is_looked_into(monkeypatch):
    # Thread B flattens a batch holding a type it has not seen: to optree it is a
    # leaf. Thread A registers the type before B looks at its leaves. B must see
    # that a leaf is a container now, and flatten again.
    import optree

    from looptoolkit import tree as _tree

    @dataclasses.dataclass
    class Fresh:
        x: Any

    real = optree.tree_flatten
    registered = threading.Event()

    def flatten_then_another_thread_registers(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if not registered.is_set():
            registered.set()
            other = threading.Thread(target=_tree.flatten, args=(Fresh(np.ones(1)),))
            other.start()
            other.join()
        return out

    monkeypatch.setattr(optree, "tree_flatten", flatten_then_another_thread_registers)
    out = to_device({"f": Fresh(np.ones(2))}, "cpu", dtype=np.float32)
    assert registered.is_set()
    assert type(out["f"]) is Fresh and out["f"].x.dtype == np.float32


def test_arrays_set_as_attributes_after_init_are_moved_and_other_attributes_kept():
    from helpers import PlainDict, Record, tagged

    record = Record(np.ones(2), 1)
    record.mask = np.ones(2)  # type: ignore[attr-defined]
    record.hook = len  # type: ignore[attr-defined]
    meta = PlainDict(x=np.ones(1))
    meta.weights = [np.ones(3)]  # type: ignore[attr-defined]
    meta.note = "kept"  # type: ignore[attr-defined]
    point = tagged(np.ones(1), 2, "t")
    point.extra = np.ones(2)  # type: ignore[attr-defined]
    out = to_device({"r": record, "m": meta, "p": point}, "cpu", dtype=np.float32)
    assert out["r"].mask.dtype == np.float32 and out["r"].hook is len
    assert out["m"].weights[0].dtype == np.float32 and out["m"].note == "kept"
    assert out["p"].extra.dtype == np.float32 and out["p"].tag == "t"
    assert record.mask.dtype == np.float64 and meta.weights[0].dtype == np.float64


def test_what_a_mappings_own_to_leaves_behind_is_moved_and_cast_too():
    from helpers import BatchEncodingLike

    torch = pytest.importorskip("torch")
    # Its .to moves torch tensors only: NumPy arrays would stay NumPy, and no cast.
    encoding = BatchEncodingLike({"ids": np.arange(4), "pixels": torch.ones(2)}, encoding="e")
    device = torch.device("cpu")
    out = to_device({"enc": encoding}, device, dtype=torch.float16)["enc"]
    assert type(out) is BatchEncodingLike and out.moved_to is device and out._encodings == "e"
    assert isinstance(out["ids"], torch.Tensor) and out["ids"].tolist() == [0, 1, 2, 3]
    assert out["pixels"].dtype == torch.float16


def test_an_object_whose_to_moves_it_in_place_and_returns_none_is_kept():
    class InPlace:
        """A batch object whose ``.to`` moves it in place and returns None."""

        def __init__(self) -> None:
            self.device = "somewhere"

        def to(self, device: Any) -> None:
            self.device = device

    obj = InPlace()
    out = to_device({"meta": obj, "x": np.ones(2)}, "cpu")
    assert out["meta"] is obj and obj.device == "cpu"


class _Recorder:
    """A backend stand-in that records the casts and moves the transfer layer asks for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def cast(self, x: np.ndarray, name: str) -> np.ndarray:
        self.calls.append(("cast", (x.dtype.name, name)))
        return x.astype(name)

    def move(self, leaves: Any, target: Any, non_blocking: Any, pack: Any) -> list[np.ndarray]:
        self.calls.append(("move", [x.dtype.name for x in leaves]))
        return [x.copy() for x in leaves]


def test_transfer_casts_on_the_side_of_the_copy_that_moves_fewer_bytes():
    from looptoolkit.device import transfer

    recorder = _Recorder()
    leaves = [np.ones(2, np.float32), np.arange(2, dtype=np.uint8), np.ones(2, np.int64)]
    out = transfer(recorder, leaves, parse_device("cpu"), ["float16", "float16", None])  # type: ignore[arg-type]
    # float32 -> float16 halves the copy: cast first; uint8 -> float16 doubles it: cast after.
    assert recorder.calls == [
        ("cast", ("float32", "float16")),
        ("move", ["float16", "uint8", "int64"]),
        ("cast", ("uint8", "float16")),
    ]
    assert [x.dtype.name for x in out] == ["float16", "float16", "int64"]


def test_transfer_without_casts_is_one_move():
    from looptoolkit.device import transfer

    recorder = _Recorder()
    transfer(recorder, [np.ones(2)], parse_device("cpu"), [None])  # type: ignore[arg-type]
    assert recorder.calls == [("move", ["float64"])]
    with pytest.raises(ValueError, match="1 leaves but 2 casts"):
        transfer(recorder, [np.ones(2)], parse_device("cpu"), [None, None])  # type: ignore[arg-type]
