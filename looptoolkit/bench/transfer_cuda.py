"""The CUDA sections of ``looptoolkit transfer``, and transfer by batch size.

With a CUDA device (torch): pageable vs pinned transfer of the ``images`` batch, copy-then-cast vs
cast-then-copy, and one large pinned copy as the bandwidth reference; packed vs per-leaf transfer of
the ``nested`` tree; every row timed with CUDA events after its output is checked.
[`by_batch_size`][looptoolkit.bench.transfer_cuda.by_batch_size] times an ``images`` batch to
float16 by batch size, uint8 copied then cast against cast then copied (``looptoolkit compare``
shows it on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from looptoolkit.bench.timing import CudaEventClock, HostClock, interleave
from looptoolkit.bench.transfer_sections import images_batch, nested, row, timed

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["by_batch_size", "cuda_sections"]

MIB = 1024 * 1024


def cuda_sections(rounds: int, ref_mib: int, progress: Progress | None = None) -> dict[str, Any]:
    """With CUDA: real transfers, timed with CUDA events, and the bandwidth reference."""
    import optree
    import torch

    from looptoolkit import to_device

    cuda = torch.device("cuda", torch.cuda.current_device())
    batch = images_batch()
    pageable = {k: torch.from_numpy(v) for k, v in batch.items()}
    pinned = {k: v.pin_memory() for k, v in pageable.items()}
    image_bytes = pageable["image"].nbytes
    batch_bytes = image_bytes + pageable["label"].nbytes
    reference = torch.empty(ref_mib * MIB, dtype=torch.uint8, pin_memory=True)
    expected16 = pageable["image"].to(torch.float16)

    images: list[tuple[str, Callable[[], Any]]] = [
        (
            f"reference: one pinned {ref_mib} MiB .to(cuda, non_blocking=True)",
            lambda: reference.to(cuda, non_blocking=True),
        ),
        ("pageable uint8 image .to(cuda)", lambda: pageable["image"].to(cuda)),
        (
            "pinned uint8 image .to(cuda, non_blocking=True)",
            lambda: pinned["image"].to(cuda, non_blocking=True),
        ),
        ("to_device(pinned batch, 'cuda')", lambda: to_device(pinned, "cuda")),
        ("to_device(pageable batch, 'cuda')", lambda: to_device(pageable, "cuda")),
        (
            "cast-then-copy: image.half() on host, then .to(cuda)",
            lambda: pinned["image"].to(torch.float16).to(cuda),
        ),
        (
            "copy-then-cast: pinned uint8 .to(cuda), .half() on device",
            lambda: pinned["image"].to(cuda, non_blocking=True).to(torch.float16),
        ),
        (
            "to_device(pinned batch, 'cuda', dtype={uint8: float16})",
            lambda: to_device(pinned, "cuda", dtype={np.uint8: np.float16}),
        ),
    ]
    out = images[7][1]()
    torch.cuda.synchronize()
    if not torch.equal(out["image"].cpu(), expected16):
        raise AssertionError("to_device to cuda with a dtype mapping gave wrong values.")
    if not torch.equal(images[3][1]()["image"].cpu(), pageable["image"]):
        raise AssertionError("to_device to cuda gave wrong values.")
    image_rows = timed(
        images, rounds=rounds, label="images, cuda", progress=progress, clock=CudaEventClock()
    )
    sizes = [
        ref_mib * MIB,
        image_bytes,
        image_bytes,
        batch_bytes,
        batch_bytes,
        image_bytes,
        image_bytes,
        batch_bytes,
    ]
    ref_bw = sizes[0] / image_rows[0].median
    image_out = [
        row(t, bytes=n, gb_per_s=n / t.median / 1e9, of_reference=n / t.median / ref_bw)
        for t, n in zip(image_rows, sizes, strict=True)
    ]

    tt = optree.tree_map(torch.from_numpy, nested())
    want = optree.tree_leaves(tt)
    tree_rows: list[tuple[str, Callable[[], Any]]] = [
        (
            "per-leaf: to_device(tree, 'cuda', pack=False)",
            lambda: to_device(tt, "cuda", pack=False),
        ),
        ("packed: to_device(tree, 'cuda')", lambda: to_device(tt, "cuda")),
        (
            "optree.tree_map(lambda t: t.to(cuda), tree)",
            lambda: optree.tree_map(lambda t: t.to(cuda), tt),
        ),
    ]
    for name, fn in tree_rows:
        got = optree.tree_leaves(fn())
        torch.cuda.synchronize()
        if not all(torch.equal(a.cpu(), b) for a, b in zip(got, want, strict=True)):
            raise AssertionError(f"{name}: values differ.")
    nested_rows = timed(
        tree_rows, rounds=rounds, label="nested, cuda", progress=progress, clock=CudaEventClock()
    )
    t = {r.name: r.median for r in image_rows}
    return {
        "device": torch.cuda.get_device_name(cuda),
        "images": image_out,
        "nested": [row(r) for r in nested_rows],
        "ratios": {
            "to_device(pinned batch) bandwidth / reference": image_out[3]["of_reference"],
            "pinned image copy bandwidth / reference": image_out[2]["of_reference"],
            "cast-then-copy / copy-then-cast (to_device)": t[images[5][0]] / t[images[7][0]],
            "per-leaf / packed (nested)": nested_rows[0].median / nested_rows[1].median,
        },
        "values": {
            "cuda:bandwidth-share": image_out[3]["of_reference"],
            "cuda:cast-then-copy": t[images[5][0]],
            "cuda:copy-then-cast": t[images[7][0]],
            "cuda:per-leaf": nested_rows[0].median,
            "cuda:packed": nested_rows[1].median,
        },
    }


def by_batch_size(
    device: str, quick: bool, seed: int, progress: Progress | None = None
) -> dict[str, Any]:
    """Time moving an ``images`` batch to float16 by batch size: uint8 then cast, vs cast then copy.

    On a GPU these are the real host-to-device copy of 1 or 2 bytes per pixel,
    with the cast on either side of it (the batch gathered into pinned memory,
    as the Loader's staging is); on the CPU there is no bus to cross, and both
    paths are the host cast.
    """
    from looptoolkit.device import to_device

    sizes = [8, 32] if quick else [16, 32, 64, 128, 256, 512, 1024]
    reps = 3 if quick else 15
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (max(sizes) * 2, 3, 64, 64), dtype=np.uint8)
    target: Any = "cpu"
    sync: Callable[[], None] | None = None

    def buffer(size: int) -> np.ndarray:
        return np.empty((size, 3, 64, 64), dtype=np.uint8)

    if device != "cpu":
        import torch

        target = torch.device(device)
        sync = torch.cuda.synchronize

        def buffer(size: int) -> np.ndarray:
            return torch.empty((size, 3, 64, 64), dtype=torch.uint8).pin_memory().numpy()

    policy = {np.uint8: np.float16}
    paths: dict[str, Callable[[np.ndarray], Any]] = {
        "uint8 copy, cast on the device": lambda b: to_device(b, target, dtype=policy),
        "cast to float16, then copy": lambda b: to_device(b.astype(np.float16), target),
    }
    if device != "cpu":
        paths["uint8 copy, no cast"] = lambda b: to_device(b, target)
    results: dict[str, list[float]] = {name: [] for name in paths}
    for size in sizes:
        idx = np.sort(rng.choice(len(pool), size, replace=False))
        batch = buffer(size)
        np.take(pool, idx, axis=0, out=batch)
        calls = [(name, (lambda fn=fn, b=batch: fn(b))) for name, fn in paths.items()]
        timings = interleave(
            calls,
            rounds=reps,
            warmup=1,
            clock=HostClock(sync),
            progress=progress,
            label=f"images batch of {size}",
        )
        for t in timings:
            results[t.name].append(t.median * 1e3)
    return {
        "device": device,
        "batch_sizes": sizes,
        "bytes_per_image_uint8": 3 * 64 * 64,
        "ms_per_batch": results,
        "note": "host cast only (no bus on CPU)" if device == "cpu" else "host-to-device",
    }
