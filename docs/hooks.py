"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- ``cli.md`` is generated from the ``looptoolkit`` command's argparse parser:
  every subcommand it registers gets a section with its ``--help``, so a new
  subcommand appears without editing the docs.
- The reference results under ``benchmarks/results/`` become site files under
  ``results/`` (with an index page), and the guides' links to
  ``../benchmarks/results/...`` are pointed at them.
- Every ``::: name`` block must name an object whose docstring has an Examples
  section; one that does not is a warning, so ``mkdocs build --strict`` fails.
- The header shows the package's version, and ``CHANGELOG.md`` becomes the
  ``changelog.md`` page (its links into ``docs/`` pointed at the site's pages).
- The copy button of a ``pycon`` block (a ``>>>`` session) copies the code
  only: the block carries it, without prompts and output, in a ``data-copy``
  attribute, which Material's copy button takes instead of the block's text.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import logging
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

log = logging.getLogger("mkdocs.hooks.looptoolkit")

RESULTS = "benchmarks/results"
"""Where the reference results live, relative to the project root."""

RESULTS_URI = "results"
"""Where they go in the site."""

IDENTIFIER = re.compile(r"^:::\s+([\w.]+)", re.MULTILINE)

SESSION = re.compile(r'<div class="language-pycon highlight">(.*?)</div>', re.DOTALL)
"""A ``pycon`` block as pymdownx.highlight renders it (``pygments_lang_class``)."""

PROMPTS = (">>> ", "... ")


def on_config(config: Any) -> Any:
    """Show the version in the header: the site's name is ``looptoolkit X.Y.Z``."""
    from looptoolkit import __version__

    config["site_name"] = f"{config['site_name']} {__version__}"
    return config


def _help(argv: list[str]) -> str:
    """What ``looptoolkit ARGV`` prints (``--help`` exits), at a fixed width."""
    from looptoolkit.cli import main

    out = io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(argv)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return out.getvalue().rstrip()


def cli_page() -> str:
    """The command-line page: ``looptoolkit --help``, then each subcommand's ``--help``."""
    from looptoolkit.cli import _parser

    parser = _parser()
    commands: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                commands[choice.dest] = choice.help or ""
    lines = [
        "# Command line",
        "",
        "Installing looptoolkit installs the `looptoolkit` command (also "
        "`python -m looptoolkit`). This page is generated from the command's own "
        "`--help` when the site is built.",
        "",
        "```text",
        _help(["--help"]),
        "```",
    ]
    for name, text in commands.items():
        lines += ["", f"## `looptoolkit {name}`", "", f"{text[:1].upper()}{text[1:]}.", ""]
        lines += ["```text", _help([name, "--help"]), "```"]
    return "\n".join(lines) + "\n"


def results_index(names: list[str]) -> str:
    """The index page of the reference results: one link per file."""
    lines = [
        "# Reference results",
        "",
        f"The measurements committed under `{RESULTS}/`, written by `make reference`",
        "(see [Benchmarks](../benchmarks.md)): JSON with every round, the machine and",
        "the exact command; Markdown tables; PNG charts.",
        "",
    ]
    lines += [f"- [`{name}`]({name})" for name in names]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: Any) -> Files:
    """Add the generated command-line page and the reference results."""
    files.append(File.generated(config, "cli.md", content=cli_page()))
    root = Path(config["config_file_path"]).parent
    results = sorted(p for p in (root / RESULTS).iterdir() if p.is_file())
    for path in results:
        uri = f"{RESULTS_URI}/{path.name}"
        # The result pages are reached from their index and the guides.
        files.append(
            File.generated(config, uri, abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV)
        )
    index = results_index([p.name for p in results])
    files.append(File.generated(config, f"{RESULTS_URI}/index.md", content=index))
    files.append(File.generated(config, "changelog.md", content=changelog_page(root)))
    return files


def changelog_page(root: Path) -> str:
    """``CHANGELOG.md`` as a page of the site: its links into ``docs/`` lead to the pages."""
    text = (root / "CHANGELOG.md").read_text()
    return text.replace("](docs/", "](")


def session_code(block: str) -> str:
    """The code of a rendered ``pycon`` block, prompts and output removed.

    A statement shown raising an error (its output a traceback) is left out, so
    that the copied code runs as a script too.
    """
    text = html.unescape(re.sub(r"<[^>]+>", "", block))
    statements: list[list[str]] = []
    raises: list[bool] = []
    for line in text.splitlines():
        if line.startswith(PROMPTS[0]) or line == PROMPTS[0].strip():
            statements.append([line[len(PROMPTS[0]) :]])
            raises.append(False)
        elif statements and (line.startswith(PROMPTS[1]) or line == PROMPTS[1].strip()):
            statements[-1].append(line[len(PROMPTS[1]) :])
        elif statements and line.startswith("Traceback (most recent call last):"):
            raises[-1] = True
    kept = [lines for lines, error in zip(statements, raises, strict=True) if not error]
    # A blank line after a compound statement ends it when pasted into a REPL.
    return "\n".join("\n".join(lines + [""] * (len(lines) > 1)) for lines in kept).rstrip()


def on_page_content(content: str, page: Any, config: Any, files: Files) -> str:
    """Give each ``pycon`` block the code its copy button copies (``data-copy``)."""

    def with_copy(match: re.Match[str]) -> str:
        code = html.escape(session_code(match.group(1)), quote=True).replace("\n", "&#10;")
        return f'<div class="language-pycon highlight" data-copy="{code}">{match.group(1)}</div>'

    return SESSION.sub(with_copy, content)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point links at the results in the site; check the docstrings of ``:::`` blocks."""
    depth = page.file.src_uri.count("/")
    outside = "../" * (depth + 1) + RESULTS + "/"
    inside = "../" * depth + RESULTS_URI + "/"
    markdown = markdown.replace(f"]({outside})", f"]({inside}index.md)")
    markdown = markdown.replace(f"]({outside}", f"]({inside}")
    for identifier in IDENTIFIER.findall(markdown):
        _check_docstring(identifier, page.file.src_uri, config)
    return markdown


_packages: dict[str, Any] = {}


def on_pre_build(config: Any) -> None:
    """Load the packages afresh on every build (``mkdocs serve`` rebuilds after edits)."""
    _packages.clear()


def _check_docstring(identifier: str, where: str, config: Any) -> None:
    import griffe

    package, _, member = identifier.partition(".")
    if package not in _packages:
        root = Path(config["config_file_path"]).parent
        _packages[package] = griffe.load(package, search_paths=[str(root)])
    try:
        obj = _packages[package][member] if member else _packages[package]
        docstring = obj.docstring
    except (KeyError, griffe.AliasResolutionError):
        log.warning("%s: `::: %s` names no object of the package", where, identifier)
        return
    if docstring is None or "Examples:" not in docstring.value:
        log.warning("%s: `%s` has no docstring with an Examples section", where, identifier)
