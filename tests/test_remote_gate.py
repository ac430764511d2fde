"""The bound on requests in flight: one per process and place, granted by priority.

`Gate` alone (order of grants, a cancelled waiter, the bound), then in a bucket: the
arrays of a group share the bound (the proxy never sees more requests at once), and a
read waiting for its objects goes before the objects asked for ahead of it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from looptoolkit.stores._remote import Gate


def test_a_gate_grants_the_lowest_priority_first_and_never_passes_its_bound():
    async def run() -> tuple[list[str], int]:
        gate = Gate(2)
        granted: list[str] = []

        async def one(name: str, priority: float) -> None:
            await gate.acquire(priority)
            granted.append(name)
            await asyncio.sleep(0.01)
            gate.release()

        await gate.acquire(0)  # both slots taken: the rest wait
        await gate.acquire(0)
        tasks = [
            asyncio.create_task(one(name, p))
            for name, p in (("late", 9.0), ("soon", 2.0), ("now", -1.0), ("next", 3.0))
        ]
        await asyncio.sleep(0)
        gate.release()
        gate.release()
        await asyncio.gather(*tasks)
        return granted, gate.most

    granted, most = asyncio.run(run())
    assert granted == ["now", "soon", "next", "late"]
    assert most == 2


def test_a_waiter_cancelled_as_it_is_granted_passes_its_slot_on():
    async def run() -> tuple[int, bool]:
        gate = Gate(1)
        await gate.acquire(0)
        first = asyncio.create_task(gate.acquire(1))
        second = asyncio.create_task(gate.acquire(2))
        await asyncio.sleep(0)
        gate.release()  # grants `first`...
        first.cancel()  # ...which is cancelled before it runs
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 1)  # the slot went on to `second`
        return gate.busy, first.cancelled()

    busy, cancelled = asyncio.run(run())
    assert (busy, cancelled) == (1, True)


zarr = pytest.importorskip("zarr")
pytest.importorskip("obstore")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

from looptoolkit import Loader  # noqa: E402
from looptoolkit.stores import bucket as in_bucket  # noqa: E402

ROWS, CHUNK, BATCH = 8192, 512, 256


@pytest.fixture
def group(s3: Any, bucket: str, tmp_path: Any) -> tuple[dict[str, np.ndarray], Any]:
    values = {
        "a": np.random.default_rng(0).standard_normal((ROWS, 4)).astype(np.float32),
        "b": np.arange(ROWS, dtype=np.int64),
    }
    local = zarr.open_group(tmp_path / "g.zarr", mode="w")
    for name, value in values.items():
        local.create_array(name, data=value, chunks=(CHUNK, *value.shape[1:]), compressors=None)
    s3.upload_dir(tmp_path / "g.zarr", bucket, "g.zarr")
    remote = zarr.open_group(f"s3://{bucket}/g.zarr", storage_options=s3.storage_options())
    return values, remote


def test_the_arrays_of_a_group_share_one_bound_in_flight(s3, group):
    values, remote = group
    data = in_bucket(remote, in_flight=3)
    loader = Loader(data, BATCH, shuffle="grouped", seed=1, stats=True)
    s3.latency_s = 0.03
    s3.reset_stats()
    got = list(loader)
    rows = np.concatenate([np.asarray(b["b"]) for b in got])
    assert np.array_equal(np.sort(rows), np.arange(ROWS))
    assert np.array_equal(np.concatenate([np.asarray(b["a"]) for b in got]), values["a"][rows])
    seen = s3.stats.snapshot()
    # 2 LISTs and 32 GETs, at most 3 at once (a bound per array would allow 6).
    assert seen["by_method"] == {"GET": 2 + 2 * ROWS // CHUNK}
    assert seen["max_in_flight"] == 3
    reads = loader.stats.remote_reads
    assert reads["in_flight_bound"] == 3 and reads["max_in_flight"] == 3


def test_a_read_waiting_for_its_objects_goes_before_those_asked_ahead(s3, group):
    values, remote = group
    data = in_bucket(remote, in_flight=1)["a"]
    data.start_pass()
    fetcher = data._process()[0]
    later = data.objects(range(1, 16))  # asked for ahead: 15 objects, one at a time
    s3.latency_s = 0.05
    s3.reset_stats()
    fetcher.prefetch(later)
    first = data.objects([0])
    got = fetcher.take(first)  # waited for now: granted before the 14 still waiting
    assert got[0] == values["a"][:CHUNK].tobytes()
    # One asked ahead was in flight, then this one: not behind the other 14 (0.7 s).
    assert s3.stats.snapshot()["by_method"]["GET"] <= 3
    fetcher.forget()


def test_the_first_batch_of_a_pass_waits_for_its_own_chunk_only(s3, group):
    # Sequential: the first batch is rows of chunk 0. Read in blocks of 32 batches (16
    # chunks here) it would wait for them all; a pass over a bucket starts with one batch.
    values, remote = group
    data = in_bucket(remote, in_flight=2)
    loader = Loader(data, BATCH, shuffle=False)
    s3.latency_s = 0.05
    s3.reset_stats()
    iterator = iter(loader)
    first = next(iterator)
    seen = s3.stats.snapshot()["requests"]
    assert np.array_equal(first["b"], np.arange(BATCH))
    assert np.array_equal(first["a"], values["a"][:BATCH])
    # 2 LISTs, chunk 0 of each array, and what 2 in flight started meanwhile.
    assert seen <= 2 + 2 + 2, seen
    rest = np.concatenate([np.asarray(b["b"]) for b in iterator])
    assert np.array_equal(rest, np.arange(BATCH, ROWS))


class _Leaf:
    """A leaf of `announced`: rows in chunks of 10, each prefetch call recorded."""

    chunk_rows = 10

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.settings = type("S", (), {"ahead_bytes": 1 << 40})()

    def __len__(self) -> int:
        return 10_000

    def prefetch(self, chunks: Any) -> None:
        self.asked += [int(c) for c in chunks]

    def ahead_bytes(self) -> int:
        return 0  # never at the bound: the look-ahead is limited by its step alone


def test_the_order_is_looked_ahead_of_a_few_batches_at_a_time():
    from looptoolkit._rows.store_reads import ANNOUNCED_STEP, announced

    leaf = _Leaf()
    batches = [np.arange(i * 10, i * 10 + 10) for i in range(1000)]  # one chunk each
    source = announced(iter(batches), [leaf])
    assert np.array_equal(next(source), batches[0])
    # The first batch went after ANNOUNCED_STEP batches' chunks were asked for, not 1,000.
    assert leaf.asked == list(range(ANNOUNCED_STEP))
    rest = list(source)
    assert len(rest) == 999 and leaf.asked == list(range(1000))  # each chunk once, in order


def test_a_pass_asks_for_a_few_blocks_objects_before_its_first_read(
    s3, bucket, tmp_path, monkeypatch
):
    # A block's batches are taken from the order before its read, each looking the order
    # ahead (`announced`): blocks of 32 batches would ask for 8 groups' objects before the
    # first batch's read, all sent at once with 64 in flight. A pass over a bucket reads
    # blocks of at most REMOTE_BLOCK batches.
    from looptoolkit._rows.store_reads import ANNOUNCED_STEP, REMOTE_BLOCK
    from looptoolkit.stores import _remote

    rows = 64 * CHUNK  # 64 chunks, groups of 16 (32 batches each)
    values = np.arange(rows, dtype=np.int64)
    local = zarr.open_group(tmp_path / "g.zarr", mode="w")
    local.create_array("b", data=values, chunks=(CHUNK,), compressors=None)
    s3.upload_dir(tmp_path / "g.zarr", bucket, "g.zarr")
    remote = zarr.open_group(f"s3://{bucket}/g.zarr", storage_options=s3.storage_options())
    asked: list[int] = []
    at_first_take: list[int] = []
    prefetch, unlisted, take = (
        _remote.Fetcher.prefetch,
        _remote.Fetcher.prefetch_unlisted,
        _remote.Fetcher.take,
    )

    def counted(method: Any) -> Any:
        def call(self: Any, items: Any, *args: Any) -> Any:
            asked.append(len(items))
            return method(self, items, *args)

        return call

    def first(self: Any, refs: Any) -> Any:
        if not at_first_take:
            at_first_take.append(sum(asked))
        return take(self, refs)

    monkeypatch.setattr(_remote.Fetcher, "prefetch", counted(prefetch))
    monkeypatch.setattr(_remote.Fetcher, "prefetch_unlisted", counted(unlisted))
    monkeypatch.setattr(_remote.Fetcher, "take", first)
    loader = Loader(in_bucket(remote), BATCH, shuffle="grouped", seed=0)
    ids = np.concatenate([np.asarray(b["b"]) for b in loader])
    assert np.array_equal(np.sort(ids), values)
    # REMOTE_BLOCK batches taken, each looking ANNOUNCED_STEP batches further: the
    # chunks of at most that many batches (and one group more, where they end in one).
    looked = REMOTE_BLOCK * ANNOUNCED_STEP * BATCH
    assert at_first_take[0] <= (looked // (16 * CHUNK) + 1) * 16, at_first_take
