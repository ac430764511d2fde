"""The loader page's crash-resume recipe, run as written: killed mid-epoch, resumed exactly.

The recipe's block is taken from ``docs/loader.md`` and run in subprocesses with three
changes only: the checkpoint's path comes from the environment, every batch's rows are
printed after the optimizer step, and (in the run that is killed) the process waits after
one chosen checkpoint until the test sends it ``SIGKILL``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEADING = "### A checkpoint that survives a crash"


def recipe() -> str:
    text = (ROOT / "docs" / "loader.md").read_text()
    section = text[text.index(HEADING) :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def instrumented(code: str) -> str:
    """The recipe, with its path from the environment, batches printed, a place to be killed."""
    changes = [
        (
            'path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")',
            'path = os.environ["CKPT"]',
        ),
        (
            "        opt.step()\n",
            '        opt.step()\n        print("batch", epoch, batch["y"].tolist(), flush=True)\n',
        ),
        (
            '            torch.save({**state, "loader": loader.state_dict()}, path)\n',
            '            torch.save({**state, "loader": loader.state_dict()}, path)\n'
            '            if os.environ.get("STOP_AT") == f"{epoch}:{step}":\n'
            '                print("saved", flush=True)\n'
            "                import time; time.sleep(120)\n",
        ),
    ]
    for old, new in changes:
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    return code + 'print("weights", model.weight.detach().flatten().tolist(), flush=True)\n'


def start(script: Path, ckpt: Path, stop_at: str | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "CKPT": str(ckpt), "PYTHONPATH": str(ROOT)}
    if stop_at is not None:
        env["STOP_AT"] = stop_at
    return subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )


def batches(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("batch ")]


def test_a_killed_run_resumes_exactly_where_its_checkpoint_was(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(instrumented(recipe()))

    whole = start(script, tmp_path / "whole.pt")
    out, _ = whole.communicate(timeout=300)
    assert whole.returncode == 0
    want = out.splitlines()
    assert len(batches(want)) == 3 * 32  # 1000 rows in batches of 32, three epochs

    ckpt = tmp_path / "crash.pt"
    first = start(script, ckpt, stop_at="1:19")  # epoch 1, after its 20th batch
    seen: list[str] = []
    assert first.stdout is not None
    for line in first.stdout:
        if line.strip() == "saved":
            first.send_signal(signal.SIGKILL)
            break
        seen.append(line.rstrip("\n"))
    first.wait(timeout=60)
    first.stdout.close()
    assert first.returncode == -signal.SIGKILL
    assert len(batches(seen)) == 32 + 20

    second = start(script, ckpt)
    out, _ = second.communicate(timeout=300)
    assert second.returncode == 0
    rest = out.splitlines()
    assert batches(seen) + batches(rest) == batches(want)
    # The model and optimizer came back too: the same weights at the end.
    assert rest[-1] == want[-1] and rest[-1].startswith("weights")
