"""Where the record batches of an Arrow IPC file or stream in a bucket are: its index.

An IPC message is a continuation marker (``0xFFFFFFFF``), an int32 length, a
flatbuffer ``Message`` of that length (its kind, its body's length; a record
batch's rows and the body's buffers) and the body. A *file* (Feather v2,
``ARROW1`` at both ends) ends in a footer listing each record batch's place
(offset, metadata length, body length); a *stream* (what HF ``datasets`` writes
with ``save_to_disk``) has no footer: a batch's place is known only from the
message before it.

The index of an object (its schema message, and each batch's place, rows and
metadata) is built once per object version in a process, kept in memory, and
in the disk cache where one is given (keyed by the object's ETag):

- a file: one ranged GET of its end (the footer, ``TAIL_BYTES``), then the
  batches' metadata, all at once (as many requests in flight as the fetcher
  allows): neighbours less than ``READ_THROUGH`` apart in one range of at most
  ``WINDOW`` bytes, so a file of small batches is read in ranges of ``WINDOW``;
- a stream: its start (``TAIL_BYTES``: the schema, the first batch's header),
  then message after message. After a batch under ``READ_THROUGH`` bytes the
  stream is read through in ranges of ``WINDOW`` (about size / 4 MiB requests);
  after a larger one, by a GET of the next batch's header alone
  (``HEADER_BYTES``): one request a batch, one after the other.

Chosen by the cost of a request against its bytes. Measured on the local S3
server (``looptoolkit.bench.s3local``, 2 cores, one GET at a time): a ranged GET
took 35-37 ms from 4 KiB to 1 MiB, 40 ms for 4 MiB and 52 ms for 16 MiB (with
20 ms of latency added: 56, 58, 61 and 69 ms): a request costs what megabytes
do. On S3 (20-50 ms to the first byte, 50-100 MB/s a connection) a request is
worth 1-5 MB, so messages under 1 MiB are read through (never dearer than the
header GETs it saves), larger ones header by header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from looptoolkit.stores._remote import ObjectRef

__all__ = ["Index", "index_of"]

MAGIC = b"ARROW1"
TAIL_BYTES = 1 << 16  # the first GET: a file's end (its footer), a stream's start
READ_THROUGH = 1 << 20  # messages smaller than this are read through, not header by header
WINDOW = 4 << 20  # a range read through
HEADER_BYTES = 1 << 12  # a GET of one message's header (more where its metadata is longer)
_SCHEMA, _DICTIONARY, _RECORD_BATCH = 1, 2, 3
_VERSION = b"ltipcix1"  # the disk cache's entry format
_NOT_IPC = "is not an Arrow IPC file or stream (no schema message where one begins)"

# This process's indexes: (address, key, size, version) -> Index.
_MEMORY: dict[tuple[str, str, int, str], Index] = {}


@dataclass
class Index:
    """An IPC object's schema message and its record batches.

    Attributes:
        schema: the schema message (prefix, metadata; no body), as pyarrow reads it.
        batches: int64 ``(n, 4)``: each batch's offset, metadata bytes (with the
            prefix), body bytes and rows.
        metadata: each batch's message metadata (with the prefix), to decode its body.
        stream: whether the object is a stream (else a file).
        requests: the GETs that built it (0: it came from memory or the disk cache).
    """

    schema: bytes
    batches: np.ndarray
    metadata: list[bytes]
    stream: bool
    requests: int = 0

    def to_bytes(self) -> bytes:
        head = struct.pack("<8sqqq", _VERSION, len(self.batches), len(self.schema), self.stream)
        table = np.ascontiguousarray(self.batches, dtype="<i8").tobytes()
        return head + self.schema + table + b"".join(self.metadata)

    @classmethod
    def from_bytes(cls, data: bytes) -> Index | None:
        version, n, schema_len, stream = struct.unpack_from("<8sqqq", data)
        if version != _VERSION:
            return None
        at = 32 + schema_len
        batches = np.frombuffer(data, dtype="<i8", count=4 * n, offset=at).reshape(n, 4)
        at += 32 * n
        metadata = []
        for length in batches[:, 1].tolist():
            metadata.append(data[at : at + length])
            at += length
        return cls(data[32 : 32 + schema_len], batches.astype(np.int64), metadata, bool(stream))


class _Table:
    """A flatbuffer table at ``pos`` of ``buf``: its fields by their number."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vtable_len = struct.unpack_from("<H", buf, self.vtable)[0]

    def _at(self, field: int) -> int:
        slot = 4 + 2 * field
        if slot >= self.vtable_len:
            return 0
        off: int = struct.unpack_from("<H", self.buf, self.vtable + slot)[0]
        return self.pos + off if off else 0

    def scalar(self, field: int, fmt: str) -> int:
        at = self._at(field)
        return struct.unpack_from("<" + fmt, self.buf, at)[0] if at else 0

    def table(self, field: int) -> _Table | None:
        at = self._at(field)
        return _Table(self.buf, at + struct.unpack_from("<I", self.buf, at)[0]) if at else None

    def vector(self, field: int) -> tuple[int, int]:
        """Where a vector's elements start, and how many there are (0, 0 when absent)."""
        at = self._at(field)
        if not at:
            return 0, 0
        start = at + struct.unpack_from("<I", self.buf, at)[0]
        return start + 4, struct.unpack_from("<I", self.buf, start)[0]


