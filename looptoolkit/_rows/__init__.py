"""The rows (the data side of the data flow): what a batch's rows are read from.

- ``rows``: [`Rows`][looptoolkit._rows.rows.Rows], the rectangular data: flatten,
  check the leading lengths, group leaves by backend, gather, rebuild;
- ``records``: lists of per-sample records, refused as data, stacked by ``stack_records``;
- ``store_reads`` and ``chunk_cache``: store leaves read as whole chunks through a
  bounded cache, or as sorted rows;
- ``mapped``: memory-mapped leaves' files, checked at each pass, and read advice.
"""

from __future__ import annotations

from looptoolkit._rows.rows import Rows as Rows

__all__ = ["Rows"]
