"""The image ops of looptoolkit.augment against torchvision, and their keyed draws.

torchvision is not a dependency: ``benchmarks/augment_golden.py`` saved its functional
outputs for fixed parameters and 20,000 draws of each of its samplers in
``tests/data/augment_golden.npz``. Here each op's ``apply`` with those parameters is
compared with them (tolerances in ``TOLERANCE``), each op's draws with the sampler's by a
two-sample Kolmogorov-Smirnov statistic per parameter, NumPy with torch, channel-first
with channel-last, and the keyed rule: a row's parameters are a function of its key alone.
"""

from __future__ import annotations

import ast
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from looptoolkit.augment import (
    Augment,
    BatchKeys,
    ColorJitter,
    HorizontalFlip,
    RandomAffine,
    RandomCrop,
    RandomErasing,
    RandomResizedCrop,
    RandomRotation,
    VerticalFlip,
    _geometry,
)
from looptoolkit.augment._base import ImageBatch, Op, stream_of

torch = pytest.importorskip("torch")

GOLDEN = np.load(Path(__file__).parent / "data" / "augment_golden.npz")
CASES: dict[str, tuple[str, dict[str, Any]]] = ast.literal_eval(str(GOLDEN["cases"]))
IMAGES = GOLDEN["images"]  # (3, 3, 29, 37) uint8, channel-first
N = len(IMAGES)
SAMPLER_SIZE = (96, 128)

# How far from torchvision each function may be, in uint8 levels, and the share of pixels
# that may differ at all (nearest sampling: a grid point within float32 rounding of a
# half-pixel boundary picks the neighbour; none did in the saved cases).
TOLERANCE: dict[str, tuple[int, float]] = {
    "resized_crop": (1, 1.0),  # PyTorch's uint8 kernel: fixed-point weights
    "hflip": (0, 0.0),
    "vflip": (0, 0.0),
    "rotate": (0, 0.0),
    "affine": (1, 0.0),  # bilinear: float32 rounding before the cast
    "adjust_brightness": (1, 1.0),
    "adjust_contrast": (1, 1.0),
    "adjust_saturation": (1, 1.0),
    "adjust_hue": (1, 1.0),
    "erase": (0, 0.0),
    "crop_pad": (0, 0.0),
}
COLOR = {
    "adjust_brightness": "brightness",
    "adjust_contrast": "contrast",
    "adjust_saturation": "saturation",
    "adjust_hue": "hue",
}


def full(value: Any) -> np.ndarray:
    return np.full(N, value)


def fixed(fn: str, kw: dict[str, Any]) -> tuple[Op, dict[str, np.ndarray]]:
    """The op and the parameters that make its apply torchvision's ``fn(**kw)``."""
    params: dict[str, np.ndarray] = {"apply": np.ones(N, dtype=bool)}
    if fn == "resized_crop":
        op: Op = RandomResizedCrop(tuple(kw["size"]))
        for name in ("top", "left", "height", "width"):
            params[name] = full(kw[name])
    elif fn in ("hflip", "vflip"):
        op = HorizontalFlip() if fn == "hflip" else VerticalFlip()
    elif fn == "rotate":
        op = RandomRotation(0)
        params["angle"] = full(kw["angle"])
    elif fn == "affine":
        mode = "bilinear" if kw.get("bilinear") else "nearest"
        op = RandomAffine(0, fill=tuple(kw.get("fill", [0.0])), interpolation=mode)
        params |= {"angle": full(kw["angle"]), "scale": full(kw["scale"])}
        params |= {"tx": full(kw["translate"][0]), "ty": full(kw["translate"][1])}
        params |= {"shear_x": full(kw["shear"][0]), "shear_y": full(kw["shear"][1])}
    elif fn in COLOR:
        op = ColorJitter(**{COLOR[fn]: 0.5})
        params["order"] = np.tile(np.arange(4), (N, 1))
        params[COLOR[fn]] = full(kw["factor"])
    elif fn == "erase":
        op = RandomErasing(value=tuple(kw["value"]))
        for name in ("top", "left", "height", "width"):
            params[name] = full(kw[name])
    elif fn == "crop_pad":
        op = RandomCrop((kw["height"], kw["width"]), padding=kw["padding"], fill=kw["fill"])
        params |= {"top": full(kw["top"]), "left": full(kw["left"])}
    else:
        raise AssertionError(fn)
    return op, params