def _root(buf: bytes) -> _Table:
    return _Table(buf, struct.unpack_from("<I", buf, 0)[0])


def prefix_of(data: bytes, at: int) -> tuple[int, int] | None:
    """A message's prefix at ``at``: (its bytes, the metadata's length); None: the stream's end."""
    first = struct.unpack_from("<i", data, at)[0]
    if first == -1:  # the continuation marker, then the length
        length = struct.unpack_from("<i", data, at + 4)[0]
        return (8, length) if length else None
    return (4, first) if first else None  # the format before Arrow 0.15: the length alone


def message(metadata: bytes) -> tuple[int, int, _Table | None]:
    """A message's kind, body length and header table, from its flatbuffer metadata."""
    root = _root(metadata)
    return root.scalar(1, "B"), root.scalar(3, "q"), root.table(2)


def batch_buffers(metadata: bytes) -> tuple[int, list[tuple[int, int]]]:
    """A record batch message's rows and its buffers (offset, length in the body)."""
    prefix = prefix_of(metadata, 0)
    assert prefix is not None
    _, _, header = message(metadata[prefix[0] :])
    assert header is not None
    start, n = header.vector(2)
    values = struct.unpack_from(f"<{2 * n}q", header.buf, start)
    pairs = list(zip(values[::2], values[1::2], strict=True))
    return header.scalar(0, "q"), pairs


class _Reader:
    """Ranges of one object, fetched as needed and kept (the bytes an index is built from)."""

    def __init__(self, fetcher: Any, ref: ObjectRef) -> None:
        self.fetcher, self.ref, self.requests = fetcher, ref, 0
        self.parts: list[tuple[int, bytes]] = []

    def has(self, a: int, b: int) -> bytes | None:
        for start, data in self.parts:
            if start <= a and b <= start + len(data):
                return data[a - start : b - start]
        return None

    def fetch(self, spans: list[tuple[int, int]]) -> None:
        ref = self.ref
        refs = [ObjectRef(ref.key, b - a, ref.version, a) for a, b in spans if b > a]
        self.parts.extend((r.start, d) for r, d in zip(refs, self.fetcher.take(refs), strict=True))
        self.requests += len(refs)

    def read(self, a: int, b: int, ahead: int) -> bytes:
        """Bytes ``a:b``, fetched (with ``ahead`` bytes from ``a``, at least) if not kept."""
        found = self.has(a, b)
        if found is None:
            self.parts = [p for p in self.parts if p[0] + len(p[1]) > a]  # behind: never again
            self.fetch([(a, min(self.ref.size, max(b, a + ahead)))])
            found = self.has(a, b)
        if found is None or len(found) != b - a:
            raise ValueError(f"ends inside a message (bytes {a} to {b} of {self.ref.size})")
        return found


