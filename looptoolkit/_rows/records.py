"""Per-sample records: recognised in a Loader's data, and stacked into columns.

The Loader batches the leading dimension of every array of ``data``: it needs
*columns*, one array per field holding every sample. The most common shape of a
hand-made dataset is the other one, a list of per-sample *records*
(``[{"x": x0, "y": 0}, {"x": x1, "y": 1}, ...]``), which read as columns would
be batched inside each sample. [`find_records`][looptoolkit._rows.records.find_records] recognises
one in a flattened ``data`` (for [`Rows`][looptoolkit._rows.rows.Rows] to refuse it), and
[`stack_records`][looptoolkit.stack_records] turns one into columns.

A list (not a tuple: ``(X, Y)`` is the usual pair of columns) is taken for
records when it holds two or more items and they are all containers of one
shape (same type, same number of leaves), all non-array values (numbers,
strings), or arrays of one shape that are 0-d or have fewer rows than the list
has items. Anything else is read as columns (whose lengths must then agree).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import optree

from looptoolkit.adapters import backend_of
from looptoolkit.device import _tree as _tree

__all__ = ["find_records", "kind_of", "stack_records"]


def kind_of(value: Any) -> str:
    """``value``'s type as ``package.Type`` (``torch.Tensor``, ``builtins.str``)."""
    return f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"


def _kind(spec: optree.PyTreeSpec) -> str:
    return spec.type.__name__ if spec.type is not None else "value"


def _looks_like_records(spec: optree.PyTreeSpec, leaves: Sequence[Any]) -> str | None:
    """What each record of the list node ``spec`` (holding ``leaves``) is, or None."""
    children = spec.children()
    if len(children) < 2:
        return None
    first = children[0]
    if not first.is_leaf():
        same = all(
            c.type is first.type
            and c.num_leaves == first.num_leaves
            and c.num_nodes == first.num_nodes
            for c in children[1:]
        )
        return f"each a {_kind(first)}" if same else None
    if not all(c.is_leaf() for c in children):
        return None
    backends = [backend_of(x) for x in leaves]
    if all(b is None for b in backends):
        return "each a single value"
    if any(b is None for b in backends):
        return None
    shapes = {tuple(x.shape) for x in leaves}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    if not shape or len(leaves) > shape[0]:
        return f"each an array of shape {list(shape)}"
    return None


def _looks_like_rows(spec: optree.PyTreeSpec, leaves: Sequence[Any], keyed: bool) -> str | None:
    """What the rows of the list node ``spec`` are when it is a ragged column, or None.

    Lists of numbers (a tokenizer's ``input_ids``) anywhere, and 1-D arrays of one dtype
    under a key (a column's place), whatever their lengths: the rule of
    [`looptoolkit.ragged._column`][looptoolkit.ragged._column].
    """
    children = spec.children()
    if not children:
        return None
    if all(c.type is list for c in children):
        if any(c.is_leaf() or not all(g.is_leaf() for g in c.children()) for c in children):
            return None
        if leaves and all(isinstance(x, int | float | np.number | np.bool_) for x in leaves[:1000]):
            return "each a list of numbers"
        return None
    if not keyed or not all(c.is_leaf() for c in children):
        return None
    if any(backend_of(x) is None or len(getattr(x, "shape", ())) != 1 for x in leaves):
        return None
    if len({str(x.dtype) for x in leaves}) != 1:
        return None
    return "each a 1-D array"


