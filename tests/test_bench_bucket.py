"""The ``bucket`` workload of ``looptoolkit compare``: its loops that need no peer pass their
check on a tiny array in a local S3 server, planted wrong loops (a row dropped, a resume that
restarts) are caught, the targets read its figures, and a quick run writes its table."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

pytest.importorskip("zarr")
pytest.importorskip("obstore")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

from looptoolkit.bench import compare, targets
from looptoolkit.bench.check_bucket import check_bucket, check_resume
from looptoolkit.bench.results import Group, Row, Run
from looptoolkit.bench.variants import Context, Variant, variants
from looptoolkit.bench.variants.bucket import (
    BUCKET_BASELINE,
    BucketLoop,
    bucket_values,
    first_bound,
    stacked,
)
from looptoolkit.bench.workloads import ALL_WORKLOADS, make_workload

ROWS = 1_000  # 16 batches of 64 (the last partial), chunks of 256 rows
NO_PEER = (BUCKET_BASELINE, "floor-local-seq", "loader-s3-grouped", "loader-s3-seq")
NO_PEER += ("loader-s3-grp-e2", "loader-s3-shuf-e1", "floor-s3-seq")


@pytest.fixture(scope="module")
def workload() -> Any:
    w = make_workload("bucket", quick=True, rows=ROWS)
    w.resource.latency_s = 0.0  # the loops' logic, not their speed
    yield w
    w.close()


def _context(w: Any) -> Context:
    return Context(w, w.data, "cpu")


def _variant(name: str) -> Variant:
    return next(v for v in variants(["numpy"]) if v.name == name)


def test_the_workload_runs_when_named_and_declares_its_variants():
    assert "bucket" not in ALL_WORKLOADS
    w = make_workload("bucket", quick=True, rows=ROWS)
    try:
        assert w.kind == "bucket" and w.id_path == "batch['y']" and w.batch_size == 64
        assert w.resource._s3 is None  # nothing started until a loop needs it
        on = {v.name: v for v in variants(["numpy"]) if w.runs(v)}
        assert set(NO_PEER) <= set(on) and "numpy-take" not in on
        assert {"mosaic-e1", "litdata-e1", "hf-parquet"} <= set(on)
        assert all(on[n].listed for n in ("mosaic-e1", "litdata-e2", "hf-parquet"))
        assert on["loader-s3-grouped"].floor == "floor-s3-seq"
        assert on["loader-s3-grp-e2"].floor == BUCKET_BASELINE
    finally:
        w.close()


@pytest.mark.parametrize("name", NO_PEER)
def test_the_loops_that_need_no_peer_pass_their_check(workload, name):
    v, ctx = _variant(name), _context(workload)
    loop = v.factory(ctx)
    check = check_bucket(v, loop, ctx)
    assert check.ok, check.detail
    assert check.batches == 16 and check.how.startswith("coverage")
    x = check.extra
    assert x["resume"] == ("not offered" if name == "floor-s3-seq" else "yes"), x["resume_detail"]
    assert x["used_bytes"] == ROWS * (64 * 4 + 8) and x["convert_s"] > 0
    if name == "floor-s3-seq":  # every chunk object once, and nothing else (no LIST)
        chunks = -(-ROWS // workload.resource.chunk)
        assert x["requests"] == 2 * chunks and 1.0 <= x["fetched_per_used"] <= 1.2
    elif name.startswith("floor-"):
        assert x["requests"] == 0 and x["fetched_per_used"] is None
    elif name.endswith("-e2"):  # the cache holds every chunk: a LIST per array, no chunk fetched
        assert x["fetched_per_used"] < 0.05
    else:
        assert x["requests"] > 0 and 1.0 <= x["fetched_per_used"] <= 1.2
    assert len(list(loop)) == 16  # the next epoch, as the timing rounds run it


def test_zarr_read_directly_passes_its_check_and_offers_no_resume(workload):
    v, ctx = _variant("zarr-direct"), _context(workload)
    check = check_bucket(v, v.factory(ctx), ctx, limit=3)
    assert check.ok, check.detail
    assert check.extra["resume"] == "not offered" and check.extra["requests"] > 0


def test_the_bounded_local_full_shuffle_passes_its_check_on_its_first_batches(workload):
    v, ctx = _variant("floor-local-shuf"), _context(workload)
    assert v.slow  # it decodes most chunks for every batch: timed on its first batches
    check = check_bucket(v, v.factory(ctx), ctx, limit=6)
    assert check.ok and check.batches == 6 and check.how.endswith("first 6 batches")
    assert check.extra["resume"] == "yes", check.extra["resume_detail"]


def _planted(make: Any) -> Variant:
    return Variant("planted", "numpy", "a wrong loop", make, None, ("bucket",))


def _loader_batches(ctx: Context, epoch: int = 0) -> list[dict[str, np.ndarray]]:
    from looptoolkit import Loader

    loader = Loader(ctx.workload.resource.local(), ctx.batch_size, shuffle="grouped")
    loader.set_epoch(epoch)
    return list(loader)


def test_a_loop_that_drops_a_row_fails_the_check(workload):
    def dropped(ctx: Context) -> BucketLoop:
        batches = _loader_batches(ctx)
        batches[3] = {k: a[:-1] for k, a in batches[3].items()}
        return BucketLoop(lambda e: iter(batches), len(batches), name="dropped", form="zarr")

    check = check_bucket(_planted(dropped), dropped(_context(workload)), _context(workload))
    assert not check.ok and check.detail == "batch 4 follows a partial batch"


def test_a_loop_whose_rows_are_not_their_ids_fails_the_check(workload):
    def shifted(ctx: Context) -> BucketLoop:
        batches = _loader_batches(ctx)
        batches[0] = {"x": batches[0]["x"][::-1], "y": batches[0]["y"]}
        return BucketLoop(lambda e: iter(batches), len(batches), name="shifted", form="zarr")

    check = check_bucket(_planted(shifted), shifted(_context(workload)), _context(workload))
    assert not check.ok and "not aligned with batch['y']" in check.detail


def test_a_resume_that_restarts_the_epoch_is_reported_not_exact(workload):
    ctx = _context(workload)
    whole = [b["y"] for b in _loader_batches(ctx)]

    def restarts(stop_after: int, limit: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return whole, whole[:stop_after] + whole  # the resumed loop starts over

    def reshuffles(stop_after: int, limit: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return whole, whole[:stop_after] + [b["y"] for b in _loader_batches(ctx, 1)][stop_after:]

    loop = BucketLoop(lambda e: iter([]), len(whole), name="x", form="zarr", resume=restarts)
    assert check_resume(loop, len(whole))[0] == "no"
    assert "320 repeated" in check_resume(loop, len(whole))[1]  # 5 batches of 64 twice
    loop.resume = reshuffles
    assert check_resume(loop, len(whole))[0] == "no"
    loop.resume = lambda stop, limit: (whole, whole[:stop] + whole[stop:])
    assert check_resume(loop, len(whole)) == ("yes", "")
    # On a prefix (a bounded loop): a third of the limit, then the rest of the limit.
    loop.resume = lambda stop, limit: (whole[:limit], whole[:stop] + whole[:limit][stop:])
    assert check_resume(loop, len(whole), limit=6) == ("yes", "")
    loop.resume = lambda stop, limit: (whole[:limit], whole[:stop] + whole[:limit][:-stop])
    assert check_resume(loop, len(whole), limit=6)[0] == "no"
    loop.resume = None
    assert check_resume(loop, len(whole)) == ("not offered", "")


def test_a_planted_restarting_resume_shows_in_the_checked_row(workload):
    def restarting(ctx: Context) -> BucketLoop:
        batches = _loader_batches(ctx)
        whole = [b["y"] for b in batches]
        return BucketLoop(
            lambda e: iter(batches),
            len(batches),
            name="restarting",
            form="zarr",
            resume=lambda stop, limit: (whole, whole[:stop] + whole),
        )

    ctx = _context(workload)
    check = check_bucket(_planted(restarting), restarting(ctx), ctx)
    assert check.ok  # its epoch is right; its resume is not
    assert check.extra["resume"] == "no" and "repeated" in check.extra["resume_detail"]


def test_stacked_batches_of_samples():
    samples = iter([{"x": np.full(2, i, np.float32), "y": i} for i in range(5)])
    out = list(stacked(samples, 2))
    assert [b["y"].tolist() for b in out] == [[0, 1], [2, 3], [4]]
    assert out[0]["x"].shape == (2, 2) and out[0]["y"].dtype == np.int64


def test_the_bucket_targets_read_its_rows():
    def row(name: str, s: float, **extra: Any) -> Row:
        return Row(name, rounds_s=[s], extra=extra)

    rows = [
        row(BUCKET_BASELINE, 1.0, first_ms=1.0, fetched_per_used=None),
        row("loader-s3-grouped", 1.4, first_ms=60.0, fetched_per_used=1.01, first_chunks=2),
        row("loader-s3-seq", 1.0, first_ms=50.0, fetched_per_used=1.0, fetched_bytes=100 << 20),
        row("mosaic-e1", 2.0, first_ms=500.0, fetched_per_used=1.02),
    ]
    info = {"rows": 100, "chunk": 1024, "row_bytes": 264, "latency_s": 0.02}
    group = Group("bucket", "", rows, "epoch", BUCKET_BASELINE, 10, info)
    values = {f"bucket:{r.name}": r.median_s for r in rows} | bucket_values(group)
    # The grouped epoch's first batch needs 2 chunks of 1,024 rows of 264 bytes.
    first = 2 * 1024 * 264
    assert values["bucket:first-bound"] == pytest.approx(first_bound(0.02, first, 100 << 20))
    verdicts = {v.key: v for v in targets.evaluate("compare", values, gpu=False)}
    assert verdicts["bucket-grouped"].status == "met" and verdicts["bucket-grouped"].value == 1.4
    assert verdicts["bucket-bytes"].status == "met"
    assert verdicts["bucket-vs-mosaic"].value == pytest.approx(0.7)
    assert verdicts["bucket-vs-litdata"].status == "not measured"
    bound = values["bucket:first-bound"]
    assert verdicts["bucket-first-batch"].value == pytest.approx(0.06 / bound)
    assert verdicts["bucket-first-batch"].status == "met"  # 60 ms against 65.2 ms


def test_the_harness_fails_a_planted_loop_and_times_the_others(tmp_path, monkeypatch):
    import dataclasses

    from looptoolkit.bench import variants as registry

    def dropped(ctx: Context) -> BucketLoop:
        batches = _loader_batches(ctx)[:-1]  # the last batch's rows never come
        return BucketLoop(lambda e: iter(batches), len(batches), name="dropped", form="zarr")

    kit = registry.kit("numpy")
    planted = dataclasses.replace(kit, variants=(*kit.variants, _planted(dropped)))
    monkeypatch.setitem(registry._KITS, "numpy", planted)  # restored after the test
    argv = ["--quick", "--workload", "bucket", "--device", "cpu", "--backends", "numpy"]
    argv += ["--variants", f"{BUCKET_BASELINE},loader-s3-grouped,planted"]
    argv += ["--rounds", "1", "--warmup", "0", "--no-plot", "--out", str(tmp_path)]
    assert compare.run(argv) == 0
    run = Run.load(tmp_path / "compare-cpu.json")
    group = run.group("bucket")
    rows = {r.name: r for r in group.rows}
    assert rows["planted"].status == "failed" and "never appeared" in rows["planted"].detail
    assert rows["loader-s3-grouped"].timed and rows["loader-s3-grouped"].extra["resume"] == "yes"
    assert group.baseline == BUCKET_BASELINE and group.info["latency_s"] == 0.02
    markdown = (tmp_path / "compare-cpu.md").read_text()
    assert "| rows/s |" in markdown and "| fetched/used |" in markdown and "| resume |" in markdown
    verdicts = {v.key: v for v in run.verdicts}
    assert verdicts["bucket-grouped"].status == targets.NOT_JUDGED
    if importlib.util.find_spec("streaming") is None:
        assert "mosaic-e1" not in rows  # not selected by --variants


@pytest.mark.parametrize(
    ("name", "module"),
    [("hf-parquet", "datasets"), ("mosaic-e1", "streaming"), ("litdata-e1", "litdata")],
)
def test_the_peers_pass_their_check_where_installed(workload, name, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is a bucket peer, not installed")
    v, ctx = _variant(name), _context(workload)
    check = check_bucket(v, v.factory(ctx), ctx)
    assert check.ok, check.detail
    assert check.extra["convert_s"] > 0 and check.extra["requests"] > 0
    assert check.extra["resume"] in ("yes", "no")
