"""The package builds as a wheel that holds the package and nothing else, and passes twine.

The cheap part of ``make dist`` (which also installs the wheel in a fresh
venv with only NumPy and optree and runs the README's tour there): a broken
package fails CI.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import looptoolkit

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_passes_twine(tmp_path):
    pytest.importorskip("build")
    pytest.importorskip("twine")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("looptoolkit-*.whl")
    assert wheel.name.startswith(f"looptoolkit-{looptoolkit.__version__}-")
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"looptoolkit", f"looptoolkit-{looptoolkit.__version__}.dist-info"}
    assert "looptoolkit/py.typed" in names and "looptoolkit/__init__.py" in names
    assert "looptoolkit/adapters/torch.py" in names and "looptoolkit/bench/__init__.py" in names
    metadata = (
        zipfile.ZipFile(wheel)
        .read(f"looptoolkit-{looptoolkit.__version__}.dist-info/METADATA")
        .decode()
    )
    assert f"Version: {looptoolkit.__version__}" in metadata
    assert "Requires-Dist: numpy" in metadata and "Requires-Dist: optree" in metadata
