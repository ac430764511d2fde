"""dtype rules shared by the core and the adapters (a leaf module).

Every framework's dtype is known here by its NumPy-style name (``"float32"``,
``"bfloat16"``). [`DtypePolicy`][looptoolkit._common.dtypes.DtypePolicy] decides which dtype a leaf
should arrive in, and [`cast_before_copy`][looptoolkit._common.dtypes.cast_before_copy] on which
side of the copy the cast runs: the side that moves fewer bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "FLOATING",
    "DtypePolicy",
    "as_numpy_dtype",
    "cast_before_copy",
    "dtype_name",
    "itemsize",
]

_ITEMSIZE = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
}
FLOATING = frozenset(n for n in _ITEMSIZE if n.startswith(("float", "bfloat")))
# Short names that frameworks give their dtypes, valid only with a module prefix
# ("torch.float" is float32): a bare "float" or "int" means what it means to
# NumPy (float64, int64).
_PREFIXED_ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "cfloat": "complex64",
}


def _from_text(text: str) -> str | None:
    prefix, _, base = text.rpartition(".")
    base = _PREFIXED_ALIASES.get(base, base) if prefix else text
    return base if base in _ITEMSIZE else None


def dtype_name(dtype: Any) -> str:
    """NumPy-style name of a NumPy, torch, JAX or tf dtype, or of a dtype string.

    Raises:
        TypeError: ``dtype`` is not a dtype.

    Examples:
        >>> dtype_name(np.float16), dtype_name("uint8"), dtype_name("torch.half")
        ('float16', 'uint8', 'float16')
    """
    if dtype is None:
        # np.dtype(None) is float64: never what a caller who wrote None meant.
        raise TypeError("`dtype` None is not a dtype.")
    if isinstance(dtype, str):
        name = _from_text(dtype)
        if name is not None:
            return name
    elif isinstance(dtype, np.dtype):
        return dtype.name
    elif not isinstance(dtype, type):
        # Dtype objects that know their name (tf's), then those that print it
        # with their module's prefix (torch's "torch.float32").
        own = getattr(dtype, "name", None)
        if isinstance(own, str):
            return own
        name = _from_text(str(dtype))
        if name is not None:
            return name
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"`dtype` {dtype!r} is not a dtype.") from None


def as_numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype for a dtype name, ``bfloat16`` and friends through ml_dtypes."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # installed with jax and tensorflow; needed only for their dtypes

        return np.dtype(getattr(ml_dtypes, name))


def itemsize(name: str) -> int:
    """Bytes per element of the dtype called ``name``."""
    size = _ITEMSIZE.get(name)
    if size is None:
        size = as_numpy_dtype(name).itemsize
    return size


def cast_before_copy(source: str, target: str) -> bool:
    """Whether to cast before the copy: only when it makes the copy smaller.

    uint8 -> float16 is copied as uint8 (1 byte per element) and cast on the
    destination; float32 -> float16 is cast first (2 bytes instead of 4).

    Examples:
        >>> cast_before_copy("float32", "float16"), cast_before_copy("uint8", "float16")
        (True, False)
    """
    try:
        return itemsize(target) < itemsize(source)
    except (TypeError, AttributeError, ImportError):
        # A dtype with no size of its own (a string dtype): the cast after the copy
        # reports what is impossible about it.
        return False


class DtypePolicy:
    """Which dtype each leaf should arrive in, from ``to_device``'s ``dtype`` argument.

    Args:
        dtype: None; one dtype, applied to floating-point leaves only; or a mapping
            from source dtype to target dtype.

    Examples:
        >>> policy = DtypePolicy({np.uint8: "float16"})
        >>> policy("uint8"), policy("float32")
        ('float16', None)
    """

    __slots__ = ("mapping", "single")

    def __init__(self, dtype: Any) -> None:
        self.single: str | None = None
        self.mapping: dict[str, str] | None = None
        if dtype is None:
            return
        if isinstance(dtype, Mapping):
            self.mapping = {dtype_name(k): dtype_name(v) for k, v in dtype.items()}
        else:
            self.single = dtype_name(dtype)

    def __call__(self, source: str) -> str | None:
        """The dtype a leaf of dtype ``source`` arrives in; None: it keeps its own."""
        if self.single is not None:
            target = self.single if source in FLOATING else None
        elif self.mapping is not None:
            target = self.mapping.get(source)
        else:
            return None
        return None if target == source else target
