"""A backend registered from outside the harness shows up in `compare`, checked and timed."""

from __future__ import annotations

import numpy as np

from looptoolkit.adapters import BACKENDS, register_backend
from looptoolkit.bench import compare, variants
from looptoolkit.bench.results import Run
from looptoolkit.bench.variants import Kit, Variant


def _take_loop(ctx):
    """The baseline loop on ``ctx.data``: a permutation per epoch, one take per leaf per batch."""
    data, size = ctx.data, ctx.batch_size
    n = len(next(iter(data.values())))

    class Loop:
        epoch = 0

        def __iter__(self):
            idx = np.random.default_rng([ctx.seed, self.epoch]).permutation(n)
            self.epoch += 1
            for start in range(0, n, size):
                rows = idx[start : start + size]
                yield {k: v.take(rows, axis=0) for k, v in data.items()}

    return Loop()


def _wrong_loop(ctx):
    """Batches that lose their last row: the check must stop it before it is timed."""
    loop = _take_loop(ctx)
    return ({k: v[:-1] for k, v in batch.items()} for batch in loop)


def test_a_registered_backend_s_variants_are_checked_and_timed(tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "numpy2", BACKENDS["numpy"])  # restored after the test
    register_backend("numpy2", "looptoolkit.adapters.numpy", framework="numpy")
    kit = Kit(
        "numpy2",
        (
            Variant(
                "np2-take", "numpy2", "a second NumPy backend's take loop", _take_loop, shuffle=None
            ),
            Variant("np2-wrong", "numpy2", "a loop that drops rows", _wrong_loop, shuffle=None),
        ),
    )
    monkeypatch.setitem(variants._KITS, "numpy2", kit)
    code = compare.run(
        ["--quick", "--device", "cpu", "--workload", "tabular", "--backends", "numpy,numpy2",
         "--variants", "np2-*", "--step-ms", "0", "--no-plot", "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    group = Run.load(tmp_path / "compare-cpu.json").group("tabular")
    rows = {r.name: r for r in group.rows}
    assert set(rows) == {"numpy-take", "np2-take", "np2-wrong"}
    assert rows["np2-take"].backend == "numpy2" and rows["np2-take"].check.startswith("coverage")
    assert rows["np2-take"].timed and group.ratio(rows["np2-take"]) > 0
    assert rows["np2-wrong"].status == "failed" and not rows["np2-wrong"].timed
    markdown = (tmp_path / "compare-cpu.md").read_text()
    assert "| np2-take | numpy2 |" in markdown


def test_a_registered_loop_runs_on_the_mix_workload_only_when_it_says_so():
    from looptoolkit.bench.workloads import SHARED, make_workload

    mix, tabular = make_workload("mix", quick=True), make_workload("tabular", quick=True)
    plain = Variant("np2-take", "numpy2", "a take loop", _take_loop, shuffle=None)
    mixing = Variant("np2-mix", "numpy2", "a mixture", _take_loop, None, ("mix",), mix="2")
    assert tabular.runs(plain) and not mix.runs(plain)  # a row loop: not on the mixtures
    assert mix.runs(mixing) and not tabular.runs(mixing)
    shared = [Variant(name, "numpy", "", _take_loop) for name in SHARED["mix"]]
    assert all(mix.runs(v) and tabular.runs(v) for v in shared)
