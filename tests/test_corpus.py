"""The corpus: what real libraries hand to a training loop, through to_device and the Loader.

Containers of tokenizers (``BatchEncoding``), models (``ModelOutput``), attrs
classes, namespaces, namedtuples with attributes, TensorDicts with names;
leaves of every framework, strided, transposed, reversed, Fortran-ordered,
read-only and memory-mapped; every NumPy and every torch dtype. Hypothesis
builds the trees; the checks are exact: every array leaf arrives in the
framework, dtype and values it should, every container keeps its type and its
attributes, the input is left as it was, and no array is ever passed through.
"""

from __future__ import annotations

import collections
import dataclasses
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    AttrsLike,
    FrozenRecord,
    ModelOutputLike,
    Pair,
    Point,
    Tagged,
    cpu_devices,
    expected_framework,
    framework_of,
    installed,
    jax_dtype,
    optional,
    tagged,
    to_framework,
    to_numpy,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from looptoolkit import GetItemsDataset, Loader, TransferError, to_device
from looptoolkit import tree as _tree

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DEVICES = [d for _, d in cpu_devices()]
FRAMEWORKS = installed()
NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
FLOATS = {"float16", "float32", "float64"}
# dtype argument -> the dtype name each source dtype arrives in (None: unchanged)
POLICIES: list[tuple[Any, Callable[[str], str | None]]] = [
    (None, lambda name: None),
    ("float32", lambda name: "float32" if name in FLOATS else None),
    ({"uint8": "float16", "int64": "int32"}, {"uint8": "float16", "int64": "int32"}.get),
]
_MEMMAPS = Path(__import__("tempfile").mkdtemp(prefix="looptoolkit-corpus-"))


# -- leaves ----------------------------------------------------------------------------


def _values(rows: int, width: int, dtype: str) -> np.ndarray:
    """Every element of row ``i`` is ``i`` (modulo what the dtype holds): rows stay checkable."""
    column = np.arange(rows) % (2 if dtype == "bool" else 100)
    return np.repeat(column[:, None], width, axis=1).astype(dtype)


def make_leaf(framework: str, dtype: str, layout: str, rows: int) -> Any:
    """A ``(rows, 3)`` array of ``framework`` in ``layout``; every layout holds the same values."""
    values = _values(rows, 3, dtype)
    if layout == "strided":  # every other row of a bigger array
        base = np.zeros((2 * rows, 3), dtype)
        base[::2] = values
        host = base[::2]
    elif layout == "transposed":
        host = np.ascontiguousarray(values.T).T
    elif layout == "reversed":  # negative strides
        host = np.ascontiguousarray(values[::-1])[::-1]
    elif layout == "fortran":
        host = np.asfortranarray(values)
    elif layout == "readonly":
        host = values.copy()
        host.setflags(write=False)
    elif layout == "memmap":
        path = _MEMMAPS / f"{dtype}-{rows}.bin"
        if not path.exists():
            values.tofile(path)
        host = np.memmap(path, dtype=dtype, mode="r", shape=values.shape)
    else:
        host = values
    if framework == "numpy":
        return host
    if framework == "torch" and layout in ("contiguous", "strided", "transposed", "memmap"):
        import torch

        if layout == "memmap":  # a tensor over the mapped file (copy-on-write: torch writes)
            return torch.from_numpy(np.memmap(host.filename, dtype, "c", shape=host.shape))
        if layout == "contiguous":
            return torch.from_numpy(values.copy())
        # torch's own strided views of a bigger tensor
        base = torch.from_numpy(
            np.ascontiguousarray(host.base if layout == "strided" else values.T)
        )
        return base[::2] if layout == "strided" else base.T
    return to_framework(framework, values)


LAYOUTS = ["contiguous", "strided", "transposed", "reversed", "fortran", "readonly", "memmap"]
leaf_specs = st.tuples(
    st.sampled_from(FRAMEWORKS), st.sampled_from(NUMERIC), st.sampled_from(LAYOUTS)
)


