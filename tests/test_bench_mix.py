"""The ``mix`` workload of ``looptoolkit compare``: its sources, the deviation from the weights,
its mixture check (planted defects caught), and a quick run in which every row is checked and
timed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from looptoolkit.bench import compare, targets
from looptoolkit.bench.check import host_leaves
from looptoolkit.bench.check_mixture import Deviation, SourcePasses, check_mixture
from looptoolkit.bench.results import Run
from looptoolkit.bench.variants import VARIANTS, Context, Variant
from looptoolkit.bench.variants.epochs import EpochPipeline
from looptoolkit.bench.variants.mix import MIXES, bounds, mix_loader, source_of, weights_of
from looptoolkit.bench.workloads import make_workload

MIX_ROWS = {"loader-mix", "torchdata-mix", "hf-mix", "tf-mix", "grain-mix"}


def test_sources_are_their_weights_share_of_the_rows():
    assert bounds(3000, weights_of("2")).tolist() == [0, 2100, 3000]
    assert np.diff(bounds(300_000, weights_of("5"))).tolist() == [120_000, 75_000, 45_000, 36_000,
                                                                  24_000]  # fmt: skip
    assert source_of(np.array([0, 2099, 2100, 2999]), bounds(3000, (0.7, 0.3))).tolist() == [
        0, 0, 1, 1,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="too few"):
        bounds(3, weights_of("5"))


def test_deviation_is_the_largest_count_off_its_weight_in_any_batch():
    # sources: rows 0-6 (weight 0.7) and 7-9 (0.3); batches of 10 rows should hold 7 and 3
    d = Deviation(np.array([0, 7, 10]), (0.7, 0.3))
    assert d.add(np.array([7, 0, 1, 8, 2, 3, 9, 4, 5, 6])) == pytest.approx(0.0)
    assert d.max == pytest.approx(0.0)
    assert d.add(np.array([0, 1, 2, 3, 4, 5, 6, 0, 7, 8])) == pytest.approx(1.0)  # 8 and 2
    assert d.add(np.array([0, 1, 2, 7, 8, 9, 7, 8, 9, 7])) == pytest.approx(4.0)  # 3 and 7
    assert d.add(np.array([0, 7, 1, 8])) == pytest.approx(0.8)  # a short batch: 2 - 0.4 * 3
    assert (d.max, d.batches) == (pytest.approx(4.0), 4)
    five = Deviation(np.array([0, 40, 65, 80, 92, 100]), (0.4, 0.25, 0.15, 0.12, 0.08))
    ids = np.concatenate([np.arange(0, 12), np.arange(40, 48), np.arange(65, 69), [80, 81, 82, 92]])
    # counts 12, 8, 4, 3, 1 of 28 rows against 11.2, 7, 4.2, 3.36, 2.24: off by 1.24 at most
    assert five.add(ids) == pytest.approx(1.24)


def test_source_passes_catch_a_row_again_before_its_source_is_done():
    p = SourcePasses(np.array([0, 3, 5]))
    assert p.add(np.array([0, 3, 1])) is None
    assert p.add(np.array([2, 4, 0])) is None  # source 0 done with 2, a new pass starts at 0
    assert p.add(np.array([3, 4])) is None  # source 1's second pass
    assert p.add(np.array([1, 0])) == "repeats row 0 of source 0 within one pass over it"


def _mix_context(quick: bool = True):
    w = make_workload("mix", quick=quick)
    return Context(w, w.data, "cpu"), host_leaves(w.data)


def _batches(mix: str = "2", seed: int = 0) -> list[dict[str, np.ndarray]]:
    ctx, _ = _mix_context()
    return list(mix_loader(ctx.data, ctx.batch_size, mix=mix, seed=seed))


def _check(name: str, batches: list, mix: str = "2"):
    ctx, reference = _mix_context()
    v = Variant(name, "numpy", "", lambda _: None, shuffle=None, workloads=("mix",), mix=mix)
    return check_mixture(v, EpochPipeline(lambda _: iter(batches), len(batches)), ctx, reference)


@pytest.mark.parametrize("mix", list(MIXES))
def test_the_loader_mixture_passes_its_check_within_one_row(mix):
    check = _check(f"loader-mix{mix}", _batches(mix), mix)
    assert check.ok, check.detail
    assert check.extra["max_deviation"] < 1 and check.extra["deviation_batches"] == 100
    assert check.how.startswith("mixture")


def test_a_planted_wrong_count_fails_the_loader_and_is_measured_on_a_peer():
    batches = _batches("2")
    edges = bounds(3000, weights_of("2"))
    first, second = (dict(b) for b in batches[:2])
    src0, src1 = (source_of(b["y"], edges) for b in (first, second))
    i, j = int(np.flatnonzero(src0 == 1)[0]), int(np.flatnonzero(src1 == 0)[0])
    for key in ("x", "y"):  # a source-1 row of batch 0 traded for a source-0 row of batch 1
        a, b = first[key].copy(), second[key].copy()
        a[i], b[j] = second[key][j], first[key][i]
        first[key], second[key] = a, b
    planted = [first, second, *batches[2:]]
    loader = _check("loader-mix2", planted)
    assert (
        not loader.ok and loader.detail == "batch 0 strays 1 rows from the weights (exact: under 1)"
    )
    peer = _check("peer-mix2", planted)  # a peer is measured, not failed, for its counts
    assert peer.ok and peer.extra["max_deviation"] == pytest.approx(1.0)


def test_the_mixture_check_catches_misaligned_repeated_and_short_batches():
    batches = _batches("2")
    bad = dict(batches[0])
    bad["x"] = bad["x"][::-1].copy()
    misaligned = _check("peer-mix2", [bad, *batches[1:]])
    assert not misaligned.ok and "not aligned" in misaligned.detail
    again = _check("peer-mix2", [batches[0], batches[0], *batches[2:]])
    assert not again.ok and "within one pass" in again.detail
    short = _check("peer-mix2", [{k: v[:-1] for k, v in batches[0].items()}, *batches[1:]])
    assert not short.ok and short.detail == "batch 0 has 29 rows, batch size 30"
    lost = _check("peer-mix2", batches[:-1])
    assert not lost.ok and lost.detail == "99 batches, expected 100"


def test_the_mix_workload_runs_its_own_rows_and_the_shared_ones():
    w, tabular = make_workload("mix", quick=True), make_workload("tabular", quick=True)
    on_mix = {v.name for v in VARIANTS if w.runs(v)}
    assert {"numpy-take", "floor-memcpy", "floor-seq-take", "loader-numpy"} <= on_mix
    assert {"loader-mix2", "loader-mix5", "torchdata-mix2", "tf-mix5", "hf-mix2"} <= on_mix
    assert not {"loader-grouped", "dl-getitems", "loader-torch", "floor-pad-copy"} & on_mix
    assert not any(v.mix for v in VARIANTS if tabular.runs(v))
    mixing = [v for v in VARIANTS if v.mix]
    assert {v.name.rstrip("25") for v in mixing} == MIX_ROWS
    assert all(v.workloads == ("mix",) and v.mix in MIXES for v in mixing)
    assert {v.floor for v in mixing if v.name.startswith("loader-")} == {"loader-numpy"}
    needs = {v.name: v.needs for v in mixing}
    assert needs["torchdata-mix2"] == ("torchdata",) and needs["grain-mix5"] == ("grain",)
    assert needs["hf-mix2"] == ("datasets",) and needs["tf-mix2"] == ()


def test_mix_targets_set_the_mixtures_against_the_plain_loader_of_the_same_run():
    values = {"mix:loader-numpy": 10.0, "mix:loader-mix2": 10.5, "mix:loader-mix5": 11.5}
    values["loader-numpy"] = 1.0  # tabular's plain Loader is no denominator of theirs
    verdicts = {v.key: v for v in targets.evaluate("compare", values, gpu=False)}
    assert (verdicts["mix-2"].value, verdicts["mix-2"].status) == (pytest.approx(1.05), "met")
    assert (verdicts["mix-5"].value, verdicts["mix-5"].status) == (pytest.approx(1.15), "not met")
    none = {v.key: v for v in targets.evaluate("compare", {}, gpu=False)}
    assert none["mix-2"].status == "not measured"


@pytest.fixture(scope="module")
def mix_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mix")
    argv = ["--quick", "--workload", "mix", "--device", "cpu", "--backends", "numpy,torch,tf"]
    assert compare.run([*argv, "--no-plot", "--out", str(out)]) == 0
    return Run.load(out / "compare-cpu.json"), (out / "compare-cpu.md").read_text()


def test_a_quick_mix_run_checks_and_times_every_row(mix_run):
    run, markdown = mix_run
    group = run.group("mix")
    rows = {r.name: r for r in group.rows}
    expected = {"numpy-take", "floor-memcpy", "floor-seq-take", "loader-numpy"}
    expected |= {"loader-mix2", "loader-mix5", "tf-mix2", "tf-mix5"}
    for module, kind in (("torchdata", "torchdata-mix"), ("datasets", "hf-mix")):
        if importlib.util.find_spec(module):
            expected |= {f"{kind}2", f"{kind}5"}
    assert expected <= set(rows)
    assert ("grain-mix2" in rows) == bool(importlib.util.find_spec("grain"))
    for row in rows.values():
        assert row.status == "ok" and row.timed, (row.name, row.detail)
    for name in ("loader-mix2", "loader-mix5"):
        assert rows[name].check.startswith("mixture") and rows[name].extra["max_deviation"] < 1
        assert group.ratio(rows[name], rows[name].floor) is not None  # over the plain Loader
    assert (
        rows["loader-numpy"].check.startswith("exact")
        and "max_deviation" in rows["loader-numpy"].extra
    )
    assert "max_deviation" not in rows["floor-seq-take"].extra
    assert all("max_deviation" in r.extra for r in rows.values() if r.name.startswith("tf-mix"))
    verdicts = {v.key: v for v in run.verdicts}
    for key in ("mix-2", "mix-5"):
        assert verdicts[key].value is not None and verdicts[key].status == "not judged at --quick"
    assert "| max dev |" in markdown and "max dev: the largest" in markdown
    assert not run.extras["step"]  # no step section on the mixtures
