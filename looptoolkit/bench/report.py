"""``looptoolkit report FILE [FILE ...]``: saved results re-rendered, or set side by side.

One file is rendered as its run printed it (the tables of ``compare`` or
``transfer``). Two or more are put side by side, variant by variant: each
file's median, and each later file's ratio to the first (this machine against
that one, after a change against before). With ``--fail-above R`` the command
exits 1 when a ratio exceeds ``R``, so that a change can be checked for speed
regressions (asv's ``compare --factor``). Files are read as typed
[`Run`][looptoolkit.bench.results.Run] records; one of another schema version
is refused with a message naming it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looptoolkit.bench.compare_report import fmt_ms
from looptoolkit.bench.results import (
    SCHEMA,
    Group,
    ResultsError,
    Run,
    Timing,
    Verdict,
)
from looptoolkit.bench.tables import Table, wrap

__all__ = ["compare_runs", "read_run", "run", "side_by_side"]


def _timings(rows: list[dict[str, Any]]) -> tuple[Timing, ...]:
    return tuple(
        Timing(
            r["name"],
            r["median_s"],
            r["min_s"],
            r["max_s"],
            r.get("label", ""),
            r.get("backend", ""),
        )
        for r in rows
        if r.get("median_s") is not None
    )


def _groups(payload: dict[str, Any]) -> tuple[Group, ...]:
    if payload["suite"] == "compare":
        return tuple(
            Group(name, w.get("description", ""), _timings(w["variants"]))
            for name, w in payload.get("workloads", {}).items()
        )
    from looptoolkit.bench.transfer import sections

    return tuple(Group(title, "", _timings(rows)) for title, rows in sections(payload))


def read_run(path: str | Path) -> Run:
    """Read a results JSON written by ``looptoolkit compare`` or ``looptoolkit transfer``.

    Raises:
        ResultsError: the file is not JSON, not a results file, or of another schema
            version (the message names both versions).
    """
    try:
        payload = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not a JSON file ({e}).") from None
    if not isinstance(payload, dict):
        raise ResultsError(f"{path}: not a looptoolkit results file.")
    schema = payload.get("schema", 1)
    if schema != SCHEMA:
        raise ResultsError(
            f"{path}: results schema version {schema}; this looptoolkit reads version "
            f"{SCHEMA}. Run the benchmark again to write it in version {SCHEMA}."
        )
    if payload.get("suite") not in ("compare", "transfer"):
        raise ResultsError(f"{path}: not a looptoolkit results file (no known `suite`).")
    machine = payload.get("machine") or {}
    verdicts = tuple(
        Verdict(t["key"], t["goal"], t.get("value"), t["status"])
        for t in payload.get("targets") or []
    )
    return Run(
        suite=payload["suite"],
        schema=schema,
        device=str(payload.get("device", "")),
        command=str(machine.get("command") or payload.get("command") or ""),
        groups=_groups(payload),
        verdicts=verdicts,
        payload=payload,
    )


def compare_runs(runs: Sequence[Run]) -> list[tuple[str, str, list[float | None]]]:
    """``(group, variant, medians)`` for every variant of the first run, one median per run.

    A variant a later run did not time has None there.
    """
    medians = [r.medians() for r in runs]
    return [
        (group.name, t.name, [m.get((group.name, t.name)) for m in medians])
        for group in runs[0].groups
        for t in group.timings
    ]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else fmt_ms(seconds * 1e3)


def side_by_side(runs: Sequence[Run], labels: Sequence[str]) -> list[Table]:
    """One table per group: each run's median (ms), each later run's ratio to the first."""
    header = ["variant", *(f"{label} ms" for label in labels)]
    header += [f"{label}/{labels[0]}" for label in labels[1:]]
    tables: dict[str, Table] = {}
    for group, variant, medians in compare_runs(runs):
        table = tables.setdefault(group, Table(group, header, []))
        first = medians[0]
        ratios = [f"{m / first:.2f}" if m is not None and first else "-" for m in medians[1:]]
        table.rows.append([variant, *map(_ms, medians), *ratios])
    return list(tables.values())


def _labels(paths: Sequence[Path]) -> list[str]:
    """Short column labels: the file stems, else their directories' names, else numbers."""
    for names in ([p.stem for p in paths], [p.resolve().parent.name for p in paths]):
        if len(set(names)) == len(names) and all(names):
            return names
    return [str(i + 1) for i in range(len(paths))]


def _render_one(run: Run) -> str:
    """The tables the run printed, from its file."""
    payload = run.payload
    if run.suite == "transfer":
        from looptoolkit.bench import transfer

        parts = [transfer.headline(payload)]
        parts += [
            transfer.section_table(title, rows).text() for title, rows in transfer.sections(payload)
        ]
        if payload.get("targets"):
            parts.append(transfer.targets_table(payload["targets"]).text())
        return "\n\n".join(parts)
    from looptoolkit.bench import compare_report as report

    parts = []
    for name, result in payload["workloads"].items():
        parts.append(wrap(report.headline(name, result)))
        parts.append(report.variant_table(name, result, run.device).text())
    if payload.get("targets"):
        parts.append(report.targets_table(payload).text())
    parts.append("\n".join(wrap(line, indent="  ") for line in report.summary(payload)))
    return "\n\n".join(parts)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``looptoolkit report`` arguments."""
    parser = argparse.ArgumentParser(
        prog="looptoolkit report",
        description="Re-render saved results of looptoolkit compare or transfer; with two or "
        "more files, their medians side by side and each later file's ratio to the first.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="results JSON")
    parser.add_argument(
        "--fail-above",
        type=float,
        default=None,
        metavar="R",
        help="exit 1 when a variant's ratio of a later file to the first exceeds R",
    )
    args = parser.parse_args(argv)
    if args.fail_above is not None and args.fail_above <= 0:
        parser.error("--fail-above must be > 0")
    return args


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``looptoolkit report``; return the exit code (1: a ratio above ``--fail-above``)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        runs = [read_run(path) for path in args.files]
    except (ResultsError, OSError) as e:
        print(f"looptoolkit report: error: {e}", file=sys.stderr)
        return 2
    suites = {r.suite for r in runs}
    if len(suites) > 1:
        print(
            f"looptoolkit report: error: files of different suites: {sorted(suites)}.",
            file=sys.stderr,
        )
        return 2
    if len(runs) == 1:
        print(_render_one(runs[0]))
        return 0
    labels = _labels(args.files)
    lines = [
        wrap(f"{label}: {r.device}, {r.command or 'command not recorded'}", indent="  ")
        for label, r in zip(labels, runs, strict=True)
    ]
    print("\n".join(lines))
    for table in side_by_side(runs, labels):
        print("\n" + table.text())
    if args.fail_above is None:
        return 0
    worse = [
        f"{group}/{variant} {m / medians[0]:.2f}x"
        for group, variant, medians in compare_runs(runs)
        for m in medians[1:]
        if m is not None and medians[0] and m / medians[0] > args.fail_above
    ]
    if worse:
        print("\n" + wrap(f"Above {args.fail_above:g}x: " + ", ".join(worse) + "."))
        return 1
    print(f"\nNo variant above {args.fail_above:g}x.")
    return 0
