"""Arrow IPC files and streams in a bucket, and HF datasets saved to one: record batches as chunks.

[`bucket`][looptoolkit.stores.bucket] given the ``s3://`` URL of an ``.arrow``,
``.feather`` or ``.ipc`` object reads it as a dict of
[`RemoteArrowColumn`][looptoolkit.stores._arrow_ipc.RemoteArrowColumn]s, as a
Parquet file is read ([`looptoolkit.stores._parquet`][looptoolkit.stores._parquet]):
one HEAD a pass (its size and ETag), its record batches as the chunks (of one
length, the last maybe shorter), and each batch's bytes of the columns read (the
body's buffers of those columns, adjacent in the body) one range fetched ahead
of the order, decoded by pyarrow. Where the batches are comes from the object's
index ([`looptoolkit.stores._ipc_index`][looptoolkit.stores._ipc_index]): a
file's footer, or a walk through a stream's messages, once per object version.

Given a prefix holding a dataset saved by HF ``datasets`` (``state.json`` and its
``data-*.arrow`` streams), its files are read in the order ``state.json`` lists
them, as one table; a prefix of IPC objects without it, in key order. Each
file's last batch may be shorter (``save_to_disk`` ends each shard so).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from looptoolkit.stores import StoreArray
from looptoolkit.stores._arrow import _view
from looptoolkit.stores._bucket import Bucket, bucket_at
from looptoolkit.stores._ipc_index import batch_buffers, index_of
from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings
from looptoolkit.stores._remote_table import Files, Kept, PerProcess, RemoteColumn

__all__ = ["IPC_SUFFIXES", "RemoteArrowColumn", "arrow_columns", "arrow_dataset"]

IPC_SUFFIXES = (".arrow", ".feather", ".ipc")
# Buffers of chosen columns this close in a batch's body are fetched as one range.
GAP_BYTES = 1 << 12


def _buffers(kind: pa.DataType) -> int | None:
    """Buffers in an IPC body of a column of type ``kind`` (its children's too); None: unknown."""
    if pa.types.is_null(kind):
        return 0
    if pa.types.is_struct(kind):
        counts = [_buffers(kind.field(i).type) for i in range(kind.num_fields)]
        return None if None in counts else 1 + sum(c for c in counts if c is not None)
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = _buffers(kind.value_type)
        own = 1 if pa.types.is_fixed_size_list(kind) else 2
        return None if inner is None else own + inner
    if pa.types.is_map(kind):
        inner = _buffers(pa.struct([kind.key_field, kind.item_field]))
        return None if inner is None else 2 + inner
    t = pa.types
    if t.is_string(kind) or t.is_binary(kind) or t.is_large_string(kind) or t.is_large_binary(kind):
        return 3  # validity, offsets, values
    fixed = (t.is_boolean, t.is_integer, t.is_floating, t.is_temporal, t.is_decimal)
    if any(f(kind) for f in fixed) or t.is_fixed_size_binary(kind):
        return 2  # validity, values
    return None


class _IpcFile(PerProcess):
    """One Arrow IPC file or stream of a bucket, shared by the columns read from it."""

    chunk_name = "record batches"

    def __init__(
        self,
        bucket: Bucket,
        ref: ObjectRef,
        columns: list[str] | None,
        settings: Settings,
        cache: Any,
        *,
        stream_expected: bool = False,
    ) -> None:
        self.bucket, self.key, self.settings, self.cache = bucket, ref.key, settings, cache
        self._proc: tuple[int, Fetcher, Counters] | None = None
        self.kept = Kept()
        self.ref = ref
        where = bucket.url(ref.key)
        try:
            index = index_of(self.process()[0], ref, bucket.where, cache, stream_expected)
        except ValueError as error:
            raise ValueError(
                f"{where} {error}; the Loader reads Arrow IPC files and streams."
            ) from None
        self.schema_message = index.schema
        self.schema = pa.ipc.read_schema(pa.py_buffer(index.schema))
        self.columns = list(self.schema.names) if columns is None else list(columns)
        self.fields = [self.schema.get_field_index(name) for name in self.columns]
        if -1 in self.fields:
            missing = self.columns[self.fields.index(-1)]
            raise ValueError(f"{where} has no column {missing!r}.")
        self.batches, self.metadata = index.batches, index.metadata
        sizes = index.batches[:, 3].tolist()
        if not sizes or any(s != sizes[0] for s in sizes[:-1]) or sizes[-1] > sizes[0]:
            odd = next((i for i, s in enumerate(sizes) if s != sizes[0]), 0)
            raise ValueError(
                f"{where} has record batches of {sorted(set(sizes))} rows (batch {odd} has "
                f"{sizes[odd] if sizes else 0}); the Loader reads record batches of one length "
                "(the last may be shorter) as chunks: write it with one `max_chunksize`."
            )
        self.unit, self.rows = int(sizes[0]), int(sum(sizes))
        self.starts = np.cumsum([0, *sizes])
        self._spans: dict[int, list[tuple[int, int]]] = {}
        self.features: dict[str, tuple[int, ...]] = {}  # row shapes of list columns

    def probe(self, name: str, path: str) -> tuple[np.dtype, tuple[int, ...]] | None:
        """The dtype and row shape of a column of lists (of one length), from batch 0.

        One GET of the first batch's ranges when the columns are made; every batch
        read later is checked against it. None: not a column of lists.
        """
        kind = self.schema.field(name).type
        t = pa.types
        while t.is_fixed_size_list(kind) or t.is_list(kind) or t.is_large_list(kind):
            kind = kind.value_type
        if kind == self.schema.field(name).type or not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
        ):
            return None
        refs = self.parts(0)
        pieces = list(zip([r.start for r in refs], self.process()[0].take(refs), strict=True))
        values = self.decode(0, name, pieces)
        self.features[name] = values.shape[1:]
        return values.dtype, values.shape[1:]

    def parts(self, chunk: int) -> list[ObjectRef]:
        """The byte ranges of the chosen columns' buffers in record batch ``chunk``."""
        spans = self._spans.get(chunk)
        if spans is None:
            spans = self._spans[chunk] = self._body_spans(chunk)
        ref = self.ref
        return [ObjectRef(ref.key, b - a, ref.version, a) for a, b in spans]

    def _body_spans(self, chunk: int) -> list[tuple[int, int]]:
        offset, meta, body, _ = self.batches[chunk].tolist()
        start = offset + meta
        counts = [_buffers(field.type) for field in self.schema]
        _, buffers = batch_buffers(self.metadata[chunk])
        if None in counts or sum(c or 0 for c in counts) != len(buffers):
            return [(start, start + body)]  # a type whose buffers are not counted: all of it
        firsts = np.cumsum([0] + [c or 0 for c in counts])
        spans = []
        for f in sorted(self.fields):
            mine = [b for b in buffers[firsts[f] : firsts[f + 1]] if b[1]]
            if mine:
                spans.append((min(a for a, _ in mine), max(a + n for a, n in mine)))
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            if merged and a - merged[-1][1] <= GAP_BYTES:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [(start + a, start + b) for a, b in merged]

    def decode(self, chunk: int, name: str, pieces: list[tuple[int, bytes]]) -> np.ndarray:
        """Column ``name`` of record batch ``chunk`` from the fetched ``(start, bytes)`` ranges.

        The batch's message is its metadata (from the index) and a body holding the
        fetched ranges (zeros elsewhere: buffers of columns not read, which pyarrow is
        told to skip).
        """
        offset, meta, body_len, _ = self.batches[chunk].tolist()
        start = offset + meta
        body = bytearray(body_len)
        for at, data in pieces:
            body[at - start : at - start + len(data)] = data
        stream = pa.py_buffer(self.schema_message + self.metadata[chunk] + bytes(body))
        field = self.schema.get_field_index(name)
        options = pa.ipc.IpcReadOptions(included_fields=[field])
        batch = pa.ipc.open_stream(stream, options=options).read_next_batch()
        values = _view(batch.column(0), f"data[{name!r}]")
        shape = self.features.get(name)
        if shape is not None and values.shape[1:] != shape:
            raise ValueError(
                f"{self.bucket.url(self.key)} holds in record batch {chunk} rows of "
                f"data[{name!r}] of shape {values.shape[1:]}, where its first batch has "
                f"{shape}; the Loader batches rows of one shape."
            )
        return values


