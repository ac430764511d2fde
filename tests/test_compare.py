"""`looptoolkit compare` end to end on tiny data, and the harness pieces it is built from."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from looptoolkit.adapters import BACKENDS
from looptoolkit.bench import compare, compare_report, render, results, targets
from looptoolkit.bench.check import check_batches, host_leaves
from looptoolkit.bench.progress import Progress, quiet_import
from looptoolkit.bench.results import Group, Row, Run
from looptoolkit.bench.tables import Table
from looptoolkit.bench.timing import interleave
from looptoolkit.bench.variants import BASELINE, VARIANTS, Context, Variant
from looptoolkit.bench.variants.augment import AUGMENT_BASELINE
from looptoolkit.bench.workloads import ALL_WORKLOADS, make_workload


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    screen = io.StringIO()
    # The 2-worker DataLoader starts worker processes: its own test below.
    with contextlib.redirect_stdout(screen):
        code = compare.run(["--quick", "--device", "cpu", "--out", str(out), "--skip", "*-w2"])
    assert code == 0
    return out, Run.load(out / "compare-cpu.json"), screen.getvalue()


@pytest.fixture(scope="module")
def quick_run(quick):
    out, run, _ = quick
    return out, run


def test_screen_has_the_headlines_once_then_a_short_closing_summary(quick):
    out, run, screen = quick
    lines = screen.splitlines()
    # The tokens workload runs only when asked (`--workload tokens` or `all`); with every
    # variant and a GPU's rows: test_screen_fits_150_lines_of_80_columns_with_every_gpu_row.
    assert "tokens" not in {g.name for g in run.groups}
    assert len(lines) <= 150, len(lines)
    assert max(map(len, lines)) <= 80
    for group in run.groups:
        start = "the faster hand loop" if group.name == "tokens" else "fastest loop"
        assert screen.count(f"{group.name}: {start} ") == 1, group.name
        assert screen.count(f"\n{group.title.split(':')[0]}: ") == 1
    # The closing summary: the Loader against the baseline and its floors, the targets, the files.
    closing = screen[screen.index("The Loader over the best manual loop") :]
    assert all(f"\n{name} " in closing for name in ("loader-numpy", "loader-torch", "loader-jax"))
    assert "Targets: not judged at --quick" in closing
    for name in ("compare-cpu.json", "compare-cpu.md", "compare-cpu.png"):
        assert str(out / name) in closing, name  # a path is never broken across lines
    assert "--verbose prints every table here" in closing
    # The per-variant detail is in the files only.
    for detail in ("Variants (the floors", "with a model step", "Targets (ratios", "check: exact"):
        assert detail not in screen, detail
        assert detail.removeprefix("check: ") in (out / "compare-cpu.md").read_text(), detail


def test_screen_when_not_a_terminal_has_no_progress_lines(tmp_path):
    # stdout and stderr to one pipe, as `make compare > file 2>&1` or a CI log: results only.
    argv = ["--quick", "--device", "cpu", "--backends", "numpy", "--workload", "tabular"]
    argv += ["--out", str(tmp_path), "--no-plot"]
    done = subprocess.run(
        [sys.executable, "-m", "looptoolkit", "compare", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert not [line for line in lines if re.match(r"\[ *\d+ s\]", line)], done.stdout
    assert len(lines) <= 150 and max(map(len, lines)) <= 80
    words = " ".join(done.stdout.split())
    assert "tabular: fastest loop " in words and "Wrote " in words, done.stdout


def _synthetic_group(name: str, gpu: bool) -> Group:
    """Every variant of workload ``name`` (a GPU's too), timed wide: a worst case for the screen."""
    w = make_workload(name, quick=True)
    rows = []
    for i, v in enumerate(x for x in VARIANTS if w.runs(x) and (gpu or not x.accelerator)):
        seconds = 1.234 + 0.1 * i if v.name != BASELINE else 0.5  # "1,234*", "1,200-1,400"
        extra = {"padding_efficiency": 0.5} if w.kind == "documents" else {}
        extra |= {"max_deviation": 7.0, "deviation_batches": 10} if w.kind == "mixture" else {}
        extra |= {"threads": "2x1"} if w.kind == "augment" else {}
        rounds = [seconds * 0.9, seconds, seconds * 1.1]
        kw = {"bounded": 50 if i % 2 else None, "extra": extra}
        rows.append(Row(v.name, v.label, v.backend, v.floor, rounds, "exact", **kw))
    title = f"{name} (cuda:0): {w.description.replace('3_000', '300_000')}; 1000 batches/epoch"
    if w.kind == "documents":
        return Group(name, title, rows, "epoch", None, 0, {"tokens": 24_000_000})
    if w.kind == "augment":
        draw = {"draw_ms": 0.5, "ops_ms": 30.0, "share": 0.5 / 30}
        info = {"images": 2048, "draw": draw}
        return Group(name, title, rows, "epoch", AUGMENT_BASELINE, 16, info)
    return Group(name, title, rows, "epoch", BASELINE, 1000, {})


@pytest.mark.parametrize("workloads", ["index,tabular,images", "tokens", "mix", "augment", "all"])
def test_screen_fits_150_lines_of_80_columns_with_every_gpu_row(workloads):
    # What `looptoolkit compare --device cuda` prints, every variant of every workload in it
    # timed (synthetic timings, most targets not met): at most 150 lines of 80 columns.
    names = list(ALL_WORKLOADS) if workloads == "all" else workloads.split(",")
    args = compare.parse_args(["--device", "cuda", "--workload", workloads])
    backends = list(BACKENDS)
    groups = [_synthetic_group(name, gpu=True) for name in names]
    run = Run("compare", "cuda:0", "looptoolkit compare", {}, {}, groups)
    values = {f"mix:{r.name}": 9.0 for g in groups if g.name == "mix" for r in g.rows}
    values |= {r.name: 9.0 for g in groups if g.name != "mix" for r in g.rows}
    values |= {BASELINE: 1.0} | {f"floor:{r.name}": 1.0 for g in groups for r in g.rows}
    values |= {f"{kind}:{r.name}": 9.0 for kind in ("wait", "step") for r in groups[0].rows}
    run.verdicts = targets.evaluate("compare", values, gpu=True)
    assert (
        workloads in ("mix", "augment")
        or len([v for v in run.verdicts if v.status == "not met"]) >= 5
    )
    out = results.DEFAULT_OUT
    files = [out / f"compare-cuda.{suffix}" for suffix in ("json", "md", "png")]
    screen = [compare._intro(args, "cuda:0", out, backends)]
    screen += ["\n" + compare_report.workload_text(g) for g in groups]
    screen += ["\n" + compare_report.closing(run, files, 1234.0)]
    lines = "\n".join(screen).splitlines()
    assert len(lines) <= 150, len(lines)
    assert max(map(len, lines)) <= 80
    for g in groups:  # each workload's Loader rows and the accelerator's, on screen
        for r in g.rows:
            if r.name.startswith("loader-") or r.name in ("torch-res-gather", BASELINE):
                assert re.search(rf"^{r.name} ", "\n".join(lines), re.M), (g.name, r.name)
    hidden = len(groups[0].rows) - len(compare_report.screen_rows(groups[0]))
    assert f"{hidden} slower loops not shown" in "\n".join(lines)


def test_verbose_prints_every_table(tmp_path, capsys):
    argv = ["--quick", "--device", "cpu", "--verbose", "--workload", "tabular"]
    argv += ["--variants", "loader-numpy"]
    assert compare.run([*argv, "--out", str(tmp_path), "--no-plot"]) == 0
    screen = capsys.readouterr().out
    for detail in ("Variants (the floors", "check: exact", "with a model step", "Targets (ratios"):
        assert detail in screen, detail
    assert screen.count("tabular: fastest loop ") == 1
    assert "Loader: loader-numpy " in screen  # the full headline
    assert max(map(len, screen.splitlines())) <= 80


def test_closing_summary_states_the_verdicts_in_short():
    rows = [
        Row(BASELINE, rounds_s=[1.0], check="exact"),
        Row("loader-numpy", floor=BASELINE, rounds_s=[0.5], check="exact"),
    ]
    group = Group("tabular", "t", rows, baseline=BASELINE)
    run = Run("compare", "cpu", "looptoolkit compare", {}, {}, [group])
    run.verdicts = targets.evaluate("compare", {BASELINE: 1.0, "loader-numpy": 0.5}, gpu=False)
    text = compare_report.closing(run, [], 1.0)
    assert "loader-numpy" in text and "0.50x (0.50)" in text
    assert re.search(r"Targets: \d+ of \d+ met", text), text


def test_quick_run_writes_json_markdown_and_chart(quick_run):
    out, run = quick_run
    for name in ("compare-cpu.json", "compare-cpu.md", "compare-cpu.png"):
        assert (out / name).stat().st_size > 0, name
    # On the CPU the transfer-by-batch-size section is left out: both paths are the host cast.
    assert not (out / "compare-cpu-transfer.png").exists() and "transfer" not in run.extras
    assert [g.name for g in run.groups] == ["index", "tabular", "images"]
    assert run.command.startswith("looptoolkit compare --quick")
    assert {g.baseline for g in run.groups} == {BASELINE} and BASELINE == "numpy-take"
    markdown = (out / "compare-cpu.md").read_text()
    assert "| numpy-take | numpy |" in markdown and "## Targets" in markdown
    assert "![compare-cpu.png](compare-cpu.png)" in markdown
    # The headline comes first: right under the title.
    assert markdown.splitlines()[2].startswith("- index: fastest loop ")


def test_every_variant_that_ran_was_checked_first(quick_run):
    _, run = quick_run
    ran = 0
    for group in run.groups:
        for row in group.rows:
            assert row.status == "ok" and row.timed, (group.name, row)
            assert row.check.startswith(("exact", "coverage", "documents")), row
            assert row.median_s > 0
            ran += 1
    names = set(run.group("tabular").timed())
    assert {BASELINE, "numpy-index", "floor-memcpy", "floor-seq-take", "loader-numpy"} <= names
    assert ran >= 20


def test_ratios_are_to_the_baseline_and_loader_rows_to_their_floor(quick_run):
    _, run = quick_run
    group = run.group("tabular")
    rows = group.timed()
    assert group.ratio(rows[BASELINE]) == 1.0
    index = rows["numpy-index"]
    assert group.ratio(index) == pytest.approx(index.median_s / rows[BASELINE].median_s)
    grouped = rows["loader-grouped"]
    assert grouped.floor == "floor-seq-take"
    assert group.ratio(grouped, grouped.floor) == pytest.approx(
        grouped.median_s / rows["floor-seq-take"].median_s
    )
    assert rows["loader-numpy"].floor == BASELINE and index.floor is None
    text = render.group_table(group).text()
    line = next(line for line in text.splitlines() if line.startswith("loader-grouped "))
    assert f"{group.ratio(grouped, grouped.floor):.2f}" in line.split()


def test_quick_run_reports_step_and_targets(quick_run):
    _, run = quick_run
    step = {row["name"]: row for row in run.extras["step"] if row["workload"] == "tabular"}
    images = {row["name"] for row in run.extras["step"] if row["workload"] == "images"}
    assert BASELINE in images and "img-trans-torch" in images and len(images) >= 4
    assert not images & {"loader-torch", "floor-memcpy"}  # on images: the img-* set
    assert BASELINE in step and not any(name.startswith("floor-") for name in step)
    for row in step.values():
        assert 0 <= row["wait_fraction"] <= 1
        assert row["step_ms_per_batch"] >= 0.1  # the step is really taken
    rows = {name: r.median_s for name, r in run.group("tabular").timed().items()}
    by_key = {v.key: v for v in run.verdicts}
    assert by_key["loader-numpy"].value == pytest.approx(rows["loader-numpy"] / rows[BASELINE])
    assert by_key["loader-torch-hand"].value == pytest.approx(
        rows["loader-torch"] / rows["torch-index-select"]
    )
    assert by_key["gpu-resident-vs-gather"].status == "GPU only"
    # Toy sizes state no verdict: the ratios are there, "met" / "not met" are not.
    measured = [v for v in run.verdicts if v.value is not None]
    assert measured and {v.status for v in measured} == {"not judged at --quick"}
    assert "not judged at --quick" in "\n".join(compare_report.summary(run))
    assert run.extras["accelerator_only"] == [
        "loader-torch-res",
        "torch-res-gather",
        "dl-tensordataset",
    ]


def test_markdown_and_screen_tables_re_render_from_the_json(quick_run):
    _, run = quick_run
    text = compare_report.markdown(run)
    for name in ("index", "tabular", "images"):
        assert f"## {name} (cpu): " in text
    assert "## tabular with a model step of 0.5 ms" in text
    assert "## images with a model step of 0.5 ms" in text
    for group in run.groups:
        table = render.group_table(group).text()
        assert max(map(len, table.splitlines())) <= 80
        # Fixed columns, not the one-block-per-row fallback.
        lines = table.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("variant "))
        assert lines[header].split()[1:3] == ["ms/epoch", "min-max"]
        assert set(lines[header + 1]) == {"─"}  # rich's rule under the header
    screens = [
        render.legend(run.groups),
        render.targets_table(run.verdicts).text(),
        compare_report.step_table(run, "tabular").text(),
        compare_report.step_table(run, "images").text(),
    ]
    for screen in screens:
        assert max(map(len, screen.splitlines())) <= 80


