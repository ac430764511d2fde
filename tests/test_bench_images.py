"""The images variant set of `looptoolkit compare` and the batch-size sweep of `transfer`."""

from __future__ import annotations

import numpy as np
import pytest

from looptoolkit.bench import compare, transfer
from looptoolkit.bench.check import check_batches, host_leaves
from looptoolkit.bench.results import Run
from looptoolkit.bench.variants import (
    BASELINE,
    VARIANTS,
    Context,
    Variant,
    kit,
    split_batches,
    to_uint8,
)
from looptoolkit.bench.workloads import make_workload
from looptoolkit.order import epoch_indices

IMAGES = [v for v in VARIANTS if v.name.startswith("img-")]


@pytest.fixture(scope="module")
def workload():
    return make_workload("images", quick=True)


def _context(workload, variant):
    data = kit(variant.backend).data(workload.data, "cpu")
    return Context(workload, data, "cpu", seed=3), host_leaves(data)


def test_the_set_is_three_ways_per_backend_on_images_only():
    names = {v.name for v in IMAGES}
    for backend in ("torch", "jax", "tf"):
        assert {f"img-host-{backend}", f"img-step-{backend}", f"img-trans-{backend}"} <= names
    for v in IMAGES:
        assert v.workloads == ("images",) and v.shuffle == "full" and v.convert is not None
        assert len(v.name) <= 18 and v.label


@pytest.mark.parametrize("variant", IMAGES, ids=lambda v: v.name)
def test_every_images_variant_passes_the_exact_check(workload, variant):
    ctx, reference = _context(workload, variant)
    pipeline = variant.factory(ctx)
    check = check_batches(variant, pipeline, ctx, reference)
    assert check.ok, check.detail
    assert check.how.startswith("exact") and check.batches == workload.num_batches
    # The next iter() is the next epoch, normalised float32 again.
    batch = next(iter(pipeline))
    assert host_leaves(batch)["batch['image']"].dtype == np.float32
    labels = host_leaves(batch)["batch['label']"]
    want = split_batches(epoch_indices(ctx.order("full"), 1), ctx.batch_size)[0]
    np.testing.assert_array_equal(labels, want)


def test_the_check_fails_a_batch_that_was_not_normalised(workload):
    from looptoolkit import Loader

    def raw(ctx):  # uint8 images: the check must not let them through
        return Loader(ctx.workload.data, ctx.batch_size, seed=ctx.seed)

    variant = Variant("img-raw", "numpy", "raw", raw, workloads=("images",), convert=to_uint8)
    ctx, reference = _context(workload, variant)
    with pytest.raises(TypeError, match="uint8, not normalised float32"):
        check_batches(variant, variant.factory(ctx), ctx, reference)


def test_to_uint8_inverts_the_normalisation_exactly():
    from looptoolkit.bench.variants import normalizer

    image = np.arange(256, dtype=np.uint8).repeat(3 * 4).reshape(-1, 3, 2, 2)
    batch = normalizer()({"image": image, "label": np.arange(len(image))})
    assert batch["image"].dtype == np.float32
    np.testing.assert_array_equal(to_uint8(batch)["image"], image)


def test_step_section_on_images_times_the_images_set_and_the_baseline(tmp_path):
    argv = ["--quick", "--workload", "images", "--backends", "numpy,torch", "--no-plot",
            "--out", str(tmp_path)]  # fmt: skip
    assert compare.run(argv) == 0
    run = Run.load(tmp_path / "compare-cpu.json")
    assert run.settings["step_workload"] == "images"
    rows = run.extras["step"]
    assert {r["name"] for r in rows} == {BASELINE, "img-host-torch", "img-step-torch",
                                         "img-trans-torch"}  # fmt: skip
    for row in rows:
        assert row["workload"] == "images" and 0 <= row["wait_fraction"] <= 1
    markdown = (tmp_path / "compare-cpu.md").read_text()
    assert "## images with a model step of 0.5 ms" in markdown


def test_sweep_has_one_row_per_dtype_and_batch_size():
    pytest.importorskip("jax")
    from looptoolkit.bench.transfer import sweep_table
    from looptoolkit.bench.transfer_sections import DTYPES, ROW_KEYS, sweep

    section = sweep(1, sizes=(4, 8))
    assert section["cpu_only"] and "host side" in section["measures"]
    rows = section["rows"]
    assert [(r["dtype"], r["batch_size"]) for r in rows] == [(d, s) for s in (4, 8) for d in DTYPES]
    for r in rows:
        assert tuple(r) == ROW_KEYS
        assert r["bytes"] == r["batch_size"] * 3 * 64 * 64 * np.dtype(r["dtype"]).itemsize
        assert r["ms_per_batch"] == pytest.approx(r["median_s"] * 1e3)
        assert r["mb_per_s"] == pytest.approx(r["bytes"] / r["median_s"] / 1e6)
    table = sweep_table(section).text()
    assert "uint8 ms" in table and max(map(len, table.splitlines())) <= 80


def test_transfer_writes_the_sweep_with_its_chart(tmp_path):
    pytest.importorskip("jax")
    argv = ["--no-nested", "--no-images", "--rounds", "1", "--out", str(tmp_path)]
    assert transfer.run(argv) == 0
    run = Run.load(tmp_path / "transfer-cpu.json")
    rows = run.extras["sweep"]["rows"]
    assert len(rows) == 18 and run.groups == []
    assert {r["batch_size"] for r in rows} == {32, 64, 128, 256, 512, 1024}
    assert run.charts == ["transfer-cpu-sweep.png"]
    assert (tmp_path / "transfer-cpu-sweep.png").stat().st_size > 0
    markdown = (tmp_path / "transfer-cpu.md").read_text()
    assert "## images batch (3x64x64) moved with to_device by dtype (CPU only" in markdown


def test_by_batch_size_times_both_dtype_paths_through_the_checked_rows():
    from looptoolkit.bench.compare_report import transfer_table
    from looptoolkit.bench.transfer_cuda import by_batch_size

    result = by_batch_size("cpu", True, 0)
    assert result["batch_sizes"] == [8, 32] and result["note"].startswith("host cast")
    paths = result["ms_per_batch"]
    assert list(paths) == ["uint8 copy, cast on the device", "cast to float16, then copy"]
    assert all(len(ms) == 2 and min(ms) > 0 for ms in paths.values())
    assert "A: uint8 copy, cast on the device" in transfer_table(result).text()
