"""zarr, Parquet and array files at gs:// and az:// as Loader data, against local emulators.

fake-gcs-server and Azurite (``gcs_azure_fixtures.py``) answer obstore's ``GCSStore`` and
``AzureStore`` and fsspec's gcsfs and adlfs on 127.0.0.1. The batches are checked equal
to the same data on local disk, and the requests counted by the Loader's stats.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
pytest.importorskip("obstore")

from looptoolkit import Loader  # noqa: E402
from looptoolkit.stores import bucket as in_bucket  # noqa: E402
from looptoolkit.stores._bucket import AzureBucket, GCSBucket, bucket_at  # noqa: E402
from looptoolkit.stores._bucket_options import (  # noqa: E402
    azure_options,
    connection_string,
    gcs_options,
)

ROWS, WIDTH, CHUNK, BATCH = 20_000, 8, 1024, 256
CHUNKS = -(-ROWS // CHUNK)
CHUNK_BYTES = CHUNK * WIDTH * 4
CLIENTS = {"gs": "gcsfs", "az": "adlfs"}


@pytest.fixture(params=["gs", "az"])
def cloud(request: Any) -> tuple[Any, str]:
    """The emulator of a cloud and a new bucket (container) in it."""
    pytest.importorskip(CLIENTS[request.param])
    if request.param == "gs":
        return request.getfixturevalue("local_gcs"), request.getfixturevalue("gcs_bucket")
    return request.getfixturevalue("local_azure"), request.getfixturevalue("azure_container")


@pytest.fixture(scope="module")
def values() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)


def batches(loader: Loader, epoch: int = 0) -> list[np.ndarray]:
    loader.set_epoch(epoch)
    return [b["x"] for b in loader]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def stored_array(server: Any, name: str, values: np.ndarray, tmp_path: Any) -> Any:
    """The array on local disk, copied to the bucket (uncompressed: chunks of a known size)."""
    local = zarr.create_array(
        tmp_path / "x.zarr", shape=values.shape, chunks=(CHUNK, WIDTH), dtype="f4", compressors=None
    )
    local[:] = values
    server.upload_dir(tmp_path / "x.zarr", name, "x.zarr")
    return local


def test_a_zarr_array_reads_as_its_local_copy(cloud, values, tmp_path):
    server, name = cloud
    local = stored_array(server, name, values, tmp_path)
    url = f"{server.scheme}://{name}/x.zarr"
    remote = zarr.open_array(url, storage_options=server.storage_options(), mode="r")
    loader = Loader({"x": remote}, BATCH, shuffle="grouped", seed=0, stats=True)
    (leaf,) = loader._rows.store.leaves
    assert type(leaf).__name__ == "RemoteZarr"  # read through the Loader's fetcher, not zarr
    assert leaf.bucket.where == f"{server.scheme}://{name}/ (at {server.endpoint}) "
    plain = Loader({"x": local}, BATCH, shuffle="grouped", seed=0)
    for epoch in (0, 1):
        assert same(batches(loader, epoch), batches(plain, epoch))
    reads = loader.stats.remote_reads
    # Each epoch: one LIST and one GET per chunk object, each chunk's bytes fetched once.
    assert reads["requests"] == 2 * (CHUNKS + 1)
    assert reads["bytes_fetched"] == reads["bytes_used"] == 2 * CHUNKS * CHUNK_BYTES
    assert reads["retries"] == 0


def test_a_group_over_obstores_store_reads_as_its_local_copy(cloud, values, tmp_path):
    server, name = cloud
    written = zarr.open_group(tmp_path / "g.zarr", mode="w")
    written.create_array("x", data=values, chunks=(CHUNK, WIDTH))
    written.create_array("y", data=np.arange(ROWS), chunks=(4 * CHUNK,))
    server.upload_dir(tmp_path / "g.zarr", name, "g.zarr")
    store = zarr.storage.ObjectStore(server.obstore_store(name), read_only=True)
    group = zarr.open_group(store, path="g.zarr", mode="r")
    loader = Loader(group, BATCH, shuffle="grouped", seed=0, stats=True)
    assert {type(leaf).__name__ for leaf in loader._rows.store.leaves} == {"RemoteZarr"}
    plain = Loader(zarr.open_group(tmp_path / "g.zarr", mode="r"), BATCH, shuffle="grouped", seed=0)
    got, want = list(loader), list(plain)
    assert len(got) == len(want) == -(-ROWS // BATCH)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a["x"], b["x"]) and np.array_equal(a["y"], b["y"])
    # A LIST per array, a GET per chunk object of each.
    assert loader.stats.remote_reads["requests"] == 2 + CHUNKS + -(-ROWS // (4 * CHUNK))
    # The group through fsspec (gcsfs, adlfs) reads the same.
    url = f"{server.scheme}://{name}/g.zarr"
    over_fsspec = zarr.open_group(url, storage_options=server.storage_options(), mode="r")
    again = Loader(over_fsspec, BATCH, shuffle="grouped", seed=0)
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(again, want, strict=True))


def test_parquet_and_array_files_by_url(cloud, values, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    server, name = cloud
    options = server.storage_options()
    table = pa.table({"x": values[:, 0], "y": np.arange(ROWS)})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=CHUNK)
    server.put(name, "t.parquet", (tmp_path / "t.parquet").read_bytes())
    server.put(name, "ds/part-0.parquet", (tmp_path / "t.parquet").read_bytes())
    np.save(tmp_path / "o.npy", np.arange(ROWS, dtype=np.int64))
    server.put(name, "o.npy", (tmp_path / "o.npy").read_bytes())
    base = f"{server.scheme}://{name}"

    data = in_bucket(f"{base}/t.parquet", storage_options=options)
    loader = Loader(data, BATCH, shuffle="grouped", seed=0, stats=True)
    for batch, idx in zip(
        loader, np.split(loader.indices(0), range(BATCH, ROWS, BATCH)), strict=True
    ):
        assert np.array_equal(batch["x"], values[idx, 0]) and np.array_equal(batch["y"], idx)
    # The footer, the pass's HEAD, and one range per row group (both columns in it).
    assert loader.stats.remote_reads["requests"] == CHUNKS + 2
    again = Loader(pickle.loads(pickle.dumps(data)), BATCH, shuffle="grouped", seed=0)  # a worker's
    assert sum(len(b["y"]) for b in again) == ROWS

    dataset = in_bucket(f"{base}/ds", storage_options=options)
    assert np.array_equal(
        np.concatenate([b["y"] for b in Loader(dataset, BATCH, shuffle=False)]), np.arange(ROWS)
    )
    offsets = in_bucket(f"{base}/o.npy", storage_options=options)
    got = np.concatenate([b["o"] for b in Loader({"o": offsets}, BATCH, shuffle=False)])
    assert np.array_equal(got, np.arange(ROWS))


def test_a_missing_object_is_named_by_its_url(cloud):
    server, name = cloud
    found, key = bucket_at(f"{server.scheme}://{name}/gone.bin", server.storage_options(), "x")
    assert key == "gone.bin"
    with pytest.raises(FileNotFoundError, match=rf"{server.scheme}://{name}/gone.bin is not in"):
        found.head(key)


def _hidden_credentials(server: Any, monkeypatch: Any) -> tuple[dict[str, Any], str]:
    """Credentials put where the cloud's clients look; the storage options the user passes."""
    if server.scheme == "gs":
        # A service account key in the environment, as obstore reads it (the emulator's form:
        # no OAuth, the base URL in the key). gcsfs is told only the endpoint.
        secret = "marker-private-key-never-pickled"
        key = {
            "gcs_base_url": server.endpoint,
            "disable_oauth": True,
            "client_email": "reader@example.iam.gserviceaccount.com",
            "private_key": secret,
            "private_key_id": "k1",
        }
        monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", json.dumps(key))
        return {"endpoint_url": server.endpoint}, secret
    # The connection string in the environment, as adlfs and the Azure clients read it.
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", server.connection_string())
    return {}, server.key


