"""JAX sharding: global batches over a device mesh, single- and multi-process.

JAX fixes its device count when its backend starts, so every check that needs
8 devices runs in one child process started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``; each test asserts that
its own check passed there. The multi-process test starts two real JAX
processes (4 CPU devices each, ``jax.distributed`` with gloo collectives) that
each load only their share of every global batch (positions ``p::P`` of it,
``DistributedSampler``'s interleaving), assembled in process order.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from looptoolkit.distributed import drop_padding, process_positions, process_slice

pytest.importorskip("jax")

pytestmark = pytest.mark.jax

DEVICES = 8
CHILD_TIMEOUT = 240
N = 64

CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


# -- helpers run in the child --------------------------------------------------------


def _data(n: int = N) -> dict[str, Any]:
    return {
        "x": np.arange(n * 3, dtype=np.float32).reshape(n, 3),
        "idx": np.arange(n, dtype=np.int64),
        "label": np.arange(n, dtype=np.uint8) % 7,
    }


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    import jax

    devices = np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


def _batch_sharding(mesh: Any) -> Any:
    import jax

    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))


def _expected_rows(mesh: Any, rows: int) -> dict[Any, slice]:
    """Rows each device must hold when axis 0 is split over the mesh's 'data' axis."""
    data_axis = mesh.axis_names.index("data")
    blocks = mesh.devices.shape[data_axis]
    per = rows // blocks
    expected = {}
    for position, device in np.ndenumerate(mesh.devices):
        block = position[data_axis]
        expected[device] = slice(block * per, (block + 1) * per)
    return expected


def _assert_sharded_rows(array: Any, host: np.ndarray, sharding: Any, mesh: Any) -> None:
    assert array.shape == host.shape
    assert array.sharding.is_equivalent_to(sharding, array.ndim), array.sharding
    expected = _expected_rows(mesh, host.shape[0])
    shards = array.addressable_shards
    assert {s.device for s in shards} == set(mesh.devices.flat)
    for shard in shards:
        rows = expected[shard.device]
        assert shard.index[0] == rows, (shard.device, shard.index)
        np.testing.assert_array_equal(np.asarray(shard.data), host[rows])


# -- checks (run in the child with 8 devices) -----------------------------------------


@check
def check_eight_devices() -> None:
    import jax

    assert jax.device_count() == DEVICES, jax.devices()


@check
def check_to_device_1d_mesh() -> None:
    import looptoolkit as lt

    mesh = _mesh((8,), ("data",))
    sharding = _batch_sharding(mesh)
    batch = {"im": _data(32), "step": 3, "name": "train"}
    out = lt.to_device(batch, sharding)
    assert out["step"] == 3 and out["name"] == "train"
    for key, host in batch["im"].items():
        _assert_sharded_rows(out["im"][key], host, sharding, mesh)


@check
def check_to_device_2d_mesh_replicates_over_model_axis() -> None:
    import looptoolkit as lt

    mesh = _mesh((4, 2), ("data", "model"))
    sharding = _batch_sharding(mesh)
    batch = _data(32)
    out = lt.to_device(batch, sharding)
    for key, host in batch.items():
        _assert_sharded_rows(out[key], host, sharding, mesh)
    # Both devices of a mesh row hold the same 8 rows: split 4 ways, replicated 2 ways.
    rows = {}
    for shard in out["x"].addressable_shards:
        rows.setdefault((shard.index[0].start, shard.index[0].stop), []).append(shard.device)
    assert sorted(rows) == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert all(len(devices) == 2 for devices in rows.values())


@check
def check_to_device_cast_after_copy_keeps_sharding() -> None:
    import looptoolkit as lt

    mesh = _mesh((8,), ("data",))
    sharding = _batch_sharding(mesh)
    host = _data(16)["label"]
    out = lt.to_device({"label": host}, sharding, dtype={np.uint8: np.float16})["label"]
    assert out.dtype == np.float16
    _assert_sharded_rows(out, host.astype(np.float16), sharding, mesh)


