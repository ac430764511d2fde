"""A chunk cache on local disk for remote objects: bounded in bytes, least recently used out.

Shared by every process that names the same directory (the ranks of a node, a
DataLoader's workers): an entry is written to a temporary file and renamed into
place (``os.replace``: a reader sees the whole entry or none), its use is its
file's modification time (touched on each hit), and the total is kept in a small
file updated under an ``fcntl`` lock, the same lock under which the least recently
used entries are removed when a write would pass the budget. An entry's name is a
hash of the object's address, key, size and version (its ETag), so an object
that changed is a different entry: a stale one is never served, and ages out.
An object larger than the whole budget is not kept (it is served from memory).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DiskCache"]

_SUFFIX = ".chunk"


class DiskCache:
    """Objects' bytes in files under ``directory``, at most ``budget`` bytes in all.

    Args:
        directory: the cache's directory (made if missing).
        budget: the most bytes of entries kept.
        space: what the entries' names are hashed with besides the key (the
            store's address: an endpoint and a bucket, never credentials).
    """

    def __init__(self, directory: str | os.PathLike[str], budget: int, space: str = "") -> None:
        self.directory = Path(directory)
        self.budget = budget
        self.space = space
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_path = self.directory / ".lock"
        self._total_path = self.directory / ".total"

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def path(self, ref: Any) -> Path:
        """Where ``ref``'s entry is (its key, range and version hashed with the space)."""
        text = f"{self.space}\0{ref.key}\0{ref.start}\0{ref.size}\0{ref.version}"
        return self.directory / (hashlib.sha256(text.encode()).hexdigest() + _SUFFIX)

    def has(self, ref: Any) -> bool:
        """Whether ``ref``'s entry is here now, with its listed length (one ``stat``)."""
        try:
            return self.path(ref).stat().st_size == ref.size
        except FileNotFoundError:
            return False

    def get(self, ref: Any) -> bytes | None:
        """``ref``'s bytes, or None when not cached (or cached with another length)."""
        path = self.path(ref)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if len(data) != ref.size:  # not what was listed: treat as missing
            return None
        with contextlib.suppress(FileNotFoundError):
            os.utime(path)  # most recently used
        return data

    def put(self, ref: Any, data: bytes) -> None:
        """Keep ``data`` as ``ref``'s entry, removing least recently used entries for room."""
        size = len(data)
        if size > self.budget:
            return
        path = self.path(ref)
        if path.exists():
            return
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            with self._locked():
                if path.exists():
                    return
                total = self._total() + size
                if total > self.budget:
                    total = self._evict(self.budget - size) + size
                os.replace(tmp, path)
                tmp = ""
                self._total_path.write_text(str(total))
        finally:
            if tmp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of every entry, oldest first."""
        out = []
        for path in self.directory.glob("*" + _SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                st = path.stat()
                out.append((st.st_mtime, st.st_size, path))
        return sorted(out)

    def size(self) -> int:
        """Bytes of the entries now."""
        return sum(size for _, size, _ in self.entries())

    def _total(self) -> int:
        try:
            return int(self._total_path.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return self.size()

    def _evict(self, room: int) -> int:
        """Remove the oldest entries until at most ``room`` bytes are left; returns what is left."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= room:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            total -= size
        return total

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
