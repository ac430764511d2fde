"""Ragged columns at scale: memory-mapped offsets read a batch at a time, grouping by window.

A padded or flat batch reads only its rows' offsets (`Ragged.spans`): memory-mapped offsets
are never read whole, never differenced whole, and checked as their rows are read. Length-
grouped batches on a rank of many (`UnitOrder.windowed`) are made one at a time from their
window of the epoch's order, and equal the batches of the whole epoch's plan.
"""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looptoolkit import Loader, Ragged
from looptoolkit.order import Order
from looptoolkit.ragged import _units


def _mapped(tmp_path, offsets, dtype=np.int64):
    path = tmp_path / f"offsets-{len(offsets)}.bin"
    np.asarray(offsets, dtype=dtype).tofile(path)
    return np.memmap(path, dtype=dtype, mode="r")


def _sparse(tmp_path, n):
    """``n + 1`` zero offsets (``n`` empty documents) in a sparse file: no memory, no disk."""
    path = tmp_path / f"sparse-{n}.i8"
    with open(path, "wb") as f:
        f.truncate(8 * (n + 1))
    return np.memmap(path, dtype=np.int64, mode="r", shape=(n + 1,))


@pytest.mark.parametrize("layout", ["pad", "flat"])
def test_a_batch_reads_its_rows_offsets_alone(tmp_path, layout):
    n = 4_000_000  # 32 MB of offsets: reading or differencing them whole would show
    col = Ragged(np.zeros(0, dtype=np.int32), _sparse(tmp_path, n))
    tracemalloc.start()
    loader = Loader({"t": col}, 256, shuffle=True, layout=layout, rank=3, world_size=64)
    batches = [b for _, b in zip(range(5), loader, strict=False)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(batches) == 5 and col._lengths is None and loader._rows._row_lengths is None
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB traced"


def test_mapped_offsets_give_the_rows_of_in_memory_ones(tmp_path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 9, 500)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = rng.integers(0, 1000, int(offsets[-1])).astype(np.int32)
    ids = np.arange(500)
    for dtype in (np.int64, np.uint64):
        mapped = Ragged(values, _mapped(tmp_path, offsets, dtype))
        assert mapped.offsets.dtype == np.int64 and mapped._lengths is None
        for layout in ("pad", "flat"):
            want = Loader({"t": Ragged(values, offsets), "i": ids}, 7, shuffle=True, layout=layout)
            got = Loader({"t": mapped, "i": ids}, 7, shuffle=True, layout=layout)
            for a, b in zip(want, got, strict=True):
                for x, y in zip(a["t"], b["t"], strict=True):
                    np.testing.assert_array_equal(x, y)
                np.testing.assert_array_equal(a["i"], b["i"])
        np.testing.assert_array_equal(mapped.lengths, lengths)
        np.testing.assert_array_equal(mapped[17], values[offsets[17] : offsets[18]])


def test_mapped_offsets_are_checked_as_their_rows_are_read(tmp_path):
    offsets = np.array([0, 3, 5, 4, 8, 8])  # row 2 runs backwards
    values = np.arange(8)
    with pytest.raises(ValueError, match="decreases after row 2"):
        Ragged(values, offsets)  # in memory: checked whole at once
    col = Ragged(values, _mapped(tmp_path, offsets))  # mapped: checked as read
    assert col[0].tolist() == [0, 1, 2] and col[4].tolist() == []
    with pytest.raises(ValueError, match="row 2 spans"):
        col[2]
    with pytest.raises(ValueError, match="row 2 spans"):
        list(Loader({"t": col}, 5, layout="flat"))
    with pytest.raises(ValueError, match="decreases after row 2"):
        _ = col.lengths  # a plan reads them whole: checked whole
    past = Ragged(values, _mapped(tmp_path, [0, 3, 99, 8]))  # inside [0, 8] at both ends only
    with pytest.raises(ValueError, match="row 1 spans"):
        list(Loader({"t": past}, 3, layout="pad"))
    with pytest.raises(ValueError, match="end at len"):
        Ragged(values, _mapped(tmp_path, [0, 3, 7]))  # both ends: checked at once


def _epochs(loader, epochs=2):
    out = []
    for e in range(epochs):
        loader.set_epoch(e)
        out.append([b["i"].tolist() for b in loader])
    return out


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 2500),
    batch=st.integers(1, 40),
    world=st.sampled_from([1, 2, 3, 7]),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_length_groups_made_by_window_equal_the_whole_plan(
    n, batch, world, shuffle, drop_last, seed
):
    lengths = np.random.default_rng(seed).integers(0, 30, n)
    col = Ragged.from_rows([np.arange(k) for k in lengths])
    data = {"t": col, "i": np.arange(n)}
    kw = {"group_by_length": True, "shuffle": shuffle, "drop_last": drop_last, "seed": seed}
    for rank in range(world):
        made = []
        for at in (10**9, 1):  # the whole plan, then batches by window
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(_units, "WINDOWED_MIN_RANKS", at)
                try:
                    loader = Loader(data, batch, rank=rank, world_size=world, **kw)
                except ValueError as e:  # drop_last leaving a rank nothing: refused alike
                    made.append(str(e))
                    continue
                assert loader._order.windowed == (at == 1)
                made.append(_epochs(loader))
        assert made[0] == made[1]


