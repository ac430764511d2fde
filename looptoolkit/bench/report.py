"""Tables, charts and targets of a ``looptoolkit compare`` run: rich, Markdown and PNG.

Reads the JSON-ready payload that :mod:`looptoolkit.bench.compare` builds, so
that the committed results can be re-rendered without re-running anything, and
sets the run's ratios against the targets of BENCHMARKS.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from looptoolkit.bench.variants import BASELINE

__all__ = ["evaluate_targets", "markdown", "plot", "print_tables", "variant_rows"]

BACKEND_COLORS = {"numpy": "#4c72b0", "torch": "#dd8452", "jax": "#55a868", "tf": "#c44e52"}


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def variant_rows(result: dict[str, Any]) -> list[list[str]]:
    """One row of text cells per variant of a workload result.

    Cells: variant, backend, ms/epoch median [min, max], batches/s, ratio to
    NumPy manual, check.
    """
    rows = []
    for row in result["variants"]:
        name = row["name"]
        if "skipped" in row:
            rows.append([name, row["backend"], "skipped", "", "", row["skipped"]])
            continue
        check = row.get("check", {})
        if not check.get("ok", False):
            rows.append([name, row["backend"], "not timed", "", "",
                         f"FAILED: {check.get('detail', '')}"])  # fmt: skip
            continue
        if "error" in row:
            rows.append([name, row["backend"], "error", "", "", row["error"]])
            continue
        bounded = row.get("bounded_batches")
        mark = f" (scaled from {bounded} batches)" if bounded else ""
        ratio = row.get("vs_baseline")
        how = check["how"].split(":")[0]
        rows.append([
            name,
            row["backend"],
            f"{_ms(row['median_s'])} [{_ms(row['min_s'])}, {_ms(row['max_s'])}]{mark}",
            _rate(row["batches_per_s"]),
            f"{ratio:.2f}" if ratio is not None else "",
            f"ok ({how})",
        ])  # fmt: skip
    return rows


VARIANT_HEADER = ["variant", "backend", "ms/epoch median [min, max]", "batches/s",
                  "vs NumPy manual", "check"]  # fmt: skip
STEP_HEADER = ["variant", "backend", "ms/batch", "step", "data wait", "wait % of total",
               "wait % of step", "added by the loop"]  # fmt: skip
TARGET_HEADER = ["target", "workload", "variant", "measured", "status"]


def step_rows(payload: dict[str, Any]) -> list[list[str]]:
    """Text cells of the step section."""
    rows = []
    for row in payload.get("step", []):
        if "error" in row:
            rows.append([row["name"], row["backend"], "error", "", "", "", "", row["error"]])
            continue
        of_step = row["wait_of_step"]
        rows.append([
            row["name"],
            row["backend"],
            f"{row['total_ms_per_batch']:.3f}",
            f"{row['step_ms_per_batch']:.3f}",
            f"{row['wait_ms_per_batch']:.3f}",
            f"{row['wait_fraction'] * 100:.1f}%",
            f"{of_step * 100:.1f}%" if of_step is not None else "",
            f"{row['added_ms_per_batch']:.3f}",
        ])  # fmt: skip
    return rows


def transfer_rows(transfer: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and text cells of the transfer section."""
    names = list(transfer["ms_per_batch"])
    header = ["batch", "MB (uint8)", *[f"{n} (ms)" for n in names]]
    rows = []
    per_image = transfer["bytes_per_image_uint8"]
    for i, size in enumerate(transfer["batch_sizes"]):
        cells = [str(size), f"{size * per_image / 1e6:.2f}"]
        cells += [f"{transfer['ms_per_batch'][n][i]:.3f}" for n in names]
        rows.append(cells)
    return header, rows


def target_rows(payload: dict[str, Any]) -> list[list[str]]:
    """Text cells of the targets table."""
    rows = []
    for t in payload.get("targets", []):
        cells = [t["target"], str(t.get("workload") or ""), t.get("variant", "")]
        rows.append([*cells, t.get("measured") or "—", t["status"]])
    return rows


