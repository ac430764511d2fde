"""StaticBatches: a loader's batches copied into fixed buffers, for CUDA graphs.

On the CPU with torch tensors as data (a Loader over torch tensors yields torch
tensors): the same buffers every batch, values equal to the Loader's, the short
last batch dropped or padded with a correct mask, resume, ``len``, and the
batches it refuses. The ``cuda`` test captures a step with ``torch.cuda.graph``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from looptoolkit import Loader, PadLayout, Ragged, StaticBatches  # noqa: E402

N, B = 50, 8  # 6 full batches and a short one of 2 rows


def make_data(n: int = N) -> dict[str, Any]:
    return {
        "x": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3),
        "y": {"id": torch.arange(n), "flag": torch.arange(n) % 2 == 0},
    }


def pointers(batch: Any) -> tuple[int, ...]:
    return (batch["x"].data_ptr(), batch["y"]["id"].data_ptr(), batch["y"]["flag"].data_ptr())


def snapshot(batch: Any) -> dict[str, Any]:
    # The buffers are overwritten by the next batch: a copy is what a test may keep.
    return {"x": batch["x"].clone(), "id": batch["y"]["id"].clone(), "flag": batch["y"]["flag"]}


def host_batches(epoch: int, **kwargs: Any) -> list[Any]:
    loader = Loader(make_data(), B, seed=3, **kwargs)
    loader.set_epoch(epoch)
    return list(loader)


@pytest.mark.parametrize("short", ["drop", "pad"])
def test_every_batch_lands_in_the_same_buffers_with_the_loaders_values(short):
    static = StaticBatches(Loader(make_data(), B, seed=3), short=short)
    seen, addresses = [], set()
    for epoch in range(2):
        for item in static:
            batch = item[0] if short == "pad" else item
            addresses.add(pointers(batch))
            seen.append((epoch, snapshot(batch), item))
    assert len(addresses) == 1  # fixed addresses, across epochs too
    assert len({id(item) for _, _, item in seen}) == 1  # the same object every time
    for epoch in range(2):
        want = host_batches(epoch)
        got = [s for e, s, _ in seen if e == epoch]
        assert len(got) == (7 if short == "pad" else 6) == len(static)
        for host, kept in zip(want, got, strict=False):
            n = len(host["y"]["id"])
            assert torch.equal(kept["x"][:n], host["x"])
            assert torch.equal(kept["id"][:n], host["y"]["id"])
    assert static.rows == B


def test_pad_fills_the_rest_and_masks_exactly_the_real_rows():
    static = StaticBatches(Loader(make_data(), B, seed=3), short="pad", pad_value=-1)
    for epoch in range(2):  # the second epoch's full batches after a padded one
        items = [(snapshot(b), m.clone()) for b, m in static]
        host = host_batches(epoch)
        for (batch, mask), want in zip(items, host, strict=True):
            n = len(want["y"]["id"])
            assert mask.dtype == torch.bool and mask.shape == (B,)
            assert mask.tolist() == [True] * n + [False] * (B - n)
            assert torch.equal(batch["x"][:n], want["x"])
            # the padded rows hold pad_value, not what the previous batch left there
            assert (batch["x"][n:] == -1).all() and (batch["id"][n:] == -1).all()
        assert [int(m.sum()) for _, m in items] == [B] * 6 + [2]


def test_drop_skips_the_short_last_batch_and_len_counts_it_out():
    static = StaticBatches(Loader(make_data(), B, shuffle=False))
    ids = [b["y"]["id"].clone() for b in static]
    assert len(ids) == len(static) == 6
    assert torch.equal(torch.cat(ids), torch.arange(48))
    # the dropped batch is checked, never copied: the buffers keep the last full batch
    (out,) = {id(b): b for b in static}.values()
    assert torch.equal(out["y"]["id"], torch.arange(40, 48))
    # no short batch: nothing to drop
    assert len(StaticBatches(Loader(make_data(48), B))) == 6
    assert len(StaticBatches(Loader(make_data(), B, drop_last=True))) == 6
    assert len(StaticBatches(Loader(make_data(), B), short="pad")) == 7


def test_a_short_first_batch_still_gets_full_buffers():
    static = StaticBatches(Loader(make_data(5), B), short="pad")
    ((batch, mask),) = list(static)
    assert batch["x"].shape == (B, 3) and mask.tolist() == [True] * 5 + [False] * 3
    assert list(StaticBatches(Loader(make_data(5), B))) == []


@pytest.mark.parametrize("short", ["drop", "pad"])
def test_resume_yields_exactly_the_batches_that_remained(short):
    states = []

    def run(static: StaticBatches, stop: int | None = None) -> list[Any]:
        out = []
        for item in static:
            batch = item[0] if short == "pad" else item
            out.append(batch["y"]["id"].clone())
            if len(out) == stop:
                states.append(static.state_dict())  # taken during the pass, in the step
                break
        return out

    whole = StaticBatches(Loader(make_data(), B, seed=5), short=short)
    whole.set_epoch(1)
    expected = run(whole)
    first = StaticBatches(Loader(make_data(), B, seed=5), short=short)
    first.set_epoch(1)
    head = run(first, stop=3)
    (state,) = states
    second = StaticBatches(Loader(make_data(), B, seed=5), short=short)
    second.load_state_dict(state)
    tail = run(second)
    assert len(head) + len(tail) == len(expected)
    for got, want in zip(head + tail, expected, strict=True):
        assert torch.equal(got, want)
    assert state["epoch"] == 1


def test_a_loaders_return_mask_is_carried_into_the_mask():
    # 50 rows on 3 ranks pad the epoch to 51: the last rank's last row is padding.
    loader = Loader(make_data(), B, rank=2, world_size=3, shuffle=False, return_mask=True)
    host = [(b["y"]["id"].clone(), m.copy()) for b, m in loader]
    for short in ("drop", "pad"):
        static = StaticBatches(loader, short=short)
        got = [(b["y"]["id"].clone(), m.clone()) for b, m in static]
        want = host if short == "pad" else [h for h in host if len(h[0]) == B]
        assert len(got) == len(want) == len(static)
        for (ids, mask), (host_ids, host_mask) in zip(got, want, strict=True):
            n = len(host_ids)
            assert torch.equal(ids[:n], host_ids)
            assert mask.tolist() == host_mask.tolist() + [False] * (B - n)
    assert not host[-1][1].all()  # the check above saw a padding row


def test_leaves_that_are_not_torch_tensors_are_refused_by_path():
    numpy_data = {"x": np.zeros((20, 3), np.float32), "y": np.arange(20)}
    with pytest.raises(TypeError, match=r"batch\['x'\] is a numpy.ndarray.*`device`"):
        next(iter(StaticBatches(Loader(numpy_data, B))))
    mixed = [{"x": torch.zeros(B, 2), "n": 3}]
    with pytest.raises(TypeError, match=r"batch\['n'\] is a builtins.int"):
        next(iter(StaticBatches(mixed)))


def test_batches_that_change_shape_are_refused_with_the_fix():
    batches = [{"x": torch.zeros(B, 4)}, {"x": torch.zeros(B, 5)}]
    with pytest.raises(ValueError, match=r"batch\['x'\] has shape \(8, 5\), its buffer \(8, 4\)"):
        list(StaticBatches(batches))
    # ragged rows padded to each batch's longest: one bucket gives one shape
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, N)
    values = torch.as_tensor(rng.integers(0, 100, int(lengths.sum())))
    col = Ragged(values, np.concatenate([[0], np.cumsum(lengths)]))
    with pytest.raises(ValueError, match=r"batch\['tokens'\]\.values has shape .*`buckets`"):
        list(StaticBatches(Loader({"tokens": col}, B, seed=0)))
    fixed = StaticBatches(Loader(col, B, seed=0, layout=PadLayout(buckets=[64])), short="pad")
    assert [b.values.shape for b, _ in fixed] == [(B, 64)] * 7
    others = [
        [{"x": torch.zeros(B, 2)}, {"x": torch.zeros(B, 2, dtype=torch.float64)}],
        [{"x": torch.zeros(B, 2)}, {"x": torch.zeros(B, 2), "z": torch.zeros(B)}],
        [{"x": torch.zeros(B, 2)}, {"x": torch.zeros(B + 1, 2)}],
    ]
    for bad, match in zip(others, ["float64", "structure changed", r"\(9, 2\)"], strict=True):
        with pytest.raises(ValueError, match=match):
            list(StaticBatches(bad))


def test_a_short_batch_that_is_not_the_last_is_refused():
    batches = [{"x": torch.zeros(B, 2)}, {"x": torch.zeros(3, 2)}, {"x": torch.zeros(B, 2)}]
    for short in ("drop", "pad"):
        with pytest.raises(ValueError, match="batch 1 of the pass was shorter"):
            list(StaticBatches(batches, short=short))


def test_arguments_are_checked_and_echoed():
    loader = Loader(make_data(), B)
    with pytest.raises(ValueError, match='`short` must be "drop" or "pad", got \'last\''):
        StaticBatches(loader, short="last")
    with pytest.raises(ValueError, match="`pad_value` needs"):
        StaticBatches(loader, pad_value=1)
    with pytest.raises(TypeError, match="`pad_value` must be a number"):
        StaticBatches(loader, short="pad", pad_value="0")
    with pytest.raises(TypeError, match="`loader` must be iterable"):
        StaticBatches(3)
    assert repr(StaticBatches(loader, short="pad", pad_value=-1)).startswith(
        "StaticBatches(Loader("
    )
    assert repr(StaticBatches(loader)).endswith(", short='drop')")
    assert StaticBatches(loader).rows is None


def test_leaving_early_closes_the_loaders_pass():
    loader = Loader(make_data(), B, seed=1)
    static = StaticBatches(loader)
    for i, _ in enumerate(static):
        if i == 1:
            break
    # a pass that ended early restarts its epoch, as the Loader's own does
    assert static.state_dict() == loader.state_dict()
    assert loader.state_dict()["epoch"] == 0
    assert len(list(static)) == 6


@pytest.mark.cuda
def test_cuda_graph_replayed_over_an_epoch_equals_eager_steps(cuda):
    # The example of docs/gpu.md: capture once, replay for every batch.
    rng = np.random.default_rng(0)
    data = {"x": rng.random((1000, 16), np.float32), "y": rng.random((1000, 1), np.float32)}
    static = StaticBatches(Loader(data, 64, device=cuda, seed=0), short="pad")
    model = torch.nn.Linear(16, 1).to(cuda)
    first = iter(static)
    batch, mask = next(first)  # allocates the buffers: the graph's static inputs
    first.close()

    def step() -> Any:
        err = (model(batch["x"]) - batch["y"]).squeeze(1) * mask  # padded rows count 0
        loss = (err**2).sum()
        loss.backward()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)  # the captured backward allocates the grads
    with torch.cuda.graph(g):
        loss = step()
    replayed = []
    for _ in range(2):
        for item in static:
            assert item[0] is batch and item[1] is mask  # the captured inputs
            g.replay()
            replayed.append((loss.clone(), model.weight.grad.clone()))
    eager = []
    host = Loader(data, 64, seed=0)
    for epoch in range(2):
        host.set_epoch(epoch)
        for b in host:
            x, y = (torch.as_tensor(b[k]).to(cuda) for k in ("x", "y"))
            model.zero_grad(set_to_none=True)
            eager_loss = ((model(x) - y) ** 2).sum()
            eager_loss.backward()
            eager.append((eager_loss.detach(), model.weight.grad.clone()))
    assert len(replayed) == len(eager) == 2 * 16
    for (loss_g, grad_g), (loss_e, grad_e) in zip(replayed, eager, strict=True):
        torch.testing.assert_close(loss_g, loss_e, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad_g, grad_e, rtol=1e-5, atol=1e-5)
