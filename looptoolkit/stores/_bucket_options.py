"""What the user passed to open a bucket, as obstore's store options: one mapping a client.

Below [`_bucket`][looptoolkit.stores._bucket], which makes its obstore store from these
options. fsspec's clients (s3fs, gcsfs, adlfs) take ``storage_options`` of their own
names; each function here maps the ones the user passed to the options of obstore's
``S3Store``, ``GCSStore`` or ``AzureStore``, and nothing else: credentials the user did
not pass are left to obstore, which reads them where the cloud's clients do (the
environment, a profile, a metadata server) in the process that reads, so they are
never copied here, and never pickled.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["azure_options", "connection_string", "gcs_options", "s3_options"]

# gcsfs's `token` values that name a way to find credentials (not credentials): obstore
# finds them itself (application default credentials, the metadata server).
_GCSFS_METHODS = {"google_default", "cache", "cloud", "browser"}


def s3_options(storage_options: dict[str, Any]) -> dict[str, Any]:
    """The ``S3Store`` options (obstore) from s3fs's ``storage_options``: what was passed."""
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


def gcs_options(storage_options: dict[str, Any]) -> dict[str, Any]:
    """The ``GCSStore`` options (obstore) from gcsfs's ``storage_options``: what was passed.

    ``endpoint_url`` (an emulator's, say) is the base URL; ``token`` is ``"anon"`` (no
    signature), a service account's key as a dict, or the path of a credentials file.
    A token that names a method (``"google_default"``, ``"cloud"``) or is a credentials
    object is left to obstore, which finds the application default credentials itself.
    gcsfs's ``project`` is not needed to read objects.
    """
    options: dict[str, Any] = {}
    if storage_options.get("endpoint_url"):
        options["base_url"] = storage_options["endpoint_url"]
    token = storage_options.get("token")
    if token == "anon" or storage_options.get("anon"):
        options["skip_signature"] = True
    elif isinstance(token, dict):
        options["service_account_key"] = json.dumps(token)
    elif isinstance(token, str | os.PathLike) and str(token) not in _GCSFS_METHODS:
        options["application_credentials"] = os.fspath(token)
    return options


def connection_string(text: str) -> dict[str, Any]:
    """The ``AzureStore`` options of an Azure Storage connection string (its blob endpoint).

    ``UseDevelopmentStorage=true`` is the emulator (Azurite) at its usual address.
    """
    parts = dict(
        (name.strip(), value.strip())
        for name, _, value in (item.partition("=") for item in text.split(";"))
        if name.strip()
    )
    if parts.get("UseDevelopmentStorage", "").lower() == "true":
        return {"use_emulator": True}
    options: dict[str, Any] = {}
    for theirs, ours in (
        ("AccountName", "account_name"),
        ("AccountKey", "account_key"),
        ("SharedAccessSignature", "sas_key"),
    ):
        if parts.get(theirs):
            options[ours] = parts[theirs]
    if parts.get("BlobEndpoint"):
        options["endpoint"] = parts["BlobEndpoint"]
    elif parts.get("EndpointSuffix") and parts.get("AccountName"):
        scheme = parts.get("DefaultEndpointsProtocol", "https")
        options["endpoint"] = f"{scheme}://{parts['AccountName']}.blob.{parts['EndpointSuffix']}"
    return options


def azure_options(storage_options: dict[str, Any]) -> dict[str, Any]:
    """The ``AzureStore`` options (obstore) from adlfs's ``storage_options``: what was passed.

    A ``connection_string`` gives the account, its key or SAS token and the blob endpoint
    (an emulator's, say); ``account_name``, ``account_key``, ``sas_token``, a service
    principal (``client_id``, ``client_secret``, ``tenant_id``), ``account_host`` and
    ``anon`` map one to one. A ``credential`` object is left to obstore, which finds
    credentials where Azure's clients do.
    """
    options: dict[str, Any] = {}
    if storage_options.get("connection_string"):
        options.update(connection_string(storage_options["connection_string"]))
    for name in ("account_name", "account_key", "client_id", "client_secret", "tenant_id"):
        if storage_options.get(name):
            options[name] = storage_options[name]
    if storage_options.get("sas_token"):
        options["sas_key"] = str(storage_options["sas_token"]).lstrip("?")
    if storage_options.get("account_host"):
        options["endpoint"] = f"https://{storage_options['account_host']}"
    if storage_options.get("anon"):
        options["skip_signature"] = True
    return options
