"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- ``cli.md`` is generated from the ``looptoolkit`` command's argparse parser:
  every subcommand it registers gets a section with its ``--help``, so a new
  subcommand appears without editing the docs.
- The reference results under ``benchmarks/results/`` become site files under
  ``results/`` (with an index page), and the guides' links to
  ``../benchmarks/results/...`` are pointed at them.
- Every ``::: name`` block must name an object whose docstring has an Examples
  section; one that does not is a warning, so ``mkdocs build --strict`` fails.
"""

from __future__ import annotations

import argparse
import contextlib
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
    return files


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
