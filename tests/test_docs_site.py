"""The documentation site builds with ``mkdocs build --strict`` and covers the public API.

- The real site builds without a warning; its reference page has an entry, with
  a signature and examples, for every public name; its command-line page has
  every subcommand of the parser.
- The check has teeth: a copy of the project with a guide linking a missing
  anchor, a docstring linking a missing object, a docstring without examples
  and a docstring naming a parameter that does not exist fails to build, with
  each fault named.
- Each guide links the reference entry of every public name it mentions.
- The site opens from disk: every internal link and asset of every page
  resolves to a file (and the anchor it names); the header shows the version;
  the changelog is a page; the home page links the chooser's pages.
- The copy button of a ``>>>`` session copies its code only, and that code runs.

mkdocs comes with the docs extra, which ``make install`` installs: without it
this module fails to import rather than skipping.
"""

from __future__ import annotations

import ast
import doctest
import html as htmllib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import mkdocs  # noqa: F401  (the docs extra is required, not optional)
import pytest

import looptoolkit

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INTEGRATIONS = ("looptoolkit.torch_data", "looptoolkit.tf_data", "looptoolkit.distributed")
GUIDES = sorted(
    p for p in DOCS.glob("*.md") if p.name not in {"index.md", "reference.md", "extending.md"}
)


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )


def public_names(module: str) -> list[str]:
    """A module's ``__all__``, read from its source (imports no framework)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no __all__")


def reference_targets() -> dict[str, set[str]]:
    """Every public name -> the identifiers it is documented under."""
    targets = {name: {f"looptoolkit.{name}"} for name in looptoolkit.__all__}
    for module in INTEGRATIONS:
        for name in public_names(module):
            targets.setdefault(name, set()).add(f"{module}.{name}")
    del targets["__version__"]
    return targets


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    result = build(ROOT, out)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def entries(html: str) -> dict[str, str]:
    """The HTML of each top-level object of a reference page, by its id."""
    parts = re.split(r'<h3 id="([\w.]+)"', html)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_reference_has_every_public_name_with_signature_and_examples(site):
    html = (site / "reference.html").read_text()
    found = entries(html)
    for name in looptoolkit.__all__:
        if name == "__version__":
            assert "looptoolkit.__version__" in html
            continue
        assert f"looptoolkit.{name}" in found, name
    for module in INTEGRATIONS:
        for name in public_names(module):
            # re-exported names are documented once, under their looptoolkit path
            key = f"looptoolkit.{name}" if name in looptoolkit.__all__ else f"{module}.{name}"
            assert key in found, key
    # Exceptions and warnings are the only entries without a signature.
    exceptions = {
        f"looptoolkit.{name}"
        for name, value in vars(looptoolkit).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    assert exceptions
    # NamedTuples (the ragged layouts) have their fields for a signature: each is listed.
    publics = {name: getattr(looptoolkit, name) for name in looptoolkit.__all__}
    records = {
        f"looptoolkit.{name}": value._fields
        for name, value in publics.items()
        if isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")
    }
    for key, entry in found.items():
        if key in records:
            assert all(field in entry for field in records[key]), key
        assert key in exceptions or key in records or "doc-signature" in entry, key
        assert "Examples:" in entry, key
        assert "Guide:" in entry, key


def test_extending_documents_the_backend_protocol(site):
    html = (site / "extending.html").read_text()
    assert 'id="looptoolkit.adapters.Backend"' in html
    # The required surface and each optional capability, with their methods.
    assert 'id="looptoolkit.adapters.Required.take"' in html
    for capability in ("Staging", "Sharding", "Containers", "Native"):
        assert f'id="looptoolkit.adapters.{capability}"' in html


def test_cli_page_has_every_subcommand(site):
    from looptoolkit.cli import _parser

    parser = _parser()
    (subparsers,) = [a for a in parser._actions if a.choices and a.dest == "command"]
    html = (site / "cli.html").read_text()
    assert "usage: looptoolkit [-h]" in html
    assert list(subparsers.choices)
    for name in subparsers.choices:
        assert f"usage: looptoolkit {name}" in html, name


def test_results_the_guides_link_are_in_the_site(site):
    html = (site / "benchmarks.html").read_text()
    assert 'src="results/compare-cpu.png"' in html
    assert (site / "results" / "compare-cpu.png").read_bytes() == (
        ROOT / "benchmarks" / "results" / "compare-cpu.png"
    ).read_bytes()


def test_strict_build_fails_on_broken_links_and_docstrings(tmp_path):
    project = tmp_path / "project"
    ignore = shutil.ignore_patterns("__pycache__")
    for part in ("docs", "looptoolkit", "benchmarks/results"):
        shutil.copytree(ROOT / part, project / part, ignore=ignore)
    for part in ("mkdocs.yml", "README.md", "CHANGELOG.md"):
        shutil.copy(ROOT / part, project / part)

    def edit(relative: str, old: str, new: str) -> None:
        path = project / relative
        text = path.read_text()
        assert old in text, (relative, old)
        path.write_text(text.replace(old, new, 1))

    # A guide linking a heading that does not exist.
    edit("docs/loader.md", "## Resume\n", "## Resume\n\nSee [orders](order.md#no-such-heading).\n")
    # A public docstring linking an object that does not exist.
    edit(
        "looptoolkit/loader.py",
        "][looptoolkit.Loader.set_epoch] always",
        "][looptoolkit.no_such_name] always",
    )
    # A public docstring without its examples.
    edit("looptoolkit/_rows/records.py", "    Examples:\n", "    Usage:\n")
    # A docstring naming a parameter the function does not have.
    edit("looptoolkit/distributed.py", "    Args:\n", "    Args:\n        no_such_arg: nothing.\n")

    result = build(project, tmp_path / "site")
    assert result.returncode != 0
    log = result.stdout + result.stderr
    assert re.search(r"Aborted with \d+ warnings in strict mode", log), log
    assert "does not contain an anchor '#no-such-heading'" in log
    assert "Could not find cross-reference target 'looptoolkit.no_such_name'" in log
    assert "`looptoolkit.stack_records` has no docstring with an Examples section" in log
    assert "Parameter 'no_such_arg' does not appear in the function signature" in log


def mentions(page: Path) -> str:
    """A page's prose: fenced code blocks and headings left out."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: p.name)
