"""The device ``Target``: what every layer knows of a device (a leaf module).

[`parse_device_string`][looptoolkit._common.target.parse_device_string] reads the device strings
every framework's users write (``"cuda:1"``, ``"/GPU:0"``, ``"tpu"``); which backend a name sends
NumPy leaves to is the registry's to say (``looptoolkit.adapters.DEVICE_HOMES``).
Framework device objects (a ``torch.device``, a ``jax.Device``, a ``Sharding``)
are read by their backend (``Backend.native_target``);
[`looptoolkit.device._move.parse_device`][looptoolkit.device._move.parse_device] asks both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KNOWN_DEVICES", "PATH_STYLE", "Target", "parse_device_string"]


@dataclass(frozen=True)
class Target:
    """A parsed device.

    Attributes:
        spec: what the caller passed.
        platform: ``"cpu"``, ``"cuda"``, ``"tpu"``, ``"mps"``, ...
        index: device ordinal, or None for the framework's default.
        home: the backend NumPy leaves go to (None: they stay NumPy).
        native: a framework object to use as is (a ``torch.device``, a ``jax.Device``,
            a ``jax.sharding.Sharding``), or None.
    """

    spec: Any
    platform: str
    index: int | None = None
    home: str | None = None
    native: Any = None

    def __str__(self) -> str:
        return repr(self.spec) if not isinstance(self.spec, str) else f"'{self.spec}'"


KNOWN_DEVICES = "'cpu', 'cuda', 'cuda:N', 'mps', 'gpu', 'gpu:N', 'tpu', '/GPU:N', '/CPU:N'"

# Device names -> platform. "gpu" is CUDA's (or ROCm's) accelerator by another name.
_PLATFORMS = {"cpu": "cpu", "cuda": "cuda", "mps": "mps", "xpu": "xpu", "gpu": "cuda", "tpu": "tpu"}
# The key under which `homes` names the backend of tf-style "/GPU:0" names.
PATH_STYLE = "/"


def _unknown(spec: str) -> ValueError:
    return ValueError(f"`device` {spec!r} is not a known device; use one of {KNOWN_DEVICES}.")


def _split_index(text: str, spec: str) -> tuple[str, int | None]:
    name, sep, number = text.partition(":")
    if not sep:
        return name, None
    if not number.isdigit():
        raise _unknown(spec)
    return name, int(number)


def parse_device_string(spec: str, homes: Mapping[str, str]) -> Target:
    """Parse a device string.

    Args:
        spec: the string, e.g. ``"cuda:1"``, ``"gpu"``, ``"/GPU:0"``, ``"cpu"``.
        homes: device name (``"cuda"``, ``"gpu"``, ...;
            [`PATH_STYLE`][looptoolkit._common.target.PATH_STYLE] for ``"/GPU:0"``-style names) ->
            the backend that NumPy leaves go to. ``"cpu"`` has none: NumPy leaves stay NumPy.

    Raises:
        ValueError: the string names no known device.

    Examples:
        >>> homes = {"cuda": "torch", "/": "tf"}
        >>> parse_device_string("cuda:1", homes)
        Target(spec='cuda:1', platform='cuda', index=1, home='torch', native=None)
        >>> parse_device_string("/GPU:0", homes).home
        'tf'
    """
    text = spec.strip()
    if text.startswith("/"):  # TensorFlow: "/GPU:0", "/device:GPU:0", "/job:x/device:CPU:0"
        last = text.rsplit("/", 1)[-1].removeprefix("device:")
        kind, index = _split_index(last, spec)
        if kind.upper() in ("GPU", "CPU"):
            platform = "cuda" if kind.upper() == "GPU" else "cpu"
            return Target(spec, platform, index, home=homes.get(PATH_STYLE))
        raise _unknown(spec)
    name, index = _split_index(text.lower(), spec)
    # A name a registered backend added (`register_backend(devices=...)`) is its own platform.
    known = _PLATFORMS.get(name, name if name in homes else None)
    if known is None or (name != "cpu" and name not in homes):
        raise _unknown(spec)
    platform = known
    return Target(spec, platform, index, home=homes.get(name))
