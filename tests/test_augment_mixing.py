"""MixUp and CutMix (looptoolkit.augment._mixing): keyed weights, keyed partners, soft labels.

λ is Beta(alpha, alpha) per row (a KS test against NumPy's sampler), the partners are a
permutation without fixed points that depends on the rows' keys only, labels come out soft
and sum to 1, CutMix's box covers exactly ``1 - λ`` of the image, NumPy and torch agree,
channel-first and channel-last agree, and bad labels are refused with the fix named.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from looptoolkit._common.keys import BatchKeys, uniforms
from looptoolkit.augment import CutMix, MixUp
from looptoolkit.augment._base import ImageBatch, Op
from looptoolkit.augment._mixing import BETA_DRAWS, beta_from_uniforms

OPS = [MixUp, CutMix]
STREAM = 11


def keys(n: int, *, epoch: int = 0, start: int = 100) -> BatchKeys:
    return BatchKeys(7, epoch, np.arange(start, start + n, dtype=np.int64))


def images(n: int, *, h: int = 12, w: int = 10, dtype: Any = np.uint8) -> np.ndarray:
    rng = np.random.default_rng(n)
    if np.dtype(dtype).kind == "f":
        return rng.random((n, 3, h, w)).astype(dtype)
    return rng.integers(0, 256, (n, 3, h, w)).astype(dtype)


def class_batch(n: int, k: int = 5, **kwargs: Any) -> ImageBatch:
    return ImageBatch(images(n, **kwargs), labels=np.arange(n) % k, num_classes=k)


def run(op: Op, batch: ImageBatch, batch_keys: BatchKeys) -> tuple[ImageBatch, dict]:
    params = op.draw(batch_keys, STREAM, batch)
    return op.apply(batch, params), params


# --- λ ------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.2, 1.0, 2.0, 8.0])
def test_lambda_of_one_batch_is_beta(alpha):
    n = 20_000
    batch = class_batch(n, h=2, w=2)
    lam = MixUp(alpha).draw(keys(n), STREAM, batch)["lam"]
    reference = np.random.default_rng(0).beta(alpha, alpha, n)
    assert stats.ks_2samp(lam, reference).pvalue > 1e-3


@pytest.mark.parametrize("alpha", [0.05, 0.5, 3.0])
def test_beta_sampler_matches_numpy(alpha):
    u = np.random.default_rng(1).random((40_000, BETA_DRAWS))
    lam = beta_from_uniforms(u, alpha)
    assert np.isfinite(lam).all() and (lam >= 0).all() and (lam <= 1).all()
    reference = np.random.default_rng(2).beta(alpha, alpha, len(u))
    assert stats.ks_2samp(lam, reference).pvalue > 1e-3


def test_beta_sampler_is_wrong_for_another_alpha():
    # The KS test has the power to tell nearby alphas apart at this size.
    u = np.random.default_rng(1).random((20_000, BETA_DRAWS))
    reference = np.random.default_rng(2).beta(1.0, 1.0, len(u))
    assert stats.ks_2samp(beta_from_uniforms(u, 1.3), reference).pvalue < 1e-3


@pytest.mark.parametrize("op_type", OPS)
def test_lambda_is_drawn_per_row(op_type):
    params = op_type().draw(keys(64), STREAM, class_batch(64, h=32, w=32))
    assert len(np.unique(params["lam"])) > 32


# --- partners -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 64])
@pytest.mark.parametrize("op_type", OPS)
def test_partners_are_a_permutation_without_fixed_points(op_type, n):
    for epoch in range(5):
        partner = op_type().draw(keys(n, epoch=epoch), STREAM, class_batch(n))["partner"]
        assert np.array_equal(np.sort(partner), np.arange(n))
        assert (partner != np.arange(n)).all()
        # One cycle through the whole batch: each row mixes with the next in a keyed order.
        row, seen = 0, set()
        for _ in range(n):
            seen.add(row)
            row = int(partner[row])
        assert row == 0 and len(seen) == n


@pytest.mark.parametrize("op_type", OPS)
def test_the_same_batch_mixes_the_same_pairs(op_type):
    n = 16
    batch, k = class_batch(n), keys(n)
    out, params = run(op_type(0.7), batch, k)
    again, params_again = run(op_type(0.7), class_batch(n), keys(n))
    assert np.array_equal(params["partner"], params_again["partner"])
    assert np.array_equal(out.images, again.images)
    assert np.array_equal(out.labels, again.labels)


@pytest.mark.parametrize("op_type", OPS)
def test_pairs_follow_the_keys_not_the_slots(op_type):
    # The same rows in another order: each row mixes with the same row, with the same λ.
    n = 16
    batch, k = class_batch(n), keys(n)
    out, params = run(op_type(), batch, k)
    perm = np.random.default_rng(3).permutation(n)
    shuffled = ImageBatch(batch.images[perm], labels=batch.labels[perm], num_classes=5)
    out2, params2 = run(op_type(), shuffled, BatchKeys(k.seed, k.epoch, k.positions[perm]))
    partner_position = k.positions[params["partner"]]
    assert np.array_equal(k.positions[perm][params2["partner"]], partner_position[perm])
    assert np.array_equal(params2["lam"], params["lam"][perm])
    assert np.array_equal(out2.images, out.images[perm])
    assert np.array_equal(out2.labels, out.labels[perm])


@pytest.mark.parametrize("op_type", OPS)
def test_another_epoch_mixes_otherwise(op_type):
    n = 32
    a = op_type().draw(keys(n, epoch=0), STREAM, class_batch(n))
    b = op_type().draw(keys(n, epoch=1), STREAM, class_batch(n))
    assert not np.array_equal(a["partner"], b["partner"])
    assert not np.array_equal(a["lam"], b["lam"])


@pytest.mark.parametrize("op_type", OPS)
def test_a_row_alone_is_kept(op_type):
    batch = class_batch(1)
    out, _ = run(op_type(), batch, keys(1))
    assert np.array_equal(out.images, batch.images)
    assert np.array_equal(out.labels, np.eye(5, dtype=np.float32)[batch.labels])


# --- labels and images ----------------------------------------------------------------------


@pytest.mark.parametrize("op_type", OPS)
def test_labels_are_soft_and_sum_to_one(op_type):
    n, k = 24, 5
    out, _ = run(op_type(), class_batch(n, k), keys(n))
    assert out.labels.shape == (n, k) and out.labels.dtype == np.float32
    assert out.num_classes == k
    np.testing.assert_allclose(out.labels.sum(axis=1), 1.0, rtol=1e-6)
    soft = np.random.default_rng(0).dirichlet(np.ones(k), n)
    out, _ = run(op_type(), ImageBatch(images(n), labels=soft), keys(n))
    assert out.labels.dtype == np.float32
    np.testing.assert_allclose(out.labels.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_mixup_blends_each_row_with_its_partner(dtype):
    n = 12
    batch = class_batch(n, dtype=dtype)
    out, params = run(MixUp(), batch, keys(n))
    lam, partner = params["lam"][:, None, None, None], params["partner"]
    x = batch.images.astype(np.float64)
    expected = lam * x + (1 - lam) * x[partner]
    assert out.images.dtype == dtype
    tolerance = 0.5 + 1e-3 if dtype == np.uint8 else 1e-6
    assert np.abs(out.images.astype(np.float64) - expected).max() <= tolerance
    one_hot = np.eye(5)[batch.labels]
    expected_labels = lam[:, :, 0, 0] * one_hot + (1 - lam[:, :, 0, 0]) * one_hot[partner]
    np.testing.assert_allclose(out.labels, expected_labels, atol=1e-6)


def test_mixup_rounds_integer_images_to_nearest():
    # Two rows of 10 and 20: every mix is 10 + 10 * (1 - λ), rounded, not truncated.
    batch = ImageBatch(
        np.stack([np.full((1, 4, 4), 10), np.full((1, 4, 4), 20)]).astype(np.uint8),
        labels=np.array([0, 1]),
        num_classes=2,
    )
    for epoch in range(20):
        out, params = run(MixUp(), batch, keys(2, epoch=epoch))
        exact = params["lam"] * np.array([10, 20]) + (1 - params["lam"]) * np.array([20, 10])
        assert np.array_equal(out.images[:, 0, 0, 0], np.rint(exact.astype(np.float32)))


@pytest.mark.parametrize("channels", ["first", "last"])
def test_cutmix_box_covers_one_minus_lambda(channels):
    # Each row a constant of its own: the pixels of another row are the pasted box.
    n, h, w = 64, 16, 24
    values = np.arange(1, n + 1, dtype=np.float32)[:, None, None, None]
    first = np.broadcast_to(values, (n, 3, h, w)).copy()
    x = first if channels == "first" else first.transpose(0, 2, 3, 1).copy()
    batch = ImageBatch(x, channels=channels, labels=np.arange(n), num_classes=n)
    out, params = run(CutMix(), batch, keys(n))
    got = out.images if channels == "first" else out.images.transpose(0, 3, 1, 2)
    lam, partner = params["lam"], params["partner"]
    for i in range(n):
        foreign = got[i, 0] != i + 1
        assert (got[i][:, foreign] == partner[i] + 1).all()
        rows, cols = np.flatnonzero(foreign.any(1)), np.flatnonzero(foreign.any(0))
        if foreign.any():  # a rectangle, the drawn box
            y1, y2, x1, x2 = params["box"][i]
            assert (rows.min(), rows.max() + 1, cols.min(), cols.max() + 1) == (y1, y2, x1, x2)
            assert foreign.sum() == (y2 - y1) * (x2 - x1)
        assert foreign.mean() == pytest.approx(1 - lam[i], abs=1e-12)
        assert out.labels[i, i] == pytest.approx(lam[i] if partner[i] != i else 1, abs=1e-6)
        assert out.labels[i, partner[i]] == pytest.approx(1 - lam[i], abs=1e-6)


def test_cutmix_box_is_torchvisions():
    # The box for the drawn λ: sides 2 * int(sqrt(1 - λ) / 2 * side), clipped at the edges.
    n, h, w = 4096, 30, 40
    batch = class_batch(n, h=h, w=w)
    k = keys(n)
    params = CutMix().draw(k, STREAM, batch)
    raw = beta_from_uniforms(uniforms(k, STREAM, CutMix.draws + 1)[:, 1 : 1 + BETA_DRAWS], 1.0)
    r = 0.5 * np.sqrt(1 - raw)
    y1, y2, x1, x2 = params["box"].T
    assert ((y2 - y1) <= 2 * (r * h).astype(int)).all()
    assert ((x2 - x1) <= 2 * (r * w).astype(int)).all()
    inner = (y1 > 0) & (y2 < h) & (x1 > 0) & (x2 < w)
    assert inner.mean() > 0.1
    assert np.array_equal((y2 - y1)[inner], 2 * (r * h).astype(int)[inner])
    assert np.array_equal((x2 - x1)[inner], 2 * (r * w).astype(int)[inner])
    np.testing.assert_allclose(params["lam"], 1 - (y2 - y1) * (x2 - x1) / (h * w))
    assert (params["lam"] >= raw - 1e-12).all()  # the box is never larger than 1 - λ


@pytest.mark.parametrize("op_type", OPS)
def test_rows_not_applying_keep_their_image_and_label(op_type):
    n = 64
    batch = class_batch(n)
    out, params = run(op_type(p=0.5), batch, keys(n))
    keep = ~params["apply"]
    assert 10 < keep.sum() < 54
    assert np.array_equal(out.images[keep], batch.images[keep])
    assert np.array_equal(out.labels[keep], np.eye(5, dtype=np.float32)[batch.labels[keep]])
    # The others mixed (their partner's label is another class for most of them).
    assert (out.labels[~keep].max(axis=1) < 1).mean() > 0.5


@pytest.mark.parametrize("op_type", OPS)
def test_p_zero_is_the_identity(op_type):
    n = 16
    batch = class_batch(n)
    out, _ = run(op_type(p=0.0), batch, keys(n))
    assert np.array_equal(out.images, batch.images)
    assert np.array_equal(out.labels, np.eye(5, dtype=np.float32)[batch.labels])


@pytest.mark.parametrize("op_type", OPS)
def test_channel_first_equals_channel_last_transposed(op_type):
    n = 16
    batch = class_batch(n)
    last = ImageBatch(
        batch.images.transpose(0, 2, 3, 1).copy(), "last", batch.labels, batch.num_classes
    )
    out, _ = run(op_type(), batch, keys(n))
    out_last, _ = run(op_type(), last, keys(n))
    assert np.array_equal(out_last.images, out.images.transpose(0, 2, 3, 1))
    assert np.array_equal(out_last.labels, out.labels)


def test_mixup_then_cutmix_compose():
    n = 16
    batch = class_batch(n)
    mixed, _ = run(MixUp(), batch, keys(n))
    params = CutMix().draw(keys(n), STREAM + 1, mixed)
    out = CutMix().apply(mixed, params)
    np.testing.assert_allclose(out.labels.sum(axis=1), 1.0, rtol=1e-6)


# --- torch ----------------------------------------------------------------------------------


def torch_batch(batch: ImageBatch, device: Any = "cpu") -> ImageBatch:
    torch = pytest.importorskip("torch")
    return ImageBatch(
        torch.as_tensor(batch.images, device=device),
        batch.channels,
        torch.as_tensor(batch.labels, device=device),
        batch.num_classes,
    )


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("op_type", OPS)
def test_numpy_and_torch_agree(op_type, dtype):
    torch = pytest.importorskip("torch")
    n = 16
    for batch in (
        class_batch(n, dtype=dtype),
        ImageBatch(images(n, dtype=dtype), labels=np.eye(n, 5, dtype=np.float32)),
    ):
        out, params = run(op_type(), batch, keys(n))
        out_t = op_type().apply(torch_batch(batch), params)
        assert out_t.images.dtype == torch.from_numpy(batch.images).dtype
        assert out_t.labels.dtype == torch.float32
        assert np.array_equal(out_t.images.numpy(), out.images)
        assert np.array_equal(out_t.labels.numpy(), out.labels)


@pytest.mark.cuda
@pytest.mark.parametrize("op_type", OPS)
def test_cuda_agrees_with_the_host(op_type, cuda):
    n = 16
    batch = class_batch(n)
    out, params = run(op_type(), batch, keys(n))
    out_t = op_type().apply(torch_batch(batch, cuda), params)
    assert out_t.images.device == cuda
    assert np.array_equal(out_t.images.cpu().numpy(), out.images)
    np.testing.assert_allclose(out_t.labels.cpu().numpy(), out.labels, atol=1e-6)


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", OPS)
def test_bad_labels_are_refused(op_type):
    n, op, k = 4, op_type(), keys(4)
    x = images(n)

    def apply(labels: Any, num_classes: int | None = None) -> None:
        batch = ImageBatch(x, labels=labels, num_classes=num_classes)
        op.apply(batch, op.draw(k, STREAM, batch))

    with pytest.raises(ValueError, match=r"pass the batch's labels \(`labels=` of Augment"):
        apply(None)
    with pytest.raises(ValueError, match=r"needs `num_classes`.*pass `num_classes=`"):
        apply(np.arange(n))
    with pytest.raises(TypeError, match=r"must be integer class ids, got dtype float"):
        apply(np.arange(n, dtype=np.float32), 5)
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\).*got ids from 0 to 3"):
        apply(np.arange(n), 3)
    with pytest.raises(ValueError, match=r"class ids in \[0, 5\).*got ids from -1"):
        apply(np.arange(n) - 1, 5)
    with pytest.raises(ValueError, match=r"for the 4 images, got shape \(3,\)"):
        apply(np.arange(3), 5)
    with pytest.raises(ValueError, match=r"got shape \(4, 2, 2\)"):
        apply(np.zeros((n, 2, 2)), 5)
    with pytest.raises(ValueError, match=r"K = `num_classes` = 5 columns, got 3"):
        apply(np.eye(n, 3), 5)
    with pytest.raises(TypeError, match=r"a JAX array or a tf tensor, got list"):
        apply([0, 1, 2, 3], 5)


def test_bad_torch_labels_are_refused():
    torch = pytest.importorskip("torch")
    x = torch.zeros((2, 3, 4, 4))
    op = MixUp()
    for labels, num_classes, error in (
        (torch.tensor([0.0, 1.0]), 2, TypeError),
        (torch.tensor([0, 1]), None, ValueError),
        (torch.tensor([0, 2]), 2, ValueError),
    ):
        batch = ImageBatch(x, labels=labels, num_classes=num_classes)
        with pytest.raises(error):
            op.apply(batch, op.draw(keys(2), STREAM, batch))


@pytest.mark.parametrize("op_type", OPS)
def test_bad_arguments_are_refused(op_type):
    with pytest.raises(TypeError, match=r"`alpha` must be a number, got str"):
        op_type("1")
    with pytest.raises(TypeError, match=r"`alpha` must be a number, got bool"):
        op_type(True)
    for alpha in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"`alpha` must be a finite number > 0"):
            op_type(alpha)
    with pytest.raises(ValueError, match=r"`p` must be a probability"):
        op_type(p=1.5)
    assert repr(op_type(0.4, p=0.5)) == f"{op_type.__name__}(alpha=0.4, p=0.5)"


@pytest.mark.parametrize("op_type", OPS)
def test_bad_images_are_refused(op_type):
    op, k = op_type(), keys(2)
    batch = ImageBatch(np.zeros((2, 4, 4)), labels=np.array([0, 1]), num_classes=2)
    with pytest.raises(ValueError, match=r"a batch \(N, C, H, W\), got shape \(2, 4, 4\)"):
        op.apply(batch, op.draw(k, STREAM, class_batch(2)))
    batch = ImageBatch(np.zeros((2, 3, 4, 4)), "middle", np.array([0, 1]), 2)
    with pytest.raises(ValueError, match=r"`channels` must be 'first' or 'last'"):
        op.apply(batch, op.draw(k, STREAM, class_batch(2)))
