"""A real S3 API on 127.0.0.1, for the bucket tests and the bucket workload.

:class:`LocalS3` starts moto's S3 server (in a thread, or in a child process so a
benchmark does not share its GIL) and puts the fault-injecting proxy of
:mod:`looptoolkit.bench.s3proxy` in front of it. Clients (boto3, s3fs, obstore, the
store reads) talk to the proxy's ``endpoint`` as to any S3 endpoint; the proxy adds
the latency of a distant bucket, injects scripted faults and counts requests and
bytes. Uploads made to set a test up go to ``server_endpoint`` directly, so they are
neither delayed nor counted. Nothing leaves 127.0.0.1 and the credentials are dummy.

The server keeps no state of its own: every in-process server shares moto's
backends, so give each test its own bucket (``tests/s3_fixtures.py`` does).

Examples:
    >>> from looptoolkit.bench.s3local import LocalS3
    >>> with LocalS3(latency_s=0.005) as s3:
    ...     bucket = s3.make_bucket("looptoolkit-example")
    ...     s3.put(bucket, "rows.bin", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    ...     s3.faults.add("503")  # the next GET is answered with SlowDown
    ...     client = s3.boto3_client(direct=False)  # through the proxy, with retries
    ...     part = client.get_object(Bucket=bucket, Key="rows.bin", Range="bytes=10-13")
    ...     print(part["Body"].read(), s3.stats.requests, s3.stats.body_bytes)
    b'KLMN' 2 4
"""

from __future__ import annotations

import http.client
import os
import pathlib
import re
import select
import subprocess as sp
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .s3proxy import Faults, Proxy, ProxyStats

__all__ = ["Faults", "LocalS3", "ProxyStats"]

_START_TIMEOUT_S = 30.0  # a child process on a loaded machine; a thread starts in ~0.3 s
_BACKLOG = 1024  # connections waiting to be accepted, for bursts of parallel requests
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _moto_server(port: int = 0) -> Any:
    """Moto's WSGI app in a threaded werkzeug server bound to 127.0.0.1 (not yet serving)."""
    try:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server
    except ImportError:
        raise ImportError(
            "moto is not installed; install it with `pip install 'moto[server]'`."
        ) from None

    class QuietHandler(MotoRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a connection (and its thread) per client

        def log(self, type: str, message: str, *args: Any) -> None:
            pass  # no line on stderr per request

    class S3Only(DomainDispatcherApplication):
        """Every request to S3's app, but moto's own API: no look for the service per request."""

        def get_application(self, environ: dict[str, Any]) -> Any:
            if environ.get("PATH_INFO", "").startswith("/moto-api"):
                return super().get_application(environ)
            with self.lock:
                app = self.app_instances.get("s3")
                if app is None:
                    app = self.app_instances["s3"] = self.create_app("s3")
            return app

    app = S3Only(create_backend_app)
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=QuietHandler)
    server.socket.listen(_BACKLOG)  # werkzeug's 128 drops connections in a burst of reads
    return server


def _serve_child() -> None:
    """The server of ``LocalS3(subprocess=True)``: prints its port, serves until stdin ends."""
    server = _moto_server()
    print(server.server_port, flush=True)

    def exit_with_parent() -> None:
        sys.stdin.read()  # returns when the parent closes the pipe or dies
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True).start()
    server.serve_forever()


class _ThreadServer:
    """Moto's server in a daemon thread of this process."""

    def __init__(self) -> None:
        self._server = _moto_server()
        self.port: int = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="looptoolkit-s3-server", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()  # serve_forever closes the socket as it returns
        self._thread.join()


class _ChildServer:
    """Moto's server in a child process, which exits when this process does."""

    def __init__(self) -> None:
        root = str(pathlib.Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        code = "from looptoolkit.bench.s3local import _serve_child; _serve_child()"
        self._process = sp.Popen(
            [sys.executable, "-c", code], stdin=sp.PIPE, stdout=sp.PIPE, env=env
        )
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], _START_TIMEOUT_S)
        line = self._process.stdout.readline() if ready else b""
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(
                f"the S3 server process did not start (exit code {self._process.returncode})."
            )
        self.port = int(line)

    def stop(self) -> None:
        process = self._process
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()  # closing stdin ends the child
        try:
            process.wait(timeout=5)
        except sp.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_answering(port: int) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=_START_TIMEOUT_S)
        try:
            connection.request("HEAD", "/")
            connection.getresponse().read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
        finally:
            connection.close()


