"""Sharded JAX batches: one process over a device mesh, or many processes.

One process, 8 devices (fake CPU devices here; real GPUs/TPUs need no flag)::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python docs/examples/distributed_jax.py

Two processes on one machine, 4 CPU devices each (on a cluster: one process per
host, the coordinator's address, and no ``XLA_FLAGS``)::

    export XLA_FLAGS=--xla_force_host_platform_device_count=4
    python docs/examples/distributed_jax.py --processes 2 --process-id 0 &
    python docs/examples/distributed_jax.py --processes 2 --process-id 1

With one process, ``Loader(..., device=sharding)`` yields global batches already
split along the batch axis. With several, each process loads only its share of
every global batch (positions ``p, p + P, ...`` of it for process ``p`` of ``P``,
as ``DistributedSampler`` interleaves) and ``looptoolkit.distributed.global_batch``
assembles the shares, one block per process, into global arrays; no process
reads another's rows.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from looptoolkit import Loader
from looptoolkit.distributed import global_batch, process_positions, process_slice

N, FEATURES, GLOBAL_BATCH = 1024, 16, 64


def make_data() -> dict[str, np.ndarray]:
    """A synthetic regression set (NumPy, on the host)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, FEATURES), dtype=np.float32)
    return {"x": x, "y": x @ np.linspace(-1, 1, FEATURES, dtype=np.float32) + 0.1}


def main() -> None:
    """Train one epoch on sharded global batches; print what this process loaded."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--coordinator", default="127.0.0.1:12355")
    args = parser.parse_args()

    if args.processes > 1:
        if jax.config.jax_platforms in (None, "", "cpu"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, args.processes, args.process_id)

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())
    batch_shardings = {"x": sharding, "y": sharding}

    @jax.jit
    def loss_fn(w: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
        return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    # in_shardings matches the batches' layout: the step takes them as they are.
    step = jax.jit(
        lambda w, batch: w - 0.1 * jax.grad(loss_fn)(w, batch),
        in_shardings=(replicated, batch_shardings),
        out_shardings=replicated,
    )
    w = jax.device_put(jnp.zeros(FEATURES), replicated)

    if jax.process_count() == 1:
        # The Loader puts each global batch straight onto the mesh.
        batches: Any = Loader(make_data(), GLOBAL_BATCH, shuffle=True, seed=0, device=sharding)
    else:
        # Each process loads positions process_positions(G) of every global batch ...
        local = Loader(
            make_data(),
            GLOBAL_BATCH // jax.process_count(),
            shuffle=True,
            seed=0,
            rank=jax.process_index(),
            world_size=jax.process_count(),
        )
        # ... which become rows process_slice(G) of the global arrays, none crossing processes.
        batches = (global_batch(b, sharding) for b in local)

    for batch in batches:  # one epoch
        w = step(w, batch)
    positions, rows = process_positions(GLOBAL_BATCH), process_slice(GLOBAL_BATCH)
    loss = loss_fn(w, jax.device_put(make_data(), replicated))
    print(
        f"process {jax.process_index()}/{jax.process_count()}: loaded positions "
        f"{positions.start}::{positions.step} of each global batch of {GLOBAL_BATCH} "
        f"(rows [{rows.start}, {rows.stop}) of the global arrays) over "
        f"{jax.device_count()} devices; loss {float(loss):.4f}"
    )
    if args.processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
