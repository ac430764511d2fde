"""Read advice: the Loader advises MADV_RANDOM on memory maps its order reads scattered.

On Linux, ``/proc/self/smaps`` lists each mapping of this process with a
``VmFlags:`` line, where ``rr`` means random-read advice is set; each test maps
its own file and reads the flags of that file's mappings.
"""

from __future__ import annotations

import mmap
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

import looptoolkit as lt
from looptoolkit import Loader, PackLayout, Ragged
from looptoolkit._rows.advice import advise_reads
from looptoolkit._rows.mapped import advise_random, mapping_of

SMAPS = Path("/proc/self/smaps")
needs_smaps = pytest.mark.skipif(
    not SMAPS.exists() or not hasattr(mmap, "MADV_RANDOM"),
    reason="reads the advice back from /proc/self/smaps (Linux only)",
)


def vm_flags(path: os.PathLike[str] | str) -> list[set[str]]:
    """The ``VmFlags`` of each mapping of the file ``path`` in this process."""
    target = os.path.realpath(path)
    found: list[set[str]] = []
    mapped = False
    for line in SMAPS.read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's first line
            mapped = len(head) == 6 and head[5] == target
        elif mapped and line.startswith("VmFlags:"):
            found.append(set(line.split()[1:]))
    return found


def advised(path: os.PathLike[str] | str) -> bool:
    """Whether the file is mapped and every mapping of it has random-read advice."""
    flags = vm_flags(path)
    assert flags, f"{path} is not mapped"
    return all("rr" in f for f in flags)


def memmap(path: Path, rows: int = 10_000, width: int = 4) -> np.memmap:
    np.save(path, np.arange(rows * width, dtype=np.int32).reshape(rows, width))
    return np.load(path, mmap_mode="r")


@needs_smaps
def test_a_shuffled_loader_advises_its_memmap(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    data = np.memmap(path, dtype=np.float32, mode="w+", shape=(10_000, 8))
    assert not advised(path)
    Loader({"x": data}, 32, shuffle=True)
    assert advised(path)
    mapping_of(data).madvise(mmap.MADV_NORMAL)  # the undo the docs give
    assert not advised(path)


@needs_smaps
def test_a_sequential_loader_keeps_the_read_ahead(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    loader = Loader(memmap(path), 32, shuffle=False)
    next(iter(loader))
    assert not advised(path)


@needs_smaps
@pytest.mark.parametrize(
    "options",
    [{"replacement": True}, {"weights": np.ones(10_000)}, {"indices": np.arange(0, 10_000, 3)}],
    ids=["replacement", "weights", "subset"],
)
def test_drawn_and_subset_orders_advise(tmp_path: Path, options: dict[str, object]) -> None:
    path = tmp_path / "x.npy"
    Loader(memmap(path), 32, **options)
    assert advised(path)


@needs_smaps
def test_an_order_the_user_gives_keeps_the_read_ahead(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    Loader(memmap(path), 32, order_fn=lambda seed, epoch: np.arange(10_000))
    assert not advised(path)


@needs_smaps
@pytest.mark.parametrize(
    "view",
    [lambda m: m[100:], lambda m: m[:, 1], lambda m: np.asarray(m)[::2]],
    ids=["slice", "column", "ndarray-view"],
)
def test_views_of_a_memmap_are_advised(tmp_path: Path, view) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.npy"
    Loader({"x": view(memmap(path))}, 32, shuffle=True)
    assert advised(path)


@needs_smaps
def test_ragged_memmap_values_and_offsets_are_advised(tmp_path: Path) -> None:
    lengths = np.arange(2_000) % 17
    offsets = np.memmap(tmp_path / "offsets", dtype=np.int64, mode="w+", shape=(2_001,))
    offsets[1:] = np.cumsum(lengths)
    values = np.memmap(tmp_path / "values", dtype=np.int32, mode="w+", shape=(int(offsets[-1]),))
    loader = Loader({"tokens": Ragged(values, offsets)}, 16, shuffle=True)
    next(iter(loader))
    assert advised(tmp_path / "values")
    assert advised(tmp_path / "offsets")


@needs_smaps
@pytest.mark.parametrize(
    ("options", "world", "offsets_advised"),
    [
        ({"layout": PackLayout(seq_len=64)}, 1, False),
        ({"batch_tokens": 256}, 1, False),
        ({"group_by_length": True}, 1, False),
        ({"group_by_length": True}, 64, True),  # batches made by window: offsets scattered
    ],
)
def test_plans_of_the_whole_epoch_keep_the_offsets_read_ahead(
    tmp_path: Path, options: dict[str, object], world: int, offsets_advised: bool
) -> None:
    # A whole-epoch plan reads every offset in sequence; its batches still read values scattered.
    lengths = np.arange(20_000) % 17 + 1
    offsets = np.memmap(tmp_path / "offsets", dtype=np.int64, mode="w+", shape=(20_001,))
    offsets[1:] = np.cumsum(lengths)
    values = np.memmap(tmp_path / "values", dtype=np.int32, mode="w+", shape=(int(offsets[-1]),))
    batch = None if "batch_tokens" in options else 16
    Loader({"t": Ragged(values, offsets)}, batch, rank=0, world_size=world, **options)
    assert advised(tmp_path / "values")
    assert advised(tmp_path / "offsets") == offsets_advised


@needs_smaps
def test_a_mixture_of_memmaps_is_advised(tmp_path: Path) -> None:
    a, b = memmap(tmp_path / "a.npy", 3_000), memmap(tmp_path / "b.npy", 2_000)
    next(iter(Loader(lt.Mix({"a": a, "b": b}, [0.5, 0.5]), 16, shuffle=True)))
    assert advised(tmp_path / "a.npy") and advised(tmp_path / "b.npy")


@needs_smaps
@pytest.mark.parametrize(("world_size", "expected"), [(4096, True), (1, False)])
def test_grouped_advises_where_a_rank_reads_little_of_each_window(
    tmp_path: Path, world_size: int, expected: bool
) -> None:
    # uint8 rows: one rank of 4096 reads 2 rows of each 8 KiB group (advised); one rank
    # of 1 reads whole groups, which the read-ahead brings in in a few large reads.
    path = tmp_path / "x.bin"
    data = np.memmap(path, dtype=np.uint8, mode="w+", shape=(50_000,))
    Loader(data, 256, shuffle="grouped", rank=0, world_size=world_size)
    assert advised(path) is expected


@needs_smaps
def test_rows_that_fill_the_read_ahead_window_keep_it(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    data = np.memmap(path, dtype=np.uint8, mode="w+", shape=(8, 256 * 1024))
    Loader(data, 2, shuffle=True)
    assert not advised(path)


def test_arrays_without_a_mapping_are_left_alone(tmp_path: Path) -> None:
    data = memmap(tmp_path / "x.npy", 100)
    assert mapping_of(np.arange(3)) is None
    assert mapping_of(pickle.loads(pickle.dumps(data))) is None  # unpickled: in memory
    assert mapping_of(data[3:]) is mapping_of(data) is not None
    assert advise_reads([np.arange(100), 3], {"shuffle": True}, 1) == 0


def test_advice_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = memmap(tmp_path / "x.npy", 100)
    bare = np.frombuffer(memoryview(mmap.mmap(-1, 4096)), dtype=np.uint8)
    assert advise_random([data, data[1:], bare]) == (2 if hasattr(mmap, "MADV_RANDOM") else 0)
    monkeypatch.delattr(mmap, "MADV_RANDOM", raising=False)  # a platform without it
    assert advise_random([data]) == 0
    Loader(data, 8, shuffle=True)  # and the Loader goes on without it
