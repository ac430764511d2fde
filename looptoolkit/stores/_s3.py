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
        except NotFoundError:
            raise Fatal("the object is not there (it was listed: has it been removed?)") from None
        except (PermissionDeniedError, UnauthenticatedError) as error:
            raise Fatal(f"access refused ({type(error).__name__})") from None

    def list(self, prefix: str) -> list[ObjectRef]:
        """The objects under ``prefix`` (a request per 1,000 keys), keys from the bucket's root."""
        import obstore

        out = []
        for page in obstore.list(self.client(), self.key(prefix)):
            for meta in page:
                version = meta.get("e_tag") or str(meta.get("last_modified", ""))
                out.append(ObjectRef(meta["path"], int(meta["size"]), version or ""))
        return out


def bucket_of(store: Any) -> S3Bucket | None:
    """The bucket of a zarr store over S3 (fsspec's s3fs, or obstore's S3Store), else None."""
    kind = type(store).__name__
    if kind == "FsspecStore":
        fs = store.fs
        protocol = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
        if "s3" not in protocol:
            return None
        bucket, _, prefix = store.path.partition("/")
        kwargs = dict(getattr(fs, "client_kwargs", None) or {})
        options: dict[str, Any] = {}
        endpoint = getattr(fs, "endpoint_url", None) or kwargs.get("endpoint_url")
        if endpoint:
            options["endpoint"] = endpoint
        region = kwargs.get("region_name") or (getattr(fs, "storage_options", {}) or {}).get(
            "region_name"
        )
        if region:
            options["region"] = region
        # What the user passed to s3fs (never what a client found by itself).
        if getattr(fs, "key", None):
            options["access_key_id"] = fs.key
        if getattr(fs, "secret", None):
            options["secret_access_key"] = fs.secret
        if getattr(fs, "token", None):
            options["token"] = fs.token
        if getattr(fs, "anon", False):
            options["skip_signature"] = True
        return S3Bucket(bucket, prefix, options)
    if kind == "ObjectStore":
        inner = store.store
        if type(inner).__name__ != "S3Store":
            return None
        config = dict(inner.config)
        bucket = config.pop("bucket")
        return S3Bucket(bucket, inner.prefix or "", config)
    return None


def split_url(url: str) -> tuple[str, str]:
    """The bucket and the key of an ``s3://bucket/key`` address.

    Raises:
        ValueError: ``url`` is not an ``s3://`` address with a bucket.
    """
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    if scheme != "s3" or not bucket:
        raise ValueError(f"`url` must be an s3://bucket/key address, got {url!r}.")
    return bucket, key.strip("/")


def bucket_of_options(bucket: str, storage_options: dict[str, Any] | None) -> S3Bucket:
    """The bucket ``bucket`` reached as fsspec's ``storage_options`` (s3fs's arguments) say.

    The same arguments as ``zarr.open_array(url, storage_options=...)`` or
    ``s3fs.S3FileSystem(**storage_options)`` take: ``key``, ``secret``, ``token``,
    ``anon``, ``endpoint_url`` and ``client_kwargs`` (``endpoint_url``, ``region_name``).
    What is not given comes from where obstore looks (``AWS_*`` variables).

    Raises:
        TypeError: ``storage_options`` is not a dict.
        ValueError: an argument that is not one of these (named; never its value).
    """
    given = dict(storage_options or {})
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"`storage_options` must be a dict, got {type(storage_options).__name__}.")
    kwargs = dict(given.pop("client_kwargs", None) or {})
    options: dict[str, Any] = {}
    endpoint = given.pop("endpoint_url", None) or kwargs.pop("endpoint_url", None)
    if endpoint:
        options["endpoint"] = endpoint
    region = kwargs.pop("region_name", None) or given.pop("region_name", None)
    if region:
        options["region"] = region
    for name, option in (
        ("key", "access_key_id"),
        ("secret", "secret_access_key"),
        ("token", "token"),
    ):
        value = given.pop(name, None)
        if value:
            options[option] = value
    if given.pop("anon", False):
        options["skip_signature"] = True
    unknown = sorted(given) + sorted(f"client_kwargs[{k!r}]" for k in kwargs)
    if unknown:
        raise ValueError(
            "`storage_options` takes key, secret, token, anon, endpoint_url, region_name and "
            f"client_kwargs (endpoint_url, region_name); got {', '.join(unknown)}."
        )
    return S3Bucket(bucket, "", options)


def head(bucket: S3Bucket, key: str) -> ObjectRef | None:
    """Object ``key`` of ``bucket`` as one HEAD gives it (key from the bucket's root), or None."""
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        meta = obstore.head(bucket.client(), bucket.key(key))
    except (NotFoundError, FileNotFoundError):
        return None
    version = meta.get("e_tag") or str(meta.get("last_modified", ""))
    return ObjectRef(meta["path"], int(meta["size"]), version or "")
