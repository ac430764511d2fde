"""`measure` (check, then time) behind ``looptoolkit transfer``, and its host sections.

`sweep`: an ``images`` batch moved by batch size (``transfer --sweep``, ``compare --transfer``).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from looptoolkit import to_device
from looptoolkit.bench.charts import Bar, Panel, bar_chart
from looptoolkit.bench.results import Group, Row
from looptoolkit.bench.tables import Table
from looptoolkit.bench.timing import Clock, CudaEventClock, HostClock, interleave

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["Call", "by_batch_size", "check_same", "measure", "sweep", "sweep_table"]

WARMUP, TO_DEVICE, CAST = 2, "#dd8452", {np.uint8: np.float16}
SIZES, DTYPES = (32, 64, 128, 256, 512, 1024), ("uint8", "float16", "float32")
Sample = namedtuple("Sample", "x y mask score")  # float32 (16,), int64, bool (16,), float16 (4,)
Make = Callable[[np.ndarray], tuple[Callable[[], Any], np.ndarray]]
"""A path of a sweep: from the uint8 batch, the call to time and its expected output."""


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
class Call:
    """A row to measure: its name, a one-line label, the call, its own reference (None: shared)."""

    name: str
    label: str
    fn: Callable[[], Any]
    want: Any = None


def check_same(name: str, got: Any, want: Any, kind: type | None = None) -> None:
    """Raise AssertionError unless ``got`` has ``want``'s structure, dtypes, values and ``kind``."""
    import optree

    from looptoolkit.device._tree import NAMESPACE

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
    calls: Sequence[Call],
    want: Any,
    rounds: int,
    progress: Progress | None,
    *,
    repeat: int = 1,
    clock: Clock | None = None,
    warmup: int = WARMUP,
    check: Callable[[str, Any, Any], None] = check_same,
) -> list[Row]:
    """Check each call's output against its reference (``want``), then time the calls interleaved.

    Host rows: ``repeat`` calls per round, the garbage collector off; CUDA-event rows leave it on.
    """
    for c in calls:
        check(c.name, c.fn(), want if c.want is None else c.want)
    timed = interleave(
        [(c.name, c.fn) for c in calls],
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
        replace(r, label=c.label, check="same as the reference", extra={**r.extra, **extra})
        for r, c in zip(timed, calls, strict=True)
    ]


def group(name: str, title: str, rows: list[Row], **info: dict[str, float]) -> Group:
    """A section's group, timed per call; ``info``: its ``ratios`` and the targets' ``values``."""
    return Group(name, title, rows, unit="call", info=info)


