"""zarr arrays in a bucket as Loader data: a real S3 API (moto) behind a fault-injecting proxy.

The batches are checked equal to the same array on local disk; the proxy's
counts check the requests (each chunk object about once a grouped epoch, no
HEAD, no fetch past the epoch's end), and its faults the retries.
"""

from __future__ import annotations

import multiprocessing
import pickle
from typing import Any

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
pytest.importorskip("obstore")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

from looptoolkit import Loader  # noqa: E402
from looptoolkit.stores import bucket as in_bucket  # noqa: E402
from looptoolkit.stores._remote import RemoteReadError  # noqa: E402

ROWS, WIDTH, CHUNK, BATCH = 20_000, 8, 1024, 256
CHUNKS = -(-ROWS // CHUNK)
CHUNK_BYTES = CHUNK * WIDTH * 4


pytestmark = pytest.mark.usefixtures("settled")  # no request left open after a test


@pytest.fixture(scope="module")
def values() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)


@pytest.fixture
def stored(s3: Any, bucket: str, values: np.ndarray, tmp_path: Any) -> tuple[Any, Any]:
    """The array on local disk and in the bucket (uncompressed: chunks of a known size)."""
    local = zarr.create_array(
        tmp_path / "x.zarr", shape=values.shape, chunks=(CHUNK, WIDTH), dtype="f4", compressors=None
    )
    local[:] = values
    s3.upload_dir(tmp_path / "x.zarr", bucket, "x.zarr")
    remote = zarr.open_array(
        f"s3://{bucket}/x.zarr", storage_options=s3.storage_options(), mode="r"
    )
    s3.reset_stats()
    return local, remote


def batches(loader: Loader, epoch: int = 0) -> list[np.ndarray]:
    loader.set_epoch(epoch)
    return [b["x"] for b in loader]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def gets(s3: Any) -> int:
    return s3.stats.snapshot()["by_method"].get("GET", 0)


@pytest.mark.parametrize("shuffle", ["grouped", False])
def test_epoch_equals_local_and_fetches_each_chunk_once(s3, stored, shuffle):
    local, remote = stored
    loader = Loader({"x": remote}, BATCH, shuffle=shuffle, stats=True)
    got = batches(loader)
    assert same(got, batches(Loader({"x": local}, BATCH, shuffle=shuffle)))
    seen = s3.stats.snapshot()
    # One LIST and one GET per chunk object; no HEAD, no metadata request per chunk.
    assert seen["by_method"] == {"GET": CHUNKS + 1}
    reads = loader.stats.remote_reads
    assert reads["requests"] == CHUNKS + 1
    assert reads["bytes_fetched"] == reads["bytes_used"] == CHUNKS * CHUNK_BYTES  # each once
    assert reads["bytes_fetched"] <= 1.2 * sum(x.nbytes for x in got)
    assert reads["retries"] == 0 and reads["in_flight_bound"] == 64
    assert 1 <= reads["max_in_flight"] <= 64 and reads["ahead_bytes_bound"] == 64 << 20
    assert loader.stats.as_dict()["remote_requests"] == CHUNKS + 1


def test_read_ahead_stops_at_the_epochs_end(s3, stored):
    local, remote = stored
    rows = np.arange(3 * CHUNK + 100)  # the epoch: rows of the first four chunks
    loader = Loader({"x": remote}, BATCH, shuffle=False, indices=rows)
    assert same(batches(loader), batches(Loader({"x": local}, BATCH, shuffle=False, indices=rows)))
    assert gets(s3) == 4 + 1


