"""Chunks fetched before the pass's LIST arrives: read as answered, checked once it is here.

Without a disk cache a pass sends its LIST and fetches the first chunk objects whole at
the same time (`Fetcher.prefetch_unlisted`); a read before the LIST arrives takes each as
its GET answered it, and a read after takes one only if the size and version its GET
answered are the listed ones (another is fetched again, as listed).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
pytest.importorskip("obstore")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

from looptoolkit import Loader  # noqa: E402
from looptoolkit.stores._zarr import RemoteZarr, remote_array  # noqa: E402

ROWS, CHUNK, BATCH = 4096, 512, 256


def _remote(s3: Any, bucket: str, values: np.ndarray, tmp_path: Any, name: str = "x") -> Any:
    local = zarr.create_array(
        tmp_path / f"{name}.zarr",
        shape=values.shape,
        chunks=(CHUNK,),
        dtype=values.dtype,
        compressors=None,
        fill_value=-1,
    )
    local[:] = values
    s3.upload_dir(tmp_path / f"{name}.zarr", bucket, f"{name}.zarr")
    return zarr.open_array(f"s3://{bucket}/{name}.zarr", storage_options=s3.storage_options())


def test_the_first_chunk_is_fetched_while_the_list_is_on_its_way(s3, bucket, tmp_path):
    values = np.arange(ROWS, dtype=np.int64)
    loader = Loader({"x": _remote(s3, bucket, values, tmp_path)}, BATCH, shuffle=False)
    s3.latency_s = 0.3
    s3.reset_stats()
    start = time.perf_counter()
    iterator = iter(loader)
    first = next(iterator)
    took = time.perf_counter() - start
    assert np.array_equal(first["x"], values[:BATCH])
    # The LIST and the chunk's GET together: about one latency (0.3 s), not two.
    assert took < 0.5, took
    s3.latency_s = 0.0
    rest = np.concatenate([b["x"] for b in iterator])
    assert np.array_equal(rest, values[BATCH:])
    assert s3.stats.snapshot()["by_method"] == {"GET": 1 + ROWS // CHUNK}  # nothing twice


def test_an_object_changed_between_its_get_and_the_list_is_fetched_again(s3, bucket, tmp_path):
    old = np.arange(ROWS, dtype=np.int64)
    array = remote_array(_remote(s3, bucket, old, tmp_path), "x")
    assert array is not None
    array.start_pass()  # the LIST is on its way...
    fetcher = array._process()[0]
    key = array._keys([0])[0]
    fetcher.prefetch_unlisted([key], CHUNK * 8)  # ...and chunk 0 is fetched whole: the old
    deadline = time.monotonic() + 10
    while key not in fetcher._seen and time.monotonic() < deadline:
        time.sleep(0.01)
    new = old[:CHUNK] + 1000
    s3.put(bucket, key, new.tobytes())  # rewritten: another version
    s3.reset_stats()
    array.start_pass()  # a LIST that sees the new version
    got = fetcher.take(array.objects([0]))
    assert np.frombuffer(got[0], np.int64).tolist() == new.tolist()
    assert s3.stats.snapshot()["by_method"] == {"GET": 2}  # the LIST, the object again
    fetcher.forget()


def test_a_chunk_that_is_not_listed_holds_the_fill_value(s3, bucket, tmp_path):
    values = np.arange(ROWS, dtype=np.int64)
    remote = _remote(s3, bucket, values, tmp_path)
    client = s3.boto3_client()
    client.delete_object(Bucket=bucket, Key="x.zarr/c/1")  # chunk 1: never written
    expected = values.copy()
    expected[CHUNK : 2 * CHUNK] = -1
    got = np.concatenate([b["x"] for b in Loader({"x": remote}, BATCH, shuffle=False)])
    assert np.array_equal(got, expected)


def test_a_read_before_the_list_arrives_does_not_wait_for_it(s3, bucket, tmp_path, monkeypatch):
    values = np.arange(ROWS, dtype=np.int64)
    remote = _remote(s3, bucket, values, tmp_path)
    release = threading.Event()
    listed = RemoteZarr._list

    def held(self: Any, prefix: str) -> Any:  # the LIST answers only once released
        release.wait(10)
        return listed(self, prefix)

    monkeypatch.setattr(RemoteZarr, "_list", held)
    iterator = iter(Loader({"x": remote}, BATCH, shuffle=False))
    start = time.perf_counter()
    first = next(iterator)
    took = time.perf_counter() - start
    release.set()
    assert took < 5, took  # not held back by the LIST
    assert np.array_equal(first["x"], values[:BATCH])
    rest = np.concatenate([b["x"] for b in iterator])
    assert np.array_equal(rest, values[BATCH:])
