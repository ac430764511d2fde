"""The host sections of ``looptoolkit transfer``, and `measure`, which every section goes through.

Workloads: ``nested`` (1000 small leaves of four dtypes in dicts, lists and namedtuples) and
``images`` (uint8 (256, 3, 64, 64) images, int64 labels). A section declares its `Row`s;
`measure` checks each row's output against its reference, then times the rows interleaved.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from looptoolkit.bench.timing import Clock, CudaEventClock, HostClock, interleave

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["Row", "check_same", "images_cpu", "measure", "nested_traversal", "packing_cpu", "sweep"]

WARMUP = 2
"""Untimed rounds before the timed ones."""
SIZES, DTYPES = (32, 64, 128, 256, 512, 1024), ("uint8", "float16", "float32")
"""The sweep's batch sizes (images of 3x64x64) and dtypes."""
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
Sample = namedtuple("Sample", "x y mask score")
"""A sample of ``nested``: float32 (16,), int64 0-d, bool (16,), float16 (4,)."""


def light_repeat(repeat: int) -> int:
    """Calls per round of the packing and images rows: a quarter of ``--repeat``, at least 1."""
    return max(1, repeat // 4)


def nested() -> Any:
    """The ``nested`` workload: 10 keys of 25 samples, 4 NumPy leaves each (1000 leaves)."""
    rng = np.random.default_rng(0)

    def sample(i: int) -> Sample:
        x, y = rng.standard_normal(16, dtype=np.float32), np.array(i, dtype=np.int64)
        return Sample(x, y, rng.random(16) < 0.5, rng.standard_normal(4).astype(np.float16))

    return {f"group{g}": [sample(g * 25 + i) for i in range(25)] for g in range(10)}


def images_batch(batch: int = 256) -> dict[str, np.ndarray]:
    """The ``images`` workload's batch: uint8 (batch, 3, 64, 64) images and int64 labels."""
    image = np.random.default_rng(0).integers(0, 256, (batch, 3, 64, 64), dtype=np.uint8)
    return {"image": image, "label": np.arange(batch, dtype=np.int64)}


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
    """Lists and namedtuples as dicts: ``TensorDict.from_dict`` would not move namedtuples."""
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        tree = dict(zip(tree._fields, tree, strict=True))
    if isinstance(tree, list):
        tree = {str(i): v for i, v in enumerate(tree)}
    return {k: _as_dicts(v) for k, v in tree.items()} if isinstance(tree, dict) else tree


@dataclass(frozen=True)
class Row:
    """A row of a section: its table name, a one-line label, the call, its own reference."""

    name: str
    label: str
    fn: Callable[[], Any]
    want: Any = None  # None: the section's reference


def check_same(name: str, got: Any, want: Any, kind: type | None = None) -> None:
    """Raise AssertionError unless ``got`` has ``want``'s structure, dtypes and values.

    Leaves of any framework and device are compared on the host; ``kind``: every leaf's type.
    """
    import optree

    from looptoolkit.tree import NAMESPACE

    if type(got).__module__.startswith("tensordict"):
        got, want = got.to_dict(), _as_dicts(want)
    a, spec = optree.tree_flatten(got, none_is_leaf=True, namespace=NAMESPACE)
    b, want_spec = optree.tree_flatten(want, none_is_leaf=True, namespace=NAMESPACE)
    if spec != want_spec:
        raise AssertionError(f"{name}: structure {spec} is not {want_spec}.")
    if kind is not None and any(type(x) is not kind for x in a):
        raise AssertionError(f"{name}: a leaf is not a {kind.__name__}.")
    for x, y in zip(a, b, strict=True):
        x, y = (np.asarray(v.detach().cpu() if hasattr(v, "detach") else v) for v in (x, y))
        if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y):
            raise AssertionError(f"{name}: leaves differ from the reference.")


