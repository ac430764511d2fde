"""Rows: the data side of the Loader, gathered a batch at a time.

Between the order and the transfer in the data flow: [`Rows`][looptoolkit._rows.rows.Rows] flattens
the user's ``data`` once, checks it (every leaf an array with the same leading
dimension, named by key path when not), groups the leaves by backend, and for
each batch of indices from [`looptoolkit.order`][looptoolkit.order] makes one gather call per
backend, then rebuilds the data's containers around the gathered leaves. The
batch goes on to [`looptoolkit.to_device`][looptoolkit.to_device] (or straight to the loop).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import optree

from looptoolkit._rows.mapped import MappedFiles
from looptoolkit._rows.records import find_records, kind_of
from looptoolkit._rows.store_reads import StoreReads
from looptoolkit.adapters import backend_of, is_batched_node
from looptoolkit.device import _tree as _tree
from looptoolkit.stores import StoreArray, is_store_type
from looptoolkit.stores import wrap as wrap_store

__all__ = ["Rows"]


def merge(
    n: int, parts: Sequence[tuple[Sequence[int], Iterator[list[Any]]]]
) -> Iterator[list[Any]]:
    """Zip per-group batches back into one list of leaves in the data's order."""
    positions = [p for p, _ in parts]
    for chunks in zip(*(g for _, g in parts), strict=True):
        out: list[Any] = [None] * n
        for where, chunk in zip(positions, chunks, strict=True):
            for i, value in zip(where, chunk, strict=True):
                out[i] = value
        yield out


def expand_stores(data: Any) -> Any:
    """``data`` with each store object as what the Loader reads: a StoreArray, or a dict of them.

    Raises:
        TypeError: a store-like object that is not supported (named, with what to pass).
    """
    leaves, spec = _tree.flatten(data)
    found = [i for i, leaf in enumerate(leaves) if is_store_type(type(leaf))]
    if not found:
        return data
    paths = _tree.leaf_paths(spec, "data")
    for i in found:
        leaves[i] = wrap_store(leaves[i], paths[i])
    return spec.unflatten(leaves)


def chunk_unit(stores: Sequence[StoreArray]) -> int:
    """Rows per chunk of the order over these store leaves.

    The largest chunk of the leaves that have chunks of their own, so that each
    of them has its chunks read once per epoch when its chunk size divides that
    one (a leaf whose chunks do not divide it has a chunk on a group boundary
    read twice); without such leaves, the fixed block of the widest leaf. Leaves
    without chunks of their own are read in blocks of this size.
    """
    own = [leaf.chunk_rows for leaf in stores if leaf.chunk_rows is not None]
    if own:
        return max(own)
    return min(leaf.block_rows() for leaf in stores)


