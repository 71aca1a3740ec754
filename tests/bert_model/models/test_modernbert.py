"""bert_model/models/modernbert.py: parity with transformers.ModernBertForMaskedLM, state dicts, configs,
packed batches."""

from __future__ import annotations

import pytest
import torch
import transformers

from bertprep.bert_model.models.modernbert import (
    PRESETS,
    TIED_WEIGHTS_KEYS,
    ModernBertConfig,
    ModernBertForMaskedLM,
    flops_per_token,
    load_state_dict_strict,
    trainable_state_dict,
)
from bertprep.bert_model.models.packing import pack_documents, unpad
from model_factory import tiny_modernbert_own_rope

# 4 layers: 0 and 3 global, 1 and 2 local; a window of 8 (4 each side) so that 40-token sequences reach far
# beyond it; RoPE bases other than the defaults, and different from each other, so a swap would show.
TINY = tiny_modernbert_own_rope()
SEQ = 40


def _hf_model(config: ModernBertConfig, attn_implementation: str = "sdpa", seed: int = 0):
    torch.manual_seed(seed)
    hf_config = transformers.ModernBertConfig(**config.to_hf_dict())
    return transformers.ModernBertForMaskedLM._from_config(hf_config, attn_implementation=attn_implementation).eval()


def _pair(attn_implementation: str = "sdpa", **overrides):
    """(ours, transformers') with the same (transformers-initialised) weights, in eval mode."""
    config = ModernBertConfig(**{**TINY, **overrides})
    hf = _hf_model(config, attn_implementation)
    ours = ModernBertForMaskedLM(config).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)
    return ours, hf


def _padded_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, TINY["vocab_size"], (3, SEQ), generator=g)
    lengths = torch.tensor([SEQ, 29, 11])
    attention_mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()  # (B, T)
    return input_ids * attention_mask, attention_mask


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_logits_match_transformers(attn_implementation):
    ours, hf = _pair(attn_implementation)
    assert (
        [layer.attention_type for layer in ours.model.layers]
        == hf.config.layer_types
        == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    )
    input_ids, attention_mask = _padded_batch()
    with torch.no_grad():
        # Padded batch: compare the real tokens (what padding positions compute is never used).
        ref = hf(input_ids=input_ids, attention_mask=attention_mask).logits
        got = ours(input_ids, attention_mask=attention_mask).logits
        real = attention_mask.bool()
        assert got.shape == ref.shape == (3, SEQ, TINY["vocab_size"])
        assert (got - ref)[real].abs().max().item() < 1e-4
        # No mask at all: every position.
        ref_full = hf(input_ids=input_ids).logits
        got_full = ours(input_ids).logits
        assert (got_full - ref_full).abs().max().item() < 1e-4
    # The local window matters at this length: a global-only model gives different logits.
    ours_global = ModernBertForMaskedLM(ModernBertConfig(**{**TINY, "local_attention": 2 * SEQ})).eval()
    ours_global.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert (ours_global(input_ids).logits - got_full).abs().max().item() > 1e-3


def test_loss_matches_transformers():
    ours, hf = _pair()
    input_ids, attention_mask = _padded_batch(seed=1)
    labels = torch.full_like(input_ids, -100)
    labels[:, 3:9] = input_ids[:, 3:9]
    labels[2, 10] = input_ids[2, 10]  # last real token of the short row
    with torch.no_grad():
        ref = hf(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        got = ours(input_ids, attention_mask=attention_mask, labels=labels).loss
        assert abs(got.item() - ref.item()) < 1e-5
        # Sparse prediction: the head on the labelled positions only; same loss, logits (M, V).
        ours.config.sparse_prediction = True
        sparse = ours(input_ids, attention_mask=attention_mask, labels=labels)
        assert sparse.logits.shape == (int((labels != -100).sum()), TINY["vocab_size"])
        assert abs(sparse.loss.item() - ref.item()) < 1e-5
        # A label on a padding position never counts.
        labels[2, 30] = 5
        assert abs(ours(input_ids, attention_mask=attention_mask, labels=labels).loss.item() - ref.item()) < 1e-5


def test_state_dict_keys_equal_transformers_both_ways():
    config = ModernBertConfig(**TINY)
    hf, ours = _hf_model(config), ModernBertForMaskedLM(config).eval()
    assert list(ours.state_dict()) == list(hf.state_dict())
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in hf.state_dict().items()}
    assert "model.layers.0.attn_norm.weight" not in ours.state_dict()  # layer 0: Identity, as transformers
    assert not any(k.endswith(".bias") for k in ours.state_dict() if k != "decoder.bias")  # no biases by default
    # Ours -> transformers, strict, then the same logits.
    hf.load_state_dict(ours.state_dict(), strict=True)
    input_ids, attention_mask = _padded_batch(seed=2)
    with torch.no_grad():
        diff = (
            hf(input_ids=input_ids, attention_mask=attention_mask).logits
            - ours(input_ids, attention_mask=attention_mask).logits
        )[attention_mask.bool()]
    assert diff.abs().max().item() < 1e-4
    # Transformers -> ours, strict; the decoder stays tied to the token embeddings.
    ours.load_state_dict(_hf_model(config, seed=1).state_dict(), strict=True)
    assert ours.decoder.weight is ours.model.embeddings.tok_embeddings.weight
    # Without the tied alias (a safetensors file), with it, and wrong ones.
    saved = trainable_state_dict(ours)
    assert set(saved) == set(ours.state_dict()) - set(TIED_WEIGHTS_KEYS)
    load_state_dict_strict(ours, saved)
    load_state_dict_strict(ours, ours.state_dict())
    with pytest.raises(ValueError, match="missing"):
        load_state_dict_strict(ours, {k: v for k, v in saved.items() if k != "head.dense.weight"})
    bad = dict(ours.state_dict())
    bad["decoder.weight"] = torch.zeros_like(saved["model.embeddings.tok_embeddings.weight"])
    with pytest.raises(ValueError, match="tied"):
        load_state_dict_strict(ours, bad)


