"""Ragged batches on a GPU (skipped without one; ``pytest -m cuda``).

Every layout moved by ``device=`` (with and without prefetch) equals the host
Loader's batches field by field, with rows aligned across leaves; a JAX GPU gets
the same values; a column already on the GPU is refused at construction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import looptoolkit as lt

pytestmark = pytest.mark.cuda

LAYOUTS = [
    (3, dict(layout=lt.PadLayout(pad_value=-1))),
    (3, dict(layout=lt.PadLayout(buckets=[8, 64, 512]))),
    (3, dict(layout="flat")),
    (None, dict(layout="pad", batch_tokens=256, group_by_length=True)),
    (None, dict(layout="flat", batch_tokens=200)),
    (2, dict(layout=lt.PackLayout(seq_len=64))),
    (2, dict(layout=lt.FitLayout(seq_len=64, long_rows="split"))),
]


def corpus() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    lens = rng.integers(1, 120, 300)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    tokens = rng.integers(0, 50_000, offsets[-1]).astype(np.int32)
    return tokens, offsets, np.arange(300)


def assert_same(got: Any, want: Any, device: Any) -> None:
    assert type(got["ids"]) is type(want["ids"])
    for field_got, field_want in zip(got["ids"], want["ids"], strict=True):
        if isinstance(field_want, int):
            assert field_got == field_want
            continue
        assert field_got.device == device
        np.testing.assert_array_equal(field_got.cpu().numpy(), field_want)
    assert got["doc"].device == device
    np.testing.assert_array_equal(got["doc"].cpu().numpy(), want["doc"])


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize(("batch", "kwargs"), LAYOUTS)
def test_cuda_ragged_batches_equal_the_host_loaders(cuda, batch, kwargs, prefetch):
    import torch

    tokens, offsets, doc = corpus()
    data = {"ids": lt.Ragged(torch.from_numpy(tokens), offsets), "doc": torch.from_numpy(doc)}
    host = list(lt.Loader(data, batch, seed=4, **kwargs))
    moved = lt.Loader(data, batch, seed=4, device=cuda, prefetch=prefetch, **kwargs)
    got = []
    for b in moved:  # the step keeps every batch: none may be overwritten later
        got.append(b)
    torch.cuda.synchronize()
    assert len(got) == len(host) > 1
    for g, h in zip(got, host, strict=True):
        assert_same(g, h, cuda)


def test_cuda_ragged_resume_mid_epoch_on_the_device(cuda):
    tokens, offsets, doc = corpus()
    data = {"ids": lt.Ragged(tokens, offsets), "doc": doc}
    kwargs = dict(layout=lt.PackLayout(seq_len=64), seed=9, device=cuda, prefetch=2)
    whole = [b["ids"].values.cpu().numpy() for b in lt.Loader(data, 2, **kwargs)]
    first = lt.Loader(data, 2, **kwargs)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    resumed = lt.Loader(data, 2, **kwargs)
    resumed.load_state_dict(state)
    rest = [b["ids"].values.cpu().numpy() for b in resumed]
    assert len(rest) == len(whole) - 5
    for a, b in zip(rest, whole[5:], strict=True):
        np.testing.assert_array_equal(a, b)


def test_cuda_a_ragged_column_on_the_gpu_is_refused_at_construction(cuda):
    import torch

    tokens, offsets, _ = corpus()
    with pytest.raises((TypeError, ValueError), match="host"):
        lt.Loader(lt.Ragged(torch.from_numpy(tokens).to(cuda), offsets), 4)


def test_cuda_jax_gpu_gets_the_host_values_and_compiles_once_per_bucket(cuda):
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX has no GPU here")
    tokens, offsets, _ = corpus()
    col = lt.Ragged(jax.device_put(tokens, jax.devices("cpu")[0]), offsets)  # a host column
    buckets = [16, 32, 64, 128]
    layout = lt.PadLayout(buckets=buckets)
    host = list(lt.Loader(lt.Ragged(tokens, offsets), 8, seed=1, layout=layout))
    traces = []

    @jax.jit
    def step(batch):
        traces.append(batch.values.shape)  # runs once per trace
        return (batch.values * batch.mask).sum()

    total = 0
    for got, want in zip(
        lt.Loader(col, 8, seed=1, layout=layout, device=gpus[0], prefetch=2), host, strict=True
    ):
        assert got.values.devices() == {gpus[0]}
        np.testing.assert_array_equal(np.asarray(got.values), want.values)
        np.testing.assert_array_equal(np.asarray(got.mask), want.mask)
        total += int(step(got))
    assert 1 < len(traces) <= len(buckets)
    assert total == int(tokens.astype(np.int64).sum())
