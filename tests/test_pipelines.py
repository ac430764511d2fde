"""Native pipelines of each adapter yield exactly the Loader's batches (or cover every row)."""

from __future__ import annotations

import numpy as np
import pytest

from looptoolkit import Loader
from looptoolkit.bench.variants.epochs import EpochPipeline, order_length, split_batches
from looptoolkit.bench.variants.numpy import (
    contiguous_copies,
    epoch_views,
    numpy_manual,
    pure_python,
    sequential_take,
)
from looptoolkit.order import Order, epoch_indices

N, B = 103, 10
SHUFFLES = [True, "grouped", False]


def make_data(n: int = N) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((n, 3)).astype(np.float32), "y": np.arange(n)}


def as_numpy(x):
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def host(batch) -> dict[str, np.ndarray]:
    return {k: as_numpy(v) for k, v in batch.items()}


def loader_epochs(data, shuffle, epochs: int = 2, **kwargs):
    loader = Loader(data, B, shuffle=shuffle, seed=3, group_size=16, **kwargs)
    return [[host(b) for b in loader] for _ in range(epochs)]


def assert_same_epochs(pipeline, expected) -> None:
    for want in expected:
        got = [host(b) for b in pipeline]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.keys() == w.keys()
            for key in w:
                np.testing.assert_array_equal(g[key], w[key])


def assert_covers(batches, n: int = N, batch_size: int = B, data=None) -> None:
    data = make_data(n) if data is None else data
    ids = []
    for i, batch in enumerate(batches):
        batch = host(batch) if isinstance(batch, dict) else {"y": as_numpy(batch)}
        assert len(batch["y"]) == batch_size or i == len(batches) - 1
        if "x" in batch:  # rows aligned with their ids
            np.testing.assert_array_equal(batch["x"], data["x"][batch["y"]])
        ids.append(batch["y"])
    assert sorted(np.concatenate(ids).tolist()) == list(range(n))


def order_for(shuffle) -> Order:
    return Order(N, B, shuffle=shuffle, seed=3, group_size=16)


# -- shared helpers (numpy adapter) -----------------------------------------------


def test_epoch_indices_reads_loader_order_and_functions():
    data = make_data()
    loader = Loader(data, B, seed=5)
    order = Order(N, B, seed=5)
    np.testing.assert_array_equal(epoch_indices(loader, 2), epoch_indices(order, 2))
    np.testing.assert_array_equal(epoch_indices(lambda e: np.arange(3) + e, 1), [1, 2, 3])
    with pytest.raises(TypeError, match="`order` must be"):
        epoch_indices(42, 0)


def test_split_batches_and_lengths():
    batches = split_batches(np.arange(25), 10)
    assert [len(b) for b in batches] == [10, 10, 5]
    assert order_length(Order(25, 10), 25, 10) == 3
    assert order_length(Order(25, 10, drop_last=True), 25, 10) == 2
    assert order_length(None, 25, 10) == 3
    with pytest.raises(ValueError, match="`batch_size` must be >= 1"):
        split_batches(np.arange(3), 0)


def test_epoch_pipeline_counts_epochs():
    pipeline = EpochPipeline(lambda e: iter([e]), 1)
    assert list(pipeline) == [0] and list(pipeline) == [1]
    pipeline.set_epoch(7)
    assert list(pipeline) == [7]
    assert "next_epoch=8" in repr(pipeline)


def test_numpy_manual_and_pure_python_cover_every_row():
    pipeline = numpy_manual(make_data(), B, seed=1)
    first, second = list(pipeline), list(pipeline)
    assert_covers(first)
    assert_covers(second)
    assert not np.array_equal(first[0]["y"], second[0]["y"])  # reshuffled
    assert len(pipeline) == len(first) == 11
    python = pure_python(np.arange(N), B, seed=1)
    batches = list(python)
    assert all(isinstance(b, list) for b in batches)
    assert_covers([np.asarray(b) for b in batches])


