"""The error tables of docs/to_device.md and docs/loader.md say what the code raises.

Each row whose cause can be brought about here is: the exception's type and
message must match the row (``...`` stands for any text).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader, to_device

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _table(page: str, heading: str) -> dict[str, str]:
    """``cause -> error`` cells of the first table after ``heading`` in ``page``."""
    text = (DOCS / page).read_text()
    section = text[text.index(heading) :]
    rows: dict[str, str] = {}
    for line in section.splitlines()[1:]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if len(cells) == 2:
                rows[cells[0]] = cells[1]
    return rows


def _raised(make: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as info:
        make()
    return f"{type(info.value).__name__}: {info.value}"


def _matches(cell: str, raised: str) -> bool:
    message = cell[1:-1] if cell.startswith("`") and cell.endswith("`") else cell
    pattern = ".*".join(re.escape(part) for part in message.split("..."))
    return re.fullmatch(pattern, raised, re.DOTALL) is not None


class Meta(dict):
    def __init__(self, source: Any) -> None:
        super().__init__(source)


Meta.__module__ = "__main__"


class _Samples:
    """A map-style dataset (``__getitems__`` marks it as one), one sample per index."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return {"x": np.full(2, i)}

    def __getitems__(self, idx: Any) -> Any:
        return [self[i] for i in idx]


class Broken:
    def to(self, device: Any) -> Any:
        raise RuntimeError("no")


def _jax_cpu() -> Any:
    jax = pytest.importorskip("jax")
    if jax.config.jax_enable_x64:
        pytest.skip("jax_enable_x64 is on")
    return jax.devices("cpu")[0]


def _tf_without_gpu() -> str:
    tf = pytest.importorskip("tensorflow")
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("a GPU is present")
    return "/GPU:0"


TO_DEVICE: dict[str, Callable[[], Any]] = {
    "unknown device string": lambda: to_device({"x": np.ones(1)}, "cdua"),
    "`device` of no supported kind": lambda: to_device({"x": np.ones(1)}, 3),
    "`dtype` that is no dtype": lambda: to_device({"x": np.ones(1)}, "cpu", dtype="floatx"),
    "impossible cast": lambda: to_device(
        {"meta": {"names": np.array(["a", "b"])}}, "cpu", dtype={np.dtype("<U1"): np.float32}
    ),
    "a cast JAX would truncate": lambda: to_device(
        {"x": np.ones(2, np.float32)}, _jax_cpu(), dtype="float64"
    ),
    '`"/GPU:0"` without a GPU': lambda: to_device(
        {"im": {"image": np.zeros((2, 3), np.uint8)}}, _tf_without_gpu()
    ),
    "an iterator or a dict view in the batch": lambda: to_device(
        {"rows": (np.ones(2) for _ in range(3))}, "cpu"
    ),
    "unbuildable container whose leaves changed, `strict=True`": lambda: to_device(
        {"meta": Meta({"ids": np.arange(3)})}, "cpu", dtype={"int64": "int32"}, strict=True
    ),
    "an object's own `.to` fails": lambda: to_device({"b": Broken()}, "cpu"),
}

LOADER: dict[str, Callable[[], Any]] = {
    "leaves of different lengths": lambda: Loader({"x": np.ones(10), "y": np.ones(9)}, 2),
    "a leaf that is not an array (`None`, a str)": lambda: Loader(
        {"x": np.ones(3), "s": "text"}, 2
    ),
    "a list of per-sample records": lambda: Loader(
        [{"x": np.full(2, i), "y": i} for i in range(5)], 2
    ),
    "`drop_last=True` and fewer rows in a shard than `batch_size` (every epoch would be empty)": (
        lambda: Loader({"x": np.ones(5)}, 8, drop_last=True)
    ),
    "a list of 1-D arrays of one length as the data itself": lambda: Loader(
        [np.arange(4), np.arange(4) * 2], 2
    ),
    "a dataset object (not a `TensorDataset`)": lambda: Loader(_Samples(), 2),
    "a `DataLoader`-only argument (`num_workers`, `pin_memory`, `collate_fn`, `sampler`, "
    "`persistent_workers`, ...)": lambda: Loader({"x": np.ones(4)}, 2, pin_memory=True),
}


TABLES = [
    ("to_device.md", "## Errors", TO_DEVICE),
    ("loader.md", "Everything is checked at construction", LOADER),
]


@pytest.mark.parametrize(
    ("page", "heading", "cause", "make"),
    [
        pytest.param(page, heading, cause, make, id=f"{page}: {cause}")
        for page, heading, causes in TABLES
        for cause, make in causes.items()
    ],
)
def test_errors_table(page, heading, cause, make):
    rows = _table(page, heading)
    assert cause in rows, f"docs/{page} has no row {cause!r}"
    raised = _raised(make)
    assert _matches(rows[cause], raised), f"{rows[cause]}\nbut the code raises\n{raised}"
