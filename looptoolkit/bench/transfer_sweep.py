"""The batch-size sweep of ``looptoolkit transfer``: a uint8, float16 or float32 batch moved.

For each batch size (32 to 1024 images of 3x64x64) and each dtype, the time
of ``to_device({"image": batch}, dev)``, checked first (same values, the dtype
kept, a copy on the target), then timed interleaved. With CUDA, ``dev`` is
the GPU (torch; a real host-to-device copy of 1, 2 or 4 bytes per pixel). On
the CPU there is no bus to cross: ``dev`` is JAX's CPU device, whose
``device_put`` copies the batch into a buffer of its own (it aliases a
64-byte-aligned one instead, so every batch is placed 16 bytes off that
alignment, as NumPy's own allocations of these sizes are), so the sweep
measures the host side of a move (the bytes copied), not a transfer; the
check makes sure each move copied.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from looptoolkit.bench.tables import Table
from looptoolkit.bench.timing import HostClock, interleave
from looptoolkit.bench.workloads import host_array

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["DTYPES", "ROW_KEYS", "SIZES", "plot_sweep", "sweep", "sweep_table"]

SIZES = (32, 64, 128, 256, 512, 1024)
"""Batch sizes of the default sweep (images of 3x64x64)."""
DTYPES = ("uint8", "float16", "float32")
ROW_KEYS = (
    "dtype",
    "batch_size",
    "bytes",
    "median_s",
    "min_s",
    "max_s",
    "ms_per_batch",
    "mb_per_s",
)
"""The keys of every sweep row, in order."""
IMAGE_SHAPE = (3, 64, 64)


def _target(cuda: bool) -> tuple[Any, Callable[[], None] | None, str]:
    """The device, its synchronisation, and what the sweep measures there."""
    if cuda:
        import torch

        return torch.device("cuda"), torch.cuda.synchronize, "host-to-device copies (torch)"
    import jax

    return jax.devices("cpu")[0], None, "CPU only: the host side, a copy into JAX's CPU buffer"


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` that starts 16 bytes past a 64-byte boundary."""
    raw = np.empty(a.nbytes + 128, dtype=np.uint8)
    start = (16 - raw.ctypes.data) % 64
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _ready(x: Any) -> Any:
    block = getattr(x, "block_until_ready", None)
    return block() if block is not None else x


def sweep(
    rounds: int,
    *,
    sizes: tuple[int, ...] = SIZES,
    cuda: bool = False,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Time ``to_device`` of an images batch per dtype and batch size; one row per pair.

    Raises:
        AssertionError: a move changed the values or the dtype.
    """
    from looptoolkit import to_device

    dev, sync, what = _target(cuda)
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (max(sizes), *IMAGE_SHAPE), dtype=np.uint8)
    rows: list[dict[str, Any]] = []
    for size in sizes:
        batches = {dtype: {"image": _unaligned(pool[:size].astype(dtype))} for dtype in DTYPES}
        calls = []
        for dtype, batch in batches.items():
            moved = to_device(batch, dev)["image"]
            if sync is not None:
                sync()
            got = host_array(moved)
            if got.dtype != np.dtype(dtype) or not np.array_equal(got, batch["image"]):
                raise AssertionError(f"to_device of a {dtype} batch of {size} changed it.")
            if not cuda and np.shares_memory(got, batch["image"]):
                raise AssertionError(f"to_device of a {dtype} batch did not copy it.")
            calls.append((dtype, lambda b=batch: _ready(to_device(b, dev)["image"])))
        timings = interleave(
            calls,
            rounds=rounds,
            warmup=2,
            clock=HostClock(sync),
            collect=False,
            progress=progress,
            label=f"sweep, batch of {size}",
        )
        for t in timings:
            nbytes = int(batches[t.name]["image"].nbytes)
            rows.append(
                {
                    "dtype": t.name,
                    "batch_size": size,
                    "bytes": nbytes,
                    "median_s": t.median,
                    "min_s": t.min,
                    "max_s": t.max,
                    "ms_per_batch": t.median * 1e3,
                    "mb_per_s": nbytes / t.median / 1e6,
                }
            )
    return {
        "device": str(dev),
        "measures": what,
        "cpu_only": not cuda,
        "rounds": rounds,
        "rows": rows,
    }


def sweep_table(section: dict[str, Any]) -> Table:
    """Milliseconds per batch and MB/s by batch size, one column per dtype."""
    by = {(r["dtype"], r["batch_size"]): r for r in section["rows"]}
    sizes = sorted({r["batch_size"] for r in section["rows"]})
    header = ["batch", *[f"{d} ms" for d in DTYPES], *[f"{d} MB/s" for d in DTYPES]]
    cells = [
        [
            str(s),
            *[f"{by[d, s]['ms_per_batch']:.3f}" for d in DTYPES],
            *[f"{by[d, s]['mb_per_s']:,.0f}" for d in DTYPES],
        ]
        for s in sizes
    ]
    title = f"images batch (3x64x64) moved with to_device by dtype ({section['measures']})"
    notes = [
        f"median ms per batch over {section['rounds']} interleaved rounds; MB/s: the "
        f"batch's bytes over that time; device {section['device']}."
    ]
    return Table(title, header, cells, notes=notes)


def plot_sweep(section: dict[str, Any], path: Path) -> Path:
    """Lines of ms per batch and MB/s against batch size, one line per dtype.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from looptoolkit.bench.charts import BACKEND_COLORS

    colors = dict(zip(DTYPES, BACKEND_COLORS.values(), strict=False))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for dtype in DTYPES:
        rows = sorted(
            (r for r in section["rows"] if r["dtype"] == dtype), key=lambda r: r["batch_size"]
        )
        sizes = [r["batch_size"] for r in rows]
        left.plot(sizes, [r["ms_per_batch"] for r in rows], "o-", color=colors[dtype], label=dtype)
        right.plot(sizes, [r["mb_per_s"] for r in rows], "o-", color=colors[dtype], label=dtype)
    for ax, label in (
        (left, "ms per batch (lower is better)"),
        (right, "MB/s of the batch's bytes (higher is better)"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks(SIZES, [str(s) for s in SIZES])
        ax.set_xlabel("batch size (images of 3x64x64)", fontsize=9)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    left.set_yscale("log")
    fig.suptitle(
        f"to_device of an images batch by dtype and batch size; {section['measures']}", fontsize=10
    )
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
