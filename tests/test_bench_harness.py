"""The timing harness's pieces on the CPU: rounds, the baseline loop, devices, transfer timing."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from looptoolkit.bench.rounds import Record, epoch_round
from looptoolkit.bench.variants import EpochPipeline, kit


class Counted(EpochPipeline):
    """``batches`` ints per epoch, each after ``sleep`` seconds; counts the batches taken."""

    def __init__(self, batches: int, sleep: float = 0.0) -> None:
        self.taken = 0

        def epoch_fn(epoch):
            for i in range(batches):
                if sleep:
                    time.sleep(sleep)
                self.taken += 1
                yield i

        super().__init__(epoch_fn, batches, name="counted")


def test_only_jax_batches_need_a_ready_call():
    assert kit("numpy").ready is None
    for name, module in (("torch", "torch"), ("tf", "tensorflow")):
        pytest.importorskip(module)
        assert kit(name).ready is None
    jax = pytest.importorskip("jax")
    ready = kit("jax").ready
    # JAX's backend `synchronize` is `effects_barrier`, which does not wait for queued
    # computations: JAX rows are timed to each batch's outputs being ready instead.
    assert ready is jax.block_until_ready
    ready(jax.numpy.arange(3))


def test_the_synthetic_gpu_step_waits_for_the_loops_stream_only():
    """D13: a device-wide sync would also wait for the prefetch side stream's copies."""
    from looptoolkit.bench.rounds import Step

    calls = []

    class Stream:
        def synchronize(self):
            calls.append("stream")

    class Cuda:
        def _sleep(self, cycles):
            calls.append(("sleep", cycles))

        def current_stream(self):
            return Stream()

        def synchronize(self):
            calls.append("device")

    step = Step(0.0, "cpu")
    step._cuda, step._cycles = Cuda(), 1000
    step()
    assert calls == [("sleep", 1000), "stream"]


def test_round_without_a_step_takes_whole_epochs_and_records_no_per_batch_figures():
    pipeline = Counted(10)
    record = Record()
    one_round = epoch_round(pipeline, record, 2, None, 10)
    epochs = [one_round(), one_round()]
    assert pipeline.taken == 40 and record.error is None
    assert all(type(s) is float and s > 0 for s in epochs)
    # Without a step nothing is taken per batch: no wait or step figures.
    assert record.per_batch == []


def test_round_bounded_to_a_limit_is_scaled_to_an_epoch_and_readies_every_batch():
    pipeline = Counted(20, sleep=0.002)
    readied = []
    epoch = epoch_round(pipeline, Record(), 1, 4, 20, ready=readied.append)()
    assert pipeline.taken == 4 and readied == [0, 1, 2, 3]
    # 4 batches of >= 2 ms timed, scaled to the 20 of an epoch.
    assert epoch >= 20 * 0.002 * 0.9


def test_round_scales_a_bounded_epoch_from_its_first_batch_and_steady_batches(monkeypatch):
    from looptoolkit.bench import rounds

    # The clock reads 0 at the start, 10 at the first batch, 16 at the end of 4 batches: a
    # first batch of 10 s, then 2 s per batch; 20 batches: 10 + 19 * 2 = 48 s.
    readings = iter([0.0, 10.0, 16.0])
    monkeypatch.setattr(rounds, "time", SimpleNamespace(perf_counter=lambda: next(readings)))
    assert epoch_round(Counted(20), Record(), 1, 4, 20)() == pytest.approx(48.0)


def test_round_with_a_step_times_wait_and_step_per_batch():
    pipeline = Counted(10, sleep=0.001)
    steps = []
    syncs = []

    def step():
        steps.append(1)
        time.sleep(0.002)

    record = Record()
    one_round = epoch_round(pipeline, record, 1, 5, 10, step=step, sync=lambda: syncs.append(1))
    one_round()
    assert pipeline.taken == 5 and len(steps) == 5 and len(syncs) == 1
    ((wait, stepped),) = record.per_batch
    assert stepped >= 0.002 * 0.9 and wait >= 0.001 * 0.9


def test_round_records_an_error_and_stops_timing():
    epochs = []

    def broken(epoch):
        epochs.append(epoch)
        yield 1
        raise RuntimeError("boom")

    record = Record()
    one_round = epoch_round(EpochPipeline(broken, 2), record, 1, None, 2, step=lambda: None)
    assert one_round() == one_round() == 0.0 and len(epochs) == 1
    assert record.error == "RuntimeError: boom" and record.per_batch == []