def host_sections(
    rounds: int, repeat: int, progress: Progress | None, *, trees: bool = True, images: bool = True
) -> Iterator[Group]:
    """Yield each host section once measured: ``nested`` traversed and packed, ``images`` cast."""
    import optree
    import torch
    from tensordict import TensorDict
    from torch.utils import _pytree

    from looptoolkit.adapters.torch import pack_copy

    dev, host, light = torch.device("cpu"), nested(), max(1, repeat // 4)
    tt = optree.tree_map(torch.from_numpy, host)
    td, plain, leaves = TensorDict.from_dict(_as_dicts(tt)), _as_dicts(tt), optree.tree_leaves(tt)
    check = partial(check_same, kind=torch.Tensor)
    titles = {
        "torch_to_cpu": "torch leaves to torch.device('cpu') (t.to(dev) is t)",
        "numpy_to_torch_cpu": "NumPy leaves to torch (torch.from_numpy)",
    }
    from_dict = lambda: TensorDict.from_dict(plain).to(dev)  # noqa: E731
    tensordicts = [  # the same torch leaves, as dicts of dicts
        Call("TensorDict.to (built)", "TensorDict (built once).to(dev)", partial(td.to, dev)),
        Call("TensorDict.from_dict.to", "TensorDict.from_dict(dicts).to(dev)", from_dict),
    ]
    traversals = [  # the tree, how a leaf moves (and its label), the leaf type, more rows
        ("torch", "torch_to_cpu", tt, lambda t: t.to(dev), "move", torch.Tensor, tensordicts),
        ("numpy", "numpy_to_torch_cpu", host, torch.from_numpy, "torch.from_numpy", np.ndarray, []),
    ]
    for kind, key, x, move, what, leaf, more in traversals if trees else []:
        tree_map = f"optree.tree_map({what}, tree)"
        pytree = f"torch.utils._pytree.tree_map({what}, tree)"
        calls = [
            Call("to_device", "to_device(tree, dev)", partial(to_device, x, dev)),
            Call("optree.tree_map", tree_map, partial(optree.tree_map, move, x)),
            Call("torch pytree tree_map", pytree, partial(_pytree.tree_map, move, x)),
            Call("move_to (recursive)", "recursive move_to(tree)", partial(move_to, x, move, leaf)),
            *more,
        ]
        rows = measure(f"nested/{key}", calls, tt, rounds, progress, repeat=repeat, check=check)
        t = [r.median_s for r in rows]  # to_device, optree, torch pytree, move_to, ...
        bare = ("optree.tree_map", "torch pytree", "move_to")
        ratios = {f"{key}: to_device / {b}": t[0] / s for b, s in zip(bare, t[1:4], strict=True)}
        values = {f"{kind}:to_device": t[0], f"{kind}:optree": t[1], f"{kind}:move_to": t[3]}
        title = f"nested: 1000 {titles[key]}"
        yield group(f"nested/{key}", title, rows, ratios=ratios, values=values)
    if trees:
        pack, packed = partial(pack_copy, leaves, dev), partial(to_device, tt, dev, pack=True)
        calls = [
            Call("per-leaf clone", "t.clone() of each leaf", lambda: [t.clone() for t in leaves]),
            Call("pack_copy", "pack_copy(leaves, cpu): cat per dtype", pack),
            Call("to_device(pack=True)", "to_device(tree, cpu, pack=True)", packed, tt),
        ]
        rows = measure("packing", calls, leaves, rounds, progress, repeat=light)
        ratios = {"cpu-only: packed / per-leaf clone": rows[1].median_s / rows[0].median_s}
        title = "nested, CPU only: packing (one cat per dtype) vs 1000 leaf copies"
        yield group("packing_cpu/rows", title, rows, ratios=ratios)
    if not images:
        return
    batch = images_batch()
    image = torch.from_numpy(batch["image"])
    im16 = image.to(torch.float16)
    # Preallocated outputs: the rows time the work, not the page faults of fresh buffers.
    u8, f16, mid16 = torch.empty_like(image), torch.empty_like(im16), im16.clone()
    want = {"image": im16, "label": torch.from_numpy(batch["label"])}
    cast = "to_device(batch, torch cpu, dtype={uint8: float16})"
    cast_then_copy = lambda: f16.copy_(mid16.copy_(image))  # noqa: E731
    calls = [
        Call("cast uint8->float16", "host cast uint8 -> float16", partial(f16.copy_, image)),
        Call("copy uint8 (3 MiB)", "host copy of the uint8 batch", partial(u8.copy_, image), image),
        Call("copy float16 (6 MiB)", "host copy of the float16 batch", partial(f16.copy_, im16)),
        Call("cast, then copy", "host: cast, then copy 6 MiB", cast_then_copy),
        Call("copy, then cast", "host: copy 3 MiB, then cast", lambda: f16.copy_(u8.copy_(image))),
        Call("to_device(dtype=...)", cast, partial(to_device, batch, dev, dtype=CAST), want),
    ]
    rows = measure("images, host", calls, im16, rounds, progress, repeat=light)
    t = [r.median_s for r in rows]
    ratios = {"cpu-only: copy 6 MiB / copy 3 MiB": t[2] / t[1]}
    ratios["cpu-only: cast-then-copy / copy-then-cast (both on the host)"] = t[3] / t[4]
    title = "images, CPU only: the host cast, and the bytes each order copies"
    yield group("images_cpu/rows", title, rows, ratios=ratios)


def sweep(
    title: str,
    paths: dict[str, Make],
    sizes: Sequence[int],
    rounds: int,
    *,
    device: str = "cpu",
    seed: int = 0,
    warmup: int = WARMUP,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Time each path on a uint8 images batch by batch size, checked first (on the CPU: a copy).

    A batch is a random draw of rows; on a GPU gathered into pinned memory, as the Loader stages.
    """
    sync, rng = None, np.random.default_rng(seed)
    pool = rng.integers(0, 256, (max(sizes) * 2, 3, 64, 64), dtype=np.uint8)
    if device != "cpu":
        import torch

        sync = torch.cuda.synchronize

    def check(name: str, got: Any, want: np.ndarray) -> None:
        check_same(name, got, want)
        if device == "cpu" and np.shares_memory(np.asarray(got), want):
            raise AssertionError(f"{name}: to_device did not copy the batch.")

    clock = HostClock(sync)
    ms: dict[str, list[float]] = {name: [] for name in paths}
    mb: dict[str, list[float]] = {name: [] for name in paths}
    for size in sizes:
        batch = np.empty((size, 3, 64, 64), dtype=np.uint8)
        if device != "cpu":
            batch = torch.empty(batch.shape, dtype=torch.uint8).pin_memory().numpy()
        np.take(pool, np.sort(rng.choice(len(pool), size, replace=False)), axis=0, out=batch)
        calls = [Call(name, name, *make(batch)) for name, make in paths.items()]
        label = f"sweep, batch of {size}"
        rows = measure(
            label, calls, None, rounds, progress, clock=clock, warmup=warmup, check=check
        )
        for c, r in zip(calls, rows, strict=True):
            ms[c.name].append(r.median_s * 1e3)
            mb[c.name].append(c.want.nbytes / r.median_s / 1e6)
    out = {"title": title, "device": device, "rounds": rounds, "batch_sizes": list(sizes)}
    return {**out, "ms_per_batch": ms, "mb_per_s": mb}


def sweep_table(result: dict[str, Any]) -> Table:
    """Milliseconds per batch and MB/s by batch size, a column each per path (long names: A, B)."""
    ms, mb = result["ms_per_batch"], result["mb_per_s"]
    cols = [chr(65 + i) if max(map(len, ms)) > 8 else name for i, name in enumerate(ms)]
    header = ["batch", *[f"{c} ms" for c in cols], *[f"{c} MB/s" for c in cols]]
    cells = [
        [str(size), *[f"{v[i]:.3f}" for v in ms.values()], *[f"{v[i]:,.0f}" for v in mb.values()]]
        for i, size in enumerate(result["batch_sizes"])
    ]
    notes = [f"{c}: {name}" for c, name in zip(cols, ms, strict=True) if c != name]
    note = f"median ms per batch over {result['rounds']} interleaved rounds; MB/s: the bytes of "
    note += f"the batch a path delivers over that time; device {result['device']}."
    return Table(result["title"], header, cells, notes=[*notes, note])


def plot_sweep(result: dict[str, Any], path: Path) -> Path:
    """Bars of ms per batch by batch size, a panel per path, each bar with its MB/s."""
    panels, sizes = [], result["batch_sizes"]
    for name, ms in result["ms_per_batch"].items():
        bars = [
            Bar(str(size), t, f"{t:.3f} ms, {m:,.0f} MB/s", TO_DEVICE)
            for size, t, m in zip(sizes, ms, result["mb_per_s"][name], strict=True)
        ]
        panels.append(Panel(name, bars, "ms per batch (lower is better)"))
    return bar_chart(panels, path, title=result["title"])


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` 16 bytes past a 64-byte boundary, where NumPy's own allocations start."""
    raw = np.empty(a.nbytes + 128, dtype=np.uint8)
    start = (16 - raw.ctypes.data) % 64
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def dtype_sweep(
    rounds: int, sizes: Sequence[int] = SIZES, cuda: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """``transfer --sweep``: the batch as uint8, float16, float32 to CUDA or to JAX's CPU device.

    JAX's ``device_put`` copies a batch 16 bytes off a 64-byte boundary: the host side of a move.
    """
    if cuda:
        import torch

        dev, what = torch.device("cuda"), "host-to-device copies (torch)"
    else:
        import jax

        dev, what = jax.devices("cpu")[0], "CPU only: the host side, a copy into JAX's CPU buffer"

    def move(image: np.ndarray) -> Any:
        out = to_device({"image": image}, dev)["image"]
        return out.block_until_ready() if hasattr(out, "block_until_ready") else out

    def path(dtype: str) -> Make:
        def make(batch: np.ndarray) -> tuple[Callable[[], Any], np.ndarray]:
            image = _unaligned(batch.astype(dtype))
            return partial(move, image), image

        return make

    title = f"images batch (3x64x64) moved with to_device by dtype ({what})"
    paths = {dtype: path(dtype) for dtype in DTYPES}
    return sweep(title, paths, sizes, rounds, device="cuda" if cuda else "cpu", progress=progress)


def by_batch_size(
    device: str, quick: bool, seed: int, progress: Progress | None = None
) -> dict[str, Any]:
    """``compare``'s transfer section: the batch to float16, cast after or before the copy.

    On the CPU both are the host cast (no bus to cross); on a GPU also the uint8 copy alone.
    """
    target: Any = device
    if device != "cpu":
        import torch

        target = torch.device(device)
    move, half = partial(to_device, device=target), partial(np.ndarray.astype, dtype=np.float16)
    paths: dict[str, Make] = {  # from the batch: the call to time, its expected output
        "uint8 copy, cast on the device": lambda b: (partial(move, b, dtype=CAST), half(b)),
        "cast to float16, then copy": lambda b: (lambda: move(half(b)), half(b)),
    }
    if device != "cpu":
        paths["uint8 copy, no cast"] = lambda b: (partial(move, b), b)
    what = "host cast only (no bus on CPU)" if device == "cpu" else "host-to-device"
    sizes = [8, 32] if quick else [16, 32, 64, 128, 256, 512, 1024]
    title, rounds = f"images batch to float16 by batch size ({what})", 3 if quick else 15
    return sweep(title, paths, sizes, rounds, device=device, seed=seed, warmup=1, progress=progress)
