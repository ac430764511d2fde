"""Keyed transforms over planned ragged batches: token budgets, length groups, packed rows.

A planned batch's rows are keyed by their place in the epoch's plan (a packed row by its
number among the plan's packed rows), so masking is the same for a row at any world size
(also past the 64 ranks from which length-grouped batches are made one at a time), after a
resume, in ``make_dataloader``'s workers; every delivered row has a key of its own each
epoch, and a batch repeated to even the ranks draws anew.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from looptoolkit import FitLayout, Flat, Loader, Packed, PackLayout, Padded, Ragged
from looptoolkit.augment import MaskTokens
from looptoolkit.ragged import _units

N = 120
VOCAB = 2000
IGNORE = -100
PLANS: dict[str, dict[str, Any]] = {
    "budget-pad": {"batch_tokens": 160, "layout": "pad"},
    "budget-grouped-flat": {"batch_tokens": 160, "group_by_length": True, "layout": "flat"},
    "grouped-rows": {"batch_size": 8, "group_by_length": True, "layout": "pad"},
    "pack": {"batch_size": 4, "layout": PackLayout(seq_len=32)},
    "fit": {"batch_size": 4, "layout": FitLayout(seq_len=32)},
}


def _column() -> Ragged:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(N):  # a row's first token is its own: every row (and piece) differs
        body = rng.integers(5, 1000, int(rng.integers(1, 30)))
        rows.append(np.concatenate([[1000 + i], body]).astype(np.int64))
    return Ragged.from_rows(rows)


COLUMN = _column()


def _masker() -> MaskTokens:
    return MaskTokens(vocab_size=VOCAB, mask_token_id=1, pad_token_id=0, probability=0.3)


def _loader(plan: str, **kwargs: Any) -> Loader:
    opts = dict(PLANS[plan])
    batch_size = opts.pop("batch_size", None)
    return Loader({"input_ids": COLUMN}, batch_size, seed=3, transform=_masker(), **opts, **kwargs)


def _rows(batch: dict[str, Any]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each delivered row's original tokens and its masked tokens."""
    ids, labels = batch["input_ids"], batch["labels"]
    if isinstance(ids, Flat):
        cu = np.asarray(ids.cu_seqlens)
        values, gold = np.asarray(ids.values), np.asarray(labels.values)
        parts = [(values[a:b], gold[a:b]) for a, b in itertools.pairwise(cu)]
    else:
        assert isinstance(ids, Padded | Packed)
        real = np.asarray(ids.mask if isinstance(ids, Padded) else ids.segment_ids != 0)
        values, gold = np.asarray(ids.values), np.asarray(labels.values)
        parts = [(v[m], g[m]) for v, g, m in zip(values, gold, real, strict=True)]
    out = []
    for masked, gold_row in parts:
        original = np.where(gold_row == IGNORE, masked, gold_row)
        out.append((tuple(original.tolist()), tuple(masked.tolist())))
    return out


def _epoch(loaders: list[Loader]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [row for loader in loaders for batch in loader for row in _rows(batch)]


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_planned_rows_mask_the_same_at_any_world_size(plan):
    want = dict(_epoch([_loader(plan)]))
    assert len(want) == len(_epoch([_loader(plan)]))  # every row once, none repeated
    masked = sum(a != b for a, b in want.items())
    assert masked > 0.8 * len(want)  # most rows have a token masked
    for world in (2, 3):
        got = _epoch([_loader(plan, rank=r, world_size=world) for r in range(world)])
        seen: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for original, out in got:
            seen.setdefault(original, []).append(out)
        assert set(seen) == set(want)
        for original, outs in seen.items():
            assert outs[0] == want[original]  # the row, where its batch is first dealt
            # a batch repeated to even the ranks draws anew (positions past the plan's end)
            assert all(o != want[original] for o in outs[1:] if len(original) > 8)


def test_length_groups_made_one_at_a_time_mask_as_the_whole_plan():
    world = _units.WINDOWED_MIN_RANKS
    loaders = [_loader("grouped-rows", rank=r, world_size=world) for r in range(world)]
    assert loaders[0]._order.windowed
    want = dict(_epoch([_loader("grouped-rows")]))
    got = _epoch(loaders)
    firsts: dict[tuple[int, ...], tuple[int, ...]] = {}
    for original, out in got:
        firsts.setdefault(original, out)
    assert firsts == want


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_a_resume_masks_the_rest_the_same(plan):
    whole = [_rows(batch) for batch in _loader(plan)]
    first = _loader(plan)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    second = _loader(plan)
    second.load_state_dict(state)
    assert [_rows(batch) for batch in second] == whole[3:]


@pytest.mark.parametrize("plan", ["budget-pad", "grouped-rows"])
def test_other_epochs_mask_otherwise(plan):
    loader = _loader(plan)
    first = dict(_epoch([loader]))
    second = dict(_epoch([loader]))  # the same rows, in other batches, with other keys
    assert set(first) == set(second)
    assert sum(first[k] != second[k] for k in first) > 0.5 * len(first)


class _Positions:
    """A keyed transform that records each batch's keys."""

    keyed = True

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def __call__(self, batch: Any, keys: Any) -> Any:
        self.seen.append(np.asarray(keys.positions))
        return batch


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_each_delivered_row_has_a_key_of_its_own(plan):
    record = _Positions()
    opts = dict(PLANS[plan])
    loader = Loader({"input_ids": COLUMN}, opts.pop("batch_size", None), transform=record, **opts)
    rows = sum(len(_rows({"input_ids": b["input_ids"], "labels": b["input_ids"]})) for b in loader)
    if plan in ("pack", "fit"):  # packed rows, the last batch's empty ones included
        rows = sum(len(p) for p in record.seen)
    keys = np.concatenate(record.seen)
    assert len(keys) == rows and len(np.unique(keys)) == len(keys)
    assert keys.min() == 0 and keys.max() == len(keys) - 1  # the plan's numbers, each once


def test_keys_by_batch_slot_are_caught(monkeypatch):
    monkeypatch.setattr(
        _units.UnitEpoch, "positions", lambda self, i: np.arange(len(self.units.positions(0)))
    )
    record = _Positions()
    for _ in Loader({"input_ids": COLUMN}, 8, group_by_length=True, transform=record):
        pass
    keys = np.concatenate(record.seen)
    assert len(np.unique(keys)) < len(keys)  # what the test above asserts against


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("plan", ["budget-grouped-flat", "fit"])
def test_dataloader_workers_mask_planned_batches_the_same(plan, workers):
    pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    want = [_rows(batch) for batch in _loader(plan)]
    opts = dict(PLANS[plan])
    dl = make_dataloader(
        {"input_ids": COLUMN},
        opts.pop("batch_size", None),
        seed=3,
        collate_fn=_masker(),
        num_workers=workers,
        tensors=False,
        **opts,
    )
    assert [_rows(batch) for batch in dl] == want


@pytest.mark.parametrize("plan", ["plain-flat", "budget-pad", "pack"])
def test_loader_dataset_masks_as_the_loader(plan):
    pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    def make() -> Loader:
        if plan == "plain-flat":
            return Loader({"input_ids": COLUMN}, 8, seed=3, transform=_masker(), layout="flat")
        return _loader(plan)

    want = [_rows(batch) for batch in make()]
    ds = loader_dataset(make())
    first, second = ([_rows(b) for b in ds] for _ in range(2))
    assert first == want  # then the second pass is the second epoch, keyed otherwise
    assert sorted(r for b in second for r in b) != sorted(r for b in first for r in b)
