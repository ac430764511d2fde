"""A directory of Parquet files in a bucket (an Arrow dataset): one table, row groups as chunks.

[`bucket`][looptoolkit.stores.bucket] given the ``s3://`` URL of a prefix (not a
``.parquet`` name) reads every ``*.parquet`` object under it, in key order, as
one table. One LIST gives the files' sizes and versions (and again at each pass:
a file rewritten since ends the pass with an error naming it), and each file's
footer is fetched once, as for one file
([`looptoolkit.stores._parquet`][looptoolkit.stores._parquet]); the files are
read as one ([`Files`][looptoolkit.stores._remote_table.Files]). The dataset's
chunks are its files' row groups one after another, so they must have one size:
every file but the last holds whole row groups of that size (the last file's
last row group may be shorter), as ``Dataset.to_parquet`` or a writer with a
fixed ``row_group_size`` and files of whole row groups writes them. The columns
are the same leaves as a file's, reading through one fetcher shared by all the
files.
"""

from __future__ import annotations

from typing import Any

from looptoolkit.stores import StoreArray
from looptoolkit.stores._bucket import Bucket, bucket_at
from looptoolkit.stores._parquet import RemoteParquetColumn, _File
from looptoolkit.stores._remote import ObjectRef, Settings
from looptoolkit.stores._remote_table import Files

__all__ = ["parquet_dataset"]


class _Listed(_File):
    """A file of a dataset: its size and version as the dataset's LIST gave them (no HEAD)."""

    def __init__(
        self, ref: ObjectRef, bucket: Bucket, columns: list[str] | None, settings: Settings
    ) -> None:
        self._given = ref
        super().__init__(bucket, ref.key, columns, settings, None)

    def _listed(self) -> ObjectRef:
        return self._given


def parquet_dataset(
    url: str,
    storage_options: dict[str, Any] | None,
    columns: list[str] | None,
    settings: Settings,
    cache_of: Any,
) -> dict[str, StoreArray] | None:
    """The columns of the Parquet files under the prefix ``url`` as store leaves; None: none there.

    Raises:
        ValueError: files whose columns or row groups differ; a column not there.
        TypeError: a column that is not numbers, booleans or fixed-size lists of them.
    """
    bucket, key = bucket_at(url, storage_options, "Parquet files")
    prefix = key.strip("/")
    refs = sorted(
        (ref for ref in bucket.list(prefix) if ref.key.endswith(".parquet")),
        key=lambda ref: ref.key,
    )
    if not refs:
        return None
    files = [_Listed(ref, bucket, columns, settings) for ref in refs]
    data = Files(bucket, prefix, files, settings, cache_of(bucket), whole=True)
    file: Any = data  # the columns read through the dataset as through one file
    return {c: RemoteParquetColumn(file, c, f"data[{c!r}]") for c in data.columns}