# -- containers ------------------------------------------------------------------------

Builder = Callable[[list[Any]], Any]


def _pairs(make: Callable[[Any, Any], Any]) -> Builder:
    return lambda xs: make(xs[0], xs[1 % len(xs)])


def _namespace(xs: list[Any]) -> Any:
    return types.SimpleNamespace(**{f"f{i}": x for i, x in enumerate(xs)})


# Containers of columns: every one a Loader may batch (no non-array field values).
COLUMN_CONTAINERS: list[tuple[str, Builder]] = [
    ("dict", lambda xs: {f"k{len(xs) - i}": x for i, x in enumerate(xs)}),
    ("ordered", lambda xs: collections.OrderedDict((f"k{i}", x) for i, x in enumerate(xs))),
    ("tuple", tuple),
    ("list_of_columns", lambda xs: [xs[0]]),
    ("namedtuple", _pairs(Point)),
    ("collections_namedtuple", _pairs(Pair)),
    ("namedtuple_with_attributes", _pairs(lambda a, b: tagged(a, b, "train"))),
    ("frozen_dataclass", _pairs(FrozenRecord)),
    ("model_output", lambda xs: ModelOutputLike(xs[0], xs[-1], tuple(xs))),
    ("attrs", _pairs(AttrsLike)),
    ("namespace", _namespace),
    ("user_dict", lambda xs: collections.UserDict({f"k{i}": x for i, x in enumerate(xs)})),
]
# ...and those a batch may hold besides (to_device only).
BATCH_CONTAINERS: list[tuple[str, Builder]] = [
    *COLUMN_CONTAINERS,
    ("list", list),
    (
        "defaultdict",
        lambda xs: collections.defaultdict(list, {f"d{i}": x for i, x in enumerate(xs)}),
    ),
    ("deque", lambda xs: collections.deque(xs, maxlen=len(xs) + 1)),
    ("user_list", collections.UserList),
    ("dataclass_with_values", lambda xs: _record(xs)),
    ("model_output_with_none", lambda xs: ModelOutputLike(logits=xs[0])),
]


def _record(xs: list[Any]) -> Any:
    from helpers import Record

    r = Record(xs[0], 7, name="r")
    r.extra = xs[-1]  # type: ignore[attr-defined]
    return r


def trees(rows: int, containers: list[tuple[str, Builder]]) -> st.SearchStrategy[Any]:
    leaves = leaf_specs.map(lambda spec: make_leaf(*spec, rows))
    nodes = st.sampled_from([build for _, build in containers])
    return st.recursive(
        leaves,
        lambda children: st.tuples(nodes, st.lists(children, min_size=1, max_size=3)).map(
            lambda pair: pair[0](pair[1])
        ),
        max_leaves=6,
    )


# -- checks ----------------------------------------------------------------------------


def _expected_dtype(
    source: np.dtype, framework: str, cast: Callable[[str], str | None]
) -> np.dtype:
    name = cast(source.name) or source.name
    out = np.dtype(name)
    return jax_dtype(out) if framework == "jax" else out


def _fields(x: Any) -> dict[str, Any]:
    if isinstance(x, AttrsLike):
        return {"image": x.image, "label": x.label}
    return dict(vars(x))


