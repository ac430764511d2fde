"""`looptoolkit compare` end to end on tiny data, and the pieces it checks with."""

from __future__ import annotations

import json

import numpy as np
import pytest

from looptoolkit.bench import compare, report
from looptoolkit.bench.variants import VARIANTS, Context, Variant, make_workload


def timed_rows(payload):
    for name, result in payload["workloads"].items():
        for row in result["variants"]:
            yield name, row


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    # The 2-worker DataLoader starts worker processes: its own test below.
    code = compare.run(["--quick", "--out", str(out), "--skip", "*-w2"])
    assert code == 0
    payload = json.loads((out / "compare-cpu.json").read_text())
    return out, payload


def test_quick_run_writes_json_markdown_and_charts(quick_run):
    out, payload = quick_run
    for name in (
        "compare-cpu.json",
        "compare-cpu.md",
        "compare-cpu.png",
        "compare-cpu-transfer.png",
    ):
        assert (out / name).stat().st_size > 0, name
    assert set(payload["workloads"]) == {"index", "tabular", "images"}
    assert payload["machine"]["command"].startswith("looptoolkit compare --quick")
    markdown = (out / "compare-cpu.md").read_text()
    assert "| numpy-manual | numpy |" in markdown and "## Targets" in markdown
    assert "![compare-cpu.png](compare-cpu.png)" in markdown


def test_every_variant_that_ran_was_checked_first(quick_run):
    _, payload = quick_run
    ran = 0
    for workload, row in timed_rows(payload):
        if "skipped" in row:
            assert row["skipped"].startswith("needs "), row
            continue
        assert row["check"]["ok"], (workload, row)
        assert "error" not in row, (workload, row)
        assert row["median_s"] > 0 and row["batches_per_s"] > 0
        ran += 1
    names = {row["name"] for _, row in timed_rows(payload) if "median_s" in row}
    assert {"numpy-manual", "loader-numpy", "loader-numpy-grouped"} <= names
    assert ran >= 10


def test_quick_run_reports_step_transfer_and_targets(quick_run):
    _, payload = quick_run
    step = {row["name"]: row for row in payload["step"]}
    assert "numpy-manual" in step
    for row in step.values():
        assert 0 <= row["wait_fraction"] <= 1
        assert row["step_ms_per_batch"] >= 0.1  # the step is really taken
    transfer = payload["transfer"]
    assert len(transfer["ms_per_batch"]["uint8 copy, cast on the device"]) == len(
        transfer["batch_sizes"]
    )
    targets = {t["variant"]: t for t in payload["targets"]}
    assert targets["loader-numpy"]["status"] in ("met", "not met")
    assert targets["loader-torch-resident"]["status"] == "not measurable on CPU"
    assert payload["accelerator_only"] == ["loader-torch-resident", "torch-resident-gather"]


def test_markdown_and_targets_re_render_from_the_json(quick_run):
    _, payload = quick_run
    text = report.markdown(payload)
    for name in ("index", "tabular", "images"):
        assert f"## {name}: " in text
    assert "## With a model step of" in text
    rows = report.evaluate_targets(
        payload["workloads"], payload["step"], payload["transfer"], payload["device"]
    )
    assert [r["status"] for r in rows] == [t["status"] for t in payload["targets"]]


@pytest.mark.slow
def test_dataloader_with_workers_is_bounded_and_checked(tmp_path):
    argv = ["--quick", "--out", str(tmp_path), "--workload", "index", "--variants",
            "dataloader-per-sample-w2", "--step-ms", "0", "--no-transfer", "--no-plot"]  # fmt: skip
    assert compare.run(argv) == 0
    payload = json.loads((tmp_path / "compare-cpu.json").read_text())
    rows = {row["name"]: row for row in payload["workloads"]["index"]["variants"]}
    assert set(rows) == {"numpy-manual", "dataloader-per-sample-w2"}
    w2 = rows["dataloader-per-sample-w2"]
    assert w2["check"]["ok"] and "first 10 batches" in w2["check"]["how"]
    assert w2["bounded_batches"] == 10
    assert not (tmp_path / "compare-cpu.png").exists()
    assert payload["step"] == [] and payload["transfer"] is None


def test_epochs_are_spread_over_rounds_and_bad_flags_fail(tmp_path, capsys):
    argv = ["--quick", "--out", str(tmp_path), "--workload", "index", "--variants",
            "loader-numpy", "--epochs", "3", "--rounds", "2", "--step-ms", "0",
            "--no-transfer", "--no-plot"]  # fmt: skip
    assert compare.run(argv) == 0
    settings = json.loads((tmp_path / "compare-cpu.json").read_text())["settings"]
    assert (settings["rounds"], settings["epochs_per_round"]) == (2, 2)
    assert compare.run(["--device", "tpu:x", "--out", str(tmp_path)]) == 2
    assert compare.run(["--workload", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.parse_args(["--rounds", "0"])


def _wrong_order(ctx: Context):
    from looptoolkit.bench.native_numpy import numpy_manual

    # Its own permutation, while claiming to reproduce the Loader's.
    return numpy_manual(ctx.data, ctx.batch_size, seed=99)


def _misaligned(ctx: Context):
    from looptoolkit.bench.epochs import EpochPipeline

    def epoch(e):
        for start in range(0, ctx.workload.n, ctx.batch_size):
            idx = np.arange(start, min(start + ctx.batch_size, ctx.workload.n))
            yield {"x": ctx.data["x"][idx[::-1]], "y": ctx.data["y"][idx]}

    return EpochPipeline(epoch, ctx.workload.num_batches)


@pytest.mark.parametrize(
    ("variant", "detail"),
    [
        (Variant("wrong", "numpy", "wrong order", _wrong_order), "differs from the reference"),
        (Variant("skewed", "numpy", "rows not aligned", _misaligned, shuffle=None),
         "not aligned"),
    ],
)  # fmt: skip
def test_check_catches_wrong_batches(variant, detail):
    workload = make_workload("tabular", quick=True)
    ctx = Context(workload, workload.data, "cpu")
    check = compare.check_batches(
        variant, variant.factory(ctx), ctx, compare.host_leaves(workload.data)
    )
    assert not check.ok and detail in check.detail


def test_check_catches_a_lost_row():
    workload = make_workload("index", quick=True)
    ctx = Context(workload, workload.data, "cpu")
    variant = Variant("lossy", "numpy", "drops a row", lambda c: None, shuffle=None)
    batches = [workload.data[i : i + 30] for i in range(0, 2970, 30)]
    check = compare.check_batches(variant, batches, ctx, compare.host_leaves(workload.data))
    assert not check.ok and "never appeared" in check.detail


def test_variant_names_are_unique_and_backends_known():
    names = [v.name for v in VARIANTS]
    assert len(names) == len(set(names))
    assert {v.backend for v in VARIANTS} == {"numpy", "torch", "jax", "tf"}