def variants(images: np.ndarray) -> dict[str, tuple[Any, str]]:
    """The images as NumPy and torch, channel-first and channel-last."""
    last = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    return {
        "numpy-first": (images, "first"),
        "numpy-last": (last, "last"),
        "torch-first": (torch.from_numpy(images.copy()), "first"),
        "torch-last": (torch.from_numpy(last.copy()), "last"),
    }


def as_first(images: Any, channels: str) -> np.ndarray:
    out = images.numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    return out if channels == "first" else out.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("variant", ["numpy-first", "numpy-last", "torch-first", "torch-last"])
def test_apply_matches_torchvision(case: str, variant: str) -> None:
    fn, kw = CASES[case]
    op, params = fixed(fn, kw)
    images, channels = variants(IMAGES)[variant]
    out = op.apply(ImageBatch(images, channels), params).images
    got = as_first(out, channels).astype(np.int16)
    want = GOLDEN[f"out_{case}"].astype(np.int16)
    assert got.shape == want.shape
    levels, share = TOLERANCE[fn]
    diff = np.abs(got - want)
    assert diff.max() <= levels, (case, variant, diff.max())
    assert (diff > 0).mean() <= share, (case, variant, (diff > 0).mean())


@pytest.mark.parametrize("case", ["resized_crop_down", "resized_crop_up", "resized_crop_mixed"])
@pytest.mark.parametrize("antialias", [True, False])
def test_numpy_resize_without_torch(case: str, antialias: bool) -> None:
    """The NumPy route (no torch installed) matches torch's interpolate.

    Within 1 uint8 level with antialias (the default); 2 without (PyTorch's uint8 kernel
    without antialias rounds differently between its two passes).
    """
    _, kw = CASES[case]
    for image in IMAGES:
        crop = image[:, kw["top"] : kw["top"] + kw["height"], kw["left"] : kw["left"] + kw["width"]]
        size = tuple(kw["size"])
        want = torch.nn.functional.interpolate(
            torch.from_numpy(crop.copy())[None], size=size, mode="bilinear", antialias=antialias
        )[0].numpy()
        got = _geometry.resize_numpy(crop, size, antialias)
        assert np.abs(got.astype(np.int16) - want).max() <= (1 if antialias else 2), case
        floats = _geometry.resize_numpy(crop.astype(np.float32), size, antialias)
        want_f = torch.nn.functional.interpolate(
            torch.from_numpy(crop.astype(np.float32))[None],
            size=size,
            mode="bilinear",
            antialias=antialias,
        )[0].numpy()
        np.testing.assert_allclose(floats, want_f, atol=1e-3)


def test_float_images_match_uint8() -> None:
    """Float images in [0, 1] give the uint8 results / 255 (within the uint8 rounding)."""
    for case in ("resized_crop_down", "rotate", "affine_bilinear", "contrast", "hue"):
        fn, kw = CASES[case]
        op, params = fixed(fn, kw)
        for images in (IMAGES.astype(np.float32) / 255, torch.from_numpy(IMAGES) / 255.0):
            out = as_first(op.apply(ImageBatch(images, "first"), params).images, "first")
            assert out.dtype == np.float32
            assert np.abs(out * 255 - GOLDEN[f"out_{case}"]).max() <= 1.01, case


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap of the two ECDFs."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / len(a)
    cdf_b = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


def ks_bound(n: int, m: int, alpha: float = 1e-3) -> float:
    """The statistic's critical value at level ``alpha`` (asymptotic; conservative for ties)."""
    return float(np.sqrt(-np.log(alpha / 2) / 2) * np.sqrt((n + m) / (n * m)))


