"""MaskTokens (looptoolkit.augment._tokens): BERT's masking rule, keyed per token.

The statistics of the masks match Hugging Face's own ``DataCollatorForLanguageModeling``
on the same batch (run many times: the share of tokens chosen, the 80/10/10 split, specials
and padding never chosen, labels at ``ignore_index`` elsewhere), within bounds from the
sample sizes; a token's draws depend on its key only (seed, epoch, row position, index in
the row): the same in a batch padded to another length, alone, flat or padded, in NumPy or
torch; another epoch masks other tokens.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from looptoolkit import Flat, Padded
from looptoolkit._common.keys import BatchKeys
from looptoolkit.augment import MaskTokens

WORDS = [f"w{i}" for i in range(40)]
ROWS = 48
CALLS = 80  # batches of each side: ~ 80 * 1200 eligible tokens
Z = 4.5  # a bound of 4.5 standard errors: a false alarm ~ 1e-5 per comparison


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("vocab")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return transformers.BertTokenizerFast.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def examples(tokenizer: Any) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, int(n))) for n in rng.integers(3, 50, ROWS)]
    return [tokenizer(text) for text in texts]


def padded_of(rows: list[np.ndarray], length: int | None = None) -> Padded:
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    length = int(lengths.max()) if length is None else length
    values = np.zeros((len(rows), length), dtype=np.int64)
    for i, r in enumerate(rows):
        values[i, : len(r)] = r
    return Padded(values, np.arange(length) < lengths[:, None], lengths)


def flat_of(rows: list[np.ndarray]) -> Flat:
    lengths = np.array([len(r) for r in rows])
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    positions = np.concatenate([np.arange(n) for n in lengths]).astype(np.int64)
    return Flat(np.concatenate(rows).astype(np.int64), cu, positions, int(lengths.max()))


def masker(tokenizer: Any, **kwargs: Any) -> MaskTokens:
    return MaskTokens(
        vocab_size=len(tokenizer),
        mask_token_id=tokenizer.mask_token_id,
        special_token_ids=tokenizer.all_special_ids,
        pad_token_id=tokenizer.pad_token_id,
        **kwargs,
    )


def keys(n: int, epoch: int = 0, start: int = 1000) -> BatchKeys:
    return BatchKeys(3, epoch, np.arange(start, start + n, dtype=np.int64))


def counts(ids: np.ndarray, new: np.ndarray, labels: np.ndarray, mask_id: int) -> np.ndarray:
    """Chosen, masked, changed to another token, kept: over the chosen tokens ``labels >= 0``."""
    chosen = labels != -100
    assert np.array_equal(labels[chosen], ids[chosen])  # labels: the original ids
    assert np.array_equal(new[~chosen], ids[~chosen])  # the rest untouched
    picked_new, picked_old = new[chosen], ids[chosen]
    masked = picked_new == mask_id
    kept = picked_new == picked_old
    return np.array([chosen.sum(), masked.sum(), (~masked & ~kept).sum(), kept.sum()])


@pytest.fixture(scope="module")
def both_sides(tokenizer: Any, examples: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts of HF's collator and of MaskTokens over ``CALLS`` batches each."""
    from transformers import DataCollatorForLanguageModeling

    collator = DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=0.15, return_tensors="np", seed=0
    )
    padded = padded_of([np.array(e["input_ids"]) for e in examples])
    ids = padded.values
    special = np.isin(ids, tokenizer.all_special_ids) | ~padded.mask
    hf, ours = np.zeros(4, np.int64), np.zeros(4, np.int64)
    op = masker(tokenizer)
    for call in range(CALLS):
        out = collator([dict(e) for e in examples])
        assert np.array_equal(out["input_ids"] * 0, ids * 0)  # same padded shape
        assert (out["labels"][special] == -100).all()
        hf += counts(ids, out["input_ids"], out["labels"], tokenizer.mask_token_id)
        mine = op({"input_ids": padded}, keys(ROWS, epoch=call))
        new, labels = mine["input_ids"].values, mine["labels"].values
        assert (labels[special] == -100).all() and np.array_equal(new[special], ids[special])
        ours += counts(ids, new, labels, tokenizer.mask_token_id)
    eligible = int((~special).sum()) * CALLS
    return {"hf": hf, "ours": ours, "eligible": eligible, "vocab": len(tokenizer)}