def test_credentials_the_client_found_are_not_pickled(cloud, values, tmp_path, monkeypatch):
    server, name = cloud
    local = stored_array(server, name, values, tmp_path)
    given, secret = _hidden_credentials(server, monkeypatch)
    url = f"{server.scheme}://{name}/x.zarr"
    remote = zarr.open_array(url, storage_options=given, mode="r")
    loader = Loader({"x": remote}, BATCH, shuffle="grouped", seed=0, stats=True)
    want = batches(Loader({"x": local}, BATCH, shuffle="grouped", seed=0))
    assert same(batches(loader), want)
    blob = pickle.dumps(loader)
    assert secret.encode() not in blob
    assert secret not in repr(loader.stats.as_dict()) and secret not in repr(loader)
    (leaf,) = loader._rows.store.leaves
    assert secret not in leaf.bucket.where and secret not in repr(leaf.bucket.options)
    again = pickle.loads(blob)  # its client made anew, finding the credentials again
    assert same(batches(again), want)


def test_what_the_user_passed_maps_to_obstores_options(tmp_path):
    assert gcs_options({"endpoint_url": "http://h:1", "token": "anon", "project": "p"}) == {
        "base_url": "http://h:1",
        "skip_signature": True,
    }
    assert gcs_options({"token": "google_default"}) == {}  # obstore finds them itself
    assert gcs_options({"token": {"type": "service_account"}}) == {
        "service_account_key": '{"type": "service_account"}'
    }
    assert gcs_options({"token": str(tmp_path / "k.json")}) == {
        "application_credentials": str(tmp_path / "k.json")
    }
    text = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k==;EndpointSuffix=x.net"
    assert connection_string(text) == {
        "account_name": "acct",
        "account_key": "k==",
        "endpoint": "https://acct.blob.x.net",
    }
    assert connection_string("UseDevelopmentStorage=true") == {"use_emulator": True}
    assert azure_options({"account_name": "a", "sas_token": "?sv=1&sig=s", "anon": False}) == {
        "account_name": "a",
        "sas_key": "sv=1&sig=s",
    }
    found, key = bucket_at("abfs://data@acct.dfs.core.windows.net/t/x.parquet", None, "x")
    assert isinstance(found, AzureBucket) and (found.bucket, key) == ("data", "t/x.parquet")
    assert found.options == {"account_name": "acct"}
    assert found.where == "az://data/ (at https://acct.blob.core.windows.net) "
    found, key = bucket_at("gs://b/k", {"token": "anon"}, "x")
    assert isinstance(found, GCSBucket) and found.where == "gs://b/"
    with pytest.raises(ValueError, match=r"s3://, gs:// or az:// URL of a Parquet file"):
        in_bucket("http://example.com/t.parquet")