def measure(
    label: str,
    rows: Sequence[Row],
    want: Any,
    rounds: int,
    progress: Progress | None,
    *,
    repeat: int = 1,
    clock: Clock | None = None,
    warmup: int = WARMUP,
    check: Callable[[str, Any, Any], None] = check_same,
) -> list[dict[str, Any]]:
    """Check each row's output against its reference (``want``), then time the rows interleaved.

    Host rows: ``repeat`` calls per round, the garbage collector off; rows read by a device's
    clock (CUDA events) leave it on. Returns a JSON row per row: ``name``, ``label``,
    ``median_s``, ``min_s``, ``max_s``, ``rounds_s`` (seconds per call).

    Raises:
        AssertionError: a row's output differs from its reference.
    """
    for row in rows:
        check(row.name, row.fn(), want if row.want is None else row.want)
    timings = interleave(
        [(row.name, row.fn) for row in rows],
        rounds=rounds,
        warmup=warmup,
        repeat=repeat,
        clock=clock,
        collect=clock is not None and not isinstance(clock, HostClock),
        progress=progress,
        label=f"transfer: {label}",
    )
    extra = {"clock": "cuda events"} if isinstance(clock, CudaEventClock) else {}
    return [
        {"name": t.name, "median_s": t.median_s, "min_s": t.min_s, "max_s": t.max_s}
        | {"rounds_s": t.rounds_s, **t.extra, **extra, "label": r.label}
        for t, r in zip(timings, rows, strict=True)
    ]


def medians(rows: list[dict[str, Any]]) -> list[float]:
    """The rows' medians, in order."""
    return [r["median_s"] for r in rows]


def nested_traversal(rounds: int, repeat: int, progress: Progress | None = None) -> dict[str, Any]:
    """Traversal cost on the host: torch leaves to torch cpu, NumPy leaves to torch."""
    import optree
    import torch
    from tensordict import TensorDict
    from torch.utils import _pytree

    from looptoolkit import to_device

    dev, host = torch.device("cpu"), nested()
    tt = optree.tree_map(torch.from_numpy, host)
    td, plain = TensorDict.from_dict(_as_dicts(tt)), _as_dicts(tt)

    def rows(x: Any, move: Callable[[Any], Any], what: str, kind: type) -> list[Row]:
        return [
            Row("to_device", "to_device(tree, dev)", lambda: to_device(x, dev)),
            Row(
                "optree.tree_map",
                f"optree.tree_map({what}, tree)",
                lambda: optree.tree_map(move, x),
            ),
            Row(
                "torch pytree tree_map",
                f"torch.utils._pytree.tree_map({what}, tree)",
                lambda: _pytree.tree_map(move, x),
            ),
            Row("move_to (recursive)", "recursive move_to(tree)", lambda: move_to(x, move, kind)),
        ]

    from_dict = lambda: TensorDict.from_dict(plain).to(dev)  # noqa: E731
    tensordicts = [
        Row("TensorDict.to (built)", "TensorDict (built once).to(dev)", lambda: td.to(dev)),
        Row("TensorDict.from_dict.to", "TensorDict.from_dict(dicts).to(dev)", from_dict),
    ]
    torch_rows = [*rows(tt, lambda t: t.to(dev), "move", torch.Tensor), *tensordicts]
    numpy_rows = rows(host, torch.from_numpy, "torch.from_numpy", np.ndarray)
    parts = [("torch", "torch_to_cpu", torch_rows), ("numpy", "numpy_to_torch_cpu", numpy_rows)]
    out: dict[str, Any] = {"leaves": len(optree.tree_leaves(tt)), "ratios": {}, "values": {}}
    check = functools.partial(check_same, kind=torch.Tensor)
    for kind, key, section in parts:
        label = f"nested, {'torch' if kind == 'torch' else 'NumPy'} leaves"
        out[key] = measure(label, section, tt, rounds, progress, repeat=repeat, check=check)
        ours, optree_s, pytree_s, move_to_s = medians(out[key])[:4]
        out["ratios"][f"{key}: to_device / optree.tree_map"] = ours / optree_s
        out["ratios"][f"{key}: to_device / torch pytree"] = ours / pytree_s
        out["ratios"][f"{key}: to_device / move_to"] = ours / move_to_s
        values = {"to_device": ours, "optree": optree_s, "move_to": move_to_s}
        out["values"].update({f"{kind}:{k}": v for k, v in values.items()})
    return out


def packing_cpu(rounds: int, repeat: int, progress: Progress | None = None) -> dict[str, Any]:
    """CPU-only: packing ~1000 small leaves (one cat per dtype) against per-leaf copies."""
    import optree
    import torch

    from looptoolkit import to_device
    from looptoolkit.adapters.torch import pack_copy

    dev, tt = torch.device("cpu"), optree.tree_map(torch.from_numpy, nested())
    leaves = optree.tree_leaves(tt)
    rows = [
        Row("per-leaf clone", "t.clone() of each leaf", lambda: [t.clone() for t in leaves]),
        Row("pack_copy", "pack_copy(leaves, cpu): cat per dtype", lambda: pack_copy(leaves, dev)),
        Row(
            "to_device(pack=True)",
            "to_device(tree, cpu, pack=True)",
            lambda: to_device(tt, dev, pack=True),
            tt,
        ),
    ]
    t = medians(out := measure("packing", rows, leaves, rounds, progress, repeat=repeat))
    return {"cpu_only": True, "rows": out, "ratios": {"packed / per-leaf clone": t[1] / t[0]}}


