"""The ``mix`` workload's loops: the tabular rows split into sources, mixed by weight.

The rows ``[0, N)`` are cut into consecutive sources, each its weight's share of the rows
(`bounds`), so a row's id says its source and one mixed epoch of ``N`` positions gives each
source's rows once. Each mixture (`MIXES`) is timed as ``Loader(Mix(...))`` and as the peers
(torchdata ``MultiNodeWeightedSampler``, HF ``interleave_datasets``, tf.data
``sample_from_datasets``, grain ``MapDataset.mix``), each only where installed. Every peer mixes
row ids and gathers each batch's rows with one call per leaf, the fastest way each one offers;
the torchdata and tf.data streams go on across the harness's epochs of ``N / B`` batches,
every source in its own shuffled order, a new one each time the source runs out; HF and grain
build each epoch's mixture anew (their way to a new order), and that is timed with the epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import count, islice, pairwise
from typing import Any

import numpy as np

from looptoolkit.bench.variants import Variant, loop
from looptoolkit.bench.variants.epochs import EpochPipeline
from looptoolkit.order._order import batch_count

__all__ = ["MIXES", "bounds", "mix_loader", "mix_variants", "source_of", "weights_of"]

MIXES: dict[str, tuple[float, ...]] = {
    "2": (0.7, 0.3),
    "5": (0.4, 0.25, 0.15, 0.12, 0.08),
}
"""The mixtures timed: name -> the weights of its sources (each source that share of the rows)."""

REFERENCE = "loader-numpy"
"""The plain Loader over the same rows: what a mixture's Loader row is judged against."""


def weights_of(mix: str) -> tuple[float, ...]:
    """The weights of mixture ``mix`` (`MIXES`), normalised to sum to 1."""
    w = np.asarray(MIXES[mix], dtype=np.float64)
    return tuple((w / w.sum()).tolist())


def bounds(n: int, weights: tuple[float, ...]) -> np.ndarray:
    """The sources' first rows and the end: source ``i`` is rows ``[b[i], b[i + 1])``.

    Each source holds ``floor(weight * n)`` rows, the last one the rest.

    Examples:
        >>> bounds(3000, (0.7, 0.3)).tolist()
        [0, 2100, 3000]
    """
    sizes = np.floor(np.asarray(weights) * n + 1e-9).astype(np.int64)
    sizes[-1] = n - sizes[:-1].sum()
    if (sizes < 1).any():
        raise ValueError(f"{n} rows are too few for sources of weights {weights}.")
    return np.concatenate([[0], np.cumsum(sizes)])


