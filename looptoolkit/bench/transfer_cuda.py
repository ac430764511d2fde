"""The CUDA sections of ``looptoolkit transfer``, timed with CUDA events (torch with CUDA)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from looptoolkit import to_device
from looptoolkit.bench.results import Group
from looptoolkit.bench.timing import CudaEventClock
from looptoolkit.bench.transfer_sections import CAST, Call, group, images_batch, measure, nested

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["cuda_sections"]

LABELS = {
    "reference pinned copy": "reference: one pinned {ref_mib} MiB .to(cuda, non_blocking=True)",
    "pageable .to(cuda)": "pageable uint8 image .to(cuda)",
    "pinned .to(cuda)": "pinned uint8 image .to(cuda, non_blocking=True)",
    "to_device(pinned)": "to_device(pinned batch, 'cuda')",
    "to_device(pageable)": "to_device(pageable batch, 'cuda')",
    "cast, then copy": "cast-then-copy: to_device({image.half() on host, label}, 'cuda')",
    "copy, then cast": "copy-then-cast: pinned uint8 .to(cuda), .half() on device",
    "to_device(dtype=...)": "to_device(pinned batch, 'cuda', dtype={uint8: float16})",
    "per-leaf to_device": "per-leaf: to_device(tree, 'cuda', pack=False)",
    "packed to_device": "packed: to_device(tree, 'cuda')",
    "optree.tree_map .to": "optree.tree_map(lambda t: t.to(cuda), tree)",
}
"""Each CUDA row's label."""


def cuda_sections(rounds: int, ref_mib: int, progress: Progress | None = None) -> Iterator[Group]:
    """Yield the ``images`` batch moved, against one large pinned copy; ``nested`` packed."""
    import optree
    import torch

    cuda, clock = torch.device("cuda", torch.cuda.current_device()), CudaEventClock()
    pageable = {k: torch.from_numpy(v) for k, v in images_batch().items()}
    pinned = {k: v.pin_memory() for k, v in pageable.items()}
    image, pin = pageable["image"], pinned["image"]
    want16 = {**pageable, "image": image.to(torch.float16)}
    ref = torch.empty(ref_mib * 1024 * 1024, dtype=torch.uint8, pin_memory=True)
    one, batch = image.nbytes, image.nbytes + pageable["label"].nbytes
    images = {  # each row's call, its own reference (None: the float16 image), the bytes it moves
        "reference pinned copy": (lambda: ref.to(cuda, non_blocking=True), ref, ref.nbytes),
        "pageable .to(cuda)": (lambda: image.to(cuda), image, one),
        "pinned .to(cuda)": (lambda: pin.to(cuda, non_blocking=True), image, one),
        "to_device(pinned)": (lambda: to_device(pinned, "cuda"), pageable, batch),
        "to_device(pageable)": (lambda: to_device(pageable, "cuda"), pageable, batch),
        # The same leaves through the same call as the `dtype` row below, the image cast
        # on the host first: the ratio of the two is where the cast runs, nothing else.
        "cast, then copy": (
            lambda: to_device({**pinned, "image": pin.to(torch.float16)}, "cuda"),
            want16,
            2 * one + batch - one,
        ),
        "copy, then cast": (lambda: pin.to(cuda, non_blocking=True).to(torch.float16), None, one),
        "to_device(dtype=...)": (lambda: to_device(pinned, "cuda", dtype=CAST), want16, batch),
    }
    calls = [
        Call(n, LABELS[n].replace("{ref_mib}", str(ref_mib)), fn, want)
        for n, (fn, want, _) in images.items()
    ]
    rows = measure("images, cuda", calls, want16["image"], rounds, progress, clock=clock)
    ref_bw = ref.nbytes / rows[0].median_s
    for r, (_, _, n) in zip(rows, images.values(), strict=True):
        r.extra.update(bytes=n, gb_per_s=n / r.median_s / 1e9, of_reference=n / r.median_s / ref_bw)
    t, share = [r.median_s for r in rows], rows[3].extra["of_reference"]
    ratios = {
        "cuda: to_device(pinned batch) bandwidth / reference": share,
        "cuda: pinned image copy bandwidth / reference": rows[2].extra["of_reference"],
        "cuda: cast-then-copy / copy-then-cast (to_device)": t[5] / t[7],
    }
    values = {
        "cuda:bandwidth-share": share,
        "cuda:cast-then-copy": t[5],
        "cuda:copy-then-cast": t[7],
    }
    title = "images to CUDA, timed with CUDA events"
    yield group("cuda/images", title, rows, ratios=ratios, values=values)
    tt = optree.tree_map(torch.from_numpy, nested())
    trees = {
        "per-leaf to_device": lambda: to_device(tt, "cuda", pack=False),
        "packed to_device": lambda: to_device(tt, "cuda"),
        "optree.tree_map .to": lambda: optree.tree_map(lambda t: t.to(cuda), tt),
    }
    calls = [Call(name, LABELS[name], fn) for name, fn in trees.items()]
    rows = measure("nested, cuda", calls, tt, rounds, progress, clock=clock)
    per_leaf, packed = rows[0].median_s, rows[1].median_s
    ratios = {"cuda: per-leaf / packed (nested)": per_leaf / packed}
    values = {"cuda:per-leaf": per_leaf, "cuda:packed": packed}
    title = "nested to CUDA, timed with CUDA events"
    yield group("cuda/nested", title, rows, ratios=ratios, values=values)