def test_length_groups_of_4096_ranks_cover_every_document_once(tmp_path):
    # 10**6 documents of 1 to 63 tokens, offsets memory-mapped: 3,907 batches, made by window.
    n, batch, world = 10**6, 256, 4096
    lengths = np.random.default_rng(5).integers(1, 64, n)
    offsets = _mapped(tmp_path, np.concatenate([[0], np.cumsum(lengths)]))
    col = Ragged(np.zeros(int(offsets[-1]), dtype=np.uint8), offsets)
    loader = Loader({"t": col}, batch, group_by_length=True, rank=0, world_size=world, seed=2)
    order = loader._order
    assert order.windowed and col._lengths is None
    units, _ = order.plan(0)
    rows = [units.rows(u) for u in range(units.count)]
    assert units.count == -(-n // batch) and col._lengths is None
    np.testing.assert_array_equal(np.sort(np.concatenate(rows)), np.arange(n))
    window = batch * 50
    position = np.empty(n, dtype=np.int64)
    position[order.docs.global_order(0)] = np.arange(n)
    for u in range(0, units.count - 1, 97):  # longest first, rows of one window
        assert (np.diff(lengths[rows[u]]) <= 0).all()
        assert len(np.unique(position[rows[u]] // window)) == 1
    assert col._lengths is None
    # A rank's batches are its turns of the plan: rank 0 of 4,096 gets batch 0 alone.
    assert len(loader) == 1 and next(iter(loader))["t"].lengths.tolist() == sorted(
        lengths[rows[0]].tolist(), reverse=True
    )


@pytest.mark.parametrize("layout", ["pad", "flat"])
def test_ragged_batches_of_4096_ranks_take_the_rows_of_the_order(tmp_path, layout):
    # 10**7 empty documents (sparse offsets): a rank's padded or flat batches are the rows of
    # its own Order, the full shuffle computed by position (tests/test_scale.py covers every
    # rank of that order once).
    n, world = 10**7, 4096
    col = Ragged(np.zeros(0, dtype=np.int32), _sparse(tmp_path, n))
    ids = np.arange(n)
    for rank in (0, 1, 1663, world - 1):
        loader = Loader(
            {"t": col, "i": ids}, 256, layout=layout, seed=9, rank=rank, world_size=world
        )
        want = Order(n, 256, seed=9, rank=rank, world_size=world).epoch(0)
        batches = [*itertools.islice(loader, 2), None]
        for i, batch in zip((0, 1, len(want) - 1), batches, strict=True):
            if batch is None:
                loader.load_state_dict(
                    {**loader.state_dict(), "offset": (len(want) - 1) * 256 * world}
                )
                batch = next(iter(loader))
            np.testing.assert_array_equal(batch["i"], want.batch(i))
        assert col._lengths is None
