"""The examples in docstrings run as written."""

import doctest
import importlib

import pytest

MODULES = {
    "looptoolkit.device": None,
    "looptoolkit.tree": None,
    "looptoolkit.order": None,
    "looptoolkit.loader": None,
    "looptoolkit.distributed": None,
    "looptoolkit.dataset": "torch",
    "looptoolkit.adapters.torch": "torch",
    "looptoolkit.adapters.jax": "jax",
    "looptoolkit.adapters.tf": "tensorflow",
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstring_examples(name):
    if MODULES[name]:
        pytest.importorskip(MODULES[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
