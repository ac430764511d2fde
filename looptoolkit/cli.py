"""Command line: ``looptoolkit compare | transfer | report | doctor | env``.

``compare`` times every loop variant on the device at hand (the project's main
job, ``make compare``); ``transfer`` times ``to_device``; ``env`` reports what
is installed and which devices each framework sees; ``doctor`` checks that
looptoolkit is right on this machine (host checks, and every GPU backend
present); ``report`` re-renders saved results, or sets several side by side.
``looptoolkit`` alone lists the commands; ``looptoolkit --version`` prints the
version.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["environment", "main"]

COMMANDS = {
    "compare": "time every loop variant x backend x workload on the device at hand, checked "
    "first (--preset classic: which loop is fastest for 1000 epochs of 300,000 samples)",
    "transfer": "time to_device on a nested tree of 1000 leaves and a batch of images",
    "report": "re-render saved results; with two or more files, side by side with ratios "
    "(--fail-above R: exit 1 on a ratio above R)",
    "doctor": "check looptoolkit on this machine: versions and devices, host checks, and "
    "short correctness checks of every GPU backend present (exit 1 if one fails)",
    "env": "installed backends, their devices, pinned memory, Pillow's JPEG decoder",
}


def _torch_info(torch: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"devices": ["cpu"]}
    cuda = torch.cuda.is_available()
    if cuda:
        info["devices"] += [
            f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())
        ]
        info["cuda"] = torch.version.cuda
    pinned = False
    if cuda:
        try:
            pinned = bool(torch.empty(1, pin_memory=True).is_pinned())
        except RuntimeError:
            pinned = False
    info["pinned_memory"] = pinned
    return info


def _jax_info(jax: Any) -> dict[str, Any]:
    return {
        "devices": [f"{d.platform}:{d.id} ({d.device_kind})" for d in jax.devices()],
        "default_backend": jax.default_backend(),
    }


def _tf_info(tf: Any) -> dict[str, Any]:
    return {"devices": [d.name for d in tf.config.list_logical_devices()]}


def _pillow_info() -> dict[str, Any]:
    try:
        import PIL
        from PIL import features
    except ImportError:
        return {"installed": False}
    return {
        "installed": True,
        "version": PIL.__version__,
        "libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
    }


def environment() -> dict[str, Any]:
    """Installed backends with versions and devices, pinned memory, Pillow's JPEG decoder.

    Imports every installed framework (quietly): meant for the ``env`` command, not
    for hot paths.
    """
    from looptoolkit.adapters import BACKENDS
    from looptoolkit.bench.progress import quiet_import

    backends: dict[str, Any] = {}
    for name, (_, module_name, extra) in BACKENDS.items():
        try:
            module = quiet_import(module_name)
        except ImportError:
            hint = f"pip install 'looptoolkit[{extra}]'" if extra else ""
            backends[name] = {"installed": False, "install": hint}
            continue
        entry: dict[str, Any] = {"installed": True, "version": module.__version__}
        try:
            if name == "torch":
                entry.update(_torch_info(module))
            elif name == "jax":
                entry.update(_jax_info(module))
            elif name == "tf":
                entry.update(_tf_info(module))
            else:
                entry["devices"] = ["cpu"]
        except Exception as e:  # a broken driver should not hide the rest of the report
            entry["error"] = f"{type(e).__name__}: {e}"
        backends[name] = entry
    optree = importlib.import_module("optree")
    extras: dict[str, Any] = {"optree": optree.__version__}
    try:
        extras["tensordict"] = importlib.import_module("tensordict").__version__
    except ImportError:
        extras["tensordict"] = None
    return {
        "python": sys.version.split()[0],
        "backends": backends,
        "packages": extras,
        "pillow": _pillow_info(),
    }


def _print_env(info: dict[str, Any]) -> None:
    print(f"python {info['python']}")
    for name, entry in info["backends"].items():
        if not entry["installed"]:
            hint = f" ({entry['install']})" if entry["install"] else ""
            print(f"{name:6s} not installed{hint}")
            continue
        print(f"{name:6s} {entry['version']}")
        for device in entry.get("devices", []):
            print(f"         device  {device}")
        if "pinned_memory" in entry:
            print(f"         pinned memory: {'yes' if entry['pinned_memory'] else 'no (no CUDA)'}")
        if "error" in entry:
            print(f"         error: {entry['error']}")
    for name, version in info["packages"].items():
        print(f"{name:10s} {version or 'not installed'}")
    pillow = info["pillow"]
    if pillow["installed"]:
        turbo = "yes" if pillow["libjpeg_turbo"] else "no"
        print(f"pillow     {pillow['version']} (libjpeg-turbo: {turbo})")
    else:
        print("pillow     not installed")


def _env(args: argparse.Namespace) -> int:
    info = environment()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_env(info)
    return 0


def _parser() -> argparse.ArgumentParser:
    from looptoolkit import __version__

    parser = argparse.ArgumentParser(
        prog="looptoolkit",
        description="Fast batch loading and device transfer for PyTorch, JAX, TensorFlow and "
        "NumPy, measured.",
        epilog="`looptoolkit COMMAND --help` for a command's flags.",
    )
    parser.add_argument("--version", action="version", version=f"looptoolkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, text in COMMANDS.items():
        # compare, transfer, report and doctor parse their own flags.
        command = sub.add_parser(name, help=text, add_help=name == "env")
        if name == "env":
            command.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``looptoolkit`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("compare", "transfer", "report", "doctor"):
        module = importlib.import_module(f"looptoolkit.bench.{argv[0]}")
        result: int = module.run(argv[1:])
        return result
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return _env(args)


if __name__ == "__main__":
    sys.exit(main())
