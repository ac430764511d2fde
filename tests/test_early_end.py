"""The trap of the epoch rule made visible: a loop capped with ``break`` repeats its epoch.

A pass that ends early leaves the cursor where it was, so ``for epoch in range(E):
for i, b in enumerate(loader): if i == K: break`` runs the same ``K + 1`` batches every
time. When two passes in a row end early after as many batches, with no ``set_epoch``,
``load_state_dict`` or finished epoch between them, the loader warns once
(``RepeatedEpochWarning``). What frameworks do must stay silent: a probe, a one-batch
look-ahead, a bare ``iter()``, a peek with ``next(iter(loader))``, a pass bound before a
``set_epoch`` and dropped after it (Lightning's sanity check), the routes' own probes
(DataLoader's two ``iter(batch_sampler)``, tf.data's prefetch). The Keras and Lightning
drives are in ``tests/integrations`` (``test_keras.py``'s ``test_nothing_warns``,
``test_lightning.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from test_epochs import SEED, B, _data, _dataloader

from looptoolkit import Loader, RepeatedEpochWarning
from looptoolkit.order._epochs import EpochCursor

EPOCHS = 6


def _ids(batch: Any) -> np.ndarray:
    return np.asarray(batch["id"])


REFERENCE = Loader(_data(), B, seed=SEED)


@contextmanager
def repeats() -> Iterator[list[warnings.WarningMessage]]:
    """The RepeatedEpochWarnings raised inside, however raised (a ``__del__`` included)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found: list[warnings.WarningMessage] = []
        yield found
    found.extend(w for w in caught if issubclass(w.category, RepeatedEpochWarning))


def _capped(route: Any, stop: int, set_epoch: Callable[[int], None] | None = None) -> list[Any]:
    """The first ids of each epoch of a loop that breaks at batch ``stop`` every epoch."""
    firsts = []
    for epoch in range(EPOCHS):
        if set_epoch is not None:
            set_epoch(epoch)
        for i, batch in enumerate(route):
            if i == 0:
                firsts.append(_ids(batch).tolist())
            if i == stop:
                break
    return firsts


def _loader(**kwargs: Any) -> Callable[[], tuple[Any, Any]]:
    def make() -> tuple[Any, Any]:
        loader = Loader(_data(), B, seed=SEED, **kwargs)
        return loader, loader.set_epoch

    return make


def _plain_dataloader(**kwargs: Any) -> Callable[[], tuple[Any, Any]]:
    # A plain DataLoader around the batch sampler (what accelerate's `prepare` builds).
    def make() -> tuple[Any, Any]:
        import torch

        from looptoolkit.torch_data import make_dataloader

        inner = make_dataloader(_data(), B, seed=SEED)
        dl = torch.utils.data.DataLoader(
            inner.dataset,
            batch_sampler=inner.batch_sampler,
            collate_fn=inner.collate_fn,
            **kwargs,
        )
        return dl, inner.batch_sampler.set_epoch

    return make


ROUTES = {
    "loader": (_loader(), None),
    "loader-thread": (_loader(prefetch=2, prefetch_mode="thread"), None),
    "loader-device": (_loader(device="cpu", prefetch=2), None),
    "dataloader-w0": (_dataloader(), "torch"),
    "dataloader-w2-fork": (_dataloader(num_workers=2, multiprocessing_context="fork"), "torch"),
    "dataloader-w2-spawn": (_dataloader(num_workers=2, multiprocessing_context="spawn"), "torch"),
    "plain-dataloader-w0": (_plain_dataloader(), "torch"),
    "plain-dataloader-w2": (
        _plain_dataloader(num_workers=2, multiprocessing_context="fork"),
        "torch",
    ),
}
FAST = [name for name in sorted(ROUTES) if "spawn" not in name]


def _route(name: str) -> tuple[Any, Any]:
    make, needs = ROUTES[name]
    if needs is not None:
        pytest.importorskip(needs)
    return make()


