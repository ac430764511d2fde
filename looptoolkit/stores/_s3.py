"""S3-compatible buckets (AWS, MinIO, any S3 API endpoint) through obstore.

The client of the bucket reads: obstore (Rust ``object_store``), chosen by
``benchmarks/bucket_clients.py``: with 20 ms a request it moved 98 objects of
256 KiB at 82-90 MiB/s with 16 requests in flight, against 31-44 for s3fs
(which sends a HEAD before each whole-object GET and keeps at most 10 in flight)
and 38-44 for pyarrow's S3 filesystem (a HEAD before every GET). Imported only
when a store over a bucket appears in the data.

An [`S3Bucket`][looptoolkit.stores._s3.S3Bucket] holds what the user passed to
open the store (through the zarr store it was given) and makes its obstore
client in the process that uses it, lazily: credentials the client found by
itself (the environment, a profile) are never pickled; a spawned or forked
worker finds them again. obstore's own retries are off: the fetcher retries.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from looptoolkit.stores._remote import Fatal, ObjectRef

__all__ = ["S3Bucket", "bucket_of"]

_INSTALL = "reading a bucket needs obstore; install it with `pip install 'looptoolkit[s3]'`."
# The process whose obstore calls started obstore's runtime (its threads): a child
# forked after that inherits the runtime without its threads, and its calls hang.
_runtime_pid: int | None = None


def _check_fork() -> None:
    """Raise in a child forked after obstore's runtime started in its parent (not hang)."""
    global _runtime_pid
    pid = os.getpid()
    if _runtime_pid is None:
        _runtime_pid = pid
    elif _runtime_pid != pid:
        raise RuntimeError(
            "this process was forked after its parent read from a bucket, and obstore's "
            "runtime does not survive a fork; start worker processes with the 'spawn' or "
            "'forkserver' start method (`multiprocessing.get_context('spawn')`, "
            "`DataLoader(..., multiprocessing_context='spawn')`), or read from the bucket "
            "only in the workers."
        )