@check
def check_to_device_indivisible_batch_names_the_leaf() -> None:
    import looptoolkit as lt

    sharding = _batch_sharding(_mesh((8,), ("data",)))
    try:
        lt.to_device({"im": {"x": np.zeros((6, 2), np.float32)}}, sharding)
    except lt.TransferError as e:
        assert e.path == "batch['im']['x']", e.path
        assert "6" in str(e)
    else:
        raise AssertionError("a 6-row batch was split 8 ways")


def _step_fn(sharding: Any) -> Any:
    import jax

    def step(batch: dict[str, Any]) -> tuple[Any, Any]:
        y = batch["x"] * 2.0 + batch["label"][:, None].astype(batch["x"].dtype)
        return y, y.sum()

    shardings = {"x": sharding, "idx": sharding, "label": sharding}
    replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    # keep_unused: `idx` is not read, but the compiled step must still take it as placed.
    return jax.jit(
        step,
        in_shardings=(shardings,),
        out_shardings=(sharding, replicated),
        keep_unused=True,
    )


def _assert_consumed_without_resharding(step: Any, batch: dict[str, Any], sharding: Any) -> None:
    compiled = step.lower(batch).compile()
    # The compiled step expects exactly the batch's shardings: no copy on the way in.
    (in_shardings,), _ = compiled.input_shardings
    for key, value in batch.items():
        assert in_shardings[key].is_equivalent_to(value.sharding, value.ndim), key
    # Per-device parameters are one block of rows; no row moves between devices.
    hlo = compiled.as_text()
    for op in ("all-gather", "all-to-all", "collective-permute"):
        assert op not in hlo, op
    rows = batch["x"].sharding.shard_shape(batch["x"].shape)[0]
    assert f"f32[{rows},3]" in hlo
    y, total = step(batch)
    assert y.sharding.is_equivalent_to(batch["x"].sharding, y.ndim)
    expected = np.asarray(batch["x"]) * 2 + np.asarray(batch["label"])[:, None]
    np.testing.assert_allclose(np.asarray(y), expected)
    np.testing.assert_allclose(float(total), expected.sum(), rtol=1e-6)


@check
def check_jit_step_consumes_batch_without_resharding() -> None:
    import jax

    import looptoolkit as lt

    mesh = _mesh((8,), ("data",))
    sharding = _batch_sharding(mesh)
    step = _step_fn(sharding)
    batch = lt.to_device(_data(32), sharding)
    _assert_consumed_without_resharding(step, batch, sharding)
    # Control: the same step refuses a batch placed any other way, so passing
    # above means the batch arrived in exactly the step's layout.
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    other = lt.to_device(_data(32), replicated)
    try:
        step(other)
    except ValueError as e:
        assert "does not match the sharding" in str(e), e
    else:
        raise AssertionError("jit accepted a batch with another sharding")


@check
def check_loader_yields_sharded_batches() -> None:
    import looptoolkit as lt

    for mesh in (_mesh((8,), ("data",)), _mesh((4, 2), ("data", "model"))):
        sharding = _batch_sharding(mesh)
        data = _data()
        host = list(lt.Loader(data, 16, shuffle=True, seed=4, prefetch=0))
        sharded = list(lt.Loader(data, 16, shuffle=True, seed=4, device=sharding))
        assert len(sharded) == len(host) == N // 16
        step = _step_fn(sharding)
        for got, want in zip(sharded, host, strict=True):
            for key in data:
                _assert_sharded_rows(got[key], want[key], sharding, mesh)
            _assert_consumed_without_resharding(step, got, sharding)


