"""The backend registry: registering a backend, finding a leaf's owner, lazy imports."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader, to_device
from looptoolkit.adapters import (
    BACKENDS,
    DEVICE_HOMES,
    Backend,
    BackendBase,
    _registry,
    backend_of,
    get_backend,
    loaded_backends,
    register_backend,
)


class Boxed:
    """A toy framework's array: a NumPy array in a box."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values)
        self.shape = self.values.shape
        self.dtype = self.values.dtype
        self.device = "host"


class BoxedBackend(BackendBase):
    name = "boxed"

    def is_array(self, x: object) -> bool:
        return isinstance(x, Boxed)

    def dtype_name(self, x: Boxed) -> str:
        return x.dtype.name

    def take(self, leaves: Any, idx: np.ndarray) -> list[Boxed]:
        return [Boxed(leaf.values[idx]) for leaf in leaves]

    def take_batches(self, leaves: Any, batches: Any) -> Any:
        for idx in batches:
            yield self.take(leaves, idx)

    def stack(self, leaves: Any) -> Boxed:
        return Boxed(np.stack([leaf.values for leaf in leaves]))

    def move(self, leaves: Any, target: Any, non_blocking: Any, pack: Any) -> list[Boxed]:
        out = [Boxed(getattr(leaf, "values", leaf)) for leaf in leaves]
        for moved in out:
            moved.device = target.spec
        return out

    def cast(self, x: Any, name: str) -> Boxed:
        return Boxed(np.asarray(getattr(x, "values", x)).astype(name))

    def constant(self, values: np.ndarray, like: Any) -> Boxed:
        return Boxed(values)

    def synchronize(self, target: Any = None) -> None:
        pass

    def resolve_device(self, target: Any) -> str:
        return target.spec


@pytest.fixture
def boxed(monkeypatch):
    """The toy framework as an importable module, registered; the registry restored after."""
    framework = types.ModuleType("boxed_framework")
    adapter = types.ModuleType("boxed_adapter")
    adapter.backend = BoxedBackend()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "boxed_framework", framework)
    monkeypatch.setitem(sys.modules, "boxed_adapter", adapter)
    backends, homes = dict(BACKENDS), dict(DEVICE_HOMES)
    register_backend("boxed", "boxed_adapter", framework="boxed_framework", devices=("box",))
    yield adapter.backend
    BACKENDS.clear()
    BACKENDS.update(backends)
    DEVICE_HOMES.clear()
    DEVICE_HOMES.update(homes)
    _registry._loaded.pop("boxed", None)
    _registry._owners.clear()


def test_a_registered_backend_owns_its_arrays(boxed):
    assert get_backend("boxed") is boxed
    assert boxed in loaded_backends()
    assert backend_of(Boxed(np.arange(3))) is boxed
    assert isinstance(boxed, Backend)


def test_a_registered_backend_is_batched_by_the_loader(boxed):
    data = {"x": Boxed(np.arange(10) * 10)}
    batches = list(Loader(data, 4, shuffle=False))
    assert [type(b["x"]) for b in batches] == [Boxed] * 3
    np.testing.assert_array_equal(batches[0]["x"].values, [0, 10, 20, 30])


def test_numpy_leaves_go_to_the_backend_its_device_names(boxed):
    out = to_device({"x": np.arange(3, dtype=np.int64)}, "box:0")["x"]
    assert isinstance(out, Boxed) and out.device == "box:0"
    np.testing.assert_array_equal(out.values, [0, 1, 2])


def test_a_backend_whose_framework_is_not_imported_is_not_asked(monkeypatch, tmp_path):
    (tmp_path / "absent_adapter.py").write_text("import no_such_framework\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(BACKENDS, "absent", ("absent_adapter", "no_such_framework", "absent"))
    assert all(backend.name != "absent" for backend in loaded_backends())
    with pytest.raises(
        ImportError, match=r"no_such_framework is not installed.*looptoolkit\[absent\]"
    ):
        get_backend("absent")
