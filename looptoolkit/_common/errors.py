"""Errors and argument checks shared by the core and the adapters.

A leaf module: it imports nothing of looptoolkit.
"""

from __future__ import annotations

import numbers
import os
import sys

__all__ = ["PACKAGE_DIR", "RepeatedEpochWarning", "TransferError", "caller_stacklevel", "check_int"]

# The package's folder (this module is in `_common/`): frames in it are looptoolkit's.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


class RepeatedEpochWarning(UserWarning):
    """Two passes in a row ran the same batches: each ended early, after as many batches.

    A pass that ends before its epoch's last batch (``break``, an error) leaves the
    epoch where it was, so a loop that caps every epoch with ``break`` runs the same
    batches each time. Shown once per loader, when a pass ends early after as many
    batches as the pass before it, with no ``set_epoch`` or ``load_state_dict``
    between them (a pass of one batch, a probe or a peek, counts as neither).

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> from looptoolkit import Loader
        >>> loader = Loader({"y": np.arange(8)}, 2)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     for epoch in range(3):
        ...         for i, batch in enumerate(loader):
        ...             if i == 1:
        ...                 break
        >>> [w.category.__name__ for w in caught]
        ['RepeatedEpochWarning']
    """


def caller_stacklevel(internal: tuple[str, ...] = (PACKAGE_DIR,)) -> int:
    """``stacklevel`` that points a warning at the first frame outside the ``internal`` dirs.

    Called by the function that warns (stacklevel 1 is that function).
    """
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


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
