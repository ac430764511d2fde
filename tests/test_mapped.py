"""Memory-mapped leaves whose file changes between passes are refused, never a crash.

A read past the end of a shortened mapped file is a SIGBUS that kills the
process; each case runs in a subprocess, which must end normally with the
Loader's error naming the file.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from looptoolkit import Loader

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from looptoolkit import Loader
    path, how = sys.argv[1], sys.argv[2]
    np.save(path, np.arange(200_000, dtype=np.float64).reshape(-1, 8))
    data = {"x": np.load(path, mmap_mode="r"), "y": np.arange(25_000)}
    loader = Loader(data, 64, shuffle=True, seed=1, prefetch=int(sys.argv[3]))
    for batch in loader:
        pass
    if how == "shrink":  # the same file rewritten shorter (np.save truncates it)
        np.save(path, np.arange(8, dtype=np.float64).reshape(-1, 8))
    elif how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(4096)
    elif how == "replace":  # another file of the same size renamed over it
        np.save(path + ".new.npy", np.zeros((25_000, 8)))
        os.replace(path + ".new.npy", path)
    elif how == "remove":
        os.remove(path)
    try:
        for batch in loader:
            pass
    except RuntimeError as e:
        print("REFUSED", e)
    else:
        print("READ")
    """
)


@pytest.mark.parametrize("how", ["shrink", "truncate", "replace", "remove"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_changed_memmap_is_refused_in_a_subprocess(tmp_path, how, prefetch):
    path = str(tmp_path / "x.npy")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, path, how, str(prefetch)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr)  # negative: killed by a signal
    assert done.stdout.startswith("REFUSED"), done.stdout + done.stderr
    assert "data['x']" in done.stdout and path in done.stdout
    assert {"shrink": "bytes and is now", "truncate": "is now 4096", "replace": "replaced"}.get(
        how, "no longer"
    ) in done.stdout


def test_unchanged_memmap_runs_every_pass(tmp_path):
    path = tmp_path / "x.npy"
    values = np.random.default_rng(0).standard_normal((300, 4))
    np.save(path, values)
    loader = Loader(np.load(path, mmap_mode="r"), 32, shuffle=True)
    for epoch in range(3):
        got = np.concatenate(list(loader))
        np.testing.assert_array_equal(got, values[loader.indices(epoch)])
    mapped = np.memmap(tmp_path / "raw.bin", dtype=np.float32, mode="w+", shape=(50, 2))
    assert len(list(Loader({"m": mapped[10:]}, 8))) == 5  # a view of a memmap is checked too
