"""Backends: one module per framework behind one small protocol, found lazily.

The package is three parts, each its own module, re-exported here:

- the protocol (`_protocol`): [`Backend`][looptoolkit.adapters.Backend], its required
  surface [`Required`][looptoolkit.adapters.Required] and its optional capabilities
  ([`Staging`][looptoolkit.adapters.Staging], [`Sharding`][looptoolkit.adapters.Sharding],
  [`Containers`][looptoolkit.adapters.Containers], [`Native`][looptoolkit.adapters.Native]),
  answered by default in [`BackendBase`][looptoolkit.adapters.BackendBase];
- the registry (`_registry`): which backend owns a leaf, a backend by name,
  questions asked of every loaded backend, and
  [`register_backend`][looptoolkit.adapters.register_backend];
- the host gather kernels (`_host`): batch-sized gathers of host rows, alone or a
  chunk of batches at a time, shared by the backends that gather on the host.

Backend modules (`looptoolkit.adapters.torch`, ...) are imported on first use
(module ``__getattr__``), so ``import looptoolkit.adapters`` is as cheap as
``import numpy``.
"""

from __future__ import annotations

import importlib
from typing import Any

from looptoolkit.adapters._host import (
    chunked as chunked,
)
from looptoolkit.adapters._host import (
    gather_rows as gather_rows,
)
from looptoolkit.adapters._host import (
    host_chunks as host_chunks,
)
from looptoolkit.adapters._host import (
    row_gather as row_gather,
)
from looptoolkit.adapters._host import (
    split_chunks as split_chunks,
)
from looptoolkit.adapters._host import (
    zip_gathers as zip_gathers,
)
from looptoolkit.adapters._protocol import (
    Backend as Backend,
)
from looptoolkit.adapters._protocol import (
    BackendBase as BackendBase,
)
from looptoolkit.adapters._protocol import (
    Containers as Containers,
)
from looptoolkit.adapters._protocol import (
    Native as Native,
)
from looptoolkit.adapters._protocol import (
    Required as Required,
)
from looptoolkit.adapters._protocol import (
    Sharding as Sharding,
)
from looptoolkit.adapters._protocol import (
    Stager as Stager,
)
from looptoolkit.adapters._protocol import (
    Staging as Staging,
)
from looptoolkit.adapters._registry import (
    BACKENDS as BACKENDS,
)
from looptoolkit.adapters._registry import (
    DEVICE_HOMES as DEVICE_HOMES,
)
from looptoolkit.adapters._registry import (
    backend_of as backend_of,
)
from looptoolkit.adapters._registry import (
    batch_shards as batch_shards,
)
from looptoolkit.adapters._registry import (
    container_node as container_node,
)
from looptoolkit.adapters._registry import (
    get_backend as get_backend,
)
from looptoolkit.adapters._registry import (
    is_batched_node as is_batched_node,
)
from looptoolkit.adapters._registry import (
    loaded_backends as loaded_backends,
)
from looptoolkit.adapters._registry import (
    move_container_node as move_container_node,
)
from looptoolkit.adapters._registry import (
    native_target as native_target,
)
from looptoolkit.adapters._registry import (
    object_backend as object_backend,
)
from looptoolkit.adapters._registry import (
    process_group as process_group,
)
from looptoolkit.adapters._registry import (
    register_backend as register_backend,
)

__all__ = [
    "BACKENDS",
    "DEVICE_HOMES",
    "Backend",
    "BackendBase",
    "Containers",
    "Native",
    "Required",
    "Sharding",
    "Stager",
    "Staging",
    "backend_of",
    "batch_shards",
    "chunked",
    "container_node",
    "gather_rows",
    "get_backend",
    "host_chunks",
    "is_batched_node",
    "loaded_backends",
    "move_container_node",
    "native_target",
    "object_backend",
    "process_group",
    "register_backend",
    "row_gather",
    "split_chunks",
    "zip_gathers",
]


def __getattr__(name: str) -> Any:
    # `looptoolkit.adapters.torch` etc. resolve lazily, as optree.integrations does.
    if name in BACKENDS:
        return importlib.import_module(BACKENDS[name][0])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *BACKENDS])
