"""The Loader's construction in three steps: `data` goes down one chain of layers, once.

Step 1 (what the rows are) is the only step that sees ``data``: the entry in
``looptoolkit._inputs`` hands it down ``mix`` -> ``ragged`` -> ``_rows``, each entered once,
never back up; the order (step 2) and the delivery (step 3) see the rows object only.
Traced by identity: every looptoolkit function called with the user's ``data`` object.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from test_layers import LAYERS, _layer

import looptoolkit as lt

# The layers whose modules decide what the rows are; the layers below them (the transfer's
# pytree helpers, the registry, the stores) are libraries every layer calls.
CHAIN = ("inputs", "mix", "ragged", "rows")
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


def _receivers(data: Any, **kwargs: Any) -> list[str]:
    """The modules of the looptoolkit functions called with ``data``, in call order."""
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if (
            event == "call"
            and module.startswith("looptoolkit.")
            and any(value is data for value in frame.f_locals.values())
        ):
            seen.append(module)

    sys.setprofile(profile)
    try:
        lt.Loader(data, 4, **kwargs)
    finally:
        sys.setprofile(None)
    return seen


class _TensorDatasetLike:
    def __init__(self, *tensors: Any) -> None:
        self.tensors = tensors


CASES = {
    "arrays": lambda tmp: {"x": np.zeros((12, 3)), "y": np.arange(12)},
    "memmap": lambda tmp: np.lib.format.open_memmap(tmp / "x.npy", "w+", np.float32, (12, 2)),
    "tensor-dataset": lambda tmp: _TensorDatasetLike(np.zeros((12, 2)), np.arange(12)),
    "token-lists": lambda tmp: {"ids": [[1, 2, 3], [4, 5], [6]] * 4, "y": np.arange(12)},
    "mix": lambda tmp: lt.Mix({"a": {"x": np.zeros((10, 2))}, "b": {"x": np.ones((6, 2))}}),
}


def _check(modules: list[str]) -> None:
    layers = [LAYERS[_layer(m)][0] for m in modules]
    # Neither the order nor the delivery is given the data: they are given the rows.
    assert not [layer for layer in layers if layer in ("order", "pipeline")], modules
    main = [layer for layer in layers if layer in (*CHAIN, "loader")]
    runs = [layer for i, layer in enumerate(main) if i == 0 or main[i - 1] != layer]
    assert runs[:2] == ["loader", "inputs"], runs
    # Each layer of the chain entered once, in the order of the chain: never back up.
    assert len(runs) == len(set(runs)), runs
    assert [RANK[layer] for layer in runs] == sorted((RANK[layer] for layer in runs), reverse=True)


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("device", [None, "cpu"])
def test_only_the_rows_step_sees_data_and_it_goes_down_once(kind, device, tmp_path):
    data = CASES[kind](tmp_path)
    _check(_receivers(data, device=device, shuffle="grouped"))


def test_a_detour_back_up_is_caught(monkeypatch):
    # The route of the old construction: the ragged layer asked first, then the entry again.
    import looptoolkit._inputs.kinds as kinds
    from looptoolkit.ragged._column import find_ragged

    real = kinds.rows_of

    def detour(data: Any, *args: Any) -> Any:
        find_ragged(data)
        return real(kinds.dataset_data(data), *args)

    monkeypatch.setattr(kinds, "rows_of", detour)
    monkeypatch.setattr("looptoolkit.loader.rows_of", detour)
    data = {"x": np.zeros((12, 3))}
    with pytest.raises(AssertionError, match="ragged"):
        _check(_receivers(data))
