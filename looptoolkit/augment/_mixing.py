"""The label-mixing ops: MixUp and CutMix, each row mixed with a keyed partner of its batch.

Two [`Op`][looptoolkit.augment._base.Op]s of an image augmentation that read and write the
labels as well as the images: [`MixUp`][looptoolkit.augment.MixUp] blends a row's image
with its partner's, [`CutMix`][looptoolkit.augment.CutMix] pastes a box of the partner's
image into it, and both hand on soft labels ``(N, K)`` float32 mixed by the same weight.

Everything random is drawn on the host from the rows' keys, vectorised: each row's weight
``λ ~ Beta(alpha, alpha)`` (sampled from keyed uniforms, no global generator), CutMix's box
centre, and the row's partner: the rows are ordered by a keyed uniform and each is paired
with the next one in that order, cyclically. The pairs are a function of the batch's keys
only, so the same batch mixes the same pairs on any worker, rank, or after a resume, and
whatever order its rows are in. The images are then mixed where they are (NumPy, or torch
on any device) in a few batched operations.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from looptoolkit.adapters import backend_of
from looptoolkit.augment import _dispatch
from looptoolkit.augment._base import ImageBatch, Op

__all__ = ["CutMix", "MixUp", "beta_from_uniforms"]

_TRIES = 8  # Marsaglia-Tsang tries per gamma draw (shape >= 1 accepts >= 95% of tries)
_GAMMA_DRAWS = 2 * _TRIES + 1  # a normal and an acceptance test per try, then the boost
BETA_DRAWS = 2 * _GAMMA_DRAWS  # uniforms per Beta draw: two gamma draws
_LOG_RATIO_MAX = 700.0  # exp(700) is still finite in float64


def _log_gamma(u: np.ndarray, shape: float) -> np.ndarray:
    """The logs of Gamma(``shape``, 1) draws from uniforms ``u`` ``(N, 2 * _TRIES + 1)``.

    Marsaglia and Tsang's method (2000) for the shape ``shape + 1 >= 1``, then their boost
    ``Gamma(a) = Gamma(a + 1) * U ** (1 / a)``, in logs so that small shapes do not underflow.
    Each row makes ``_TRIES`` tries at once (standard normals by Box-Muller) and takes its
    first accepted one; at shape ``>= 1`` a try is rejected with probability ``< 0.05``, so
    a row rejects all of them with probability ``< 1e-10`` and then takes the mode.
    """
    d = shape + 1.0 - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    half = _TRIES // 2
    # Box-Muller: two uniforms, two independent normals; 1 - u is in (0, 1], log is finite.
    radius = np.sqrt(-2.0 * np.log1p(-u[:, :half]))
    angle = 2.0 * math.pi * u[:, half : 2 * half]
    z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    t = 1.0 + c * z
    v = t * t * t
    positive = v > 0
    log_v = np.log(np.where(positive, v, 1.0))
    accept = positive & (np.log1p(-u[:, _TRIES : 2 * _TRIES]) < 0.5 * z * z + d - d * v + d * log_v)
    first = np.argmax(accept, axis=1)
    rows = np.arange(len(u))
    chosen = np.where(accept.any(axis=1), log_v[rows, first], 0.0)
    return math.log(d) + chosen + np.log1p(-u[:, 2 * _TRIES]) / shape


def beta_from_uniforms(u: np.ndarray, alpha: float) -> np.ndarray:
    """Beta(``alpha``, ``alpha``) draws, one per row of uniforms ``u`` ``(N, BETA_DRAWS)``.

    ``X / (X + Y)`` for independent Gamma(``alpha``) draws ``X`` and ``Y``: a pure,
    vectorised function of the uniforms, so a row's weight is a function of its key.

    Args:
        u: uniforms in ``[0, 1)``, ``BETA_DRAWS`` a row.
        alpha: both shape parameters, ``> 0``.

    Returns:
        A float64 array ``(N,)`` in ``[0, 1]``.

    Examples:
        >>> import numpy as np
        >>> u = np.random.default_rng(0).random((10_000, BETA_DRAWS))
        >>> lam = beta_from_uniforms(u, 2.0)
        >>> bool(abs(lam.mean() - 0.5) < 0.01), bool(abs(lam.var() - 0.05) < 0.005)
        (True, True)
    """
    log_x = _log_gamma(u[:, :_GAMMA_DRAWS], alpha)
    log_y = _log_gamma(u[:, _GAMMA_DRAWS:BETA_DRAWS], alpha)
    ratio = np.clip(log_y - log_x, -_LOG_RATIO_MAX, _LOG_RATIO_MAX)
    return 1.0 / (1.0 + np.exp(ratio))


def _partners(u: np.ndarray) -> np.ndarray:
    """Each row's partner: the next row in the order of the keyed uniforms ``u``, cyclically.

    A permutation without fixed points for two rows or more. The order is that of the
    uniforms (53 random bits a row), so it does not depend on where the rows sit in the
    batch; only rows with the same key (the same row twice) tie, and they are alike.
    """
    order = np.argsort(u, kind="stable")
    partner = np.empty(len(u), dtype=np.int64)
    partner[order] = np.roll(order, -1)
    return partner


def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise TypeError(f"`alpha` must be a number, got {type(alpha).__name__}.")
    if not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"`alpha` must be a finite number > 0, got {alpha!r}.")
    return float(alpha)


def _framework(x: Any, what: str) -> str:
    """``"numpy"``, ``"torch"``, ``"jax"`` or ``"tf"``: where ``x`` lives (the ops' kinds)."""
    backend = backend_of(x)
    name = backend.name if backend is not None else None
    if name not in ("numpy", "torch", "jax", "tf"):
        got = type(x).__name__ if name is None else f"a {name} array"
        raise TypeError(
            f"`{what}` must be a NumPy array, a torch tensor, a JAX array or a tf tensor, "
            f"got {got}."
        )
    return name


def _like(values: np.ndarray, like: Any) -> Any:
    """Host array ``values`` in the framework (and on the device) of ``like``."""
    if isinstance(like, np.ndarray):
        return values
    import torch

    return torch.as_tensor(values, device=like.device)


def _where(cond: Any, a: Any, b: Any) -> Any:
    if isinstance(cond, np.ndarray):
        return np.where(cond, a, b)
    import torch

    return torch.where(cond, a, b)


def _soft_labels(batch: ImageBatch, op: str) -> Any:
    """The batch's labels as soft labels ``(N, K)`` float32, in the labels' framework."""
    labels, n = batch.labels, len(batch.images)
    if labels is None:
        raise ValueError(
            f"{op} mixes labels as well as images: pass the batch's labels "
            "(`labels=` of Augment, the key of the labels leaf)."
        )
    name = _framework(labels, "labels")
    shape = tuple(labels.shape)
    if len(shape) not in (1, 2) or shape[0] != n:
        raise ValueError(
            f"`labels` must be class ids (N,) or one-hot/soft labels (N, K) for the {n} "
            f"images, got shape {shape}."
        )
    k = batch.num_classes
    if name == "torch":
        import torch

        integer = not (labels.dtype.is_floating_point or labels.dtype.is_complex)
        integer = integer and labels.dtype != torch.bool
        numeric = not labels.dtype.is_complex
    elif name == "tf":
        integer = bool(labels.dtype.is_integer)
        numeric = integer or bool(labels.dtype.is_floating or labels.dtype.is_bool)
    else:
        integer = labels.dtype.kind in "iu"
        numeric = labels.dtype.kind in "biuf"
    if len(shape) == 1:
        if not integer:
            raise TypeError(
                f"`labels` of shape (N,) must be integer class ids, got dtype {labels.dtype}; "
                "pass soft labels as (N, K)."
            )
        if k is None:
            raise ValueError(
                f"{op} needs `num_classes` to turn class ids into one-hot labels: pass "
                "`num_classes=` to Augment, or pass one-hot labels (N, K)."
            )
        ids = np.asarray(labels) if name == "tf" else labels
        if n and (int(ids.min()) < 0 or int(ids.max()) >= k):
            raise ValueError(
                f"`labels` must be class ids in [0, {k}) (`num_classes`={k}), got ids from "
                f"{int(ids.min())} to {int(ids.max())}."
            )
        if name == "torch":
            import torch

            return torch.nn.functional.one_hot(labels.long(), k).to(torch.float32)
        kernels = _dispatch.kernels(labels)
        if kernels is not None:
            return kernels.soft_labels(labels, k)
        return np.eye(k, dtype=np.float32)[labels]
    if not numeric:
        raise TypeError(f"`labels` (N, K) must be numbers, got dtype {labels.dtype}.")
    if k is not None and shape[1] != k:
        raise ValueError(
            f"`labels` (N, K) must have K = `num_classes` = {k} columns, got {shape[1]}."
        )
    if name == "torch":
        import torch

        return labels.to(torch.float32)
    kernels = _dispatch.kernels(labels)
    if kernels is not None:
        return kernels.soft_labels(labels, k)
    return labels.astype(np.float32)


def _blend(images: Any, others: Any, weight: Any) -> Any:
    """``weight * images + (1 - weight) * others`` in the images' dtype.

    Integer images are mixed in float32 and rounded to the nearest integer (halves to even),
    then clipped to the dtype's range; float images are mixed in float32 (float64 in float64).
    """
    if isinstance(images, np.ndarray):
        dtype = images.dtype
        work: Any = np.float64 if dtype == np.float64 else np.float32
        w = weight.astype(work)
        out = w * images.astype(work) + (1 - w) * others.astype(work)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            out = np.clip(np.rint(out), info.min, info.max)
        return out.astype(dtype)
    import torch

    kind = images.dtype
    precision = torch.float64 if kind == torch.float64 else torch.float32
    w_t = weight.to(precision)
    mixed = w_t * images.to(precision) + (1 - w_t) * others.to(precision)
    if not (kind.is_floating_point or kind == torch.bool):
        bounds = torch.iinfo(kind)
        mixed = torch.round(mixed).clamp(bounds.min, bounds.max)
    return mixed.to(kind)


def _check_images(batch: ImageBatch) -> None:
    _framework(batch.images, "images")
    if batch.channels not in ("first", "last"):
        raise ValueError(f"`channels` must be 'first' or 'last', got {batch.channels!r}.")
    if len(batch.images.shape) != 4:
        layout = "(N, C, H, W)" if batch.channels == "first" else "(N, H, W, C)"
        raise ValueError(
            f"`images` must be a batch {layout}, got shape {tuple(batch.images.shape)}."
        )


def _mixing(params: dict[str, np.ndarray]) -> np.ndarray:
    """The rows that mix: drawn to apply, and with a partner other than themselves."""
    partner = params["partner"]
    return params["apply"] & (partner != np.arange(len(partner)))


def _mix_labels(soft: Any, params: dict[str, np.ndarray], mixing: np.ndarray) -> Any:
    weight = np.where(mixing, params["lam"], 1.0).astype(np.float32)[:, None]
    kernels = _dispatch.kernels(soft)
    if kernels is not None:
        return kernels.mix_labels(soft, params["partner"], weight[:, 0])
    w, partner = _like(weight, soft), _like(params["partner"], soft)
    return w * soft + (1 - w) * soft[partner]


class MixUp(Op):
    """MixUp (Zhang et al. 2018): each row blended with its partner, labels alike.

    Row ``i`` becomes ``λ_i * x_i + (1 - λ_i) * x_j`` and its label
    ``λ_i * y_i + (1 - λ_i) * y_j``, where ``j`` is its keyed partner in the batch and
    ``λ_i ~ Beta(alpha, alpha)`` is the row's own draw. Rows not drawn to apply (``p``)
    keep their image and label (as soft labels). Integer images (``uint8``) are mixed in
    float32 and rounded to the nearest integer; float images keep their dtype. Labels come
    out as soft labels ``(N, K)`` float32 (class ids need the batch's ``num_classes``).

    Args:
        alpha: the Beta distribution's parameters, ``> 0`` (``1.0``: λ uniform).
        p: the probability that a row is mixed.

    Raises:
        TypeError: ``alpha`` is not a number.
        ValueError: ``alpha`` is not finite and ``> 0``, or ``p`` is not in ``[0, 1]``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import BatchKeys
        >>> from looptoolkit.augment._base import ImageBatch
        >>> batch = ImageBatch(np.zeros((4, 3, 8, 8), np.float32), labels=np.arange(4),
        ...                    num_classes=4)
        >>> op = MixUp(alpha=0.4)
        >>> out = op.apply(batch, op.draw(BatchKeys(0, 0, np.arange(4)), 1, batch))
        >>> out.labels.shape, out.labels.dtype, bool(np.allclose(out.labels.sum(1), 1))
        ((4, 4), dtype('float32'), True)
    """

    draws = BETA_DRAWS + 1  # λ, then the partner order

    def __init__(self, alpha: float = 1.0, p: float = 1.0) -> None:
        super().__init__(p)
        self.alpha = _check_alpha(alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha!r}, p={self.p!r})"

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """``"lam"`` (each row's own weight) and ``"partner"`` (the row it mixes with)."""
        return {
            "lam": beta_from_uniforms(u[:, :BETA_DRAWS], self.alpha),
            "partner": _partners(u[:, BETA_DRAWS]),
        }

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The batch's images and labels mixed, labels as soft labels ``(N, K)`` float32."""
        _check_images(batch)
        soft = _soft_labels(batch, type(self).__name__)
        mixing = _mixing(params)
        images = batch.images
        weight = np.where(mixing, params["lam"], 1.0).astype(np.float32)[:, None, None, None]
        kernels = _dispatch.kernels(images)
        if kernels is not None:
            labels = _mix_labels(soft, params, mixing)
            mixed = kernels.mixup(images, params["partner"], weight[:, 0, 0, 0], mixing)
            return dataclasses.replace(
                batch, images=mixed, labels=labels, num_classes=int(labels.shape[1])
            )
        mixed = _blend(images, images[_like(params["partner"], images)], _like(weight, images))
        mixed = _where(_like(mixing[:, None, None, None], images), mixed, images)
        labels = _mix_labels(soft, params, mixing)
        return dataclasses.replace(
            batch, images=mixed, labels=labels, num_classes=int(labels.shape[1])
        )