def assert_moved(
    got: Any, want: Any, path: str, check_leaf: Callable[[Any, Any, str], None]
) -> None:
    """``got`` has ``want``'s containers (types, keys, attributes) and checked leaves."""
    if framework_of(want) is not None or not _is_container(want):
        check_leaf(got, want, path)
        return
    assert type(got) is type(want), f"{path}: {type(got).__name__} is not {type(want).__name__}"
    if _is_tensordict(want):
        assert (got.batch_size, got.names, got.is_locked) == (
            want.batch_size,
            want.names,
            want.is_locked,
        ), path
        assert list(got.keys()) == list(want.keys()), path
        for k in want.keys():  # noqa: SIM118 -- iterating a TensorDict walks its batch dim
            assert_moved(got.get(k), want.get(k), f"{path}[{k!r}]", check_leaf)
        return
    if isinstance(want, ModelOutputLike):
        assert list(got.keys()) == list(want.keys()), path
        for k in got:
            assert got[k] is getattr(got, k), f"{path}[{k!r}] is not its field"
    if dataclasses.is_dataclass(want) or isinstance(want, (AttrsLike, types.SimpleNamespace)):
        assert _fields(got).keys() == _fields(want).keys(), path
        for k, v in _fields(want).items():
            assert_moved(_fields(got)[k], v, f"{path}.{k}", check_leaf)
        return
    if isinstance(want, (dict, collections.UserDict)):
        assert list(got.keys()) == list(want.keys()), f"{path}: keys"
        assert getattr(got, "default_factory", None) is getattr(want, "default_factory", None)
        for k in want:
            assert_moved(got[k], want[k], f"{path}[{k!r}]", check_leaf)
        return
    if isinstance(want, collections.deque):
        assert got.maxlen == want.maxlen, path
    if isinstance(want, Tagged):
        assert got.tag == want.tag, path
    assert len(got) == len(want), path
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert_moved(a, b, f"{path}[{i}]", check_leaf)


def _is_tensordict(x: Any) -> bool:
    return type(x).__module__.startswith("tensordict")


def _is_container(x: Any) -> bool:
    kinds = (dict, list, tuple, collections.deque, collections.UserDict, collections.UserList)
    return (
        isinstance(x, (*kinds, AttrsLike, types.SimpleNamespace))
        or dataclasses.is_dataclass(x)
        or _is_tensordict(x)
    )


def _snapshot(tree: Any) -> list[tuple[Any, Any]]:
    leaves = _tree.flatten(tree)[0]
    return [(x, to_numpy(x) if framework_of(x) else None) for x in leaves]


def _unchanged(tree: Any, before: list[tuple[Any, Any]]) -> None:
    after = _tree.flatten(tree)[0]
    assert len(after) == len(before)
    for x, (y, values) in zip(after, before, strict=True):
        assert x is y, "the input tree was modified"
        if values is not None:
            np.testing.assert_array_equal(to_numpy(x), values)


# -- to_device over the corpus ---------------------------------------------------------


@SETTINGS
@given(
    tree=trees(4, BATCH_CONTAINERS),
    device=st.sampled_from(DEVICES),
    policy=st.sampled_from(POLICIES),
)
def test_to_device_moves_every_leaf_of_any_real_world_tree(tree, device, policy):
    dtype, cast = policy
    before = _snapshot(tree)
    out = to_device({"batch": tree, "step": 3}, device, dtype=dtype)
    assert out["step"] == 3

    def check(got: Any, want: Any, path: str) -> None:
        source = framework_of(want)
        if source is None:
            assert got is want, f"{path}: a value must come back as it is"
            return
        framework = expected_framework(source, device)
        assert framework_of(got) == framework, f"{path}: {type(got)} is not a {framework} array"
        host = to_numpy(want)
        expected = _expected_dtype(host.dtype, framework, cast)
        values = to_numpy(got)
        assert values.dtype == expected, f"{path}: {values.dtype} is not {expected}"
        np.testing.assert_array_equal(values, host.astype(expected), err_msg=path)

    assert_moved(out["batch"], tree, "batch", check)
    _unchanged(tree, before)


# -- the Loader over the corpus --------------------------------------------------------