def source_of(ids: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The source of each row id (`bounds` ``edges``)."""
    return np.searchsorted(edges, ids, side="right") - 1


def _sources(data: dict[str, np.ndarray], edges: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """The sources as dicts of row slices (views) of ``data``, named ``s0``, ``s1``, ..."""
    return {
        f"s{i}": {key: leaf[a:b] for key, leaf in data.items()}
        for i, (a, b) in enumerate(pairwise(edges.tolist()))
    }


def _rows(data: Any) -> int:
    return len(next(iter(data.values())))


def mix_loader(data: dict[str, Any], batch_size: int, *, mix: str, seed: int = 0) -> Any:
    """``Loader(Mix(sources, weights=...), batch_size, seed=seed)`` over the split rows."""
    from looptoolkit import Loader, Mix

    w = weights_of(mix)
    sources = _sources(data, bounds(_rows(data), w))
    return Loader(Mix(sources, weights=dict(zip(sources, w, strict=True))), batch_size, seed=seed)


class SourceOrder:
    """The global row ids of one source, a new permutation on every pass (its own epochs)."""

    def __init__(self, start: int, stop: int, seed: int, source: int) -> None:
        self.start, self.size = start, stop - start
        self._rng, self._epochs = np.random.default_rng([seed, source]), count()

    def __iter__(self) -> Iterator[int]:
        next(self._epochs)
        return iter((self._rng.permutation(self.size) + self.start).tolist())


def _epochs(stream: Iterator[Any], n: int, batch_size: int, name: str) -> EpochPipeline:
    """A never-ending stream of batches as the harness's epochs of ``n / batch_size`` batches."""
    length = batch_count(n, batch_size)
    return EpochPipeline(lambda _: islice(stream, length), length, name=name)


def _per_epoch(
    epoch_fn: Callable[[int], Iterator[Any]], n: int, batch_size: int, name: str
) -> EpochPipeline:
    """Epochs built one at a time (``epoch_fn(e)``), each its first ``n / batch_size`` batches."""
    length = batch_count(n, batch_size)
    return EpochPipeline(lambda e: islice(epoch_fn(e), length), length, name=name)


def _orders(n: int, mix: str, seed: int) -> tuple[tuple[float, ...], list[SourceOrder]]:
    w = weights_of(mix)
    edges = bounds(n, w).tolist()
    return w, [SourceOrder(a, b, seed, i) for i, (a, b) in enumerate(pairwise(edges))]


# -- the peers --------------------------------------------------------------------------------


def torchdata_mix(data: dict[str, Any], batch_size: int, *, mix: str, seed: int = 0) -> Any:
    """torchdata: ``MultiNodeWeightedSampler`` over each source's ids, ``Batcher``, a gather.

    Each source is an ``IterableWrapper`` of its ids (a new permutation each time the sampler
    starts it again, ``CYCLE_FOREVER``); each batch of ids becomes rows with one
    ``index_select`` per leaf (torch data).
    """
    import torch
    from torchdata.nodes import Batcher, IterableWrapper, Mapper, MultiNodeWeightedSampler
    from torchdata.nodes.samplers.stop_criteria import StopCriteria

    n = _rows(data)
    w, orders = _orders(n, mix, seed)
    nodes = {f"s{i}": IterableWrapper(order) for i, order in enumerate(orders)}
    weights = dict(zip(nodes, w, strict=True))
    sampler = MultiNodeWeightedSampler(
        nodes, weights, StopCriteria.CYCLE_FOREVER, rank=0, world_size=1, seed=seed
    )
    items = list(data.items())

    def gather(ids: list[int]) -> dict[str, Any]:
        idx = torch.tensor(ids)
        return {key: torch.index_select(x, 0, idx) for key, x in items}

    node = Mapper(Batcher(sampler, batch_size, drop_last=False), gather)
    node.reset()
    return _epochs(iter(node), n, batch_size, f"torchdata_mix[{mix}]")


def hf_mix(data: dict[str, np.ndarray], batch_size: int, *, mix: str, seed: int = 0) -> Any:
    """HF datasets: ``interleave_datasets(shuffled sources, probabilities, seed)``, NumPy batches.

    Each source is a ``Dataset`` of its ids; each epoch, each source is shuffled
    (``Dataset.shuffle``), the sources interleaved (``stopping_strategy="all_exhausted"``: a
    source that runs out starts over, in the same order) and read in batches of ids
    (``.iter(batch_size)``, NumPy format), whose rows one ``take`` per leaf gathers. The epoch
    is its first ``N / B`` batches; building it (0.75 s at 300,000 rows) is part of its time.
    """
    import datasets

    n = _rows(data)
    w, orders = _orders(n, mix, seed)
    sources = [
        datasets.Dataset.from_dict({"id": np.arange(o.start, o.start + o.size)}) for o in orders
    ]
    items = list(data.items())

    def epoch_fn(e: int) -> Iterator[dict[str, np.ndarray]]:
        shuffled = [s.shuffle(seed=seed * 1000 + 10 * e + i) for i, s in enumerate(sources)]
        mixed = datasets.interleave_datasets(
            shuffled, probabilities=list(w), seed=seed * 1000 + e,
            stopping_strategy="all_exhausted",
        )  # fmt: skip
        for batch in mixed.with_format("numpy").iter(batch_size):
            ids = batch["id"]
            yield {key: x.take(ids, axis=0) for key, x in items}

    return _per_epoch(epoch_fn, n, batch_size, f"hf_mix[{mix}]")


def tf_mix(data: dict[str, Any], batch_size: int, *, mix: str, seed: int = 0) -> Any:
    """tf.data: ``sample_from_datasets`` of each source's ids (shuffled, repeated), a gather.

    ``Dataset.range(a, b).shuffle(b - a, reshuffle_each_iteration=True).repeat()`` per source,
    ``sample_from_datasets(weights, seed)``, ``.batch(B)``, ``.map(tf.gather per leaf)`` (tf
    data). No ``prefetch``: in an interleaved run a prefetching pipeline works on while the
    other loops are timed (its buffer filled between rounds flattered it 40x and slowed them).
    """
    import tensorflow as tf

    n = _rows(data)
    w, orders = _orders(n, mix, seed)
    parts = [
        tf.data.Dataset.range(o.start, o.start + o.size)
        .shuffle(o.size, seed=seed * 1000 + i, reshuffle_each_iteration=True)
        .repeat()
        for i, o in enumerate(orders)
    ]
    mixed = tf.data.Dataset.sample_from_datasets(parts, weights=list(w), seed=seed)
    items = list(data.items())
    ds = mixed.batch(batch_size).map(lambda ids: {key: tf.gather(x, ids) for key, x in items})
    return _epochs(iter(ds), n, batch_size, f"tf_mix[{mix}]")


def grain_mix(data: dict[str, np.ndarray], batch_size: int, *, mix: str, seed: int = 0) -> Any:
    """grain: ``MapDataset.mix`` of each source's ids (shuffled per pass), ``batch``, a gather.

    Each epoch: ``MapDataset.source(ids).shuffle(seed)`` per source, ``MapDataset.mix(sources,
    weights)`` (it ends when the first source does), ``.batch(B)`` read by index; one ``take``
    per leaf gathers each batch's rows.
    """
    import grain

    n = _rows(data)
    w, orders = _orders(n, mix, seed)
    ids = [np.arange(o.start, o.start + o.size) for o in orders]
    items = list(data.items())

    def epoch_fn(e: int) -> Iterator[dict[str, np.ndarray]]:
        parts = [
            grain.MapDataset.source(x).shuffle(seed=seed * 1000 + 10 * e + i)
            for i, x in enumerate(ids)
        ]
        mixed = grain.MapDataset.mix(parts, weights=list(w)).batch(batch_size)
        for b in range(len(mixed)):  # by index: no read-ahead threads between rounds
            rows = np.asarray(mixed[b])
            yield {key: x.take(rows, axis=0) for key, x in items}

    return _per_epoch(epoch_fn, n, batch_size, f"grain_mix[{mix}]")


_WEIGHTS = {name: "/".join(f"{x:g}" for x in w) for name, w in MIXES.items()}
_LABELS: dict[str, tuple[str, Callable[..., Any], str | None]] = {
    "loader-mix": ("Loader(Mix(sources, weights={w}))", mix_loader, None),
    "torchdata-mix": (
        "torchdata.nodes: MultiNodeWeightedSampler(weights={w}, CYCLE_FOREVER) of the sources' "
        "ids, Batcher, index_select per leaf",
        torchdata_mix,
        "torchdata",
    ),
    "hf-mix": (
        "HF datasets: interleave_datasets(shuffled sources of ids, probabilities={w}, seed, "
        "all_exhausted), .iter(B) in NumPy, take per leaf",
        hf_mix,
        "datasets",
    ),
    "tf-mix": (
        "tf.data: sample_from_datasets(range.shuffle.repeat per source, weights={w}), "
        ".batch(B).map(tf.gather per leaf), no prefetch",
        tf_mix,
        None,
    ),
    "grain-mix": (
        "grain: MapDataset.mix(source(ids).shuffle per source, weights={w}).batch(B), take per "
        "leaf",
        grain_mix,
        "grain",
    ),
}


def mix_variants(backend: str, kinds: tuple[str, ...], slow: tuple[str, ...] = ()) -> tuple:
    """The ``kinds`` of mixture loop (`_LABELS` keys) of ``backend``, one per mixture of `MIXES`.

    ``slow``: those checked on their first batches and timed on a bounded number of them. A
    Loader row is judged against the plain Loader over the same rows (`REFERENCE`).
    """
    out = []
    for kind in kinds:
        label, fn, needs = _LABELS[kind]
        for mix in MIXES:
            text = f"{label.format(w=_WEIGHTS[mix])}, {len(MIXES[mix])} sources"
            floor = REFERENCE if kind == "loader-mix" else None
            out.append(
                Variant(
                    f"{kind}{mix}", backend, text, loop(fn, mix=mix),
                    shuffle=None, workloads=("mix",), slow=kind in slow, floor=floor,
                    needs=(needs,) if needs else (), mix=mix,
                )
            )  # fmt: skip
    return tuple(out)