def _file(reader: _Reader) -> Index:
    """A file's index from its footer, then its batches' metadata (fetched together)."""
    size = reader.ref.size
    tail = reader.read(size - 10, size, 0)
    length = struct.unpack_from("<i", tail, 0)[0]
    footer = reader.read(size - 10 - length, size - 10, 0)
    root = _root(footer)
    if root.vector(2)[1]:
        raise ValueError("holds dictionary batches (dictionary-encoded columns)")
    start, n = root.vector(3)
    blocks = [struct.unpack_from("<qi4xq", footer, start + 24 * i) for i in range(n)]
    spans: list[list[int]] = []
    for offset, meta, _ in blocks:
        if reader.has(offset, offset + meta) is not None:
            continue
        if (
            spans
            and offset - spans[-1][1] < READ_THROUGH
            and offset + meta - spans[-1][0] <= WINDOW
        ):
            spans[-1][1] = offset + meta
        else:
            spans.append([offset, offset + meta])
    reader.fetch([(a, b) for a, b in spans])
    metadata = [reader.read(offset, offset + meta, 0) for offset, meta, _ in blocks]
    rows = [batch_buffers(m)[0] for m in metadata]
    table = np.array([[*b, r] for b, r in zip(blocks, rows, strict=True)], dtype=np.int64)
    # The schema from the footer (pyarrow reads it; the stream's copy is at the file's start).
    import pyarrow as pa

    from looptoolkit.stores._remote_table import Sparse

    end = Sparse(size, [(size - 10 - length, footer + tail)])
    schema = pa.ipc.open_file(end).schema.serialize().to_pybytes()
    return Index(schema, table.reshape(-1, 4), metadata, stream=False)


def _stream(reader: _Reader) -> Index:
    """A stream's index: message after message, read through or header by header."""
    size, at, step = reader.ref.size, 0, -1
    schema, rows, metadata = b"", [], []
    while at + 8 <= size:
        # Up to the first batch: its start. Then by the size of the batch before.
        ahead = TAIL_BYTES if step < 0 else WINDOW if step < READ_THROUGH else HEADER_BYTES
        prefix = prefix_of(reader.read(at, at + 8, ahead), 0)
        if prefix is None:
            break
        meta_len = sum(prefix)
        if not schema and (prefix[1] < 0 or at + meta_len > size):
            raise ValueError(_NOT_IPC)
        meta = reader.read(at, at + meta_len, max(ahead, meta_len))
        kind, body, _ = message(meta[prefix[0] :])
        if not schema and kind != _SCHEMA:
            raise ValueError(_NOT_IPC)
        if kind == _SCHEMA:
            schema = meta
        elif kind == _DICTIONARY:
            raise ValueError("holds dictionary batches (dictionary-encoded columns)")
        elif kind == _RECORD_BATCH:
            rows.append((at, meta_len, body, batch_buffers(meta)[0]))
            metadata.append(meta)
            step = meta_len + body
        at += meta_len + body
    if not schema:
        raise ValueError(_NOT_IPC)
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    return Index(schema, table, metadata, stream=True)


def index_of(fetcher: Any, ref: ObjectRef, where: str, cache: Any, start_first: bool) -> Index:
    """The index of the IPC object ``ref``: from memory, the disk cache, or built.

    Args:
        fetcher: fetches byte ranges of the object (counted as its requests).
        ref: the object (key, size, version).
        where: the bucket's address (keys the memory of indexes).
        cache: a disk cache (``get``, ``put``) or None.
        start_first: read the object's start first (a stream expected), else its end.

    Raises:
        ValueError: not an Arrow IPC file or stream; dictionary batches.
    """
    known = (where, ref.key, ref.size, ref.version)
    index = _MEMORY.get(known)
    if index is not None:
        return Index(index.schema, index.batches, index.metadata, index.stream)
    length_ref = ObjectRef(ref.key + "#ipc-index", 8, ref.version, ref.size)
    if cache is not None and (length := cache.get(length_ref)) is not None:
        blob_len = int.from_bytes(length, "little")
        blob = cache.get(ObjectRef(length_ref.key, blob_len, ref.version, ref.size))
        index = None if blob is None else Index.from_bytes(blob)
    if index is None:
        reader = _Reader(fetcher, ref)
        if start_first:
            reader.read(0, min(8, ref.size), TAIL_BYTES)
        else:
            reader.read(max(0, ref.size - TAIL_BYTES), ref.size, 0)
        is_file = ref.size >= 16 and reader.has(ref.size - 6, ref.size) == MAGIC
        if start_first:
            is_file = reader.has(0, min(6, ref.size)) == MAGIC
        try:
            index = _file(reader) if is_file else _stream(reader)
        except struct.error:  # an offset or a length past the bytes: not what IPC writes
            raise ValueError(_NOT_IPC) from None
        index.requests = reader.requests
        if cache is not None:
            blob = index.to_bytes()
            blob_ref = ObjectRef(length_ref.key, len(blob), ref.version, ref.size)
            cache.put(blob_ref, blob)
            cache.put(length_ref, len(blob).to_bytes(8, "little"))
    _MEMORY[known] = index
    return index
