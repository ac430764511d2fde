"""hf_inputs: the Loader's ragged batches as the HF collators build them, and as a model reads them.

On random corpora, each layout's keyword arguments are compared with what
``DataCollatorWithPadding`` / ``DataCollatorWithFlattening`` build from the same documents, and
a tiny Llama's logits on a padding-free batch with those of each document alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import looptoolkit as lt
from looptoolkit.ragged._hf import hf_inputs


def corpus(n: int, seed: int) -> lt.Ragged:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 12, size=n)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    return lt.Ragged(rng.integers(1, 50, size=int(offsets[-1])), offsets)


def documents(col: lt.Ragged, rows: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(col[int(r)]) for r in rows]


def batches(col: lt.Ragged, **kwargs: Any) -> list[tuple[dict[str, Any], np.ndarray]]:
    """Each batch of a Loader over ``col`` with the rows it holds."""
    data = {"input_ids": col, "row": np.arange(len(col))}
    return [(b, b["row"]) for b in lt.Loader(data, shuffle=True, seed=1, **kwargs)]


def test_padded_is_what_data_collator_with_padding_builds():
    transformers = pytest.importorskip("transformers")
    col = corpus(23, int(np.random.default_rng().integers(1000)))
    for batch, rows in batches(col, batch_size=4):
        kw = hf_inputs(batch)
        docs = documents(col, rows)
        features = [{"input_ids": d.tolist()} for d in docs]
        tokenizer = _PadOnly()
        want = transformers.DataCollatorWithPadding(tokenizer, return_tensors="np")(features)
        np.testing.assert_array_equal(kw["input_ids"], want["input_ids"])
        np.testing.assert_array_equal(kw["attention_mask"], want["attention_mask"])
        assert kw["attention_mask"].dtype == np.int64
        np.testing.assert_array_equal(kw["labels"][kw["attention_mask"] == 1], np.concatenate(docs))
        assert (kw["labels"][kw["attention_mask"] == 0] == -100).all()
        np.testing.assert_array_equal(kw["row"], rows)  # other entries are kept


def test_flat_is_what_data_collator_with_flattening_builds():
    transformers = pytest.importorskip("transformers")
    col = corpus(31, int(np.random.default_rng().integers(1000)))
    collate = transformers.DataCollatorWithFlattening(
        return_flash_attn_kwargs=True, return_tensors="np"
    )
    for batch, rows in batches(col, batch_size=5, layout="flat"):
        kw = hf_inputs(batch, flash_attn_kwargs=True)
        want = collate([{"input_ids": d.tolist()} for d in documents(col, rows)])
        assert kw["use_cache"] is False
        for key in ("input_ids", "position_ids", "labels", "cu_seq_lens_q", "cu_seq_lens_k"):
            np.testing.assert_array_equal(kw[key], want[key], err_msg=key)
            assert kw[key].shape == want[key].shape, key
        assert kw["position_ids"].dtype == np.int64 and kw["cu_seq_lens_q"].dtype == np.int32
        assert kw["max_length_q"] == kw["max_length_k"] == want["max_length_q"]
        assert isinstance(kw["max_length_q"], int)


def test_packed_labels_skip_piece_starts_and_padding():
    col = corpus(17, 5)
    for batch, _ in batches(col, batch_size=2, layout=lt.PackLayout(seq_len=8)):
        packed = batch["input_ids"]
        kw = hf_inputs(batch)
        pos, seg = packed.position_ids, packed.segment_ids
        keep = (pos > 0) & (seg > 0)
        np.testing.assert_array_equal(kw["labels"][keep], packed.values[keep])
        assert (kw["labels"][~keep] == -100).all()
        np.testing.assert_array_equal(kw["position_ids"], pos)
        assert "attention_mask" not in kw
        assert "use_cache" not in hf_inputs(batch, use_cache=None)


def test_torch_batches_and_own_labels():
    torch = pytest.importorskip("torch")
    from looptoolkit.torch_data import make_dataloader

    col = corpus(12, 6)
    data = {"input_ids": col, "labels": np.arange(12)}
    for layout in ("pad", "flat"):
        got = hf_inputs(next(iter(make_dataloader(data, 4, layout=layout, seed=2))))
        want = hf_inputs(next(iter(lt.Loader(data, 4, layout=layout, seed=2))))
        assert set(got) == set(want)
        for key, value in want.items():
            if not isinstance(value, np.ndarray):  # use_cache
                assert got[key] == value
                continue
            assert isinstance(got[key], torch.Tensor)
            np.testing.assert_array_equal(got[key].numpy(), value)
        np.testing.assert_array_equal(got["labels"].numpy(), want["labels"])  # kept as given


def test_a_padding_free_batch_attends_within_each_document():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    model = transformers.LlamaForCausalLM(config)  # training mode, use_cache=True in its config
    col = corpus(6, int(np.random.default_rng().integers(1000)))
    data = {"input_ids": lt.Ragged(torch.from_numpy(col.values), col.offsets)}
    flat = next(iter(lt.Loader(data, 6, shuffle=False, layout="flat")))
    kw = hf_inputs(flat)
    with torch.no_grad():
        logits = model(**kw).logits[0]  # the documents must not see each other
        cu = flat["input_ids"].cu_seqlens.tolist()
        for i in range(6):
            alone = model(input_ids=torch.from_numpy(np.asarray(col[i]))[None]).logits[0]
            torch.testing.assert_close(logits[cu[i] : cu[i + 1]], alone, rtol=1e-4, atol=1e-5)


def test_wrong_batches_are_refused():
    with pytest.raises(TypeError, match="must be a mapping"):
        hf_inputs([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a ragged layout"):
        hf_inputs({"input_ids": np.zeros((2, 3))})


class _PadOnly:
    """The part of a tokenizer ``DataCollatorWithPadding`` uses: ``pad`` with id 0, on the right."""

    padding_side = "right"
    pad_token_id = 0

    def pad(self, features: list[dict[str, Any]], **kwargs: Any) -> dict[str, np.ndarray]:
        longest = max(len(f["input_ids"]) for f in features)
        ids = np.zeros((len(features), longest), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, f in enumerate(features):
            ids[i, : len(f["input_ids"])] = f["input_ids"]
            mask[i, : len(f["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask}


def test_a_numpy_loader_feeds_a_real_gpt2_through_hf_inputs():
    """NumPy batches (no `device`) reach a torch model as tensors: `hf_inputs` returns "pt"."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from looptoolkit.torch_data import hf_inputs as public

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)
    model = transformers.GPT2LMHeadModel(config).eval()
    docs = [[1, 2, 3, 4], [5, 6], [7, 8, 9], [10, 11, 12, 13, 14]]
    batch = next(iter(lt.Loader({"input_ids": docs}, 2, shuffle=False)))
    assert isinstance(batch["input_ids"].values, np.ndarray)  # no device: NumPy, as given
    kw = public(batch)
    assert isinstance(kw["input_ids"], torch.Tensor) and kw["input_ids"].dtype == torch.int64
    with torch.no_grad():
        loss = model(**kw).loss
    assert torch.isfinite(loss)
    # Asking for torch in the Loader (a torch.device) gives tensors already: the same loss.
    on_torch = lt.Loader({"input_ids": docs}, 2, shuffle=False, device=torch.device("cpu"))
    tensors = next(iter(on_torch))
    assert isinstance(tensors["input_ids"].values, torch.Tensor)
    with torch.no_grad():
        assert torch.allclose(model(**public(tensors)).loss, loss)
    # device="cpu" (a string) keeps NumPy; "np" keeps NumPy out of hf_inputs too.
    kept = next(iter(lt.Loader({"input_ids": docs}, 2, shuffle=False, device="cpu")))
    assert isinstance(kept["input_ids"].values, np.ndarray)
    assert isinstance(public(kept, return_tensors="np")["input_ids"], np.ndarray)
    with pytest.raises(ValueError, match="`return_tensors` must be"):
        public(kept, return_tensors="tf")


def test_a_tokenizers_own_mask_and_type_ids_are_laid_out_like_the_tokens():
    enc = {
        "input_ids": [[1, 2, 3], [4, 5]],
        "token_type_ids": [[0, 0, 1], [0, 1]],
        "attention_mask": [[1, 1, 1], [1, 1]],
    }
    for layout, shape in (("pad", (2, 3)), ("flat", (1, 5))):
        batch = next(iter(lt.Loader(enc, 2, shuffle=False, layout=layout)))
        kw = hf_inputs(batch)
        assert kw["input_ids"].shape == kw["token_type_ids"].shape == shape
        assert ("attention_mask" in kw) == (layout == "pad")
