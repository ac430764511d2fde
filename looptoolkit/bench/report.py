"""``looptoolkit report FILE [FILE ...]``: a saved run printed again, or runs side by side.

Runs of ``compare`` and ``transfer`` are set side by side by their medians; runs of
``doctor`` by the status of each check (a GPU machine's beside a CPU reference).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from looptoolkit.bench import render
from looptoolkit.bench.results import ResultsError, Run
from looptoolkit.bench.tables import wrap

__all__ = ["run", "screen"]


def screen(run: Run) -> str:
    """What the run printed: each group's table, the suite's other tables, the targets, summary."""
    from looptoolkit.bench import compare_report, doctor, transfer

    if run.suite == "doctor":
        return doctor.screen(run)
    compare = run.suite == "compare"
    lines = compare_report.summary(run) if compare else [transfer.headline(run)]
    tables = [render.group_table(g) for g in run.groups]
    tables += compare_report.tables(run) if compare else transfer.tables(run)
    tables += [render.targets_table(run.verdicts)] if run.verdicts else []
    return "\n\n".join([t.text() for t in tables] + [wrap(line, indent="  ") for line in lines])


def _labels(paths: Sequence[Path]) -> list[str]:
    """Short column labels: the file stems, else their directories' names, else numbers."""
    for names in ([p.stem for p in paths], [p.resolve().parent.name for p in paths]):
        if len(set(names)) == len(names) and all(names):
            return names
    return [str(i + 1) for i in range(len(paths))]


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``looptoolkit report``; return the exit code (1: a ratio above ``--fail-above``)."""
    parser = argparse.ArgumentParser(
        prog="looptoolkit report",
        description="Re-render saved results of looptoolkit compare, transfer or doctor; with "
        "two or more files, their medians side by side and each later file's ratio to the "
        "first (doctor: each check's status in every file).",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="results JSON")
    fail = "exit 1 when a variant's ratio of a later file to the first exceeds R"
    parser.add_argument("--fail-above", type=float, metavar="R", help=fail)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.fail_above is not None and args.fail_above <= 0:
        parser.error("--fail-above must be > 0")
    try:
        runs = [Run.load(path) for path in args.files]
        if len(suites := sorted({r.suite for r in runs})) > 1:
            raise ResultsError(f"files of different suites: {suites}.")
    except (ResultsError, OSError) as e:
        print(f"looptoolkit report: error: {e}", file=sys.stderr)
        return 2
    if len(runs) == 1:
        print(screen(runs[0]))
        return 0
    labels = _labels(args.files)
    for label, r in zip(labels, runs, strict=True):
        print(wrap(f"{label}: {r.device}, {r.command or 'command not recorded'}", indent="  "))
    if runs[0].suite == "doctor":
        from looptoolkit.bench import doctor

        print("\n" + "\n\n".join(t.text() for t in doctor.side_by_side(runs, labels)))
        return 0
    tables, ratios = render.side_by_side(runs, labels)
    print("\n" + "\n\n".join(table.text() for table in tables))
    if args.fail_above is None:
        return 0
    if worse := [f"{name} {ratio:.2f}x" for name, ratio in ratios if ratio > args.fail_above]:
        print("\n" + wrap(f"Above {args.fail_above:g}x: " + ", ".join(worse) + "."))
        return 1
    print(f"\nNo variant above {args.fail_above:g}x.")
    return 0
