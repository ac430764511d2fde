"""``looptoolkit doctor``: what this machine has, and whether looptoolkit is right on it.

Prints the versions and devices it sees (torch and CUDA, JAX's backend, TensorFlow's
GPUs), runs the host checks everywhere and the GPU checks of every GPU backend
present (``looptoolkit.bench.doctor_checks``), prints
one table, and writes the run as a results JSON (suite ``doctor``) that
``looptoolkit report`` reads, alone or beside another machine's. Exit status 0
only when every check passes.

Frameworks are imported only if installed, with JAX's preallocation and
TensorFlow's grab of all GPU memory turned off first; TensorFlow's GPUs are
listed without starting its runtime (``list_physical_devices``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looptoolkit.bench.doctor_checks import (
    Check,
    CheckFailed,
    CudaKit,
    cuda_checks,
    gpu_loader_check,
    host_checks,
)
from looptoolkit.bench.progress import quiet_import
from looptoolkit.bench.results import Group, Row, Run, results_dir
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.timing import machine_info

__all__ = ["environment", "run", "screen", "select", "side_by_side"]

_MODULES = {"numpy": "numpy", "torch": "torch", "jax": "jax", "tf": "tensorflow"}
_STATUS = {"ok": "PASS", "failed": "FAIL", "error": "ERROR"}
_TITLES = {
    "host": "host checks",
    "cuda": "torch on CUDA",
    "jax-gpu": "JAX on a GPU",
    "tf-gpu": "TensorFlow on a GPU",
}


def _torch(torch: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda}
    info["cuda_available"] = available = bool(torch.cuda.is_available())
    if available:
        info["current"] = f"cuda:{torch.cuda.current_device()}"
        info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def _jax(jax: Any) -> dict[str, Any]:
    devices = jax.devices()
    return {
        "version": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id} ({d.device_kind})" for d in devices],
        "gpu": [str(d) for d in devices if d.platform == "gpu"],
    }


def _tf(tf: Any) -> dict[str, Any]:
    gpus = tf.config.list_physical_devices("GPU")  # does not start the runtime
    return {"version": tf.__version__, "gpu": [d.name for d in gpus]}


def environment() -> tuple[dict[str, Any], dict[str, Any]]:
    """What is installed, with versions and devices; and the imported modules by backend name."""
    info: dict[str, Any] = {"python": sys.version.split()[0]}
    modules: dict[str, Any] = {}
    describe = {"torch": _torch, "jax": _jax, "tf": _tf}
    for name, module_name in _MODULES.items():
        if importlib.util.find_spec(module_name) is None:
            info[name] = {"installed": False}
            continue
        try:
            module = modules[name] = quiet_import(module_name)
            entry: dict[str, Any] = {"installed": True}
            entry.update(
                describe[name](module) if name in describe else {"version": module.__version__}
            )
        except Exception as e:  # a broken driver is reported, and its checks are not run
            entry = {"installed": True, "error": f"{type(e).__name__}: {e}"}
            modules.pop(name, None)
        info[name] = entry
    return info, modules


def select(info: dict[str, Any], modules: dict[str, Any]) -> list[Check]:
    """The host checks of the installed backends, then the checks of every GPU backend present."""
    checks = host_checks(modules)
    torch = info.get("torch", {})
    if "torch" in modules and torch.get("cuda_available"):
        checks += cuda_checks(CudaKit(modules["torch"], torch["current"]))
    if "jax" in modules and info["jax"].get("gpu"):
        jax = modules["jax"]
        checks.append(gpu_loader_check("jax-gpu", "jax", jax.devices("gpu")[0]))
    if "tf" in modules and info["tf"].get("gpu"):
        checks.append(gpu_loader_check("tf-gpu", "tf", "/GPU:0"))
    return checks


def _run_check(check: Check) -> Row:
    start = time.perf_counter()
    try:
        detail, status = check.run(), "ok"
    except CheckFailed as e:
        detail, status = str(e), "failed"
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        detail = f"{type(e).__name__}: {e} ({Path(where.filename).name}:{where.lineno})"
        status = "error"
    seconds = time.perf_counter() - start
    return Row(check.name, check.text, check.backend, None, [seconds], "", status, detail)


def _devices(info: dict[str, Any]) -> list[str]:
    """One line per framework: its version and the devices it sees."""
    lines = [f"python {info['python']}"]
    for name, entry in info.items():
        if name == "python":
            continue
        if not entry.get("installed"):
            lines.append(f"{name}: not installed")
        elif "error" in entry:
            lines.append(f"{name}: error: {entry['error']}")
        elif name == "torch":
            cuda = entry.get("devices")
            seen = f"CUDA {entry['cuda']}: {', '.join(cuda)}" if cuda else "no CUDA device"
            lines.append(f"torch {entry['version']}: {seen}")
        elif name == "jax":
            lines.append(f"jax {entry['version']}: backend {entry['backend']}, {entry['devices']}")
        elif name == "tf":
            lines.append(f"tensorflow {entry['version']}: GPUs {entry['gpu'] or 'none'}")
        else:
            lines.append(f"{name} {entry['version']}")
    return lines


def _gpus(info: dict[str, Any]) -> list[str]:
    found = []
    if info.get("torch", {}).get("cuda_available"):
        found.append("cuda")
    for name in ("jax", "tf"):
        if info.get(name, {}).get("gpu"):
            found.append(f"{name}-gpu")
    return found


def results(checks: Sequence[Check], rows: Sequence[Row], info: dict[str, Any]) -> Run:
    """The run as the results model: one group per section, a row per check."""
    groups: dict[str, Group] = {}
    for check, row in zip(checks, rows, strict=True):
        title = _TITLES.get(check.section, check.section)
        groups.setdefault(check.section, Group(check.section, title, [], unit="check")).rows.append(
            row
        )
    gpus = _gpus(info)
    torch = info.get("torch", {})
    device = ", ".join(gpus) or "cpu"
    if "cuda" in gpus:
        device = f"{torch['current']} ({torch['devices'][0]})"
    machine = machine_info()
    return Run(
        "doctor",
        device,
        machine["command"],
        machine,
        {"gpu_backends": gpus},
        list(groups.values()),
        extras={"environment": info},
    )


def tables(run: Run) -> list[Table]:
    """One table per section: each check, PASS / FAIL / ERROR, its seconds and what it saw."""
    header = ["check", "status", "s", "detail"]
    return [
        Table(
            g.title,
            header,
            [
                [r.name, _STATUS.get(r.status, r.status), f"{r.median_s:.2f}", r.detail]
                for r in g.rows
            ],
            align="llrl",
        )
        for g in run.groups
    ]


def verdict(run: Run) -> str:
    """One line: how many checks passed, and which did not."""
    rows = [r for g in run.groups for r in g.rows]
    bad = [f"{r.name} ({_STATUS.get(r.status, r.status)})" for r in rows if r.status != "ok"]
    if not bad:
        return f"All {len(rows)} checks passed."
    return f"{len(bad)} of {len(rows)} checks did not pass: {', '.join(bad)}."


def screen(run: Run) -> str:
    """What ``doctor`` printed: the environment, a table per section, the verdict."""
    lines = _devices(run.extras.get("environment", {"python": "?"}))
    if not run.settings.get("gpu_backends"):
        lines.append("No GPU found: the host checks only.")
    text = "\n".join(wrap(line, indent="  ") for line in lines)
    body = "\n\n".join(t.text() for t in tables(run))
    return f"{text}\n\n{body}\n\n{wrap(verdict(run), indent='  ')}"


def side_by_side(runs: Sequence[Run], labels: Sequence[str]) -> list[Table]:
    """Each check's status in every run (a GPU machine's beside a CPU reference)."""
    out: list[Table] = []
    sections: dict[str, str] = {}
    for r in runs:
        sections.update({g.name: g.title for g in r.groups})
    for name, title in sections.items():
        status: dict[str, list[str]] = {}
        for i, r in enumerate(runs):
            for g in (g for g in r.groups if g.name == name):
                for row in g.rows:
                    cells = status.setdefault(row.name, ["-"] * len(runs))
                    cells[i] = _STATUS.get(row.status, row.status)
        rows = [[check, *cells] for check, cells in status.items()]
        out.append(Table(title, ["check", *labels], rows, align="l" * (len(labels) + 1)))
    return out


def _markdown(run: Run) -> str:
    lines = [
        "# looptoolkit doctor",
        "",
        *(f"- {line}" for line in _devices(run.extras["environment"])),
    ]
    lines += [f"- {verdict(run)}", ""]
    for table in tables(run):
        lines += [f"## {table.title}", "", table.markdown()]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The flags of ``looptoolkit doctor``."""
    parser = argparse.ArgumentParser(
        prog="looptoolkit doctor",
        description="Check looptoolkit on this machine: the versions and devices it sees, host "
        "checks, and short correctness checks of every GPU backend present; exit 1 if any "
        "check does not pass.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="results directory for doctor-<device>.json and .md (default: ./looptoolkit-results)",
    )
    return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``looptoolkit doctor``; 0 when every check passes, else 1."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    info, modules = environment()
    checks = select(info, modules)
    rows = [_run_check(check) for check in checks]
    result = results(checks, rows, info)
    result.wall_s = time.perf_counter() - started
    print(screen(result))
    stem = "doctor-" + ("-".join(result.settings["gpu_backends"]) or "cpu")
    paths = result.save(results_dir(args.out), stem, _markdown(result))
    print(f"\nWrote {', '.join(map(str, paths))} ({result.wall_s:.0f} s).")
    return 0 if all(r.status == "ok" for r in rows) else 1