def close(k1: int, n1: int, k2: int, n2: int) -> bool:
    """Two proportions equal within ``Z`` standard errors of their difference."""
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / n1 + 1 / n2))
    return abs(k1 / n1 - k2 / n2) <= Z * se


def near(k: int, n: int, p: float) -> bool:
    """A proportion within ``Z`` standard errors of ``p``."""
    return abs(k / n - p) <= Z * math.sqrt(p * (1 - p) / n)


def test_share_chosen_matches_hf(both_sides):
    hf, ours, n = both_sides["hf"], both_sides["ours"], both_sides["eligible"]
    assert n > 50_000
    assert close(ours[0], n, hf[0], n)
    assert near(ours[0], n, 0.15) and near(hf[0], n, 0.15)


def test_split_of_the_chosen_matches_hf(both_sides):
    hf, ours, v = both_sides["hf"], both_sides["ours"], both_sides["vocab"]
    # A random token is the mask token or the original with probability 1/v each.
    expected = [0.8 + 0.1 / v, 0.1 * (1 - 2 / v), 0.1 + 0.1 / v]
    for i, p in enumerate(expected, start=1):
        assert close(ours[i], ours[0], hf[i], hf[0]), (i, ours, hf)
        assert near(ours[i], ours[0], p) and near(hf[i], hf[0], p), (i, ours, hf)


def test_random_tokens_are_uniform_over_the_vocabulary():
    v = 45
    op = MaskTokens(vocab_size=v, mask_token_id=4, probability=1.0, mask_fraction=0.0,
                    random_fraction=1.0)  # fmt: skip
    ids = np.full((400, 100), 7)
    out = op({"input_ids": ids}, keys(400))
    observed = np.bincount(out["input_ids"].ravel(), minlength=v)
    assert len(observed) == v
    assert stats.chisquare(observed).pvalue > 1e-4


def test_probability_zero_and_one():
    ids = np.arange(2, 50).reshape(4, 12)
    none = MaskTokens(vocab_size=50, mask_token_id=1, probability=0.0)
    out = none({"input_ids": ids}, keys(4))
    assert np.array_equal(out["input_ids"], ids) and (out["labels"] == -100).all()
    every = MaskTokens(vocab_size=50, mask_token_id=1, probability=1.0, special_token_ids=[2])
    out = every({"input_ids": ids}, keys(4))
    assert np.array_equal(out["labels"] == -100, ids == 2)


# --- keyed ----------------------------------------------------------------------------------


@pytest.fixture
def rows() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [np.concatenate([[2], rng.integers(5, 45, n), [3]]) for n in rng.integers(3, 60, 12)]


def op_for_rows() -> MaskTokens:
    return MaskTokens(vocab_size=45, mask_token_id=4, special_token_ids=(1, 2, 3, 4),
                      pad_token_id=0, probability=0.3)  # fmt: skip


def test_same_keys_same_masks_other_epoch_others(rows):
    op, batch = op_for_rows(), {"input_ids": padded_of(rows)}
    a = op(batch, keys(len(rows)))
    b = op(batch, keys(len(rows)))
    c = op(batch, keys(len(rows), epoch=1))
    assert np.array_equal(a["input_ids"].values, b["input_ids"].values)
    assert np.array_equal(a["labels"].values, b["labels"].values)
    assert not np.array_equal(a["labels"].values, c["labels"].values)
    # The batch's other entries pass through; the input is not modified.
    assert a["input_ids"].mask is batch["input_ids"].mask
    assert np.array_equal(batch["input_ids"].values, padded_of(rows).values)


