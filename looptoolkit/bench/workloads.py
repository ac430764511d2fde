"""The workloads of ``looptoolkit compare``: NumPy data with a row-id leaf, per backend.

A workload is a NumPy pytree whose id leaf holds every row's own index, so any
batch can be checked (right rows, each once); gathering it costs what gathering
labels costs. [`backend_data`][looptoolkit.bench.workloads.backend_data] turns it into a backend's
arrays, and a [`Context`][looptoolkit.bench.workloads.Context] is what a variant's factory gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from looptoolkit import tree as _tree
from looptoolkit._rows import Rows
from looptoolkit.device import parse_device
from looptoolkit.order import batch_count

__all__ = [
    "WORKLOADS",
    "Context",
    "Workload",
    "backend_data",
    "host_array",
    "jax_device",
    "make_workload",
    "tf_device",
    "torch_device",
]

# name -> (description, rows, rows in --quick, batch size, batch size in --quick)
WORKLOADS: dict[str, tuple[str, int, int, int, int]] = {
    "index": ("arange(N): sample ids", 300_000, 3_000, 300, 30),
    "tabular": ('{"x": float32 (N, 64), "y": int64 row id}', 300_000, 3_000, 300, 30),
    "images": ('{"image": uint8 (N, 3, 64, 64), "label": int64 row id}', 50_000, 512, 256, 32),
}


@dataclass
class Workload:
    """The data of one workload, on the host.

    Attributes:
        name: ``"index"``, ``"tabular"`` or ``"images"``.
        description: what the data is.
        data: the NumPy pytree.
        batch_size: rows per batch.
        id_path: key path of the row-id leaf (``"batch"`` when the data is that leaf).
    """

    name: str
    description: str
    data: Any
    batch_size: int
    id_path: str

    @property
    def n(self) -> int:
        """Rows."""
        return Rows(self.data).n

    @property
    def num_batches(self) -> int:
        """Batches per epoch (last partial batch counted)."""
        return batch_count(self.n, self.batch_size)

    @property
    def nbytes(self) -> int:
        """Bytes of data."""
        leaves, _ = _tree.flatten(self.data)
        return sum(int(leaf.nbytes) for leaf in leaves)


def make_workload(name: str, *, quick: bool = False, seed: int = 0) -> Workload:
    """Build the ``name`` workload (its full size, or a tiny one with ``quick``).

    Row ids stand in for labels so that every batch can be checked; gathering
    them costs what gathering labels costs.
    """
    description, rows, quick_rows, batch, quick_batch = WORKLOADS[name]
    n, batch_size = (quick_rows, quick_batch) if quick else (rows, batch)
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    data: Any
    if name == "index":
        data, id_path = ids, "batch"
    elif name == "tabular":
        data = {"x": rng.standard_normal((n, 64), dtype=np.float32), "y": ids}
        id_path = "batch['y']"
    elif name == "images":
        data = {"image": rng.integers(0, 256, (n, 3, 64, 64), dtype=np.uint8), "label": ids}
        id_path = "batch['label']"
    else:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}.")
    description = f"{description}, N = {n:_}, batch {batch_size}"
    return Workload(name, description, data, batch_size, id_path)


def backend_data(host: Any, backend: str, device: str) -> Any:
    """``host`` (a NumPy pytree) as arrays of ``backend``.

    torch: zero-copy CPU tensors. jax: arrays on the device (the accelerator
    when ``device`` is not ``"cpu"``; int64 becomes int32 without x64). tf:
    tensors. The host data of host-gather variants stays NumPy.
    """
    if backend == "numpy":
        return host
    leaves, spec = _tree.flatten(host)
    if backend == "torch":
        import torch

        return _tree.unflatten(spec, [torch.from_numpy(leaf) for leaf in leaves])
    if backend == "jax":
        import jax

        return _tree.unflatten(spec, jax.device_put(leaves, jax_device(device)))
    if backend == "tf":
        import tensorflow as tf

        return _tree.unflatten(spec, [tf.convert_to_tensor(leaf) for leaf in leaves])
    raise ValueError(f"unknown backend {backend!r}.")


def host_array(x: Any) -> np.ndarray:
    """A NumPy copy (or view) of an array of any framework, on any device (host data back).

    Examples:
        >>> host_array([1, 2]).tolist()
        [1, 2]
    """
    if type(x).__module__.startswith("torch"):
        return np.asarray(x.detach().cpu().numpy())
    return np.asarray(x)


def jax_device(device: str) -> Any:
    """The JAX device for a compare ``--device`` (``"cuda:1"``: JAX's GPU 1; ``"cuda"``: GPU 0)."""
    from looptoolkit.bench.native_jax import placement

    return placement(device)


def tf_device(device: str) -> str:
    """The tf device name for a compare ``--device``: ``"/GPU:1"`` for ``"cuda:1"``, else CPU 0.

    Examples:
        >>> tf_device("cuda:1"), tf_device("cuda"), tf_device("cpu")
        ('/GPU:1', '/GPU:0', '/CPU:0')
    """
    target = parse_device(device)
    if target.platform == "cpu":
        return "/CPU:0"
    return f"/GPU:{target.index or 0}"


def torch_device(device: str) -> Any:
    """The torch device for a compare ``--device``."""
    import torch

    return torch.device(device)


@dataclass
class Context:
    """What a variant's factory gets.

    Attributes:
        workload: the workload (host data, batch size).
        data: the workload's data as arrays of the variant's backend.
        device: the compare device (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        seed: the seed every order is drawn from.
    """

    workload: Workload
    data: Any
    device: str
    seed: int = 0
    _orders: dict[str, Any] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        """Rows per batch."""
        return self.workload.batch_size

    @property
    def accelerated(self) -> bool:
        """Whether the compare device is an accelerator."""
        return self.device != "cpu"

    def order(self, shuffle: str) -> Any:
        """The Loader's ``Order`` for this workload and seed (``"full"`` or ``"grouped"``)."""
        order = self._orders.get(shuffle)
        if order is None:
            from looptoolkit.order import Order

            order = Order(self.workload.n, self.batch_size, shuffle=shuffle, seed=self.seed)
            self._orders[shuffle] = order
        return order
