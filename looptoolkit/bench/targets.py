"""The one table of benchmark targets, and how a run's figures are set against it.

A GPU target (``gpu-*``) on a CPU run is reported as such, never as met.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass

from looptoolkit.bench.results import Verdict

__all__ = ["BASELINE", "NOT_JUDGED", "TARGETS", "Target", "evaluate", "shown"]

BASELINE = "numpy-take"  # every loop's ratio is to it: the fastest hand-written loop
NOT_JUDGED = "not judged at --quick"  # every target's status at --quick: toy sizes judge nothing
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge}


@dataclass(frozen=True)
class Target:
    """``numerator / denominator`` (or ``numerator``) ``op`` ``bound``; ``floor`` bounds it."""

    key: str
    suite: str
    text: str
    numerator: str
    denominator: str | None
    op: str
    bound: float
    floor: str | None

    gpu = property(lambda self: self.key.startswith("gpu-"), doc="Measured on a GPU only.")
    goal = property(lambda self: f"{self.op} {self.bound:g}x", doc='The bound: ``"<= 1.02x"``.')


# key | suite | what | ratio op bound | floor; the quantities: compare's medians (tabular, tokens),
# wait:<v> / step:<v> per batch (step section), floor:<v> the median of the tokens row v's floor
# (the faster of its two hand loops), mix:<v> the median of row v of the mix workload (augment:<v>
# of the augment workload; augment:draw and augment:ops the keyed draw's and the ops' ms a batch;
# bucket:<v> of the bucket workload, bucket:amp:<v> its bytes fetched per byte used,
# bucket:first:<v> its first batch in s, bucket:first-bound the first-batch bound),
# transfer's <section>:<name> values.
_TABLE = """
loader-numpy | compare | Loader, NumPy data, full shuffle | loader-numpy / numpy-take <= 1.02 | numpy-take
loader-grouped | compare | Loader, NumPy data, grouped shuffle | loader-grouped / numpy-take <= 0.65 | floor-seq-take
loader-runs | compare | Loader, NumPy data, grouped in runs of 16 rows | loader-runs / numpy-take <= 0.65 | floor-seq-take
loader-torch | compare | Loader, torch data, over its floor (take + torch.from_numpy per batch) | loader-torch / floor-torch <= 1.05 |
loader-torch-hand | compare | Loader, torch data, vs torch's randperm + index_select loop | loader-torch / torch-index-select <= 1.0 |
loader-jax | compare | Loader, JAX data, over its floor (the chunked hand loop) | loader-jax / floor-jax <= 1.05 |
loader-tf | compare | Loader, tf data, over its floor (the chunked hand loop) | loader-tf / floor-tf <= 1.05 |
gpu-resident-vs-dataloader | compare | device-resident Loader: batches/s over DataLoader(TensorDataset, pin_memory) + .to(device) | dl-tensordataset / loader-torch-res >= 10 |
gpu-resident-vs-gather | compare | device-resident Loader over the bare on-device gather | loader-torch-res / torch-res-gather <= 1.5 |
gpu-prefetch-overlap | compare | prefetch: data wait per step over the step (loader-torch, step section) | wait:loader-torch / step:loader-torch < 0.05 |
tokens-pad | compare | tokens: Loader, 32 documents padded (full shuffle), over the faster hand loop | loader-pad / floor:loader-pad <= 1.1 |
tokens-group | compare | tokens: Loader, length-grouped padded batches, over the faster hand loop | loader-group / floor:loader-group <= 1.1 |
tokens-budget | compare | tokens: Loader, padded token budget of 8,192, over the faster hand loop | loader-budget / floor:loader-budget <= 1.1 |
tokens-pack | compare | tokens: Loader, concat-then-split rows of 2,048, over the faster hand loop | loader-pack / floor:loader-pack <= 1.1 |
tokens-flat | compare | tokens: Loader, 32 documents padding-free, over the faster hand loop | loader-flat / floor:loader-flat <= 1.1 |
mix-2 | compare | mix: Loader(Mix) of 2 sources (0.7/0.3) over the plain Loader on the same rows | mix:loader-mix2 / mix:loader-numpy <= 1.1 |
mix-5 | compare | mix: Loader(Mix) of 5 sources (0.4/0.25/0.15/0.12/0.08) over the plain Loader on the same rows | mix:loader-mix5 / mix:loader-numpy <= 1.1 |
augment-vs-tv | compare | augment: Loader in the loop's own process (NumPy, placement='host') over torchvision v2 per sample in a DataLoader with 2 workers (time per epoch) | augment:loader-aug-host / augment:tv-v2-w2 <= 1.0 |
augment-vs-kornia | compare | augment: Kornia batched over the Loader in the loop's own process (time per epoch) | augment:kornia-batched / augment:loader-aug-host >= 2 |
augment-draw | compare | augment: drawing the keyed parameters over running the ops (ms a batch, NumPy) | augment:draw / augment:ops < 0.05 |
bucket-grouped | compare | bucket: Loader, grouped epoch from the bucket (no disk cache, 20 ms a request) over the same on local disk | bucket:loader-s3-grouped / bucket:floor-local-grp <= 1.5 |
bucket-sequential | compare | bucket: Loader, sequential epoch from the bucket over the same on local disk | bucket:loader-s3-seq / bucket:floor-local-seq <= 1.5 |
bucket-bytes | compare | bucket: bytes fetched over bytes used, the Loader's grouped epoch from the bucket | bucket:amp:loader-s3-grouped <= 1.2 |
bucket-cache | compare | bucket: Loader, grouped epoch from a disk cache that holds the data over local disk | bucket:loader-s3-grp-e2 / bucket:floor-local-grp <= 1.1 |
bucket-first-batch | compare | bucket: first batch of a grouped epoch over 3 request latencies plus the chunks of rows it needs at the sequential epoch's rate | bucket:first:loader-s3-grouped / bucket:first-bound <= 1.0 |
bucket-vs-mosaic | compare | bucket: Loader's grouped epoch from the bucket over Mosaic streaming's first epoch (time; conversion apart) | bucket:loader-s3-grouped / bucket:mosaic-e1 < 1.0 |
bucket-vs-litdata | compare | bucket: Loader's grouped epoch from the bucket over litdata's first epoch (time; conversion apart) | bucket:loader-s3-grouped / bucket:litdata-e1 < 1.0 |
nested-torch-optree | transfer | to_device over optree.tree_map (nested, torch leaves) | torch:to_device / torch:optree <= 1.2 |
nested-torch-move-to | transfer | to_device over a hand-written move_to (nested, torch leaves) | torch:to_device / torch:move_to < 1.0 |
nested-numpy-optree | transfer | to_device over optree.tree_map (nested, NumPy leaves to torch) | numpy:to_device / numpy:optree <= 1.2 |
nested-numpy-move-to | transfer | to_device over a hand-written move_to (nested, NumPy leaves to torch) | numpy:to_device / numpy:move_to < 1.0 |
gpu-bandwidth | transfer | images host-to-device bandwidth over one large pinned copy | cuda:bandwidth-share >= 0.85 |
gpu-cast-on-device | transfer | images: cast-then-copy over copy-then-cast (to_device) | cuda:cast-then-copy / cuda:copy-then-cast >= 1.8 |
gpu-packed | transfer | nested: per-leaf over packed transfer | cuda:per-leaf / cuda:packed >= 5 |
"""  # a target per line, however long  # noqa: E501


def _target(line: str) -> Target:
    """A line of ``_TABLE`` as a `Target`."""
    key, suite, text, expression, floor = (part.strip() for part in line.split("|"))
    ratio, op, bound = expression.rsplit(" ", 2)
    numerator, _, denominator = ratio.partition(" / ")
    return Target(key, suite, text, numerator, denominator or None, op, float(bound), floor or None)


TARGETS: tuple[Target, ...] = tuple(map(_target, _TABLE.strip().splitlines()))


def _ratio(values: Mapping[str, float], top: str, bottom: str | None) -> float | None:
    """``top / bottom`` (``top`` alone if None) of ``values``; None when one is missing."""
    x, y = values.get(top), 1.0 if bottom is None else values.get(bottom)
    return None if x is None or not y or y <= 0 else float(x) / float(y)


def shown(value: float, bound: float) -> str:
    """``value`` as a ratio, with a third decimal where two would read as the bound.

    Examples:
        >>> shown(1.0241, 1.02), shown(0.8612, 1.02)
        ('1.024x', '0.86x')
    """
    text = f"{value:.2f}"
    return (f"{value:.3f}" if float(text) == bound and value != bound else text) + "x"


def evaluate(
    suite: str, values: Mapping[str, float], *, gpu: bool, judged: bool = True
) -> list[Verdict]:
    """A verdict per target of ``suite``: its ratio of ``values``, the floor's, the ``status``.

    ``"met"``, ``"not met"``, ``"GPU only"``, ``"not measured"``, or ``NOT_JUDGED`` (``judged``
    False: a ``--quick`` run).

    Examples:
        >>> v = evaluate("compare", {"loader-numpy": 1.5, "numpy-take": 1.0}, gpu=False)[0]
        >>> v.key, v.value, v.status, v.floor
        ('loader-numpy', 1.5, 'not met', 1.0)
    """
    if suite not in ("compare", "transfer"):
        raise ValueError(f"`suite` must be 'compare' or 'transfer', got {suite!r}.")
    verdicts = []
    for t in (t for t in TARGETS if t.suite == suite):
        v = Verdict(t.key, t.text, t.goal, t.numerator, "GPU only", floor_name=t.floor)
        verdicts.append(v)
        if t.gpu and not gpu:
            continue
        v.value = _ratio(values, t.numerator, t.denominator)
        v.floor = _ratio(values, t.floor, t.denominator) if t.floor else None
        if v.value is None:
            v.status = "not measured"
        else:
            v.shown, met = shown(v.value, t.bound), _OPS[t.op](v.value, t.bound)
            v.status = NOT_JUDGED if not judged else "met" if met else "not met"
    return verdicts