DRAWS = 20_000
SAMPLERS: dict[str, tuple[Op, dict[str, str]]] = {
    "rrc": (
        RandomResizedCrop(8, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
        {k: k for k in ("top", "left", "height", "width")},
    ),
    "affine": (
        RandomAffine(30, translate=(0.1, 0.2), scale=(0.75, 1.25), shear=(-10, 10, -5, 5)),
        {k: k for k in ("angle", "tx", "ty", "scale", "shear_x", "shear_y")},
    ),
    "cj": (
        ColorJitter(brightness=0.4, contrast=0.3, saturation=0.5, hue=0.2),
        {"brightness": "brightness", "contrast": "contrast", "saturation": "saturation"}
        | {"hue": "hue"}
        | {f"order{k}": f"order{k}" for k in range(4)},
    ),
    "erase": (
        RandomErasing(p=1.0, scale=(0.02, 0.33), ratio=(0.3, 3.3)),
        {k: k for k in ("top", "left", "height", "width")},
    ),
}


def draws(op: Op, keys: BatchKeys, size: tuple[int, int] = SAMPLER_SIZE) -> dict[str, np.ndarray]:
    images = np.zeros((len(keys.positions), 1, 1, 1), dtype=np.uint8)
    batch = ImageBatch(np.broadcast_to(images, (len(keys.positions), 3, *size)))
    params = op.draw(keys, stream_of(0, op), batch)
    if "order" in params:
        for k in range(4):
            params[f"order{k}"] = params["order"][:, k]
    return params


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_parameters_match_torchvision_sampler(sampler: str) -> None:
    op, names = SAMPLERS[sampler]
    params = draws(op, BatchKeys(7, 3, np.arange(DRAWS)))
    for ours, theirs in names.items():
        reference = GOLDEN[f"{sampler}_{theirs}"].astype(np.float64)
        stat = ks_statistic(params[ours], reference)
        assert stat < ks_bound(DRAWS, len(reference)), (sampler, ours, stat)


def test_erasing_skips_rows_without_a_box() -> None:
    """torchvision returns the image unchanged when no try fits; those rows do not apply."""
    op = RandomErasing(p=1.0, scale=(0.9, 0.99), ratio=(0.3, 3.3))
    params = draws(op, BatchKeys(0, 0, np.arange(2000)), size=(20, 20))
    assert 0 < params["apply"].mean() < 1
    assert (params["apply"] == params["found"]).all()


OPS: list[Op] = [
    RandomResizedCrop((15, 19)),
    RandomCrop(24, padding=3),
    HorizontalFlip(),
    VerticalFlip(),
    RandomRotation(40),
    RandomAffine(25, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=8, interpolation="bilinear"),
    ColorJitter(0.4, 0.4, 0.4, 0.1),
    RandomErasing(p=0.8),
]
IDS = [type(op).__name__ for op in OPS]


def batch_of(rows: np.ndarray, channels: str = "first") -> ImageBatch:
    images = IMAGES[rows % N]
    return ImageBatch(images if channels == "first" else images.transpose(0, 2, 3, 1), channels)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_numpy_and_torch_agree_in_both_layouts(op: Op) -> None:
    positions = np.array([11, 3, 40, 7, 29, 2])
    keys = BatchKeys(5, 1, positions)
    images = IMAGES[np.arange(6) % N]
    results = []
    for name, (x, channels) in variants(images).items():
        batch = ImageBatch(x, channels)
        out = op.apply(batch, op.draw(keys, stream_of(2, op), batch)).images
        assert type(out) is type(x), name
        results.append(as_first(out, channels).astype(np.int16))
    for other in results[1:]:
        assert np.abs(other - results[0]).max() <= 1


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_keyed_rule(op: Op) -> None:
    positions = np.array([100, 5, 77, 3, 42, 9, 61, 18])
    batch = batch_of(np.arange(8))
    stream = stream_of(0, op)
    first = op.draw(BatchKeys(1, 4, positions), stream, batch)
    again = op.draw(BatchKeys(1, 4, positions), stream, batch)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    # Another epoch (and another seed) draws other parameters.
    for keys in (BatchKeys(1, 5, positions), BatchKeys(2, 4, positions)):
        other = op.draw(keys, stream, batch)
        assert any(not np.array_equal(first[k], other[k], equal_nan=True) for k in first), keys
    # A row draws the same wherever it is: another batch, another slot.
    perm = np.array([6, 2, 7, 0, 4, 1, 5, 3])
    shuffled = op.draw(BatchKeys(1, 4, positions[perm]), stream, batch)
    part = op.draw(BatchKeys(1, 4, positions[perm[:3]]), stream, batch_of(np.arange(3)))
    for name in first:
        np.testing.assert_array_equal(shuffled[name], first[name][perm])
        np.testing.assert_array_equal(part[name], first[name][perm[:3]])


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_rows_differ_within_a_batch(op: Op) -> None:
    """Each row draws its own parameters (not one draw for the whole batch)."""
    params = op.draw(BatchKeys(0, 0, np.arange(64)), stream_of(0, op), batch_of(np.arange(64)))
    varying = [name for name, values in params.items() if len(np.unique(values, axis=0)) > 1]
    assert varying


@pytest.mark.parametrize(
    "make",
    [
        HorizontalFlip,
        VerticalFlip,
        lambda p: RandomRotation(30, p=p),
        lambda p: RandomAffine(10, scale=(0.9, 1.1), p=p),
        lambda p: ColorJitter(0.5, 0.5, 0.5, 0.2, p=p),
        lambda p: RandomErasing(p=p, scale=(0.02, 0.1)),
    ],
)
def test_p_zero_and_one(make: Any) -> None:
    keys = BatchKeys(0, 0, np.arange(N))
    for x, channels in variants(IMAGES).values():
        batch = ImageBatch(x, channels)
        none = make(0.0)
        out = none.apply(batch, none.draw(keys, 1, batch)).images
        assert np.array_equal(as_first(out, channels), IMAGES)
        every = make(1.0)
        params = every.draw(keys, 1, batch)
        assert params["apply"].all()
        out = as_first(every.apply(batch, params).images, channels)
        assert all((out[k] != IMAGES[k]).any() for k in range(N))
        assert np.array_equal(as_first(x, channels), IMAGES)  # the input is left as it was


def test_flips_flip_the_width_and_height_axes() -> None:
    keys = BatchKeys(0, 0, np.arange(N))
    for x, channels in variants(IMAGES).values():
        batch = ImageBatch(x, channels)
        h = as_first(HorizontalFlip(1.0).apply(batch, {"apply": np.ones(N, bool)}).images, channels)
        v = as_first(VerticalFlip(1.0).apply(batch, {"apply": np.ones(N, bool)}).images, channels)
        assert np.array_equal(h, IMAGES[..., ::-1]), channels
        assert np.array_equal(v, IMAGES[..., ::-1, :]), channels
    del keys


def test_one_draw_per_batch_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from looptoolkit.augment import _base

    real = _base.uniforms

    def once(keys: BatchKeys, stream: int, count: int) -> np.ndarray:
        u = real(keys, stream, count)
        return np.broadcast_to(u[:1], u.shape)  # the planted defect: row 0's draw for all

    monkeypatch.setattr(_base, "uniforms", once)
    for op in OPS:
        with pytest.raises(AssertionError):
            test_rows_differ_within_a_batch(op)


def test_a_flip_on_the_wrong_axis_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HorizontalFlip, "axis", 2)  # the planted defect: the height axis
    with pytest.raises(AssertionError):
        test_flips_flip_the_width_and_height_axes()


