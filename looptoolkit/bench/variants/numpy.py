"""The NumPy kit: hand-written loops (`numpy_manual` with ``take`` is the baseline), the floors."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np

from looptoolkit import Loader
from looptoolkit._rows.rows import Rows
from looptoolkit.bench.variants import BASELINE, Kit, loop, tokens, variant
from looptoolkit.bench.variants.augment import augment_variants
from looptoolkit.bench.variants.bucket import bucket_variants
from looptoolkit.bench.variants.epochs import EpochPipeline, batch_slices, split_batches
from looptoolkit.bench.variants.grain_pack import grain_variants
from looptoolkit.bench.variants.mix import mix_variants
from looptoolkit.device import _tree as tree
from looptoolkit.order._order import batch_count

# A chunk's bytes of rows (at most 64 batches): faster than 16 batches for JAX and tf on tabular.
CHUNK_ROW_BYTES = 4 << 20
_first = operator.itemgetter(0)
Wrap = Callable[[list[np.ndarray]], Any]
Split = Callable[[Any, list[int]], Iterable[Sequence[Any]]]
Take = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _host(data: Any) -> tuple[int, list[np.ndarray], list[Any] | None, Callable[[Any], Any]]:
    """Rows, the leaves as NumPy arrays, a flat dict's keys (else None) and the batch rebuild."""
    leaves, spec = tree.flatten(data)
    keys: list[Any] | None = None
    rebuild: Callable[[Any], Any] = spec.unflatten
    if spec.is_leaf():
        rebuild = _first
    elif spec.type is dict and all(child.is_leaf() for child in spec.children()):
        keys = list(data)  # the data's own key order, not the flattened (sorted) one
        leaves, rebuild = [data[key] for key in keys], lambda xs: dict(zip(keys, xs, strict=True))
    return Rows(data).n, [np.asarray(leaf) for leaf in leaves], keys, rebuild


def each(fn: Callable[[Any], Any]) -> Wrap:
    """A ``wrap`` of `numpy_manual`: ``fn`` of every leaf (``torch.from_numpy``)."""
    return lambda leaves: [fn(x) for x in leaves]


def numpy_manual(
    data: Any, batch_size: int, *, seed: int = 0, gather: str = "take", wrap: Wrap | None = None
) -> EpochPipeline:
    """A permutation per epoch; per batch ``x.take(idx, axis=0)`` or ``x[idx]`` a leaf, ``wrap``."""
    if gather not in ("take", "index"):
        raise ValueError(f"`gather` must be 'take' or 'index', got {gather!r}.")
    n, leaves, keys, rebuild = _host(data)
    take = gather == "take"

    def batches(epoch: int) -> list[np.ndarray]:
        return split_batches(np.random.default_rng([seed, epoch]).permutation(n), batch_size)

    pipe = partial(EpochPipeline, length=batch_count(n, batch_size), name=f"numpy_manual[{gather}]")
    # The loop a user writes for this data, its gather written out: one array is the batch,
    # a flat dict is rebuilt with a comprehension, anything else from its list of leaves.
    if wrap is None and rebuild is _first:
        (x,) = leaves
        if take:
            return pipe(lambda e: (x.take(i, axis=0) for i in batches(e)))
        return pipe(lambda e: (x[i] for i in batches(e)))
    if wrap is None and keys is not None:
        items = list(zip(keys, leaves, strict=True))
        if take:
            return pipe(lambda e: ({k: x.take(i, axis=0) for k, x in items} for i in batches(e)))
        return pipe(lambda e: ({k: x[i] for k, x in items} for i in batches(e)))
    w = wrap or list
    if take:
        return pipe(lambda e: (rebuild(w([x.take(i, axis=0) for x in leaves])) for i in batches(e)))
    return pipe(lambda e: (rebuild(w([x[i] for x in leaves])) for i in batches(e)))