def test_group_table_marks_bounded_rows_and_says_why_a_row_was_not_timed():
    rows = [
        Row(BASELINE, rounds_s=[0.002, 0.001, 0.003], check="coverage"),
        Row("slow", rounds_s=[0.004], check="exact", bounded=10),
        Row("gone", status="error", detail="RuntimeError: boom"),
        Row("bad", status="failed", detail="differs from the reference"),
    ]
    group = Group("g", "g (cpu)", rows, baseline=BASELINE, batches=100)
    lines = render.group_table(group).text().splitlines()
    assert lines[0] == "g (cpu)"
    assert lines[3].split() == [BASELINE, "2.00", "1.00-3.00", "1.00", "cover"]
    assert lines[4].split() == ["slow", "4.00*", "4.00-4.00", "2.00", "exact"]
    assert lines[5].split() == ["gone", "error"] and lines[6].split() == ["bad", "FAIL"]
    assert lines[7:] == [
        "Timed on the first batches of each epoch, scaled (*): slow 10",
        "gone: error while timing: RuntimeError: boom",
        "bad: FAILED the check, not timed: differs from the reference",
    ]
    markdown = render.group_table(group, full=True).markdown()
    assert "| slow | 4.00* | 4.00-4.00 | 25,000 | 2.00 | exact |" in markdown