class S3Bucket:
    """One bucket (and a key prefix) of an S3 API, and how to reach it.

    Args:
        bucket: the bucket's name.
        prefix: keys under this prefix (no leading or trailing slash).
        options: obstore ``S3Store`` options the user gave (an endpoint, a region,
            keys where the user passed them); the rest come from the environment.
    """

    def __init__(self, bucket: str, prefix: str, options: dict[str, Any]) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.options = options
        self._client: tuple[int, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def where(self) -> str:
        """The bucket's address for messages and cache names: endpoint and bucket, no keys."""
        endpoint = self.options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL", "")
        return f"s3://{self.bucket}/" + (f" (at {endpoint}) " if endpoint else "")

    def key(self, path: str) -> str:
        """The object key of ``path`` under the prefix."""
        return f"{self.prefix}/{path}" if self.prefix else path

    def client(self) -> Any:
        """This process's obstore store for the bucket (made after a fork anew)."""
        if self._client is not None and self._client[0] == os.getpid():
            return self._client[1]
        _check_fork()
        try:
            from obstore.store import S3Store
        except ImportError:
            raise ImportError(_INSTALL) from None
        options = dict(self.options)
        endpoint = options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL", "")
        client_options = {"timeout": datetime.timedelta(seconds=600)}
        if endpoint.startswith("http://"):
            client_options["allow_http"] = True  # type: ignore[assignment]
        store = S3Store(
            self.bucket,
            client_options=client_options,  # type: ignore[arg-type]
            retry_config={"max_retries": 0},
            **options,
        )
        self._client = (os.getpid(), store)
        return store

    async def get(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of object ``key`` (one GET); `Fatal` where no retry mends it."""
        import obstore
        from obstore.exceptions import NotFoundError, PermissionDeniedError, UnauthenticatedError

        try:
            if end <= start:
                return b""
            return bytes(await obstore.get_range_async(self.client(), key, start=start, end=end))
        except (NotFoundError, FileNotFoundError):  # obstore raises the built-in one too
            raise Fatal("the object is not there (it was listed: has it been removed?)") from None
        except (PermissionDeniedError, UnauthenticatedError) as error:
            raise Fatal(f"access refused ({type(error).__name__})") from None

    async def get_whole(self, key: str) -> tuple[bytes, int, str] | None:
        """Object ``key`` whole (one GET), its size and version as answered; None if missing."""
        import obstore
        from obstore.exceptions import NotFoundError, PermissionDeniedError, UnauthenticatedError

        try:
            result = await obstore.get_async(self.client(), key)
            data = bytes(await result.bytes_async())
        except (NotFoundError, FileNotFoundError):  # obstore raises the built-in one too
            return None
        except (PermissionDeniedError, UnauthenticatedError) as error:
            raise Fatal(f"access refused ({type(error).__name__})") from None
        meta = result.meta
        version = meta.get("e_tag") or str(meta.get("last_modified", ""))
        return data, int(meta["size"]), version or ""

    def head(self, path: str) -> ObjectRef:
        """The object at ``path`` under the prefix: its size and version (one HEAD request)."""
        import obstore
        from obstore.exceptions import NotFoundError

        key = self.key(path)
        try:
            meta = obstore.head(self.client(), key)
        except (NotFoundError, FileNotFoundError):  # obstore raises the built-in one too
            raise FileNotFoundError(f"s3://{self.bucket}/{key} is not in the bucket.") from None
        version = meta.get("e_tag") or str(meta.get("last_modified", ""))
        return ObjectRef(meta["path"], int(meta["size"]), version or "")

    def list(self, prefix: str) -> list[ObjectRef]:
        """The objects under ``prefix`` (a request per 1,000 keys), keys from the bucket's root."""
        import obstore

        out = []
        for page in obstore.list(self.client(), self.key(prefix)):
            for meta in page:
                version = meta.get("e_tag") or str(meta.get("last_modified", ""))
                out.append(ObjectRef(meta["path"], int(meta["size"]), version or ""))
        return out


def options_of(storage_options: dict[str, Any]) -> dict[str, Any]:
    """The ``S3Store`` options (obstore) from s3fs's ``storage_options``: what was passed.

    Credentials the user did not pass are left to obstore, which reads them where
    AWS clients do (the environment): never copied here, so never pickled.
    """
    kwargs = dict(storage_options.get("client_kwargs") or {})
    options: dict[str, Any] = {}
    endpoint = storage_options.get("endpoint_url") or kwargs.get("endpoint_url")
    if endpoint:
        options["endpoint"] = endpoint
    region = kwargs.get("region_name") or storage_options.get("region_name")
    if region:
        options["region"] = region
    for theirs, ours in (("key", "access_key_id"), ("secret", "secret_access_key")):
        if storage_options.get(theirs):
            options[ours] = storage_options[theirs]
    if storage_options.get("token"):
        options["token"] = storage_options["token"]
    if storage_options.get("anon"):
        options["skip_signature"] = True
    return options


def bucket_of(store: Any) -> S3Bucket | None:
    """The bucket of a zarr store over S3 (fsspec's s3fs, or obstore's S3Store), else None."""
    kind = type(store).__name__
    if kind == "FsspecStore":
        fs = store.fs
        protocol = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
        if "s3" not in protocol:
            return None
        bucket, _, prefix = store.path.partition("/")
        given = {
            "client_kwargs": getattr(fs, "client_kwargs", None),
            "endpoint_url": getattr(fs, "endpoint_url", None),
            "key": getattr(fs, "key", None),
            "secret": getattr(fs, "secret", None),
            "token": getattr(fs, "token", None),
            "anon": getattr(fs, "anon", False),
            **{k: v for k, v in (getattr(fs, "storage_options", None) or {}).items()},
        }
        return S3Bucket(bucket, prefix, options_of(given))
    if kind == "ObjectStore":
        inner = store.store
        if type(inner).__name__ != "S3Store":
            return None
        config = dict(inner.config)
        bucket = config.pop("bucket")
        return S3Bucket(bucket, inner.prefix or "", config)
    return None
