"""Keras 3 ``model.fit`` trains on exactly the Loader's epochs, on every backend.

Keras fixes its backend at import, so each backend runs in its own subprocess
(``_keras_fit.py``, once per backend for all the tests here): a real
``model.fit`` of a small MLP, run eagerly, whose first layer records the row
id of every training batch. Fit epochs 0-2 must be ``Loader.indices(e)``
through ``loader_dataset(loader)`` and ``make_dataloader`` (0 and 2 workers),
also when resumed at the end of epoch 0 (``set_epoch(1)`` or ``start_epoch=1``
and ``initial_epoch=1``). On the JAX and torch backends Keras takes one batch
to build the model before training: that pass must shift nothing. The same
subprocess runs the Keras example of docs/adapters.md, and nothing in it may
warn.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "_keras_fit.py"
ADAPTERS = HERE.parent.parent / "docs" / "adapters.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```python\n(.*?)```", re.DOTALL)
KERAS_SECTION = "## Keras: `model.fit` through tf.data"

BACKENDS = ["jax", "torch", "tensorflow"]
# Route -> the first fit epoch (``initial_epoch``); every fit ends after epoch 2.
ROUTES = {
    "loader_dataset": 0,
    "loader_dataset-set_epoch": 1,
    "loader_dataset-start_epoch": 1,
    "make_dataloader-w0": 0,
    "make_dataloader-w0-set_epoch": 1,
    "make_dataloader-w2": 0,
    "make_dataloader-w2-set_epoch": 1,
}
TIMEOUT = 240

_spec = importlib.util.spec_from_file_location("_keras_fit", SCRIPT)
assert _spec is not None and _spec.loader is not None
fit_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fit_script)  # its top level imports NumPy only

REFERENCE = Loader(fit_script.data(), fit_script.B, seed=fit_script.SEED)


def keras_example() -> str:
    """The code of the example in the Keras section of docs/adapters.md."""
    text = ADAPTERS.read_text()
    match = EXAMPLE.search(text, text.index(KERAS_SECTION))
    assert match is not None and match.group(1) == "tf"
    return match.group(2)


def _needs_frameworks() -> None:
    # They run in the subprocess only: found, not imported (importing all three
    # here would cost seconds of the budget).
    for module in ("keras", "tensorflow", "jax", "torch"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}")


@functools.cache
def run(backend: str) -> dict[str, Any]:
    """The subprocess's JSON result for ``backend``, or ``{"failed": why}``; run once."""
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ, "KERAS_BACKEND": backend}
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT)],
            input=keras_example(),
            capture_output=True,
            text=True,
            env=env,
            cwd=HERE,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        return {"failed": f"no result after {TIMEOUT} s; stderr:\n{e.stderr}"}
    if done.returncode:
        return {"failed": f"exit status {done.returncode}; stderr:\n{done.stderr[-6000:]}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def result_for(backend: str) -> dict[str, Any]:
    _needs_frameworks()
    result = run(backend)
    assert "failed" not in result, result["failed"]
    assert result["keras_backend"] == backend
    return result


def which_epoch(ids: np.ndarray) -> int | str:
    """The Loader epoch whose order ``ids`` is (for a readable failure)."""
    for epoch in range(8):
        if np.array_equal(ids, REFERENCE.indices(epoch)):
            return epoch
    if np.array_equal(np.sort(ids), np.arange(fit_script.N)):
        return "an order of none of epochs 0-7"
    return f"{len(ids)} rows, not a permutation"


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("backend", BACKENDS, ids=BACKENDS)
def test_fit_epochs_train_on_the_loaders_epochs(backend, route):
    found = result_for(backend)["routes"][route]
    seen = {int(epoch): np.asarray(ids) for epoch, ids in found["epochs"].items()}
    expected = list(range(ROUTES[route], fit_script.EPOCHS))
    assert sorted(seen) == expected  # no batch trained outside the fit epochs (-1)
    for epoch in expected:  # the recording saw every row once
        np.testing.assert_array_equal(np.sort(seen[epoch]), np.arange(fit_script.N))
    assert {epoch: which_epoch(ids) for epoch, ids in seen.items()} == {e: e for e in expected}
    assert found["next"] == fit_script.EPOCHS  # the source runs epoch 3 next


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKENDS)
def test_the_docs_keras_example_runs(backend):
    assert result_for(backend)["example"] is None


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKENDS)
def test_nothing_warns(backend):
    assert result_for(backend)["warnings"] == []
