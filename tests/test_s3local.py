"""The local S3 harness: a real S3 API behind a proxy that delays, faults and counts.

Each client the bucket reads may use (boto3, s3fs, obstore) goes through the proxy, and
each fault reaches the client as the failure it stands for.
"""

from __future__ import annotations

import datetime
import http.client
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from looptoolkit.bench.s3local import LocalS3

DATA = bytes(range(256)) * 40  # 10 KiB, every byte value, so a flipped byte shows

NO_RETRIES = Config(retries={"total_max_attempts": 1})


@pytest.fixture
def client(s3):
    """A boto3 client of the proxy that makes one attempt per call."""
    c = s3.boto3_client(direct=False, config=NO_RETRIES)
    yield c
    c.close()


def _obstore(s3, bucket, **kwargs):
    store = pytest.importorskip("obstore.store")
    return store.S3Store(bucket, **s3.obstore_options(), **kwargs)


def _port(url):
    return int(url.rsplit(":", 1)[1])


# --- clients through the proxy ---------------------------------------------------------


def test_boto3_reads_and_writes_through_the_proxy(s3, bucket, client):
    s3.put(bucket, "dir/a b.bin", DATA)
    assert s3.stats.requests == 0  # set-up uploads go to the server directly
    assert client.get_object(Bucket=bucket, Key="dir/a b.bin")["Body"].read() == DATA
    part = client.get_object(Bucket=bucket, Key="dir/a b.bin", Range="bytes=100-199")
    assert part["Body"].read() == DATA[100:200]
    client.put_object(Bucket=bucket, Key="dir/new", Body=b"written")
    assert client.head_object(Bucket=bucket, Key="dir/new")["ContentLength"] == 7
    listed = client.list_objects_v2(Bucket=bucket, Prefix="dir/")["Contents"]
    assert sorted(o["Key"] for o in listed) == ["dir/a b.bin", "dir/new"]
    assert s3.stats.by_method == {"GET": 3, "PUT": 1, "HEAD": 1}


def test_large_upload_through_the_proxy(s3, bucket, client):
    # boto3 asks for "100 Continue" before a body over 1 MB; the proxy answers it.
    big = DATA * 200
    client.put_object(Bucket=bucket, Key="big", Body=big)
    assert s3.boto3_client().get_object(Bucket=bucket, Key="big")["Body"].read() == big


def test_s3fs_reads_a_range_through_the_proxy(s3, bucket):
    s3fs = pytest.importorskip("s3fs")
    s3.put(bucket, "x/data.bin", DATA)
    fs = s3fs.S3FileSystem(**s3.storage_options(), skip_instance_cache=True)
    assert fs.cat_file(f"{bucket}/x/data.bin", start=1000, end=1100) == DATA[1000:1100]
    assert fs.ls(f"{bucket}/x", detail=False) == [f"{bucket}/x/data.bin"]
    assert s3.stats.range_requests == 1


def test_obstore_reads_and_writes_through_the_proxy(s3, bucket):
    store = _obstore(s3, bucket)
    s3.put(bucket, "x/data.bin", DATA)
    assert bytes(store.get_range("x/data.bin", start=1000, end=1100)) == DATA[1000:1100]
    assert bytes(store.get("x/data.bin").bytes()) == DATA
    store.put("x/new", b"written")
    assert s3.boto3_client().get_object(Bucket=bucket, Key="x/new")["Body"].read() == b"written"
    assert s3.stats.by_method == {"GET": 2, "PUT": 1}


def test_env_points_clients_at_the_proxy(s3, bucket, monkeypatch):
    s3.put(bucket, "k", b"from the environment")
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    c = boto3.session.Session().client("s3")
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"from the environment"
    c.close()
    assert s3.stats.requests == 1
    store = pytest.importorskip("obstore.store")
    assert bytes(store.S3Store(bucket).get("k").bytes()) == b"from the environment"
    assert s3.stats.requests == 2


