"""Transfer benchmark: what ``to_device`` costs on top of the copies it has to make.

``looptoolkit transfer`` (or ``python benchmarks/transfer.py``) times two
workloads from BENCHMARKS.md, variants interleaved in one process, medians:

- ``nested``: a dict of lists of namedtuples with ~1000 small leaves. The
  traversal of ``to_device(tree, dev)`` against bare ``optree.tree_map(move, tree)``,
  ``torch.utils._pytree.tree_map``, a hand-written recursive ``move_to`` and a
  ``TensorDict``'s ``.to(dev)``, where every "move" is the same cheap per-leaf op on
  the host (torch leaves to ``torch.device("cpu")``: ``t.to(dev)`` returns ``t``; NumPy
  leaves to torch: ``torch.from_numpy``). Targets: within 1.2x of ``optree.tree_map``,
  faster than ``move_to``. On CPU it also weighs packing (one ``cat`` per dtype)
  against 1000 per-leaf copies; with CUDA, packed against per-leaf transfer.
- ``images``: ``{"image": uint8 (256, 3, 64, 64), "label": int64 (256,)}``. On CPU
  (rows marked *CPU-only*): the host cast uint8 -> float16 that cast-then-copy pays,
  and host copies of 3 MiB (uint8) vs 6 MiB (float16), the bytes each order moves.
  With CUDA: pageable vs pinned transfer, copy-then-cast vs cast-then-copy, and one
  large pinned copy as the bandwidth reference, timed with CUDA events.

Results go to ``--out`` as ``transfer-<device>.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from looptoolkit.bench.timing import Timing, interleave, machine_info, write_results

__all__ = [
    "Sample",
    "check_same",
    "device_slug",
    "images_batch",
    "markdown",
    "move_to",
    "nested_tree",
    "parse_args",
    "plot",
    "run",
]

MIB = 1024 * 1024


class Sample(NamedTuple):
    """One record of the nested workload: four small leaves of four dtypes."""

    x: Any  # float32 (16,)
    y: Any  # int64, 0-d
    mask: Any  # bool (16,)
    score: Any  # float16 (4,)


def nested_tree(
    make: Callable[[np.ndarray], Any] = lambda a: a, groups: int = 10, items: int = 25
) -> dict[str, list[Sample]]:
    """The ``nested`` workload: ``groups`` keys of ``items`` samples, 4 leaves each.

    ``make`` turns each NumPy leaf into the framework's array (identity: NumPy).
    """
    rng = np.random.default_rng(0)
    tree: dict[str, list[Sample]] = {}
    for g in range(groups):
        tree[f"group{g}"] = [
            Sample(
                make(rng.standard_normal(16, dtype=np.float32)),
                make(np.array(g * items + i, dtype=np.int64)),
                make(rng.random(16) < 0.5),
                make(rng.standard_normal(4).astype(np.float16)),
            )
            for i in range(items)
        ]
    return tree


def _nested() -> Any:
    # Typed as Any: optree's stubs do not take a dict of lists of namedtuples as a PyTree.
    return nested_tree()


def images_batch(batch: int = 256) -> dict[str, np.ndarray]:
    """The ``images`` workload's batch: uint8 (batch, 3, 64, 64) images and int64 labels."""
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 256, size=(batch, 3, 64, 64), dtype=np.uint8),
        "label": np.arange(batch, dtype=np.int64),
    }


# -- hand-written and library traversals to compare with ------------------------------------


