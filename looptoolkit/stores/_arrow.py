"""Arrow tables and columns (pyarrow) and HF ``datasets.Dataset`` as Loader data.

Columns are read through zero-copy NumPy views of their Arrow buffers (one
view per Arrow chunk): a fixed-width numeric column is its values buffer, a
column of lists of one length (a vector per row, ``List(Value("float32"))`` in
``datasets``) its child's values reshaped, recursively for lists of lists. A
column with missing values, ragged lists or non-numeric values is refused by
name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from looptoolkit.stores import StoreArray


def wrap(obj: Any, path: str) -> StoreArray | dict[str, Any] | None:
    """A table, record batch or HF dataset as a dict of columns; a column as an ArrowColumn."""
    if type(obj).__module__.partition(".")[0] == "datasets":
        return _hf(obj, path)
    if isinstance(obj, pa.Table | pa.RecordBatch):
        return {
            name: ArrowColumn(obj.column(name), f"{path}[{name!r}]") for name in obj.column_names
        }
    if isinstance(obj, pa.ChunkedArray | pa.Array):
        return ArrowColumn(obj, path)
    return None


def refusal(obj: Any) -> str:
    name = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if type(obj).__qualname__ in ("Column", "IterableColumn"):
        return (
            f"a {name} (one column of a dataset, read value by value); pass the dataset "
            "itself (`ds` or `ds.select_columns([...])`): its columns become the batch's keys"
        )
    if type(obj).__qualname__ == "IterableDataset":
        return f"a {name} streams its rows and has no random access; pass a `datasets.Dataset`"
    return (
        f"a {name} is not a table, a column or a `datasets.Dataset`; pass a `pyarrow.Table` "
        "or a `datasets.Dataset`"
    )


def _hf(obj: Any, path: str) -> dict[str, Any] | None:
    """A ``datasets.Dataset``: its (formatted) columns, read from its Arrow table."""
    import datasets

    if not isinstance(obj, datasets.Dataset):
        return None
    if obj._indices is not None:  # rows reordered or filtered by an indices mapping
        raise TypeError(
            f"`data` cannot hold {path}: this dataset reads its rows through an indices "
            "mapping (after `select`, `shuffle`, `filter`, ...); call `ds.flatten_indices()` "
            "first, or pass the row subset as the Loader's `indices=`."
        )
    columns = obj.format.get("columns") or obj.column_names
    return {name: ArrowColumn(HFColumn(obj, name), f"{path}[{name!r}]") for name in columns}


class HFColumn:
    """A column of a ``datasets.Dataset``; pickles as the dataset (its cache files, not rows)."""

    def __init__(self, dataset: Any, name: str) -> None:
        self.dataset = dataset
        self.name = name

    def chunked(self) -> pa.ChunkedArray:
        return self.dataset.data.table.column(self.name)


def _views(column: pa.ChunkedArray, path: str) -> list[np.ndarray]:
    views = [_view(chunk, path) for chunk in column.chunks if len(chunk)]
    return views or [_view(pa.array([], column.type), path)]


def _view(array: pa.Array, path: str) -> np.ndarray:
    """A zero-copy NumPy view of ``array``: rows on the first axis."""
    if array.null_count:
        raise ValueError(f"`data` cannot hold {path}: it has {array.null_count} missing values.")
    kind = array.type
    if pa.types.is_fixed_size_list(kind):
        inner = _view(array.flatten(), path)
        return inner.reshape(len(array), kind.list_size, *inner.shape[1:])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = array.offsets.to_numpy()
        lengths = np.diff(offsets)
        if len(lengths) and (lengths != lengths[0]).any():
            raise ValueError(
                f"`data` cannot hold {path}: its rows are lists of different lengths "
                f"({int(lengths.min())} to {int(lengths.max())}); the Loader batches rows of "
                "one shape."
            )
        width = int(lengths[0]) if len(lengths) else 0
        inner = _view(array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])), path)
        return inner.reshape(len(array), width, *inner.shape[1:])
    if pa.types.is_boolean(kind):
        return np.asarray(array.to_numpy(zero_copy_only=False))  # bits: one copy
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind):
        return np.asarray(array.to_numpy(zero_copy_only=True))
    raise TypeError(
        f"`data` cannot hold {path}: an Arrow column of type {kind} "
        "(the Loader reads numbers, booleans and fixed-length lists of them)."
    )


class ArrowColumn(StoreArray):
    """An Arrow column, read through zero-copy views; fixed blocks of rows are read at once.

    A read within one Arrow chunk is a view (no copy); a read across chunks
    concatenates. A ``datasets`` column pickles as its dataset (a memory-mapped
    dataset as its cache files), a pyarrow column as pyarrow pickles it (its values).
    """

    kind = "Arrow"

    def __init__(self, column: Any, path: str) -> None:
        self.column = column
        self.path = path
        self._load()

    def _load(self) -> None:
        column = self.column
        chunked = column.chunked() if isinstance(column, HFColumn) else column
        if isinstance(chunked, pa.Array):
            chunked = pa.chunked_array([chunked])
        self.views = _views(chunked, self.path)
        self.starts = np.cumsum([0] + [len(v) for v in self.views])
        first = self.views[0]
        self.shape = (int(self.starts[-1]), *first.shape[1:])
        self.dtype = first.dtype
        self._rows_at: np.ndarray | None = None
        self._offsets: np.ndarray | None = None
        if len(self.views) > 1:
            self._byte_rows()

    def _byte_rows(self) -> None:
        """One array whose row ``k`` is the ``row_bytes`` bytes from byte ``k`` of the span.

        The span runs from the lowest Arrow chunk's first byte to the highest's
        last; row ``i`` of chunk ``c`` is the row at byte ``offsets[c] + (i -
        starts[c]) * row_bytes``. A gather of sorted rows over many chunks is then
        one ``take`` on it, not a loop over chunks. Only the rows of the chunks are
        ever read (the bytes between chunks, maybe not memory of this process, never
        are), and the chunks are kept alive by ``views``.
        """
        views, width = self.views, self.row_bytes
        if width == 0 or not all(v.flags.c_contiguous and v.dtype == self.dtype for v in views):
            return
        self._width = width
        # Record batches of one length (the last may be shorter), as `datasets` and
        # `to_batches(max_chunksize)` write them: a row's batch is a division.
        lengths = np.diff(self.starts)
        uniform = bool((lengths[:-1] == lengths[0]).all() and lengths[-1] <= lengths[0])
        self._uniform = int(lengths[0]) if uniform else 0
        at = np.array([v.__array_interface__["data"][0] for v in views], dtype=np.int64)
        low = int(np.argmin(at))
        span = int(max(a + v.nbytes for a, v in zip(at.tolist(), views, strict=True)) - at[low])
        raw = views[low].reshape(-1).view(np.uint8)
        # One element per byte of the span, each `width` bytes wide.
        self._rows_at = np.lib.stride_tricks.as_strided(
            raw[:width].view(np.dtype((np.void, width))),
            shape=(span - width + 1,),
            strides=(1,),
            writeable=False,
        )
        self._offsets = at - at[low] - self.starts[:-1] * width

    def __getstate__(self) -> dict[str, Any]:
        return {"column": self.column, "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._load()

    def view(self) -> np.ndarray | None:
        return self.views[0] if len(self.views) == 1 else None

    def read(self, start: int, stop: int) -> np.ndarray:
        starts = self.starts
        c = int(np.searchsorted(starts, start, side="right")) - 1
        if stop <= starts[c + 1]:
            base = int(starts[c])
            return self.views[c][start - base : stop - base]
        pieces = []
        while start < stop:
            base, end = int(starts[c]), int(starts[c + 1])
            pieces.append(self.views[c][start - base : min(stop, end) - base])
            start = min(stop, end)
            c += 1
        return np.concatenate(pieces)

    def read_ranges(self, starts: np.ndarray, stops: np.ndarray, out: np.ndarray) -> None:
        # Each Arrow chunk's part of each range copied into `out`: nothing in between.
        at = 0
        for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
            c = int(np.searchsorted(self.starts, start, side="right")) - 1
            while start < stop:
                base, end = int(self.starts[c]), int(self.starts[c + 1])
                step = min(stop, end) - start
                out[at : at + step] = self.views[c][start - base : start - base + step]
                at += step
                start += step
                c += 1

    def gather(self, idx: np.ndarray) -> np.ndarray | None:
        if self._rows_at is None:
            return None
        assert self._offsets is not None
        if self._uniform:
            chunk = idx // self._uniform
        else:
            chunk = np.searchsorted(self.starts, idx, side="right") - 1
        where = self._offsets[chunk] + idx * self._width
        gathered = self._rows_at[where]  # indexing, not `take`: that copies the span
        return gathered.view(self.dtype).reshape(len(idx), *self.shape[1:])

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        if len(self.views) == 1:
            return self.views[0].take(rows, axis=0)
        gathered = self.gather(rows)
        if gathered is not None:
            return gathered
        chunk = np.searchsorted(self.starts, rows, side="right") - 1
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        for c in np.unique(chunk):
            at = chunk == c
            out[at] = self.views[c].take(rows[at] - self.starts[c], axis=0)
        return out


def layout_of(
    kind: pa.DataType, path: str, what: str = "column"
) -> tuple[np.dtype, tuple[int, ...]]:
    """The NumPy dtype and row shape of a column of Arrow type ``kind`` (as `_view` reads it).

    Numbers, booleans and fixed-size lists of them (a vector per row, of one length);
    known from the type alone, without a row (a Parquet file's schema in a bucket).

    Raises:
        TypeError: another type (named), or lists of variable length.
    """
    shape: list[int] = []
    while pa.types.is_fixed_size_list(kind):
        shape.append(kind.list_size)
        kind = kind.value_type
    if pa.types.is_boolean(kind):
        return np.dtype(bool), tuple(shape)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind):
        return np.dtype(kind.to_pandas_dtype()), tuple(shape)
    hint = (
        "; a vector per row is read when written as a fixed-size list (`pa.list_(type, size)`, "
        '`datasets.Sequence(Value("float32"), length=size)`), and token rows as a token file '
        '(`Ragged(bucket("s3://.../values.bin", dtype=...), offsets)`)'
        if pa.types.is_list(kind) or pa.types.is_large_list(kind)
        else ""
    )
    raise TypeError(
        f"`data` cannot hold {path}: a {what} of type {kind} (the Loader reads numbers, "
        f"booleans and fixed-size lists of them){hint}."
    )