def test_upload_dir_keeps_the_tree(s3, bucket, client, tmp_path):
    for name in ["zarr.json", "c/0/0", "c/0/1", "c/1/0"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    s3.upload_dir(tmp_path, bucket, "store.zarr/")
    listed = client.list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(o["Key"] for o in listed) == [
        "store.zarr/c/0/0",
        "store.zarr/c/0/1",
        "store.zarr/c/1/0",
        "store.zarr/zarr.json",
    ]
    assert client.get_object(Bucket=bucket, Key="store.zarr/c/1/0")["Body"].read() == b"c/1/0"
    assert s3.stats.requests == 2


# --- latency and counts ----------------------------------------------------------------


def test_stats_count_requests_ranges_bytes_and_connections(s3, bucket, client):
    s3.put(bucket, "k", DATA)
    for start in (0, 1000, 5000):
        client.get_object(Bucket=bucket, Key="k", Range=f"bytes={start}-{start + 99}")[
            "Body"
        ].read()
    assert s3.stats.snapshot() == {
        "requests": 3,
        "by_method": {"GET": 3},
        "range_requests": 3,
        "body_bytes": 300,
        "max_in_flight": 1,
        "in_flight": 0,
        "connections": 1,  # kept alive, though the server closes each of its own
        "faults": 0,
    }
    s3.reset_stats()
    assert s3.stats.requests == s3.stats.body_bytes == s3.stats.max_in_flight == 0


def test_latency_delays_each_request(s3, bucket, client):
    s3.put(bucket, "k", b"x")
    client.get_object(Bucket=bucket, Key="k")["Body"].read()  # connection made
    s3.latency_s = 0.1
    start = time.perf_counter()
    client.get_object(Bucket=bucket, Key="k")["Body"].read()
    assert time.perf_counter() - start >= 0.1


def test_parallel_requests_each_wait_their_own_latency(s3, bucket):
    s3.put(bucket, "k", DATA)
    c = s3.boto3_client(direct=False, config=Config(max_pool_connections=8))

    def get(i):
        return c.get_object(Bucket=bucket, Key="k", Range=f"bytes={i}-{i}")["Body"].read()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(get, range(8)))  # the pool's connections made
        s3.latency_s = 0.1
        s3.reset_stats()
        start = time.perf_counter()
        assert list(pool.map(get, range(8))) == [DATA[i : i + 1] for i in range(8)]
        elapsed = time.perf_counter() - start
    c.close()
    assert 0.1 <= elapsed < 0.4  # one after another: 0.8 s
    assert s3.stats.max_in_flight == 8


# --- faults ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [("503", 503, "SlowDown"), ("429", 429, "TooManyRequests"), ("500", 500, "InternalError")],
)
def test_error_faults_reach_the_client_as_s3_errors(s3, bucket, client, kind, status, code):
    s3.put(bucket, "k", DATA)
    s3.faults.add(kind)
    with pytest.raises(botocore.exceptions.ClientError) as info:
        client.get_object(Bucket=bucket, Key="k")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert info.value.response["Error"]["Code"] == code
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == DATA
    assert s3.stats.faults == 1
    assert s3.faults.pending() == 0


def test_an_error_fault_is_retried_by_a_client_that_retries(s3, bucket):
    s3.put(bucket, "k", DATA)
    fast = {"init_backoff": datetime.timedelta(milliseconds=1)}
    store = _obstore(s3, bucket, retry_config={"max_retries": 3, "backoff": fast})
    s3.faults.add("503", times=2)
    assert bytes(store.get("k").bytes()) == DATA
    assert s3.stats.requests == 3


def test_reset_before_the_response_is_a_connection_error(s3, bucket, client):
    s3.put(bucket, "k", DATA)
    s3.faults.add("reset")
    with pytest.raises(botocore.exceptions.ConnectionClosedError):
        client.get_object(Bucket=bucket, Key="k")
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == DATA


def test_reset_inside_the_body_is_a_broken_stream(s3, bucket, client):
    s3.put(bucket, "k", DATA)
    s3.faults.add("reset", after_bytes=100)
    response = client.get_object(Bucket=bucket, Key="k")
    with pytest.raises(botocore.exceptions.ResponseStreamingError, match="reset"):
        response["Body"].read()


def test_truncate_sends_the_full_length_and_part_of_the_body(s3, bucket, client):
    s3.put(bucket, "k", DATA)
    s3.faults.add("truncate", after_bytes=100)
    response = client.get_object(Bucket=bucket, Key="k")
    assert response["ContentLength"] == len(DATA)
    with pytest.raises(botocore.exceptions.ResponseStreamingError, match="100 bytes read"):
        response["Body"].read()
    assert s3.stats.body_bytes == 100


