"""Host arrays as arrays of a framework, on the host: the ragged layouts' last step.

The variable-length layouts ([`looptoolkit.ragged`][looptoolkit.ragged]) build each batch with
NumPy, once per leaf; the batch then takes the framework of the column it came from, without a
copy where the framework allows (``torch.from_numpy``). Moving it to a device is
[`to_device`][looptoolkit.to_device]'s business, not this module's.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["from_host"]


def from_host(backend: str, values: np.ndarray, like: Any) -> Any:
    """``values`` as an array of ``backend`` (``"numpy"``, ``"torch"``, ``"jax"``, ``"tf"``).

    ``like`` is an array of that framework (its module is already imported).
    """
    if backend == "numpy":
        return values
    if backend == "torch":
        torch = sys.modules["torch"]
        return torch.from_numpy(np.ascontiguousarray(values))
    if backend == "jax":
        jnp = sys.modules["jax.numpy"]
        return jnp.asarray(values)
    if backend == "tf":
        tf = sys.modules["tensorflow"]
        return tf.convert_to_tensor(values)
    raise ValueError(f"no host conversion for backend {backend!r}.")