def test_to_hf_dict_builds_the_same_transformers_config():
    config = ModernBertConfig(**TINY)
    hf_config = transformers.ModernBertConfig(**config.to_hf_dict())
    assert hf_config.layer_types == config.layer_types
    assert hf_config.rope_parameters["full_attention"]["rope_theta"] == 1000.0
    assert hf_config.rope_parameters["sliding_attention"]["rope_theta"] == 50.0
    assert hf_config.sliding_window == config.local_attention // 2
    for name in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "norm_eps",
        "norm_bias",
        "pad_token_id",
        "local_attention",
        "decoder_bias",
        "classifier_bias",
    ):
        assert getattr(hf_config, name) == getattr(config, name), name
    d = config.to_hf_dict()
    assert d["architectures"] == ["ModernBertForMaskedLM"] and d["model_type"] == "modernbert"
    assert "architecture" not in d
    # Read back: from our dict and from transformers' own to_dict() (layer_types / rope_parameters form).
    assert ModernBertConfig.from_dict(d) == config
    assert ModernBertConfig.from_dict(hf_config.to_dict()) == config


def test_presets():
    base = ModernBertConfig.from_preset("base")
    hf_base = transformers.ModernBertConfig()  # answerdotai/ModernBERT-base sizes
    for name in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "local_attention",
        "vocab_size",
        "norm_eps",
        "max_position_embeddings",
    ):
        assert getattr(base, name) == getattr(hf_base, name), name
    assert base.layer_types == hf_base.layer_types
    assert (base.global_rope_theta, base.local_rope_theta) == (160000.0, 10000.0)
    assert base == ModernBertConfig()
    for name in PRESETS:
        config = ModernBertConfig.from_preset(name)
        assert config.head_size == 64
        assert config.layer_types[0] == config.layer_types[-1] == "full_attention"
    tiny = ModernBertConfig.from_preset(
        "tiny", vocab_size=30522, pad_token_id=0, cls_token_id=101, sep_token_id=102, bos_token_id=101, eos_token_id=102
    )
    assert (tiny.num_hidden_layers, tiny.hidden_size, tiny.intermediate_size) == (4, 128, 192)
    assert ModernBertConfig.from_preset("tiny", hidden_size=256).intermediate_size == 384
    with pytest.raises(ValueError, match="unknown preset"):
        ModernBertConfig.from_preset("huge")
    # Base FLOPs per token at 1024 tokens: ~6 x 110M-ish parameters plus attention, order 1e9.
    assert 5e8 < flops_per_token(base, 1024) < 2e9


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"hidden_size": 30}, "multiple of num_attention_heads"),
        ({"local_attention": 7}, "must be even"),
        ({"hidden_activation": "relu"}, "not supported"),
        ({"pad_token_id": 101}, "outside the vocab"),
        ({"num_hidden_layers": 0}, "positive integer"),
        ({"attention_dropout": 1.0}, r"\[0, 1\)"),
        ({"tie_word_embeddings": False}, "not supported"),
        ({"architecture": "bert"}, "must be 'modernbert'"),
    ],
)
def test_config_rejects(overrides, match):
    with pytest.raises(ValueError, match=match):
        ModernBertConfig(**{**TINY, **overrides})
    with pytest.raises(ValueError, match="unknown ModernBertConfig field"):
        ModernBertConfig.from_dict({**TINY, "hidden_sise": 32})


DOC_LENGTHS = [5, 17, 12, 30, 9, 40, 3]


def _documents(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, TINY["vocab_size"], (n,), generator=g) for n in DOC_LENGTHS]


