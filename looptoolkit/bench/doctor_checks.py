"""The checks of ``looptoolkit doctor``: host checks that run everywhere, GPU checks per backend.

Every check is written against the public API (``Loader``, ``to_device``,
``normalize``) and compares what it gets with plain NumPy, so it is right by
construction: a check returns a short detail (what it measured) or raises
``CheckFailed`` saying what differed. The torch CUDA checks take a ``CudaKit``
(the device, a queued device-side sleep, reserved memory); a kit with
``device="cpu"`` runs the same code on the host.
"""

from __future__ import annotations

import time
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from looptoolkit import Loader, normalize, to_device

__all__ = ["Check", "CheckFailed", "CudaKit", "cuda_checks", "gpu_loader_check", "host_checks"]

N, B = 1000, 64  # rows and batch size of every check's data: each Loader check is ~16 batches


class CheckFailed(AssertionError):
    """A check saw something other than what it expected."""


@dataclass
class Check:
    """One check: ``section`` (``host``, ``cuda``, ``jax-gpu``, ``tf-gpu``), a name, what it checks.

    ``run()`` returns a short detail, or raises ``CheckFailed`` (any other exception
    is an error of the check).
    """

    section: str
    name: str
    text: str
    run: Callable[[], str]
    backend: str = "numpy"


def _data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((N, 5)).astype(np.float32),
        "ids": np.arange(N, dtype=np.int64),
        "im": rng.integers(0, 256, (N, 3, 2, 2), dtype=np.uint8),
    }


def _rows(data: dict[str, np.ndarray], loader: Loader, epoch: int) -> list[dict[str, np.ndarray]]:
    """What every batch of ``epoch`` must be: NumPy rows of ``loader.indices(epoch)``."""
    order = loader.indices(epoch)
    return [{k: v[order[i : i + B]] for k, v in data.items()} for i in range(0, len(order), B)]


def _same(got: list[Any], want: list[dict[str, np.ndarray]], what: str, atol: float = 0) -> None:
    if len(got) != len(want):
        raise CheckFailed(f"{what}: {len(got)} batches, expected {len(want)}.")
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        for key, value in w.items():
            mine = np.asarray(g[key], dtype=np.float64 if atol else None)
            if mine.shape != value.shape or not np.allclose(mine, value, rtol=0, atol=atol):
                raise CheckFailed(f"{what}: batch {k}, key {key!r} differs from NumPy.")


# -- host checks -------------------------------------------------------------------------


def _to_backend(name: str, module: Any) -> Callable[[np.ndarray], Any]:
    """Arrays of backend ``name`` on the host, from NumPy (never on a GPU)."""
    if name == "torch":
        return module.from_numpy
    if name == "jax":
        cpu = module.devices("cpu")[0]
        return lambda a: module.device_put(a, cpu)
    if name == "tf":

        def convert(a: np.ndarray) -> Any:
            with module.device("/CPU:0"):
                return module.identity(module.convert_to_tensor(a))

        return convert
    return np.asarray


def _loader_matches_numpy(name: str, module: Any) -> str:
    data = _data(1)
    convert = _to_backend(name, module)
    leaves = {k: convert(v) for k, v in data.items()}
    loader = Loader(leaves, B, seed=3)
    for epoch in range(2):
        _same(list(loader), _rows(data, loader, epoch), f"{name} epoch {epoch}")
    kinds = {type(v).__name__ for v in next(iter(loader)).values()}
    return (
        f"2 epochs of {len(loader)} batches equal NumPy's; batches are {', '.join(sorted(kinds))}"
    )


def _modes_equal() -> str:
    data = _data(2)
    cast = {np.float32: np.float64}  # a real move, issued ahead of the loop
    loaders = {
        mode: Loader(data, B, seed=5, device="cpu", dtype=cast, prefetch=2, prefetch_mode=mode)
        for mode in ("inline", "thread")
    }
    loaders["off"] = Loader(data, B, seed=5, device="cpu", dtype=cast, prefetch=0)
    for epoch in range(2):
        want = _rows(data, loaders["off"], epoch)
        for mode, loader in loaders.items():
            _same(list(loader), want, f"prefetch {mode}, epoch {epoch}")
    return "inline, thread and prefetch=0 equal NumPy over 2 epochs"


