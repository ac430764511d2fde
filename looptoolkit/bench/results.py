"""A benchmark run as typed results, written to JSON (``schema`` 3) and read by the same types."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_OUT", "REFERENCE_HELP", "SCHEMA", "Group", "ResultsError", "Row", "Run"]
__all__ += ["Verdict", "results_dir", "write_results"]

SCHEMA = 3  # the results JSON's version; 1: before it was recorded, 2: untyped workloads
DEFAULT_OUT = Path("looptoolkit-results")  # relative to the current directory

REFERENCE_HELP = (
    "write to the project's committed reference results (benchmarks/results/ of a "
    "source checkout) instead of --out"
)


class ResultsError(ValueError):
    """A results file this version cannot read (another schema, not a results file)."""


def results_dir(out: str | Path | None, *, reference: bool = False) -> Path:
    """The directory to write to, created; the default ignores itself in git (``.gitignore``).

    ``reference``: the committed ``benchmarks/results/`` (FileNotFoundError outside a checkout).
    """
    if reference:
        path = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
        if not path.is_dir():
            raise FileNotFoundError(
                f"`--reference`: no {path} beside this package; it is only in a source checkout."
            )
        return path
    path = Path(DEFAULT_OUT if out is None else out)
    path.mkdir(parents=True, exist_ok=True)
    if out is None and not (path / ".gitignore").exists():
        (path / ".gitignore").write_text("# results of looptoolkit compare / transfer\n*\n")
    return path


def write_results(out: str | Path, stem: str, payload: dict[str, Any], text: str) -> list[Path]:
    """Write ``<stem>.json`` (``payload`` with ``schema`` and ``suite``) and ``<stem>.md``."""
    json_path, md_path = Path(out) / f"{stem}.json", Path(out) / f"{stem}.md"
    payload = {"schema": SCHEMA, "suite": stem.split("-")[0], **payload}
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md_path.write_text(text)
    return [json_path, md_path]


@dataclass
class Row:
    """A variant: what it is, its check and status, its rounds in seconds.

    ``status``: ``"ok"``, ``"failed"`` (its check) or ``"error"`` (while timing); ``detail``: why.
    ``bounded``: the batches timed per epoch, scaled to the whole epoch.
    """

    name: str
    label: str = ""
    backend: str = ""
    floor: str | None = None
    rounds_s: list[float] = field(default_factory=list)
    check: str = ""
    status: str = "ok"
    detail: str = ""
    bounded: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    timed = property(lambda self: self.status == "ok" and bool(self.rounds_s), doc="Has timings.")
    median_s = property(lambda self: statistics.median(self.rounds_s), doc="Median seconds.")
    min_s = property(lambda self: min(self.rounds_s), doc="Fastest round.")
    max_s = property(lambda self: max(self.rounds_s), doc="Slowest round.")


@dataclass
class Group:
    """Variants timed together, a round (``unit``) each; ratios to ``baseline`` or the first."""

    name: str
    title: str
    rows: list[Row]
    unit: str = "epoch"
    baseline: str | None = None
    batches: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def timed(self) -> dict[str, Row]:
        """The timed rows by name."""
        return {r.name: r for r in self.rows if r.timed}

    def fastest(self, names: str) -> Row | None:
        """The timed row ``names`` names, or the fastest of ``"a|b"``; None if none is timed."""
        timed = self.timed()
        rows = [timed[n] for n in names.split("|") if n in timed]
        return min(rows, key=lambda r: r.median_s) if rows else None

    def ratio(self, row: Row, to: str | None = None) -> float | None:
        """``row``'s median over ``to``'s (default: the baseline); None unless both are timed.

        ``to`` may name several rows, ``"a|b"``: the fastest of them.
        """
        other = self.fastest(to or self.baseline or (self.rows[0].name if self.rows else ""))
        return row.median_s / other.median_s if row.timed and other and other.median_s else None


@dataclass
class Verdict:
    """A target set against a run: the measured ratio (None: not measured) and the status."""

    key: str
    text: str
    goal: str
    variant: str
    status: str
    value: float | None = None
    shown: str = ""
    floor: float | None = None
    floor_name: str | None = None


@dataclass
class Run:
    """One run of a suite (``compare``, ``transfer``, ``doctor``); ``extras``: its other sections.

    A ``doctor`` run has a group per section of checks, a row per check (its
    ``status``, ``detail`` and seconds), and the environment it saw in ``extras``.
    """

    suite: str
    device: str
    command: str
    machine: dict[str, Any]
    settings: dict[str, Any]
    groups: list[Group]
    verdicts: list[Verdict] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    charts: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def group(self, name: str) -> Group:
        """The group called ``name``."""
        return next(g for g in self.groups if g.name == name)

    def medians(self) -> dict[tuple[str, str], float]:
        """``(group, variant) -> median seconds`` of every timed row."""
        return {(g.name, r.name): r.median_s for g in self.groups for r in g.rows if r.timed}

    def save(self, out: str | Path, stem: str, text: str) -> list[Path]:
        """Write ``<stem>.json`` and the Markdown ``text`` as ``<stem>.md``; return the paths."""
        payload = asdict(self)
        del payload["suite"]  # write_results takes it from the stem
        return write_results(out, stem, payload, text)

    @classmethod
    def load(cls, path: str | Path) -> Run:
        """Read a results JSON; ResultsError if it is not one or of another schema version."""
        try:
            payload = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ResultsError(f"{path}: not a JSON file ({e}).") from None
        if not isinstance(payload, dict):
            raise ResultsError(f"{path}: not a looptoolkit results file.")
        if (schema := payload.pop("schema", 1)) != SCHEMA:
            raise ResultsError(
                f"{path}: results schema version {schema}; this looptoolkit reads version "
                f"{SCHEMA}. Run the benchmark again to write it in version {SCHEMA}."
            )
        if payload.get("suite") not in ("compare", "transfer", "doctor"):
            raise ResultsError(f"{path}: not a looptoolkit results file (no known `suite`).")
        groups = [Group(**{**g, "rows": [Row(**r) for r in g["rows"]]}) for g in payload["groups"]]
        verdicts = [Verdict(**v) for v in payload["verdicts"]]
        return cls(**{**payload, "groups": groups, "verdicts": verdicts})
