"""The examples in docstrings run as written, in every module that has them."""

import doctest
import importlib
import pkgutil

import pytest

import looptoolkit

# Modules that need a framework beyond NumPy -> the framework.
NEEDS = {
    "looptoolkit.torch_data": "torch",
    "looptoolkit._static": "torch",
    "looptoolkit.tf_data": "tensorflow",
    "looptoolkit.distributed": "jax",
    "looptoolkit.adapters.torch": "torch",
    "looptoolkit.adapters._torch_cuda": "torch",
    "looptoolkit.adapters._torch_blocks": "torch",
    "looptoolkit.adapters.jax": "jax",
    "looptoolkit.adapters.tf": "tensorflow",
    "looptoolkit.bench.variants.torch": "torch",
    "looptoolkit.bench.variants.jax": "jax",
    "looptoolkit.bench.variants.tf": "tensorflow",
    "looptoolkit.bench.s3local": "moto",
    "looptoolkit.stores": "moto",
}
# Modules whose public functions show how they are used: they must have examples.
WITH_EXAMPLES = {
    "looptoolkit._common.dtypes",
    "looptoolkit._common.target",
    "looptoolkit.device._move",
    "looptoolkit.order._order",
    "looptoolkit.loader",
    "looptoolkit.distributed",
    "looptoolkit.torch_data",
    "looptoolkit.tf_data",
}
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(looptoolkit.__path__, "looptoolkit.")
    if info.name != "looptoolkit.__main__"
)


def test_every_module_with_examples_is_collected():
    assert set(MODULES) >= WITH_EXAMPLES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    if name in WITH_EXAMPLES:
        assert result.attempted > 0, f"{name} lost its examples"