# Augment


def test_augment_runs_ops_in_turn_and_keeps_the_batch() -> None:
    aug = Augment([RandomResizedCrop(16), HorizontalFlip()], key="image")
    batch = {"image": IMAGES.copy(), "label": np.arange(N)}
    keys = BatchKeys(0, 2, np.array([4, 8, 15]))
    out = aug(batch, keys)
    assert out is not batch and out["label"] is batch["label"]
    assert np.array_equal(batch["image"], IMAGES)
    assert out["image"].shape == (N, 3, 16, 16)
    # By hand: each op with its stream.
    state = ImageBatch(IMAGES, "first")
    for place, op in enumerate(aug.ops):
        state = op.apply(state, op.draw(keys, stream_of(place, op), state))
    np.testing.assert_array_equal(out["image"], state.images)


def test_augment_array_tuple_and_dtype() -> None:
    keys = BatchKeys(0, 0, np.arange(N))
    aug = Augment([HorizontalFlip(1.0)], key=None, dtype="float32")
    out = aug(IMAGES, keys)
    assert out.dtype == np.float32 and out.max() <= 1.0
    np.testing.assert_allclose(out, IMAGES[..., ::-1] / 255.0, atol=1e-7)
    out_t = Augment([HorizontalFlip(1.0)], key=0, dtype=torch.float32)(
        (torch.from_numpy(IMAGES), 1), keys
    )
    assert isinstance(out_t, tuple) and out_t[1] == 1 and out_t[0].dtype == torch.float32
    np.testing.assert_allclose(out_t[0].numpy(), out, atol=1e-7)
    back = Augment([], key=None, dtype=np.uint8)(out, keys)
    np.testing.assert_array_equal(back, IMAGES[..., ::-1])


def test_augment_repr_and_pickle() -> None:
    aug = Augment([RandomCrop(24, padding=4), HorizontalFlip()], labels="y", channels="last")
    assert repr(aug) == (
        "Augment([RandomCrop(size=(24, 24), padding=4, pad_if_needed=False, fill=0), "
        "HorizontalFlip(p=0.5)], key='image', labels='y', channels='last')"
    )
    again = pickle.loads(pickle.dumps(aug))
    keys = BatchKeys(3, 1, np.arange(N))
    batch = {"image": IMAGES.transpose(0, 2, 3, 1), "y": np.arange(N)}
    np.testing.assert_array_equal(again(batch, keys)["image"], aug(batch, keys)["image"])
    assert Augment.keyed is True


