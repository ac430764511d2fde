"""Golden outputs of torchvision's image functions and samplers, for tests/test_augment_ops.py.

Run with a Python that has torchvision (it is not a dependency of the project), e.g. an
aside venv with torch 2.13.0 and torchvision 0.28.0 installed with ``--no-deps``::

    python3 -m venv /work/aside-tv
    /work/aside-tv/bin/pip install torch==2.13.0 numpy
    /work/aside-tv/bin/pip install --no-deps torchvision==0.28.0 pillow
    /work/aside-tv/bin/python benchmarks/augment_golden.py

Writes ``tests/data/augment_golden.npz``: three uint8 images 3x29x37 (fixed seed), each
op's torchvision functional output for fixed parameters (``out_<case>`` with the
parameters in ``CASES`` below, which the tests read from here too), and 20,000 draws of
each of torchvision's parameter samplers (``rrc_*``, ``affine_*``, ``cj_*``,
``erase_*``), sorted per parameter. Last run: torchvision 0.28.0, about 0.6 MB.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np

# A CUDA build of torchvision with a CPU build of torch: its compiled ops do not load and
# the fake-tensor registrations of those ops fail at import; the functional image ops are
# pure Python and need neither.
sys.modules.setdefault(
    "torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations")
)

import torch  # noqa: E402
import torchvision  # noqa: E402
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "augment_golden.npz"
DRAWS = 20_000
SAMPLER_SIZE = (96, 128)  # (height, width) the samplers draw for

# name: (function, keyword arguments); shared with the tests through the npz's `cases`.
CASES: dict[str, tuple[str, dict]] = {
    "resized_crop_down": ("resized_crop", dict(top=2, left=3, height=25, width=31, size=[11, 13])),
    "resized_crop_up": ("resized_crop", dict(top=5, left=1, height=9, width=12, size=[20, 17])),
    "resized_crop_mixed": ("resized_crop", dict(top=0, left=0, height=29, width=10, size=[8, 24])),
    "hflip": ("hflip", {}),
    "vflip": ("vflip", {}),
    "rotate": ("rotate", dict(angle=23.5)),
    "rotate_neg": ("rotate", dict(angle=-71.0)),
    "affine": ("affine", dict(angle=-12.0, translate=[3, -2], scale=1.15, shear=[7.0, -4.0])),
    "affine_bilinear": (
        "affine",
        dict(angle=33.0, translate=[-4, 1], scale=0.85, shear=[-9.0, 0.0], bilinear=True),
    ),
    "affine_fill": (
        "affine",
        dict(angle=45.0, translate=[0, 0], scale=0.7, shear=[0.0, 0.0], fill=[10.0, 200.0, 77.0]),
    ),
    "brightness": ("adjust_brightness", dict(factor=1.37)),
    "brightness_dark": ("adjust_brightness", dict(factor=0.41)),
    "contrast": ("adjust_contrast", dict(factor=1.63)),
    "contrast_low": ("adjust_contrast", dict(factor=0.27)),
    "saturation": ("adjust_saturation", dict(factor=1.8)),
    "saturation_low": ("adjust_saturation", dict(factor=0.3)),
    "hue": ("adjust_hue", dict(factor=0.21)),
    "hue_neg": ("adjust_hue", dict(factor=-0.37)),
    "erase": ("erase", dict(top=4, left=6, height=10, width=15, value=[0.0])),
    "erase_rgb": ("erase", dict(top=0, left=20, height=29, width=5, value=[255.0, 0.0, 128.0])),
    "crop_pad": ("crop_pad", dict(padding=4, fill=0, top=7, left=1, height=29, width=37)),
    "crop_pad_fill": ("crop_pad", dict(padding=3, fill=99, top=0, left=6, height=20, width=20)),
}


def functional(image: torch.Tensor, fn: str, kw: dict) -> torch.Tensor:
    kw = dict(kw)
    if fn == "resized_crop":
        return F.resized_crop(
            image, kw["top"], kw["left"], kw["height"], kw["width"], kw["size"], antialias=True
        )
    if fn in ("hflip", "vflip"):
        return getattr(F, fn)(image)
    if fn == "rotate":
        return F.rotate(image, kw["angle"], fill=[0.0])
    if fn == "affine":
        mode = T.InterpolationMode.BILINEAR if kw.get("bilinear") else T.InterpolationMode.NEAREST
        fill = kw.get("fill", [0.0])
        return F.affine(
            image,
            kw["angle"],
            kw["translate"],
            kw["scale"],
            kw["shear"],
            interpolation=mode,
            fill=fill,
        )
    if fn.startswith("adjust_"):
        return getattr(F, fn)(image, kw["factor"])
    if fn == "erase":
        v = torch.tensor(kw["value"])[:, None, None]
        return F.erase(image, kw["top"], kw["left"], kw["height"], kw["width"], v)
    if fn == "crop_pad":
        padded = F.pad(image, kw["padding"], fill=kw["fill"])
        return F.crop(padded, kw["top"], kw["left"], kw["height"], kw["width"])
    raise ValueError(fn)


def samplers() -> dict[str, np.ndarray]:
    h, w = SAMPLER_SIZE
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    rrc = np.array(
        [T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(DRAWS)]
    )
    affine = []
    for _ in range(DRAWS):
        angle, (tx, ty), scale, (sx, sy) = T.RandomAffine.get_params(
            [-30.0, 30.0], [0.1, 0.2], [0.75, 1.25], [-10.0, 10.0, -5.0, 5.0], [w, h]
        )
        affine.append((angle, tx, ty, scale, sx, sy))
    affine_a = np.array(affine)
    cj = []
    for _ in range(DRAWS):
        order, b, c, s, hue = T.ColorJitter.get_params(
            (0.6, 1.4), (0.7, 1.3), (0.5, 1.5), (-0.2, 0.2)
        )
        cj.append((*order.tolist(), b, c, s, hue))
    cj_a = np.array(cj)
    erase = []
    for _ in range(DRAWS):
        i, j, eh, ew, _v = T.RandomErasing.get_params(
            img, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0.0]
        )
        erase.append((i, j, eh, ew))
    erase_a = np.array(erase)
    out = {}
    for k, name in enumerate(("top", "left", "height", "width")):
        out[f"rrc_{name}"] = np.sort(rrc[:, k]).astype(np.int16)
        out[f"erase_{name}"] = np.sort(erase_a[:, k]).astype(np.int16)
    for k, name in enumerate(("angle", "tx", "ty", "scale", "shear_x", "shear_y")):
        dtype = np.int16 if name in ("tx", "ty") else np.float32
        out[f"affine_{name}"] = np.sort(affine_a[:, k]).astype(dtype)
    for k in range(4):
        out[f"cj_order{k}"] = np.sort(cj_a[:, k]).astype(np.int8)
    for k, name in enumerate(("brightness", "contrast", "saturation", "hue")):
        out[f"cj_{name}"] = np.sort(cj_a[:, 4 + k]).astype(np.float32)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.manual_seed(0)
    images = torch.from_numpy(
        np.random.default_rng(20240601).integers(0, 256, (3, 3, 29, 37), dtype=np.uint8)
    )
    data: dict[str, np.ndarray] = {"images": images.numpy()}
    for name, (fn, kw) in CASES.items():
        data[f"out_{name}"] = np.stack([functional(im, fn, kw).numpy() for im in images])
    data.update(samplers())
    data["version"] = np.array(torchvision.__version__)
    data["cases"] = np.array(repr(CASES))
    np.savez_compressed(args.out, **data)
    size = args.out.stat().st_size / 1e6
    print(f"wrote {args.out} ({size:.2f} MB), torchvision {torchvision.__version__}")


if __name__ == "__main__":
    main()