def _resume_exact() -> str:
    data = _data(3)
    rng = np.random.default_rng(int(time.time()))
    stops = []
    for world_size in (1, 2):
        kwargs: dict[str, Any] = {"rank": world_size - 1, "world_size": world_size, "prefetch": 2}
        loader = Loader(data, B, seed=7, **kwargs)
        want = _rows(data, loader, 0)
        # Within the epoch: a pass run to its end moves on to the next epoch (its state is
        # the next epoch's start), which is not what this check compares.
        stop = int(rng.integers(0, len(loader)))
        stops.append(stop)
        it = iter(loader)
        head = [next(it) for _ in range(stop)]
        state = loader.state_dict()
        it.close()
        resumed = Loader(data, B, seed=7, **kwargs)
        resumed.load_state_dict(state)
        _same(head + list(resumed), want, f"resumed after batch {stop} of {world_size} rank(s)")
    return f"resumed after batches {stops} (1 and 2 ranks): exactly the rest"


Pair = namedtuple("Pair", "a b")


def _round_trip() -> str:
    data = _data(4)
    tree = {"z": [Pair(data["x"], data["ids"])], "a": OrderedDict(im=data["im"]), "n": 3}
    out = to_device(tree, "cpu")
    if list(out) != ["z", "a", "n"] or type(out["z"][0]) is not Pair or out["n"] != 3:
        raise CheckFailed("to_device(tree, 'cpu') did not keep the tree's containers.")
    if type(out["a"]) is not OrderedDict or not np.array_equal(out["a"]["im"], data["im"]):
        raise CheckFailed("to_device(tree, 'cpu') changed a leaf.")
    half = to_device(tree, "cpu", dtype={np.float32: np.float16})["z"][0].a
    if half.dtype != np.float16 or not np.allclose(half, data["x"], atol=1e-2):
        raise CheckFailed("to_device(tree, 'cpu', dtype=...) cast wrongly.")
    return "containers, values and a float16 cast kept"


def host_checks(backends: dict[str, Any]) -> list[Check]:
    """The checks that run on every machine; ``backends``: installed name -> module."""
    checks = [
        Check(
            "host",
            f"loader-{name}",
            f"Loader batches on {name} data equal NumPy's",
            partial(_loader_matches_numpy, name, module),
            name,
        )
        for name, module in backends.items()
    ]
    return [
        *checks,
        Check("host", "prefetch-modes", "prefetch modes equal NumPy's batches", _modes_equal),
        Check("host", "resume", "a resumed Loader yields exactly the rest", _resume_exact),
        Check("host", "to-device-cpu", 'to_device(tree, "cpu") round trip', _round_trip),
    ]


# -- GPU checks ----------------------------------------------------------------------------


def gpu_loader_check(section: str, backend: str, device: Any) -> Check:
    """A prefetched, cast, transformed Loader to ``device`` equals the host Loader's batches."""

    def run() -> str:
        data = _data(5)
        tf = normalize([100.0] * 3, [50.0] * 3, key="im")
        host = list(Loader(data, B, seed=3, transform=tf))
        got = list(
            Loader(
                data,
                B,
                seed=3,
                device=device,
                prefetch=2,
                transform=tf,
                dtype={np.float32: np.float16},
            )
        )
        want = [{k: np.asarray(v, np.float64) for k, v in h.items()} for h in host]
        _same(
            [{k: np.asarray(v, np.float64) for k, v in g.items()} for g in got], want, "gpu", 1e-2
        )
        return f"{len(got)} batches equal the host Loader's"

    return Check(
        section, f"loader-{section}", f"cast, transformed Loader to {device}", run, backend
    )


