"""The ragged options of a Loader, checked once at construction.

``layout``, ``pad_value``, ``pad_to_multiple_of``, ``buckets``, ``seq_len``, ``batch_tokens``,
``group_by_length``, ``max_segments`` and ``long_rows``: what each combination means is in
``docs/ragged.md``; every combination that means nothing is refused here, by name.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from looptoolkit._common.errors import check_int

__all__ = ["DEFAULTS", "LAYOUTS", "LONG_ROWS", "Options", "check_unused", "given", "options"]

LAYOUTS = ("pad", "flat", "pack", "fit")
LONG_ROWS = ("split", "truncate", "error")


class Options(NamedTuple):
    """The ragged options of a Loader, checked."""

    layout: str
    batch_size: int | None
    batch_tokens: int | None
    seq_len: int | None
    group_by_length: bool
    pad_value: Any
    pad_to_multiple_of: int | None
    buckets: np.ndarray | None
    max_segments: int | None
    long_rows: str

    @property
    def units(self) -> bool:
        """Whether epochs are planned into whole batches (else: batches of rows)."""
        return (
            self.layout in ("pack", "fit")
            or self.batch_tokens is not None
            or (self.group_by_length)
        )

    def params(self) -> dict[str, Any]:
        """What a saved state must match: every option that changes the plan."""
        buckets = None if self.buckets is None else [int(b) for b in self.buckets]
        return {
            "layout": self.layout,
            "batch_tokens": self.batch_tokens,
            "seq_len": self.seq_len,
            "group_by_length": self.group_by_length,
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "buckets": buckets,
            "max_segments": self.max_segments,
            "long_rows": self.long_rows,
        }


def options(
    batch_size: Any,
    *,
    layout: Any,
    batch_tokens: Any,
    seq_len: Any,
    group_by_length: Any,
    pad_value: Any,
    pad_to_multiple_of: Any,
    buckets: Any,
    max_segments: Any,
    long_rows: Any,
) -> Options:
    """The ragged options, checked: every wrong combination named.

    Raises:
        TypeError: an option of a wrong type.
        ValueError: a wrong value, or options that do not go together.
    """
    layout = "pad" if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(
            f"`layout` must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}."
        )
    if long_rows not in LONG_ROWS:
        raise ValueError(
            f"`long_rows` must be one of {', '.join(map(repr, LONG_ROWS))}, got {long_rows!r}."
        )
    if not isinstance(group_by_length, bool):
        raise TypeError(f"`group_by_length` must be a bool, got {type(group_by_length).__name__}.")
    packs = layout in ("pack", "fit")

    def only(name: str, value: Any, allowed: tuple[str, ...], default: Any = None) -> None:
        if value is not default and layout not in allowed:
            raise ValueError(
                f"`{name}` applies to `layout` {' or '.join(map(repr, allowed))}, not {layout!r}."
            )

    only("seq_len", seq_len, ("pack", "fit"))
    only("pad_to_multiple_of", pad_to_multiple_of, ("pad",))
    only("buckets", buckets, ("pad",))
    only("max_segments", max_segments, ("fit",))
    only("long_rows", long_rows, ("fit",), "error")
    only("batch_tokens", batch_tokens, ("pad", "flat"))
    if packs:
        if seq_len is None:
            raise ValueError(f'`layout="{layout}"` needs `seq_len`, the elements per packed row.')
        seq_len = check_int("seq_len", seq_len, minimum=1)
        if group_by_length:
            raise ValueError(f'`group_by_length` does not apply to `layout="{layout}"`.')
    if batch_tokens is not None:
        batch_tokens = check_int("batch_tokens", batch_tokens, minimum=1)
        if batch_size is not None:
            raise ValueError(
                "pass `batch_size` (rows per batch) or `batch_tokens` (a token budget), not both."
            )
    elif batch_size is None:
        raise ValueError("`batch_size` is required (or `batch_tokens` for a token budget).")
    else:
        batch_size = check_int("batch_size", batch_size, minimum=1)
    if pad_to_multiple_of is not None:
        pad_to_multiple_of = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    if buckets is not None:
        if pad_to_multiple_of is not None:
            raise ValueError("pass `buckets` or `pad_to_multiple_of`, not both.")
        sizes = np.asarray(buckets)
        if sizes.ndim != 1 or not len(sizes) or sizes.dtype.kind not in "iu":
            raise TypeError(f"`buckets` must be a non-empty list of ints, got {buckets!r}.")
        if sizes.min() < 1 or (np.diff(sizes) <= 0).any():
            raise ValueError(f"`buckets` must be increasing positive lengths, got {buckets!r}.")
        buckets = sizes.astype(np.int64)
    if max_segments is not None:
        max_segments = check_int("max_segments", max_segments, minimum=1)
    if pad_value is not None and not isinstance(pad_value, int | float | bool | np.generic):
        raise TypeError(f"`pad_value` must be a number, got {type(pad_value).__name__}.")
    return Options(
        layout,
        batch_size,
        batch_tokens,
        seq_len,
        group_by_length,
        0 if pad_value is None else pad_value,
        pad_to_multiple_of,
        buckets,
        max_segments,
        long_rows,
    )


# The options' defaults: an option given otherwise needs ragged leaves.
DEFAULTS: dict[str, Any] = {
    "layout": None,
    "pad_value": None,
    "pad_to_multiple_of": None,
    "buckets": None,
    "seq_len": None,
    "batch_tokens": None,
    "group_by_length": False,
    "max_segments": None,
    "long_rows": "error",
}


def given(args: dict[str, Any]) -> list[str]:
    """The options in ``args`` given other values than their defaults."""
    out = []
    for key, value in args.items():
        default = DEFAULTS[key]
        if not (value is default or (type(value) is type(default) and value == default)):
            out.append(key)
    return out


def check_unused(args: dict[str, Any], batch_size: Any) -> None:
    """Refuse ragged options for data without ragged leaves, and a missing ``batch_size``.

    Raises:
        ValueError: a ragged option was given, or ``batch_size`` is None.
    """
    names = given(args)
    if names:
        raise ValueError(
            f"`{names[0]}` applies to ragged leaves (variable-length rows), and `data` has "
            "none; wrap such a column as `looptoolkit.Ragged(values, offsets)`."
        )
    if batch_size is None:
        raise ValueError("`batch_size` is required.")