@pytest.mark.slow
def test_dataloader_with_workers_is_bounded_and_checked(tmp_path):
    argv = [
        "--quick",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--workload",
        "index",
        "--variants",
        "dl-per-sample-w2",
        "--step-ms",
        "0",
        "--no-plot",
    ]
    assert compare.run(argv) == 0
    run = Run.load(tmp_path / "compare-cpu.json")
    rows = {row.name: row for row in run.group("index").rows}
    assert set(rows) == {BASELINE, "dl-per-sample-w2"}
    w2 = rows["dl-per-sample-w2"]
    assert w2.timed and "first 10 batches" in w2.check
    assert w2.bounded == 10
    assert not (tmp_path / "compare-cpu.png").exists()
    assert run.extras["step"] == [] and "transfer" not in run.extras


def test_classic_preset_times_a_few_epochs_and_multiplies(tmp_path, capsys):
    argv = [
        "--preset",
        "classic",
        "--quick",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--skip",
        "*-w2",
        "--no-plot",
        "--backends",
        "numpy",
    ]
    args = compare.parse_args(argv)
    assert (args.workload, args.step_ms, args.transfer, args.project_epochs) == (
        "index",
        0.0,
        False,
        1000,
    )
    assert args.variants.split(",") == list(compare.CLASSIC)
    assert compare.run(argv) == 0
    assert not (tmp_path / "compare-cpu.json").exists()  # the default run's results stay
    run = Run.load(tmp_path / "compare-classic-cpu.json")
    assert [g.name for g in run.groups] == ["index"] and run.extras["step"] == []
    assert run.settings["project_epochs"] == 1000
    names = [r.name for r in run.group("index").rows]
    assert names == [
        "python",
        BASELINE,
        "numpy-index",
        "numpy-epoch",
        "floor-memcpy",
        "floor-seq-take",
        "loader-numpy",
        "loader-grouped",
    ]
    out = capsys.readouterr().out
    assert "1000 epochs" in out and "multiply the median epoch" in out
    assert "index: fastest loop " in out and " for 1000 epochs" in out


