"""The examples of docs/adapters.md run as written (each on small data)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "adapters.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```python\n(.*?)```", re.DOTALL)
NEEDS = {"torch": ["torch"], "jax": ["jax"], "tf": ["tensorflow", "keras"]}


def examples() -> dict[str, str]:
    return {name: code for name, code in EXAMPLE.findall(DOC.read_text())}


def test_every_framework_has_an_example():
    assert set(examples()) == set(NEEDS)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_example_runs(name):
    for module in NEEDS[name]:
        pytest.importorskip(module)
    code = examples()[name]
    exec(compile(code, f"{DOC.name}:{name}", "exec"), {"__name__": f"example_{name}"})