def move_to(x: Any, move: Callable[[Any], Any], array_type: type) -> Any:
    """The recursive ``move_to`` users write by hand (dict, namedtuple, list, tuple)."""
    if isinstance(x, array_type):
        return move(x)
    if isinstance(x, dict):
        return type(x)((k, move_to(v, move, array_type)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(move_to(v, move, array_type) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(move_to(v, move, array_type) for v in x)
    return x


def _as_dicts(tree: Any) -> Any:
    """Lists and namedtuples as dicts: what ``TensorDict.from_dict`` can hold as tensors.

    ``TensorDict.from_dict`` keeps a list of namedtuples as a ``NonTensorStack`` whose
    leaves ``.to`` never moves, so the TensorDict rows time this equivalent tree.
    """
    if isinstance(tree, dict):
        return {k: _as_dicts(v) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return {k: _as_dicts(v) for k, v in zip(tree._fields, tree, strict=True)}
    if isinstance(tree, list):
        return {str(i): _as_dicts(v) for i, v in enumerate(tree)}
    return tree


# -- checking outputs before timing them -------------------------------------------------------


def _leaves(tree: Any) -> list[Any]:
    import optree

    from looptoolkit import tree as _tree

    if type(tree).__module__.startswith("tensordict"):
        return [tree.get(k) for k in tree.keys(include_nested=True, leaves_only=True)]
    return optree.tree_leaves(tree, none_is_leaf=True, namespace=_tree.NAMESPACE)


def check_same(name: str, got: Any, want: Any, *, kind: Any) -> None:
    """Raise when ``got`` does not hold the same leaves (type ``kind``, values) as ``want``."""
    import torch

    a, b = _leaves(got), _leaves(want)
    if len(a) != len(b):
        raise AssertionError(f"{name}: {len(a)} leaves, expected {len(b)}.")
    # Sorted by content: a TensorDict lists its leaves in its own key order.
    got_values = sorted(a, key=_content_key)
    want_values = sorted(b, key=_content_key)
    for x, y in zip(got_values, want_values, strict=True):
        if type(x) is not kind:
            raise AssertionError(f"{name}: a leaf is a {type(x).__name__}, not {kind.__name__}.")
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x.cpu(), y.cpu()):
            raise AssertionError(f"{name}: leaf values differ.")


def _content_key(x: Any) -> tuple[str, int, float]:
    return str(x.dtype), x.numel(), float(x.double().sum().item())


def _check_structure(name: str, got: Any, want: Any) -> None:
    import optree

    from looptoolkit import tree as _tree

    spec_got = optree.tree_structure(got, none_is_leaf=True, namespace=_tree.NAMESPACE)
    spec_want = optree.tree_structure(want, none_is_leaf=True, namespace=_tree.NAMESPACE)
    if spec_got != spec_want:
        raise AssertionError(f"{name}: structure {spec_got} is not {spec_want}.")


# -- timing --------------------------------------------------------------------------------------


def _timed(
    variants: Sequence[tuple[str, Callable[[], Any]]],
    *,
    rounds: int,
    repeat: int,
    sync: Callable[[], None] | None = None,
    description: str,
) -> list[Timing]:
    """``interleave`` with ``repeat`` calls per round, reported per call; GC off meanwhile."""

    def repeated(fn: Callable[[], Any]) -> Callable[[], None]:
        def call() -> None:
            for _ in range(repeat):
                fn()

        return call

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()  # as timeit does: a collection in one variant's round is noise
    try:
        timings = interleave(
            [(name, repeated(fn)) for name, fn in variants],
            rounds=rounds,
            warmup=2,
            sync=sync,
            description=description,
        )
    finally:
        if enabled:
            gc.enable()
    for t in timings:
        t.rounds = [r / repeat for r in t.rounds]
        t.extra["repeat"] = repeat
    return timings


def _timed_cuda(
    variants: Sequence[tuple[str, Callable[[], Any]]], *, rounds: int, description: str
) -> list[Timing]:
    """Interleaved rounds timed with CUDA events recorded around each call."""
    import torch

    timings = [Timing(name) for name, _ in variants]
    for _ in range(2):  # warm-up: allocator, pinned-memory cache, kernels
        for _, fn in variants:
            fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        for timing, (_, fn) in zip(timings, variants, strict=True):
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            timing.rounds.append(start.elapsed_time(end) / 1e3)
    for t in timings:
        t.extra["clock"] = "cuda events"
    return timings


def _row(t: Timing, **extra: Any) -> dict[str, Any]:
    out = t.summary()
    out.update(extra)
    return out


# -- sections ----------------------------------------------------------------------------------


def nested_traversal(rounds: int, repeat: int) -> dict[str, Any]:
    """Traversal cost on the host: torch leaves to torch cpu, NumPy leaves to torch."""
    import optree
    import torch
    from tensordict import TensorDict
    from torch.utils import _pytree as torch_pytree

    from looptoolkit import to_device

    dev = torch.device("cpu")
    host = _nested()
    tt = optree.tree_map(torch.from_numpy, host)

    def move(t: torch.Tensor) -> torch.Tensor:
        return t.to(dev)

    td = TensorDict.from_dict(_as_dicts(tt))
    plain = _as_dicts(tt)
    variants: list[tuple[str, Callable[[], Any]]] = [
        ("to_device(tree, dev)", lambda: to_device(tt, dev)),
        ("optree.tree_map(move, tree)", lambda: optree.tree_map(move, tt)),
        ("torch.utils._pytree.tree_map(move, tree)", lambda: torch_pytree.tree_map(move, tt)),
        ("recursive move_to(tree)", lambda: move_to(tt, move, torch.Tensor)),
        ("TensorDict (built once).to(dev)", lambda: td.to(dev)),
        ("TensorDict.from_dict(dicts).to(dev)", lambda: TensorDict.from_dict(plain).to(dev)),
    ]
    for name, fn in variants[:4]:
        out = fn()
        _check_structure(name, out, tt)
        check_same(name, out, tt, kind=torch.Tensor)
    for name, fn in variants[4:]:
        check_same(name, fn(), tt, kind=torch.Tensor)
    torch_rows = _timed(variants, rounds=rounds, repeat=repeat, description="nested, torch")

    np_variants: list[tuple[str, Callable[[], Any]]] = [
        ("to_device(tree, dev)", lambda: to_device(host, dev)),
        ("optree.tree_map(torch.from_numpy, tree)",
         lambda: optree.tree_map(torch.from_numpy, host)),
        ("torch.utils._pytree.tree_map(torch.from_numpy, tree)",
         lambda: torch_pytree.tree_map(torch.from_numpy, host)),
        ("recursive move_to(tree)", lambda: move_to(host, torch.from_numpy, np.ndarray)),
    ]  # fmt: skip
    for name, fn in np_variants:
        out = fn()
        _check_structure(name, out, tt)
        check_same(name, out, tt, kind=torch.Tensor)
    numpy_rows = _timed(np_variants, rounds=rounds, repeat=repeat, description="nested, numpy")
    n_leaves = len(_leaves(tt))
    return {
        "leaves": n_leaves,
        "torch_to_cpu": [_row(t) for t in torch_rows],
        "numpy_to_torch_cpu": [_row(t) for t in numpy_rows],
        "ratios": {
            "torch_to_cpu": _ratios(torch_rows),
            "numpy_to_torch_cpu": _ratios(numpy_rows),
        },
    }


def _ratios(rows: list[Timing]) -> dict[str, float]:
    ours = rows[0].median
    return {
        "to_device / optree.tree_map": ours / rows[1].median,
        "to_device / torch pytree": ours / rows[2].median,
        "to_device / move_to": ours / rows[3].median,
    }


def packing_cpu(rounds: int, repeat: int) -> dict[str, Any]:
    """CPU-only: packing ~1000 small leaves (one cat per dtype) against per-leaf copies."""
    import optree
    import torch

    from looptoolkit import to_device
    from looptoolkit.adapters.torch import pack_copy

    dev = torch.device("cpu")
    tt = optree.tree_map(torch.from_numpy, _nested())
    leaves = optree.tree_leaves(tt)
    variants: list[tuple[str, Callable[[], Any]]] = [
        ("per-leaf t.clone() (1000 copies)", lambda: [t.clone() for t in leaves]),
        ("pack_copy(leaves, cpu) (one cat per dtype)", lambda: pack_copy(leaves, dev)),
        ("to_device(tree, cpu, pack=True)", lambda: to_device(tt, dev, pack=True)),
    ]
    for name, fn in variants:
        out = fn()
        got = out if isinstance(out, list) else optree.tree_leaves(out)
        if not all(torch.equal(a, b) for a, b in zip(got, leaves, strict=True)):
            raise AssertionError(f"{name}: values differ.")
    rows = _timed(variants, rounds=rounds, repeat=repeat, description="packing, cpu")
    return {
        "cpu_only": True,
        "rows": [_row(t) for t in rows],
        "ratios": {"packed / per-leaf clone": rows[1].median / rows[0].median},
    }


def images_cpu(rounds: int, repeat: int) -> dict[str, Any]:
    """CPU-only: the host cast and the bytes each order of cast and copy moves."""
    import torch

    from looptoolkit import to_device

    batch = images_batch()
    image = torch.from_numpy(batch["image"])
    image16 = image.to(torch.float16)
    # Preallocated outputs: the rows time the work, not the page faults of fresh buffers.
    u8, f16, staged16 = torch.empty_like(image), torch.empty_like(image16), image16.clone()

    def cast_then_copy() -> None:
        staged16.copy_(image)  # cast on the host
        f16.copy_(staged16)  # then 6 MiB to copy

    def copy_then_cast() -> None:
        u8.copy_(image)  # 3 MiB to copy
        f16.copy_(u8)  # then cast (on the device, with one)

    variants: list[tuple[str, Callable[[], Any]]] = [
        ("host cast uint8 -> float16", lambda: f16.copy_(image)),
        ("host copy of the uint8 batch (3 MiB)", lambda: u8.copy_(image)),
        ("host copy of the float16 batch (6 MiB)", lambda: f16.copy_(image16)),
        ("cast-then-copy on the host (cast, copy 6 MiB)", cast_then_copy),
        ("copy-then-cast on the host (copy 3 MiB, cast)", copy_then_cast),
        ("to_device(batch, torch cpu, dtype={uint8: float16})",
         lambda: to_device(batch, torch.device("cpu"), dtype={np.uint8: np.float16})),
    ]  # fmt: skip
    out = variants[-1][1]()
    if out["image"].dtype != torch.float16 or not torch.equal(out["image"], image16):
        raise AssertionError("to_device with a dtype mapping gave wrong values.")
    cast_then_copy()
    if not torch.equal(f16, image16):
        raise AssertionError("cast-then-copy gave wrong values.")
    copy_then_cast()
    if not torch.equal(f16, image16):
        raise AssertionError("copy-then-cast gave wrong values.")
    rows = _timed(variants, rounds=rounds, repeat=repeat, description="images, cpu")
    return {
        "cpu_only": True,
        "bytes": {"uint8": image.nbytes, "float16": image16.nbytes},
        "rows": [_row(t) for t in rows],
        "ratios": {
            "copy 6 MiB / copy 3 MiB": rows[2].median / rows[1].median,
            "cast-then-copy / copy-then-cast (both on the host)": rows[3].median / rows[4].median,
        },
    }


def cuda_sections(rounds: int, ref_mib: int) -> dict[str, Any]:
    """With CUDA: real transfers, timed with CUDA events, and the bandwidth reference."""
    import optree
    import torch

    from looptoolkit import to_device

    cuda = torch.device("cuda", torch.cuda.current_device())
    batch = images_batch()
    pageable = {k: torch.from_numpy(v) for k, v in batch.items()}
    pinned = {k: v.pin_memory() for k, v in pageable.items()}
    image_bytes = pageable["image"].nbytes
    batch_bytes = image_bytes + pageable["label"].nbytes
    reference = torch.empty(ref_mib * MIB, dtype=torch.uint8, pin_memory=True)
    expected16 = pageable["image"].to(torch.float16)

    images: list[tuple[str, Callable[[], Any]]] = [
        (f"reference: one pinned {ref_mib} MiB .to(cuda, non_blocking=True)",
         lambda: reference.to(cuda, non_blocking=True)),
        ("pageable uint8 image .to(cuda)", lambda: pageable["image"].to(cuda)),
        ("pinned uint8 image .to(cuda, non_blocking=True)",
         lambda: pinned["image"].to(cuda, non_blocking=True)),
        ("to_device(pinned batch, 'cuda')", lambda: to_device(pinned, "cuda")),
        ("to_device(pageable batch, 'cuda')", lambda: to_device(pageable, "cuda")),
        ("cast-then-copy: image.half() on host, then .to(cuda)",
         lambda: pinned["image"].to(torch.float16).to(cuda)),
        ("copy-then-cast: pinned uint8 .to(cuda), .half() on device",
         lambda: pinned["image"].to(cuda, non_blocking=True).to(torch.float16)),
        ("to_device(pinned batch, 'cuda', dtype={uint8: float16})",
         lambda: to_device(pinned, "cuda", dtype={np.uint8: np.float16})),
    ]  # fmt: skip
    out = images[7][1]()
    torch.cuda.synchronize()
    if not torch.equal(out["image"].cpu(), expected16):
        raise AssertionError("to_device to cuda with a dtype mapping gave wrong values.")
    if not torch.equal(images[3][1]()["image"].cpu(), pageable["image"]):
        raise AssertionError("to_device to cuda gave wrong values.")
    image_rows = _timed_cuda(images, rounds=rounds, description="images, cuda")
    sizes = [ref_mib * MIB, image_bytes, image_bytes, batch_bytes, batch_bytes,
             image_bytes, image_bytes, batch_bytes]  # fmt: skip
    ref_bw = sizes[0] / image_rows[0].median
    image_out = [
        _row(t, bytes=n, gb_per_s=n / t.median / 1e9, of_reference=n / t.median / ref_bw)
        for t, n in zip(image_rows, sizes, strict=True)
    ]

    tt = optree.tree_map(torch.from_numpy, _nested())
    want = optree.tree_leaves(tt)
    nested: list[tuple[str, Callable[[], Any]]] = [
        ("per-leaf: to_device(tree, 'cuda', pack=False)",
         lambda: to_device(tt, "cuda", pack=False)),
        ("packed: to_device(tree, 'cuda')", lambda: to_device(tt, "cuda")),
        ("optree.tree_map(lambda t: t.to(cuda), tree)",
         lambda: optree.tree_map(lambda t: t.to(cuda), tt)),
    ]  # fmt: skip
    for name, fn in nested:
        got = optree.tree_leaves(fn())
        torch.cuda.synchronize()
        if not all(torch.equal(a.cpu(), b) for a, b in zip(got, want, strict=True)):
            raise AssertionError(f"{name}: values differ.")
    nested_rows = _timed_cuda(nested, rounds=rounds, description="nested, cuda")
    t = {r.name: r.median for r in image_rows}
    return {
        "device": torch.cuda.get_device_name(cuda),
        "images": image_out,
        "nested": [_row(r) for r in nested_rows],
        "ratios": {
            "to_device(pinned batch) bandwidth / reference": image_out[3]["of_reference"],
            "pinned image copy bandwidth / reference": image_out[2]["of_reference"],
            "cast-then-copy / copy-then-cast (to_device)": t[images[5][0]] / t[images[7][0]],
            "per-leaf / packed (nested)": nested_rows[0].median / nested_rows[1].median,
        },
    }


# -- report ------------------------------------------------------------------------------------

TARGETS = {
    "to_device / optree.tree_map": ("<=", 1.2),
    "to_device / move_to": ("<", 1.0),
    "to_device(pinned batch) bandwidth / reference": (">=", 0.85),
    "cast-then-copy / copy-then-cast (to_device)": (">=", 1.8),
    "per-leaf / packed (nested)": (">=", 5.0),
}


def _meets(name: str, value: float) -> str:
    target = TARGETS.get(name)
    if target is None:
        return ""
    op, bound = target
    ok = {"<=": value <= bound, "<": value < bound, ">=": value >= bound}[op]
    return f"{op} {bound:g}: {'met' if ok else 'NOT met'}"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _table(rows: list[dict[str, Any]], baseline: float | None, extra: str = "") -> list[str]:
    head = "| variant | median us | min us | max us |" + (" vs first |" if baseline else "")
    head += f" {extra} |" if extra else ""
    lines = [head, "|" + "---|" + "---:|" * (head.count("|") - 2)]
    for r in rows:
        line = f"| {r['name']} | {_us(r['median_s'])} | {_us(r['min_s'])} | {_us(r['max_s'])} |"
        if baseline:
            line += f" {r['median_s'] / baseline:.2f} |"
        if extra == "GB/s (of reference)":
            line += f" {r['gb_per_s']:.2f} ({r['of_reference']:.0%}) |"
        lines.append(line)
    return lines


def markdown(payload: dict[str, Any]) -> str:
    """The results as Markdown tables, with the command and the machine."""
    m = payload["machine"]
    v = ", ".join(f"{k} {val}" for k, val in m["versions"].items())
    lines = [
        f"# Transfer benchmark ({payload['device']})",
        "",
        f"Command: `{payload['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores" + (f", {m['gpu']}" if "gpu" in m else ""),
        f"({m['date']}); {v}.  ",
        f"Medians over {payload['args']['rounds']} interleaved rounds; host rows average "
        f"{payload['args']['repeat']} calls per round.",
        "",
    ]
    nested = payload.get("nested")
    if nested:
        lines += [
            f"## nested: traversal of {nested['leaves']} small leaves (host)",
            "",
            "Each move is the same cheap per-leaf op: torch leaves to `torch.device('cpu')` "
            "(`t.to(dev)` returns `t`).",
            "",
            *_table(nested["torch_to_cpu"], nested["torch_to_cpu"][0]["median_s"]),
            "",
            "The TensorDict rows hold the same leaves as dicts of dicts: `TensorDict.from_dict` "
            "keeps a list of namedtuples as a `NonTensorStack`, whose leaves `.to` does not "
            "move. *built once* times `.to` alone.",
            "",
            "NumPy leaves to `torch.device('cpu')` (`torch.from_numpy` per leaf):",
            "",
            *_table(nested["numpy_to_torch_cpu"], nested["numpy_to_torch_cpu"][0]["median_s"]),
            "",
        ]
    for key, title in (
        ("packing_cpu", "nested: packing vs per-leaf copies (CPU-only)"),
        ("images_cpu", "images: cast and copy sizes on the host (CPU-only)"),
    ):
        section = payload.get(key)
        if section:
            lines += [f"## {title}", "", *_table(section["rows"], section["rows"][0]["median_s"])]
            lines.append("")
    if payload.get("images_cpu"):
        lines += [
            "CPU-only rows: without a device both the cast and the copy run on the host, so "
            "the two orders differ only in the bytes copied (3 MiB as uint8, 6 MiB as "
            "float16); with a GPU the copy-then-cast order also moves the cast to the device. "
            "Pageable vs pinned transfer needs CUDA.",
            "",
        ]
    cuda = payload.get("cuda")
    if cuda:
        lines += [
            f"## CUDA ({cuda['device']}), timed with CUDA events",
            "",
            *_table(cuda["images"], None, "GB/s (of reference)"),
            "",
            *_table(cuda["nested"], cuda["nested"][0]["median_s"]),
            "",
        ]
    else:
        lines += ["No CUDA device: GPU rows (pinned, packed and cast-on-device transfers, "
                  "bandwidth reference) not measured.", ""]  # fmt: skip
    lines += ["## Ratios", "", "| ratio | value | target |", "|---|---:|---|"]
    for name, value in payload["ratios"].items():
        lines.append(f"| {name} | {value:.2f} | {_meets(name.split(': ')[-1], value)} |")
    return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], path: Path) -> Path:
    """A bar chart of the medians, one panel per section (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, list[dict[str, Any]]]] = []
    nested = payload.get("nested")
    if nested:
        panels.append(("nested: torch leaves -> torch cpu", nested["torch_to_cpu"]))
        panels.append(("nested: NumPy leaves -> torch cpu", nested["numpy_to_torch_cpu"]))
    for key, title in (("packing_cpu", "packing (CPU-only)"), ("images_cpu", "images (CPU-only)")):
        if payload.get(key):
            panels.append((title, payload[key]["rows"]))
    if payload.get("cuda"):
        panels.append(("images, CUDA", payload["cuda"]["images"]))
        panels.append(("nested, CUDA", payload["cuda"]["nested"]))
    height = sum(1.0 + 0.4 * len(rows) for _, rows in panels)
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(10, max(3.0, height)),
        gridspec_kw={"height_ratios": [len(rows) + 1 for _, rows in panels]},
        squeeze=False,
    )
    for ax, (title, rows) in zip(axes[:, 0], panels, strict=True):
        names = [r["name"] for r in rows][::-1]
        med = [r["median_s"] * 1e6 for r in rows][::-1]
        # Whiskers span the middle half of the rounds: on a shared machine the
        # extremes are other people's work (the tables keep min and max).
        quartiles = [np.percentile(r["rounds_s"], [25, 75]) * 1e6 for r in rows][::-1]
        lo = [max(0.0, m - q[0]) for m, q in zip(med, quartiles, strict=True)]
        hi = [max(0.0, q[1] - m) for m, q in zip(med, quartiles, strict=True)]
        colors = ["tab:orange" if "to_device" in n else "tab:blue" for n in names]
        ax.barh(names, med, xerr=[lo, hi], color=colors, capsize=2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("microseconds per call (median, 25th-75th percentile)")
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"looptoolkit transfer ({payload['device']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Flags of ``looptoolkit transfer``."""
    parser = argparse.ArgumentParser(
        prog="looptoolkit transfer",
        description="Time to_device on the nested and images workloads (BENCHMARKS.md).",
    )
    parser.add_argument("--rounds", type=int, default=50, help="interleaved rounds (default 50)")
    parser.add_argument(
        "--repeat", type=int, default=20, help="calls per round for the host rows (default 20)"
    )
    parser.add_argument(
        "--nested",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the nested traversal (default on)",
    )
    parser.add_argument(
        "--images",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the images workload (default on)",
    )
    parser.add_argument(
        "--cuda",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time real transfers on CUDA (default: when torch sees CUDA)",
    )
    parser.add_argument(
        "--ref-mib",
        type=int,
        default=64,
        help="size of the pinned reference copy in MiB (default 64)",
    )
    parser.add_argument(
        "--out", default="benchmarks/results", help="directory for transfer-<device>.{json,md,png}"
    )
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the results files (default on)",
    )
    parser.add_argument(
        "--plot",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the PNG chart (needs matplotlib; default on)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeat < 1 or args.ref_mib < 1:
        parser.error("`--rounds`, `--repeat` and `--ref-mib` must be >= 1.")
    return args


def device_slug(name: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def run(argv: list[str] | None = None) -> int:
    """Run the transfer benchmark; print and write the results. Returns the exit status."""
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed; install it with `pip install 'looptoolkit[torch]'`.",
              file=sys.stderr)  # fmt: skip
        return 1
    use_cuda = torch.cuda.is_available() if args.cuda is None else args.cuda
    if use_cuda and not torch.cuda.is_available():
        print("`--cuda` given, but torch sees no CUDA device.", file=sys.stderr)
        return 1
    device = device_slug(torch.cuda.get_device_name()) if use_cuda else "cpu"
    payload: dict[str, Any] = {
        "device": device,
        "command": " ".join(["looptoolkit transfer", *(argv or [])]),
        "args": vars(args),
        "ratios": {},
    }
    if args.nested:
        payload["nested"] = nested_traversal(args.rounds, args.repeat)
        for part, ratios in payload["nested"]["ratios"].items():
            payload["ratios"].update({f"{part}: {k}": v for k, v in ratios.items()})
        payload["packing_cpu"] = packing_cpu(args.rounds, max(1, args.repeat // 4))
        payload["ratios"].update(
            {f"cpu-only: {k}": v for k, v in payload["packing_cpu"]["ratios"].items()}
        )
    if args.images:
        payload["images_cpu"] = images_cpu(args.rounds, max(1, args.repeat // 4))
        payload["ratios"].update(
            {f"cpu-only: {k}": v for k, v in payload["images_cpu"]["ratios"].items()}
        )
    if use_cuda:
        payload["cuda"] = cuda_sections(args.rounds, args.ref_mib)
        payload["ratios"].update({f"cuda: {k}": v for k, v in payload["cuda"]["ratios"].items()})
    payload["machine"] = machine_info()
    text = markdown(payload)
    print(text)
    if args.write:
        stem = f"transfer-{device}"
        paths = write_results(args.out, stem, payload, text)
        if args.plot:
            try:
                paths.append(plot(payload, Path(args.out) / f"{stem}.png"))
            except ImportError:
                print("matplotlib is not installed: no PNG written.", file=sys.stderr)
        for p in paths:
            print(f"wrote {p}")
    return 0


# Kept for `python -m looptoolkit.bench.transfer`.
if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