# -- the trap warns, once ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_a_capped_loop_warns_once_over_many_epochs(name):
    route, _ = _route(name)
    with repeats() as found:
        firsts = _capped(route, stop=3)
    assert firsts == [REFERENCE.indices(0)[:B].tolist()] * EPOCHS  # the trap itself
    assert len(found) == 1
    message = str(found[0].message)
    assert "ends early" in message and "repeats it" in message
    assert "`loader.set_epoch(epoch)`" in message and "`loader.state_dict()`" in message


def test_the_warning_points_at_the_users_loop():
    loader = Loader(_data(), B, seed=SEED)
    with repeats() as found:
        for _ in range(3):
            for i, _batch in enumerate(loader):
                if i == 2:
                    break
    assert len(found) == 1
    assert found[0].filename == __file__


def test_a_loop_closed_or_failing_at_the_same_batch_warns_too():
    loader = Loader(_data(), B, seed=SEED)
    with repeats() as found:
        for _ in range(2):
            it = iter(loader)
            next(it), next(it)
            it.close()
    assert len(found) == 1

    def transform(batch: Any) -> Any:
        if int(batch["id"][0]) == int(REFERENCE.indices(0)[2 * B]):
            raise ValueError("bad batch")
        return batch

    failing = Loader(_data(), B, seed=SEED, transform=transform)
    with repeats() as found:
        for _ in range(2):
            with pytest.raises(ValueError, match="bad batch"):
                for _batch in failing:
                    pass
    assert len(found) == 1


# -- what separates two passes: no warning -------------------------------------------------


@pytest.mark.parametrize("name", FAST)
def test_set_epoch_at_each_epochs_start_silences_it(name):
    route, set_epoch = _route(name)
    with repeats() as found:
        firsts = _capped(route, stop=3, set_epoch=set_epoch)
    assert found == []
    assert firsts == [REFERENCE.indices(e)[:B].tolist() for e in range(EPOCHS)]


def test_set_epoch_to_the_same_epoch_silences_it_too():
    # What Lightning does before each validation: set the fit loop's epoch, which may be
    # the one the cursor already points at; the loop asked for these batches.
    loader = Loader(_data(), B, seed=SEED)
    with repeats() as found:
        _capped(loader, stop=3, set_epoch=lambda _: loader.set_epoch(0))
    assert found == []


@pytest.mark.parametrize("name", ["loader", "dataloader-w0"])
def test_load_state_dict_between_passes_silences_it(name):
    route, _ = _route(name)
    state = route.state_dict()
    with repeats() as found:
        for _ in range(EPOCHS):
            route.load_state_dict(state)
            for i, _batch in enumerate(route):
                if i == 3:
                    break
    assert found == []


@pytest.mark.parametrize("name", ["loader", "dataloader-w0"])
def test_different_break_points_do_not_warn(name):
    route, _ = _route(name)
    with repeats() as found:
        for stop in (3, 5, 3, 5, 2, 3):
            for i, _batch in enumerate(route):
                if i == stop:
                    break
    assert found == []


@pytest.mark.parametrize("name", FAST)
def test_a_whole_epoch_between_capped_passes_silences_it(name):
    route, _ = _route(name)
    with repeats() as found:
        for epoch in range(EPOCHS):
            for i, _batch in enumerate(route):
                if i == 3:
                    break
            assert np.concatenate([_ids(b) for b in route]).tolist() == (
                REFERENCE.indices(epoch).tolist()
            )
    assert found == []


# -- what frameworks do: no warning --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_probes_and_look_aheads_followed_by_whole_epochs_do_not_warn(name):
    route, _ = _route(name)
    with repeats() as found:
        for epoch in range(3):
            iter(route)  # a bare iter(): a pass of no batch
            ahead = iter(route)
            next(ahead)  # a one-batch look-ahead (Keras builds its model from one batch)
            del ahead
            head = iter(route)
            next(head), next(head)  # a two-batch look (Keras reads the spec from two)
            del head
            assert np.concatenate([_ids(b) for b in route]).tolist() == (
                REFERENCE.indices(epoch).tolist()
            )
    assert found == []