def test_epochs_are_spread_over_rounds_and_bad_flags_fail(tmp_path, capsys):
    argv = [
        "--quick",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--workload",
        "index",
        "--variants",
        "loader-numpy",
        "--epochs",
        "3",
        "--rounds",
        "2",
        "--step-ms",
        "0",
        "--no-plot",
    ]
    assert compare.run(argv) == 0
    settings = Run.load(tmp_path / "compare-cpu.json").settings
    assert (settings["rounds"], settings["epochs_per_round"]) == (2, 2)
    assert compare.run(["--device", "tpu:x", "--out", str(tmp_path)]) == 2
    assert compare.run(["--workload", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.parse_args(["--rounds", "0"])
    with pytest.raises(SystemExit):
        compare.parse_args(["--reference", "--out", str(tmp_path)])


# -- targets ------------------------------------------------------------------------


def _status(verdicts, key):
    v = next(v for v in verdicts if v.key == key)
    return v.value, v.status, v.floor


def test_targets_set_synthetic_timings_against_their_bounds():
    values = {
        BASELINE: 10.0,
        "loader-numpy": 10.2,
        "loader-grouped": 6.6,
        "floor-seq-take": 4.3,
        "loader-torch": 11.0,
        "floor-torch": 11.5,
        "torch-index-select": 10.0,
        "loader-jax": 16.0,
        "floor-jax": 16.0,
        "loader-tf": 25.0,
    }
    rows = targets.evaluate("compare", values, gpu=False)
    assert [v.key for v in rows] == [t.key for t in targets.TARGETS if t.suite == "compare"]
    assert _status(rows, "loader-numpy") == (pytest.approx(1.02), "met", 1.0)
    assert _status(rows, "loader-grouped") == (pytest.approx(0.66), "not met", pytest.approx(0.43))
    # The framework Loaders are judged against their floors, timed in the same run.
    assert _status(rows, "loader-torch") == (pytest.approx(11.0 / 11.5), "met", None)
    assert _status(rows, "loader-torch-hand") == (pytest.approx(1.1), "not met", None)
    assert _status(rows, "loader-jax") == (pytest.approx(1.0), "met", None)
    assert _status(rows, "loader-tf")[1] == "not measured"  # no floor-tf timed
    assert _status(rows, "gpu-resident-vs-gather") == (None, "GPU only", None)
    # The mixtures: against the mix workload's own plain Loader ("mix:"), not tabular's.
    assert _status(rows, "mix-2")[1] == "not measured"
    mixes = {"mix:loader-numpy": 20.0, "mix:loader-mix2": 21.0, "mix:loader-mix5": 23.0}
    rows = targets.evaluate("compare", values | mixes, gpu=False)
    assert _status(rows, "mix-2") == (pytest.approx(1.05), "met", None)
    assert _status(rows, "mix-5") == (pytest.approx(1.15), "not met", None)


def test_gpu_targets_and_missing_variants():
    values = {
        BASELINE: 1.0,
        "dl-getitems": 5.0,  # beside it, not its measure any more
        "dl-tensordataset": 20.0,
        "loader-torch-res": 1.0,
        "torch-res-gather": 0.5,
        "wait:loader-torch": 0.01,
        "step:loader-torch": 0.5,
    }
    rows = targets.evaluate("compare", values, gpu=True)
    assert _status(rows, "gpu-resident-vs-dataloader") == (20.0, "met", None)
    assert _status(rows, "gpu-resident-vs-gather") == (2.0, "not met", None)
    assert _status(rows, "gpu-prefetch-overlap") == (pytest.approx(0.02), "met", None)
    assert _status(rows, "loader-numpy") == (None, "not measured", 1.0)
    transfer = targets.evaluate(
        "transfer", {"torch:to_device": 1.0, "torch:optree": 1.0, "torch:move_to": 1.0}, gpu=False
    )
    assert _status(transfer, "nested-torch-optree") == (1.0, "met", None)
    assert _status(transfer, "nested-torch-move-to") == (1.0, "not met", None)  # "<" is strict
    assert _status(transfer, "gpu-packed") == (None, "GPU only", None)
    with pytest.raises(ValueError, match="`suite`"):
        targets.evaluate("loops", {}, gpu=False)


# -- pieces of the harness ----------------------------------------------------------


class FakeClock:
    """Reads 1, 2, 3, ... seconds for successive calls."""

    def __init__(self):
        self.reads = 0

    def start(self):
        pass

    def stop(self):
        self.reads += 1
        return float(self.reads)


def test_interleave_runs_warmup_then_rounds_in_turn_and_reports_per_call():
    calls = []
    timings = interleave(
        [("a", lambda: calls.append("a")), ("b", lambda: calls.append("b"))],
        rounds=3,
        warmup=1,
        repeat=2,
        clock=FakeClock(),
    )
    assert calls == ["a", "a", "b", "b"] * 4
    assert [t.rounds_s for t in timings] == [[0.5, 1.5, 2.5], [1.0, 2.0, 3.0]]
    assert (timings[0].median_s, timings[1].max_s) == (1.5, 3.0)
    assert timings[0].extra == {"repeat": 2}


def test_table_is_laid_out_by_rich_within_the_width():
    table = Table("title", ["name", "value"], [["a" * 30, "1.00"], ["b", "22.50"]], notes=["n"])
    assert table.text(width=40).splitlines() == [
        "title",
        "name                             value",
        "─" * 38,
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa    1.00",
        "b                                22.50",
        "n",
    ]
    # Too narrow: rich folds the long cell inside its column; no value is cut.
    narrow = table.text(width=20).splitlines()
    assert max(map(len, narrow)) <= 20
    assert "".join(line.split()[0] for line in narrow[3:6]) == "a" * 30
    assert narrow[3].endswith("1.00") and "22.50" in narrow[6]
    assert table.markdown().splitlines()[1] == "|---|---:|"
    # Cells are text, never rich markup: an index stays as written.
    assert "x[idx] [bold]" in Table("", ["what"], [["x[idx] [bold]"]]).text()


def test_progress_prints_stages_and_rate_limits_steps(tmp_path, monkeypatch):
    # stderr where stdout goes (`> log 2>&1`): no stages, the results stay short
    with open(tmp_path / "log", "w") as log, open(tmp_path / "log", "a") as err:
        monkeypatch.setattr(sys, "stdout", log)
        Progress(err, live=False, every_s=0).stage("importing torch")
    assert (tmp_path / "log").read_text() == ""
    monkeypatch.undo()
    out = io.StringIO()
    progress = Progress(out, live=False, every_s=3600)
    progress.stage("importing torch")
    progress.step("round 1/5")  # within the hour: not printed
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("] importing torch")
    Progress(out, live=False, every_s=0).step("round 2/5")
    assert out.getvalue().splitlines()[-1].endswith("] round 2/5")
    live = io.StringIO()
    status = Progress(live, live=True)
    status.stage("checking")
    status.step("round 1/4", 1, 4)
    assert "checking" in live.getvalue() and "round 1/4" in live.getvalue()
    assert "━" in live.getvalue()  # rich's bar
    status.clear()
    assert status._bar is None
    status.clear()  # twice is harmless


def test_quiet_import_swallows_native_output_unless_the_import_fails(tmp_path, monkeypatch, capfd):
    (tmp_path / "noisy_ok.py").write_text("import os\nos.write(2, b'native noise\\n')\n")
    (tmp_path / "noisy_bad.py").write_text(
        "import os\nos.write(2, b'why it failed\\n')\nraise ImportError('broken')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert quiet_import("noisy_ok").__name__ == "noisy_ok"
    assert "native noise" not in capfd.readouterr().err
    with pytest.raises(ImportError, match="broken"):
        quiet_import("noisy_bad")
    assert "why it failed" in capfd.readouterr().err
    for name in ("noisy_ok", "noisy_bad"):
        sys.modules.pop(name, None)


def test_default_results_directory_ignores_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = results.results_dir(None)
    assert path == results.DEFAULT_OUT and (tmp_path / path / ".gitignore").read_text().endswith(
        "*\n"
    )
    chosen = results.results_dir(tmp_path / "mine")
    assert chosen.is_dir() and not (chosen / ".gitignore").exists()
    assert results.results_dir(None, reference=True).parts[-2:] == ("benchmarks", "results")


def _wrong_order(ctx: Context):
    from looptoolkit.bench.variants.numpy import numpy_manual

    # Its own permutation, while claiming to reproduce the Loader's.
    return numpy_manual(ctx.data, ctx.batch_size, seed=99)


def _misaligned(ctx: Context):
    from looptoolkit.bench.variants import EpochPipeline

    def epoch(e):
        for start in range(0, ctx.workload.n, ctx.batch_size):
            idx = np.arange(start, min(start + ctx.batch_size, ctx.workload.n))
            yield {"x": ctx.data["x"][idx[::-1]], "y": ctx.data["y"][idx]}

    return EpochPipeline(epoch, ctx.workload.num_batches)


@pytest.mark.parametrize(
    ("variant", "detail"),
    [
        (Variant("wrong", "numpy", "wrong order", _wrong_order), "differs from the reference"),
        (Variant("skewed", "numpy", "rows not aligned", _misaligned, shuffle=None), "not aligned"),
    ],
)
def test_check_catches_wrong_batches(variant, detail):
    workload = make_workload("tabular", quick=True)
    ctx = Context(workload, workload.data, "cpu")
    check = check_batches(variant, variant.factory(ctx), ctx, host_leaves(workload.data))
    assert not check.ok and detail in check.detail


def test_check_catches_a_lost_row():
    workload = make_workload("index", quick=True)
    ctx = Context(workload, workload.data, "cpu")
    variant = Variant("lossy", "numpy", "drops a row", lambda c: None, shuffle=None)
    batches = [workload.data[i : i + 30] for i in range(0, 2970, 30)]
    check = check_batches(variant, batches, ctx, host_leaves(workload.data))
    assert not check.ok and "never appeared" in check.detail


def test_check_catches_a_full_batch_after_a_partial_one():
    workload = make_workload("index", quick=True)
    ctx = Context(workload, workload.data, "cpu")
    variant = Variant("ragged", "numpy", "a short batch first", lambda c: None, shuffle=None)
    ids = workload.data
    batches = [ids[:10], *(ids[i : i + 30] for i in range(10, 2980, 30)), ids[2980:]]
    check = check_batches(variant, batches, ctx, host_leaves(workload.data))
    assert not check.ok and check.detail == "batch 1 follows a partial batch"
    whole = [ids[i : i + 30] for i in range(0, 3000, 30)]
    assert check_batches(variant, whole, ctx, host_leaves(workload.data)).ok


def test_variant_names_are_short_unique_and_floors_exist():
    names = [v.name for v in VARIANTS]
    assert len(names) == len(set(names))
    assert max(map(len, names)) <= 18
    assert {v.backend for v in VARIANTS} == set(BACKENDS)
    # a floor names one variant, or several ("a|b": the faster of them)
    assert {f for v in VARIANTS if v.floor for f in v.floor.split("|")} <= set(names)
    assert {t.floor for t in targets.TARGETS if t.floor} <= set(names)


def test_a_ratio_that_misses_its_bound_never_reads_as_the_bound():
    from looptoolkit.bench import compare_report, targets

    rows = targets.evaluate(
        "compare", {"loader-numpy": 1.0241, "numpy-take": 1.0, "loader-runs": 0.6}, gpu=False
    )
    numpy_row = next(v for v in rows if v.key == "loader-numpy")
    assert numpy_row.status == "not met" and numpy_row.shown == "1.024x"
    run = Run("compare", "cpu", "", {}, {}, [], verdicts=rows)
    assert "loader-numpy 1.024x (<= 1.02x)" in compare_report.targets_line(run)
    table = render.targets_table(rows).text()
    assert "1.024x" in table and "0.60x" in table


# -- looptoolkit report ------------------------------------------------------------------


def test_results_carry_their_schema_and_suite(quick_run):
    out, _ = quick_run
    payload = json.loads((out / "compare-cpu.json").read_text())
    assert payload["schema"] == results.SCHEMA and payload["suite"] == "compare"


def test_report_re_renders_one_file(quick_run, capsys):
    from looptoolkit.cli import main

    out, _ = quick_run
    assert main(["report", str(out / "compare-cpu.json")]) == 0
    text = capsys.readouterr().out
    assert "tabular: " in text and BASELINE in text and "loader-torch" in text
    assert max(map(len, text.splitlines())) <= 80


def _slower(path, variant, factor):
    payload = json.loads(path.read_text())
    for group in payload["groups"]:
        for row in group["rows"]:
            if group["name"] == "tabular" and row["name"] == variant:
                row["rounds_s"] = [x * factor for x in row["rounds_s"]]
    return payload


def test_report_sets_two_runs_side_by_side_with_ratios(quick_run, tmp_path, capsys):
    from looptoolkit.bench import report

    out, _ = quick_run
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text((out / "compare-cpu.json").read_text())
    after.write_text(json.dumps(_slower(before, "loader-numpy", 1.5)))
    assert report.run([str(before), str(after)]) == 0
    text = capsys.readouterr().out
    assert "before ms" in text and "after/before" in text
    lines = text.splitlines()
    tabular = lines[next(i for i, line in enumerate(lines) if line.startswith("tabular")) :]
    row = next(line for line in tabular if line.strip().startswith("loader-numpy "))
    assert row.split()[-1] == "1.50"
    assert max(map(len, text.splitlines())) <= 80
    # --fail-above: a ratio above R fails, naming the variant; none above passes.
    assert report.run([str(before), str(after), "--fail-above", "1.2"]) == 1
    assert "tabular/loader-numpy 1.50x" in capsys.readouterr().out
    assert report.run([str(before), str(after), "--fail-above", "2"]) == 0


def test_report_refuses_another_schema_naming_it(quick_run, tmp_path, capsys):
    from looptoolkit.bench import report

    out, _ = quick_run
    payload = json.loads((out / "compare-cpu.json").read_text())
    for schema, old in (
        (1, {k: v for k, v in payload.items() if k != "schema"}),
        (2, {**payload, "schema": 2}),
    ):
        path = tmp_path / f"old{schema}.json"
        path.write_text(json.dumps(old))
        assert report.run([str(path)]) == 2
        error = capsys.readouterr().err
        assert f"schema version {schema}" in error and f"reads version {results.SCHEMA}" in error
    with pytest.raises(results.ResultsError, match="schema version 1"):
        Run.load(tmp_path / "old1.json")


def test_a_run_is_written_and_read_by_the_same_types(quick_run, tmp_path):
    _, run = quick_run
    again = run.save(tmp_path, "compare-cpu", "text")
    assert Run.load(again[0]) == run and again[1].read_text() == "text"
    assert run.suite == "compare" and run.device == "cpu"
    tabular = run.group("tabular").timed()
    assert tabular[BASELINE].min_s <= tabular[BASELINE].median_s <= tabular[BASELINE].max_s
    assert {v.key for v in run.verdicts} == {t.key for t in targets.TARGETS if t.suite == "compare"}