def aligned_take(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``x.take(idx, axis=0)`` into a new array on a 64-byte boundary.

    tf and XLA take such arrays over without a copy; NumPy's large arrays start 16 bytes past one.
    """
    nbytes = len(idx) * x.dtype.itemsize * int(np.prod(x.shape[1:]))
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start : start + nbytes].view(x.dtype).reshape(len(idx), *x.shape[1:])
    return x.take(idx, 0, out, "clip")  # "clip": no buffered copy; idx is a permutation's


def chunked_manual(
    data: Any, batch_size: int, *, wrap: Wrap, split: Split, seed: int = 0, take: Take | None = None
) -> EpochPipeline:
    """The chunked hand loop: per chunk of batches (~4 MiB) a take a leaf, a ``wrap``, a ``split``.

    ``take(leaf, idx)`` defaults to ``leaf.take(idx, axis=0)``; ``split(arrays, sizes)`` cuts the
    wrapped arrays into batches.
    """
    n, leaves, _, rebuild = _host(data)
    row = sum(x.itemsize * int(np.prod(x.shape[1:])) for x in leaves) or 1
    chunk = max(1, min(64, CHUNK_ROW_BYTES // (row * batch_size)))
    step = chunk * batch_size

    def epoch_fn(epoch: int) -> Iterator[Any]:
        indices = np.random.default_rng([seed, epoch]).permutation(n)
        for start in range(0, n, step):
            idx = indices[start : start + step]
            full, rest = divmod(len(idx), batch_size)
            sizes = [batch_size] * full + ([rest] if rest else [])
            wrapped = wrap([take(x, idx) if take else x.take(idx, axis=0) for x in leaves])
            if len(sizes) == 1:  # a chunk of one batch (large rows) is that batch
                yield rebuild(wrapped)
            else:
                yield from map(rebuild, split(wrapped, sizes))

    return EpochPipeline(epoch_fn, batch_count(n, batch_size), name=f"chunked_manual[{chunk}]")


def pure_python(data: Sequence[Any], batch_size: int, *, seed: int = 0) -> EpochPipeline:
    """Pure Python: ``random.sample`` of a list per epoch (``random.Random(seed)``), then slices."""
    items = data.tolist() if isinstance(data, np.ndarray) else list(data)
    n, rng, length = len(items), random.Random(seed), batch_count(len(items), batch_size)
    epoch = partial(batch_slices, batch_size=batch_size)
    return EpochPipeline(lambda e: epoch(rng.sample(items, n)), length, name="pure_python")


def sequential_take(data: Any, batch_size: int, *, copy: bool = False) -> EpochPipeline:
    """A floor: each batch's rows in storage order, by ``take`` of an ``arange`` (or ``copy``)."""
    n, leaves, _, rebuild = _host(data)
    starts, cut = range(0, n, batch_size), partial(split_batches, np.arange(n), batch_size)

    def epoch(_: int) -> Iterator[Any]:
        if copy:  # no index at all: a copy of each batch's contiguous bytes
            return (rebuild([x[s : s + batch_size].copy() for x in leaves]) for s in starts)
        return (rebuild([x.take(i, axis=0) for x in leaves]) for i in cut())

    return EpochPipeline(epoch, len(starts), name=f"sequential_take[copy={copy}]")


contiguous_copies = partial(sequential_take, copy=True)


def epoch_views(data: Any, batch_size: int, *, seed: int = 0) -> EpochPipeline:
    """One permutation of the epoch, then views: ``rng.permutation(x).reshape(-1, B)`` on 1-D."""
    n, leaves, _, rebuild = _host(data)
    full = n - n % batch_size

    def epoch_fn(epoch: int) -> Iterator[Any]:
        rng = np.random.default_rng([seed, epoch])
        if len(leaves) == 1 and leaves[0].ndim == 1:
            shuffled = [rng.permutation(leaves[0])]
        else:
            perm = rng.permutation(n)
            shuffled = [leaf.take(perm, axis=0) for leaf in leaves]
        rows = [s[:full].reshape(-1, batch_size, *s.shape[1:]) for s in shuffled]
        for i in range(full // batch_size):
            yield rebuild([r[i] for r in rows])
        if full < n:
            yield rebuild([s[full:] for s in shuffled])

    return EpochPipeline(epoch_fn, batch_count(n, batch_size), name="epoch_views")


NAME = "numpy"
LABELS = {
    "python": "pure Python: random.sample of a list, then slices",
    BASELINE: "best manual loop: permutation + take per leaf (the baseline)",
    "numpy-index": "NumPy fancy-index loop: permutation + x[idx] per leaf",
    "numpy-epoch": "permutation(x).reshape(-1, B): one shuffled copy per epoch, then row views",
    "floor-memcpy": "floor: a contiguous copy of each batch's bytes",
    "floor-seq-take": "floor: take with arange indices (a perfectly local order)",
    "loader-numpy": "Loader, full shuffle",
    "loader-numpy-bg": "Loader, full shuffle, device='cpu', prefetch=2 (prefetch_mode auto)",
    "loader-grouped": "Loader, grouped shuffle",
    "loader-runs": "Loader, grouped shuffle in runs of 16 rows (run_size=16)",
}
_v, _SEQ = partial(variant, NAME, LABELS), "floor-seq-take"
VARIANTS = (
    _v("python", loop(pure_python), shuffle=None, workloads=("index",), convert=np.asarray),
    _v(BASELINE, loop(numpy_manual, gather="take"), shuffle=None),
    _v("numpy-index", loop(numpy_manual, gather="index"), shuffle=None),
    _v("numpy-epoch", loop(epoch_views), shuffle=None, workloads=("index",)),
    _v("floor-memcpy", loop(contiguous_copies, host=True, seed=False), shuffle=None),
    _v("floor-seq-take", loop(sequential_take, host=True, seed=False), shuffle=None),
    _v("loader-numpy", loop(Loader), floor=BASELINE),
    _v("loader-numpy-bg", loop(Loader, device="cpu", prefetch=2), floor=BASELINE),
    _v("loader-grouped", loop(Loader, shuffle="grouped"), shuffle="grouped", floor=_SEQ),
    _v("loader-runs", loop(Loader, shuffle="grouped", run_size=16), shuffle=None, floor=_SEQ),
    *tokens.numpy_variants(NAME),
    *grain_variants(NAME),
    *mix_variants(NAME, ("loader-mix", "hf-mix", "grain-mix"), slow=("hf-mix", "grain-mix")),
    *augment_variants(NAME),
    *bucket_variants(NAME),
)
KIT = Kit(NAME, VARIANTS)
