"""The CUDA sections of ``looptoolkit transfer``, and transfer by batch size.

With CUDA (torch): pageable vs pinned transfer of the ``images`` batch, cast-then-copy vs
copy-then-cast, one large pinned copy as the bandwidth reference, packed vs per-leaf transfer of
``nested``; timed with CUDA events. `by_batch_size` is the section ``compare`` shows on a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from looptoolkit.bench.timing import CudaEventClock, HostClock
from looptoolkit.bench.transfer_sections import Row, images_batch, measure, medians, nested

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["by_batch_size", "cuda_sections"]

MIB = 1024 * 1024


def cuda_sections(rounds: int, ref_mib: int, progress: Progress | None = None) -> dict[str, Any]:
    """With CUDA: real transfers, timed with CUDA events, and the bandwidth reference."""
    import optree
    import torch

    from looptoolkit import to_device

    cuda, cast = torch.device("cuda", torch.cuda.current_device()), {np.uint8: np.float16}
    pageable = {k: torch.from_numpy(v) for k, v in images_batch().items()}
    pinned = {k: v.pin_memory() for k, v in pageable.items()}
    image, image16 = pageable["image"], pageable["image"].to(torch.float16)
    reference = torch.empty(ref_mib * MIB, dtype=torch.uint8, pin_memory=True)
    ref = f"reference: one pinned {ref_mib} MiB .to(cuda, non_blocking=True)"
    rows = [
        Row("reference pinned copy", ref, lambda: reference.to(cuda, non_blocking=True), reference),
        Row("pageable .to(cuda)", "pageable uint8 image .to(cuda)", lambda: image.to(cuda), image),
        Row(
            "pinned .to(cuda)",
            "pinned uint8 image .to(cuda, non_blocking=True)",
            lambda: pinned["image"].to(cuda, non_blocking=True),
            image,
        ),
        Row(
            "to_device(pinned)",
            "to_device(pinned batch, 'cuda')",
            lambda: to_device(pinned, "cuda"),
            pageable,
        ),
        Row(
            "to_device(pageable)",
            "to_device(pageable batch, 'cuda')",
            lambda: to_device(pageable, "cuda"),
            pageable,
        ),
        Row(
            "cast, then copy",
            "cast-then-copy: image.half() on host, then .to(cuda)",
            lambda: pinned["image"].to(torch.float16).to(cuda),
        ),
        Row(
            "copy, then cast",
            "copy-then-cast: pinned uint8 .to(cuda), .half() on device",
            lambda: pinned["image"].to(cuda, non_blocking=True).to(torch.float16),
        ),
        Row(
            "to_device(dtype=...)",
            "to_device(pinned batch, 'cuda', dtype={uint8: float16})",
            lambda: to_device(pinned, "cuda", dtype=cast),
            {**pageable, "image": image16},
        ),
    ]
    images = measure("images, cuda", rows, image16, rounds, progress, clock=CudaEventClock())
    one, batch = image.nbytes, image.nbytes + pageable["label"].nbytes
    ref_bw = reference.nbytes / images[0]["median_s"]
    nbytes = [reference.nbytes, one, one, batch, batch, one, one, batch]  # what each row moves
    for r, n in zip(images, nbytes, strict=True):
        r.update(bytes=n, gb_per_s=n / r["median_s"] / 1e9, of_reference=n / r["median_s"] / ref_bw)

    tt = optree.tree_map(torch.from_numpy, nested())
    per_leaf = functools.partial(to_device, tt, "cuda", pack=False)
    tree_map = functools.partial(optree.tree_map, lambda t: t.to(cuda), tt)
    rows = [
        Row("per-leaf to_device", "per-leaf: to_device(tree, 'cuda', pack=False)", per_leaf),
        Row("packed to_device", "packed: to_device(tree, 'cuda')", lambda: to_device(tt, "cuda")),
        Row("optree.tree_map .to", "optree.tree_map(lambda t: t.to(cuda), tree)", tree_map),
    ]
    trees = measure("nested, cuda", rows, tt, rounds, progress, clock=CudaEventClock())
    t, share = medians(images), images[3]["of_reference"]
    ratios = {
        "to_device(pinned batch) bandwidth / reference": share,
        "pinned image copy bandwidth / reference": images[2]["of_reference"],
        "cast-then-copy / copy-then-cast (to_device)": t[5] / t[7],
        "per-leaf / packed (nested)": trees[0]["median_s"] / trees[1]["median_s"],
    }
    values = {"bandwidth-share": share, "cast-then-copy": t[5], "copy-then-cast": t[7]}
    values.update({"per-leaf": trees[0]["median_s"], "packed": trees[1]["median_s"]})
    values = {f"cuda:{k}": v for k, v in values.items()}
    name = torch.cuda.get_device_name(cuda)
    return {"device": name, "images": images, "nested": trees, "ratios": ratios, "values": values}


def by_batch_size(
    device: str, quick: bool, seed: int, progress: Progress | None = None
) -> dict[str, Any]:
    """Time moving an ``images`` batch to float16 by batch size: uint8 then cast, vs cast then copy.

    On a GPU: the host-to-device copy of 1 or 2 bytes per pixel, the cast on either side of it
    (the batch gathered into pinned memory, as the Loader's staging is); on the CPU, no bus to
    cross: both paths are the host cast.
    """
    from looptoolkit.device import to_device

    sizes = [8, 32] if quick else [16, 32, 64, 128, 256, 512, 1024]
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (max(sizes) * 2, 3, 64, 64), dtype=np.uint8)
    target: Any = "cpu"
    sync = None
    if device != "cpu":
        import torch

        target, sync = torch.device(device), torch.cuda.synchronize
    cast = {np.uint8: np.float16}
    paths: dict[str, Callable[[np.ndarray], Any]] = {
        "uint8 copy, cast on the device": lambda b: to_device(b, target, dtype=cast),
        "cast to float16, then copy": lambda b: to_device(b.astype(np.float16), target),
        "uint8 copy, no cast": lambda b: to_device(b, target),
    }
    if device == "cpu":
        del paths["uint8 copy, no cast"]
    results: dict[str, list[float]] = {name: [] for name in paths}
    for size in sizes:
        batch = np.empty((size, 3, 64, 64), dtype=np.uint8)
        if device != "cpu":  # gathered into pinned memory, as the Loader's staging is
            batch = torch.empty(batch.shape, dtype=torch.uint8).pin_memory().numpy()
        np.take(pool, np.sort(rng.choice(len(pool), size, replace=False)), axis=0, out=batch)
        half = batch.astype(np.float16)
        rows = [
            Row(n, n, functools.partial(f, batch), batch if "no cast" in n else half)
            for n, f in paths.items()
        ]
        label, clock = f"images batch of {size}", HostClock(sync)
        for r in measure(label, rows, None, 3 if quick else 15, progress, clock=clock, warmup=1):
            results[r["name"]].append(r["median_s"] * 1e3)
    note = "host cast only (no bus on CPU)" if device == "cpu" else "host-to-device"
    out = {"device": device, "batch_sizes": sizes, "bytes_per_image_uint8": 3 * 64 * 64}
    return {**out, "ms_per_batch": results, "note": note}
