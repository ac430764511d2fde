"""The layouts of ragged batches as objects: each holds its own options, checked when built.

[`PadLayout`][looptoolkit.PadLayout], [`FlatLayout`][looptoolkit.FlatLayout],
[`PackLayout`][looptoolkit.PackLayout] and [`FitLayout`][looptoolkit.FitLayout] are what the
[`Loader`][looptoolkit.Loader]'s ``layout=`` takes (or their names, ``"pad"``, ``"flat"``,
``"pack"``, ``"fit"``, for the defaults): an option of one layout cannot be given to another.
``looptoolkit.ragged._options`` reads them, with the Loader's order options, into the checked
options the plans and layouts use. Their fields are also the Loader keywords they replace:
[`refuse_layout_args`][looptoolkit.ragged._layout_options.refuse_layout_args] answers such a
keyword with the object to write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from looptoolkit._common.errors import check_int

__all__ = [
    "LAYOUT_TYPES",
    "LONG_ROWS",
    "FitLayout",
    "FlatLayout",
    "LayoutOptions",
    "PackLayout",
    "PadLayout",
    "refuse_layout_args",
]

LONG_ROWS = ("split", "truncate", "error")


def _check_pad_value(pad_value: Any) -> None:
    if not isinstance(pad_value, int | float | bool | np.generic):
        raise TypeError(f"`pad_value` must be a number, got {type(pad_value).__name__}.")


class _Layout:
    """What every layout object shares: its name and a repr of the options given."""

    name: ClassVar[str]

    def __repr__(self) -> str:
        shown = []
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            default = field.default
            if default is dataclasses.MISSING or not (
                value is default or (type(value) is type(default) and value == default)
            ):
                shown.append(f"{field.name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


@dataclasses.dataclass(frozen=True, repr=False)
class PadLayout(_Layout):
    """Padded batches: ``(B, L)`` rows with their lengths, ``L`` the batch's longest row.

    The default layout (``layout="pad"``); its batches are [`Padded`][looptoolkit.Padded].

    Args:
        pad_value: what fills the padding (a number).
        pad_to_multiple_of: round each batch's length ``L`` up to a multiple of this.
        buckets: an increasing list of lengths; each batch is padded to the smallest that holds
            its longest row (at most ``len(buckets)`` shapes over an epoch). Not with
            ``pad_to_multiple_of``.

    Raises:
        TypeError: ``pad_value`` is not a number, ``pad_to_multiple_of`` is not an int,
            ``buckets`` is not a non-empty list of ints.
        ValueError: ``pad_to_multiple_of < 1``, ``buckets`` not increasing positive lengths,
            or both ``buckets`` and ``pad_to_multiple_of``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, PadLayout, Ragged
        >>> col = Ragged(np.arange(10), [0, 3, 4, 8, 10])
        >>> layout = PadLayout(pad_value=-1, pad_to_multiple_of=4)
        >>> layout
        PadLayout(pad_value=-1, pad_to_multiple_of=4)
        >>> batch = next(iter(Loader(col, 2, layout=layout, shuffle=False)))
        >>> batch.values.tolist()
        [[0, 1, 2, -1], [3, -1, -1, -1]]
    """

    name: ClassVar[str] = "pad"

    pad_value: float = 0
    pad_to_multiple_of: int | None = None
    buckets: Sequence[int] | None = None

    def __post_init__(self) -> None:
        _check_pad_value(self.pad_value)
        multiple = self.pad_to_multiple_of
        if multiple is not None:
            multiple = check_int("pad_to_multiple_of", multiple, minimum=1)
            object.__setattr__(self, "pad_to_multiple_of", multiple)
        buckets = self.buckets
        if buckets is not None:
            if multiple is not None:
                raise ValueError("pass `buckets` or `pad_to_multiple_of`, not both.")
            sizes = np.asarray(buckets)
            if sizes.ndim != 1 or not len(sizes) or sizes.dtype.kind not in "iu":
                raise TypeError(f"`buckets` must be a non-empty list of ints, got {buckets!r}.")
            if sizes.min() < 1 or (np.diff(sizes) <= 0).any():
                raise ValueError(f"`buckets` must be increasing positive lengths, got {buckets!r}.")
            # A tuple of ints: the object stays hashable and compares by value.
            object.__setattr__(self, "buckets", tuple(int(b) for b in sizes))


@dataclasses.dataclass(frozen=True, repr=False)
class FlatLayout(_Layout):
    """Padding-free batches: the batch's rows end to end, with their boundaries.

    Its batches are [`Flat`][looptoolkit.Flat]; it has no options (``layout="flat"`` is the
    same).

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import FlatLayout, Loader, Ragged
        >>> col = Ragged(np.arange(10), [0, 3, 4, 8, 10])
        >>> batch = next(iter(Loader(col, 2, layout=FlatLayout(), shuffle=False)))
        >>> batch.values.tolist(), batch.cu_seqlens.tolist()
        ([0, 1, 2, 3], [0, 3, 4])
        >>> FlatLayout() == FlatLayout()
        True
    """

    name: ClassVar[str] = "flat"


@dataclasses.dataclass(frozen=True, repr=False)
class PackLayout(_Layout):
    """Packed rows, concatenate-then-split: the epoch's rows as one stream cut every ``seq_len``.

    Its batches are [`Packed`][looptoolkit.Packed]; the Loader's ``batch_size`` counts packed
    rows.

    Args:
        seq_len: elements per packed row.
        pad_value: what fills the end of the epoch's last row (a number).

    Raises:
        TypeError: ``seq_len`` is not an int, ``pad_value`` is not a number.
        ValueError: ``seq_len < 1``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, PackLayout, Ragged
        >>> col = Ragged(np.arange(10), [0, 3, 4, 8, 10])
        >>> PackLayout(seq_len=4)
        PackLayout(seq_len=4)
        >>> batch = next(iter(Loader(col, 2, layout=PackLayout(seq_len=4), shuffle=False)))
        >>> batch.values.tolist()
        [[0, 1, 2, 3], [4, 5, 6, 7]]
    """

    name: ClassVar[str] = "pack"

    seq_len: int
    pad_value: float = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq_len", check_int("seq_len", self.seq_len, minimum=1))
        _check_pad_value(self.pad_value)


@dataclasses.dataclass(frozen=True, repr=False)
class FitLayout(_Layout):
    """Packed rows of whole rows: each row of the data goes whole into one row of ``seq_len``.

    Rows are fitted first fit decreasing within windows of the epoch's order; each packed row
    is padded at its end. Its batches are [`Packed`][looptoolkit.Packed]; the Loader's
    ``batch_size`` counts packed rows.

    Args:
        seq_len: elements per packed row.
        max_segments: at most this many rows of the data per packed row (None: no limit).
        long_rows: rows longer than ``seq_len`` are ``"split"`` into pieces of at most
            ``seq_len``, ``"truncate"``d (counted in [`stats`][looptoolkit.Loader.stats]), or
            an ``"error"`` at construction, naming the row.
        pad_value: what fills the end of each packed row (a number).

    Raises:
        TypeError: ``seq_len`` or ``max_segments`` is not an int, ``pad_value`` is not a number.
        ValueError: ``seq_len < 1``, ``max_segments < 1``, an unknown ``long_rows``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import FitLayout, Loader, Ragged
        >>> col = Ragged(np.arange(10), [0, 3, 4, 8, 10])
        >>> layout = FitLayout(seq_len=5, max_segments=2)
        >>> layout
        FitLayout(seq_len=5, max_segments=2)
        >>> batch = next(iter(Loader(col, 2, layout=layout, shuffle=False)))
        >>> batch.values.shape
        (2, 5)
    """

    name: ClassVar[str] = "fit"

    seq_len: int
    max_segments: int | None = None
    long_rows: str = "error"
    pad_value: float = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq_len", check_int("seq_len", self.seq_len, minimum=1))
        if self.max_segments is not None:
            segments = check_int("max_segments", self.max_segments, minimum=1)
            object.__setattr__(self, "max_segments", segments)
        if not isinstance(self.long_rows, str) or self.long_rows not in LONG_ROWS:
            raise ValueError(
                f"`long_rows` must be one of {', '.join(map(repr, LONG_ROWS))}, "
                f"got {self.long_rows!r}."
            )
        _check_pad_value(self.pad_value)


LayoutOptions = PadLayout | FlatLayout | PackLayout | FitLayout
LAYOUT_TYPES: tuple[type[LayoutOptions], ...] = (PadLayout, FlatLayout, PackLayout, FitLayout)

# The options a layout object holds -> the layouts that hold it: once Loader keywords.
_OWNERS: dict[str, list[type[LayoutOptions]]] = {}
for _cls in LAYOUT_TYPES:
    for _field in dataclasses.fields(_cls):
        _OWNERS.setdefault(_field.name, []).append(_cls)
del _cls, _field


def refuse_layout_args(kwargs: Mapping[str, Any]) -> None:
    """Refuse a layout's option passed as a keyword, naming the layout object to write instead.

    The object named holds every such option given (with the user's values) and the options
    of a layout object given as ``layout``; it is the layout ``layout`` names if that layout
    holds the first option, else the first layout that holds them all.

    Raises:
        TypeError: one of ``pad_value``, ``pad_to_multiple_of``, ``buckets``, ``seq_len``,
            ``max_segments`` or ``long_rows`` is among ``kwargs``.
    """
    moved = [name for name in kwargs if name in _OWNERS]
    if not moved:
        return
    owners = _OWNERS[moved[0]]
    layout = kwargs.get("layout")
    named = getattr(layout, "name", layout)
    chosen = next((c for c in owners if c.name == named), None) or next(
        (c for c in owners if all(c in _OWNERS[m] for m in moved)), owners[0]
    )
    given = []
    for f in dataclasses.fields(chosen):
        kept = getattr(layout, f.name) if isinstance(layout, chosen) else f.default
        if f.name in moved:
            given.append(f"{f.name}={kwargs[f.name]!r}")
        elif kept is dataclasses.MISSING:  # a required option not given: its place shown
            given.append(f"{f.name}=...")
        elif kept is not f.default and kept != f.default:  # the given object's own options
            given.append(f"{f.name}={kept!r}")
    names = [c.name for c in owners]
    which = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    raise TypeError(
        f"`{moved[0]}` is an option of the {which} layout{'s' if len(names) > 1 else ''}: "
        f"write `layout=looptoolkit.{chosen.__name__}({', '.join(given)})`."
    )
