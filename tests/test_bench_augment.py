"""The ``augment`` workload of ``looptoolkit compare``: its variants pass their check on tiny
sizes, planted wrong loops (a wrong flip, dropped rows, no normalise) fail it, the peers where
installed, the targets, and a quick run."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

import numpy as np
import pytest

from looptoolkit.augment import VerticalFlip
from looptoolkit.bench import compare, targets
from looptoolkit.bench import variants as registry
from looptoolkit.bench.check_augment import check_augment
from looptoolkit.bench.results import Run
from looptoolkit.bench.variants import Context, Variant, loop, variants
from looptoolkit.bench.variants.augment import (
    AUGMENT_BASELINE,
    draw_share,
    levels,
    loader_host,
)
from looptoolkit.bench.variants.epochs import EpochPipeline
from looptoolkit.bench.workloads import make_workload

ROWS = 40  # a batch of 32 and a partial one


def _context() -> Context:
    w = make_workload("augment", quick=True, rows=ROWS)
    return Context(w, w.data, "cpu")


def _variant(name: str) -> Variant:
    """The augment variant ``name``, from its backend's kit only (no other framework imported)."""
    backend = {AUGMENT_BASELINE: "numpy", "keras-tfdata": "tf"}.get(name, "torch")
    return next(v for v in variants([backend]) if v.name == name)


def _check(v: Variant, ctx: Context | None = None) -> Any:
    ctx = ctx or _context()
    return check_augment(v, v.factory(ctx), ctx)


def test_the_workload_and_its_variants_are_declared():
    w = make_workload("augment", quick=True)
    assert w.kind == "augment" and w.data["image"].shape == (128, 3, 256, 256)
    assert w.batch_size == 32 and w.id_path == "batch['label']"
    full = make_workload("augment", rows=8)
    assert full.batch_size == 128 and full.data["image"].dtype == np.uint8
    on = {v.name: v for v in variants(["numpy"]) if w.runs(v)}
    assert set(on) == {AUGMENT_BASELINE}  # no row loop of another workload runs on it
    v = on[AUGMENT_BASELINE]
    assert v.shuffle == "full" and v.workloads == ("augment",)


def test_the_loader_in_the_loops_process_equals_the_keyed_reference():
    check = _check(_variant(AUGMENT_BASELINE))
    assert check.ok, check.detail
    assert check.batches == 2 and check.extra["max_level_diff"] <= 1.0
    assert check.how.startswith("augment") and "keyed reference" in check.how
    assert check.extra["threads"].startswith("1x")


def test_the_loader_on_torch_and_in_workers_equal_the_keyed_reference():
    pytest.importorskip("torch")
    for name in ("loader-aug-torch", "loader-aug-dl-w2"):
        check = _check(_variant(name))
        assert check.ok, (name, check.detail)
        assert check.extra["max_level_diff"] <= 1.0
    assert _variant("loader-aug-dl-w2").factory(_context()).num_workers == 2


def test_the_hand_written_per_sample_loop_passes_its_check():
    pytest.importorskip("torch")
    check = _check(_variant("hand-crop-w0"))
    assert check.ok, check.detail
    assert "keyed" not in check.how and "max_level_diff" not in check.extra


def _planted(factory: Any, shuffle: str | None = "full") -> Variant:
    return Variant("planted", "numpy", "a wrong loop", factory, shuffle, ("augment",))


def test_a_loader_that_flips_the_wrong_axis_fails_the_check():
    wrong = _planted(loop(loader_host, host=True, flip=VerticalFlip()))
    check = _check(wrong)
    assert not check.ok and "differs from the keyed reference" in check.detail


def test_the_harness_fails_a_planted_variant_and_times_the_others(tmp_path, monkeypatch):
    wrong = _planted(loop(loader_host, host=True, flip=VerticalFlip()))
    kit = registry.kit("numpy")
    planted = dataclasses.replace(kit, variants=(*kit.variants, wrong))
    monkeypatch.setitem(registry._KITS, "numpy", planted)  # restored after the test
    argv = ["--quick", "--workload", "augment", "--device", "cpu", "--backends", "numpy"]
    argv += ["--rounds", "1", "--warmup", "0", "--no-plot", "--out", str(tmp_path)]
    assert compare.run(argv) == 0
    rows = {r.name: r for r in Run.load(tmp_path / "compare-cpu.json").group("augment").rows}
    assert rows["planted"].status == "failed" and not rows["planted"].timed
    assert "differs from the keyed reference" in rows["planted"].detail
    assert rows[AUGMENT_BASELINE].timed and rows[AUGMENT_BASELINE].status == "ok"


