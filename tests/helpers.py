"""Shared corpus of trees and checks for the tree and device tests.

As optree's ``tests/helpers.py``: every container ``to_device`` must rebuild, with
leaves of every installed framework. Framework parts are built only when the
framework imports, so this module works with NumPy alone.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

FRAMEWORKS = ("numpy", "torch", "jax", "tf")
_MODULES = {"numpy": "numpy", "torch": "torch", "jax": "jax", "tf": "tensorflow"}


@functools.cache
def optional(framework: str) -> ModuleType | None:
    """The framework's module, or None when it is not installed."""
    try:
        return importlib.import_module(_MODULES.get(framework, framework))
    except ImportError:
        return None


def installed() -> list[str]:
    """Frameworks importable here, in FRAMEWORKS order."""
    return [f for f in FRAMEWORKS if optional(f) is not None]


# -- containers ---------------------------------------------------------------------


class Point(NamedTuple):
    x: Any
    y: Any


class Point3(Point):
    """A subclass of a namedtuple, with a method of its own."""

    def norm(self) -> str:
        return "point3"


Pair = collections.namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Record:
    features: Any
    label: Any
    name: str = "record"


@dataclasses.dataclass(frozen=True)
class FrozenRecord:
    features: Any
    label: Any


@dataclasses.dataclass
class WithInitFalse:
    data: Any
    # Computed after construction; rebuilding must keep the value it has now.
    count: int = dataclasses.field(init=False, default=0)
    cache: Any = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        self.count = -1  # would reset the value if __post_init__ ran again


class PlainDict(dict):
    """A dict subclass without a constructor of its own: rebuilt as itself."""


class InitDict(dict):
    """A dict subclass with its own ``__init__``: cannot be rebuilt as itself."""

    def __init__(self, required: Any) -> None:
        super().__init__(required)
        self.seen = True


class Movable:
    """Not a container: an object with its own ``.to``, which records the device."""

    def __init__(self, payload: Any, device: Any = None) -> None:
        self.payload = payload
        self.device = device

    def to(self, device: Any) -> Movable:
        return Movable(self.payload, device)


# -- leaves ----------------------------------------------------------------------------


def to_framework(framework: str, array: np.ndarray) -> Any:
    """``array`` as an array of ``framework`` (a copy, never a view of ``array``)."""
    array = np.array(array, copy=True)
    if framework == "numpy":
        return array
    if framework == "torch":
        import torch

        return torch.from_numpy(array)
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(array)
    if framework == "tf":
        import tensorflow as tf

        return tf.constant(array)
    raise ValueError(framework)


