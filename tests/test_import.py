"""`import looptoolkit` stays light: no framework imported, little time added."""

import json
import subprocess
import sys

FRAMEWORKS = ("torch", "jax", "tensorflow", "tensordict")


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def test_import_looptoolkit_imports_no_framework():
    code = (
        "import sys, json, looptoolkit, looptoolkit.loader, looptoolkit.order, "
        "looptoolkit.adapters, looptoolkit.cli\n"
        f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))"
    )
    assert json.loads(run_python(code)) == []


def test_recognising_a_numpy_leaf_imports_no_framework():
    code = (
        "import sys, json, numpy as np, looptoolkit\n"
        "looptoolkit.to_device({'x': np.ones(3), 'y': [1, 'a']}, 'cpu')\n"
        "loader = looptoolkit.Loader({'x': np.arange(10)}, 4)\n"
        "assert sum(len(b['x']) for b in loader) == 10\n"
        f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))"
    )
    assert json.loads(run_python(code)) == []


def test_import_adds_only_looptoolkit_and_the_standard_library():
    # What `import looptoolkit` costs on top of numpy and optree is the modules it
    # loads: only its own and the standard library's, a fixed, countable set (a
    # wall-clock bound would be noise on a shared machine; `python -X importtime
    # -c "import looptoolkit"` shows the time).
    code = (
        "import sys, json\n"
        "import numpy, optree\n"
        "before = set(sys.modules)\n"
        "import looptoolkit\n"
        "new = sorted({m.split('.')[0] for m in set(sys.modules) - before})\n"
        "print(json.dumps([new, sorted(sys.stdlib_module_names)]))"
    )
    new, stdlib = json.loads(run_python(code))
    assert "looptoolkit" in new
    assert [m for m in new if m != "looptoolkit" and m not in stdlib] == []
    own = json.loads(
        run_python(
            "import sys, json, numpy, optree\n"
            "before = set(sys.modules)\n"
            "import looptoolkit\n"
            "print(json.dumps(sorted(m for m in set(sys.modules) - before "
            "if m.startswith('looptoolkit'))))"
        )
    )
    # The public API loads its core lazily: the package, the transfer and the pytree
    # helpers with their leaf modules, never the Loader, the benchmarks or an integration.
    assert not [
        m
        for m in own
        if m.startswith(
            (
                "looptoolkit.bench",
                "looptoolkit.torch_data",
                "looptoolkit.tf_data",
                "looptoolkit.loader",
                "looptoolkit._static",
            )
        )
    ]