def test_interleave_records_what_a_self_timed_round_returns():
    from looptoolkit.bench.timing import interleave

    pipeline = Counted(20, sleep=0.001)
    (row,) = interleave([("c", epoch_round(pipeline, Record(), 1, 4, 20))], rounds=2)
    # The round's own figure (4 batches scaled to 20), not the clock's (4 batches).
    assert row.name == "c" and len(row.rounds_s) == 2
    assert all(s >= 20 * 0.001 * 0.9 for s in row.rounds_s)


def test_sync_is_none_on_the_cpu():
    from looptoolkit.bench.rounds import sync_fn

    assert sync_fn("cpu", ["numpy", "torch"]) is None
    assert sync_fn("cuda", []) is None
    pytest.importorskip("torch")
    assert callable(sync_fn("cuda:1", ["torch"]))


def test_each_variant_waits_for_its_own_backend_once_per_epoch(monkeypatch):
    pytest.importorskip("torch")
    from looptoolkit.bench import rounds
    from looptoolkit.bench.workloads import make_workload

    calls: list[str] = []

    def fake_sync_fn(device, backends):
        (backend,) = backends
        return lambda: calls.append(backend)

    monkeypatch.setattr(rounds, "sync_fn", fake_sync_fn)
    settings = rounds.Settings(
        device="cpu",
        backends=["numpy", "torch"],
        patterns=["floor-torch", "loader-torch"],
        skip=None,
        rounds=2,
        epochs_per_round=1,
        warmup=1,
        max_epoch_s=0.0,
        slow_batches=5,
        seed=0,
    )
    entries = rounds.run_workload(make_workload("tabular", quick=True), settings)
    names = sorted(e.variant.name for e in entries if e.row.timed)
    assert names == ["floor-torch", "loader-torch", "numpy-take"]
    # One sync per epoch of each variant (warm-up included), of that variant's backend only.
    assert calls.count("numpy") == 3 and calls.count("torch") == 6 and len(calls) == 9


def test_a_loop_whose_warm_epoch_overruns_the_budget_is_bounded_to_the_batches_that_fit(
    monkeypatch,
):
    from looptoolkit.bench import rounds
    from looptoolkit.bench.variants import Variant
    from looptoolkit.bench.workloads import make_workload

    def sleepy(ctx):  # 2 ms a batch: 0.2 s an epoch of 100 batches
        def epoch(e):
            for start in range(0, ctx.workload.n, ctx.batch_size):
                time.sleep(0.002)
                yield ctx.data[start : start + ctx.batch_size]

        return EpochPipeline(epoch, ctx.workload.num_batches)

    base = next(v for v in kit("numpy").variants if v.name == "numpy-take")
    slow = Variant("sleepy", "numpy", "2 ms a batch", sleepy, shuffle=None)
    monkeypatch.setattr(rounds, "variants", lambda backends: [base, slow])
    settings = rounds.Settings("cpu", ["numpy"], None, None, 2, 1, 0, 0.05, 3, 0)
    entries = rounds.run_workload(make_workload("index", quick=True), settings)
    fast, bounded = (e.row for e in entries)
    assert fast.timed and fast.bounded is None  # a whole epoch fits in 0.05 s
    # About 25 batches fit; the epoch is scaled to all 100 of them.
    assert bounded.timed and 3 <= bounded.bounded < 75 and bounded.check.startswith("coverage")
    assert bounded.median_s >= 100 * 0.002 * 0.9


def _unflatten_loop(data, batch_size, *, seed=0, gather="take", wrap=None):
    """numpy_manual as it was written first: every batch rebuilt with the tree spec."""
    import numpy as np

    from looptoolkit import tree
    from looptoolkit._rows.rows import Rows
    from looptoolkit.bench.variants import split_batches

    n = Rows(data).n
    leaves, spec = tree.flatten(data)
    for epoch in range(2):
        indices = np.random.default_rng([seed, epoch]).permutation(n)
        for idx in split_batches(indices, batch_size):
            batch = [x.take(idx, axis=0) if gather == "take" else x[idx] for x in leaves]
            yield spec.unflatten(batch if wrap is None else wrap(batch))