def images_cpu(rounds: int, repeat: int, progress: Progress | None = None) -> dict[str, Any]:
    """CPU-only: the host cast and the bytes each order of cast and copy moves."""
    import torch

    from looptoolkit import to_device

    batch, dev, cast = images_batch(), torch.device("cpu"), {np.uint8: np.float16}
    image = torch.from_numpy(batch["image"])
    im16 = image.to(torch.float16)
    # Preallocated outputs: the rows time the work, not the page faults of fresh buffers.
    u8, f16, mid16 = torch.empty_like(image), torch.empty_like(im16), im16.clone()
    want = {"image": im16, "label": torch.from_numpy(batch["label"])}
    rows = [
        Row("cast uint8->float16", "host cast uint8 -> float16", lambda: f16.copy_(image)),
        Row("copy uint8 (3 MiB)", "host copy of the uint8 batch", lambda: u8.copy_(image), image),
        Row("copy float16 (6 MiB)", "host copy of the float16 batch", lambda: f16.copy_(im16)),
        Row(
            "cast, then copy", "host: cast, then copy 6 MiB", lambda: f16.copy_(mid16.copy_(image))
        ),
        Row("copy, then cast", "host: copy 3 MiB, then cast", lambda: f16.copy_(u8.copy_(image))),
        Row(
            "to_device(dtype=...)",
            "to_device(batch, torch cpu, dtype={uint8: float16})",
            lambda: to_device(batch, dev, dtype=cast),
            want,
        ),
    ]
    t = medians(out := measure("images, host", rows, im16, rounds, progress, repeat=repeat))
    ratios = {"copy 6 MiB / copy 3 MiB": t[2] / t[1]}
    ratios["cast-then-copy / copy-then-cast (both on the host)"] = t[3] / t[4]
    nbytes = {"uint8": image.nbytes, "float16": im16.nbytes}
    return {"cpu_only": True, "bytes": nbytes, "rows": out, "ratios": ratios}


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` 16 bytes past a 64-byte boundary, where NumPy's own allocations start."""
    raw = np.empty(a.nbytes + 128, dtype=np.uint8)
    start = (16 - raw.ctypes.data) % 64
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def sweep(
    rounds: int,
    *,
    sizes: tuple[int, ...] = SIZES,
    cuda: bool = False,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Time ``to_device`` of an images batch per dtype and batch size; one row per pair.

    With CUDA the batch goes to the GPU (torch). On the CPU it goes to JAX's CPU device, whose
    ``device_put`` copies it (it would alias a 64-byte-aligned buffer; these start 16 bytes off),
    so the sweep measures the host side of a move. The check makes sure each move kept the
    values and dtype, and copied.
    """
    from looptoolkit import to_device

    if cuda:
        import torch

        dev, sync = torch.device("cuda"), torch.cuda.synchronize
        what = "host-to-device copies (torch)"
    else:
        import jax

        dev, sync = jax.devices("cpu")[0], None
        what = "CPU only: the host side, a copy into JAX's CPU buffer"

    def check(name: str, got: Any, want: np.ndarray) -> None:
        check_same(name, got, want)
        if not cuda and np.shares_memory(np.asarray(got), want):
            raise AssertionError(f"to_device of a {name} batch did not copy it.")

    def move(image: np.ndarray) -> Any:
        out = to_device({"image": image}, dev)["image"]
        return out.block_until_ready() if hasattr(out, "block_until_ready") else out

    pool = np.random.default_rng(seed).integers(0, 256, (max(sizes), 3, 64, 64), dtype=np.uint8)
    rows = []
    for size in sizes:
        images = {d: _unaligned(pool[:size].astype(d)) for d in DTYPES}
        calls = [Row(d, d, functools.partial(move, a), a) for d, a in images.items()]
        label, clock = f"sweep, batch of {size}", HostClock(sync)
        for r in measure(label, calls, None, rounds, progress, clock=clock, check=check):
            n, s = images[r["name"]].nbytes, r["median_s"]
            got = (r["name"], size, n, s, r["min_s"], r["max_s"], s * 1e3, n / s / 1e6)
            rows.append(dict(zip(ROW_KEYS, got, strict=True)))
    return dict(device=str(dev), measures=what, cpu_only=not cuda, rounds=rounds, rows=rows)