@check
def check_loader_mask_marks_padding_of_sharded_batches() -> None:
    import jax

    import looptoolkit as lt

    mesh = _mesh((8,), ("data",))
    sharding = _batch_sharding(mesh)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    # Masked sum of a batch, with the mask split over the mesh like the rows it marks.
    masked_sum = jax.jit(
        lambda batch, mask: jax.numpy.where(mask, batch["idx"], 0).sum(),
        in_shardings=({"x": sharding, "idx": sharding, "label": sharding}, sharding),
        out_shardings=replicated,
    )
    # 4 ranks: padded to 64 positions; 61, 62 and 63 end the last global batch, and
    # rank r takes positions r, r + 4, ...: one padding row each on ranks 1, 2, 3.
    data = _data(61)
    total = 0
    for rank in range(4):
        kwargs = {"shuffle": True, "seed": 2, "rank": rank, "world_size": 4}
        host = list(lt.Loader(data, 8, **kwargs, return_mask=True))
        sharded = list(lt.Loader(data, 8, **kwargs, device=sharding, return_mask=True))
        assert len(sharded) == len(host) == 2
        for (got, got_mask), (want, want_mask) in zip(sharded, host, strict=True):
            assert want_mask.dtype == np.bool_ and want_mask.shape == (8,)
            np.testing.assert_array_equal(np.asarray(got_mask), want_mask)
            for key in data:
                _assert_sharded_rows(got[key], want[key], sharding, mesh)
            total += int(masked_sum(got, got_mask))
        padding = sum(int((~np.asarray(m)).sum()) for _, m in host)
        assert padding == (1 if rank else 0), (rank, padding)
    assert total == sum(range(61))  # every sample once over the 4 ranks


@check
def check_loader_rejects_batches_that_do_not_split() -> None:
    import looptoolkit as lt

    sharding = _batch_sharding(_mesh((8,), ("data",)))
    try:
        lt.Loader(_data(), 12, device=sharding)
    except ValueError as e:
        assert "multiple of the 8 shards" in str(e), e
    else:
        raise AssertionError("a batch of 12 rows was accepted for 8 shards")
    try:
        lt.Loader(_data(60), 16, device=sharding)  # last batch: 12 rows
    except ValueError as e:
        assert "last batch of an epoch has 12 rows" in str(e), e
    else:
        raise AssertionError("a last batch of 12 rows was accepted for 8 shards")
    batches = list(lt.Loader(_data(60), 16, device=sharding, drop_last=True))
    assert [b["x"].shape[0] for b in batches] == [16, 16, 16]


@check
def check_loader_rejects_a_resumed_epoch_whose_last_batch_does_not_split() -> None:
    import looptoolkit as lt

    sharding = _batch_sharding(_mesh((8,), ("data",)))

    def state_after(batch_size: int) -> dict[str, Any]:
        saver = lt.Loader(_data(), batch_size, shuffle=False)  # another batch size, no device
        it = iter(saver)
        next(it)
        state = saver.state_dict()
        it.close()
        return state

    loader = lt.Loader(_data(), 16, shuffle=False, device=sharding)
    try:
        loader.load_state_dict(state_after(4))  # 60 rows left: a last batch of 12
    except ValueError as e:
        assert "resumed at offset 4 has 12 rows" in str(e), e
    else:
        raise AssertionError("a resumed epoch ending in 12 rows was accepted for 8 shards")
    loader.load_state_dict(state_after(8))  # 56 rows left: 16, 16, 16, 8
    batches = list(loader)
    assert [b["x"].shape[0] for b in batches] == [16, 16, 16, 8]
    assert np.concatenate([np.asarray(b["idx"]) for b in batches]).tolist() == list(range(8, N))


def _simulated_global_batch(
    local_batches: list[dict[str, Any]], sharding: Any, global_rows: int
) -> dict[str, Any]:
    """What ``make_array_from_process_local_data`` builds across P processes.

    Process p owns the devices of mesh block p (devices ``[p*8/P, (p+1)*8/P)``),
    which hold rows ``process_slice(G, p, P)`` of the global arrays; each device
    takes its rows from its own process's batch only.
    """
    import jax

    count = len(local_batches)
    devices = list(sharding.mesh.devices.flat)
    per_process = len(devices) // count
    out = {}
    for key in local_batches[0]:
        shape = (global_rows, *local_batches[0][key].shape[1:])
        pieces = []
        for device, index in sharding.devices_indices_map(shape).items():
            process = devices.index(device) // per_process
            lo = process_slice(global_rows, process, count).start
            rows = index[0]
            local = np.asarray(local_batches[process][key])
            pieces.append(jax.device_put(local[rows.start - lo : rows.stop - lo], device))
        out[key] = jax.make_array_from_single_device_arrays(shape, sharding, pieces)
    return out


def _assembled_positions(global_rows: int, count: int) -> np.ndarray:
    """Row ``q`` of a global batch assembled from ``count`` processes holds this position."""
    return np.concatenate(
        [np.arange(global_rows)[process_positions(global_rows, p, count)] for p in range(count)]
    )


