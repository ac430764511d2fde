"""The one table of benchmark targets, and how a run's figures are set against it.

Every target is a ratio of two measured quantities of one run (or one quantity
that is already a ratio), with a bound. ``looptoolkit compare`` measures the
loop targets (quantities named by variant: median seconds per epoch),
``looptoolkit transfer`` the ``to_device`` ones; each passes its quantities to
[`evaluate`][looptoolkit.bench.targets.evaluate]. A GPU target is reported as such on a CPU run,
never as met.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BASELINE",
    "NOT_JUDGED",
    "TARGETS",
    "Target",
    "evaluate",
]

BASELINE = "numpy-take"
"""The variant every loop ratio is taken against: the fastest hand-written loop."""

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Target:
    """One target.

    Attributes:
        key: a stable identifier.
        suite: ``"compare"`` or ``"transfer"``: the command that measures it.
        text: what is measured, in a few words.
        numerator: the measured quantity.
        denominator: what it is divided by (None: ``numerator`` is already a ratio).
        op: ``"<="``, ``"<"`` or ``">="``.
        bound: the bound.
        gpu: measured only on a GPU run.
        floor: a quantity that bounds ``numerator`` from below (its ratio to
            ``denominator`` is reported beside the target).
    """

    key: str
    suite: str
    text: str
    numerator: str
    denominator: str | None
    op: str
    bound: float
    gpu: bool = False
    floor: str | None = None

    @property
    def goal(self) -> str:
        """The bound as text, e.g. ``"<= 1.02x"``."""
        return f"{self.op} {self.bound:g}x"


def _loop(key: str, text: str, variant: str, bound: float, floor: str | None) -> Target:
    return Target(key, "compare", text, variant, BASELINE, "<=", bound, floor=floor)


TARGETS: tuple[Target, ...] = (
    _loop("loader-numpy", "Loader, NumPy data, full shuffle", "loader-numpy", 1.02, BASELINE),
    _loop(
        "loader-grouped",
        "Loader, NumPy data, grouped shuffle",
        "loader-grouped",
        0.65,
        "floor-seq-take",
    ),
    _loop(
        "loader-runs",
        "Loader, NumPy data, grouped in runs of 16 rows",
        "loader-runs",
        0.65,
        "floor-seq-take",
    ),
    Target(
        "loader-torch",
        "compare",
        "Loader, torch data, over its floor (take + torch.from_numpy per batch)",
        "loader-torch",
        "floor-torch",
        "<=",
        1.05,
    ),
    Target(
        "loader-torch-hand",
        "compare",
        "Loader, torch data, vs torch's randperm + index_select loop",
        "loader-torch",
        "torch-index-select",
        "<=",
        1.0,
    ),
    Target(
        "loader-jax",
        "compare",
        "Loader, JAX data, over its floor (the chunked hand loop)",
        "loader-jax",
        "floor-jax",
        "<=",
        1.05,
    ),
    Target(
        "loader-tf",
        "compare",
        "Loader, tf data, over its floor (the chunked hand loop)",
        "loader-tf",
        "floor-tf",
        "<=",
        1.05,
    ),
    Target(
        "gpu-resident-vs-dataloader",
        "compare",
        "device-resident Loader: batches/s over DataLoader + __getitems__",
        "dl-getitems",
        "loader-torch-res",
        ">=",
        10.0,
        gpu=True,
    ),
    Target(
        "gpu-resident-vs-gather",
        "compare",
        "device-resident Loader over the bare on-device gather",
        "loader-torch-res",
        "torch-res-gather",
        "<=",
        1.5,
        gpu=True,
    ),
    Target(
        "gpu-prefetch-overlap",
        "compare",
        "prefetch: data wait per step over the step (loader-torch, step section)",
        "wait:loader-torch",
        "step:loader-torch",
        "<",
        0.05,
        gpu=True,
    ),
    Target(
        "nested-torch-optree",
        "transfer",
        "to_device over optree.tree_map (nested, torch leaves)",
        "torch:to_device",
        "torch:optree",
        "<=",
        1.2,
    ),
    Target(
        "nested-torch-move-to",
        "transfer",
        "to_device over a hand-written move_to (nested, torch leaves)",
        "torch:to_device",
        "torch:move_to",
        "<",
        1.0,
    ),
    Target(
        "nested-numpy-optree",
        "transfer",
        "to_device over optree.tree_map (nested, NumPy leaves to torch)",
        "numpy:to_device",
        "numpy:optree",
        "<=",
        1.2,
    ),
    Target(
        "nested-numpy-move-to",
        "transfer",
        "to_device over a hand-written move_to (nested, NumPy leaves to torch)",
        "numpy:to_device",
        "numpy:move_to",
        "<",
        1.0,
    ),
    Target(
        "gpu-bandwidth",
        "transfer",
        "images host-to-device bandwidth over one large pinned copy",
        "cuda:bandwidth-share",
        None,
        ">=",
        0.85,
        gpu=True,
    ),
    Target(
        "gpu-cast-on-device",
        "transfer",
        "images: cast-then-copy over copy-then-cast (to_device)",
        "cuda:cast-then-copy",
        "cuda:copy-then-cast",
        ">=",
        1.8,
        gpu=True,
    ),
    Target(
        "gpu-packed",
        "transfer",
        "nested: per-leaf over packed transfer",
        "cuda:per-leaf",
        "cuda:packed",
        ">=",
        5.0,
        gpu=True,
    ),
)
"""Every target, grouped by the command that measures it."""


def _ratio(values: Mapping[str, float], numerator: str, denominator: str | None) -> float | None:
    top = values.get(numerator)
    if top is None:
        return None
    if denominator is None:
        return float(top)
    bottom = values.get(denominator)
    if bottom is None or bottom <= 0:
        return None
    return float(top) / float(bottom)


def shown(value: float, bound: float) -> str:
    """``value`` as a ratio, with a third decimal where two would read as the bound.

    Examples:
        >>> shown(1.0241, 1.02), shown(0.8612, 1.02)
        ('1.024x', '0.86x')
    """
    text = f"{value:.2f}"
    if float(text) == bound and value != bound:
        text = f"{value:.3f}"
    return text + "x"


NOT_JUDGED = "not judged at --quick"
"""The status of every target of a ``--quick`` run: toy sizes judge nothing."""


def evaluate(
    suite: str, values: Mapping[str, float], *, gpu: bool, judged: bool = True
) -> list[dict[str, Any]]:
    """Set the measured ``values`` of one run of ``suite`` against its targets.

    Args:
        suite: ``"compare"`` or ``"transfer"``.
        values: measured quantities by name (for compare: median seconds per
            epoch by variant name, and ``"wait:<variant>"`` / ``"step:<variant>"``
            seconds per batch from the step section).
        gpu: whether the run was on a GPU.
        judged: False for a ``--quick`` run: ratios are reported, no verdict is given.

    Returns:
        One dict per target of ``suite``: ``key``, ``text``, ``goal``, ``value``
        (the ratio, or None; when measured, ``shown``: it as text), ``floor``
        (the floor's ratio, or None) and ``status``: ``"met"``, ``"not met"``,
        ``"GPU only"`` (a GPU target on a CPU run), ``"not measured"`` (a
        variant did not run) or ``NOT_JUDGED`` (a ``--quick`` run).

    Examples:
        >>> rows = evaluate("compare", {"loader-numpy": 1.5, "numpy-take": 1.0}, gpu=False)
        >>> row = rows[0]
        >>> row["key"], row["value"], row["status"], row["floor"]
        ('loader-numpy', 1.5, 'not met', 1.0)
    """
    if suite not in ("compare", "transfer"):
        raise ValueError(f"`suite` must be 'compare' or 'transfer', got {suite!r}.")
    rows = []
    for t in TARGETS:
        if t.suite != suite:
            continue
        row: dict[str, Any] = {
            "key": t.key,
            "text": t.text,
            "goal": t.goal,
            "variant": t.numerator,
            "value": None,
            "floor": None,
            "floor_name": t.floor,
        }
        if t.gpu and not gpu:
            row["status"] = "GPU only"
            rows.append(row)
            continue
        value = _ratio(values, t.numerator, t.denominator)
        if t.floor is not None:
            row["floor"] = _ratio(values, t.floor, t.denominator)
        if value is None:
            row["status"] = "not measured"
        else:
            row["value"] = value
            row["shown"] = shown(value, t.bound)
            if not judged:
                row["status"] = NOT_JUDGED
            else:
                row["status"] = "met" if _OPS[t.op](value, t.bound) else "not met"
        rows.append(row)
    return rows