class RemoteArrowColumn(RemoteColumn):
    """One column of an Arrow IPC file or stream in a bucket; its record batches are the chunks."""

    kind = "Arrow IPC"
    what = "column"


def _url(url: str, storage_options: dict[str, Any] | None) -> tuple[Bucket, str]:
    return bucket_at(url, storage_options, "an Arrow IPC file or a saved dataset")


def arrow_columns(
    url: str,
    storage_options: dict[str, Any] | None,
    columns: list[str] | None,
    settings: Settings,
    cache_of: Any,
) -> dict[str, StoreArray]:
    """The columns of the Arrow IPC file or stream at ``url`` (a bucket's) as store leaves.

    Raises:
        ValueError: not a bucket's URL; record batches of several lengths; a column not there.
        TypeError: a column that is not numbers, booleans or fixed-length lists of them.
    """
    bucket, key = _url(url, storage_options)
    file = _IpcFile(bucket, bucket.head(key), columns, settings, cache_of(bucket))
    return {c: RemoteArrowColumn(file, c, f"data[{c!r}]") for c in file.columns}


def arrow_dataset(
    url: str,
    storage_options: dict[str, Any] | None,
    columns: list[str] | None,
    settings: Settings,
    cache_of: Any,
) -> dict[str, StoreArray] | None:
    """The columns of the IPC files under the prefix ``url`` (an HF saved dataset); None: none.

    Raises:
        ValueError: a dataset dict (its splits named); files whose columns or batches differ.
        TypeError: a column that is not numbers, booleans or fixed-length lists of them.
    """
    bucket, key = _url(url, storage_options)
    prefix = key.strip("/")
    listed = {ref.key: ref for ref in bucket.list(prefix)}
    under = f"{prefix}/" if prefix else ""
    cache = cache_of(bucket)
    state = listed.get(f"{under}state.json")
    if state is not None:  # an HF dataset: its files in the order it lists them
        fetcher = Fetcher(bucket.get, settings, Counters(), None, bucket.where)
        found = json.loads(fetcher.take([state])[0])
        keys = [under + item["filename"] for item in found["_data_files"]]
        missing = [k for k in keys if k not in listed]
        if missing:
            raise ValueError(f"{bucket.url(missing[0])} (in state.json) is not there.")
        refs = [listed[k] for k in keys]
    elif f"{under}dataset_dict.json" in listed:  # splits, each a dataset: which one?
        splits = sorted({k[len(under) :].partition("/")[0] for k in listed})
        splits = [s for s in splits if f"{under}{s}/state.json" in listed]
        raise ValueError(
            f"{url} is an HF dataset dict; pass one of its splits: "
            + ", ".join(f"{url.rstrip('/')}/{s}" for s in splits)
            + "."
        )
    else:
        refs = [listed[k] for k in sorted(listed) if k.endswith(IPC_SUFFIXES)]
    if not refs:
        return None
    stream = state is not None
    files = [_IpcFile(bucket, r, columns, settings, cache, stream_expected=stream) for r in refs]
    data = Files(bucket, prefix, files, settings, cache, whole=False)
    return {c: RemoteArrowColumn(data, c, f"data[{c!r}]") for c in data.columns}
