"""A random table written as chunked stores (HDF5 with a codec, zarr), for the store read tests."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import zarr


def random_table(rows: int, dim: int) -> dict[str, np.ndarray]:
    """Float32 features ``x`` and a permutation ``y`` of the rows (int64)."""
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((rows, dim)).astype(np.float32),
        "y": rng.permutation(rows).astype(np.int64),
    }


def chunked_stores(
    root: Path, arrays: dict[str, np.ndarray], chunk: int, codecs: tuple[str, ...]
) -> dict[str, dict]:
    """``arrays`` in chunks of ``chunk`` rows: ``hdf5-<codec>`` for each codec, and ``zarr``.

    The HDF5 files are open read-only; the values are dicts of their datasets (arrays).
    """
    out: dict[str, dict] = {}
    for codec in codecs:
        with h5py.File(root / f"{codec}.h5", "w") as f:
            for name, a in arrays.items():
                f.create_dataset(name, data=a, chunks=(chunk, *a.shape[1:]), compression=codec)
        f = h5py.File(root / f"{codec}.h5", "r")
        out[f"hdf5-{codec}"] = {name: f[name] for name in arrays}
    group = zarr.open_group(str(root / "z.zarr"), mode="w")
    for name, a in arrays.items():
        group.create_array(name, shape=a.shape, chunks=(chunk, *a.shape[1:]), dtype=a.dtype)
        group[name][:] = a
    out["zarr"] = {name: group[name] for name in arrays}
    return out
