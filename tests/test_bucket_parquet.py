"""Parquet files in a bucket as Loader data (row groups as chunks).

Against the local S3 server behind the fault proxy: batches equal the rows the
order names (and the local Parquet file's batches where the orders coincide), each
row group's column chunks fetched once a grouped epoch as one range, only the
columns read, faults retried with exact batches, resume and ranks.
"""

from __future__ import annotations

import itertools
import pickle
import threading
import time
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("obstore")
pytest.importorskip("moto")

from s3_fixtures import resumed_epoch  # noqa: E402

from looptoolkit import Loader  # noqa: E402
from looptoolkit.stores import bucket as in_bucket  # noqa: E402
from looptoolkit.stores._remote import RemoteReadError  # noqa: E402

ROWS, GROUP, BATCH = 12_000, 1000, 200
GROUPS = -(-ROWS // GROUP)


pytestmark = pytest.mark.usefixtures("settled")  # no request left open after a test


@pytest.fixture(scope="module")
def columns() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal(ROWS).astype(np.float32),
        "v": rng.integers(0, 1000, ROWS).astype(np.int16),
        "y": np.arange(ROWS, dtype=np.int64),  # never read: its bytes must not be fetched
    }


def table(columns: dict[str, np.ndarray]) -> Any:
    return pa.table(columns)


@pytest.fixture
def stored(s3: Any, bucket: str, columns: dict[str, np.ndarray], tmp_path: Any) -> Any:
    """The file on local disk and in the bucket; its address."""
    path = tmp_path / "rows.parquet"
    pq.write_table(table(columns), path, row_group_size=GROUP, compression="none")
    s3.put(bucket, "data/rows.parquet", path.read_bytes())
    s3.reset_stats()
    return path, f"s3://{bucket}/data/rows.parquet"


def open_(s3: Any, url: str, **kwargs: Any) -> Any:
    return in_bucket(url, columns=["x", "v"], storage_options=s3.storage_options(), **kwargs)


def expected(columns: dict[str, np.ndarray], loader: Loader, epoch: int = 0) -> dict[str, Any]:
    idx = loader.indices(epoch)
    return {k: columns[k][idx] for k in ("x", "v")}


def epoch_of(loader: Loader, epoch: int = 0) -> dict[str, np.ndarray]:
    loader.set_epoch(epoch)
    got = list(loader)
    return {k: np.concatenate([b[k] for b in got]) for k in ("x", "v")}


def equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a) and a.keys() == b.keys()


def gets(s3: Any) -> int:
    return s3.stats.snapshot()["by_method"].get("GET", 0)


def used_bytes(path: Any, names: tuple[str, ...]) -> int:
    """Bytes of the column chunks of ``names`` in the file (what a reader needs)."""
    md = pq.read_metadata(path)
    total = 0
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        for i in range(group.num_columns):
            column = group.column(i)
            if column.path_in_schema.partition(".")[0] in names:
                total += column.total_compressed_size
    return total


def test_opening_reads_the_footer_only(s3, stored):
    _, url = stored
    data = open_(s3, url)
    assert sorted(data) == ["v", "x"]
    assert data["v"].shape == (ROWS,) and data["v"].dtype == np.int16
    assert data["x"].chunk_rows == GROUP
    seen = s3.stats.snapshot()
    assert seen["by_method"] == {"HEAD": 1, "GET": 1}  # the footer's GET
    assert seen["body_bytes"] < 70_000


@pytest.mark.parametrize("shuffle", ["grouped", False])
def test_epoch_equals_the_order_and_fetches_each_row_group_once(s3, stored, columns, shuffle):
    path, url = stored
    data = open_(s3, url)
    s3.reset_stats()
    loader = Loader(data, BATCH, shuffle=shuffle, stats=True)
    got = epoch_of(loader)
    assert equal(got, expected(columns, loader))
    if shuffle is False:  # the same batches as the file on local disk
        local = Loader(pq.read_table(path, columns=["x", "v"]), BATCH, shuffle=False)
        assert equal(got, epoch_of(local))
    seen = s3.stats.snapshot()
    assert seen["by_method"] == {"GET": GROUPS, "HEAD": 1}  # a range per row group
    reads = loader.stats.remote_reads  # the file's counters, once for its two columns
    need = used_bytes(path, ("x", "v"))
    footer = min(path.stat().st_size, 1 << 16)  # fetched when the columns were made
    assert reads["bytes_fetched"] == seen["body_bytes"] + footer
    assert need <= seen["body_bytes"] <= 1.2 * need  # the epoch's bytes
    assert seen["body_bytes"] < need + used_bytes(path, ("y",)) // 2  # y never fetched


def test_full_shuffle_through_the_disk_cache(s3, stored, columns, tmp_path):
    _, url = stored
    with pytest.raises(ValueError, match="x the bytes"):
        Loader(open_(s3, url), BATCH, shuffle=True)
    data = open_(s3, url, cache_dir=tmp_path / "cache", cache_bytes=1 << 26)
    loader = Loader(data, BATCH, shuffle=True)
    s3.reset_stats()
    assert equal(epoch_of(loader, 0), expected(columns, loader, 0))
    assert gets(s3) == GROUPS
    s3.reset_stats()
    assert equal(epoch_of(loader, 1), expected(columns, loader, 1))
    assert s3.stats.snapshot()["by_method"] == {"HEAD": 1}  # every range from the disk


