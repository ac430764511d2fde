"""Token files in a bucket as `Ragged` columns: values read by the byte ranges of whole rows.

Against the local S3 server behind the fault proxy: batches equal those of the
same column in memory for the layouts (pad, flat, pack, token budgets), a
grouped epoch fetches each chunk of rows once (bytes fetched about the file's),
nothing past the epoch's end, faults retried, resume exact, ranks disjoint.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto")

import looptoolkit.ragged._stored as stored_module
from looptoolkit import Loader, PackLayout, Ragged
from looptoolkit.stores import bucket as in_bucket

ROWS, BATCH, CHUNK_BYTES = 3000, 16, 32 << 10


pytestmark = pytest.mark.usefixtures("settled")  # no request left open after a test


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: Any) -> None:
    # Chunks of rows of about 32 KiB: a few dozen of them in the file.
    monkeypatch.setattr(stored_module, "REMOTE_CHUNK_BYTES", CHUNK_BYTES)


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, ROWS)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return rng.integers(0, 50_000, int(offsets[-1])).astype(np.uint16), offsets


@pytest.fixture
def urls(s3: Any, bucket: str, corpus: tuple[np.ndarray, np.ndarray]) -> tuple[str, str]:
    values, offsets = corpus
    s3.put(bucket, "tok/values.bin", values.tobytes())
    npy = io.BytesIO()
    np.save(npy, offsets)
    s3.put(bucket, "tok/offsets.npy", npy.getvalue())
    s3.reset_stats()
    return f"s3://{bucket}/tok/values.bin", f"s3://{bucket}/tok/offsets.npy"


def remote(s3: Any, urls: tuple[str, str], **kwargs: Any) -> Ragged:
    options = s3.storage_options()
    values = in_bucket(urls[0], dtype="uint16", storage_options=options, **kwargs)
    return Ragged(values, in_bucket(urls[1], storage_options=options))


def same(a: list[Any], b: list[Any]) -> bool:
    from looptoolkit.device import _tree

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        (xs, xspec), (ys, yspec) = _tree.flatten(x), _tree.flatten(y)
        if xspec != yspec or not all(
            np.array_equal(np.asarray(p), np.asarray(q)) for p, q in zip(xs, ys, strict=True)
        ):
            return False
    return True


def gets(s3: Any) -> int:
    return s3.stats.snapshot()["by_method"].get("GET", 0)


def test_opening_reads_no_values(s3, urls, corpus):
    column = remote(s3, urls)
    assert len(column) == ROWS and column.dtype == np.uint16
    assert np.array_equal(column.offsets, corpus[1])
    seen = s3.stats.snapshot()
    assert seen["by_method"] == {"HEAD": 2, "GET": 2}  # the offsets whole, their header
    assert seen["body_bytes"] < corpus[1].nbytes + 5000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shuffle": False},
        {"shuffle": False, "layout": "flat"},
        {"shuffle": False, "layout": PackLayout(seq_len=256)},
        {"shuffle": False, "batch_tokens": 2048},
    ],
    ids=["pad", "flat", "pack", "batch_tokens"],
)
def test_layouts_equal_the_column_in_memory(s3, urls, corpus, kwargs):
    size = None if "batch_tokens" in kwargs else BATCH
    got = list(Loader({"t": remote(s3, urls)}, size, **kwargs))
    assert same(got, list(Loader({"t": Ragged(*corpus)}, size, **kwargs)))


@pytest.mark.parametrize("layout", ["pad", "flat"])
def test_grouped_epoch_fetches_each_chunk_once(s3, urls, corpus, layout):
    column = remote(s3, urls)
    s3.reset_stats()
    loader = Loader({"t": column}, BATCH, shuffle="grouped", layout=layout, stats=True)
    loader.set_epoch(1)
    got = list(loader)
    order = loader.indices(1)
    mine = Loader({"t": Ragged(*corpus)}, BATCH, order_fn=lambda seed, epoch: order, layout=layout)
    assert same(got, list(mine))
    chunks = len(column.values.bounds) - 1
    assert chunks > 15
    seen = s3.stats.snapshot()
    assert seen["by_method"] == {"HEAD": 1, "GET": chunks}
    assert corpus[0].nbytes <= seen["body_bytes"] <= 1.2 * corpus[0].nbytes
    reads = loader.stats.remote_reads  # the file's counts since it was opened
    assert reads["bytes_used"] >= seen["body_bytes"] and reads["retries"] == 0
    assert loader.stats.as_dict()["remote_in_flight_bound"] == 64


def test_read_ahead_stops_at_the_epochs_end(s3, urls, corpus):
    column = remote(s3, urls)
    rows = np.arange(3 * column.values.chunk_rows + 5)  # rows of the first four chunks
    s3.reset_stats()
    loader = Loader({"t": column}, BATCH, shuffle=False, indices=rows)
    got = list(loader)
    assert same(got, list(Loader({"t": Ragged(*corpus)}, BATCH, shuffle=False, indices=rows)))
    assert gets(s3) == 4
    # Whole chunks of rows, the fourth the last: nothing of the fifth.
    assert s3.stats.snapshot()["body_bytes"] == 2 * int(corpus[1][4 * column.values.chunk_rows])


@pytest.mark.parametrize(
    ("kind", "extra"), [("503", {}), ("reset", {}), ("truncate", {"after_bytes": 100})]
)
def test_faults_are_retried_and_batches_stay_exact(s3, urls, corpus, kind, extra):
    column = remote(s3, urls, attempts=4, deadline_s=0.5)
    s3.faults.add(kind, times=3, match="values.bin", **extra)
    got = list(Loader({"t": column}, BATCH, shuffle=False, layout="flat"))
    assert same(got, list(Loader({"t": Ragged(*corpus)}, BATCH, shuffle=False, layout="flat")))
    assert s3.faults.pending() == 0
    assert column.values.file.counters.retries >= 3


def test_resume_and_ranks(s3, urls, corpus):
    column = remote(s3, urls)
    loader = Loader({"t": column}, BATCH, shuffle="grouped")
    whole = list(loader)
    loader.set_epoch(0)
    it = iter(loader)
    first = [next(it) for _ in range(len(loader) // 2)]
    state = loader.state_dict()
    del it
    again = Loader({"t": pickle.loads(pickle.dumps(column))}, BATCH, shuffle="grouped")
    again.load_state_dict(state)
    assert same(first + list(again), whole)
    unit = column.values.chunk_rows
    mine = []
    for rank in (0, 1):
        s3.reset_stats()
        ranked = Loader({"t": column}, BATCH, shuffle="grouped", rank=rank, world_size=2)
        list(ranked)
        used = set((ranked.indices(0) // unit).tolist())
        assert gets(s3) == len(used)
        mine.append(used)
    assert not mine[0] & mine[1]


def test_a_full_shuffle_is_refused_without_a_disk_cache_and_reads_through_one(
    s3, urls, corpus, tmp_path
):
    with pytest.raises(ValueError, match='shuffle="grouped"'):
        Loader({"t": remote(s3, urls)}, BATCH, shuffle=True)
    column = remote(s3, urls, cache_dir=tmp_path / "cache", cache_bytes=1 << 26)
    loader = Loader({"t": column}, BATCH, shuffle=True, layout="flat")
    for epoch in (0, 1):
        s3.reset_stats()
        loader.set_epoch(epoch)
        got = list(loader)
        order = loader.indices(epoch)
        mine = Loader(
            {"t": Ragged(*corpus)},
            BATCH,
            order_fn=lambda seed, e, order=order: order,
            layout="flat",
        )
        assert same(got, list(mine))
        chunks = len(column.values.bounds) - 1
        assert gets(s3) == (chunks if epoch == 0 else 0)  # then every range from the disk


def test_a_mixture_with_a_bucket_source(s3, urls, corpus):
    import looptoolkit as lt

    values, offsets = corpus
    other = Ragged(values[: offsets[500]][::-1].copy(), offsets[:501])
    mixed = lt.Mix(
        {"web": {"t": remote(s3, urls)}, "code": {"t": other}}, {"web": 0.7, "code": 0.3}
    )
    plain = lt.Mix({"web": {"t": Ragged(*corpus)}, "code": {"t": other}}, {"web": 0.7, "code": 0.3})
    got = list(Loader(mixed, BATCH, shuffle=False, layout="flat"))
    assert same(got, list(Loader(plain, BATCH, shuffle=False, layout="flat")))


def test_dataloader_workers_read_the_token_file(s3, urls, corpus):
    pytest.importorskip("torch")
    from looptoolkit import make_dataloader

    loader = make_dataloader(
        {"t": remote(s3, urls)},
        BATCH,
        shuffle="grouped",
        layout="flat",
        num_workers=2,
        multiprocessing_context="spawn",
    )
    got = [np.asarray(b["t"].values) for b in loader]
    mine = Loader({"t": remote(s3, urls)}, BATCH, shuffle="grouped", layout="flat")
    want = [b["t"].values for b in mine]
    assert len(got) == len(want) and all(
        np.array_equal(a, b) for a, b in zip(got, want, strict=True)
    )
