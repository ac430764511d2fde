"""Parquet files in a bucket: row groups as chunks, each fetched as one byte range.

A Parquet file at ``s3://`` ([`bucket`][looptoolkit.stores.bucket] given its URL)
becomes a dict of [`RemoteParquetColumn`][looptoolkit.stores._parquet.RemoteParquetColumn]s,
one per numeric column read. The file's size and version come from one HEAD (again at each pass),
its footer from one ranged GET; a row group is a chunk of the Loader's reads,
and the bytes of the chosen columns in it (adjacent in the file) are one range,
fetched ahead of the order by a [`Fetcher`][looptoolkit.stores._remote.Fetcher]
shared by the file's columns, and decoded by pyarrow from those bytes alone.
Row groups must have one size (the last may be shorter).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from looptoolkit.stores import StoreArray
from looptoolkit.stores._arrow import _view
from looptoolkit.stores._bucket import Bucket, bucket_at
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings
from looptoolkit.stores._remote_table import Kept, PerProcess, RemoteColumn, Sparse

__all__ = ["RemoteParquetColumn", "parquet_columns"]

# Bytes of the file's end fetched first: the footer, in one request for most files.
FOOTER_GUESS = 1 << 16
# Chosen columns' chunks of a row group this close are fetched as one range (the bytes
# between fetched too); farther apart, as ranges of their own (another column between).
GAP_BYTES = 1 << 12


class _File(PerProcess):
    """One Parquet file of a bucket, shared by the columns read from it."""

    chunk_name = "row groups"

    def __init__(
        self, bucket: Bucket, key: str, columns: list[str] | None, settings: Settings, cache: Any
    ) -> None:
        self.bucket, self.key, self.settings, self.cache = bucket, key, settings, cache
        self._proc: tuple[int, Fetcher, Counters] | None = None
        self.kept = Kept()
        self.ref = self._listed()
        self.footer = self._footer()
        import pyarrow.parquet as pq

        self.metadata = pq.read_metadata(Sparse(self.ref.size, [self.footer]))
        schema = self.metadata.schema.to_arrow_schema()
        self.columns = list(schema.names) if columns is None else list(columns)
        meta = self.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if not sizes or any(s != sizes[0] for s in sizes[:-1]) or sizes[-1] > sizes[0]:
            raise ValueError(
                f"{bucket.url(key)} has row groups of {sorted(set(sizes))} rows; the "
                "Loader reads row groups of one size (the last may be shorter) as chunks."
            )
        self.unit, self.rows = sizes[0], sum(sizes)
        self.starts = np.cumsum([0, *sizes])
        self.schema = schema
        where = [schema.get_field_index(name) for name in self.columns]
        if -1 in where:
            missing = self.columns[where.index(-1)]
            raise ValueError(f"{bucket.url(key)} has no column {missing!r}.")
        leaf = meta.schema
        names = [leaf.column(j).path.split(".")[0] for j in range(meta.num_columns)]
        self.leaf_columns = [j for j, name in enumerate(names) if name in self.columns]

    def _listed(self) -> ObjectRef:
        return self.bucket.head(self.key)

    def _footer(self) -> tuple[int, bytes]:
        """The file's end, holding its footer (``(offset, bytes)``)."""
        fetcher = self.process()[0]
        size = self.ref.size
        start = max(0, size - FOOTER_GUESS)
        data = fetcher.take([ObjectRef(self.ref.key, size - start, self.ref.version, start)])[0]
        length = int.from_bytes(data[-8:-4], "little") + 8
        if length > len(data):  # a footer larger than the guess: fetch the whole of it
            start = size - length
            part = ObjectRef(self.ref.key, length, self.ref.version, start)
            data = fetcher.take([part])[0]
        return start, data

    def parts(self, chunk: int) -> list[ObjectRef]:
        """The byte ranges of the chosen columns in row group ``chunk``: adjacent ones as one."""
        group = self.metadata.row_group(chunk)
        spans = []
        for j in self.leaf_columns:
            column = group.column(j)
            start = column.data_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset:
                start = min(start, column.dictionary_page_offset)
            spans.append((start, start + column.total_compressed_size))
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            if merged and a - merged[-1][1] <= GAP_BYTES:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [ObjectRef(self.ref.key, b - a, self.ref.version, a) for a, b in merged]

    def decode(self, chunk: int, name: str, pieces: list[tuple[int, bytes]]) -> np.ndarray:
        """Column ``name`` of row group ``chunk`` from the fetched ``(start, bytes)`` ranges."""
        import pyarrow.parquet as pq

        source = Sparse(self.ref.size, [*pieces, self.footer])
        table = pq.ParquetFile(source, metadata=self.metadata).read_row_group(chunk, columns=[name])
        return _view(table.column(0).combine_chunks(), name)


class RemoteParquetColumn(RemoteColumn):
    """One numeric column of a Parquet file in a bucket; its row groups are the chunks."""

    kind = "parquet"
    what = "Parquet column"


def parquet_columns(
    url: str,
    storage_options: dict[str, Any] | None,
    columns: list[str] | None,
    settings: Settings,
    cache_of: Any,
) -> dict[str, StoreArray]:
    """The numeric columns of the Parquet file at ``url`` (``s3://bucket/key``) as store leaves.

    Raises:
        ValueError: not a bucket's URL; row groups of several sizes; a column not there.
        TypeError: a column that is not numeric or boolean.
    """
    bucket, key = bucket_at(url, storage_options, "a Parquet file")
    file = _File(bucket, key, columns, settings, cache_of(bucket))
    return {c: RemoteParquetColumn(file, c, f"data[{c!r}]") for c in file.columns}