class LocalS3:
    """A real S3 API (moto's server) on 127.0.0.1, reached through a fault-injecting proxy.

    Args:
        latency_s: the delay added before each response's first byte (settable any time).
        subprocess: run the server in a child process instead of a thread of this one,
            so that its work does not take this process's GIL (for benchmarks). The
            proxy runs in a thread of this process either way.

    Attributes:
        faults: the fault script (:class:`~looptoolkit.bench.s3proxy.Faults`).
        stats: requests and bytes seen by the proxy
            (:class:`~looptoolkit.bench.s3proxy.ProxyStats`).
        region: the region clients sign for.
        access_key: the dummy access key id the server accepts.
        secret_key: the dummy secret key the server accepts.
    """

    region = "us-east-1"
    access_key = "looptoolkit-test"
    secret_key = "looptoolkit-test-secret"

    def __init__(self, *, latency_s: float = 0.0, subprocess: bool = False) -> None:
        self.latency_s = latency_s
        self.subprocess = subprocess
        self.faults = Faults()
        self.stats = ProxyStats()
        self._server: _ThreadServer | _ChildServer | None = None
        self._proxy: Proxy | None = None
        self._client: Any = None
        self._session: Any = None
        self._lock = threading.Lock()

    @property
    def latency_s(self) -> float:
        """Seconds added before each response's first byte; each request waits its own."""
        return self._latency_s

    @latency_s.setter
    def latency_s(self, value: float) -> None:
        if not value >= 0:
            raise ValueError(f"`latency_s` must be >= 0, got {value}.")
        self._latency_s = float(value)

    @property
    def endpoint(self) -> str:
        """The proxy's URL, ``http://127.0.0.1:PORT``: what clients use."""
        if self._proxy is None:
            raise RuntimeError("LocalS3 is not running: call start() or use `with`.")
        return f"http://127.0.0.1:{self._proxy.port}"

    @property
    def server_endpoint(self) -> str:
        """The server's own URL, bypassing the proxy (no latency, faults or counts)."""
        if self._server is None:
            raise RuntimeError("LocalS3 is not running: call start() or use `with`.")
        return f"http://127.0.0.1:{self._server.port}"

    def start(self) -> LocalS3:
        """Start the server and the proxy; returns when both answer."""
        if self._server is not None:
            raise RuntimeError("LocalS3 is already running.")
        self._server = _ChildServer() if self.subprocess else _ThreadServer()
        try:
            _wait_until_answering(self._server.port)
            proxy = Proxy(
                ("127.0.0.1", self._server.port),
                latency=lambda: self._latency_s,
                faults=self.faults,
                stats=self.stats,
            )
            proxy.start()
            self._proxy = proxy
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the proxy (closing its connections), then the server; safe to call twice."""
        if self._proxy is not None:
            self._proxy.stop()
            self._proxy = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f" at {self.endpoint}" if self._proxy is not None else ""
        return f"LocalS3(latency_s={self.latency_s}, subprocess={self.subprocess}){where}"

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3, s3fs and obstore at the proxy."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",  # obstore refuses http:// endpoints without it
            "AWS_EC2_METADATA_DISABLED": "true",  # no credential lookups off this machine
        }

    def storage_options(self) -> dict[str, Any]:
        """Arguments of ``s3fs.S3FileSystem`` (fsspec's ``storage_options``) for the proxy."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": self.region},
        }

    def obstore_options(self) -> dict[str, Any]:
        """Keyword arguments of ``obstore.store.S3Store(bucket, ...)`` for the proxy."""
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "region": self.region,
            "client_options": {"allow_http": True},
        }

    def boto3_client(self, *, direct: bool = True, **kwargs: Any) -> Any:
        """A boto3 S3 client of the server (``direct``) or of the proxy.

        Args:
            direct: talk to the server itself, not through the proxy.
            **kwargs: passed to ``boto3.client`` (a ``config=`` is merged with path-style
                addressing).
        """
        import boto3
        from botocore.config import Config

        config = Config(s3={"addressing_style": "path"})
        if "config" in kwargs:
            config = config.merge(kwargs.pop("config"))
        with self._lock:  # a boto3 session makes one client at a time
            if self._session is None:
                self._session = boto3.session.Session()  # loads the service model once
            return self._session.client(
                "s3",
                endpoint_url=self.server_endpoint if direct else self.endpoint,
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                region_name=self.region,
                config=config,
                **kwargs,
            )

    def _direct(self) -> Any:
        if self._client is None:
            self._client = self.boto3_client(direct=True)
        return self._client

    def make_bucket(self, name: str) -> str:
        """Create a bucket (directly); returns its name.

        Raises:
            ValueError: ``name`` is not a valid S3 bucket name.
        """
        if not _BUCKET_NAME.fullmatch(name) or ".." in name:
            raise ValueError(
                f"`name` must be 3 to 63 lower-case letters, digits, '.' or '-', got {name!r}."
            )
        self._direct().create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Store an object directly (not delayed, faulted or counted by the proxy)."""
        self._direct().put_object(Bucket=bucket, Key=key, Body=data)

    def upload_dir(self, local_dir: str | os.PathLike[str], bucket: str, prefix: str) -> None:
        """Upload every file under ``local_dir`` (a zarr store, say) to ``prefix/<path>``."""
        root = pathlib.Path(local_dir)
        files = sorted(path for path in root.rglob("*") if path.is_file())
        base = prefix.strip("/")

        def upload(path: pathlib.Path) -> None:
            key = path.relative_to(root).as_posix()
            self.put(bucket, f"{base}/{key}" if base else key, path.read_bytes())

        client = self._direct()  # created once, before the threads share it
        assert client is not None
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(upload, files))

    def reset_stats(self) -> None:
        """Zero the proxy's counters."""
        self.stats.reset()