def test_take_and_fancy_index_loops_yield_the_same_batches():
    data = make_data()
    take = numpy_manual(data, B, seed=4, gather="take")
    index = numpy_manual(data, B, seed=4, gather="index")
    for _ in range(2):
        assert_same_epochs(index, [[host(b) for b in take]])
    with pytest.raises(ValueError, match="`gather` must be 'take' or 'index'"):
        numpy_manual(data, B, gather="fancy")


def test_wrap_is_applied_to_each_batchs_list_of_leaves():
    seen = []

    def wrap(leaves):
        seen.append(len(leaves))
        return [leaf * 0 for leaf in leaves]

    batches = list(numpy_manual(make_data(), B, seed=1, wrap=wrap))
    assert seen == [2] * 11
    assert all(not b["y"].any() for b in batches)


def test_floors_yield_every_row_in_order_as_new_arrays():
    data = make_data()
    for floor in (sequential_take(data, B), contiguous_copies(data, B)):
        batches = list(floor)
        assert len(floor) == len(batches) == 11
        assert [b["y"].tolist() for b in batches] == [
            list(range(s, min(s + B, N))) for s in range(0, N, B)
        ]
        assert_covers(batches)
        # Each batch is its own array, not a view of the data.
        assert not any(np.shares_memory(b["x"], data["x"]) for b in batches)