@pytest.mark.parametrize(
    ("kind", "extra"),
    [("503", {}), ("reset", {}), ("truncate", {"after_bytes": 1000})],
)
def test_faults_are_retried_and_batches_stay_exact(s3, stored, columns, kind, extra):
    _, url = stored
    data = open_(s3, url, deadline_s=0.5, attempts=4)
    s3.faults.add(kind, times=3, match="rows.parquet", **extra)
    loader = Loader(data, BATCH, shuffle="grouped", stats=True)
    assert equal(epoch_of(loader), expected(columns, loader))
    assert s3.faults.pending() == 0
    assert loader.stats.remote_reads["retries"] >= 3


def test_resume_gives_the_rest_exactly(s3, stored, columns):
    _, url = stored
    data = open_(s3, url)
    got = resumed_epoch(data, BATCH, 2, ("x", "v"))
    assert equal(got, expected(columns, Loader(data, BATCH, shuffle="grouped"), 2))


def test_ranks_read_disjoint_row_groups(s3, stored, columns):
    _, url = stored
    data = open_(s3, url)
    mine = []
    for rank in (0, 1):
        s3.reset_stats()
        loader = Loader(data, BATCH, shuffle="grouped", rank=rank, world_size=2)
        assert equal(epoch_of(loader), expected(columns, loader))
        used = set((loader.indices(0) // GROUP).tolist())
        assert gets(s3) == len(used)  # its own row groups, nothing else
        mine.append(used)
    assert not mine[0] & mine[1]


def test_a_fault_that_persists_names_the_file_not_the_keys(s3, stored, monkeypatch):
    _, url = stored
    for name, value in s3.env().items():  # credentials found by the client itself
        monkeypatch.setenv(name, value)
    data = in_bucket(url, columns=["x"], attempts=2)
    blob = pickle.dumps(Loader(data, BATCH, shuffle="grouped"))
    assert s3.secret_key.encode() not in blob and s3.access_key.encode() not in blob
    s3.faults.add("503", times=1000, match="rows.parquet")
    with pytest.raises(RemoteReadError) as info:
        list(Loader(data, BATCH, shuffle="grouped"))
    message = str(info.value)
    assert "data/rows.parquet" in message and "2 attempts" in message
    assert s3.secret_key not in message and s3.access_key not in message


def test_bad_arguments_are_refused(s3, stored, bucket):
    _, url = stored
    options = s3.storage_options()
    with pytest.raises(ValueError, match="has no column 'z'"):
        in_bucket(url, columns=["z"], storage_options=options)
    with pytest.raises(FileNotFoundError):
        in_bucket(f"s3://{bucket}/nothing.parquet", storage_options=options)
    with pytest.raises(ValueError, match="`columns` is for a Parquet file"):
        in_bucket(url, dtype="f4", columns=["x"], storage_options=options)


def test_read_ahead_stops_at_the_epochs_end(s3, stored, columns):
    _, url = stored
    data = open_(s3, url)
    rows = np.arange(3 * GROUP + 100)  # the epoch: rows of the first four row groups
    s3.reset_stats()
    loader = Loader(data, BATCH, shuffle=False, indices=rows)
    assert equal(epoch_of(loader), {k: columns[k][rows] for k in ("x", "v")})
    assert gets(s3) == 4


def test_a_hf_dataset_saved_as_parquet_to_the_bucket(s3, bucket, columns):
    # `Dataset.save_to_disk` writes Arrow IPC streams (no footer: a record batch's place is
    # known only by reading every one before it); `to_parquet` writes what a bucket reads.
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({k: columns[k] for k in ("x", "v")})
    url = f"s3://{bucket}/hf/train.parquet"
    ds.to_parquet(url, batch_size=GROUP, storage_options=s3.storage_options())
    data = in_bucket(url, storage_options=s3.storage_options())
    assert data["x"].chunk_rows == GROUP
    loader = Loader(data, BATCH, shuffle="grouped")
    assert equal(epoch_of(loader, 3), expected(columns, loader, 3))
    plain = Loader(ds, BATCH, shuffle=False)
    assert equal(epoch_of(Loader(data, BATCH, shuffle=False)), epoch_of(plain))


def test_a_column_of_vectors_and_one_of_lists_refused(s3, bucket, tmp_path):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((3000, 3)).astype(np.float32)
    table = pa.table(
        {
            "e": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 3),
            "ids": pa.array([[1, 2], [3]] * 1500),
        }
    )
    pq.write_table(table, tmp_path / "v.parquet", row_group_size=500)
    s3.put(bucket, "v.parquet", (tmp_path / "v.parquet").read_bytes())
    url, options = f"s3://{bucket}/v.parquet", s3.storage_options()
    data = in_bucket(url, columns=["e"], storage_options=options)
    assert data["e"].shape == (3000, 3) and data["e"].dtype == np.float32
    loader = Loader(data, 64, shuffle="grouped")
    got = np.concatenate([b["e"] for b in loader])
    assert np.array_equal(got, vectors[loader.indices(0)])
    with pytest.raises(TypeError, match=r"data\['ids'\].*fixed-size list"):
        in_bucket(url, storage_options=options)


def test_a_directory_of_files_is_one_dataset(s3, bucket, columns, tmp_path):
    # Three files of whole row groups (the last file's last one shorter), and a marker.
    bounds = [0, 4 * GROUP, 9 * GROUP, ROWS - 500]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(table({k: v[a:b] for k, v in columns.items()}), path, row_group_size=GROUP)
        s3.put(bucket, f"ds/part-{i}.parquet", path.read_bytes())
    s3.put(bucket, "ds/_SUCCESS", b"")
    s3.reset_stats()
    data = in_bucket(f"s3://{bucket}/ds", storage_options=s3.storage_options())
    opened = s3.stats.snapshot()["by_method"]
    assert opened == {"GET": 1 + 3}  # one LIST, the three footers; no HEAD
    assert sorted(data) == ["v", "x", "y"] and len(data["x"]) == ROWS - 500
    for shuffle in ("grouped", False):
        s3.reset_stats()
        loader = Loader(data, BATCH, shuffle=shuffle)
        loader.set_epoch(1)
        got = list(loader)
        idx = loader.indices(1)
        for k in ("x", "v", "y"):
            assert np.array_equal(np.concatenate([b[k] for b in got]), columns[k][idx])
        assert gets(s3) == 1 + -(-(ROWS - 500) // GROUP)  # the LIST, each row group once
    # A file of a partial row group before the last breaks the chunks of one size.
    path = tmp_path / "part-1.parquet"
    pq.write_table(table({k: v[: GROUP + 7] for k, v in columns.items()}), path)
    s3.put(bucket, "ds/part-1.parquet", path.read_bytes())
    with pytest.raises(ValueError, match=r"part-1\.parquet has 1007 rows"):
        in_bucket(f"s3://{bucket}/ds", storage_options=s3.storage_options())


def test_a_column_between_those_read_is_not_fetched_and_each_range_once(
    s3, bucket, tmp_path, monkeypatch
):
    import looptoolkit.stores._remote as remote_module

    # Nothing kept in the fetcher's memory of recent objects: the columns of a row
    # group share its ranges however large it is (as row groups of 128 MiB would be).
    monkeypatch.setattr(remote_module, "RECENT_BYTES", 1)
    rng = np.random.default_rng(2)
    a, b, c = rng.standard_normal((3, 20_000))
    path = tmp_path / "abc.parquet"
    pq.write_table(pa.table({"a": a, "b": b, "c": c}), path, row_group_size=2000)
    s3.put(bucket, "abc.parquet", path.read_bytes())
    data = in_bucket(f"s3://{bucket}/abc.parquet", columns=["a", "c"], **options(s3))
    s3.reset_stats()
    loader = Loader(data, BATCH, shuffle="grouped")
    got = list(loader)
    idx = loader.indices(0)
    for k, values in (("a", a), ("c", c)):
        assert np.array_equal(np.concatenate([x[k] for x in got]), values[idx])
    seen = s3.stats.snapshot()
    # b lies between a and c in each of the 10 row groups: two ranges each, fetched once.
    assert seen["by_method"] == {"HEAD": 1, "GET": 2 * 10}
    need = used_bytes(path, ("a", "c"))
    assert need <= seen["body_bytes"] <= 1.2 * need


def options(s3: Any) -> dict[str, Any]:
    return {"storage_options": s3.storage_options()}


def test_a_pass_fetches_while_its_look_at_the_file_is_on_its_way(s3, stored, monkeypatch):
    # Each pass looks at the file again (a HEAD: one rewritten since is refused); its row
    # groups are fetched meanwhile, and nothing is decoded before the look has come back.
    from looptoolkit.stores._parquet import _File

    _, url = stored
    data = open_(s3, url)
    release, looked = threading.Event(), _File.relist

    def held(self: Any) -> None:  # the look comes back only once released
        release.wait(10)
        looked(self)

    monkeypatch.setattr(_File, "relist", held)
    s3.reset_stats()
    loader = Loader(data, BATCH, shuffle=False)
    first: list[Any] = []
    reader = threading.Thread(target=lambda: first.append(next(iter(loader))))
    reader.start()
    end = time.monotonic() + 5
    while not s3.stats.snapshot()["range_requests"] and time.monotonic() < end:
        time.sleep(0.01)
    fetched_while_held = s3.stats.snapshot()["range_requests"]
    time.sleep(0.5)  # time enough to decode and hand out a batch: none is, while held
    assert not first
    release.set()
    reader.join(10)
    assert fetched_while_held > 0
    assert len(first) == 1 and len(first[0]["x"]) == BATCH
