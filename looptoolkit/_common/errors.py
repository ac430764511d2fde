"""Errors and argument checks shared by the core and the adapters.

A leaf module: it imports nothing of looptoolkit.
"""

from __future__ import annotations

import numbers

__all__ = ["TransferError", "check_int"]


class TransferError(RuntimeError):
    """A leaf could not be moved; the message names its key path and the cause.

    Attributes:
        path: the leaf's key path (``batch['im']['image']``), or None when unknown.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import to_device
        >>> image = np.array(["a"])  # text that cannot become int8
        >>> try:
        ...     to_device({"im": {"image": image}}, "cpu", dtype={image.dtype: np.int8})
        ... except TransferError as e:
        ...     print(e.path)
        batch['im']['image']
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` (an int or a NumPy integer) as a plain int.

    Raises:
        TypeError: ``value`` is no integer (a bool is none either).
        ValueError: ``value`` is below ``minimum``; both name the argument ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
    return value