def test_packed_batch_equals_documents_one_by_one():
    ours, hf = _pair()
    docs = _documents()
    packed = {k: torch.from_numpy(v) for k, v in pack_documents([d.numpy() for d in docs], SEQ).items()}
    assert packed["input_ids"].shape[0] < len(docs)  # several documents share rows
    with torch.no_grad():
        got = ours(
            packed["input_ids"], sequence_ids=packed["sequence_ids"], position_ids=packed["position_ids"]
        ).logits  # (B, T, V)
        got_default_positions = ours(packed["input_ids"], sequence_ids=packed["sequence_ids"]).logits
        flat = unpad(packed["input_ids"], packed["sequence_ids"])
        got_unpadded = ours(flat.input_ids, cu_seqlens=flat.cu_seqlens).logits  # (N, V)
        assert torch.equal(got, got_default_positions)
        n = 0
        for i, doc in enumerate(docs):
            alone = ours(doc[None]).logits[0]  # (len, V)
            assert (hf(input_ids=doc[None]).logits[0] - alone).abs().max().item() < 1e-4
            where = packed["document_ids"] == i
            assert (got[where] - alone).abs().max().item() < 1e-5, i
            assert (got_unpadded[n : n + len(doc)] - alone).abs().max().item() < 1e-5, i
            n += len(doc)


def test_no_attention_across_documents():
    ours, _ = _pair()
    docs = _documents(seed=3)
    packed = {k: torch.from_numpy(v) for k, v in pack_documents([d.numpy() for d in docs], SEQ).items()}
    row = 0  # documents 0 (5 tokens) and 1 (17 tokens) share row 0
    doc0, doc1 = packed["document_ids"][row] == 0, packed["document_ids"][row] == 1
    assert doc0.any() and doc1.any()
    perturbed = packed["input_ids"].clone()
    perturbed[row, doc1] = (perturbed[row, doc1] + 7) % TINY["vocab_size"]
    perturbed[row, packed["sequence_ids"][row] < 0] = 55  # and the padding
    with torch.no_grad():
        before = ours(packed["input_ids"], sequence_ids=packed["sequence_ids"]).logits
        after = ours(perturbed, sequence_ids=packed["sequence_ids"]).logits
    assert torch.equal(before[row, doc0], after[row, doc0])
    assert (before[row, doc1] - after[row, doc1]).abs().max().item() > 1e-3
    assert torch.equal(before[1:], after[1:])


def test_packed_training_step_is_finite_and_counts_real_tokens():
    ours, _ = _pair(sparse_prediction=True)
    ours.train()
    packed = {k: torch.from_numpy(v) for k, v in pack_documents([d.numpy() for d in _documents()], SEQ).items()}
    labels = packed["input_ids"].clone()
    labels[packed["sequence_ids"] >= 0] = -100
    labels[:, ::4] = packed["input_ids"][:, ::4]  # every 4th position; padding positions keep a label (0) too
    out = ours(packed["input_ids"], sequence_ids=packed["sequence_ids"], labels=labels)
    assert out.logits.shape[0] == int(((labels != -100) & (packed["sequence_ids"] >= 0)).sum())
    out.loss.backward()
    grads = [p.grad for p in ours.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_forward_rejects_bad_inputs():
    ours, _ = _pair()
    with pytest.raises(ValueError, match="need cu_seqlens"):
        ours(torch.ones(5, dtype=torch.long))
    with pytest.raises(ValueError, match="not attention_mask"):
        ours(torch.ones(5, dtype=torch.long), attention_mask=torch.ones(5), cu_seqlens=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        ours(torch.ones(1, 65, dtype=torch.long))


def test_bfloat16_autocast_close_to_float32():
    ours, _ = _pair()
    input_ids, attention_mask = _padded_batch(seed=4)
    labels = torch.where(torch.arange(SEQ) % 5 == 0, input_ids, -100)
    with torch.no_grad():
        ref = ours(input_ids, attention_mask=attention_mask, labels=labels).loss
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = ours(input_ids, attention_mask=attention_mask, labels=labels).loss
    assert torch.isfinite(low) and abs(low.item() - ref.item()) < 0.05


def test_safetensors_and_config_json_load_with_from_pretrained(tmp_path):
    """What ``export`` will write: config.json = to_hf_dict(), model.safetensors = trainable_state_dict."""
    import json

    from safetensors.torch import save_file

    ours, _ = _pair()
    (tmp_path / "config.json").write_text(json.dumps(ours.config.to_hf_dict(), indent=2))
    save_file(
        {k: v.contiguous() for k, v in trainable_state_dict(ours).items()},
        tmp_path / "model.safetensors",
        metadata={"format": "pt"},
    )
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path, output_loading_info=True, attn_implementation="sdpa"
    )
    assert type(hf).__name__ == "ModernBertForMaskedLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    input_ids, attention_mask = _padded_batch(seed=5)
    with torch.no_grad():
        diff = (
            hf.eval()(input_ids=input_ids, attention_mask=attention_mask).logits
            - ours(input_ids, attention_mask=attention_mask).logits
        )[attention_mask.bool()]
    assert diff.abs().max().item() < 1e-4