def test_ranks_read_disjoint_chunks(s3, stored):
    local, remote = stored
    chunks = []
    for rank in (0, 1):
        s3.reset_stats()
        loader = Loader({"x": remote}, BATCH, shuffle="grouped", rank=rank, world_size=2)
        mine = Loader({"x": local}, BATCH, shuffle="grouped", rank=rank, world_size=2)
        assert same(batches(loader), batches(mine))
        used = set((loader.indices(0) // CHUNK).tolist())
        assert gets(s3) == len(used) + 1  # its own chunks and the LIST, nothing else
        chunks.append(used)
    assert not chunks[0] & chunks[1]


def test_full_shuffle_without_a_cache_is_refused_with_its_cost(stored):
    _, remote = stored
    with pytest.raises(ValueError, match=r'shuffle="grouped".*|about \d+x the bytes') as info:
        Loader({"x": remote}, BATCH, shuffle=True)
    assert 'shuffle="grouped"' in str(info.value) and "x the bytes" in str(info.value)


def test_full_shuffle_reads_through_the_cache_and_epoch_2_from_it(s3, stored, tmp_path):
    local, remote = stored
    data = in_bucket(remote, cache_dir=tmp_path / "cache", cache_bytes=1 << 26)
    loader = Loader({"x": data}, BATCH, shuffle=True, stats=True)
    plain = Loader({"x": local}, BATCH, shuffle=True)
    assert same(batches(loader, 0), batches(plain, 0))
    assert gets(s3) == CHUNKS + 1
    s3.reset_stats()
    assert same(batches(loader, 1), batches(plain, 1))
    assert s3.stats.snapshot()["by_method"] == {"GET": 1}  # the LIST only
    # A second process (a rank of the same node) finds the chunks there too.
    other = Loader({"x": pickle.loads(pickle.dumps(data))}, BATCH, shuffle="grouped")
    s3.reset_stats()
    batches(other)
    assert gets(s3) == 1


def test_a_cache_smaller_than_a_chunk_still_reads(s3, stored, tmp_path):
    local, remote = stored
    data = in_bucket(remote, cache_dir=tmp_path / "cache", cache_bytes=CHUNK_BYTES // 2)
    for shuffle in ("grouped", True):
        loader = Loader({"x": data}, BATCH, shuffle=shuffle)
        assert same(batches(loader), batches(Loader({"x": local}, BATCH, shuffle=shuffle)))
    assert not list((tmp_path / "cache").glob("*.chunk"))


def test_cache_evicts_least_recently_used_within_its_bytes(s3, stored, tmp_path):
    local, remote = stored
    budget = 5 * CHUNK_BYTES
    data = in_bucket(remote, cache_dir=tmp_path / "cache", cache_bytes=budget)
    loader = Loader({"x": data}, BATCH, shuffle="grouped")
    for epoch in (0, 1):
        assert same(
            batches(loader, epoch), batches(Loader({"x": local}, BATCH, shuffle="grouped"), epoch)
        )
    sizes = [p.stat().st_size for p in (tmp_path / "cache").glob("*.chunk")]
    assert 0 < sum(sizes) <= budget


def test_a_changed_object_is_never_served_from_the_cache(s3, bucket, stored, tmp_path):
    local, remote = stored
    data = in_bucket(remote, cache_dir=tmp_path / "cache", cache_bytes=1 << 26)
    loader = Loader({"x": data}, BATCH, shuffle="grouped")
    batches(loader)
    # Chunk 3 rewritten in place, the same size: only its version tells.
    changed = np.asarray(local[:]).copy()
    changed[3 * CHUNK : 4 * CHUNK] += 1000
    local[3 * CHUNK : 4 * CHUNK] = changed[3 * CHUNK : 4 * CHUNK]
    s3.put(bucket, "x.zarr/c/3/0", (tmp_path / "x.zarr" / "c" / "3" / "0").read_bytes())
    got = np.concatenate(batches(loader, 1))
    assert np.array_equal(got, changed[loader.indices(1)])


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("503", {}),
        ("429", {}),
        ("500", {}),
        ("reset", {}),
        ("reset", {"after_bytes": 1000}),
        ("truncate", {"after_bytes": 1000}),
        ("stall", {"delay_s": 1.5}),
    ],
)
def test_faults_are_retried_and_batches_stay_exact(s3, stored, kind, extra):
    local, remote = stored
    data = in_bucket(remote, deadline_s=0.5, attempts=4)
    s3.faults.add(kind, times=2, match="x.zarr/c/", **extra)
    loader = Loader({"x": data}, BATCH, shuffle="grouped", stats=True)
    assert same(batches(loader), batches(Loader({"x": local}, BATCH, shuffle="grouped")))
    assert s3.faults.pending() == 0
    assert loader.stats.remote_reads["retries"] >= 2


def test_a_fault_that_persists_raises_and_resume_gives_the_rest(s3, stored):
    local, remote = stored
    data = in_bucket(remote, attempts=3)
    whole = batches(Loader({"x": local}, BATCH, shuffle="grouped"))
    loader = Loader({"x": data}, BATCH, shuffle="grouped")
    # A chunk of the last group fails every time (the first group's batches come first).
    failing = int(loader.indices(0)[-1] // CHUNK)
    s3.faults.add("503", times=1000, match=f"x.zarr/c/{failing}/0")
    got, state = [], loader.state_dict()
    with pytest.raises(RemoteReadError) as info:
        for batch in loader:
            got.append(batch["x"])
            state = loader.state_dict()
    message = str(info.value)
    assert f"x.zarr/c/{failing}/0" in message and "3 attempts" in message
    assert s3.secret_key not in message and s3.access_key not in message
    assert 0 < len(got) < len(whole)
    s3.faults.clear()
    resumed = Loader({"x": data}, BATCH, shuffle="grouped")
    resumed.load_state_dict(state)
    assert same(got + [b["x"] for b in resumed], whole)


def test_credentials_from_the_environment_are_not_pickled(s3, stored, monkeypatch):
    _, remote = stored
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    array = zarr.open_array(f"s3://{remote.store.path}", mode="r")  # credentials from env
    loader = Loader({"x": array}, BATCH, shuffle="grouped", stats=True)
    batches(loader)
    blob = pickle.dumps(loader)
    assert s3.secret_key.encode() not in blob
    assert s3.secret_key not in repr(loader.stats.as_dict())
    again = pickle.loads(blob)
    assert len(batches(again)) == len(loader)


def _epoch_in_child(data: Any, queue: Any) -> None:
    try:
        loader = Loader({"x": data}, BATCH, shuffle="grouped")
        queue.put(float(sum(b["x"].sum(dtype=np.float64) for b in loader)))
    except RuntimeError as error:
        queue.put(str(error))


_FORK_SCRIPT = """
import multiprocessing, sys
import numpy as np, zarr
from looptoolkit import Loader
sys.path.insert(0, {tests!r})
from test_bucket import _epoch_in_child
remote = zarr.open_array({url!r}, storage_options={options!r}, mode="r")
loader = Loader({{"x": remote}}, 256, shuffle="grouped")  # nothing read here before the fork
context = multiprocessing.get_context("fork")
queue = context.Queue()
child = context.Process(target=_epoch_in_child, args=(loader._rows.data["x"], queue))
child.start()
print(queue.get(timeout=60))
child.join(30)
"""


def test_a_child_forked_before_any_read_reads(s3, stored, tmp_path):
    local, remote = stored
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = _FORK_SCRIPT.format(
        tests=str(Path(__file__).parent),
        url=f"s3://{remote.store.path}",
        options=s3.storage_options(),
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    total = float(out.stdout.strip().splitlines()[-1])
    assert total == pytest.approx(float(np.asarray(local[:]).sum(dtype=np.float64)), rel=1e-6)


def test_a_child_forked_after_a_read_names_the_start_method(s3, stored):
    _, remote = stored
    loader = Loader({"x": remote}, BATCH, shuffle="grouped")
    batches(loader)  # obstore's runtime started in this process before the fork
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_epoch_in_child, args=(loader._rows.data["x"], queue))
    child.start()
    got = queue.get(timeout=60)  # an error, never a hang
    child.join(30)
    assert "'spawn'" in got


def test_a_short_body_is_never_accepted():
    # A body that ends early with no error from the HTTP layer (a length it stated
    # itself, a chunked body cut at a chunk's end): only the listed size tells.
    from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings

    whole = bytes(range(256)) * 40
    sent = []

    async def request(key: str, start: int, end: int) -> bytes:
        sent.append((key, start, end))
        return whole[start:end][: -100 if len(sent) < 3 else None]

    counters = Counters()
    fetcher = Fetcher(request, Settings(backoff_s=0.001), counters)
    ref = ObjectRef("x.zarr/c/0/0", len(whole), "v1")
    assert fetcher.take([ref]) == [whole]
    assert sent == [("x.zarr/c/0/0", 0, len(whole))] * 3
    assert counters.retries == 2 and counters.bytes_fetched == len(whole)

    fetcher = Fetcher(
        lambda key, a, b: request(key, a, b - 1), Settings(attempts=2, backoff_s=0.001), Counters()
    )
    with pytest.raises(RemoteReadError, match=r"x.zarr/c/0/0 could not be read in 2 attempts"):
        fetcher.take([ref])


def test_an_object_store_array_and_a_group_go_in_as_they_are(s3, bucket, stored, values, tmp_path):
    from obstore.store import S3Store

    local, _ = stored
    store = zarr.storage.ObjectStore(S3Store(bucket, **s3.obstore_options()), read_only=True)
    remote = zarr.open_array(store, path="x.zarr", mode="r")
    loader = Loader({"x": remote}, BATCH, shuffle="grouped", stats=True)
    assert same(batches(loader), batches(Loader({"x": local}, BATCH, shuffle="grouped")))
    assert loader.stats.remote_reads["requests"] == CHUNKS + 1

    written = zarr.open_group(tmp_path / "g.zarr", mode="w")
    written.create_array("x", data=values, chunks=(CHUNK, WIDTH))
    written.create_array("y", data=np.arange(ROWS), chunks=(4 * CHUNK,))
    s3.upload_dir(tmp_path / "g.zarr", bucket, "g.zarr")
    group = zarr.open_group(store, path="g.zarr", mode="r")
    grouped = Loader(group, BATCH, shuffle="grouped")
    assert {type(leaf).__name__ for leaf in grouped._rows.store.leaves} == {"RemoteZarr"}
    for batch, idx in zip(
        grouped, np.split(grouped.indices(0), range(BATCH, ROWS, BATCH)), strict=True
    ):
        assert np.array_equal(batch["x"], values[idx]) and np.array_equal(batch["y"], idx)


def test_a_sharded_array_fetches_each_shard_once(s3, bucket, values, tmp_path):
    local = zarr.create_array(
        tmp_path / "s.zarr",
        shape=values.shape,
        chunks=(256, WIDTH),
        shards=(2048, WIDTH),
        dtype="f4",
    )
    local[:] = values
    s3.upload_dir(tmp_path / "s.zarr", bucket, "s.zarr")
    remote = zarr.open_array(f"s3://{bucket}/s.zarr", storage_options=s3.storage_options())
    s3.reset_stats()
    loader = Loader({"x": remote}, BATCH, shuffle="grouped")
    assert same(batches(loader), batches(Loader({"x": local}, BATCH, shuffle="grouped")))
    assert gets(s3) == -(-ROWS // 2048) + 1


def test_dataloader_workers_read_the_bucket(s3, stored):
    torch = pytest.importorskip("torch")
    from looptoolkit import make_dataloader

    local, remote = stored
    loader = make_dataloader(
        {"x": remote},
        BATCH,
        shuffle="grouped",
        num_workers=2,
        multiprocessing_context="spawn",
    )
    got = [b["x"].numpy() for b in loader]
    want = batches(Loader({"x": local}, BATCH, shuffle="grouped"))
    assert same(got, want)
    assert isinstance(torch.as_tensor(got[0]), torch.Tensor)


def test_parquet_row_groups_from_a_bucket(s3, bucket, values, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table(
        {"x": values[:, 0], "y": np.arange(ROWS), "name": [str(i) for i in range(ROWS)]}
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=CHUNK)
    s3.put(bucket, "t.parquet", (tmp_path / "t.parquet").read_bytes())
    s3.reset_stats()
    data = in_bucket(
        f"s3://{bucket}/t.parquet", columns=["x", "y"], storage_options=s3.storage_options()
    )
    loader = Loader(data, BATCH, shuffle="grouped", stats=True)
    got = list(loader)
    for batch, idx in zip(got, np.split(loader.indices(0), range(BATCH, ROWS, BATCH)), strict=True):
        assert np.array_equal(batch["x"], values[idx, 0]) and np.array_equal(batch["y"], idx)
    seen = s3.stats.snapshot()
    # A HEAD and the footer at construction; a HEAD per pass; one range per row group
    # (both columns together), taken by both columns.
    assert seen["by_method"] == {"HEAD": 2, "GET": 1 + CHUNKS}
    assert seen["range_requests"] == 1 + CHUNKS
    again = Loader(pickle.loads(pickle.dumps(data)), BATCH, shuffle="grouped")  # a worker's
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(again, got, strict=True))
    with pytest.raises(TypeError, match="Parquet column of type string"):
        in_bucket(f"s3://{bucket}/t.parquet", storage_options=s3.storage_options())
    with pytest.raises(ValueError, match='shuffle="grouped"'):
        Loader(data, BATCH, shuffle=True)


def test_a_missing_object_fails_at_once_naming_it(s3, bucket):
    from looptoolkit.stores._bucket import S3Bucket
    from looptoolkit.stores._bucket_options import s3_options
    from looptoolkit.stores._remote import Counters, Fetcher, ObjectRef, Settings

    s3.put(bucket, "here.bin", b"x" * 64)
    where = S3Bucket(bucket, "", s3_options(s3.storage_options()))
    with pytest.raises(FileNotFoundError, match=rf"s3://{bucket}/gone.bin is not in the bucket"):
        where.head("gone.bin")
    counters = Counters()
    fetcher = Fetcher(where.get, Settings(backoff_s=0.5), counters, where=where.where)
    with pytest.raises(RemoteReadError, match=r"gone\.bin could not be read: the object is not"):
        fetcher.take([ObjectRef("gone.bin", 64, "v")])  # listed, then removed
    assert counters.requests == 1 and counters.retries == 0  # no retry mends a missing object
    assert fetcher.take([where.head("here.bin")]) == [b"x" * 64]


def test_a_pass_lists_its_arrays_together(s3, bucket, values, tmp_path):
    # Two arrays of a group, their chunks in the disk cache: a pass then sends only the
    # arrays' LISTs, which go out together (one latency for both, not one after the other).
    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    group.create_array("a", data=values, chunks=(CHUNK, WIDTH), compressors=None)
    group.create_array("b", data=values[:, :2], chunks=(CHUNK, 2), compressors=None)
    s3.upload_dir(tmp_path / "g.zarr", bucket, "g.zarr")
    remote = zarr.open_group(f"s3://{bucket}/g.zarr", storage_options=s3.storage_options())
    data = in_bucket(remote, cache_dir=tmp_path / "cache", cache_bytes=1 << 26)
    loader = Loader({"x": data["a"], "y": data["b"]}, BATCH, shuffle="grouped")
    first = batches(loader, 0)
    s3.latency_s = 0.2
    s3.reset_stats()
    assert same(batches(loader, 0), first)
    seen = s3.stats.snapshot()
    assert seen["by_method"] == {"GET": 2}  # the two LISTs
    assert seen["max_in_flight"] == 2