@check
def check_process_local_loading_assembles_the_global_batch() -> None:
    import looptoolkit as lt

    mesh = _mesh((8,), ("data",))
    sharding = _batch_sharding(mesh)
    step = _step_fn(sharding)
    data = _data()
    global_rows = 16
    reference = list(lt.Loader(data, global_rows, shuffle=True, seed=9, drop_last=True))
    for count in (1, 2, 4):
        per_process = [
            list(
                lt.Loader(
                    data,
                    global_rows // count,
                    shuffle=True,
                    seed=9,
                    drop_last=True,
                    rank=p,
                    world_size=count,
                )
            )
            for p in range(count)
        ]
        for p, batches in enumerate(per_process):
            assert len(batches) == len(reference), (count, p)
        assembled = _assembled_positions(global_rows, count)
        for i, want in enumerate(reference):
            # Each process loaded only its own positions of global batch i ...
            for p in range(count):
                positions = process_positions(global_rows, p, count)
                for key in data:
                    np.testing.assert_array_equal(per_process[p][i][key], want[key][positions])
            # ... and the global array built from them holds global batch i, the
            # processes' rows one block after another.
            got = _simulated_global_batch([b[i] for b in per_process], sharding, global_rows)
            for key in data:
                _assert_sharded_rows(got[key], want[key][assembled], sharding, mesh)
            _assert_consumed_without_resharding(step, got, sharding)


def run_checks(out: str) -> None:
    """Child entry point: run every check, write ``{name: "ok" | traceback}``."""
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
        except BaseException:
            results[name] = traceback.format_exc()
        else:
            results[name] = "ok"
    Path(out).write_text(json.dumps(results))


# -- parent side -------------------------------------------------------------------