def _same_batch(got, want):
    import numpy as np
    import optree

    from looptoolkit import tree

    got_leaves, got_spec = optree.tree_flatten(got, namespace=tree.NAMESPACE)
    want_leaves, want_spec = optree.tree_flatten(want, namespace=tree.NAMESPACE)
    assert got_spec == want_spec and type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)  # the same key order too
    for a, b in zip(got_leaves, want_leaves, strict=True):
        assert type(a) is type(b) and a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("shape", ["array", "dict", "nested"])
@pytest.mark.parametrize("gather", ["take", "index"])
@pytest.mark.parametrize("how", ["plain", "wrap"])
def test_baseline_loop_yields_the_batches_of_the_tree_spec_loop(shape, gather, how):
    import numpy as np

    from looptoolkit.bench.variants.numpy import numpy_manual

    rng = np.random.default_rng(3)
    n = 23
    x = rng.standard_normal((n, 4), dtype=np.float32)
    ids = np.arange(n, dtype=np.int64)
    data = {
        "array": x,
        # Not in sorted key order: the batches keep the data's own order.
        "dict": {"y": ids, "x": x, "a": ids.astype(np.int32)},
        "nested": {"y": ids, "inner": {"x": x, "m": (ids % 2 == 0, ids[:, None])}},
    }[shape]
    kwargs = {}
    if how == "wrap":
        kwargs["wrap"] = lambda leaves: [leaf * 2 for leaf in leaves]
    pipeline = numpy_manual(data, 5, seed=7, gather=gather, **kwargs)
    got = [batch for _ in range(2) for batch in pipeline]
    want = list(_unflatten_loop(data, 5, seed=7, gather=gather, **kwargs))
    assert len(got) == len(want) == 10
    for a, b in zip(got, want, strict=True):
        _same_batch(a, b)


@pytest.mark.parametrize("shape", ["array", "dict", "nested"])
def test_floors_and_epoch_views_keep_the_data_shape(shape):
    import numpy as np

    from looptoolkit import tree
    from looptoolkit.bench.variants.numpy import contiguous_copies, epoch_views, sequential_take

    n = 23
    ids = np.arange(n, dtype=np.int64)
    x = np.stack([ids * 10, ids * 10 + 1], axis=1).astype(np.float32)
    data = {
        "array": ids,
        "dict": {"y": ids, "x": x},
        "nested": {"y": ids, "inner": (x, {"z": ids * 3})},
    }[shape]
    leaves, spec = tree.flatten(data)
    for pipeline in (contiguous_copies(data, 5), sequential_take(data, 5)):
        batches = list(pipeline)
        assert len(batches) == 5
        for i, batch in enumerate(batches):
            rows = slice(5 * i, 5 * i + 5)
            _same_batch(batch, spec.unflatten([leaf[rows] for leaf in leaves]))
    seen = []
    for batch in epoch_views(data, 5, seed=1):
        got, got_spec = tree.flatten(batch)
        assert got_spec == spec
        if isinstance(data, dict):
            assert list(batch) == list(data)
        # Every leaf's rows follow the same permutation.
        rows = got[next(i for i, leaf in enumerate(leaves) if leaf is ids)]
        for leaf, part in zip(leaves, got, strict=True):
            assert np.array_equal(part, leaf[rows])
        seen.extend(rows.tolist())
    assert sorted(seen) == ids.tolist()


def test_compare_devices_are_each_backends_own(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    tf_kit = kit("tf")
    assert tf_kit.device("cpu") == "/CPU:0"
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [kind] * 4)
    assert [tf_kit.device(d) for d in ("cuda", "cuda:0", "cuda:1", "cuda:3")] == [
        "/GPU:0", "/GPU:0", "/GPU:1", "/GPU:3"
    ]  # fmt: skip
    with pytest.raises(ValueError):
        tf_kit.device("cuda:x")
    jax = pytest.importorskip("jax")
    jax_kit = kit("jax")
    assert jax_kit.device("cpu") == jax.devices("cpu")[0]
    real = jax.devices
    gpus = ["gpu0", "gpu1", "gpu2"]
    monkeypatch.setattr(jax, "devices", lambda backend=None: gpus if backend == "gpu" else real())
    assert [jax_kit.device(d) for d in ("cuda", "cuda:0", "cuda:1", "cuda:2")] == [
        "gpu0", "gpu0", "gpu1", "gpu2"
    ]  # fmt: skip
    assert kit("numpy").device("cpu") == "cpu"