def test_guides_link_the_reference_of_the_names_they_mention(page):
    prose = mentions(page)
    missing = []
    for name, targets in reference_targets().items():
        mentioned = re.search(rf"`(looptoolkit\.(\w+\.)?)?{re.escape(name)}[`(]", prose)
        # a link to the entry or to one of its members
        linked = any(re.search(rf"\]\[{re.escape(target)}[\].]", prose) for target in targets)
        if mentioned and not linked:
            missing.append(name)
    assert missing == []


def test_every_public_name_is_linked_from_a_guide():
    linked = "\n".join(mentions(page) for page in GUIDES)
    unlinked = [
        name
        for name in looptoolkit.__all__
        if name != "__version__" and f"][looptoolkit.{name}]" not in linked
    ]
    assert unlinked == []


def internal_links(page: Path) -> list[str]:
    """The ``href`` and ``src`` targets of a built page that stay inside the site."""
    targets = re.findall(r'(?:href|src)="([^"]*)"', page.read_text())
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and t]


def test_every_internal_link_of_the_site_opens_a_file(site):
    # 404.html is for a web server (its links are absolute); every other page opens from disk
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    assert len(pages) > 15
    ids: dict[Path, set[str]] = {}
    checked = 0
    for page in pages:
        for target in internal_links(page):
            parts = urlsplit(target)
            path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            assert path.is_file(), f"{page.relative_to(site)} links {target}: no such file"
            if parts.fragment and path.suffix == ".html":
                if path not in ids:
                    ids[path] = set(re.findall(r'id="([^"]+)"', path.read_text()))
                assert unquote(parts.fragment) in ids[path], f"{page.name} links {target}"
            checked += 1
    assert checked > 500


def test_a_broken_link_of_the_site_is_found(tmp_path):
    page = tmp_path / "index.html"
    page.write_text('<a href="loader/">The Loader</a><a href="https://example.org/">x</a>')
    (tmp_path / "loader").mkdir()
    (target,) = internal_links(page)
    assert not (page.parent / target).resolve().is_file()  # a folder opens a listing


def test_header_shows_the_version_and_the_changelog_is_a_page(site):
    index = (site / "index.html").read_text()
    assert f"looptoolkit {looptoolkit.__version__}" in index
    assert 'href="changelog.html' in index
    changelog = (site / "changelog.html").read_text()
    assert "Unreleased" in changelog
    assert 'href="loader.html#which-epoch-a-loop-runs"' in changelog


def test_home_page_links_the_chooser_pages(site):
    index = (site / "index.html").read_text()
    for page in ("from-dataloader.html", "faq.html"):
        assert f'href="{page}"' in index, page


def copied(page: Path) -> list[str]:
    """What the copy button of each ``>>>`` session of a built page copies."""
    found = re.findall(
        r'<div class="language-pycon highlight" data-copy="([^"]*)"', page.read_text()
    )
    return [htmllib.unescape(code) for code in found]


def test_session_copy_buttons_copy_only_code_that_runs(site):
    sessions = 0
    for page in sorted(site.glob("*.html")):
        codes = copied(page)
        assert len(codes) == page.read_text().count("language-pycon"), page.name
        assert not any(">>>" in code for code in codes), page.name
        source = DOCS / page.with_suffix(".md").name
        if not source.exists() or ":::" in source.read_text():
            continue  # generated, or with docstring examples (test_doctests runs those)
        blocks = re.findall(r"^```pycon\n(.*?)^```\n", source.read_text(), re.M | re.S)
        assert len(codes) == len(blocks), source.name
        for block, code in zip(blocks, codes, strict=True):
            examples = doctest.DocTestParser().get_examples(block)
            kept = [e.source for e in examples if not e.exc_msg]
            assert [line for line in code.splitlines() if line] == [
                line for source_code in kept for line in source_code.splitlines() if line
            ]
            exec(compile(code, page.name, "exec"), {"__name__": "__main__"})
            sessions += 1
    assert sessions > 10