def test_a_row_masks_the_same_padded_to_another_length(rows):
    op, n = op_for_rows(), len(rows)
    short = op({"input_ids": padded_of(rows)}, keys(n))
    longest = short["input_ids"].values.shape[1]
    long = op({"input_ids": padded_of(rows, longest + 37)}, keys(n))
    assert np.array_equal(long["input_ids"].values[:, :longest], short["input_ids"].values)
    assert np.array_equal(long["labels"].values[:, :longest], short["labels"].values)
    assert (long["labels"].values[:, longest:] == -100).all()
    assert (long["input_ids"].values[:, longest:] == 0).all()
    assert isinstance(long["labels"], Padded)
    assert np.array_equal(long["labels"].lengths, long["input_ids"].lengths)


def test_a_row_masks_the_same_in_any_batch(rows):
    op, n = op_for_rows(), len(rows)
    whole = op({"input_ids": padded_of(rows)}, keys(n))
    pick = list(np.argsort([len(r) for r in rows])[:2])  # a shorter padded length
    k = keys(n)
    part = op({"input_ids": padded_of([rows[i] for i in pick])}, BatchKeys(3, 0, k.positions[pick]))
    for j, i in enumerate(pick):
        length = len(rows[i])
        for name in ("input_ids", "labels"):
            assert np.array_equal(part[name].values[j, :length], whole[name].values[i, :length])


def test_flat_masks_as_padded(rows):
    op, n = op_for_rows(), len(rows)
    padded = op({"input_ids": padded_of(rows)}, keys(n))
    flat = op({"input_ids": flat_of(rows)}, keys(n))
    assert isinstance(flat["input_ids"], Flat) and isinstance(flat["labels"], Flat)
    mask = padded["input_ids"].mask
    assert np.array_equal(flat["input_ids"].values, padded["input_ids"].values[mask])
    assert np.array_equal(flat["labels"].values, padded["labels"].values[mask])
    assert flat["labels"].cu_seqlens is flat["input_ids"].cu_seqlens
    assert flat["labels"].values.dtype == np.int64


def test_plain_arrays_pad_with_pad_token_id(rows):
    op, n = op_for_rows(), len(rows)
    padded = padded_of(rows)
    a = op({"input_ids": padded}, keys(n))
    b = op({"input_ids": padded.values, "other": 1}, keys(n))
    assert np.array_equal(b["input_ids"], a["input_ids"].values)
    assert np.array_equal(b["labels"], a["labels"].values)
    assert b["other"] == 1


def test_ids_keep_their_dtype():
    ids = np.arange(5, 45, dtype=np.uint16).reshape(4, 10)
    out = MaskTokens(vocab_size=45, mask_token_id=4, probability=0.5)({"input_ids": ids}, keys(4))
    assert out["input_ids"].dtype == np.uint16 and out["labels"].dtype == np.int64
    assert (out["labels"] != -100).any()


def test_labels_key_and_ignore_index():
    ids = np.arange(5, 45).reshape(4, 10)
    op = MaskTokens(vocab_size=45, mask_token_id=4, key="ids", labels_key="target",
                    ignore_index=-1, probability=0.5)  # fmt: skip
    out = op({"ids": ids}, keys(4))
    assert set(out) == {"ids", "target"}
    assert set(np.unique(out["target"][out["target"] < 0])) == {-1}


# --- torch ----------------------------------------------------------------------------------


def to_torch(leaf: Any, device: Any = "cpu") -> Any:
    torch = pytest.importorskip("torch")
    if isinstance(leaf, np.ndarray):
        return torch.as_tensor(leaf, device=device)
    return type(leaf)(*(to_torch(x, device) if isinstance(x, np.ndarray) else x for x in leaf))


def test_torch_agrees_with_numpy(rows):
    torch = pytest.importorskip("torch")
    op, n = op_for_rows(), len(rows)
    for leaf in (padded_of(rows), flat_of(rows), padded_of(rows).values):
        host = op({"input_ids": leaf}, keys(n))
        dev = op({"input_ids": to_torch(leaf)}, keys(n))
        for name in ("input_ids", "labels"):
            a, b = host[name], dev[name]
            a_values = a if isinstance(a, np.ndarray) else a.values
            b_values = b if isinstance(b, torch.Tensor) else b.values
            assert isinstance(b_values, torch.Tensor)
            assert np.array_equal(b_values.numpy(), a_values)
    out = op({"input_ids": to_torch(padded_of(rows))}, keys(n))
    assert out["labels"].values.dtype == torch.long


