"""``looptoolkit doctor``: runs here, says what it found, writes JSON that ``report`` reads.

The GPU checks run on the host through a ``CudaKit`` on ``"cpu"`` (the same code,
no streams): they pass there, a planted fault makes one fail, and they are
selected only when the environment reports CUDA (or a JAX / TensorFlow GPU).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from looptoolkit import cli
from looptoolkit.bench import doctor
from looptoolkit.bench.doctor_checks import Check, CheckFailed, CudaKit, cuda_checks


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, str]:
    out = tmp_path_factory.mktemp("doctor")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(["doctor", "--out", str(out)])
    return code, out, buffer.getvalue()


def _cuda_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def test_doctor_runs_the_host_checks_and_exits_0(ran):
    code, out, text = ran
    assert code == 0, text
    assert "host checks" in text and "All " in text and "checks passed" in text
    if not _cuda_here():
        assert "No GPU found: the host checks only." in text
        (path,) = out.glob("doctor-*.json")
        assert path.name == "doctor-cpu.json"
    payload = json.loads(next(out.glob("doctor-*.json")).read_text())
    assert payload["suite"] == "doctor"
    names = [r["name"] for g in payload["groups"] for r in g["rows"]]
    assert {"loader-numpy", "prefetch-modes", "resume", "to-device-cpu"} <= set(names)
    assert all(r["status"] == "ok" for g in payload["groups"] for r in g["rows"])
    if not _cuda_here():
        assert [g["name"] for g in payload["groups"]] == ["host"]


def test_report_reads_doctor_json_alone_and_side_by_side(ran, capsys, tmp_path):
    _, out, _ = ran
    (path,) = out.glob("doctor-*.json")
    assert cli.main(["report", str(path)]) == 0
    alone = capsys.readouterr().out
    assert "loader-numpy" in alone and "PASS" in alone
    other = tmp_path / "gpu-machine.json"
    payload = json.loads(path.read_text())
    # on a machine with a GPU the run has CUDA checks of its own: compare a host-only copy
    payload["groups"] = [g for g in payload["groups"] if g["name"] == "host"]
    path = tmp_path / "host-machine.json"
    path.write_text(json.dumps(payload))
    payload["groups"].append(
        {
            "name": "cuda",
            "title": "torch on CUDA",
            "unit": "check",
            "rows": [{"name": "memory", "status": "failed", "rounds_s": [0.1]}],
        }
    )
    other.write_text(json.dumps(payload))
    assert cli.main(["report", str(path), str(other)]) == 0
    both = capsys.readouterr().out
    assert "torch on CUDA" in both and "FAIL" in both
    memory = next(line for line in both.splitlines() if line.startswith("memory"))
    assert memory.split()[1:] == ["-", "FAIL"]


def test_a_failing_check_makes_doctor_exit_1(monkeypatch, tmp_path, capsys):
    def broken() -> str:
        raise CheckFailed("planted: batch 3 differs from NumPy.")

    def crashing() -> str:
        raise RuntimeError("planted crash")

    planted = [
        Check("host", "fine", "passes", lambda: "ok"),
        Check("host", "planted", "fails", broken),
        Check("host", "crash", "raises", crashing),
    ]
    monkeypatch.setattr(doctor, "select", lambda info, modules: planted)
    assert cli.main(["doctor", "--out", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert "2 of 3 checks did not pass: planted (FAIL), crash (ERROR)" in text
    rows = {
        r["name"]: r
        for g in json.loads(next(tmp_path.glob("doctor-*.json")).read_text())["groups"]
        for r in g["rows"]
    }
    assert rows["planted"]["status"] == "failed" and "batch 3" in rows["planted"]["detail"]
    assert rows["crash"]["status"] == "error" and "RuntimeError" in rows["crash"]["detail"]


def _info(cuda: bool, jax_gpu: bool = False, tf_gpu: bool = False) -> dict[str, Any]:
    torch = {"installed": True, "cuda_available": cuda, "current": "cpu", "devices": ["fake"]}
    return {
        "python": "3",
        "torch": torch,
        "jax": {"installed": True, "gpu": ["gpu:0"] if jax_gpu else []},
        "tf": {"installed": True, "gpu": ["/physical_device:GPU:0"] if tf_gpu else []},
    }


def test_gpu_checks_are_selected_only_where_a_gpu_is_present():
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    modules = {"numpy": __import__("numpy"), "torch": torch}
    host = {c.section for c in doctor.select(_info(cuda=False), modules)}
    assert host == {"host"}
    with_cuda = doctor.select(_info(cuda=True), modules)
    assert [c.name for c in with_cuda if c.section == "cuda"] == [
        "loader-cuda",
        "skip-keys",
        "stream-order",
        "memory",
        "overlap",
        "ragged",
        "blocks",
    ]

    class FakeJax:  # jax.devices("gpu") on a machine with one GPU
        @staticmethod
        def devices(kind: str) -> list[Any]:
            assert kind == "gpu"
            return jax.devices("cpu")

    both = doctor.select(_info(cuda=False, jax_gpu=True, tf_gpu=True), {"jax": FakeJax, "tf": 1})
    assert [c.section for c in both if c.section != "host"] == ["jax-gpu", "tf-gpu"]


def test_the_cuda_checks_pass_on_the_host_and_see_a_planted_fault():
    torch = pytest.importorskip("torch")
    kit = CudaKit(torch, "cpu")
    for check in cuda_checks(kit):
        assert check.run()  # a detail, no exception

    class Growing(CudaKit):  # memory that a leaking Loader would leave reserved
        grown = 0

        def reserved(self) -> int:
            self.grown += 64 << 20
            return self.grown

    (memory,) = [c for c in cuda_checks(Growing(torch, "cpu")) if c.name == "memory"]
    with pytest.raises(CheckFailed, match="reserved memory grew over 6 epochs"):
        memory.run()


@pytest.mark.cuda
@pytest.mark.parametrize(
    "name", ["loader-cuda", "skip-keys", "stream-order", "memory", "overlap", "ragged", "blocks"]
)
def test_the_cuda_checks_pass_on_a_gpu(cuda, name):
    import torch

    (check,) = [c for c in cuda_checks(CudaKit(torch, str(cuda))) if c.name == name]
    assert check.run()


def test_the_ragged_cuda_check_sees_batches_of_a_reused_buffer(monkeypatch):
    torch = pytest.importorskip("torch")
    from looptoolkit.bench import doctor_checks

    real = doctor_checks.Loader

    def reused(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        batches = list(real(*args, device=device, **kwargs))
        # Moved batches all showing the last one: what views of one reused buffer would give.
        return batches if device is None else [batches[-1]] * len(batches)

    monkeypatch.setattr(doctor_checks, "Loader", reused)
    (ragged,) = [c for c in cuda_checks(CudaKit(torch, "cpu")) if c.name == "ragged"]
    with pytest.raises(CheckFailed, match="pad batches: batch 0"):
        ragged.run()


def test_the_blocks_cuda_check_sees_kept_batches_overwritten(monkeypatch):
    torch = pytest.importorskip("torch")
    from looptoolkit.bench import doctor_checks

    real = doctor_checks.Loader

    class Reused:  # moved batches that all show the latest: views of one reused block
        def __init__(self, *args: Any, device: Any = None, **kwargs: Any) -> None:
            self.loader = real(*args, device=device, **kwargs)
            self.moved = device is not None

        def __getattr__(self, name: str) -> Any:
            return getattr(self.loader, name)

        def __iter__(self) -> Any:
            last: dict[str, Any] = {}
            for batch in self.loader:
                if not self.moved:
                    yield batch
                    continue
                for key, value in batch.items():
                    last.setdefault(key, value.copy() if hasattr(value, "copy") else value.clone())
                    last[key][: len(value)] = value  # one buffer, rewritten
                yield last

    monkeypatch.setattr(doctor_checks, "Loader", Reused)
    (blocks,) = [c for c in cuda_checks(CudaKit(torch, "cpu")) if c.name == "blocks"]
    with pytest.raises(CheckFailed, match="epoch 0, kept: batch 0"):
        blocks.run()
