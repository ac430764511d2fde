"""Buckets (S3 APIs, Google Cloud Storage, Azure Blob) through obstore: one class a cloud.

The client of the bucket reads: obstore (Rust ``object_store``), chosen by
``benchmarks/bucket_clients.py``: with 20 ms a request it moved 98 objects of
256 KiB at 82-90 MiB/s with 16 requests in flight, against 31-44 for s3fs
(which sends a HEAD before each whole-object GET and keeps at most 10 in flight)
and 38-44 for pyarrow's S3 filesystem (a HEAD before every GET). Imported only
when a store over a bucket appears in the data.

A [`Bucket`][looptoolkit.stores._bucket.Bucket] holds what the user passed to
open the store (through the zarr store it was given, or a URL's ``storage_options``,
mapped by [`_bucket_options`][looptoolkit.stores._bucket_options]) and makes its
obstore client in the process that uses it, lazily: credentials the client found
by itself (the environment, a profile) are never pickled; a spawned or forked
worker finds them again. Its subclasses differ only in how that client is made
(``S3Store``, ``GCSStore``, ``AzureStore``) and in their address. obstore's own
retries are off: the fetcher retries.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from looptoolkit.stores._bucket_options import (
    azure_options,
    connection_string,
    gcs_options,
    s3_options,
)
from looptoolkit.stores._remote import Fatal, ForkedAfterRead, ObjectRef

__all__ = ["AzureBucket", "Bucket", "GCSBucket", "S3Bucket", "bucket_at", "bucket_of"]

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
        raise ForkedAfterRead(
            "this process was forked after its parent read from a bucket, and obstore's "
            "runtime does not survive a fork; start worker processes with the 'spawn' or "
            "'forkserver' start method (`multiprocessing.get_context('spawn')`, "
            "`DataLoader(..., multiprocessing_context='spawn')`), or read from the bucket "
            "only in the workers."
        )


def _version(meta: Any) -> str:
    """An object's version: its ETag (as a HEAD and a LIST both give it), else its date."""
    return str(meta.get("e_tag") or meta.get("last_modified") or "").strip('"')


