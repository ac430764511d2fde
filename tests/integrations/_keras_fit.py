"""Keras ``model.fit`` on the routes into looptoolkit, under the backend ``KERAS_BACKEND`` names.

Run by ``test_keras.py`` in one subprocess per backend (Keras fixes its backend
at import): ``KERAS_BACKEND=jax python _keras_fit.py < example.py`` fits a small
MLP through every route, then runs the code it reads on stdin (the docs'
Keras example), and prints as JSON the row ids each fit epoch trained on, the
example's traceback if it failed, and the warnings raised meanwhile.

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
    import keras

    seen: dict[int, list[np.ndarray]] = {}
    epoch = [-1]  # batches trained outside an epoch would be recorded under -1

    class Epoch(keras.callbacks.Callback):
        def on_epoch_begin(self, e: int, logs: Any = None) -> None:
            epoch[0] = e

    model = _recording_model(keras, seen, epoch)
    # shuffle=False: the routes shuffle; Keras warns about shuffle=True with them.
    model.fit(source, epochs=EPOCHS, initial_epoch=initial_epoch, shuffle=False, verbose=0,
              callbacks=[Epoch()])  # fmt: skip
    return {str(e): np.concatenate(rows).tolist() for e, rows in sorted(seen.items())}


def routes(backend: str) -> dict[str, Any]:
    """For each route: the rows of each fit epoch, and the epoch its source runs next."""
    from looptoolkit import Loader
    from looptoolkit.tf_data import loader_dataset
    from looptoolkit.torch_data import make_dataloader

    x, y = data()
    results: dict[str, Any] = {}

    # loader_dataset shares the Loader's cursor; a resume sets it either way.
    for name, start in [("", 0), ("-set_epoch", 1), ("-start_epoch", 1)]:
        loader = Loader((x, y), B, seed=SEED)
        if name == "-set_epoch":
            loader.set_epoch(1)
        ds = (
            loader_dataset(loader, start_epoch=1)
            if name == "-start_epoch"
            else loader_dataset(loader)
        )
        epochs = fit(ds, initial_epoch=start)
        results["loader_dataset" + name] = {"epochs": epochs, "next": loader.state_dict()["epoch"]}

    options: dict[str, Any] = {}
    if backend in ("jax", "tensorflow"):
        import multiprocessing

        # JAX warns when a process that uses it forks, and on the tensorflow backend
        # Keras iterates the DataLoader from a tf.data thread, where a fork
        # intermittently leaves a worker dead: workers start by forkserver, which
        # imports torch once (each worker forked from it starts at once).
        multiprocessing.set_forkserver_preload(["looptoolkit.torch_data"])
        options["multiprocessing_context"] = "forkserver"
    for workers in (0, 2):
        for name, start in [("", 0), ("-set_epoch", 1)]:
            extra = options if workers else {}
            dl = make_dataloader((x, y), B, seed=SEED, num_workers=workers, **extra)
            if start:
                dl.set_epoch(start)
            epochs = fit(dl, initial_epoch=start)
            route = f"make_dataloader-w{workers}{name}"
            results[route] = {"epochs": epochs, "next": dl.batch_sampler.epoch}
    return results


# What the pytest configuration ignores (pyproject.toml): deprecations raised in
# the frameworks' own code, about their dependencies (Keras's torch backend
# converts tensors to NumPy the deprecated way).
IGNORED = ("google", "tensorflow", "keras", "flatbuffers")


def main() -> None:
    """Fit through each route, then run the code on stdin; print the results as JSON."""
    import os
    import traceback

    backend = os.environ["KERAS_BACKEND"]
    example = sys.stdin.read()
    result: dict[str, Any] = {"backend": backend}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for module in IGNORED:
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=module + ".*")
        result["routes"] = routes(backend)
        try:
            exec(compile(example, "example", "exec"), {"__name__": "example"})
        except Exception:
            result["example"] = traceback.format_exc()
        else:
            result["example"] = None
    import keras

    result["keras_backend"] = keras.backend.backend()
    result["warnings"] = sorted(
        {f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught}
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
