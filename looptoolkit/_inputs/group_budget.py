"""The group of a grouped order over store data chosen from a memory budget."""

from __future__ import annotations

from typing import Any

from looptoolkit._inputs.kinds import rows_of

__all__ = ["group_size_for"]


def group_size_for(data: Any, cache_bytes: int) -> int:
    """The largest grouped-order group of ``data``'s store leaves whose reads fit ``cache_bytes``.

    The chunk cache of a grouped epoch holds two groups of chunks of every store
    leaf (the one being used and the next), plus a chunk on each side of a group
    and the buffers a read decodes into; this is the ``group_size`` (whole
    chunks, at least one) for which that stays within ``cache_bytes``. Larger
    groups mix better and need more memory (``benchmarks/order_quality.py``
    measures both); pass the result with the same ``cache_bytes``:
    ``Loader(data, b, shuffle="grouped", group_size=g, cache_bytes=c)``.

    Examples:
        >>> import zarr
        >>> from looptoolkit import group_size_for
        >>> x = zarr.create_array(zarr.storage.MemoryStore(), shape=(100_000, 64),
        ...                       chunks=(1024, 64), dtype="f4")
        >>> group_size_for({"x": x}, 32 << 20)  # rows: 46 chunks of 1,024 (256 KiB each)
        47104

    Raises:
        TypeError: ``data`` has no store leaf (zarr, HDF5, Arrow, a bucket's).
        ValueError: ``cache_bytes`` cannot hold one group of one chunk.
    """
    store = getattr(rows_of(data, 1, {}, None), "store", None)
    if store is None:
        raise TypeError("`data` has no store leaf (a zarr, HDF5 or Arrow array): no chunk groups.")
    if not isinstance(cache_bytes, int) or isinstance(cache_bytes, bool):
        raise TypeError(f"`cache_bytes` must be an int, got {type(cache_bytes).__name__}.")
    unit, leaves = store.unit, store.leaves
    row_bytes = sum(leaf.row_bytes for leaf in leaves)
    # plan_reads' need for a group of g rows, twice (the default cache), solved for g.
    fixed = sum(
        2 * (leaf.chunk_rows or unit) * leaf.row_bytes + leaf.transient_bytes() for leaf in leaves
    )
    chunks = (cache_bytes // 2 - fixed) // max(1, row_bytes * unit)
    if chunks < 1:
        one = 2 * (fixed + unit * row_bytes)
        raise ValueError(
            f"`cache_bytes` ({cache_bytes}) cannot hold two groups of one chunk of every store "
            f"leaf ({one} bytes, chunks of {unit} rows)."
        )
    return int(min(chunks * unit, -(-store.n // unit) * unit))
