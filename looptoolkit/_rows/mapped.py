"""Files behind memory-mapped leaves: checked at the start of each pass.

A ``np.memmap`` (or ``np.load(..., mmap_mode=...)``) leaf reads its file's
pages as they are touched. If the file is cut shorter while it is mapped, a read
past the new end kills the process with ``SIGBUS``, which no Python code can
catch; if it is replaced, the map goes on reading the old file. The Loader
records each mapped file's identity and size when it is made, and
[`MappedFiles.check`][looptoolkit._rows.mapped.MappedFiles.check] refuses a pass over
a file that changed since, naming it.

The same leaves are read as the order says: a shuffled or drawn order touches
rows scattered over the whole file, and on each page fault the kernel reads
ahead around the page (128 KiB by default), most of it never used.
[`advise_random`][looptoolkit._rows.mapped.advise_random] tells the kernel that a
mapping is read at random (``MADV_RANDOM``: only the faulting page is read).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["MappedFiles", "advise_random", "mapping_of"]


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


def mapping_of(array: Any) -> mmap.mmap | None:
    """The ``mmap.mmap`` object an array's memory belongs to, or None.

    Found up the array's ``base`` chain (public attributes): a ``np.memmap``,
    ``np.load(..., mmap_mode=...)``, a slice or view of one, or an array over a
    ``memoryview`` of a mapping all reach it. Anything else (an in-memory array, a
    memmap read back from a pickle, another framework's tensor) has none.
    """
    while isinstance(array, np.ndarray | memoryview):
        array = array.obj if isinstance(array, memoryview) else array.base
    return array if isinstance(array, mmap.mmap) else None


def advise_random(arrays: Iterable[Any]) -> int:
    """Advise the kernel that the mappings behind ``arrays`` are read at random.

    ``madvise(MADV_RANDOM)`` on each distinct mapping: a page fault then reads
    that page alone, not the read-ahead window around it. The advice is the
    mapping's, so it holds for every array that shares it (the caller's own
    ``np.memmap`` too) until changed: ``mapping_of(a).madvise(mmap.MADV_NORMAL)``
    restores the default. Advice is never an error: where the platform has no
    ``madvise`` (Windows) or the kernel refuses it, nothing happens.

    Returns:
        The number of mappings advised.
    """
    advice = getattr(mmap, "MADV_RANDOM", None)
    if advice is None:
        return 0
    advised: dict[int, mmap.mmap] = {}
    for array in arrays:
        mapping = mapping_of(array)
        if mapping is None or id(mapping) in advised:
            continue
        try:
            mapping.madvise(advice)
        except (AttributeError, OSError, ValueError):  # no madvise, refused, or closed
            continue
        advised[id(mapping)] = mapping
    return len(advised)