@SETTINGS
@given(
    data=trees(9, COLUMN_CONTAINERS),
    batch_size=st.integers(1, 4),
    seed=st.integers(0, 50),
    where=st.sampled_from([(None, 0), ("cpu", 0), ("cpu", 2)]),
    policy=st.sampled_from(POLICIES),
)
def test_loader_batches_any_real_world_tree_of_columns(data, batch_size, seed, where, policy):
    device, prefetch = where
    dtype, cast = policy if device is not None else (None, POLICIES[0][1])
    if isinstance(data, list):  # a one-column list stands for columns, not records
        data = data[:1]
    before = _snapshot(data)
    loader = Loader(data, batch_size, seed=seed, device=device, prefetch=prefetch, dtype=dtype)
    order = loader.indices(0)
    got = list(loader)
    assert len(got) == len(loader) == -(-9 // batch_size)
    for k, batch in enumerate(got):
        idx = order[k * batch_size : (k + 1) * batch_size]

        def check(leaf: Any, column: Any, path: str, idx: np.ndarray = idx) -> None:
            framework = framework_of(column)
            assert framework_of(leaf) == framework, f"{path}: {type(leaf)}"
            host = to_numpy(column)
            expected = _expected_dtype(host.dtype, framework, cast)
            values = to_numpy(leaf)
            assert values.dtype == expected, f"{path}: {values.dtype} is not {expected}"
            np.testing.assert_array_equal(values, host[idx].astype(expected), err_msg=path)

        assert_moved(batch, data, "batch", check)
    _unchanged(data, before)
    state = loader.state_dict()
    assert {type(v) for v in state.values()} <= {int, str, bool, type(None)}


def test_loader_keeps_a_tensordicts_names_in_every_batch():
    torch = pytest.importorskip("torch")
    tensordict = pytest.importorskip("tensordict")
    data = tensordict.TensorDict(
        {"x": torch.arange(10.0).reshape(5, 2), "y": {"z": torch.arange(5)}},
        batch_size=[5],
        names=["sample"],
    )
    for batch in Loader(data, 2, seed=1, device="cpu", dtype=torch.float16):
        assert batch.names == ["sample"] and batch["y"].names == ["sample"]
        assert batch["x"].dtype == torch.float16 and batch["y", "z"].dtype == torch.int64


# -- every dtype -----------------------------------------------------------------------


def _numpy_dtypes() -> dict[str, np.dtype]:
    """One dtype of each kind NumPy knows here (ml_dtypes' bfloat16 and float8 too, with JAX)."""
    out: dict[str, np.dtype] = {}
    for scalar in np.sctypeDict.values():
        dtype = np.dtype(scalar)
        out.setdefault(dtype.kind if dtype.kind in "SUVOMm" else dtype.name, dtype)
    return dict(sorted(out.items()))


NUMPY_DTYPES = _numpy_dtypes()


def _numpy_column(key: str, dtype: np.dtype) -> np.ndarray:
    rows = np.arange(6)
    if key in ("S", "U", "O"):
        return np.array([f"s{i}" for i in rows], dtype={"S": "S3", "U": "U3"}.get(key, object))
    if key in ("M", "m"):
        return rows.astype({"M": "datetime64[s]", "m": "timedelta64[s]"}[key])
    if key == "V":
        return np.array([(i, float(i)) for i in rows], dtype=[("a", "i4"), ("b", "f8")])
    return rows.astype(dtype)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal values, bit for bit (NaNs of any float8 included)."""
    if want.dtype.hasobject:
        return got.dtype == want.dtype and got.tolist() == want.tolist()
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("key", list(NUMPY_DTYPES))
def test_every_numpy_dtype_is_batched_and_never_left_behind(key):
    column = _numpy_column(key, NUMPY_DTYPES[key])
    loader = Loader({"c": column}, 4, seed=2)
    got = np.concatenate([b["c"] for b in loader])
    assert _same(got, column[loader.indices(0)])
    assert to_device({"c": column}, "cpu")["c"] is column
    torch = optional("torch")
    if torch is None:
        return
    try:  # to torch: a tensor with the same bits, or an error naming the leaf
        moved = to_device({"c": column}, torch.device("cpu"))["c"]
    except TransferError as e:
        assert e.path == "batch['c']"
    else:
        assert isinstance(moved, torch.Tensor)
        assert moved.view(torch.uint8).numpy().tobytes() == column.tobytes()


def _torch_dtypes() -> list[Any]:
    torch = optional("torch")
    if torch is None:
        return []
    out = []
    for dtype in sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's note on complex32
                torch.zeros(1, dtype=dtype).view(torch.uint8)
        except (RuntimeError, NotImplementedError, TypeError):  # quantized dtypes
            continue
        out.append(dtype)
    return out


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
@pytest.mark.parametrize("dtype", _torch_dtypes(), ids=str)
def test_every_torch_dtype_is_gathered_bit_for_bit(dtype):
    import torch

    bits = torch.arange(6 * 2 * dtype.itemsize, dtype=torch.uint8).reshape(6, -1)
    column = bits.view(dtype)
    loader = Loader({"c": column}, 4, seed=3)
    got = torch.cat([b["c"].view(torch.uint8) for b in loader])
    assert torch.equal(got, bits[torch.from_numpy(loader.indices(0))])
    batch = GetItemsDataset({"c": column}).__getitems__([5, 0, 5])["c"]
    assert batch.dtype == dtype and torch.equal(batch.view(torch.uint8), bits[[5, 0, 5]])
    assert to_device({"c": column}, torch.device("cpu"))["c"] is column


def _tensordict_variants() -> list[tuple[str, Callable[[], Any]]]:
    torch = optional("torch")
    tensordict = optional("tensordict")
    if torch is None or tensordict is None:
        return []
    from helpers import tensorclass_type

    TD = tensordict.TensorDict

    def plain() -> Any:
        return TD({"x": torch.arange(8.0).reshape(4, 2), "y": torch.arange(4)}, batch_size=[4])

    def named_locked() -> Any:
        td = TD({"x": torch.ones(4, 3), "n": {"z": torch.zeros(4)}}, [4], names=["b"])
        return td.lock_()

    def with_text() -> Any:
        td = plain()
        td["tag"] = "train"  # non-tensor data
        return td

    def tensorclass() -> Any:
        return tensorclass_type()(
            image=torch.ones(4, 3), label=torch.arange(4), tag="t", batch_size=[4]
        )

    return [
        ("plain", plain),
        ("named_locked", named_locked),
        ("with_text", with_text),
        ("tensorclass", tensorclass),
    ]


TD_VARIANTS = _tensordict_variants()


def _inner(data: Any) -> Any:
    """The TensorDict of a TensorDict or a tensorclass."""
    import tensordict

    return data._tensordict if tensordict.is_tensorclass(data) else data


@pytest.mark.parametrize("make", [m for _, m in TD_VARIANTS], ids=[n for n, _ in TD_VARIANTS])
def test_tensordict_variants_keep_what_tensordict_to_keeps(make):
    import torch

    data = make()
    want = _inner(data)
    out = to_device({"td": data}, torch.device("cpu"), dtype=torch.float16)["td"]
    assert type(out) is type(data)
    got = _inner(out)
    kept = (got.batch_size, got.names, got.is_locked, list(got.keys()))
    assert kept == (want.batch_size, want.names, want.is_locked, list(want.keys()))
    for key in want.keys(include_nested=True, leaves_only=True):
        value = want[key]
        if isinstance(value, torch.Tensor):
            expected = torch.float16 if value.is_floating_point() else value.dtype
            assert got[key].dtype == expected
            assert torch.equal(got[key].to(value.dtype), value)
        else:  # non-tensor data, kept as it is
            assert got[key] == value


@pytest.mark.parametrize(
    "make",
    [m for n, m in TD_VARIANTS if n != "with_text"],
    ids=[n for n, _ in TD_VARIANTS if n != "with_text"],
)
def test_tensordict_variants_are_batched(make):
    import torch

    data = make()
    inner = _inner(data)
    loader = Loader(data, 3, seed=4)
    order = torch.from_numpy(loader.indices(0))
    for k, batch in enumerate(loader):
        rows = order[3 * k : 3 * (k + 1)]
        got = _inner(batch)
        assert type(batch) is type(data) and got.names == inner.names
        for key in inner.keys(include_nested=True, leaves_only=True):
            if isinstance(inner[key], torch.Tensor):
                assert torch.equal(got[key], inner[key][rows])