class CudaKit:
    """What the torch CUDA checks need from the device; ``device="cpu"`` runs them on the host.

    Args:
        torch: the torch module.
        device: ``"cuda:k"`` (the current device's index, resolved by the caller), or ``"cpu"``.
    """

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.device = device
        self.cuda = device.startswith("cuda")
        self._cycles_per_ms = 0.0
        if self.cuda:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda._sleep(1_000_000)  # warm up
            start.record()
            torch.cuda._sleep(10_000_000)
            end.record()
            end.synchronize()
            self._cycles_per_ms = 10_000_000 / max(start.elapsed_time(end), 1e-3)

    def sleep(self, ms: float) -> None:
        """Queue ``ms`` of device work on the current stream (returns at once on CUDA)."""
        if self.cuda:
            self.torch.cuda._sleep(int(ms * self._cycles_per_ms))

    def synchronize(self) -> None:
        """Wait for the device."""
        if self.cuda:
            self.torch.cuda.synchronize()

    def reserved(self) -> int:
        """Bytes the caching allocator holds (0 on the host)."""
        return int(self.torch.cuda.memory_reserved(self.device)) if self.cuda else 0

    def pinned(self, array: np.ndarray) -> Any:
        """A page-locked torch copy of ``array`` (a plain one on the host)."""
        return self.torch.tensor(array).pin_memory() if self.cuda else self.torch.tensor(array)


def _numpy(x: Any) -> np.ndarray:
    return np.asarray(x.detach().cpu().float().numpy() if hasattr(x, "detach") else x)


def _cuda_equal(kit: CudaKit) -> str:
    data = _data(6)
    data.update({f"f{i}": data["x"][:, i : i + 1].copy() for i in range(4)})  # packed leaves
    tf = normalize([100.0] * 3, [50.0] * 3, key="im")
    host = list(Loader(data, B, seed=3, transform=tf))
    loader = Loader(
        data, B, seed=3, device=kit.device, prefetch=2, transform=tf, dtype={np.float32: np.float16}
    )
    got = [{k: _numpy(v) for k, v in b.items()} for b in loader]
    want = [{k: np.asarray(v, np.float64) for k, v in h.items()} for h in host]
    _same(got, want, "staged, cast, transformed", atol=1e-2)
    return f"{len(got)} batches equal the host Loader's"


def _cuda_skipped(kit: CudaKit) -> str:
    data = _data(7)
    loader = Loader(data, B, seed=5, device=kit.device, prefetch=2, skip_keys=["ids"])
    want = _rows(data, loader, 0)
    got = list(loader)  # kept while later batches are made: a reused buffer would show
    kinds = {type(b["ids"]).__name__ for b in got}
    if kinds != {"ndarray"}:
        raise CheckFailed(f"skipped leaves came back as {sorted(kinds)}, not NumPy arrays.")
    _same([{"ids": b["ids"]} for b in got], [{"ids": w["ids"]} for w in want], "skipped ids")
    return f"{len(got)} batches kept: ids are NumPy and their own"


def _cuda_stream_order(kit: CudaKit) -> str:
    torch = kit.torch
    data = _data(8)
    x = torch.zeros(N, 5, device=kit.device)
    scale = torch.ones(1, device=kit.device)

    def scaled(batch: dict[str, Any]) -> dict[str, Any]:
        return {**batch, "s": batch["x"] * scale}  # reads a tensor the step writes

    loader = Loader({"x": x, "im": data["im"]}, B, seed=5, device=kit.device, transform=scaled)
    for _ in loader:
        pass
    kit.synchronize()
    kit.sleep(200)  # the step: queued on the loop's stream, writes after a while
    x.fill_(1.0)
    scale.fill_(2.0)
    stale = 0
    for batch in loader:  # host uint8 leaves too: the staged copies run beside the gathers
        stale += int((_numpy(batch["x"]) != 1).any() or (_numpy(batch["s"]) != 2).any())
    if stale:
        raise CheckFailed(f"{stale} of {len(loader)} batches read data before the step wrote it.")
    return f"{len(loader)} batches saw what the step wrote"


def _cuda_memory(kit: CudaKit) -> str:
    data = {"im": np.zeros((2048, 3, 32, 32), np.uint8), "y": np.arange(2048)}
    tf = normalize([127.5] * 3, [127.5] * 3, key="im")
    loader = Loader(data, 256, device=kit.device, prefetch=2, transform=tf)
    reserved = []
    for _ in range(6):
        for _batch in loader:
            pass
        kit.synchronize()
        reserved.append(kit.reserved())
    batch_bytes = 256 * 3 * 32 * 32 * (1 + 4)  # the uint8 copy and its float32 result
    if reserved[-1] > reserved[1] + batch_bytes:
        mib = [round(r / 2**20, 1) for r in reserved]
        raise CheckFailed(f"reserved memory grew over 6 epochs: {mib} MiB.")
    return f"reserved after epochs 2..6: {[round(r / 2**20, 1) for r in reserved[1:]]} MiB"


