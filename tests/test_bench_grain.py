"""grain's concat-then-split packer, a peer on the tokens workload (grain: the peers extra)."""

from __future__ import annotations

import numpy as np
import pytest

from looptoolkit.bench.check_documents import check_documents
from looptoolkit.bench.variants import Context, variants
from looptoolkit.bench.variants.tokens import SETTINGS, Corpus, Settings, packed_rows
from looptoolkit.bench.workloads import make_workload


def _corpus(seed: int, n: int, longest: int) -> dict[str, np.ndarray]:
    """``n`` documents of 8..``longest`` random tokens (0 included: padding proves nothing)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, longest + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return {"values": rng.integers(0, 5, int(offsets[-1]), dtype=np.int32), "offsets": offsets}


def _peer():
    return next(v for v in variants(["numpy"]) if v.name == "grain-pack")


def test_the_peer_is_declared_under_pack_and_needs_grain():
    # runs without grain: the variant imports it only when its loop is built
    v = _peer()
    assert v.batching == "pack" and v.needs == ("grain",) and v.workloads == ("tokens",)
    assert v.floor == "floor-pack-copy|floor-pack-take" and v.shuffle is None and v.slow


def test_grain_pack_passes_the_documents_check_over_whole_epochs():
    pytest.importorskip("grain", reason="grain is in the peers extra, not installed")
    data = _corpus(0, 120, longest=4000)  # documents longer than a row of 2,048
    assert np.diff(data["offsets"]).max() > SETTINGS.seq_len
    w = make_workload("tokens", quick=True)
    w.data = data
    v, ctx = _peer(), Context(w, data, "cpu")
    pipeline = v.factory(ctx)
    firsts = []
    for _ in range(2):  # two epochs, each its own shuffle
        check = check_documents(v, pipeline, ctx)
        assert check.ok, check.detail
        assert check.extra["checked_tokens"] == int(data["offsets"][-1])
        assert check.batches == len(pipeline)
        firsts.append(np.asarray(next(iter(pipeline)).values))
    assert not np.array_equal(firsts[0], firsts[1])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_grain_pack_equals_the_hand_loop_in_the_same_order(seed):
    grain = pytest.importorskip("grain", reason="grain is in the peers extra, not installed")
    from looptoolkit.bench.variants.grain_pack import Documents, packed

    data = _corpus(seed, 90, longest=300)
    corpus, s = Corpus.of(data), Settings(seq_len=128, rows=3)
    order = np.random.default_rng(seed).permutation(corpus.n)
    source = Documents(corpus)
    documents = grain.MapDataset.range(corpus.n).map(lambda i: source[int(order[i])])
    got = list(packed(documents, s))
    want = list(packed_rows(corpus, order, s.seq_len, s.rows, "take"))
    assert len(got) == len(want) > 1
    for a, b in zip(got, want, strict=True):
        for name in ("values", "segment_ids", "position_ids", "cu_seqlens"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert a.max_seqlen == b.max_seqlen


def test_grain_first_fit_refuses_documents_longer_than_a_row():
    # why grain's first-fit packer is no peer: the workload's documents reach 4,000 tokens
    grain = pytest.importorskip("grain", reason="grain is in the peers extra, not installed")
    docs = [{"tokens": np.arange(n, dtype=np.int32)} for n in (10, 40, 5)]
    ds = grain.MapDataset.source(docs).to_iter_dataset()
    fit = grain.experimental.FirstFitPackIterDataset(
        ds, length_struct={"tokens": 32}, num_packing_bins=2
    )
    with pytest.raises(ValueError, match="truncated"):
        list(fit)
