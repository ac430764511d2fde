"""The ragged options of a Loader, checked once at construction.

``layout`` (a layout object of ``looptoolkit.ragged._layout_options``, which checks its own
options, or a layout's name), ``batch_tokens`` and ``group_by_length``: what each combination
means is in ``docs/ragged.md``; every combination that means nothing is refused here, by name.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from looptoolkit._common.errors import check_int
from looptoolkit.ragged._layout_options import (
    LAYOUT_TYPES,
    FitLayout,
    FlatLayout,
    LayoutOptions,
    PackLayout,
    PadLayout,
)

__all__ = ["DEFAULTS", "LAYOUTS", "Options", "check_unused", "given", "layout_of", "options"]

LAYOUTS = ("pad", "flat", "pack", "fit")


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


def layout_of(layout: Any) -> LayoutOptions:
    """The layout object ``layout`` stands for: itself, or a name's default (None: ``"pad"``).

    Raises:
        TypeError: ``layout`` is neither a layout object nor a str.
        ValueError: an unknown name, or ``"pack"``/``"fit"`` (they need ``seq_len``).
    """
    if isinstance(layout, LAYOUT_TYPES):
        return layout
    if layout is None:
        return PadLayout()
    if not isinstance(layout, str):
        raise TypeError(
            "`layout` must be a layout object (`looptoolkit.PadLayout`, `FlatLayout`, "
            f"`PackLayout`, `FitLayout`) or its name, got {type(layout).__name__}."
        )
    if layout not in LAYOUTS:
        raise ValueError(
            f"`layout` must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}."
        )
    if layout in ("pack", "fit"):
        cls = PackLayout if layout == "pack" else FitLayout
        raise ValueError(
            f'`layout="{layout}"` needs `seq_len`, the elements per packed row: write '
            f"`layout=looptoolkit.{cls.__name__}(seq_len=...)`."
        )
    return PadLayout() if layout == "pad" else FlatLayout()


def options(batch_size: Any, *, layout: Any, batch_tokens: Any, group_by_length: Any) -> Options:
    """The ragged options, checked: every wrong combination named.

    Args:
        batch_size: the Loader's ``batch_size``.
        layout: a layout object, a layout's name or None (``"pad"``).
        batch_tokens: the Loader's ``batch_tokens``.
        group_by_length: the Loader's ``group_by_length``.

    Raises:
        TypeError: an option of a wrong type.
        ValueError: a wrong value, or options that do not go together.
    """
    spec = layout_of(layout)
    name = spec.name
    if not isinstance(group_by_length, bool):
        raise TypeError(f"`group_by_length` must be a bool, got {type(group_by_length).__name__}.")
    if batch_tokens is not None and name not in ("pad", "flat"):
        raise ValueError(f"`batch_tokens` applies to `layout` 'pad' or 'flat', not {name!r}.")
    if group_by_length and name in ("pack", "fit"):
        raise ValueError(f'`group_by_length` does not apply to `layout="{name}"`.')
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
    buckets = getattr(spec, "buckets", None)
    return Options(
        name,
        batch_size,
        batch_tokens,
        getattr(spec, "seq_len", None),
        group_by_length,
        getattr(spec, "pad_value", 0),
        getattr(spec, "pad_to_multiple_of", None),
        None if buckets is None else np.asarray(buckets, dtype=np.int64),
        getattr(spec, "max_segments", None),
        getattr(spec, "long_rows", "error"),
    )


# The options' defaults: an option given otherwise needs ragged leaves.
DEFAULTS: dict[str, Any] = {"layout": None, "batch_tokens": None, "group_by_length": False}


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
