"""The documentation's examples run as pasted, each block on its own, and the docs stand alone.

- Every fenced block of docs/*.md and README.md names its language. A
  ```python block is a script and a ```pycon block a doctest (``>>>`` prompts);
  each runs alone, in a fresh namespace, as a reader pasting only that block
  would run it. Sketches that cannot run are fenced as ```text.
- ``<!-- example: NAME -->`` before a block says which frameworks it needs
  (NAME is a key of ``NEEDS``; a block without one needs only NumPy); it is
  skipped when they are not installed.
- The check has teeth: a block that uses a name an earlier block defined fails.
- No page sends the reader to a file outside the repository.
"""

from __future__ import annotations

import doctest
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NEEDS = {
    "torch": ["torch"],
    "jax": ["jax"],
    "tf": ["tensorflow", "keras"],
    "numpy": [],
    "lightning": ["torch", "lightning"],
    "accelerate": ["torch", "accelerate"],
    "transformers": ["torch", "accelerate", "transformers"],
    "stores": ["zarr", "h5py"],
    "bucket": ["zarr", "obstore", "s3fs", "moto"],
}
LANGUAGES = {"python", "pycon", "sh", "bash", "text"}
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^(?:<!-- example: (\w+) -->\n)?```(\S*)[^\n]*\n(.*?)^```\n", re.M | re.S)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str
    line: int
    language: str
    needs: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(text: str, page: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        needs, language, code = match.groups()
        line = text.count("\n", 0, match.start()) + 1 + (needs is not None)
        found.append(Block(page, line, language, needs or "numpy", code))
    return found


ALL = [block for page in PAGES for block in blocks(page.read_text(), page.name)]
RUNNABLE = [block for block in ALL if block.language in {"python", "pycon"}]


def run(block: Block) -> None:
    """Run one block alone, in a fresh namespace; raise if it fails."""
    if block.language == "pycon":
        globs = {"__name__": "__main__"}
        test = doctest.DocTestParser().get_doctest(block.code, globs, block.id, block.page, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        out: list[str] = []
        runner.run(test, out=out.append)
        assert runner.summarize(verbose=False).failed == 0, "".join(out)
        assert test.examples, f"{block.id}: a pycon block without >>> examples"
    else:
        exec(compile(block.code, block.id, "exec"), {"__name__": f"example_{block.needs}"})


def test_each_framework_has_its_examples():
    names = {(block.page, block.needs) for block in RUNNABLE}
    for page in ("adapters.md", "transform.md"):
        assert {(page, fw) for fw in ("torch", "jax", "tf")} <= names
    assert {block.needs for block in ALL} <= set(NEEDS)


def test_every_block_names_a_known_language():
    assert len(RUNNABLE) > 30
    for block in ALL:
        assert block.language in LANGUAGES, block.id
        if block.language == "python":
            # a session with prompts is a pycon block: its copy button copies the code only
            assert not re.search(r"^>>> ", block.code, re.M), block.id
        if block.language == "pycon":
            assert block.code.startswith(">>> "), block.id


def test_a_block_that_relies_on_an_earlier_one_fails():
    page = (
        "```pycon\n>>> import numpy as np\n>>> data = np.arange(3)\n```\n\n"
        "```pycon\n>>> data.sum()\n3\n```\n\n"
        "```python\nprint(data)\n```\n"
    )
    first, second, third = blocks(page, "planted.md")
    run(first)
    with pytest.raises(AssertionError, match="NameError: name 'data' is not defined"):
        run(second)
    with pytest.raises(NameError, match="'data'"):
        run(third)


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_block_runs_alone(block):
    for module in NEEDS[block.needs]:
        pytest.importorskip(module)
    # An example may register a backend and its variants: the registries are put back after it.
    from looptoolkit.adapters import _registry
    from looptoolkit.bench import variants

    saved = [(r, dict(r)) for r in (_registry.BACKENDS, _registry._loaded, variants._KITS)]
    try:
        run(block)
    finally:
        if "accelerate" in NEEDS[block.needs]:
            # accelerate keeps its state in process-wide singletons: the next
            # example or test starts from none.
            from helpers import reset_accelerate

            reset_accelerate()
        distributed = sys.modules.get("torch.distributed")
        if distributed is not None and distributed.is_initialized():
            distributed.destroy_process_group()  # a failed example leaves no process group
        for registry, before in saved:
            registry.clear()
            registry.update(before)
        _registry._owners.clear()  # leaf types seen while the example's backend was registered


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_stand_alone(page):
    text = page.read_text()
    assert "BENCHMARKS.md" not in text
    assert "seed talk" not in text
    for target in re.findall(r"\]\(([^)#]+)", text):
        if "://" in target:
            continue
        assert (page.parent / target).resolve().is_relative_to(ROOT), target
        assert (page.parent / target).exists(), f"{page.name} links to a missing {target}"


@pytest.mark.parametrize(("page", "name"), [("loader.md", "Loader"), ("to_device.md", "to_device")])
def test_hand_written_signatures_are_the_real_ones(page, name):
    import inspect

    import looptoolkit

    (sketch,) = [
        b.code for b in blocks((DOCS / page).read_text(), page) if b.code.startswith(f"{name}(")
    ]
    written = re.findall(r"(\w+)(?:=[^,)]*)?[,)]", sketch.replace("*,", ""))
    real = list(inspect.signature(getattr(looptoolkit, name)).parameters)
    assert written == real


@pytest.mark.parametrize("page", [*PAGES, ROOT / "CHANGELOG.md"], ids=lambda p: p.name)
def test_link_texts_are_titles_not_file_names(page):
    pages = {p.name for p in DOCS.glob("*.md")} | {"README.md", "CHANGELOG.md"}
    texts = re.findall(r"\[`?([^\]`]+?)`?\]\(", page.read_text())
    named = [
        text
        for text in texts
        if text.rpartition("/")[2] in pages or re.fullmatch(r"[\w./-]*\.(md|json)", text)
    ]
    assert named == []


def test_the_integrations_page_names_the_extra_that_brings_its_stacks():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["integrations"]
    names = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in extra}
    needed = {m for block in ALL if block.page == "integrations.md" for m in NEEDS[block.needs]}
    assert needed and needed - {"torch"} <= names
    assert "looptoolkit[torch]" in extra
    pinned = {
        line.split("==")[0]
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    assert names - {"looptoolkit"} <= pinned
    assert (
        'pip install -c constraints.txt ".[integrations]"' in (DOCS / "integrations.md").read_text()
    )


def test_the_gpu_page_opens_with_an_example_that_runs_on_a_cpu_too():
    """The first block of the GPU page picks "cuda" when there is one, else the CPU, and runs."""
    pytest.importorskip("torch")
    text = (DOCS / "gpu.md").read_text()
    first = next(block for block in blocks(text, "gpu.md") if block.language == "python")
    assert text.index("## Hello GPU") < text.index("## What runs where")
    assert first.needs == "torch" and 'torch.cuda.is_available() else "cpu"' in first.code
    run(first)


# The house line length. What the built site shows whole at 1280 px, from its CSS: Material's
# defaults leave 656 px for code at 13.6 px, 80 characters of DejaVu Sans Mono (0.602 em
# each); docs/stylesheets/code.css widens the grid and sets code at 0.8em: about 700 px at
# 12.8 px, 91 characters. (The 17 clipped blocks the issue counted are those with lines over ~94.)
CODE_LINE_LIMIT = 88


def test_code_lines_fit_the_page_so_output_comments_stay_visible():
    """No fenced line over the limit, except the architecture page's module map (a diagram)."""
    long = [
        f"{block.page}:{block.line + i + 1} ({len(line)} characters)"
        for block in ALL
        if not (block.page == "architecture.md" and block.language == "text")
        for i, line in enumerate(block.code.splitlines())
        if len(line) > CODE_LINE_LIMIT
    ]
    assert long == [], f"fenced code lines over {CODE_LINE_LIMIT} characters: {long}"