def test_epoch_views_cover_every_row_and_reshuffle():
    data = make_data()
    views = epoch_views(data, B, seed=2)
    first, second = list(views), list(views)
    assert_covers(first)
    assert_covers(second)
    assert not np.array_equal(first[0]["y"], second[0]["y"])
    ids = list(epoch_views(np.arange(N), B, seed=2))  # one 1-D leaf: permutation(x).reshape
    assert [len(b) for b in ids] == [B] * (N // B) + [N % B]
    assert sorted(np.concatenate(ids).tolist()) == list(range(N))


# -- torch ------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_torch_dataloaders_yield_the_loaders_batches(shuffle):
    torch = pytest.importorskip("torch")
    from looptoolkit.bench.variants.torch import per_sample_dataloader, resident_gather

    data = {k: torch.from_numpy(v) for k, v in make_data().items()}
    expected = loader_epochs(data, shuffle)
    assert_same_epochs(per_sample_dataloader(data, B, order=order_for(shuffle)), expected)
    assert_same_epochs(resident_gather(data, B, order=order_for(shuffle)), expected)


@pytest.mark.torch
def test_getitems_dataloader_yields_the_loaders_batches():
    torch = pytest.importorskip("torch")
    from looptoolkit.bench.variants.torch import getitems_dataloader

    data = {k: torch.from_numpy(v) for k, v in make_data().items()}
    expected = loader_epochs(data, True)
    assert_same_epochs(getitems_dataloader(data, B, order=order_for(True)), expected)
    loader = Loader(data, B, seed=3, group_size=16)
    assert_same_epochs(getitems_dataloader(data, B, order=loader), expected)


@pytest.mark.torch
def test_torch_loops_with_their_own_order_cover_every_row():
    torch = pytest.importorskip("torch")
    from looptoolkit.bench.variants.torch import OrderSampler, per_sample_dataloader, randperm_loop

    data = {k: torch.from_numpy(v) for k, v in make_data().items()}
    assert_covers(list(per_sample_dataloader(data, B, seed=1)))
    loop = randperm_loop(data, B, seed=1)
    first, second = list(loop), list(loop)
    assert_covers(first)
    assert_covers(second)
    assert not torch.equal(first[0]["y"], second[0]["y"])
    # index_select draws the same permutations: the same batches as x[idx].
    selected = list(randperm_loop(data, B, seed=1, gather="index_select"))
    assert all(torch.equal(a["x"], b["x"]) for a, b in zip(selected, first, strict=True))
    with pytest.raises(ValueError, match="`gather` must be 'index' or 'index_select'"):
        randperm_loop(data, B, gather="take")
    sampler = OrderSampler(order_for(True), N)
    sampler.set_epoch(4)
    assert list(sampler) == epoch_indices(order_for(True), 4).tolist()
    assert len(sampler) == N


@pytest.mark.torch
@pytest.mark.slow
def test_per_sample_dataloader_with_workers_yields_the_loaders_batches():
    torch = pytest.importorskip("torch")
    from looptoolkit.bench.variants.torch import per_sample_dataloader

    data = {k: torch.from_numpy(v).clone() for k, v in make_data().items()}
    expected = loader_epochs(data, True)
    pipeline = per_sample_dataloader(
        data,
        B,
        order=order_for(True),
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context="forkserver",
    )
    assert_same_epochs(pipeline, expected)


# -- jax --------------------------------------------------------------------------


@pytest.mark.jax
@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_jax_pipelines_yield_the_loaders_batches(shuffle):
    jax = pytest.importorskip("jax")
    from looptoolkit.bench.variants.jax import host_gather_device_put, resident_gather

    data = make_data()
    jax_data = jax.device_put(data)
    expected = loader_epochs(jax_data, shuffle)
    assert_same_epochs(host_gather_device_put(data, B, order=order_for(shuffle)), expected)
    assert_same_epochs(resident_gather(data, B, order=order_for(shuffle)), expected)


@pytest.mark.jax
def test_jax_pipelines_place_batches_on_a_device_or_sharding():
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from looptoolkit.bench.variants.jax import host_gather_device_put, naive_loop, resident_gather

    mesh = Mesh(np.array(jax.devices()[:1]), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    data = make_data()
    expected = loader_epochs(jax.device_put(data), True, epochs=1)
    pipeline = host_gather_device_put(data, B, order=order_for(True), device=sharding)
    batches = list(pipeline)
    assert all(b["x"].sharding == sharding for b in batches)
    pipeline.set_epoch(0)
    assert_same_epochs(pipeline, expected)
    device = jax.devices("cpu")[0]
    batch = next(iter(resident_gather(data, B, order=order_for(True), device="cpu")))
    assert batch["x"].devices() == {device}
    assert_covers(list(naive_loop(data, B, seed=2)))


# -- tf ---------------------------------------------------------------------------


@pytest.mark.tf
@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_loader_dataset_yields_the_loaders_batches(shuffle):
    tf = pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    data = make_data()
    tf_data = {k: tf.convert_to_tensor(v) for k, v in data.items()}
    expected = loader_epochs(tf_data, shuffle)
    ds = loader_dataset(data, B, order=order_for(shuffle))
    assert int(ds.cardinality()) == len(expected[0])
    assert_same_epochs(ds, expected)
    # The default order is the Loader's for the same arguments.
    same = loader_dataset(data, B, shuffle=shuffle, seed=3, group_size=16)
    assert_same_epochs(same, expected)


@pytest.mark.tf
def test_loader_dataset_from_a_loader_and_with_drop_last():
    tf = pytest.importorskip("tensorflow")
    from looptoolkit.tf_data import loader_dataset

    data = make_data()
    loader = Loader(data, B, seed=3, group_size=16)
    expected = loader_epochs(data, True)
    assert_same_epochs(loader_dataset(data, order=loader), expected)
    other = Loader(data, B, seed=3, group_size=16)
    assert other.data is data
    assert_same_epochs(loader_dataset(other), expected)
    cut = loader_dataset(data, B, order=Order(N, B, seed=3, drop_last=True), drop_last=True)
    assert_same_epochs(cut, loader_epochs(data, True, drop_last=True))
    tuples = loader_dataset((data["x"], data["y"]), B, order=order_for(True))
    x, y = next(iter(tuples))
    assert isinstance(x, tf.Tensor) and x.shape == (B, 3) and y.shape == (B,)
    with pytest.raises(ValueError, match="`batch_size` must be >= 1"):
        loader_dataset(data)


@pytest.mark.tf
def test_classic_dataset_covers_every_row_and_reshuffles():
    pytest.importorskip("tensorflow")
    from looptoolkit.bench.variants.tf import classic_dataset

    ds = classic_dataset(make_data(), B, seed=1)
    first, second = list(ds), list(ds)
    assert_covers(first)
    assert_covers(second)
    assert not np.array_equal(first[0]["y"].numpy(), second[0]["y"].numpy())