class Bucket:
    """One bucket (and a key prefix) of an object store, and how to reach it.

    Args:
        bucket: the bucket's (or Azure container's) name.
        prefix: keys under this prefix (no leading or trailing slash).
        options: obstore store options the user gave (an endpoint, keys where the
            user passed them); the rest come from where the cloud's clients look.
    """

    scheme = ""
    extra = ""  # looptoolkit's extra that installs the client

    def __init__(self, bucket: str, prefix: str, options: dict[str, Any]) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.options = options
        self._client: tuple[int, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def endpoint(self) -> str:
        """The endpoint the client reaches (for messages), or "" for the cloud's own."""
        return ""

    @property
    def where(self) -> str:
        """The bucket's address for messages and cache names: endpoint and bucket, no keys."""
        endpoint = self.endpoint()
        return f"{self.scheme}://{self.bucket}/" + (f" (at {endpoint}) " if endpoint else "")

    def url(self, key: str) -> str:
        """The URL of object ``key`` (a key from the bucket's root), for messages."""
        return f"{self.scheme}://{self.bucket}/{key}"

    def key(self, path: str) -> str:
        """The object key of ``path`` under the prefix."""
        return f"{self.prefix}/{path}" if self.prefix else path

    def client(self) -> Any:
        """This process's obstore store for the bucket (made after a fork anew)."""
        if self._client is not None and self._client[0] == os.getpid():
            return self._client[1]
        _check_fork()
        try:
            import obstore.store
        except ImportError:
            raise ImportError(
                f"reading a bucket needs obstore; install it with "
                f"`pip install 'looptoolkit[{self.extra}]'`."
            ) from None
        store = self._make(obstore.store)
        self._client = (os.getpid(), store)
        return store

    def _make(self, stores: Any) -> Any:
        """A new obstore store (from the module ``obstore.store``)."""
        raise NotImplementedError

    def _client_options(self, endpoint: str) -> dict[str, Any]:
        options: dict[str, Any] = {"timeout": datetime.timedelta(seconds=600)}
        if endpoint.startswith("http://"):
            options["allow_http"] = True
        return options

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
        return data, int(result.meta["size"]), _version(result.meta)

    def head(self, path: str) -> ObjectRef:
        """The object at ``path`` under the prefix: its size and version (one HEAD request)."""
        import obstore
        from obstore.exceptions import NotFoundError

        key = self.key(path)
        try:
            meta = obstore.head(self.client(), key)
        except (NotFoundError, FileNotFoundError):  # obstore raises the built-in one too
            raise FileNotFoundError(f"{self.url(key)} is not in the bucket.") from None
        return ObjectRef(meta["path"], int(meta["size"]), _version(meta))

    def list(self, prefix: str) -> list[ObjectRef]:
        """The objects under ``prefix`` (a request per 1,000 keys), keys from the bucket's root."""
        import obstore

        out = []
        for page in obstore.list(self.client(), self.key(prefix)):
            for meta in page:
                out.append(ObjectRef(meta["path"], int(meta["size"]), _version(meta)))
        return out


class S3Bucket(Bucket):
    """A bucket of an S3 API (AWS, MinIO, Ceph, any S3 endpoint): obstore's ``S3Store``."""

    scheme, extra = "s3", "s3"

    def endpoint(self) -> str:
        return self.options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL", "")

    def _make(self, stores: Any) -> Any:
        return stores.S3Store(
            self.bucket,
            client_options=self._client_options(self.endpoint()),
            retry_config={"max_retries": 0},
            **self.options,
        )


class GCSBucket(Bucket):
    """A Google Cloud Storage bucket: obstore's ``GCSStore``.

    Credentials the user did not pass are found by obstore (``GOOGLE_APPLICATION_CREDENTIALS``,
    ``GOOGLE_SERVICE_ACCOUNT_KEY``, the metadata server). The Google clients' emulator
    variable ``STORAGE_EMULATOR_HOST`` is read here, as they read it: the base URL, and
    requests unsigned (an emulator takes none).
    """

    scheme, extra = "gs", "gcs"

    def _emulator(self) -> str:
        if self.options.get("base_url") or os.environ.get("GOOGLE_BASE_URL"):
            return ""
        return os.environ.get("STORAGE_EMULATOR_HOST", "")

    def endpoint(self) -> str:
        given = self.options.get("base_url") or os.environ.get("GOOGLE_BASE_URL", "")
        return given or self._emulator()

    def _make(self, stores: Any) -> Any:
        options = dict(self.options)
        emulator = self._emulator()
        if emulator:
            options.update(base_url=emulator, skip_signature=True)
        return stores.GCSStore(
            self.bucket,
            client_options=self._client_options(self.endpoint()),
            retry_config={"max_retries": 0},
            **options,
        )


class AzureBucket(Bucket):
    """An Azure Blob Storage container: obstore's ``AzureStore``.

    Credentials the user did not pass are found by obstore (``AZURE_STORAGE_ACCOUNT_NAME``,
    ``AZURE_STORAGE_ACCOUNT_KEY``, a service principal, managed identity). The Azure
    clients' ``AZURE_STORAGE_CONNECTION_STRING`` is read here, as they read it, when the
    user named no account: in the process that reads, never kept in the options.
    """

    scheme, extra = "az", "azure"

    def _found(self) -> dict[str, Any]:
        """The options of the environment's connection string, if the user named no account."""
        given = self.options
        if given.get("account_name") or given.get("endpoint") or given.get("use_emulator"):
            return {}
        text = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
        return connection_string(text) if text else {}

    def endpoint(self) -> str:
        options = {**self._found(), **self.options}
        if options.get("endpoint"):
            return str(options["endpoint"])
        if options.get("use_emulator"):
            return os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000")
        account = options.get("account_name") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        return f"https://{account}.blob.core.windows.net" if account else ""

    def _make(self, stores: Any) -> Any:
        return stores.AzureStore(
            self.bucket,
            client_options=self._client_options(self.endpoint()),
            retry_config={"max_retries": 0},
            **{**self._found(), **self.options},
        )


# URL scheme -> the bucket class and the mapping of its fsspec client's storage options.
_SCHEMES: dict[str, tuple[type[Bucket], Any]] = {
    "s3": (S3Bucket, s3_options),
    "s3a": (S3Bucket, s3_options),
    "gs": (GCSBucket, gcs_options),
    "gcs": (GCSBucket, gcs_options),
    "az": (AzureBucket, azure_options),
    "abfs": (AzureBucket, azure_options),
    "abfss": (AzureBucket, azure_options),
}
# obstore's store classes -> the bucket class and its bucket's key in the store's config.
_STORES = {
    "S3Store": (S3Bucket, "bucket"),
    "GCSStore": (GCSBucket, "bucket"),
    "AzureStore": (AzureBucket, "container_name"),
}


def bucket_at(url: str, storage_options: dict[str, Any] | None, what: str) -> tuple[Bucket, str]:
    """The bucket of ``url`` (``s3://``, ``gs://``, ``az://``) and the key there.

    Args:
        url: ``scheme://bucket/key``; Azure's ``az://container@account.../key`` too.
        storage_options: the endpoint and keys as the scheme's fsspec client takes them.
        what: what the URL should name, for the message refusing it ("a Parquet file").

    Raises:
        ValueError: not a URL of one of those schemes.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in _SCHEMES:
        raise ValueError(f"`obj` must be an s3://, gs:// or az:// URL of {what}, got {url!r}.")
    cls, mapping = _SCHEMES[scheme]
    name, _, key = rest.partition("/")
    given = dict(storage_options or {})
    if cls is AzureBucket and "@" in name:  # container@account.blob.core.windows.net
        name, _, host = name.partition("@")
        given.setdefault("account_name", host.partition(".")[0])
    return cls(name, "", mapping(given)), key


def _fsspec_given(fs: Any, scheme: str) -> dict[str, Any]:
    """What the user passed to the fsspec filesystem ``fs`` (its storage options)."""
    given = dict(getattr(fs, "storage_options", None) or {})
    if scheme == "s3":  # s3fs also keeps its arguments as attributes
        attributes = ("client_kwargs", "endpoint_url", "key", "secret", "token", "anon")
        given = {**{name: getattr(fs, name, None) for name in attributes}, **given}
    return given


def bucket_of(store: Any) -> Bucket | None:
    """The bucket of a zarr store over a bucket (fsspec, or obstore's stores), else None.

    fsspec's s3fs (``s3://``), gcsfs (``gs://``) and adlfs (``az://``, ``abfs://``), and
    zarr's ``ObjectStore`` over obstore's ``S3Store``, ``GCSStore`` or ``AzureStore``.
    """
    kind = type(store).__name__
    if kind == "FsspecStore":
        fs = store.fs
        protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
        scheme = next((p for p in protocols if p in _SCHEMES), None)
        if scheme is None:
            return None
        cls, mapping = _SCHEMES[scheme]
        bucket, _, prefix = store.path.partition("/")
        return cls(bucket, prefix, mapping(_fsspec_given(fs, cls.scheme)))
    if kind == "ObjectStore":
        inner = store.store
        found = _STORES.get(type(inner).__name__)
        if found is None:
            return None
        cls, name = found
        config = dict(inner.config)
        bucket = config.pop(name)
        return cls(bucket, inner.prefix or "", config)
    return None
