"""Files behind memory-mapped leaves: checked at the start of each pass.

A ``np.memmap`` (or ``np.load(..., mmap_mode=...)``) leaf reads its file's
pages as they are touched. If the file is cut shorter while it is mapped, a read
past the new end kills the process with ``SIGBUS``, which no Python code can
catch; if it is replaced, the map goes on reading the old file. The Loader
records each mapped file's identity and size when it is made, and
[`MappedFiles.check`][looptoolkit._mapped.MappedFiles.check] refuses a pass over
a file that changed since, naming it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["MappedFiles"]


def _identity(filename: str) -> tuple[int, int, int]:
    status = os.stat(filename)
    return status.st_dev, status.st_ino, status.st_size


class MappedFiles:
    """The files behind a data's ``np.memmap`` leaves, as they were when recorded.

    Args:
        leaves: the data's leaves; those that are memmaps of a file are recorded.
        paths: makes each leaf's key path (``data['x']``), for messages.
    """

    def __init__(self, leaves: Sequence[Any], paths: Callable[[], Sequence[str]]) -> None:
        self.files: list[tuple[str, str, tuple[int, int, int]]] = []
        mapped: list[tuple[int, str]] = [
            (i, os.fspath(leaf.filename))
            for i, leaf in enumerate(leaves)
            if isinstance(leaf, np.memmap) and leaf.filename is not None
        ]
        if mapped:
            names = paths()
            for i, filename in mapped:
                self.files.append((names[i], filename, _identity(filename)))

    def __bool__(self) -> bool:
        return bool(self.files)

    def check(self) -> None:
        """Raise if a mapped file was removed, replaced or changed size since it was recorded.

        Raises:
            RuntimeError: naming the leaf, the file and what changed.
        """
        for path, filename, (dev, ino, size) in self.files:
            try:
                now = _identity(filename)
            except OSError as e:
                change = f"it can no longer be read ({e.strerror})"
            else:
                if now[:2] != (dev, ino):
                    change = "it was replaced by another file"
                elif now[2] != size:
                    change = f"it was {size} bytes and is now {now[2]}"
                else:
                    continue
            raise RuntimeError(
                f"{path} is a memory map of {filename!r}, which changed since the Loader was "
                f"made: {change}. Reading it could crash the process (a read past the end of "
                "a shortened mapped file is a SIGBUS); map the file again "
                "(`np.load(path, mmap_mode='r')`) and make a new Loader."
            )