def test_one_host_array_for_checks_images_and_the_sweep():
    import numpy as np

    from looptoolkit.bench import check, variants, workloads

    assert check.host_array is workloads.host_array
    assert variants.host_array is workloads.host_array
    torch = pytest.importorskip("torch")
    x = torch.arange(4.0, requires_grad=True)
    got = workloads.host_array(x * 2)  # needs .detach() before .numpy()
    assert isinstance(got, np.ndarray) and got.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_transfer_timing_host_rows_without_gc_clocked_rows_with_their_clock():
    import gc

    from looptoolkit.bench.results import Row
    from looptoolkit.bench.transfer_sections import Call, measure

    seen: list[bool] = []
    rows = [Call("a", "row a", lambda: seen.append(gc.isenabled()))]
    host = measure("host", rows, None, 3, None, repeat=4, check=lambda *_: None)
    assert seen == [True] + [False] * (2 + 3) * 4 and gc.isenabled()  # the check, then timed
    assert isinstance(host[0], Row) and host[0].extra == {"repeat": 4}
    assert len(host[0].rounds_s) == 3 and host[0].timed
    assert (host[0].name, host[0].label, host[0].check) == ("a", "row a", "same as the reference")

    class Fixed:
        def start(self):
            pass

        def stop(self):
            return 0.25

    seen.clear()
    clocked = measure("clocked", rows, None, 3, None, clock=Fixed(), check=lambda *_: None)
    assert seen == [True] * (1 + 2 + 3) and clocked[0].rounds_s == [0.25] * 3


def test_transfer_checks_every_row_before_timing_it():
    import numpy as np

    from looptoolkit.bench.transfer_sections import Call, check_same, measure

    calls: list[str] = []

    def row(name: str, value: object, want: object = None) -> Call:
        return Call(name, name, lambda: calls.append(name) or value, want)

    want = {"a": np.arange(3), "b": [np.ones(2, np.float32)]}
    good = row("good", {"a": np.arange(3), "b": [np.ones(2, np.float32)]})
    wrong = [
        row("values", {"a": np.arange(1, 4), "b": [np.ones(2, np.float32)]}),
        row("dtype", {"a": np.arange(3), "b": [np.ones(2, np.float64)]}),
        row("structure", {"a": np.arange(3), "b": (np.ones(2, np.float32),)}),
        row("own reference", np.zeros(2), want=np.ones(2)),
    ]
    for bad in wrong:
        calls.clear()
        with pytest.raises(AssertionError, match=f"^{bad.name}: "):
            measure("t", [good, bad], want, 2, None)
        assert calls == ["good", bad.name]  # checked once each, never timed
    assert len(measure("t", [good, row("own", 1.0, want=1.0)], want, 2, None)) == 2
    with pytest.raises(AssertionError, match="not a float"):
        check_same("kind", [np.zeros(1)], [np.zeros(1)], kind=float)


def test_an_extra_backend_kit_is_listed_after_the_built_in_ones(monkeypatch):
    import numpy as np

    from looptoolkit.adapters import BACKENDS, register_backend
    from looptoolkit.bench import variants
    from looptoolkit.bench.variants import Context, Kit, Variant, loop, register_kit
    from looptoolkit.bench.variants.numpy import numpy_manual
    from looptoolkit.bench.workloads import make_workload

    monkeypatch.setattr(variants, "_KITS", dict(variants._KITS))  # restored afterwards
    monkeypatch.setitem(BACKENDS, "numpy2", BACKENDS["numpy"])
    register_backend("numpy2", "looptoolkit.adapters.numpy", framework="numpy")
    take = Variant("numpy2-take", "numpy2", "the baseline loop again", loop(numpy_manual),
                   shuffle=None)  # fmt: skip
    register_kit(Kit("numpy2", (take,)))
    assert kit("numpy2").variants == (take,)
    listed = variants.variants(["numpy2", "numpy"])
    assert listed[-1] is take and listed[:-1] == list(kit("numpy").variants)
    assert take not in variants.variants(["numpy"])
    workload = make_workload("index", quick=True)
    ctx = Context(workload, kit("numpy2").data(workload.data, "cpu"), "cpu")
    rows = np.concatenate(list(take.factory(ctx)))
    assert sorted(rows.tolist()) == list(range(workload.n))
    with pytest.raises(ValueError, match="no variants for backend 'nope'"):
        variants.variants(["nope"])
