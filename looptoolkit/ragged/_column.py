"""The ragged column: ``n`` variable-length rows as one values array and ``n + 1`` offsets.

The first step of the variable-length path: [`Ragged`][looptoolkit.Ragged] holds a column, and
[`find_ragged`][looptoolkit.ragged._column.find_ragged] turns whatever ragged inputs a user's
``data`` holds (lists of arrays of different lengths, object arrays of arrays, Arrow and HF
``datasets`` list columns, jagged nested tensors, ``tf.RaggedTensor``) into ``Ragged`` leaves,
without copying where the source allows, or refuses them at construction with the fix named.
The plans ([`looptoolkit.ragged._plans`][looptoolkit.ragged._plans]) read only the lengths; the
layouts ([`looptoolkit.ragged._layouts`][looptoolkit.ragged._layouts]) read values a batch at a
time, through [`Ragged.host`][looptoolkit.Ragged.host].
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import optree

from looptoolkit._rows.mapped import mapping_of
from looptoolkit.adapters import backend_of, get_backend
from looptoolkit.device import _tree as _tree
from looptoolkit.ragged._stored import RowChunked, StoredValues
from looptoolkit.stores import StoreArray, is_store_type
from looptoolkit.stores import wrap as wrap_store

__all__ = ["Ragged", "find_ragged"]


class Ragged:
    """A column of ``n`` variable-length rows: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    Args:
        values: all rows' elements, concatenated: an array of shape ``(total, *feature)`` of any
            backend (NumPy, ``np.memmap``, torch, JAX or tf on the host), or one array of a
            chunked store (zarr, HDF5), read by whole chunks through a bounded cache, or a token
            file in a bucket (``looptoolkit.stores.bucket("s3://...", dtype=...)``), read by the
            byte ranges of whole rows, fetched ahead of the order. A memory-mapped token file or
            a store is read a batch at a time, never whole.
        offsets: ``n + 1`` non-decreasing integers from 0 to ``total``.

    Raises:
        TypeError: ``values`` is not an array, or ``offsets`` is not integral.
        ValueError: ``offsets`` is not 1-D, does not start at 0, decreases, or does not end at
            ``len(values)``; ``values`` is 0-d.

    Examples:
        >>> import numpy as np
        >>> col = Ragged.from_rows([np.array([1, 2, 3]), np.array([4]), np.array([5, 6])])
        >>> len(col), col.lengths.tolist(), col.offsets.tolist()
        (3, [3, 1, 2], [0, 3, 4, 6])
        >>> col[2].tolist()
        [5, 6]
    """

    __slots__ = ("_checked", "_host", "_lengths", "_total", "backend", "offsets", "values")

    def __init__(self, values: Any, offsets: Any) -> None:
        if isinstance(values, StoreArray) and getattr(values, "remote", False):
            # A file in a bucket: read by the byte ranges of whole rows, ahead of the order.
            offsets = np.asarray(_host_view(offsets))
            values = RowChunked(values, offsets)
        elif isinstance(values, StoreArray):
            values = StoredValues(values)
        if is_store_type(type(values)) and not isinstance(values, StoredValues):
            stored = wrap_store(values, "values")
            if not isinstance(stored, StoreArray):
                raise TypeError(
                    f"`values` must be one array of a store, got {type(values).__name__}."
                )
            values = StoredValues(stored)
        backend = get_backend("numpy") if isinstance(values, StoredValues) else backend_of(values)
        if backend is None:
            raise TypeError(
                f"`values` must be an array (NumPy, torch, JAX or tf), got {type(values).__name__}."
            )
        if len(getattr(values, "shape", ())) == 0:
            raise ValueError("`values` needs a leading (token) dimension; it is 0-d.")
        _refuse_accelerator(values)
        offsets = np.asarray(_host_view(offsets))
        if offsets.dtype.kind not in "iu":
            raise TypeError(f"`offsets` must be integers, got dtype {offsets.dtype}.")
        if offsets.ndim != 1 or len(offsets) < 1:
            raise ValueError(
                f"`offsets` must be 1-D with n + 1 entries, got shape {offsets.shape}."
            )
        total = len(values) if isinstance(values, StoredValues) else int(backend.length(values))
        if offsets[0] != 0 or offsets[-1] != total:
            raise ValueError(
                f"`offsets` must start at 0 and end at len(values) ({total}), got "
                f"{int(offsets[0])} and {int(offsets[-1])}."
            )
        mapped = mapping_of(offsets) is not None
        if offsets.dtype == np.uint64 and mapped:
            # Read in place as int64: a value past 2**63 (never an offset up to `total`)
            # reads as negative, and the rows' checks below refuse it.
            offsets = offsets.view(np.int64)
        self.values = values
        self.offsets: np.ndarray = offsets.astype(np.int64, copy=False)
        self._total = total
        self._lengths: np.ndarray | None = None
        # Offsets in memory are checked whole, here; memory-mapped ones a batch at a time, as
        # rows are read (`spans`), or whole when a plan first reads every row's length.
        self._checked = False
        if not mapped:
            self._lengths = _checked_lengths(self.offsets)
            self._checked = True
        self.backend: str = backend.name
        self._host: np.ndarray | None = None

    @classmethod
    def from_rows(cls, rows: Sequence[Any]) -> Ragged:
        """The column of ``rows``: arrays, or lists of numbers (a tokenizer's ``input_ids``).

        Arrays must share dtype and trailing shape and are concatenated once. Lists of
        numbers (ints, floats, bools) are read in one vectorised pass, never a Python loop
        per element: their dtype is what NumPy makes of all of them together (``int64``
        for token ids, ``float64`` once any is a float).

        Raises:
            ValueError: no rows, or rows of different dtypes or trailing shapes (named).
            TypeError: a row that is not an array, or lists that hold something other than
                numbers.

        Examples:
            >>> Ragged.from_rows([[101, 7, 102], [101, 102]]).lengths.tolist()
            [3, 2]
        """
        rows = list(rows)
        if not rows:
            raise ValueError("`rows` must hold at least one array.")
        return cls._of(rows, _rows_kind(rows), "rows")

    @classmethod
    def _of(cls, rows: list[Any], kind: str | None, where: str) -> Ragged:
        """``from_rows``, for rows whose ``_rows_kind`` is known, named ``where`` in errors."""
        if kind == "lists":
            values, offsets = _read_lists(rows, where)
            return cls(values, offsets)
        if kind == "arrays" and type(rows[0]) is np.ndarray and rows[0].dtype != object:
            host = rows  # host arrays of one dtype and trailing shape: nothing to convert
        else:
            host = [_host_view(r) for r in rows]
            _check_rows(host, where)
        lengths = np.fromiter(map(len, host), dtype=np.int64, count=len(host))
        offsets = np.zeros(len(host) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(host) if len(host) > 1 else np.asarray(host[0])
        backend = backend_of(rows[0])
        if backend is not None and backend.name != "numpy":
            from looptoolkit.adapters._wrap import from_host

            return cls(from_host(backend.name, values, rows[0]), offsets)
        return cls(values, offsets)

    def arrays_read(self, pitch: float | None, offsets: bool) -> Iterator[tuple[Any, float | None]]:
        """The arrays a batch reads, each with the bytes of one document in it (read advice).

        The values, when they are host arrays or stored values (a framework's tensor maps no
        file), and the offsets unless ``offsets`` is False.
        """
        values = self.values
        if isinstance(values, np.ndarray | StoredValues):
            nbytes = getattr(values, "nbytes", None)
            if nbytes is None:
                nbytes = int(np.prod(values.shape)) * np.dtype(values.dtype).itemsize
            yield values, nbytes / max(1, len(self))
        if offsets:
            yield self.offsets, None

    @property
    def lengths(self) -> np.ndarray:
        """The length of every row, a 1-D int64 NumPy array.

        Computed (and checked) when first asked for where ``offsets`` is memory-mapped: 8
        bytes a row. Batches of rows never need it whole ([`spans`][looptoolkit.Ragged.spans]).
        """
        if self._lengths is None:
            self._lengths = _checked_lengths(self.offsets)
            self._checked = True
        return self._lengths

    def spans(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where rows ``rows`` start in ``values`` and their lengths: two int64 arrays.

        Reads ``2 * len(rows)`` offsets, never the whole column; where ``offsets`` was not
        checked whole (memory-mapped), the rows read are checked here.

        Raises:
            ValueError: a row whose offsets decrease or leave ``[0, len(values)]``, named.
        """
        starts = self.offsets[rows]
        lens = self.offsets[rows + 1] - starts
        if not self._checked and len(lens):
            bad = (lens < 0) | (starts < 0) | (starts > self._total - lens)
            if bad.any():
                row = int(np.asarray(rows)[int(np.argmax(bad))])
                raise ValueError(
                    f"`offsets` must be non-decreasing from 0 to len(values) ({self._total}); "
                    f"row {row} spans [{int(self.offsets[row])}, {int(self.offsets[row + 1])})."
                )
        return starts, lens

    @property
    def host(self) -> np.ndarray:
        """``values`` as a NumPy array on the host: a view where the backend allows."""
        if self._host is None:
            self._host = _host_view(self.values)
        return self._host

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """The shape of one element (``values.shape[1:]``)."""
        return tuple(int(d) for d in self.values.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of the values."""
        return self.host.dtype

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} is out of range for {n} rows.")
        i %= n
        (start,), (length,) = self.spans(np.array([i]))
        return self.values[int(start) : int(start + length)]

    def __repr__(self) -> str:
        return (
            f"Ragged(<{len(self)} rows, {int(self.offsets[-1])} {self.backend} values of "
            f"shape {self.feature_shape} and dtype {self.dtype}>)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ragged, (self.values, self.offsets))


# Offsets checked and differenced this many at a time: 32 MiB of int64 a block.
_CHECK_BLOCK = 1 << 22


def _checked_lengths(offsets: np.ndarray) -> np.ndarray:
    """``np.diff(offsets)``, refused where it is negative; read in blocks (bounded memory).

    Raises:
        ValueError: ``offsets`` decreases (the row named).
    """
    n = len(offsets) - 1
    lengths = np.empty(n, dtype=np.int64)
    for lo in range(0, n, _CHECK_BLOCK):
        hi = min(lo + _CHECK_BLOCK, n)
        part = lengths[lo:hi]
        np.subtract(offsets[lo + 1 : hi + 1], offsets[lo:hi], out=part)
        if part.min() < 0:
            at = lo + int(np.argmin(part))
            raise ValueError(f"`offsets` must be non-decreasing; it decreases after row {at}.")
    return lengths


def _host_view(x: Any) -> np.ndarray:
    """``x`` as a NumPy array on the host, without a copy where the framework allows.

    Raises:
        ValueError: ``x`` lives on an accelerator (the ragged layouts are built on the host).
    """
    if isinstance(x, np.ndarray | StoredValues):
        return x  # type: ignore[return-value]  # sliced like an array
    _refuse_accelerator(x)
    numpy = getattr(x, "numpy", None)
    if callable(numpy) and not hasattr(x, "__array_interface__"):
        try:
            return np.asarray(x.detach().numpy() if hasattr(x, "detach") else numpy())
        except (TypeError, RuntimeError):
            pass
    return np.asarray(x)


def _refuse_accelerator(x: Any) -> None:
    """Refuse an array on an accelerator (torch ``device.type``, JAX ``platform``, tf's name).

    Raises:
        ValueError: ``x`` lives on an accelerator (the ragged layouts are built on the host).
    """
    if isinstance(x, np.ndarray):
        return
    device = getattr(x, "device", None)
    kind = getattr(device, "type", None) or getattr(device, "platform", None)
    if isinstance(device, str):  # tf: "/job:localhost/replica:0/task:0/device:GPU:0"
        kind = device.rpartition("device:")[2].split(":")[0].lower() or None
    if isinstance(kind, str) and kind != "cpu":
        raise ValueError(
            f"ragged values are batched on the host; got an array on {device}. Pass the host "
            "array and let `device=` move each batch."
        )


def _check_rows(rows: Sequence[np.ndarray], what: str) -> None:
    """Refuse rows that cannot be one column: not arrays, 0-d, other dtypes or trailing shapes."""
    first = rows[0]
    if first.dtype == object:
        raise TypeError(f"{what}[0] holds Python objects; a ragged row must be a numeric array.")
    for i, row in enumerate(rows):
        if row.ndim == 0:
            raise ValueError(f"{what}[{i}] is 0-d; every row needs a leading (token) dimension.")
        if row.dtype != first.dtype or row.shape[1:] != first.shape[1:]:
            raise ValueError(
                f"the rows of a ragged column must share dtype and trailing shape; {what}[0] is "
                f"{first.dtype} {first.shape[1:]} and {what}[{i}] is {row.dtype} {row.shape[1:]}."
            )


# -- turning the ragged inputs of `data` into Ragged leaves ------------------------------


def _module(x: Any) -> str:
    return type(x).__module__.partition(".")[0]


_NUMBER = (int, float, np.number, np.bool_)


def _rows_kind(x: Any) -> str | None:
    """What the rows of a list are: ``"lists"`` of numbers, ``"arrays"`` of one kind, or None.

    ``"lists"``: a non-empty plain list of plain lists whose first element is a number (a
    tokenizer's ``input_ids``; the rest is checked when the values are read, in one pass).
    ``"arrays"``: a non-empty plain list of arrays of one backend, dtype and trailing shape,
    each with a leading dimension. A tuple is never rows: ``(x, y)`` is a pair of columns.
    """
    if type(x) is not list or not x:
        return None
    if type(x[0]) is list:
        if set(map(type, x)) != {list}:  # mapped in C: milliseconds for a million rows
            return None
        first = next((r[0] for r in x if r), 0)
        return "lists" if isinstance(first, _NUMBER) else None
    if len(set(map(type, x))) != 1:
        return None
    backend = backend_of(x[0])
    if backend is None:
        return None
    # Attribute reads mapped in C: a list of a million arrays is checked in milliseconds.
    shapes = list(map(tuple, map(operator.attrgetter("shape"), x)))
    if not all(shapes) or len(set(map(operator.attrgetter("dtype"), x))) != 1:
        return None
    if len(shapes[0]) > 1 and len({s[1:] for s in shapes}) != 1:
        return None
    if len(set(map(len, shapes))) != 1:
        return None
    return "arrays"


def _read_lists(rows: list[list[Any]], where: str) -> tuple[np.ndarray, np.ndarray]:
    """The values and offsets of lists of numbers, in one vectorised pass.

    The lengths come from ``map(len, rows)``; the values from one flat list
    (``itertools.chain``) that NumPy converts at once, its dtype inferred from every element
    (the fastest of the ways tried: ``np.fromiter`` over the chain plus a type check took
    longer, and ``np.fromiter`` into int64 alone would cut floats silently; the figures are in
    ``docs/ragged.md``).

    Raises:
        TypeError: an element that is not a number (a string, a nested list of other
            lengths, an int too large for int64).
    """
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = list(itertools.chain.from_iterable(rows))
    if not flat:
        return np.zeros(0, dtype=np.int64), offsets
    try:
        values = np.array(flat)
    except (ValueError, TypeError, OverflowError):
        values = np.array(flat, dtype=object)
    if values.dtype.kind not in "biuf" or values.ndim != 1:
        kinds = sorted({type(v).__name__ for v in flat if not isinstance(v, _NUMBER)})
        raise TypeError(
            f"{where} is a list of lists read as ragged rows, and its rows hold "
            f"{', '.join(kinds) or 'values of another kind'} besides numbers; a ragged row holds "
            "numbers (tokenize text first)."
        )
    return values, offsets


def _place(accessor: optree.PyTreeAccessor) -> str:
    """Where a list stands in ``data``: ``"key"`` (a column's place) or ``"structure"``.

    Under a mapping's key, a dataclass's or namedtuple's field, or as an item of a tuple, a
    list is one column; as ``data`` itself or an item of another list it may be a container
    of columns (``data=[x, y]``).
    """
    if not len(accessor):
        return "structure"
    parent = accessor[-1].type
    if isinstance(parent, type) and issubclass(parent, list | collections.deque):
        return "structure"
    if isinstance(parent, type) and issubclass(parent, collections.UserList):
        return "structure"
    return "key"


def _rows_or_columns(x: list[Any], where: str, place: str) -> bool:
    """Whether the list of arrays ``x`` at ``where`` is the rows of one ragged column.

    One rule, whatever the lengths, for the lists that can only be rows: under a key (a
    column's place), 1-D arrays are the rows of one column, also when their lengths are
    equal (a [`Ragged`][looptoolkit.Ragged] whose lengths are all equal). Lists of arrays of
    different lengths are rows anywhere (they cannot be columns). Anything else stays a
    container of columns, except a list of 1-D arrays of one length as ``data`` itself or
    an item of a list, which means two things and is refused.

    Raises:
        TypeError: the ambiguous list, with both fixes named.
    """
    lengths = {int(shape[0]) for shape in map(operator.attrgetter("shape"), x)}
    one_d = len(x[0].shape) == 1
    if place == "key":
        return one_d or len(lengths) > 1
    if len(x) < 2:
        return False
    if len(lengths) > 1:
        return True
    if not one_d:
        return False
    (length,) = lengths
    raise TypeError(
        f"{where} is a list of {len(x)} 1-D arrays of one length ({length}), which reads as "
        f"{len(x)} columns of {length} rows or as {len(x)} per-sample records (documents) of "
        f"{length} values; for documents pass `looptoolkit.Ragged.from_rows({where})` (or put "
        f'the list under a key, `{{"input_ids": {where}}}`), for columns a tuple, '
        f"`tuple({where})`."
    )


def _from_arrow(x: Any, path: str) -> Ragged | None:
    """A list column of an Arrow array (one chunk, or chunks combined once) as a column."""
    import pyarrow as pa

    kind = x.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return None
    if isinstance(x, pa.ChunkedArray):
        x = x.chunk(0) if x.num_chunks == 1 else x.combine_chunks()
    if x.null_count:
        raise ValueError(f"{path} has {x.null_count} missing rows; fill or drop them first.")
    offsets = x.offsets.to_numpy()
    lengths = np.diff(offsets)
    if len(lengths) and (lengths == lengths[0]).all():
        return None  # lists of one length: the store reads them as a fixed-width column
    start, stop = int(offsets[0]), int(offsets[-1])
    values = x.values.slice(start, stop - start)
    if values.null_count or not (
        pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
    ):
        raise TypeError(
            f"{path} is a list column of {values.type}; a ragged column holds numbers "
            "(tokenize text first)."
        )
    return Ragged(values.to_numpy(zero_copy_only=True), offsets - start)


def _table_columns(x: Any, path: str) -> dict[str, Any] | None:
    """An Arrow table or HF dataset with ragged list columns, as a dict of its columns."""
    import pyarrow as pa

    if _module(x) == "datasets":
        import datasets

        if not isinstance(x, datasets.Dataset) or x._indices is not None:
            return None
        names = x.format.get("columns") or x.column_names
        table = x.data.table
    elif isinstance(x, pa.Table | pa.RecordBatch):
        names, table = x.column_names, x
    else:
        return None
    columns = {name: table.column(name) for name in names}
    ragged = {name: _from_arrow(col, f"{path}[{name!r}]") for name, col in columns.items()}
    if all(v is None for v in ragged.values()):
        return None
    return {
        name: ragged[name] if ragged[name] is not None else col for name, col in columns.items()
    }


def _convert(x: Any, path: str, kind: str | None = None) -> Any:
    """``x`` as a Ragged leaf when it is a ragged input; ``x`` itself otherwise.

    Raises:
        TypeError: an input that is ragged but cannot be read as a column (the fix named).
    """
    if isinstance(x, Ragged):
        return x
    if kind is not None:  # a list of rows
        return Ragged._of(x, kind, path)
    if isinstance(x, np.ndarray) and x.dtype == object:
        items = x.ravel().tolist()
        arrays = [backend_of(i) is not None for i in items]
        if not any(arrays):
            return x  # Python objects (strings, ids): batched as they are, never moved
        if x.ndim != 1 or not all(arrays):
            raise TypeError(
                f"{path} is a NumPy object array{'' if x.ndim == 1 else f' of shape {x.shape}'} "
                "that holds arrays and other objects; a 1-D object array of arrays is read as "
                "a ragged column: make every item an array (or none of them)."
            )
        host = [np.asarray(_host_view(i)) for i in items]
        _check_rows(host, path)
        return Ragged.from_rows(host)
    top = _module(x)
    if top == "pyarrow":
        import pyarrow as pa

        if isinstance(x, pa.Array | pa.ChunkedArray):
            col = _from_arrow(x, path)
            return x if col is None else col
        return x
    if top == "torch" and getattr(x, "is_nested", False):
        if str(getattr(x, "layout", "")) == "torch.jagged":
            if x._ragged_idx != 1 or x.lengths() is not None:
                raise TypeError(
                    f"{path} is a jagged nested tensor with holes or a ragged dimension other "
                    "than 1; make it contiguous first (`torch.nested.as_nested_tensor(list(x), "
                    "layout=torch.jagged)`)."
                )
            return Ragged(x.values(), x.offsets())
        return Ragged.from_rows(list(x.unbind()))
    if top == "tensorflow" and type(x).__name__ == "RaggedTensor":
        if x.ragged_rank != 1:
            raise TypeError(
                f"{path} is a tf.RaggedTensor of ragged rank {x.ragged_rank}; the Loader reads "
                "one ragged dimension (rows of tokens): merge the inner ones first "
                "(`x.merge_dims(1, -1)`)."
            )
        return Ragged(x.values, x.row_splits)
    return x


def find_ragged(data: Any) -> Any | None:
    """``data`` with its ragged inputs as [`Ragged`][looptoolkit.Ragged] leaves; None without any.

    Raises:
        TypeError: a ragged input that cannot be read as a column, with the fix named.
        ValueError: rows of a ragged input that do not share dtype and trailing shape.
    """
    found = False
    kinds: dict[int, str | None] = {}  # `_rows_kind` of the lists met (a pass over each)

    def is_rows(x: Any) -> bool:
        if type(x) is not list:
            return False
        if id(x) not in kinds:
            kinds[id(x)] = _rows_kind(x)
        return kinds[id(x)] is not None

    # Registers the data's container types in the namespace; lists of rows are not looked into.
    _tree.flatten(data, is_leaf=is_rows)

    def convert(accessor: optree.PyTreeAccessor, x: Any) -> Any:
        nonlocal found
        where = accessor.codify("data")
        if _module(x) in ("datasets", "pyarrow"):
            columns = _table_columns(x, where)
            if columns is not None:
                found = True
                return columns
        kind = kinds.get(id(x)) if is_rows(x) else None
        if kind == "arrays" and not _rows_or_columns(x, where, _place(accessor)):
            return x  # a container of columns: its leaves are read by `Rows`
        out = _convert(x, where, kind)
        found = found or isinstance(out, Ragged)
        return out

    out = optree.tree_map_with_accessor(
        convert,
        data,
        is_leaf=is_rows,
        none_is_leaf=True,
        namespace=_tree.NAMESPACE,
    )
    return out if found else None
