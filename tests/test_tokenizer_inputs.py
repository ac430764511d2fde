"""A tokenizer's output as it comes: lists of token lists, ``BatchEncoding``, lists of arrays.

The rule (``docs/ragged.md``, the input table): under a key, a list of 1-D arrays or of
lists of numbers is one ragged column, whatever the lengths; equal lengths give a
``Ragged`` whose lengths are all equal, never a container of columns.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import looptoolkit as lt

TEXTS = ["the cat sat", "a dog", "the dog sat on a mat", "cat"]


def rows_of(batch: lt.Padded) -> list[list[float]]:
    values, lengths = np.asarray(batch.values), np.asarray(batch.lengths)
    return [v[:n].tolist() for v, n in zip(values, lengths, strict=True)]


def all_rows(loader: lt.Loader, key: str) -> list[list[float]]:
    return [row for batch in loader for row in rows_of(batch[key])]


def tokenizer():
    """A real fast tokenizer, built here (no download): a word-level vocabulary."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = sorted({w for t in TEXTS for w in t.split()})
    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]"
    )


def test_the_issue_example_is_three_documents_not_five_columns():
    docs = [np.arange(5) + 10 * i for i in range(3)]
    loader = lt.Loader({"input_ids": docs}, 2, shuffle=False)
    assert loader.n == 3
    assert all_rows(loader, "input_ids") == [d.tolist() for d in docs]


def test_a_list_of_token_lists_is_a_ragged_column():
    ids = [[101, 7, 8, 102], [101, 9, 102], [101, 102]]
    loader = lt.Loader({"input_ids": ids, "label": np.array([0, 1, 0])}, 2, shuffle=False)
    assert loader.n == 3 and "ragged: data['input_ids']" in repr(loader)
    assert all_rows(loader, "input_ids") == ids
    floats = lt.Loader({"x": [[0.5, 1.0], [2.0]]}, 2, shuffle=False)
    assert next(iter(floats))["x"].values.dtype == np.float64
    assert lt.Ragged.from_rows(ids).lengths.tolist() == [4, 3, 2]


def test_a_real_tokenizers_batch_encoding_is_read_as_it_comes():
    tok = tokenizer()
    enc = tok(TEXTS)
    assert type(enc).__name__ == "BatchEncoding"
    loader = lt.Loader(enc, 2, shuffle=False)
    assert loader.n == len(TEXTS)
    assert all_rows(loader, "input_ids") == enc["input_ids"]
    batch = next(iter(loader))
    from looptoolkit.torch_data import hf_inputs

    kw = hf_inputs(batch)
    assert kw["input_ids"].shape == kw["attention_mask"].shape == (2, 3)
    # Truncation makes every long document max_length long: still documents.
    cut = tok(TEXTS, truncation=True, max_length=1)
    loader = lt.Loader({"input_ids": cut["input_ids"]}, 2, shuffle=False)
    assert loader.n == len(TEXTS) and all_rows(loader, "input_ids") == cut["input_ids"]


def test_a_plain_dict_of_token_lists_packs():
    enc = {"input_ids": [[1, 2, 3], [4, 5], [6]], "attention_mask": [[1, 1, 1], [1, 1], [1]]}
    loader = lt.Loader(enc, 2, layout=lt.PackLayout(seq_len=3), shuffle=False)
    batch = next(iter(loader))
    assert batch["input_ids"].values.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_lists_that_are_not_numbers_are_refused_with_the_fix():
    with pytest.raises(TypeError, match="tokenize text first"):
        lt.Loader({"ids": [[1, "a"], [2]]}, 2)


def test_the_dataset_route_names_ragged_from_rows_not_stack_records():
    pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"Ragged\.from_rows\(data\['input_ids'\]\)"):
        lt.GetItemsDataset({"input_ids": [[101, 7, 102], [101, 8, 102]]})
    with pytest.raises(TypeError, match=r"Ragged\.from_rows\(data\['input_ids'\]\)"):
        lt.GetItemsDataset({"input_ids": [np.arange(5) + 10 * i for i in range(3)]})


def test_a_hundred_thousand_documents_are_read_in_one_vectorised_pass():
    """A tenth of the million documents measured in docs/ragged.md (about 1 s), loosely bound."""
    import time

    rng = np.random.default_rng(0)
    docs = [list(range(int(n))) for n in rng.integers(1, 33, 100_000)]
    # The first read of token lists in a process also imports and sets up (0.7 s here),
    # which made the pass timed below take 1.3 s cold against 0.6 s warm: done first,
    # so that only the pass is timed and a loaded machine keeps it under the bound.
    lt.Loader({"input_ids": docs[:100]}, 32)
    start = time.perf_counter()
    loader = lt.Loader({"input_ids": docs}, 32)
    assert time.perf_counter() - start < 2.0  # a loop per token took about 1.5 s here
    assert loader.n == len(docs)


DTYPES = ["int32", "int64", "uint16", "float32", "float64"]


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(1, 9),
    length=st.integers(1, 9),
    dtype=st.sampled_from(DTYPES),
    form=st.sampled_from(["arrays", "lists"]),
    batch_size=st.integers(1, 4),
)
def test_equal_lengths_are_documents_never_columns(count, length, dtype, form, batch_size):
    rng = np.random.default_rng(count * 100 + length)
    arrays = [rng.integers(0, 50, length).astype(dtype) for _ in range(count)]
    rows = arrays if form == "arrays" else [a.tolist() for a in arrays]
    loader = lt.Loader({"input_ids": rows}, batch_size, shuffle=False)
    assert loader.n == count and len(loader) == -(-count // batch_size)
    got = all_rows(loader, "input_ids")
    assert got == [a.tolist() for a in arrays]
    # A tokenizer's output passed as the data itself: documents too (lists of numbers can
    # never be columns); 1-D arrays of one length there are refused, both readings named.
    if form == "lists":
        assert lt.Loader(rows, batch_size).n == count
    elif count > 1:
        with pytest.raises(TypeError, match=r"Ragged\.from_rows"):
            lt.Loader(rows, batch_size)