@pytest.mark.parametrize("name", ["loader", "dataloader-w0"])
def test_peeks_and_bare_iters_do_not_warn(name):
    # `next(iter(loader))` again and again shows (or trains on) one batch on purpose.
    route, _ = _route(name)
    with repeats() as found:
        for _ in range(EPOCHS):
            iter(route)
            assert _ids(next(iter(route))).tolist() == REFERENCE.indices(0)[:B].tolist()
    assert found == []


def test_a_pass_bound_before_set_epoch_and_dropped_after_it_is_not_in_a_row():
    # Lightning's sanity check: two validation batches (and one look-ahead), the
    # iterator kept until the next validation, which sets the same epoch and takes
    # as many batches: the passes are not in a row, a set_epoch is between them.
    loader = Loader(_data(), B, seed=SEED)
    with repeats() as found:
        sanity = iter(loader)
        for _ in range(3):
            next(sanity)
        loader.sampler.set_epoch(0)
        validation = iter(loader)
        for _ in range(3):
            next(validation)
        del sanity, validation
    assert found == []


def _capped_zip(loader: Loader, epochs: int) -> None:
    for _ in range(epochs):
        for i, _pair in enumerate(zip(loader, loader, strict=True)):
            if i == 3:
                break


def test_two_passes_side_by_side_are_not_in_a_row():
    # zip(loader, loader) capped once: both passes end after as many batches, but the
    # second started before the first ended: they ran side by side, not one after another.
    loader = Loader(_data(), B, seed=SEED)
    with repeats() as found:
        _capped_zip(loader, 1)
    assert found == []
    # Capped again, twice: each pair starts after the last ends, but side by side again.
    with repeats() as found:
        _capped_zip(loader, 2)
    assert found == []


def test_loader_dataset_passes_are_not_counted():
    # tf.data's prefetch decides how many batches a pass makes: its passes tell nothing,
    # and a Loader's capped passes around them still pair up.
    pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    loader = Loader(_data(), B, seed=SEED)
    ds = loader_dataset(loader)
    with repeats() as found:
        for _ in range(EPOCHS):
            for i, _batch in enumerate(ds):
                if i == 3:
                    break
    assert found == []
    with repeats() as found:
        _capped(loader, stop=3)
    assert len(found) == 1


# -- the cursor ------------------------------------------------------------------------------


def test_the_cursor_pairs_an_early_end_with_the_pass_bound_right_after_it():
    cursor = EpochCursor()
    era = cursor.bind_counted()[3]
    with repeats() as found:
        cursor.ended_early(0, era, 1)
        cursor.ended_early(0, era, 1)  # one-batch passes tell nothing
        cursor.ended_early(0, era, 4)
        cursor.ended_early(0, era, 4)  # bound before the end above: side by side, not in a row
        era = cursor.bind_counted()[3]
        cursor.ended_early(0, era, 4)  # the end before it was a side-by-side pass's
        era = cursor.bind_counted()[3]
        cursor.set_epoch(0)  # moves nothing, but comes between the end and the next start
        cursor.ended_early(0, era, 4)
        era = cursor.bind_counted()[3]
        cursor.ended_early(1, era, 4)  # right after an end of 4, but of another epoch
        era = cursor.bind_counted()[3]
        cursor.ended_early(1, era, 3)  # right after an end of epoch 1, but of 3 batches, not 4
        assert found == []
        era = cursor.bind_counted()[3]
        cursor.ended_early(1, era, 3)  # right after: two passes in a row ran the same batches
    assert len(found) == 1
    with repeats() as found:
        era = cursor.bind_counted()[3]
        cursor.ended_early(1, era, 3)  # once per cursor
    assert found == []
    for move in (lambda: cursor.set_epoch(0), lambda: cursor.load(0, 0)):
        before = cursor.era
        move()
        assert cursor.era == before + 1
    _, _, token, era = cursor.bind_counted()
    assert cursor.complete(token) and cursor.era == era + 1