def _altered(change: Any) -> Any:
    def factory(ctx: Context) -> EpochPipeline:
        batches = [change(b) for b in loader_host(ctx.workload.data, ctx.batch_size)]
        return EpochPipeline(lambda _: iter(batches), len(batches))

    return factory


def test_loops_that_drop_rows_or_skip_the_normalise_fail_the_check():
    dropped = _altered(lambda b: {k: x[:-1] for k, x in b.items()})
    for shuffle in ("full", None):  # the Loader's and a peer's check alike
        check = _check(_planted(dropped, shuffle))
        assert not check.ok and check.detail == "batch 1 follows a partial batch"
    raw = _altered(lambda b: {**b, "image": levels(b["image"])})  # levels, not normalised
    check = _check(_planted(raw, None))
    assert not check.ok and "not normalised" in check.detail
    short = _altered(lambda b: {**b, "image": b["image"][:, :, :200]})
    assert "expected float32[32, 3, 224, 224]" in _check(_planted(short, None)).detail


def test_the_draw_is_a_small_share_of_the_ops():
    share = draw_share(_context().workload.data, 8, batches=2)
    assert share["ops_ms"] > 0 and 0 <= share["share"] < 0.5


def test_the_augment_targets_set_the_loader_against_torchvision_kornia_and_the_ops():
    values = {"augment:loader-aug-host": 1.0, "augment:tv-v2-w2": 1.25}
    values |= {"augment:kornia-batched": 2.5, "augment:draw": 0.1, "augment:ops": 30.0}
    verdicts = {v.key: v for v in targets.evaluate("compare", values, gpu=False)}
    assert (verdicts["augment-vs-tv"].value, verdicts["augment-vs-tv"].status) == (0.8, "met")
    assert verdicts["augment-vs-kornia"].status == "met"
    assert verdicts["augment-draw"].value == pytest.approx(1 / 300)
    values["augment:kornia-batched"] = 1.5
    verdicts = {v.key: v for v in targets.evaluate("compare", values, gpu=False)}
    assert verdicts["augment-vs-kornia"].status == "not met"


def test_torchvision_v2_passes_its_check_where_installed():
    pytest.importorskip("torch")
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is an augment peer, not installed")
    check = _check(_variant("tv-v2-w0"))
    assert check.ok, check.detail


def test_kornia_passes_its_check_where_installed():
    pytest.importorskip("kornia", reason="kornia is an augment peer, not installed")
    check = _check(_variant("kornia-batched"))
    assert check.ok, check.detail


def test_keras_in_tf_data_passes_its_check_where_installed():
    pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    check = _check(_variant("keras-tfdata"))
    assert check.ok, check.detail


@pytest.fixture(scope="module")
def augment_run(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("augment")
    argv = ["--quick", "--workload", "augment", "--device", "cpu", "--backends", "numpy,torch"]
    argv += ["--skip", "*-w2,*-w0", "--rounds", "1", "--warmup", "0"]
    assert compare.run([*argv, "--no-plot", "--out", str(out)]) == 0
    return Run.load(out / "compare-cpu.json"), (out / "compare-cpu.md").read_text()


def test_a_quick_augment_run_checks_and_times_its_rows(augment_run):
    run, markdown = augment_run
    group = run.group("augment")
    rows = {r.name: r for r in group.rows}
    assert group.baseline == AUGMENT_BASELINE and group.info["images"] == 128
    for name in (AUGMENT_BASELINE, "loader-aug-torch"):
        assert rows[name].timed and rows[name].check.startswith("augment"), rows[name].detail
    if importlib.util.find_spec("kornia") is None:
        assert rows["kornia-batched"].status == "not installed"
        assert "| kornia-batched |" in markdown and "not installed" in markdown
    assert "| images/s |" in markdown and "| threads |" in markdown
    assert "Keyed draw: " in markdown and "of the ops" in markdown
    verdicts = {v.key: v for v in run.verdicts}
    assert verdicts["augment-draw"].status == targets.NOT_JUDGED
    assert not run.extras["step"]  # no step section on augment