@pytest.mark.parametrize(
    ("aug", "batch", "error", "match"),
    [
        (Augment([HorizontalFlip()]), {"img": IMAGES}, ValueError, r"batch\['image'\].*`key=`"),
        (Augment([HorizontalFlip()]), {"image": IMAGES[0]}, ValueError, "4-D"),
        (
            Augment([HorizontalFlip()]),
            {"image": IMAGES.transpose(0, 2, 3, 1)},
            ValueError,
            "channels='last'",
        ),
        (
            Augment([HorizontalFlip()], channels="last"),
            {"image": IMAGES},
            ValueError,
            "channels='first'",
        ),
        (
            Augment([HorizontalFlip()], labels="y"),
            {"image": IMAGES},
            ValueError,
            r"batch\['y'\].*`labels=`",
        ),
        (
            Augment([HorizontalFlip()]),
            {"image": IMAGES.astype(np.int32)},
            TypeError,
            "uint8 or floating",
        ),
        (Augment([HorizontalFlip()]), IMAGES, TypeError, "key=None"),
    ],
)
def test_augment_errors(aug: Augment, batch: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        aug(batch, BatchKeys(0, 0, np.arange(N)))


def test_augment_needs_keys() -> None:
    with pytest.raises(TypeError, match="Loader passes"):
        Augment([HorizontalFlip()])({"image": IMAGES})


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Augment(HorizontalFlip()), TypeError),  # type: ignore[arg-type]
        (lambda: Augment([HorizontalFlip()], channels="middle"), ValueError),
        (lambda: Augment([HorizontalFlip()], dtype="int7"), ValueError),
        (lambda: RandomResizedCrop(0), ValueError),
        (lambda: RandomResizedCrop("big"), TypeError),  # type: ignore[arg-type]
        (lambda: RandomResizedCrop(8, scale=(1.0, 0.5)), ValueError),
        (lambda: RandomCrop(8, padding=-1), ValueError),
        (lambda: RandomAffine(-3), ValueError),
        (lambda: RandomAffine(3, translate=(0.1, 2.0)), ValueError),
        (lambda: RandomAffine(3, interpolation="cubic"), ValueError),
        (lambda: ColorJitter(hue=0.7), ValueError),
        (lambda: ColorJitter(brightness="x"), TypeError),  # type: ignore[arg-type]
        (lambda: HorizontalFlip(p=1.5), ValueError),
    ],
)
def test_constructor_errors(make: Any, error: type) -> None:
    with pytest.raises(error, match="`"):
        make()


def test_crop_larger_than_padded_images() -> None:
    with pytest.raises(ValueError, match="pad_if_needed"):
        Augment([RandomCrop(40)])({"image": IMAGES}, BatchKeys(0, 0, np.arange(N)))
    out = Augment([RandomCrop(40, pad_if_needed=True)])(
        {"image": IMAGES}, BatchKeys(0, 0, np.arange(N))
    )
    assert out["image"].shape == (N, 3, 40, 40)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("channels", ["first", "last"])
def test_the_callers_images_are_never_written(kind, channels):
    """Ops write into the arrays earlier ops made, never into the batch they were given."""
    images = np.random.default_rng(1).integers(0, 256, (6, 3, 20, 24), dtype=np.uint8)
    if channels == "last":
        images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    if kind == "torch":
        torch = pytest.importorskip("torch")
        images = torch.from_numpy(images)
    host = (lambda x: x.numpy()) if kind == "torch" else np.asarray
    before = host(images).copy()
    keys = BatchKeys(0, 0, np.arange(6))
    for ops in (
        [HorizontalFlip(p=1.0), ColorJitter(0.5, 0.5, 0.5, 0.1, p=1.0)],
        [RandomErasing(p=1.0), RandomRotation(30, p=1.0), VerticalFlip(p=1.0)],
        [HorizontalFlip(p=0.0), RandomErasing(p=1.0, value=9)],  # the first makes nothing
        [RandomCrop(16), HorizontalFlip(p=1.0), RandomErasing(p=1.0, value=9)],
    ):
        Augment(ops, key=None, channels=channels)(images, keys)
        np.testing.assert_array_equal(host(images), before)
    # An earlier op's array is written in place: the op returns it, no copy of its own.
    for op in (HorizontalFlip(p=1.0), ColorJitter(0.5, p=1.0), RandomErasing(p=1.0)):
        batch = ImageBatch(images.clone() if kind == "torch" else images.copy(), channels)
        params = op.draw(keys, 0, batch)
        assert op.apply(batch, params).images is not batch.images
        batch.owned = True
        assert op.apply(batch, params).images is batch.images
