"""A directory of Parquet files in a bucket (an Arrow dataset): one table, row groups as chunks.

[`bucket`][looptoolkit.stores.bucket] given the ``s3://``, ``gs://`` or ``az://`` URL of a
prefix (not a ``.parquet`` name) reads every ``*.parquet`` object under it, in key order, as
one table. One LIST gives the files' sizes and versions (and again at each pass:
a file rewritten since ends the pass with an error naming it), and each file's
footer is fetched once, as for one file
([`looptoolkit.stores._parquet`][looptoolkit.stores._parquet]). The dataset's
chunks are its files' row groups one after another, so they must have one size:
every file but the last holds whole row groups of that size (the last file's
last row group may be shorter), as ``Dataset.to_parquet`` or a writer with a
fixed ``row_group_size`` and files of whole row groups writes them. The columns
are the same leaves as a file's, reading through one fetcher shared by all the
files.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from looptoolkit.stores import StoreArray
from looptoolkit.stores._bucket import Bucket, bucket_at
from looptoolkit.stores._parquet import RemoteParquetColumn, _File, _Kept, _PerProcess
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings

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


class _Dataset(_PerProcess):
    """The files of a dataset as one file of row groups (what the columns read through)."""

    def __init__(
        self,
        bucket: Bucket,
        prefix: str,
        refs: list[ObjectRef],
        columns: list[str] | None,
        settings: Settings,
        cache: Any,
    ) -> None:
        self.bucket, self.prefix, self.settings, self.cache = bucket, prefix, settings, cache
        self.files = [_Listed(ref, bucket, columns, settings) for ref in refs]
        first = self.files[0]
        self.schema, self.columns, self.unit = first.schema, first.columns, first.unit
        for file in self.files[1:]:
            for name in self.columns:
                if file.schema.get_field_index(name) == -1 or not file.schema.field(
                    name
                ).type.equals(first.schema.field(name).type):
                    raise ValueError(
                        f"{bucket.url(file.key)} has no column {name!r} of type "
                        f"{first.schema.field(name).type}, which "
                        f"{bucket.url(first.key)} has: a dataset's files share their columns."
                    )
        for file in self.files[:-1]:
            if file.unit != self.unit or file.rows % self.unit:
                raise ValueError(
                    f"{bucket.url(file.key)} has {file.rows} rows in row groups of "
                    f"{file.unit}; the Loader reads a dataset's row groups as chunks of one "
                    f"size ({self.unit} rows, as the first file's): every file but the last "
                    "holds whole row groups of that size."
                )
        last = self.files[-1]
        if len(self.files) > 1 and last.unit > self.unit:
            raise ValueError(
                f"{bucket.url(last.key)} has row groups of {last.unit} rows, more than "
                f"the {self.unit} of the files before it."
            )
        counts = [-(-file.rows // self.unit) for file in self.files]
        self.first_group = np.concatenate(([0], np.cumsum(counts)))
        self.rows = sum(file.rows for file in self.files)
        self._proc: tuple[int, Fetcher, Counters] | None = None
        self.kept = _Kept()

    def relist(self) -> None:
        """List the files again (one LIST): one rewritten or gone since is refused."""
        listed = {ref.key: ref for ref in self.bucket.list(self.prefix)}
        self.process()[1].add(requests=max(1, -(-len(listed) // 1000)))
        for file in self.files:
            now = listed.get(file.key)
            if now is None or (now.size, now.version) != (file.ref.size, file.ref.version):
                raise RuntimeError(
                    f"{self.bucket.url(file.key)} changed since the Loader was made; "
                    "make a new Loader for the new files."
                )

    def _locate(self, chunk: int) -> tuple[_File, int]:
        f = int(np.searchsorted(self.first_group, chunk, side="right")) - 1
        return self.files[f], chunk - int(self.first_group[f])

    def objects(self, chunks: Any) -> list[ObjectRef]:
        """The byte ranges of the chosen columns in each row group of ``chunks``."""
        return [ref for chunk in chunks for ref in self.parts(int(chunk))]

    def parts(self, chunk: int) -> list[ObjectRef]:
        file, group = self._locate(chunk)
        return file.parts(group)

    def decode(self, chunk: int, name: str, pieces: list[tuple[int, bytes]]) -> np.ndarray:
        file, group = self._locate(chunk)
        return file.decode(group, name, pieces)


def parquet_dataset(
    url: str,
    storage_options: dict[str, Any] | None,
    columns: list[str] | None,
    settings: Settings,
    cache_of: Any,
) -> dict[str, StoreArray] | None:
    """The columns of the Parquet files under the prefix ``url`` as store leaves; None: none there.

    Raises:
        ValueError: not a bucket's URL; files whose columns or row groups differ; a column
            not there.
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
    data = _Dataset(bucket, prefix, refs, columns, settings, cache_of(bucket))
    file: Any = data  # the columns read through the dataset as through one file
    return {c: RemoteParquetColumn(file, c, f"data[{c!r}]") for c in data.columns}
