"""Keras ``model.fit`` on the routes into looptoolkit, under the backend ``KERAS_BACKEND`` names.

Run by ``test_keras.py`` in a subprocess per backend (Keras fixes its backend at
import): ``python _keras_fit.py routes`` fits a small MLP through every route
and prints, as JSON, the row ids each fit epoch trained on; ``python
_keras_fit.py exec < code.py`` runs the code it reads. Both report the
warnings raised meanwhile.

The first layer of the model records the last input column (the row id) of
every training batch (the model runs eagerly, so its inputs are concrete) and
drops it. The top level imports no framework: DataLoader workers started by
forkserver import this file again.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import numpy as np

N, B, SEED, FEATURES = 1000, 100, 7, 16
EPOCHS = 3


def data() -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: 16 features and the row id as the last column of ``x``; int64 labels."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, FEATURES + 1)).astype(np.float32)
    x[:, -1] = np.arange(N)
    y = (x[:, 0] > 0).astype(np.int64)
    return x, y


def _recording_model(keras: Any, seen: dict[int, list[np.ndarray]], epoch: list[int]) -> Any:
    class RowIds(keras.layers.Layer):
        """Records the id column of each training batch, returns the features."""

        def call(self, inputs: Any, training: Any = None) -> Any:
            if training and not isinstance(inputs, keras.KerasTensor):
                try:
                    ids = keras.ops.convert_to_numpy(inputs)[:, -1]
                except Exception:  # a traced input: no values to record
                    ids = None
                if ids is not None:
                    seen.setdefault(epoch[0], []).append(ids.astype(np.int64))
            return inputs[:, :-1]

        def compute_output_shape(self, shape: Any) -> Any:
            return (*shape[:-1], shape[-1] - 1)

    model = keras.Sequential(
        [
            keras.Input((FEATURES + 1,)),
            RowIds(),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        run_eagerly=True,
    )
    return model


def fit(source: Any, initial_epoch: int = 0) -> dict[str, list[int]]:
    """Row ids of each epoch of ``model.fit(source, epochs=3, initial_epoch=...)``."""
    import time

    import keras

    t0 = time.perf_counter()
    seen: dict[int, list[np.ndarray]] = {}
    epoch = [-1]  # batches trained outside an epoch would be recorded under -1

    class Epoch(keras.callbacks.Callback):
        def on_epoch_begin(self, e: int, logs: Any = None) -> None:
            epoch[0] = e

    model = _recording_model(keras, seen, epoch)
    # shuffle=False: the routes shuffle; Keras warns about shuffle=True with them.
    model.fit(source, epochs=EPOCHS, initial_epoch=initial_epoch, shuffle=False, verbose=0,
              callbacks=[Epoch()])  # fmt: skip
    print("fit", time.perf_counter() - t0, file=sys.stderr)
    return {str(e): np.concatenate(rows).tolist() for e, rows in sorted(seen.items())}


def routes(backend: str) -> dict[str, Any]:
    """Each route's fit epochs (``{"epochs": {epoch: ids}, "next": the source's next epoch}``)."""
    from looptoolkit import Loader
    from looptoolkit.tf_data import loader_dataset
    from looptoolkit.torch_data import make_dataloader

    x, y = data()
    results: dict[str, Any] = {}

    def loader() -> Any:
        return Loader((x, y), B, seed=SEED)

    one = loader()
    results["dataset"] = {"epochs": fit(loader_dataset(one)), "next": one.state_dict()["epoch"]}

    one = loader()
    one.set_epoch(1)
    results["dataset-set_epoch-1"] = {
        "epochs": fit(loader_dataset(one), initial_epoch=1),
        "next": one.state_dict()["epoch"],
    }

    one = loader()
    results["dataset-start_epoch-1"] = {
        "epochs": fit(loader_dataset(one, start_epoch=1), initial_epoch=1),
        "next": one.state_dict()["epoch"],
    }

    # JAX warns when a process that uses it forks: its workers start by forkserver.
    context = {"multiprocessing_context": "forkserver"} if backend == "jax" else {}
    if backend == "jax":
        import multiprocessing

        # The forkserver imports torch once; each worker forked from it starts at once.
        multiprocessing.set_forkserver_preload(["looptoolkit.torch_data"])
    for workers in (0, 2):
        extra = context if workers else {}
        dl = make_dataloader((x, y), B, seed=SEED, num_workers=workers, **extra)
        results[f"dataloader-w{workers}"] = {"epochs": fit(dl), "next": dl.batch_sampler.epoch}
        dl = make_dataloader((x, y), B, seed=SEED, num_workers=workers, **extra)
        dl.set_epoch(1)
        results[f"dataloader-w{workers}-set_epoch-1"] = {
            "epochs": fit(dl, initial_epoch=1),
            "next": dl.batch_sampler.epoch,
        }
    return results


def main() -> None:
    """``routes``: fit through each route; ``exec``: run the code on stdin. Prints JSON."""
    import os

    mode = sys.argv[1]
    code = sys.stdin.read() if mode == "exec" else ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "routes":
            result: dict[str, Any] = {"routes": routes(os.environ["KERAS_BACKEND"])}
        else:
            exec(compile(code, "example", "exec"), {"__name__": "example"})
            result = {}
    import keras

    result["backend"] = keras.backend.backend()
    result["warnings"] = [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught
    ]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
