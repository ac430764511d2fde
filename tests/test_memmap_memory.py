"""benchmarks/memmap_memory.py at a tiny size: one Loader epoch per shuffle, in subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")

ROOT = Path(__file__).resolve().parent.parent


def test_memmap_study_reads_every_row_once_and_reports_sane_figures():
    from benchmarks.memmap_memory import measure, table

    results = measure(0.005)
    rows = int(0.005e9 / (64 * 4))
    assert [r["shuffle"] for r in results] == ["full", "grouped"]
    for r in results:
        assert r["rows"] == rows and r["dataset_gb"] == pytest.approx(0.005, rel=1e-3)
        assert r["epoch_s"] > 0 and r["traced_peak_gb"] > 0
        # The map's file pages read in count in the resident size: at least the data.
        assert r["peak_rss_gb"] >= r["dataset_gb"] > r["traced_peak_gb"]
    text = table(results).text()
    assert "full" in text and "grouped" in text and max(map(len, text.splitlines())) <= 80


def test_memmap_study_runs_as_a_script_and_prints_its_table():
    out = subprocess.run(
        [sys.executable, "benchmarks/memmap_memory.py", "--gb", "0.002"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "One Loader epoch over a memory-mapped dataset" in out.stdout
    assert "one epoch, shuffle='grouped', in a subprocess" in out.stderr