@pytest.mark.parametrize("kind", ["truncate", "reset"])
def test_truncate_closes_and_reset_resets_at_the_http_level(s3, bucket, client, kind):
    # A presigned URL read with http.client: what the client sees is the proxy's doing.
    s3.put(bucket, "k", DATA)
    url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    s3.faults.add(kind, after_bytes=10)
    connection = http.client.HTTPConnection("127.0.0.1", _port(s3.endpoint), timeout=5)
    connection.request("GET", url.split(s3.endpoint, 1)[1])
    response = connection.getresponse()
    assert (response.status, response.length) == (200, len(DATA))
    assert response.read(10) == DATA[:10]
    if kind == "truncate":  # a clean close (FIN) after 10 bytes
        with pytest.raises(http.client.IncompleteRead):
            response.read()
    else:  # a reset (RST)
        with pytest.raises(ConnectionResetError):
            response.read()
    connection.close()


def test_stall_makes_a_client_time_out(s3, bucket):
    s3.put(bucket, "k", DATA)
    c = s3.boto3_client(
        direct=False, config=Config(read_timeout=0.2, retries={"total_max_attempts": 1})
    )
    s3.faults.add("stall", delay_s=0.6)
    with pytest.raises(botocore.exceptions.ReadTimeoutError):
        c.get_object(Bucket=bucket, Key="k")
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == DATA
    c.close()


def test_corrupt_flips_one_byte_and_keeps_the_length(s3, bucket, client):
    s3.put(bucket, "k", DATA)
    s3.faults.add("corrupt", after_bytes=7)
    got = client.get_object(Bucket=bucket, Key="k", Range="bytes=0-999")["Body"].read()
    assert len(got) == 1000
    assert [i for i in range(1000) if got[i] != DATA[i]] == [7]
    assert got[7] == DATA[7] ^ 0xFF


def test_faults_apply_to_their_method_key_and_count(s3, bucket, client):
    s3.put(bucket, "a/x", DATA)
    s3.put(bucket, "b/x", DATA)
    s3.faults.add("503", times=2, match=f"/{bucket}/a/")  # not "a/": a bucket may end in "a"
    s3.faults.add("500", method="HEAD")
    assert s3.faults.pending() == 3
    assert client.get_object(Bucket=bucket, Key="b/x")["Body"].read() == DATA
    with pytest.raises(botocore.exceptions.ClientError) as info:
        client.head_object(Bucket=bucket, Key="a/x")  # HEAD: the status, no body
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    for _ in range(2):
        with pytest.raises(botocore.exceptions.ClientError, match="SlowDown"):
            client.get_object(Bucket=bucket, Key="a/x")
    assert s3.faults.pending() == 0
    assert client.get_object(Bucket=bucket, Key="a/x")["Body"].read() == DATA
    s3.faults.add("503", method="*")
    s3.faults.clear()
    assert s3.faults.pending() == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "404"}, "`kind` must be one of"),
        ({"kind": "503", "times": 0}, "`times` must be >= 1"),
        ({"kind": "truncate", "after_bytes": -1}, "`after_bytes` must be >= 0"),
        ({"kind": "stall"}, "`delay_s` must be > 0 for a stall"),
    ],
)
def test_bad_faults_are_refused(s3, kwargs, message):
    with pytest.raises(ValueError, match=message):
        s3.faults.add(**kwargs)


def test_bad_arguments_are_refused(s3):
    with pytest.raises(ValueError, match="`latency_s` must be >= 0"):
        s3.latency_s = -1
    with pytest.raises(ValueError, match="`name` must be 3 to 63"):
        s3.make_bucket("ab")
    with pytest.raises(ValueError, match="`name` must be 3 to 63"):
        s3.make_bucket("Upper_Case")
    with pytest.raises(RuntimeError, match="not running"):
        LocalS3().endpoint  # noqa: B018 (the property raises)


# --- start and stop --------------------------------------------------------------------


def _refused(port):
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("subprocess", [False, True], ids=["thread", "subprocess"])
def test_stop_leaves_no_port_or_thread(subprocess):
    before = set(threading.enumerate())
    start = time.perf_counter()
    with LocalS3(subprocess=subprocess, latency_s=0.01) as s3:
        started = time.perf_counter() - start
        bucket = s3.make_bucket("stop-test")
        s3.put(bucket, "k", DATA)
        c = s3.boto3_client(direct=False)
        assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == DATA
        c.close()
        ports = [_port(s3.endpoint), _port(s3.server_endpoint)]
        assert "LocalS3(latency_s=0.01" in repr(s3)
    assert started < (10 if subprocess else 2)  # in-process: well under 2 s
    assert all(_refused(port) for port in ports)
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.01)  # the server's handler threads end as their connections close
    assert set(threading.enumerate()) - before == set()
    s3.stop()  # twice is fine