@pytest.mark.cuda
def test_cuda_agrees_with_the_host(rows, cuda):
    op, n = op_for_rows(), len(rows)
    for leaf in (padded_of(rows), flat_of(rows)):
        host = op({"input_ids": leaf}, keys(n))
        dev = op({"input_ids": to_torch(leaf, cuda)}, keys(n))
        assert dev["input_ids"].values.device == cuda
        assert np.array_equal(dev["input_ids"].values.cpu().numpy(), host["input_ids"].values)
        assert np.array_equal(dev["labels"].values.cpu().numpy(), host["labels"].values)


# --- errors ---------------------------------------------------------------------------------


def test_bad_batches_are_refused():
    op = MaskTokens(vocab_size=10, mask_token_id=1)
    with pytest.raises(ValueError, match=r"`key` 'input_ids' names no leaf of the batch, whose"):
        op({"ids": np.zeros((2, 3), np.int64)}, keys(2))
    with pytest.raises(TypeError, match=r"`batch\['input_ids'\]` must hold integer token ids"):
        op({"input_ids": np.zeros((2, 3))}, keys(2))
    with pytest.raises(TypeError, match=r"`batch\['input_ids'\].values` must hold integer"):
        op({"input_ids": Padded(np.zeros((2, 3)), np.ones((2, 3), bool), np.array([3, 3]))},
           keys(2))  # fmt: skip
    with pytest.raises(ValueError, match=r"must be \(B, L\), got shape \(6,\)"):
        op({"input_ids": np.zeros(6, np.int64)}, keys(2))
    with pytest.raises(ValueError, match=r"a position per row of the batch, got 3 positions"):
        op({"input_ids": np.zeros((2, 3), np.int64)}, keys(3))
    with pytest.raises(TypeError, match=r"`batch` must be a mapping, got ndarray"):
        op(np.zeros((2, 3), np.int64), keys(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"NumPy array or a torch tensor, got list"):
        op({"input_ids": [[1, 2]]}, keys(1))


def test_bad_torch_ids_are_refused():
    torch = pytest.importorskip("torch")
    op = MaskTokens(vocab_size=10, mask_token_id=1)
    with pytest.raises(TypeError, match=r"must hold integer token ids, got dtype torch.float32"):
        op({"input_ids": torch.zeros((2, 3))}, keys(2))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"probability": 1.5}, ValueError, r"`probability` must be a probability in \[0, 1\]"),
        ({"probability": -0.1}, ValueError, r"`probability` must be a probability"),
        ({"probability": "0.1"}, TypeError, r"`probability` must be a number, got str"),
        ({"mask_fraction": 0.9, "random_fraction": 0.2}, ValueError, r"must be <= 1"),
        ({"vocab_size": 0}, ValueError, r"`vocab_size` must be >= 1, got 0"),
        ({"vocab_size": 10.0}, TypeError, r"`vocab_size` must be an int, got float"),
        ({"mask_token_id": -1}, ValueError, r"`mask_token_id` must be >= 0"),
        ({"special_token_ids": "[CLS]"}, TypeError, r"`special_token_ids` must be an iterable"),
        ({"special_token_ids": [1.5]}, TypeError, r"`special_token_ids` must be an int"),
        ({"labels_key": "input_ids"}, ValueError, r"`labels_key` must differ from `key`"),
        ({"key": 3}, TypeError, r"`key` must be a str, got int"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, message):
    arguments = {"vocab_size": 10, "mask_token_id": 1, **kwargs}
    with pytest.raises(error, match=message):
        MaskTokens(**arguments)


def test_repr_echoes_the_arguments():
    op = MaskTokens(vocab_size=10, mask_token_id=1, special_token_ids=[2, 3])
    assert repr(op).startswith("MaskTokens(vocab_size=10, mask_token_id=1, probability=0.15, ")
    assert "special_token_ids=(2, 3)" in repr(op)