def _table(header: list[str], rows: list[list[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _settings_text(payload: dict[str, Any]) -> str:
    s = payload["settings"]
    text = (
        f"{s['rounds']} interleaved rounds of {s['epochs_per_round']} epoch(s) per variant "
        f"after {s['warmup']} warm-up round(s); medians with [min, max]. "
        f"Loops whose epoch took longer than {s['max_epoch_s']:g} s when checked, and the "
        f"2-worker DataLoader always, are timed on a bounded number of batches per round and "
        f"scaled to an epoch (time to the first batch + the steady per-batch time)."
    )
    if s["quick"]:
        text += " **--quick: tiny sizes, not a measurement.**"
    return text


def markdown(payload: dict[str, Any]) -> str:
    """The Markdown report of a run."""
    m = payload["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    gpu = f"; GPU {m['gpu']} (CUDA {m.get('cuda')})" if m.get("gpu") else ""
    out = [
        f"# looptoolkit compare — {payload['device']}\n",
        f"Command: `{m['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores{gpu}; Python {m['python']}; {versions}  ",
        f"Date: {m['date']}; wall time {payload['wall_s']:.0f} s\n",
        _settings_text(payload) + "\n",
    ]
    skipped = payload.get("skipped_backends") or {}
    notes = [f"- backend {name} skipped: {why}" for name, why in skipped.items()]
    if payload.get("accelerator_only"):
        names = ", ".join(f"`{n}`" for n in payload["accelerator_only"])
        notes.append(f"- not run on {payload['device']} (they need an accelerator): {names}")
    if notes:
        out += [*notes, ""]
    for name, result in payload["workloads"].items():
        out.append(f"## {name}: {result['description']}\n")
        out.append(f"{result['batches_per_epoch']} batches of {result['batch_size']} per epoch, "
                   f"{result['bytes'] / 1e6:.0f} MB.\n")  # fmt: skip
        out.append(_table(VARIANT_HEADER, variant_rows(result)))
    step = payload.get("step") or []
    if step:
        s = payload["settings"]
        out.append(f"## With a model step of {s['step_ms']:g} ms\n")
        out.append(
            f"`{s['step_workload']}` workload, {s['step_batches']} batches per round, median "
            "per batch over the rounds (the first batch of each round left out: epoch start-up "
            "is in the table above). *data wait*: time in `next()` until the batch is ready; "
            "*added by the loop*: everything but the step. A prefetching loop overlaps its "
            "work with the step, so its wait falls below its cost without a step.\n"
        )
        out.append(_table(STEP_HEADER, step_rows(payload)))
    transfer = payload.get("transfer")
    if transfer:
        out.append(f"## Transfer of an images batch by batch size ({transfer['note']})\n")
        header, rows = transfer_rows(transfer)
        out.append(_table(header, rows))
    out.append("## Targets (BENCHMARKS.md), ratios from this run\n")
    out.append(_table(TARGET_HEADER, target_rows(payload)))
    for chart in payload.get("charts", []):
        out.append(f"![{chart}]({chart})\n")
    return "\n".join(out)


def print_tables(payload: dict[str, Any]) -> None:
    """Print the tables with rich (plain Markdown without it)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(markdown(payload))
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a log file: no wrapping inside the cells

    def show(title: str, header: list[str], rows: list[list[str]]) -> None:
        table = Table(title=title, title_justify="left")
        for i, column in enumerate(header):
            table.add_column(column, justify="left" if i < 2 or i == len(header) - 1 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)

    for name, result in payload["workloads"].items():
        show(f"{name} ({payload['device']}): {result['description']}", VARIANT_HEADER,
             variant_rows(result))  # fmt: skip
    if payload.get("step"):
        s = payload["settings"]
        show(f"step {s['step_ms']:g} ms, {s['step_workload']}", STEP_HEADER, step_rows(payload))
    if payload.get("transfer"):
        header, rows = transfer_rows(payload["transfer"])
        show(f"transfer ({payload['transfer']['note']})", header, rows)
    show("targets (BENCHMARKS.md)", TARGET_HEADER, target_rows(payload))


def plot(payload: dict[str, Any], out: str | Path, stem: str) -> list[Path]:
    """Write ``<stem>.png`` (batches/s by variant, grouped by backend) and ``<stem>-transfer.png``.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    workloads = payload["workloads"]
    heights = [max(2.0, 0.32 * len(r["variants"]) + 1.0) for r in workloads.values()]
    fig, axes = plt.subplots(
        len(workloads), 1, figsize=(9, sum(heights) + 0.5), squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    for ax, (name, result) in zip(axes[:, 0], workloads.items(), strict=True):
        rows = [r for r in result["variants"] if "batches_per_s" in r]
        labels, values, colors, positions = [], [], [], []
        y = 0.0
        previous = None
        for row in rows:
            if previous is not None and row["backend"] != previous:
                y += 0.6  # a gap between backends
            previous = row["backend"]
            bounded = " *" if row.get("bounded_batches") else ""
            labels.append(row["name"] + bounded)
            values.append(row["batches_per_s"])
            colors.append(BACKEND_COLORS.get(row["backend"], "gray"))
            positions.append(y)
            y += 1.0
        ax.barh(positions, values, color=colors)
        ax.set_yticks(positions, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        base = next((r for r in rows if r["name"] == payload["baseline"]), None)
        if base is not None:
            ax.axvline(base["batches_per_s"], color="black", lw=0.8, ls="--")
        for pos, value in zip(positions, values, strict=True):
            ax.text(value, pos, f" {_rate(value)}", va="center", fontsize=7)
        ax.set_title(f"{name}: batches/s ({payload['device']}, higher is better)", fontsize=10)
        ax.grid(axis="x", which="both", alpha=0.3)
    handles = [Patch(color=c, label=b) for b, c in BACKEND_COLORS.items()]
    axes[0, 0].legend(handles=handles, fontsize=8, loc="lower right")
    fig.text(0.01, 0.003, "dashed: NumPy manual loop; *: timed on a bounded number of batches "
             "per round, scaled to an epoch", fontsize=7)  # fmt: skip
    fig.tight_layout(rect=(0, 0.015, 1, 1))
    path = out / f"{stem}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    transfer = payload.get("transfer")
    if transfer:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        sizes = transfer["batch_sizes"]
        for name, ms in transfer["ms_per_batch"].items():
            ax.plot(sizes, ms, marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size (images of 3 x 64 x 64)")
        ax.set_ylabel("ms per batch")
        ax.set_title(f"images batch to float16 on {payload['device']}: {transfer['note']}",
                     fontsize=10)  # fmt: skip
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{stem}-transfer.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# -- targets (BENCHMARKS.md) ---------------------------------------------------------------------


def _median(entries: dict[str, dict[str, Any]], name: str) -> float | None:
    row = entries.get(name)
    if row is None or "median_s" not in row:
        return None
    return float(row["median_s"])


def evaluate_targets(
    workloads: dict[str, dict[str, Any]],
    step_rows: list[dict[str, Any]],
    transfer: dict[str, Any] | None,
    device: str,
) -> list[dict[str, Any]]:
    """One row per BENCHMARKS.md target this run speaks to: measured, met or not."""
    rows: list[dict[str, Any]] = []
    tab_name = "tabular" if "tabular" in workloads else next(iter(workloads), None)
    by_name: dict[str, dict[str, Any]] = {}
    if tab_name is not None:
        by_name = {row["name"]: row for row in workloads[tab_name]["variants"]}
    base = _median(by_name, BASELINE)

    def ratio_row(target: str, name: str, bound: float, *, below: bool = True) -> None:
        value = _median(by_name, name)
        row: dict[str, Any] = {"target": target, "workload": tab_name, "variant": name}
        if value is None or base is None:
            row.update(measured=None, status="not measured (variant did not run)")
        else:
            ratio = value / base
            ok = ratio <= bound if below else ratio >= bound
            row.update(measured=f"{ratio:.2f}x NumPy manual", value=ratio,
                       status="met" if ok else "not met")  # fmt: skip
        rows.append(row)

    ratio_row("Loader on NumPy data, full shuffle <= 1.05x NumPy manual", "loader-numpy", 1.05)
    ratio_row("Loader on NumPy data, grouped shuffle <= 0.70x NumPy manual",
              "loader-numpy-grouped", 0.70)  # fmt: skip
    ratio_row("Loader on torch data <= 1.10x NumPy manual", "loader-torch", 1.10)
    ratio_row("Loader on JAX data <= 2.0x NumPy manual", "loader-jax", 2.0)
    ratio_row("Loader on tf data <= 2.0x NumPy manual", "loader-tf", 2.0)

    gpu = device != "cpu"
    resident = _median(by_name, "loader-torch-resident")
    getitems = _median(by_name, "dataloader-getitems")
    bare = _median(by_name, "torch-resident-gather")
    rows.append(_gpu_ratio_row(
        "GPU: device-resident Loader >= 10x batches/s of DataLoader + __getitems__",
        tab_name, gpu, getitems, resident, lambda r: r >= 10, "{:.1f}x",
    ))  # fmt: skip
    rows.append(_gpu_ratio_row(
        "GPU: device-resident Loader within 1.5x of the bare on-device gather",
        tab_name, gpu, resident, bare, lambda r: r <= 1.5, "{:.2f}x",
    ))  # fmt: skip

    # On GPU the Loader on torch data prefetches to the device; on CPU the host Loader
    # prefetches only with a device ("cpu"): that is loader-numpy-prefetch.
    prefetcher = "loader-torch" if gpu else "loader-numpy-prefetch"
    step_row = next((r for r in step_rows if r["name"] == prefetcher and "error" not in r), None)
    row: dict[str, Any] = {"target": "GPU: prefetch overlap, data wait per step < 5% of the step",
           "workload": "step section", "variant": prefetcher}  # fmt: skip
    if step_row is None or step_row["wait_of_step"] is None:
        row.update(measured=None, status="not measured (no step section)")
    else:
        share = step_row["wait_of_step"]
        status = "met" if share < 0.05 else "not met"
        if not gpu:
            status = f"GPU target; on CPU: {status}"
        row.update(measured=f"{share * 100:.1f}% of the step", value=share, status=status)
    rows.append(row)

    row = {"target": "GPU: uint8 copied then cast on the device >= 1.8x faster than "
                     "cast-then-copy to float16 (images, batch 256)",
           "workload": "transfer", "variant": "to_device"}  # fmt: skip
    if not gpu:
        row.update(measured=None, status="not measurable on CPU")
    elif transfer is None or 256 not in transfer["batch_sizes"]:
        row.update(measured=None, status="not measured (no transfer section)")
    else:
        i = transfer["batch_sizes"].index(256)
        ms = transfer["ms_per_batch"]
        speedup = ms["cast to float16, then copy"][i] / ms["uint8 copy, cast on the device"][i]
        row.update(measured=f"{speedup:.2f}x", value=speedup,
                   status="met" if speedup >= 1.8 else "not met")  # fmt: skip
    rows.append(row)
    rows.append({"target": "GPU: host-to-device of images >= 85% of one large pinned cudaMemcpy",
                 "workload": "transfer", "variant": "to_device", "measured": None,
                 "status": "not measured here (looptoolkit transfer)" if gpu
                 else "not measurable on CPU"})  # fmt: skip
    return rows


def _gpu_ratio_row(
    target: str,
    workload: str | None,
    gpu: bool,
    numerator: float | None,
    denominator: float | None,
    ok: Callable[[float], bool],
    fmt: str,
) -> dict[str, Any]:
    """A target row for ``loader-torch-resident``: ``numerator / denominator`` against ``ok``."""
    row: dict[str, Any] = {"target": target, "workload": workload,
                           "variant": "loader-torch-resident"}  # fmt: skip
    if not gpu:
        row.update(measured=None, status="not measurable on CPU")
    elif numerator is None or denominator is None:
        row.update(measured=None, status="not measured (variant did not run)")
    else:
        ratio = numerator / denominator
        row.update(measured=fmt.format(ratio), value=ratio,
                   status="met" if ok(ratio) else "not met")  # fmt: skip
    return row
