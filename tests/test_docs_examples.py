"""The documentation's examples run as written, and the docs stand alone.

- Every ```python block marked ``<!-- example: NAME -->`` in docs/*.md runs (NAME
  says which framework it needs: torch, jax or tf).
- Every ``>>>`` example in docs/*.md runs as a doctest.
- No page sends the reader to a file outside the repository.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```python\n(.*?)```", re.DOTALL)
NEEDS = {
    "torch": ["torch"],
    "jax": ["jax"],
    "tf": ["tensorflow", "keras"],
    "numpy": [],
    "lightning": ["torch", "lightning"],
    "accelerate": ["torch", "accelerate"],
    "transformers": ["torch", "accelerate", "transformers"],
    "stores": ["zarr", "h5py"],
}
PAGES = sorted(DOCS.glob("*.md"))
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        for name, code in EXAMPLE.findall(page.read_text()):
            found.append((page.name, name, code))
    return found


EXAMPLES = examples()


def test_each_framework_has_its_examples():
    names = {(page, name) for page, name, _ in EXAMPLES}
    for page in ("adapters.md", "transform.md"):
        assert {(page, fw) for fw in ("torch", "jax", "tf")} <= names
    assert {name for _, name, _ in EXAMPLES} <= set(NEEDS)


@pytest.mark.parametrize(
    ("page", "name", "code"), EXAMPLES, ids=[f"{p}:{n}" for p, n, _ in EXAMPLES]
)
def test_example_runs(page, name, code):
    for module in NEEDS[name]:
        pytest.importorskip(module)
    # An example may register a backend and its variants: the registries are put back after it.
    from looptoolkit.adapters import _registry
    from looptoolkit.bench import variants

    saved = [(r, dict(r)) for r in (_registry.BACKENDS, _registry._loaded, variants._KITS)]
    try:
        exec(compile(code, f"{page}:{name}", "exec"), {"__name__": f"example_{name}"})
    finally:
        if "accelerate" in NEEDS[name]:
            # accelerate keeps its state in process-wide singletons: the next
            # example or test starts from none.
            from helpers import reset_accelerate

            reset_accelerate()
        for registry, before in saved:
            registry.clear()
            registry.update(before)
        _registry._owners.clear()  # leaf types seen while the example's backend was registered


@pytest.mark.parametrize(
    "page", [p for p in PAGES if ">>> " in p.read_text()], ids=lambda p: p.name
)
def test_interactive_examples_run(page):
    # Each ```python block with >>> lines is a doctest; the blocks of a page share
    # their names, as a reader typing them in one session would.
    text = "\n".join(b for b in BLOCK.findall(page.read_text()) if ">>> " in b)
    globs = {"__name__": "__main__"}
    test = doctest.DocTestParser().get_doctest(text, globs, page.name, str(page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_stand_alone(page):
    text = page.read_text()
    assert "BENCHMARKS.md" not in text
    assert "seed talk" not in text
    for target in re.findall(r"\]\(([^)#]+)", text):
        if "://" in target:
            continue
        assert (page.parent / target).resolve().is_relative_to(DOCS.parent), target
        assert (page.parent / target).exists(), f"{page.name} links to a missing {target}"