def to_numpy(x: Any) -> np.ndarray:
    """A host NumPy copy of an array of any framework."""
    torch = optional("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy().copy()
    return np.array(x, copy=True)


def array_types() -> dict[str, type]:
    """Array type of each installed framework."""
    types: dict[str, type] = {"numpy": np.ndarray}
    if (torch := optional("torch")) is not None:
        types["torch"] = torch.Tensor
    if (jax := optional("jax")) is not None:
        types["jax"] = jax.Array
    if (tf := optional("tf")) is not None:
        types["tf"] = tf.Tensor
    return types


def framework_of(x: Any) -> str | None:
    """Which framework ``x`` is an array of, or None."""
    for name, cls in array_types().items():
        if isinstance(x, cls):
            return name
    return None


def leaves_of_every_framework(seed: int = 0) -> dict[str, Any]:
    """One float32 (2, 3) and one uint8 (4,) array per installed framework."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for f in installed():
        out[f"{f}_f32"] = to_framework(f, rng.standard_normal((2, 3)).astype(np.float32))
        out[f"{f}_u8"] = to_framework(f, rng.integers(0, 255, 4).astype(np.uint8))
    return out


# -- the corpus -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """A named tree builder. ``lossy``: rebuilt as a base type with a warning."""

    name: str
    build: Callable[[], Any]
    lossy: bool = False


def _pick(n: int) -> list[Any]:
    """``n`` leaves cycling through every framework (NumPy first)."""
    pool = list(leaves_of_every_framework().values())
    return [pool[i % len(pool)] for i in range(n)]


def _dataclass_with_extra() -> Record:
    a, b = _pick(2)
    r = Record(a, b, name="r1")
    r.extra = "an attribute set after __init__"  # type: ignore[attr-defined]
    return r


def _init_false() -> WithInitFalse:
    (a,) = _pick(1)
    w = WithInitFalse(a)
    w.count = 7
    w.cache = "kept"
    return w


def _plain_dict() -> PlainDict:
    a, b = _pick(2)
    d = PlainDict(z=a, a=b)
    d.meta = "kept"  # type: ignore[attr-defined]
    return d


def _deep() -> dict[str, Any]:
    pool = list(leaves_of_every_framework(1).values())
    return {
        "batch": [Point(pool[0], [pool[1 % len(pool)], {"k": pool[2 % len(pool)]}])],
        "pairs": (Pair(pool[3 % len(pool)], None), Pair("s", pool[-1])),
        "ordered": collections.OrderedDict(
            [("z", collections.deque([pool[0]], maxlen=3)), ("a", ())]
        ),
    }


def _tensordict() -> Any:
    torch = optional("torch")
    from tensordict import TensorDict

    return TensorDict(
        {"image": torch.zeros(4, 3, dtype=torch.uint8), "meta": {"id": torch.arange(4)}},
        batch_size=[4],
    )


@functools.cache
def tensorclass_type() -> type:
    from tensordict import tensorclass

    @tensorclass
    class Batch:
        image: Any
        label: Any
        tag: str = "default"

    return Batch


def _tensorclass() -> Any:
    torch = optional("torch")
    batch = tensorclass_type()(
        image=torch.ones(2, 3), label=torch.arange(2), tag="tagged", batch_size=[2]
    )
    return {"tc": batch}


def _module() -> dict[str, Any]:
    torch = optional("torch")
    return {"model": torch.nn.Linear(3, 2), "x": torch.ones(2, 3)}


def corpus() -> list[Case]:
    """Every case whose frameworks are installed."""
    cases = [
        Case("dict_key_order", lambda: dict(zip(["z", "a", "m"], _pick(3), strict=True))),
        Case("dict_int_and_str_keys", lambda: {3: _pick(1)[0], "a": 1, 1: "one"}),
        Case(
            "ordereddict",
            lambda: collections.OrderedDict(zip(["b", "a"], _pick(2), strict=True)),
        ),
        Case(
            "defaultdict",
            lambda: collections.defaultdict(list, zip(["y", "x"], _pick(2), strict=True)),
        ),
        Case("deque_maxlen", lambda: collections.deque(_pick(3), maxlen=5)),
        Case("list", lambda: _pick(4)),
        Case("tuple", lambda: tuple(_pick(3))),
        Case("namedtuple", lambda: Point(*_pick(2))),
        Case("namedtuple_subclass", lambda: Point3(*_pick(2))),
        Case("collections_namedtuple", lambda: Pair(*_pick(2))),
        Case("dataclass", _dataclass_with_extra),
        Case("frozen_dataclass", lambda: FrozenRecord(*_pick(2))),
        Case("dataclass_init_false", _init_false),
        Case("dict_subclass", _plain_dict),
        Case("dict_subclass_init", lambda: {"d": InitDict({"k": _pick(1)[0]})}, lossy=True),
        Case("object_with_to", lambda: {"obj": Movable(_pick(1)[0]), "x": _pick(2)[1]}),
        Case("mixed_frameworks", leaves_of_every_framework),
        Case(
            "empty_containers",
            lambda: {
                "list": [],
                "tuple": (),
                "dict": {},
                "deque": collections.deque(maxlen=2),
                "ordered": collections.OrderedDict(),
            },
        ),
        Case(
            "scalars",
            lambda: {
                "int": 3,
                "float": 2.5,
                "str": "text",
                "bytes": b"raw",
                "none": None,
                "bool": True,
                "np_scalar": np.float32(1.5),
                "x": _pick(1)[0],
            },
        ),
        Case(
            "zero_d",
            lambda: (
                [to_framework(f, np.array(4.0, np.float32)) for f in installed()]
                + [to_framework(f, np.array(7, np.int64)) for f in installed()]
            ),
        ),
        Case("deep", _deep),
    ]
    if optional("torch") is not None:
        cases.append(Case("nn_module", _module))
        if optional("tensordict") is not None:
            cases.append(Case("tensordict", _tensordict))
            cases.append(Case("tensorclass", _tensorclass))
    return cases


# -- comparing trees -------------------------------------------------------------------


def expected_framework(source: str, device: Any) -> str:
    """Framework a leaf of ``source`` lands in when moved to ``device`` (the contract)."""
    if source != "numpy":
        return source
    if isinstance(device, str):
        if device.startswith("/"):
            return "tf"
        if device.split(":")[0].lower() in ("cuda", "mps", "xpu"):
            return "torch"
        if device.split(":")[0].lower() in ("gpu", "tpu"):
            return "jax"
        return "numpy"
    torch = optional("torch")
    if torch is not None and isinstance(device, torch.device):
        return "torch"
    return "jax"  # a jax.Device or a jax.sharding.Sharding


def assert_same_tree(got: Any, want: Any, check_leaf: Callable[[Any, Any, str], None]) -> None:
    """Same containers (exact types, key order, factory, maxlen, attributes) everywhere.

    Leaves (anything that is not a container) are handed to ``check_leaf(got, want, path)``.
    """
    _compare(got, want, check_leaf, "batch")


def _compare(got: Any, want: Any, check_leaf: Callable[[Any, Any, str], None], path: str) -> None:
    if framework_of(want) is not None or isinstance(want, Movable) or not _is_container(want):
        check_leaf(got, want, path)
        return
    assert type(got) is type(want), f"{path}: {type(got).__name__} is not {type(want).__name__}"
    if _is_tensordict(want):
        assert got.batch_size == want.batch_size, path
        if hasattr(want, "_tensordict"):  # tensorclass
            for name in ("tag",):
                assert getattr(got, name, None) == getattr(want, name, None), path
            _compare(got._tensordict, want._tensordict, check_leaf, f"{path}._tensordict")
            return
        assert list(got.keys()) == list(want.keys()), path
        for k in want.keys():  # noqa: SIM118 -- iterating a TensorDict walks its batch dim
            _compare(got.get(k), want.get(k), check_leaf, f"{path}[{k!r}]")
        return
    if dataclasses.is_dataclass(want):
        assert vars(got).keys() == vars(want).keys(), path  # extra attributes too
        for k, v in vars(want).items():
            _compare(getattr(got, k), v, check_leaf, f"{path}.{k}")
        return
    if isinstance(want, dict):
        assert list(got.keys()) == list(want.keys()), f"{path}: key order"
        if isinstance(want, collections.defaultdict):
            assert got.default_factory is want.default_factory, f"{path}: default_factory"
        # Attributes of a dict subclass instance (plain strings in the corpus).
        assert getattr(got, "__dict__", None) == getattr(want, "__dict__", None), path
        for k, v in want.items():
            _compare(got[k], v, check_leaf, f"{path}[{k!r}]")
        return
    if isinstance(want, collections.deque):
        assert got.maxlen == want.maxlen, f"{path}: maxlen"
    assert len(got) == len(want), path
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        _compare(a, b, check_leaf, f"{path}[{i}]")


def _is_tensordict(x: Any) -> bool:
    return type(x).__module__.startswith("tensordict") or hasattr(x, "_tensordict")


def _is_container(x: Any) -> bool:
    if _is_tensordict(x) and hasattr(x, "batch_size"):
        return True
    return isinstance(x, (dict, list, tuple, collections.deque)) or dataclasses.is_dataclass(x)


def leaf_checker(device: Any) -> Callable[[Any, Any, str], None]:
    """``check_leaf`` for a move to ``device``: framework, dtype, shape, values, identity."""

    def check(got: Any, want: Any, path: str) -> None:
        source = framework_of(want)
        if source is None:
            if isinstance(want, Movable):
                assert isinstance(got, Movable) and got.device is device, path
                assert got.payload is want.payload, path
            elif _is_module(want):
                assert got is want, path  # nn.Module.to moves in place and returns itself
            else:
                assert got is want, f"{path}: a non-array leaf must come back as is"
            return
        expected = expected_framework(source, device)
        assert framework_of(got) == expected, f"{path}: {type(got)} is not a {expected} array"
        a, b = to_numpy(got), to_numpy(want)
        if expected == "jax":
            b = b.astype(jax_dtype(b.dtype))
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{a.shape}"
        np.testing.assert_array_equal(a, b, err_msg=path)

    return check


def jax_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype JAX holds ``dtype`` as (int64 -> int32 unless ``jax_enable_x64``)."""
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _is_module(x: Any) -> bool:
    torch = optional("torch")
    return torch is not None and isinstance(x, torch.nn.Module)


def cpu_devices() -> list[tuple[str, Any]]:
    """Every way to name the host here: "cpu", torch.device, a jax device, "/CPU:0"."""
    devices: list[tuple[str, Any]] = [("str_cpu", "cpu")]
    if (torch := optional("torch")) is not None:
        devices.append(("torch_device", torch.device("cpu")))
    if (jax := optional("jax")) is not None:
        devices.append(("jax_device", jax.devices("cpu")[0]))
    if optional("tf") is not None:
        devices.append(("tf_name", "/CPU:0"))
    return devices


# -- containers real libraries hand to a training loop ----------------------------------


class BatchEncodingLike(collections.UserDict):
    """A tokenizer's ``BatchEncoding``, in shape: a UserDict with its own ``__init__`` and ``.to``.

    As transformers' does, ``.to`` moves torch tensors in place (for a string or a
    ``torch.device``), leaves anything else, and returns the object itself; it also
    records the device it was given.
    """

    def __init__(self, data: Any = None, encoding: Any = None) -> None:
        super().__init__(data)
        self._encodings = encoding
        self.moved_to: Any = None

    def to(self, device: Any) -> BatchEncodingLike:
        torch = optional("torch")
        if torch is not None and isinstance(device, (str, torch.device)):
            self.data = {
                k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.data.items()
            }
        self.moved_to = device
        return self


@dataclasses.dataclass
class ModelOutputLike(collections.OrderedDict):  # type: ignore[type-arg]
    """The shape of a transformers ``ModelOutput``: a dataclass that is also an OrderedDict.

    Fields that are not None are also entries; setting either sets both.
    """

    loss: Any = None
    logits: Any = None
    hidden_states: Any = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)


class _Attribute:
    """What ``attrs.fields(cls)`` yields: an attribute with a ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name


class AttrsLike:
    """The shape of an ``@attrs.define`` class: slotted, its fields in ``__attrs_attrs__``."""

    __slots__ = ("image", "label")
    __attrs_attrs__ = (_Attribute("image"), _Attribute("label"))

    def __init__(self, image: Any, label: Any) -> None:
        self.image = image
        self.label = label


class Tagged(Point):
    """A namedtuple subclass whose instances carry attributes (``batch.tag = ...``)."""


def tagged(x: Any, y: Any, tag: str) -> Tagged:
    out = Tagged(x, y)
    out.tag = tag  # type: ignore[attr-defined]
    return out


def reset_accelerate() -> None:
    """Forget accelerate's process-wide state, as accelerate's own ``AccelerateTestCase`` does."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