class Rows:
    """The data side of a Loader: a flattened pytree, gathered a batch at a time.

    Flattens ``data`` once, checks it, groups the leaves by backend, and builds
    batches: one backend call per group per batch, then the data's containers
    around the gathered leaves. Shared by [`Loader`][looptoolkit.Loader] and
    [`GetItemsDataset`][looptoolkit.GetItemsDataset]; not part of the public API.

    Raises:
        ValueError: an empty pytree, a 0-d leaf, no rows, leaves of different
            leading dimensions (both named, with their sizes).
        TypeError: a leaf that is not an array (named by its key path); a list of
            per-sample records (see [`looptoolkit._rows.records`][looptoolkit._rows.records]).
    """

    def __init__(self, data: Any) -> None:
        data = expand_stores(data)
        self.data = data  # as given, with store objects as StoreArrays (picklable)
        leaves, spec = _tree.flatten(data)
        records = find_records(spec, leaves)
        if records is not None:
            raise TypeError(records)
        self.n = self._check(leaves, spec)
        self.stats: Any = None  # the Loader's LoaderStats, where it keeps them
        self.leaves: list[Any] = leaves
        # The files of memmap leaves, checked at the start of each pass.
        self.files = MappedFiles(leaves, lambda: _tree.leaf_paths(spec, "data"))
        self.spec: optree.PyTreeSpec = spec
        self._data_keys = tuple(data) if type(data) is dict else ()
        groups: dict[str, tuple[Any, list[int]]] = {}
        stores = [leaf for leaf in leaves if isinstance(leaf, StoreArray)]
        # The store leaves' reads, and the rows per chunk of an order that visits
        # their chunks whole (None: no store leaf).
        self.chunk_rows: int | None = chunk_unit(stores) if stores else None
        self.store: StoreReads | None = None
        if stores:
            assert self.chunk_rows is not None
            self.store = StoreReads(stores, self.n, self.chunk_rows)
        for i, leaf in enumerate(leaves):
            backend = self.store if isinstance(leaf, StoreArray) else backend_of(leaf)
            assert backend is not None  # checked above
            groups.setdefault(backend.name, (backend, []))[1].append(i)
        # (backend, positions in `leaves`, those leaves)
        self.groups = [(b, p, [leaves[i] for i in p]) for b, p in groups.values()]
        self.backends = sorted(groups)
        # A TensorDict records its batch size, so the batch's containers depend on
        # the batch's length: then one spec per length, made on first use.
        nodes, outer = optree.tree_flatten(
            data, is_leaf=is_batched_node, none_is_leaf=True, namespace=_tree.NAMESPACE
        )
        self._batched = (nodes, outer) if any(map(is_batched_node, nodes)) else None
        self._specs: dict[int, optree.PyTreeSpec] = {}

    @staticmethod
    def _check(leaves: list[Any], spec: optree.PyTreeSpec) -> int:
        if not leaves:
            raise ValueError("`data` must hold at least one array, got an empty pytree.")
        paths: list[str] = []
        first: tuple[str, int] | None = None
        for i, leaf in enumerate(leaves):
            backend: Any = leaf if isinstance(leaf, StoreArray) else backend_of(leaf)
            if backend is None or len(getattr(leaf, "shape", ())) == 0:
                paths = paths or _tree.leaf_paths(spec, "data")
                if backend is None:
                    raise TypeError(
                        f"`data` must hold only arrays; {paths[i]} is a {kind_of(leaf)}."
                    )
                raise ValueError(
                    f"`data` leaves need a leading (sample) dimension; {paths[i]} is 0-d."
                )
            size = len(leaf) if backend is leaf else int(backend.length(leaf))
            if first is None:
                paths = paths or _tree.leaf_paths(spec, "data")
                first = (paths[i], size)
            elif size != first[1]:
                raise ValueError(
                    f"`data` leaves must share the leading dimension; {first[0]} has "
                    f"{first[1]} rows and {paths[i]} has {size}."
                )
        assert first is not None
        if first[1] == 0:
            raise ValueError("`data` must have at least one row, got leaves of length 0.")
        return first[1]

    def spec_for(self, length: int) -> optree.PyTreeSpec:
        """The treespec of a batch of ``length`` rows."""
        if self._batched is None:
            return self.spec
        spec = self._specs.get(length)
        if spec is None:
            nodes, outer = self._batched
            sliced = [x[:length] if is_batched_node(x) else x for x in nodes]
            spec = self._specs[length] = _tree.flatten(outer.unflatten(sliced))[1]
        return spec

    @property
    def batched(self) -> bool:
        """Whether a batch's containers depend on its length (batched nodes: TensorDicts)."""
        return self._batched is not None

    def build(self, leaves: Sequence[Any]) -> Any:
        """The batch: the data's containers around gathered leaves."""
        if self._batched is None:
            return self.spec.unflatten(leaves)
        return self.spec_for(int(leaves[0].shape[0])).unflatten(leaves)

    def built(self, gathered: Iterator[Sequence[Any]]) -> Iterator[Any]:
        """The batches of gathered leaf sequences, built by C-level iterators where possible.

        A single array is its one leaf, a plain dict of arrays (the common batch)
        is rebuilt with ``dict(zip(...))`` in its insertion order, a tuple or list
        of arrays with its constructor, anything else by the treespec:
        ``PyTreeSpec.unflatten`` costs twice as much per batch as
        ``dict(zip(...))``, as much as a tenth of a 300-row gather.
        """
        spec = self.spec
        if self._batched is None and spec.is_leaf():
            return map(operator.itemgetter(0), gathered)
        if self._batched is None and spec.num_nodes == spec.num_leaves + 1:
            kind = spec.type
            if kind is dict and self._data_keys:
                keys = list(self._data_keys)  # insertion order; leaves come sorted
                position = {key: i for i, key in enumerate(spec.entries())}
                if [position[k] for k in keys] != list(range(len(keys))):
                    reorder = operator.itemgetter(*(position[k] for k in keys))
                    gathered = map(reorder, gathered)
                return map(dict, map(zip, itertools.repeat(keys), gathered))
            if kind is tuple:
                return map(tuple, gathered)
            if kind is list:
                return map(list, gathered)
        build: Callable[[Sequence[Any]], Any] = (
            spec.unflatten if self._batched is None else self.build
        )
        return map(build, gathered)

    def gather(
        self,
        batches: Iterator[np.ndarray],
        staged: tuple[Sequence[int], Callable[[Iterator[np.ndarray]], Iterator[list[Any]]]]
        | None = None,
    ) -> Iterator[list[Any]]:
        """Gathered leaf lists (in the data's leaf order) for each index array.

        ``staged``: ``(positions, gather)``, leaves gathered by a backend's staged
        upload instead (``gather`` maps the index arrays to their lists).
        """
        groups = self.groups
        if staged is None and len(groups) == 1:
            backend, _, leaves = groups[0]
            return backend.take_batches(leaves, batches)
        if staged is not None and list(staged[0]) == list(range(len(self.leaves))):
            return staged[1](batches)  # every leaf staged, in the data's order: nothing to merge
        if staged is not None:
            skip = set(staged[0])
            groups = []
            for backend, positions, leaves in self.groups:
                rest = [(i, x) for i, x in zip(positions, leaves, strict=True) if i not in skip]
                if rest:
                    groups.append((backend, [i for i, _ in rest], [x for _, x in rest]))
        copies = itertools.tee(batches, len(groups) + (staged is not None))
        parts: list[tuple[Sequence[int], Iterator[list[Any]]]] = [
            (positions, backend.take_batches(leaves, copy))
            for (backend, positions, leaves), copy in zip(groups, copies, strict=False)
        ]
        if staged is not None:
            parts.append((staged[0], staged[1](copies[-1])))
        return merge(len(self.leaves), parts)

    def take(self, idx: np.ndarray, leaf_fn: Callable[[Any], Any] | None = None) -> Any:
        """The batch of rows ``idx``; ``leaf_fn`` applied to each gathered leaf first."""
        out: list[Any] = [None] * len(self.leaves)
        for backend, positions, leaves in self.groups:
            for i, value in zip(positions, backend.take(leaves, idx), strict=True):
                out[i] = value
        if leaf_fn is not None:
            out = list(map(leaf_fn, out))
        return self.build(out)

    def row(self, i: int) -> Any:
        """Row ``i`` (negative counts from the end), without its batch dimension."""
        if not -self.n <= i < self.n:
            raise IndexError(f"index {i} is out of range for {self.n} rows.")
        if self._batched is None:
            return self.spec.unflatten([leaf[i] for leaf in self.leaves])
        nodes, outer = self._batched
        return outer.unflatten([x[i] for x in nodes])
