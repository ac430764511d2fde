"""Keyed transforms: a row's keys are a function of (seed, epoch, its place in the epoch).

A transform with ``keyed = True`` (an augmentation) is called with the batch and its
``BatchKeys``; the keys a row gets must not depend on the rank, the world size, a resume,
the prefetch mode, the move or residency, and must change with the epoch and with each
draw of a row (with replacement).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from looptoolkit import Loader
from looptoolkit._common.keys import uniforms
from looptoolkit.augment import BatchKeys

N, B, SEED = 60, 8, 3


def _data() -> dict[str, np.ndarray]:
    return {"x": np.arange(2 * N, dtype=np.float32).reshape(N, 2), "id": np.arange(N)}


class Draw:
    """A keyed transform: adds each row's first keyed uniform under ``"u"``."""

    keyed = True

    def __init__(self, before_move: bool = False) -> None:
        self.before_move = before_move
        self.seen: list[type] = []

    def __call__(self, batch: dict[str, Any], keys: BatchKeys) -> dict[str, Any]:
        assert len(keys.positions) == len(batch["id"])
        self.seen.append(type(batch["x"]))
        return {**batch, "u": uniforms(keys, stream=1, k=1)[:, 0]}


def _draws(loader: Loader, passes: int = 1) -> dict[int, list[float]]:
    """Row id -> the draws it got, over ``passes`` whole passes."""
    out: dict[int, list[float]] = defaultdict(list)
    for _ in range(passes):
        for batch in loader:
            for i, u in zip(np.asarray(batch["id"]).tolist(), np.asarray(batch["u"]), strict=True):
                out[i].append(float(u))
    return dict(out)


def _reference(epoch: int = 0, **kwargs: Any) -> dict[int, list[float]]:
    loader = Loader(_data(), B, seed=SEED, transform=Draw(), **kwargs)
    loader.set_epoch(epoch)
    return _draws(loader)


def test_a_row_draws_the_same_at_any_world_size():
    one = _reference()
    for world_size in (2, 3, 4):
        union: dict[int, list[float]] = defaultdict(list)
        for rank in range(world_size):
            loader = Loader(
                _data(), B, seed=SEED, transform=Draw(), rank=rank, world_size=world_size,
                pad_shards=False,
            )  # fmt: skip
            for row, draws in _draws(loader).items():
                union[row] += draws
        assert dict(union) == one, world_size


def test_a_row_draws_the_same_at_another_batch_size_and_after_a_resume():
    one = _reference()
    loader = Loader(_data(), 5, seed=SEED, transform=Draw())
    assert _draws(loader) == one
    first = Loader(_data(), B, seed=SEED, transform=Draw())
    got: dict[int, list[float]] = defaultdict(list)
    for k, batch in enumerate(first):
        for i, u in zip(batch["id"].tolist(), batch["u"], strict=True):
            got[i].append(float(u))
        if k == 2:
            state = first.state_dict()
            break
    resumed = Loader(_data(), 4, seed=SEED, transform=Draw())  # another batch size too
    resumed.load_state_dict(state)
    for row, draws in _draws(resumed).items():
        got[row] += draws
    assert dict(got) == one


@pytest.mark.parametrize(
    "options",
    [
        {"prefetch_mode": "thread"},
        {"prefetch_mode": "inline"},
        {"device": "cpu", "dtype": np.float64},
        {"device": "cpu", "dtype": np.float64, "prefetch_mode": "thread"},
        {"device": "cpu", "resident": True},
        {"shuffle": "grouped"},
    ],
)
def test_a_row_draws_the_same_in_every_mode(options):
    shuffle = options.get("shuffle")
    assert _reference(**({"shuffle": shuffle} if shuffle else {})) == _reference(**options)


def test_epochs_draw_apart_and_every_row_draws_once_per_epoch():
    zero, one = _reference(0), _reference(1)
    assert sorted(zero) == sorted(one) == list(range(N))
    assert all(len(v) == 1 for v in zero.values())
    assert all(zero[i] != one[i] for i in range(N))


def test_two_draws_of_one_row_in_an_epoch_differ():
    loader = Loader(_data(), B, seed=SEED, transform=Draw(), replacement=True, num_samples=4 * N)
    repeated = [v for v in _draws(loader).values() if len(v) > 1]
    assert repeated and all(len(set(v)) == len(v) for v in repeated)


def test_the_seed_changes_the_draws():
    other = Loader(_data(), B, seed=SEED + 1, transform=Draw())
    assert _draws(other) != _reference()


def test_a_transform_before_the_move_sees_the_host_batch():
    torch = pytest.importorskip("torch")
    after, before = Draw(), Draw(before_move=True)
    for transform in (after, before):
        next(iter(Loader(_data(), B, seed=SEED, device=torch.device("cpu"), transform=transform)))
    assert set(after.seen) == {torch.Tensor} and set(before.seen) == {np.ndarray}
    loader = Loader(_data(), B, seed=SEED, device=torch.device("cpu"), transform=Draw(True))
    assert {k: v for k, v in _draws(loader).items()} == _reference()


def test_keys_by_batch_slot_would_be_caught(monkeypatch):
    # The planted defect: a row keyed by its slot in the batch, not its place in the epoch.
    from looptoolkit._pipeline import stream

    real = stream.KeysOf.__call__

    def by_slot(self: Any, progress: Any, k: int) -> BatchKeys:
        keys = real(self, progress, k)
        return keys._replace(positions=np.arange(len(keys.positions)))

    monkeypatch.setattr(stream.KeysOf, "__call__", by_slot)
    with pytest.raises(AssertionError):
        test_a_row_draws_the_same_at_any_world_size()


def test_keys_without_the_epoch_would_be_caught(monkeypatch):
    from looptoolkit._pipeline import stream

    real = stream.KeysOf.__call__

    def no_epoch(self: Any, progress: Any, k: int) -> BatchKeys:
        return real(self, progress, k)._replace(epoch=0)

    monkeypatch.setattr(stream.KeysOf, "__call__", no_epoch)
    with pytest.raises(AssertionError):
        test_epochs_draw_apart_and_every_row_draws_once_per_epoch()


class TorchDraw:
    """A keyed collate_fn: the batch (torch tensors in a DataLoader) with each row's draw."""

    keyed = True

    def __call__(self, batch: dict[str, Any], keys: BatchKeys) -> dict[str, Any]:
        return {**batch, "u": uniforms(keys, stream=1, k=1)[:, 0]}


@pytest.mark.parametrize(
    ("workers", "context"), [(0, None), (1, "fork"), (2, "fork"), (2, "spawn")]
)
def test_dataloader_workers_draw_as_the_loader_does(workers, context):
    pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    extra = {} if context is None else {"multiprocessing_context": context}
    dl = make_dataloader(
        _data(), B, seed=SEED, collate_fn=TorchDraw(), num_workers=workers, **extra
    )
    assert _draws(dl) == _reference()
    dl.set_epoch(1)
    assert _draws(dl) == _reference(1)
