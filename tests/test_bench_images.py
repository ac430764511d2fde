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
    argv = ["--quick", "--device", "cpu", "--workload", "images", "--backends", "numpy,torch",
            "--no-plot", "--out", str(tmp_path)]  # fmt: skip
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


def test_sweep_has_a_figure_per_dtype_and_batch_size():
    pytest.importorskip("jax")
    from looptoolkit.bench.transfer_sections import DTYPES, dtype_sweep, sweep_table

    result = dtype_sweep(1, sizes=(4, 8))
    assert result["device"] == "cpu" and "host side" in result["title"]
    assert result["batch_sizes"] == [4, 8] and list(result["ms_per_batch"]) == list(DTYPES)
    for dtype in DTYPES:
        ms, mb = result["ms_per_batch"][dtype], result["mb_per_s"][dtype]
        assert len(ms) == 2 and min(ms) > 0
        for size, t, rate in zip((4, 8), ms, mb, strict=True):
            nbytes = size * 3 * 64 * 64 * np.dtype(dtype).itemsize
            assert rate == pytest.approx(nbytes / t / 1e3)
    table = sweep_table(result).text()
    assert "uint8 ms" in table and "MB/s" in table and "A:" not in table
    assert max(map(len, table.splitlines())) <= 80


def test_sweep_fails_a_path_whose_output_differs_or_is_not_a_copy():
    from looptoolkit.bench.transfer_sections import sweep

    def path(fn):
        return lambda batch: (lambda: fn(batch), batch)

    with pytest.raises(AssertionError, match=r"^alias: to_device did not copy"):
        sweep("t", {"alias": path(lambda b: b)}, [2], 1)
    with pytest.raises(AssertionError, match=r"^wrong: leaves differ"):
        sweep("t", {"wrong": path(lambda b: b + 1)}, [2], 1)
    result = sweep("t", {"copy": path(np.copy)}, [2, 3], 1)
    assert result["batch_sizes"] == [2, 3] and len(result["ms_per_batch"]["copy"]) == 2


def test_transfer_writes_the_sweep_with_its_chart(tmp_path):
    pytest.importorskip("jax")
    argv = ["--no-nested", "--no-images", "--rounds", "1", "--out", str(tmp_path)]
    assert transfer.run(argv) == 0
    run = Run.load(tmp_path / "transfer-cpu.json")
    sweep = run.extras["sweep"]
    assert sweep["batch_sizes"] == [32, 64, 128, 256, 512, 1024] and run.groups == []
    assert all(len(ms) == 6 for ms in sweep["ms_per_batch"].values())
    assert run.charts == ["transfer-cpu-sweep.png"]
    assert (tmp_path / "transfer-cpu-sweep.png").stat().st_size > 0
    markdown = (tmp_path / "transfer-cpu.md").read_text()
    assert "## images batch (3x64x64) moved with to_device by dtype (CPU only" in markdown


def test_by_batch_size_is_the_sweep_with_the_compare_paths():
    from looptoolkit.bench.transfer_sections import by_batch_size, sweep_table

    result = by_batch_size("cpu", True, 0)
    assert result["batch_sizes"] == [8, 32] and "host cast only" in result["title"]
    paths = result["ms_per_batch"]
    assert list(paths) == ["uint8 copy, cast on the device", "cast to float16, then copy"]
    assert all(len(ms) == 2 and min(ms) > 0 for ms in paths.values())
    for ms, mb in zip(paths.values(), result["mb_per_s"].values(), strict=True):
        float16 = [size * 3 * 64 * 64 * 2 for size in (8, 32)]  # the bytes each path delivers
        assert mb == pytest.approx([n / t / 1e3 for n, t in zip(float16, ms, strict=True)])
    table = sweep_table(result).text()
    assert "A: uint8 copy, cast on the device" in table and "B ms" in table
    assert max(map(len, table.splitlines())) <= 80
