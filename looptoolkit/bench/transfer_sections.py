"""The sections of ``looptoolkit transfer``: what ``to_device`` costs, checked, then timed.

- ``nested``: a dict of lists of namedtuples with ~1000 small leaves. The
  traversal of ``to_device(tree, dev)`` against bare ``optree.tree_map(move, tree)``,
  ``torch.utils._pytree.tree_map``, a hand-written recursive ``move_to`` and a
  ``TensorDict``'s ``.to(dev)``, where every "move" is the same cheap per-leaf op on
  the host (torch leaves to ``torch.device("cpu")``: ``t.to(dev)`` returns ``t``; NumPy
  leaves to torch: ``torch.from_numpy``). On CPU it also weighs packing (one ``cat``
  per dtype) against 1000 per-leaf copies; with CUDA, packed against per-leaf transfer.
- ``images``: ``{"image": uint8 (256, 3, 64, 64), "label": int64 (256,)}``. On CPU
  (rows marked *CPU-only*): the host cast uint8 -> float16 that cast-then-copy pays,
  and host copies of 3 MiB (uint8) vs 6 MiB (float16), the bytes each order moves.

The CUDA sections are in [`looptoolkit.bench.transfer_cuda`][looptoolkit.bench.transfer_cuda]. Every
section checks its variants' outputs before timing them, and times them with
[`looptoolkit.bench.timing.interleave`][looptoolkit.bench.timing.interleave].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from looptoolkit.bench.timing import Clock, CudaEventClock, Timing, interleave

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = [
    "SHORT",
    "WARMUP",
    "Sample",
    "check_same",
    "images_batch",
    "images_cpu",
    "light_repeat",
    "move_to",
    "nested",
    "nested_traversal",
    "packing_cpu",
    "row",
    "timed",
]


_GROUPS, _ITEMS = 10, 25  # the nested workload: 10 keys of 25 samples

WARMUP = 2
"""Untimed rounds before the timed ones, every section."""


def light_repeat(repeat: int) -> int:
    """Calls per round of the packing and images rows: a quarter of ``--repeat``, at least 1."""
    return max(1, repeat // 4)


class Sample(NamedTuple):
    """One record of the nested workload: four small leaves of four dtypes."""

    x: Any  # float32 (16,)
    y: Any  # int64, 0-d
    mask: Any  # bool (16,)
    score: Any  # float16 (4,)


def nested() -> Any:
    """The ``nested`` workload: 10 keys of 25 samples, 4 NumPy leaves each (1000 leaves)."""
    # Typed as Any: optree's stubs do not take a dict of lists of namedtuples as a PyTree.
    rng = np.random.default_rng(0)
    tree: dict[str, list[Sample]] = {}
    for g in range(_GROUPS):
        tree[f"group{g}"] = [
            Sample(
                rng.standard_normal(16, dtype=np.float32),
                np.array(g * _ITEMS + i, dtype=np.int64),
                rng.random(16) < 0.5,
                rng.standard_normal(4).astype(np.float16),
            )
            for i in range(_ITEMS)
        ]
    return tree


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


def timed(
    variants: Sequence[tuple[str, Callable[[], Any]]],
    *,
    rounds: int,
    label: str,
    progress: Progress | None,
    repeat: int = 1,
    clock: Clock | None = None,
) -> list[Timing]:
    """Time checked ``variants`` interleaved after ``WARMUP`` warm-up rounds.

    Host rows (no ``clock``): ``repeat`` calls per round, reported per call,
    the garbage collector off meanwhile. CUDA rows (``clock`` a
    [`CudaEventClock`][looptoolkit.bench.timing.CudaEventClock]): one call per round read by the
    clock, the garbage collector left on; each row says ``"clock": "cuda events"``.
    """
    if progress is not None:
        progress.stage(f"transfer: {label}, {len(variants)} variants x {rounds} rounds")
    timings = interleave(
        variants,
        rounds=rounds,
        warmup=WARMUP,
        repeat=repeat,
        clock=clock,
        collect=clock is not None,
        progress=progress,
        label=label,
    )
    if isinstance(clock, CudaEventClock):
        for t in timings:
            t.extra["clock"] = "cuda events"
    return timings


SHORT = {
    "to_device(tree, dev)": "to_device",
    "optree.tree_map(move, tree)": "optree.tree_map",
    "torch.utils._pytree.tree_map(move, tree)": "torch pytree tree_map",
    "recursive move_to(tree)": "move_to (recursive)",
    "TensorDict (built once).to(dev)": "TensorDict.to (built)",
    "TensorDict.from_dict(dicts).to(dev)": "TensorDict.from_dict.to",
    "optree.tree_map(torch.from_numpy, tree)": "optree.tree_map",
    "torch.utils._pytree.tree_map(torch.from_numpy, tree)": "torch pytree tree_map",
    "per-leaf t.clone() (1000 copies)": "per-leaf clone",
    "pack_copy(leaves, cpu) (one cat per dtype)": "pack_copy",
    "to_device(tree, cpu, pack=True)": "to_device(pack=True)",
    "host cast uint8 -> float16": "cast uint8->float16",
    "host copy of the uint8 batch (3 MiB)": "copy uint8 (3 MiB)",
    "host copy of the float16 batch (6 MiB)": "copy float16 (6 MiB)",
    "cast-then-copy on the host (cast, copy 6 MiB)": "cast, then copy",
    "copy-then-cast on the host (copy 3 MiB, cast)": "copy, then cast",
    "to_device(batch, torch cpu, dtype={uint8: float16})": "to_device(dtype=...)",
    "pageable uint8 image .to(cuda)": "pageable .to(cuda)",
    "pinned uint8 image .to(cuda, non_blocking=True)": "pinned .to(cuda)",
    "to_device(pinned batch, 'cuda')": "to_device(pinned)",
    "to_device(pageable batch, 'cuda')": "to_device(pageable)",
    "cast-then-copy: image.half() on host, then .to(cuda)": "cast, then copy",
    "copy-then-cast: pinned uint8 .to(cuda), .half() on device": "copy, then cast",
    "to_device(pinned batch, 'cuda', dtype={uint8: float16})": "to_device(dtype=...)",
    "per-leaf: to_device(tree, 'cuda', pack=False)": "per-leaf to_device",
    "packed: to_device(tree, 'cuda')": "packed to_device",
    "optree.tree_map(lambda t: t.to(cuda), tree)": "optree.tree_map .to",
}
"""Short names (tables fit 80 columns) for the variants; the full name is the row's label."""


