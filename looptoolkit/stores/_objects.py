"""Objects in a bucket named by address: Parquet files, token files.

What [`bucket`][looptoolkit.stores.bucket] calls for an ``s3://`` address: the
bucket is reached as ``storage_options`` say (and the environment, for what
they leave out), and the address opened by the module of its kind, imported
only here: Parquet files and Arrow datasets (``_parquet``), token files
(``_tokens``).
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
    offsets: Any,
    dtype: Any,
) -> Any:
    """The data at ``url``: Parquet columns (a dict of leaves), or a token file's `Ragged`.

    Raises:
        ValueError: ``url`` is not an ``s3://`` address; options of the other kind.
    """
    from looptoolkit.stores._s3 import bucket_of_options, split_url

    name, _ = split_url(url)
    bucket = bucket_of_options(name, storage_options)
    if offsets is not None:
        if columns is not None:
            raise ValueError("`columns` goes with Parquet files, not a token file (`offsets`).")
        from looptoolkit.stores._tokens import open_tokens

        return open_tokens(url, bucket, offsets, dtype, settings, cache_of)
    if dtype is not None:
        raise ValueError(
            "`dtype` goes with a token file (with `offsets`); Parquet files say their own."
        )
    if columns is not None and (
        not isinstance(columns, list | tuple) or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"`columns` must be a list of column names, got {columns!r}.")
    from looptoolkit.stores._parquet import open_parquet

    return open_parquet(url, bucket, None if columns is None else list(columns), settings, cache_of)
