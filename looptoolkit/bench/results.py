"""Where a benchmark's results go, how they are written (JSON, Markdown, PNG) and read back.

By default a run writes to ``./looptoolkit-results/`` (a directory of the
user's, ignored by git: it holds its own ``.gitignore``), or to ``--out DIR``.
The reference results committed with the project, under
``benchmarks/results/`` of a source checkout, are rewritten only on purpose
(``--reference``, or ``make reference``).

Every JSON file carries a ``schema`` version ([`SCHEMA`][looptoolkit.bench.results.SCHEMA]);
``looptoolkit report`` reads one back as a typed [`Run`][looptoolkit.bench.results.Run]
and refuses a file of another version, naming it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_OUT",
    "REFERENCE_HELP",
    "SCHEMA",
    "Group",
    "ResultsError",
    "Run",
    "Timing",
    "Verdict",
    "reference_dir",
    "results_dir",
    "write_results",
]

SCHEMA = 2
"""Version of the results JSON. 1: files written before the version was recorded."""

DEFAULT_OUT = Path("looptoolkit-results")
"""The default results directory, relative to the current directory."""

REFERENCE_HELP = (
    "write to the project's committed reference results (benchmarks/results/ of a "
    "source checkout) instead of --out"
)


def reference_dir() -> Path:
    """``benchmarks/results/`` of the source checkout this package runs from.

    Raises:
        FileNotFoundError: the package is not running from a source checkout.
    """
    root = Path(__file__).resolve().parents[2]
    path = root / "benchmarks" / "results"
    if not path.is_dir():
        raise FileNotFoundError(
            f"`--reference`: no benchmarks/results/ beside this package ({root}); "
            "it is only in a source checkout."
        )
    return path


def results_dir(out: str | Path | None, *, reference: bool = False) -> Path:
    """The directory to write to, created; the default one ignores itself in git.

    Args:
        out: ``--out`` (None: [`DEFAULT_OUT`][looptoolkit.bench.results.DEFAULT_OUT]).
        reference: write to [`reference_dir`][looptoolkit.bench.results.reference_dir] instead.
    """
    if reference:
        return reference_dir()
    path = Path(DEFAULT_OUT if out is None else out)
    path.mkdir(parents=True, exist_ok=True)
    if out is None:
        ignore = path / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# results of looptoolkit compare / transfer, not source\n*\n")
    return path


def write_results(
    directory: str | Path, stem: str, payload: dict[str, Any], markdown: str
) -> list[Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` under ``directory``; return the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"{stem}.json"
    md_path = out / f"{stem}.md"
    payload = {"schema": SCHEMA, "suite": stem.split("-")[0], **payload}
    json_path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    md_path.write_text(markdown)
    return [json_path, md_path]


def _jsonable(obj: Any) -> Any:
    summary = getattr(obj, "summary", None)
    if callable(summary):
        return summary()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return str(obj)


class ResultsError(ValueError):
    """A results file this version cannot read (another schema, not a results file)."""


@dataclass(frozen=True)
class Timing:
    """One variant's timing: median, min and max seconds over the interleaved rounds."""

    name: str
    median_s: float
    min_s: float
    max_s: float
    label: str = ""
    backend: str = ""


@dataclass(frozen=True)
class Group:
    """The variants timed together in one interleaved run: a workload, a transfer section."""

    name: str
    description: str
    timings: tuple[Timing, ...]


@dataclass(frozen=True)
class Verdict:
    """A target's verdict: its goal, the measured ratio (None: not measured) and the status."""

    key: str
    goal: str
    value: float | None
    status: str


@dataclass(frozen=True)
class Run:
    """One results file: the suite, where and how it ran, its timings and verdicts.

    ``payload`` is the file's whole content, for the renderers of its suite.
    """

    suite: str
    schema: int
    device: str
    command: str
    groups: tuple[Group, ...]
    verdicts: tuple[Verdict, ...]
    payload: dict[str, Any]

    def medians(self) -> dict[tuple[str, str], float]:
        """``(group, variant) -> median seconds`` of every timed variant."""
        return {(g.name, t.name): t.median_s for g in self.groups for t in g.timings}