def row(t: Timing, **extra: Any) -> dict[str, Any]:
    """A timing as a JSON-ready row: its short name, its full name as ``label``, ``extra``."""
    out = t.summary()
    out.update(extra)
    out["label"] = t.name
    out["name"] = SHORT.get(
        t.name, "reference pinned copy" if t.name.startswith("reference") else t.name
    )
    return out


# -- sections ----------------------------------------------------------------------------------


def nested_traversal(rounds: int, repeat: int, progress: Progress | None = None) -> dict[str, Any]:
    """Traversal cost on the host: torch leaves to torch cpu, NumPy leaves to torch."""
    import optree
    import torch
    from tensordict import TensorDict
    from torch.utils import _pytree as torch_pytree

    from looptoolkit import to_device

    dev = torch.device("cpu")
    host = nested()
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
    torch_rows = timed(
        variants, rounds=rounds, repeat=repeat, label="nested, torch leaves", progress=progress
    )

    np_variants: list[tuple[str, Callable[[], Any]]] = [
        ("to_device(tree, dev)", lambda: to_device(host, dev)),
        (
            "optree.tree_map(torch.from_numpy, tree)",
            lambda: optree.tree_map(torch.from_numpy, host),
        ),
        (
            "torch.utils._pytree.tree_map(torch.from_numpy, tree)",
            lambda: torch_pytree.tree_map(torch.from_numpy, host),
        ),
        ("recursive move_to(tree)", lambda: move_to(host, torch.from_numpy, np.ndarray)),
    ]
    for name, fn in np_variants:
        out = fn()
        _check_structure(name, out, tt)
        check_same(name, out, tt, kind=torch.Tensor)
    numpy_rows = timed(
        np_variants, rounds=rounds, repeat=repeat, label="nested, NumPy leaves", progress=progress
    )
    n_leaves = len(_leaves(tt))
    return {
        "leaves": n_leaves,
        "torch_to_cpu": [row(t) for t in torch_rows],
        "numpy_to_torch_cpu": [row(t) for t in numpy_rows],
        "ratios": {
            "torch_to_cpu": _ratios(torch_rows),
            "numpy_to_torch_cpu": _ratios(numpy_rows),
        },
        "values": {
            "torch:to_device": torch_rows[0].median,
            "torch:optree": torch_rows[1].median,
            "torch:move_to": torch_rows[3].median,
            "numpy:to_device": numpy_rows[0].median,
            "numpy:optree": numpy_rows[1].median,
            "numpy:move_to": numpy_rows[3].median,
        },
    }


def _ratios(rows: list[Timing]) -> dict[str, float]:
    ours = rows[0].median
    return {
        "to_device / optree.tree_map": ours / rows[1].median,
        "to_device / torch pytree": ours / rows[2].median,
        "to_device / move_to": ours / rows[3].median,
    }


def packing_cpu(rounds: int, repeat: int, progress: Progress | None = None) -> dict[str, Any]:
    """CPU-only: packing ~1000 small leaves (one cat per dtype) against per-leaf copies."""
    import optree
    import torch

    from looptoolkit import to_device
    from looptoolkit.adapters.torch import pack_copy

    dev = torch.device("cpu")
    tt = optree.tree_map(torch.from_numpy, nested())
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
    rows = timed(variants, rounds=rounds, repeat=repeat, label="packing", progress=progress)
    return {
        "cpu_only": True,
        "rows": [row(t) for t in rows],
        "ratios": {"packed / per-leaf clone": rows[1].median / rows[0].median},
    }


def images_cpu(rounds: int, repeat: int, progress: Progress | None = None) -> dict[str, Any]:
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
        (
            "to_device(batch, torch cpu, dtype={uint8: float16})",
            lambda: to_device(batch, torch.device("cpu"), dtype={np.uint8: np.float16}),
        ),
    ]
    out = variants[-1][1]()
    if out["image"].dtype != torch.float16 or not torch.equal(out["image"], image16):
        raise AssertionError("to_device with a dtype mapping gave wrong values.")
    cast_then_copy()
    if not torch.equal(f16, image16):
        raise AssertionError("cast-then-copy gave wrong values.")
    copy_then_cast()
    if not torch.equal(f16, image16):
        raise AssertionError("copy-then-cast gave wrong values.")
    rows = timed(variants, rounds=rounds, repeat=repeat, label="images, host", progress=progress)
    return {
        "cpu_only": True,
        "bytes": {"uint8": image.nbytes, "float16": image16.nbytes},
        "rows": [row(t) for t in rows],
        "ratios": {
            "copy 6 MiB / copy 3 MiB": rows[2].median / rows[1].median,
            "cast-then-copy / copy-then-cast (both on the host)": rows[3].median / rows[4].median,
        },
    }