def _child_env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _run_this_module(call: str, devices: int) -> subprocess.Popen[str]:
    code = (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('jax_sharding_checks', {__file__!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        f"module.{call}\n"
    )
    return subprocess.Popen(
        [sys.executable, "-W", "error", "-c", code],
        env=_child_env(devices),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _communicate(proc: subprocess.Popen[str]) -> str:
    try:
        output, _ = proc.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise AssertionError(f"child timed out after {CHILD_TIMEOUT} s:\n{output}") from None
    return output


@pytest.fixture(scope="module")
def child_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("jax_sharding") / "results.json"
    output = _communicate(_run_this_module(f"run_checks({str(out)!r})", DEVICES))
    assert out.exists(), output
    results: dict[str, str] = json.loads(out.read_text())
    assert set(results) == set(CHECKS), output
    return results


def _passed(results: dict[str, str], name: str) -> None:
    if results[name] != "ok":
        pytest.fail(f"{name} failed in the {DEVICES}-device child:\n{results[name]}")


def test_child_has_eight_devices(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_eight_devices")


def test_to_device_named_sharding_1d_mesh(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_to_device_1d_mesh")


def test_to_device_named_sharding_2d_mesh(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_to_device_2d_mesh_replicates_over_model_axis")


def test_to_device_cast_after_copy_keeps_sharding(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_to_device_cast_after_copy_keeps_sharding")


def test_to_device_indivisible_batch_names_the_leaf(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_to_device_indivisible_batch_names_the_leaf")


def test_jit_step_consumes_batch_without_resharding(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_jit_step_consumes_batch_without_resharding")


def test_loader_with_sharding_yields_sharded_batches(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_loader_yields_sharded_batches")


def test_loader_mask_marks_padding_of_sharded_batches(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_loader_mask_marks_padding_of_sharded_batches")


def test_loader_rejects_batches_that_do_not_split(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_loader_rejects_batches_that_do_not_split")


def test_loader_rejects_a_resumed_epoch_whose_last_batch_does_not_split(
    child_results: dict[str, str],
) -> None:
    _passed(child_results, "check_loader_rejects_a_resumed_epoch_whose_last_batch_does_not_split")


def test_process_local_loading_assembles_global_batch(child_results: dict[str, str]) -> None:
    _passed(child_results, "check_process_local_loading_assembles_the_global_batch")


def test_process_slice_arithmetic() -> None:
    for count in (1, 2, 4):
        slices = [process_slice(16, p, count) for p in range(count)]
        assert slices[0].start == 0 and slices[-1].stop == 16
        assert all(a.stop == b.start for a, b in itertools.pairwise(slices))
        assert {s.stop - s.start for s in slices} == {16 // count}
        positions = [np.arange(16)[process_positions(16, p, count)] for p in range(count)]
        assert [len(x) for x in positions] == [16 // count] * count
        assert sorted(np.concatenate(positions).tolist()) == list(range(16))
        assert positions[-1][0] == count - 1
    for helper in (process_slice, process_positions):
        with pytest.raises(ValueError, match="multiple of the process count 4, got 6"):
            helper(6, 0, 4)
        with pytest.raises(ValueError, match=r"`process_index` must be in \[0, 2\), got 2"):
            helper(8, 2, 2)


def test_process_positions_match_the_loader() -> None:
    # Process p's batch i is positions p::P of the one-process batch i, for any batch size.
    import looptoolkit as lt

    data = _data(61)
    for count, global_rows in ((1, 8), (2, 8), (4, 16), (4, 8)):
        reference = list(lt.Loader(data, global_rows, seed=3, drop_last=True))
        for p in range(count):
            local = list(
                lt.Loader(
                    data, global_rows // count, seed=3, drop_last=True, rank=p, world_size=count
                )
            )
            assert len(local) == len(reference)
            positions = process_positions(global_rows, p, count)
            for got, want in zip(local, reference, strict=True):
                np.testing.assert_array_equal(got["idx"], want["idx"][positions])


def test_drop_padding_keeps_real_rows() -> None:
    batch = {"x": np.arange(8).reshape(4, 2), "meta": ("a", np.arange(4))}
    mask = np.array([True, False, True, False])
    out = drop_padding(batch, mask)
    np.testing.assert_array_equal(out["x"], [[0, 1], [4, 5]])
    np.testing.assert_array_equal(out["meta"][1], [0, 2])
    assert out["meta"][0] == "a"
    with pytest.raises(ValueError, match="1-D boolean"):
        drop_padding(batch, np.array([1, 0, 1, 0]))


# -- multi-process JAX -------------------------------------------------------------

PROCESSES = 2
GLOBAL_ROWS = 16


def multiprocess_worker(process_id: int, port: int, out: str) -> None:
    """One of PROCESSES real JAX processes: load its share, assemble, step, report."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        f"127.0.0.1:{port}",
        num_processes=PROCESSES,
        process_id=process_id,
        initialization_timeout=60,
    )
    try:
        import looptoolkit as lt
        from looptoolkit.distributed import global_batch, process_rows

        mesh = jax.make_mesh((jax.device_count(),), ("data",))
        sharding = _batch_sharding(mesh)
        rows = process_slice(GLOBAL_ROWS)
        loader = lt.Loader(
            _data(),
            GLOBAL_ROWS // jax.process_count(),
            shuffle=True,
            seed=11,
            drop_last=True,
            rank=jax.process_index(),
            world_size=jax.process_count(),
        )
        step = _step_fn(sharding)
        report: dict[str, Any] = {
            "process_index": jax.process_index(),
            "process_count": jax.process_count(),
            "devices": [jax.device_count(), jax.local_device_count()],
            "rows": [rows.start, rows.stop],
            "mesh_rows": [
                process_rows(sharding, GLOBAL_ROWS).start,
                process_rows(sharding, GLOBAL_ROWS).stop,
            ],
            "batches": [],
        }
        for local in loader:
            batch = global_batch(local, sharding)
            assert batch["x"].shape == (GLOBAL_ROWS, 3)
            assert not batch["x"].is_fully_addressable
            _, total = step(batch)  # a cross-process reduction
            shards = {
                str(s.index[0].start): np.asarray(s.data).tolist()
                for s in batch["idx"].addressable_shards
            }
            report["batches"].append(
                {
                    "local_idx": np.asarray(local["idx"]).tolist(),
                    "shards": shards,
                    "total": float(total),
                }
            )
        Path(out).write_text(json.dumps(report))
    finally:
        jax.distributed.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
def test_multiprocess_jax_each_process_loads_its_share(tmp_path: Path) -> None:
    port = _free_port()
    outs = [tmp_path / f"process{p}.json" for p in range(PROCESSES)]
    procs = [
        _run_this_module(f"multiprocess_worker({p}, {port}, {str(outs[p])!r})", DEVICES // 2)
        for p in range(PROCESSES)
    ]
    outputs = [_communicate(proc) for proc in procs]
    for proc, output in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output
    reports = [json.loads(out.read_text()) for out in outs]

    import looptoolkit as lt

    data = _data()
    reference = list(lt.Loader(data, GLOBAL_ROWS, shuffle=True, seed=11, drop_last=True))
    assembled = _assembled_positions(GLOBAL_ROWS, PROCESSES)
    for p, report in enumerate(reports):
        assert report["process_index"] == p and report["process_count"] == PROCESSES
        assert report["devices"] == [DEVICES, DEVICES // PROCESSES]
        rows = process_slice(GLOBAL_ROWS, p, PROCESSES)
        assert report["rows"] == report["mesh_rows"] == [rows.start, rows.stop]
        assert len(report["batches"]) == len(reference)
        positions = process_positions(GLOBAL_ROWS, p, PROCESSES)
        for got, want in zip(report["batches"], reference, strict=True):
            assert got["local_idx"] == want["idx"][positions].tolist()
            # This process's devices hold its own rows, block p of the global arrays.
            per_device = GLOBAL_ROWS // DEVICES
            assert sorted(int(k) for k in got["shards"]) == list(
                range(rows.start, rows.stop, per_device)
            )
            for start, values in got["shards"].items():
                start = int(start)
                assert values == want["idx"][assembled[start : start + per_device]].tolist()
            expected = want["x"] * 2 + want["label"][:, None]
            assert got["total"] == pytest.approx(float(expected.sum()))


# -- the documented example ----------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "distributed_jax.py"


def _example(args: list[str], devices: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), *args],
        env=_child_env(devices),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _loss(output: str, line_start: str) -> float:
    for line in output.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit("loss ", 1)[1])
    raise AssertionError(f"no line starting {line_start!r} in:\n{output}")


@pytest.mark.slow
def test_documented_jax_example_runs_on_one_and_two_processes() -> None:
    single = _example([], DEVICES)
    output = _communicate(single)
    assert single.returncode == 0, output
    one = _loss(
        output, "process 0/1: loaded positions 0::1 of each global batch of 64 (rows [0, 64)"
    )

    port = _free_port()
    procs = [
        _example(
            ["--processes", "2", "--process-id", str(p), "--coordinator", f"127.0.0.1:{port}"],
            DEVICES // 2,
        )
        for p in range(2)
    ]
    outputs = [_communicate(proc) for proc in procs]
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out
    two = [
        _loss(
            outputs[p],
            f"process {p}/2: loaded positions {p}::2 of each global batch of 64 "
            f"(rows [{32 * p}, {32 * (p + 1)}) of the global arrays)",
        )
        for p in range(2)
    ]
    # The same samples in every global batch (in another row order): the same training
    # at any process count, up to float rounding.
    assert two[0] == two[1] == pytest.approx(one, rel=1e-3)


def test_global_batch_on_one_process_places_the_whole_batch() -> None:
    import jax

    from looptoolkit.distributed import global_batch, process_rows

    mesh = jax.make_mesh((1,), ("data",))
    sharding = _batch_sharding(mesh)
    batch = {"im": _data(8), "step": 3}
    out = global_batch(batch, sharding)
    assert out["step"] == 3
    for key, host in batch["im"].items():
        assert out["im"][key].sharding.is_equivalent_to(sharding, host.ndim)
        np.testing.assert_array_equal(np.asarray(out["im"][key]), host)
    assert process_rows(sharding, 8) == process_slice(8) == slice(0, 8)


def test_global_batch_names_a_leaf_of_another_framework() -> None:
    import jax

    torch = pytest.importorskip("torch")
    from looptoolkit.distributed import global_batch

    sharding = _batch_sharding(jax.make_mesh((1,), ("data",)))
    with pytest.raises(TypeError, match=r"batch\['t'\] is a torch array"):
        global_batch({"x": np.zeros(4), "t": torch.zeros(4)}, sharding)