def _cuda_overlap(kit: CudaKit) -> str:
    batch = {"im": kit.pinned(np.ones((256, 3, 64, 64), np.uint8))}
    kit.synchronize()
    kit.sleep(200)  # a step queued on the loop's stream
    start = time.perf_counter()
    out = to_device(batch, kit.device)
    queued_ms = (time.perf_counter() - start) * 1e3
    kit.synchronize()
    if not np.array_equal(_numpy(out["im"]), np.ones((256, 3, 64, 64))):
        raise CheckFailed("the pinned batch arrived with other values.")
    if queued_ms > 50:
        raise CheckFailed(f"to_device of a pinned batch waited {queued_ms:.0f} ms for the step.")
    return f"to_device returned after {queued_ms:.1f} ms behind a queued 200 ms step"


def _cuda_ragged(kit: CudaKit) -> str:
    from looptoolkit import PackLayout, Ragged

    rng = np.random.default_rng(9)
    lengths = rng.integers(1, 100, N)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    data = {
        "ids": Ragged(kit.torch.from_numpy(rng.integers(0, 50_000, offsets[-1])), offsets),
        "doc": np.arange(N),
    }
    batches = 0
    layouts: tuple[tuple[Any, int], ...] = (("pad", B), ("flat", B), (PackLayout(seq_len=256), 4))
    for layout, size in layouts:
        host = list(Loader(data, size, seed=2, layout=layout))
        got = list(Loader(data, size, seed=2, layout=layout, device=kit.device, prefetch=2))
        if len(got) != len(host):
            raise CheckFailed(
                f"{layout}: {len(got)} batches on the device, {len(host)} on the host."
            )
        for g, h in zip(got, host, strict=True):  # all kept: a reused buffer would show
            fields = [f for f in h["ids"]._fields if not isinstance(getattr(h["ids"], f), int)]
            _same(
                [{f: _numpy(getattr(g["ids"], f)) for f in fields} | {"doc": _numpy(g["doc"])}],
                [{f: getattr(h["ids"], f) for f in fields} | {"doc": h["doc"]}],
                f"{layout} batches",
            )
        batches += len(got)
    return f"{batches} padded, flat and packed batches equal the host Loader's"


def _cuda_blocks(kit: CudaKit) -> str:
    data = _data(10)
    loader = Loader(data, B, seed=4, device=kit.device, stats=True)
    kept = []
    for epoch in range(2):  # the pinned blocks are reused; the device blocks of kept batches not
        want = _rows(data, loader, epoch)
        got = []
        for batch in loader:
            kit.sleep(0.2)  # a step queued behind each batch: the next blocks' copies run ahead
            got.append(batch)
        kept.append((got, want))
    kit.synchronize()
    for epoch, (got, want) in enumerate(kept):
        _same([{k: _numpy(v) for k, v in b.items()} for b in got], want, f"epoch {epoch}, kept")
    k = loader.stats.block_batches
    if kit.cuda and k < 2:
        raise CheckFailed(f"batches were moved one at a time (block_batches {k}), not in blocks.")
    return f"{sum(len(g) for g, _ in kept)} batches kept over 2 epochs equal NumPy's (K = {k})"


def cuda_checks(kit: CudaKit) -> list[Check]:
    """The seven torch CUDA checks, on ``kit``'s device."""
    named = [
        ("loader-cuda", "staged, cast, transformed Loader equals the host's", _cuda_equal),
        ("skip-keys", "skipped leaves stay NumPy arrays of their own batch", _cuda_skipped),
        ("stream-order", "gathers and the transform see what the step wrote", _cuda_stream_order),
        ("memory", "reserved memory does not grow over six epochs", _cuda_memory),
        ("overlap", "a pinned to_device does not wait for a queued step", _cuda_overlap),
        ("ragged", "padded, flat and packed batches equal the host's", _cuda_ragged),
        ("blocks", "batches kept from block uploads keep their values", _cuda_blocks),
    ]
    return [Check("cuda", name, text, partial(fn, kit), "torch") for name, text, fn in named]