class CutMix(Op):
    """CutMix (Yun et al. 2019): a box of the partner's image pasted into each row.

    The box follows torchvision's ``CutMix``: for the row's ``λ ~ Beta(alpha, alpha)`` it
    is ``sqrt(1 - λ)`` of the image's height and width, its centre uniform over the pixels,
    clipped to the image; ``λ`` is then corrected to the share of the image left outside
    the box, and the labels are mixed by the corrected ``λ``: ``λ y_i + (1 - λ) y_j``. Rows
    not drawn to apply (``p``) keep their image and label. Images keep their dtype (pixels
    are copied, not blended), channel-first or channel-last; labels come out as soft labels
    ``(N, K)`` float32.

    Args:
        alpha: the Beta distribution's parameters, ``> 0``.
        p: the probability that a row is mixed.

    Raises:
        TypeError: ``alpha`` is not a number.
        ValueError: ``alpha`` is not finite and ``> 0``, or ``p`` is not in ``[0, 1]``.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit.augment import BatchKeys
        >>> from looptoolkit.augment._base import ImageBatch
        >>> batch = ImageBatch(np.zeros((4, 8, 8, 3), np.uint8), channels="last",
        ...                    labels=np.eye(4, dtype=np.float32))
        >>> op = CutMix()
        >>> params = op.draw(BatchKeys(0, 0, np.arange(4)), 2, batch)
        >>> sorted(params)
        ['apply', 'box', 'lam', 'partner']
        >>> op.apply(batch, params).images.dtype
        dtype('uint8')
    """

    draws = BETA_DRAWS + 3  # λ, the partner order, the box centre (y, x)

    def __init__(self, alpha: float = 1.0, p: float = 1.0) -> None:
        super().__init__(p)
        self.alpha = _check_alpha(alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha!r}, p={self.p!r})"

    def params(self, u: np.ndarray, batch: ImageBatch) -> dict[str, np.ndarray]:
        """``"lam"`` (corrected to the box), ``"partner"``, ``"box"`` (y1, y2, x1, x2)."""
        lam = beta_from_uniforms(u[:, :BETA_DRAWS], self.alpha)
        h, w = batch.size
        cy = np.floor(u[:, BETA_DRAWS + 1] * h).astype(np.int64)
        cx = np.floor(u[:, BETA_DRAWS + 2] * w).astype(np.int64)
        r = 0.5 * np.sqrt(1.0 - lam)
        half_h, half_w = (r * h).astype(np.int64), (r * w).astype(np.int64)
        y1, y2 = np.maximum(cy - half_h, 0), np.minimum(cy + half_h, h)
        x1, x2 = np.maximum(cx - half_w, 0), np.minimum(cx + half_w, w)
        area = (y2 - y1) * (x2 - x1)
        return {
            "lam": 1.0 - area / max(h * w, 1),
            "partner": _partners(u[:, BETA_DRAWS]),
            "box": np.stack([y1, y2, x1, x2], axis=1),
        }

    def apply(self, batch: ImageBatch, params: dict[str, np.ndarray]) -> ImageBatch:
        """The boxes pasted and the labels mixed, labels as soft labels ``(N, K)`` float32."""
        _check_images(batch)
        soft = _soft_labels(batch, type(self).__name__)
        mixing = _mixing(params)
        images = batch.images
        h, w = batch.size
        box = np.where(mixing[:, None], params["box"], 0)  # rows not mixing: an empty box
        kernels = _dispatch.kernels(images)
        if kernels is not None:
            labels = _mix_labels(soft, params, mixing)
            pasted = kernels.cutmix(images, params["partner"], box, batch.channels)
            return dataclasses.replace(
                batch, images=pasted, labels=labels, num_classes=int(labels.shape[1])
            )
        y1, y2, x1, x2 = (_like(np.ascontiguousarray(box[:, i, None]), images) for i in range(4))
        ys, xs = _like(np.arange(h), images), _like(np.arange(w), images)
        inside = ((ys >= y1) & (ys < y2))[:, :, None] & ((xs >= x1) & (xs < x2))[:, None, :]
        inside = inside[:, None] if batch.channels == "first" else inside[..., None]
        pasted = _where(inside, images[_like(params["partner"], images)], images)
        labels = _mix_labels(soft, params, mixing)
        return dataclasses.replace(
            batch, images=pasted, labels=labels, num_classes=int(labels.shape[1])
        )