def find_records(data_spec: optree.PyTreeSpec, leaves: Sequence[Any]) -> str | None:
    """The error message for a list of per-sample records in ``data``, or None.

    Args:
        data_spec: the treespec of the Loader's ``data``.
        leaves: its leaves, in order.
    """
    accessors: list[optree.PyTreeAccessor] | None = None

    def visit(spec: optree.PyTreeSpec, start: int, depth: int, keyed: bool) -> str | None:
        nonlocal accessors
        if spec.is_leaf():
            return None
        if spec.type is not None and issubclass(spec.type, list):
            own = leaves[start : start + spec.num_leaves]
            rows = _looks_like_rows(spec, own, keyed)
            what = rows or _looks_like_records(spec, own)
            if what is not None:
                if accessors is None:
                    accessors = data_spec.accessors()
                where = optree.PyTreeAccessor(accessors[start][:depth]).codify("data")
                count = spec.num_children
                if rows is not None:
                    return (
                        f"{where} is a list of {count} variable-length rows ({rows}), one ragged "
                        f"column; read it with `looptoolkit.Ragged.from_rows({where})`, which "
                        "`Loader`, `make_dataloader` and `loader_dataset` batch."
                    )
                return (
                    f"`data` must be a pytree of columns (arrays whose leading dimension "
                    f"indexes the samples), but {where} is a list of {count} per-sample records "
                    f"({what}), which would be batched inside each sample; stack them into "
                    f"columns first, with `looptoolkit.stack_records({where})`."
                )
        sequence = spec.type is not None and issubclass(spec.type, list | deque)
        for child in spec.children():
            found = visit(child, start, depth + 1, not sequence)
            if found is not None:
                return found
            start += child.num_leaves
        return None

    return visit(data_spec, 0, 0, False)


def _stack(leaves: list[Any], where: str) -> Any:
    backends = {backend_of(x) for x in leaves}
    if backends == {None}:
        try:
            return np.asarray(leaves)
        except ValueError as e:
            raise ValueError(f"cannot stack the values of {where} into one array: {e}") from e
    if None in backends or len(backends) != 1:
        kinds = sorted(set(map(kind_of, leaves)))
        raise TypeError(
            f"the records hold values of different kinds at {where} ({', '.join(kinds)}); "
            "make them all arrays of one framework, or all plain values."
        )
    shapes = [tuple(x.shape) for x in leaves]
    for i, shape in enumerate(shapes):
        if shape != shapes[0]:
            raise ValueError(
                f"{where.replace('[i]', '[0]', 1)} has shape {list(shapes[0])} and "
                f"{where.replace('[i]', f'[{i}]', 1)} has shape {list(shape)}; per-sample "
                "arrays of different shapes cannot be stacked: pad or crop them to one shape."
            )
    (backend,) = backends
    assert backend is not None  # checked above
    return backend.stack(leaves)


def stack_records(records: Sequence[Any]) -> Any:
    """Stack a list of per-sample records into one record of columns, for the Loader.

    Every record must have the same structure (dicts, tuples, dataclasses...);
    the result has that structure, and each of its leaves stacks the
    corresponding leaves of all records along a new leading dimension, in the
    records' framework (``np.stack``, ``torch.stack``, ``jnp.stack``,
    ``tf.stack``). Plain values (numbers, strings) become NumPy arrays.

    Args:
        records: a list or tuple of per-sample pytrees.

    Returns:
        One pytree of arrays with a leading dimension of ``len(records)``.

    Raises:
        TypeError: ``records`` is not a non-empty list or tuple, or a field holds
            values of different kinds.
        ValueError: records of different structures, or arrays of different
            shapes in one field (named by key path).

    Examples:
        >>> import numpy as np
        >>> records = [{"x": np.array([i, i]), "y": i} for i in range(3)]
        >>> columns = stack_records(records)
        >>> columns["x"].shape, columns["y"].tolist()
        ((3, 2), [0, 1, 2])
    """
    if not isinstance(records, (list, tuple)) or not records:
        got = (
            f"an empty {type(records).__name__}"
            if isinstance(records, (list, tuple))
            else (type(records).__name__)
        )
        raise TypeError(f"`records` must be a non-empty list or tuple of records, got {got}.")
    flat = [_tree.flatten(r) for r in records]
    first_leaves, spec = flat[0]
    for i, (_, other) in enumerate(flat[1:], start=1):
        if (
            other.type is not spec.type
            or other.num_leaves != spec.num_leaves
            or other.num_nodes != spec.num_nodes
            or other.accessors() != spec.accessors()
        ):
            raise ValueError(
                f"`records[{i}]` has another structure than `records[0]`: {other} "
                f"against {spec}; every record must have the same fields."
            )
    paths = _tree.leaf_paths(spec, "records[i]")
    columns = [
        _stack([leaves[j] for leaves, _ in flat], paths[j]) for j in range(len(first_leaves))
    ]
    return _tree.unflatten(spec, columns)
