"""Objects in a bucket named by address: Parquet files, array files (token files, offsets).

What [`bucket`][looptoolkit.stores.bucket] calls for an ``s3://`` address: the
bucket is reached as ``storage_options`` say (and the environment, for what
they leave out), and the address opened by the module of its kind, imported
only here: Parquet files and Arrow datasets (``_parquet``), token files
and array files (``_tokens``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from looptoolkit.stores._remote import Settings

__all__ = ["open_address"]


def open_address(
    url: str,
    *,
    settings: Settings,
    cache_of: Callable[[str], Any],
    columns: list[str] | None,
    storage_options: dict[str, Any] | None,
    dtype: Any,
) -> Any:
    """The data at ``url``: Parquet columns (a dict of leaves), or an array file.

    Raises:
        ValueError: ``url`` is not an ``s3://`` address; options of the other kind.
    """
    from looptoolkit.stores._s3 import bucket_of_options, split_url

    name, _ = split_url(url)
    bucket = bucket_of_options(name, storage_options)
    if dtype is not None or url.endswith(".npy"):
        if columns is not None:
            raise ValueError("`columns` goes with Parquet files, not an array file.")
        from looptoolkit.stores._tokens import open_file

        return open_file(url, bucket, dtype, None, settings, cache_of)
    if columns is not None and (
        not isinstance(columns, list | tuple) or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"`columns` must be a list of column names, got {columns!r}.")
    from looptoolkit.stores._parquet import open_parquet

    return open_parquet(url, bucket, None if columns is None else list(columns), settings, cache_of)
