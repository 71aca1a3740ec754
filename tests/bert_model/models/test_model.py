"""bert_model/models/bert.py: shapes, losses, presets and parity with transformers.BertForPreTraining."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from bertprep.bert_model.models.bert import (
    PRESETS,
    TIED_WEIGHTS_KEYS,
    BertConfig,
    BertForPreTraining,
    BertModel,
    flops_per_token,
    load_state_dict_strict,
    trainable_state_dict,
)
from conftest import need_module
from model_factory import tiny_bert

TINY = tiny_bert(vocab_size=99, num_attention_heads=4, intermediate_size=37)


def _batch(config: BertConfig, B: int = 3, T: int = 16, P: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, config.vocab_size, (B, T), generator=g)
    lengths = torch.tensor([T, T - 5, T - 9])[:B]
    attention_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    input_ids = input_ids * attention_mask  # [PAD] = 0 after each sequence
    token_type_ids = ((torch.arange(T)[None, :] >= (lengths // 2)[:, None]) & attention_mask.bool()).long()
    masked_lm_positions = torch.stack([torch.randperm(int(n) - 1, generator=g)[:P] + 1 for n in lengths])
    masked_lm_ids = torch.randint(5, config.vocab_size, (B, P), generator=g)
    masked_lm_ids[-1, -2:] = -100  # padding entries of the last row
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "masked_lm_positions": masked_lm_positions,
        "masked_lm_ids": masked_lm_ids,
        "next_sentence_label": torch.tensor([0, 1, 1])[:B],
    }


def test_output_shapes_and_dtypes():
    config = BertConfig(**TINY)
    model = BertForPreTraining(config)
    batch = _batch(config)
    out = model(**batch)
    assert out.prediction_logits.shape == (3, 4, 99)
    assert out.seq_relationship_logits.shape == (3, 2)
    assert out.loss.shape == () and out.mlm_loss.shape == () and out.nsp_loss.shape == ()
    assert torch.allclose(out.loss, out.mlm_loss + out.nsp_loss)
    # Without positions: scores at every token, no loss without labels.
    out_all = model.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    assert out_all.prediction_logits.shape == (3, 16, 99) and out_all.loss is None
    encoded = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    sequence_output, pooled = encoded.last_hidden_state, encoded.pooler_output
    assert sequence_output.shape == (3, 16, 32) and pooled.shape == (3, 32)
    assert sequence_output.dtype == torch.float32


def test_mlm_loss_counts_only_masked_positions():
    config = BertConfig(**TINY)
    model = BertForPreTraining(config).eval()
    batch = _batch(config)
    out = model(**batch)
    real = batch["masked_lm_ids"] != -100
    expected = F.cross_entropy(out.prediction_logits[real], batch["masked_lm_ids"][real])
    assert torch.allclose(out.mlm_loss, expected, atol=1e-6)
    # Changing the labels or positions of padding entries (-100) changes nothing.
    other = dict(batch, masked_lm_positions=batch["masked_lm_positions"].clone())
    other["masked_lm_positions"][-1, -2:] = 0
    assert torch.allclose(model(**other).mlm_loss, out.mlm_loss, atol=1e-6)
    # The label of a real entry does count.
    changed = dict(batch, masked_lm_ids=batch["masked_lm_ids"].clone())
    changed["masked_lm_ids"][0, 0] = (changed["masked_lm_ids"][0, 0] + 1) % config.vocab_size
    assert not torch.allclose(model(**changed).mlm_loss, out.mlm_loss)


def test_the_training_loop_computes_the_same_losses_as_the_model():
    """The pre-training forward pass and losses are written once (``outputs.pretraining_heads``): the training
    loop's ``PretrainingModel`` and ``BertForPreTraining.forward`` give the same scores and losses."""
    from bertprep.bert_model.pretrain.architectures import PretrainingModel

    config = BertConfig(**TINY)
    model = BertForPreTraining(config).eval()
    batch = _batch(config)
    out, loop = model(**batch), PretrainingModel(model)(**batch)
    assert torch.equal(loop.prediction_logits, out.prediction_logits)
    assert torch.equal(loop.seq_relationship_logits, out.seq_relationship_logits)
    assert torch.equal(loop.mlm_loss, out.mlm_loss) and torch.equal(loop.nsp_loss, out.nsp_loss)
    assert torch.equal(loop.training_loss(1.0), out.loss)
    expected_nsp = F.cross_entropy(out.seq_relationship_logits, batch["next_sentence_label"])
    assert torch.allclose(out.nsp_loss, expected_nsp, atol=1e-6)


def test_padding_does_not_change_real_tokens():
    config = BertConfig(**TINY)
    model = BertForPreTraining(config).eval()
    batch = _batch(config, B=1)
    n = 10
    short = {k: batch[k][:, :n] for k in ("input_ids", "token_type_ids", "attention_mask")}
    short["attention_mask"] = torch.ones_like(short["attention_mask"])
    padded = {k: F.pad(v, (0, 6)) for k, v in short.items()}  # 6 [PAD] tokens, attention_mask 0 there
    a = model.bert(**short).last_hidden_state
    b = model.bert(**padded).last_hidden_state
    assert torch.allclose(a, b[:, :n], atol=1e-5)


def test_decoder_is_tied_to_word_embeddings():
    model = BertForPreTraining(BertConfig(**TINY))
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    names = [n for n, _ in model.named_parameters()]
    assert len(names) == len({id(p) for p in model.parameters()})
    assert not set(TIED_WEIGHTS_KEYS) & set(names)


def test_init_follows_the_original():
    model = BertForPreTraining(BertConfig.from_preset("mini", vocab_size=1000))
    w = model.bert.encoder.layer[0].intermediate.dense.weight
    assert w.abs().max() <= 0.04 + 1e-7  # truncated at 2 sigma
    assert 0.015 < w.std() < 0.02  # std of a 2-sigma truncated normal(0, 0.02) is 0.0176
    assert torch.all(model.bert.encoder.layer[0].intermediate.dense.bias == 0)
    assert torch.all(model.cls.predictions.bias == 0)
    assert torch.all(model.bert.embeddings.LayerNorm.weight == 1)


@pytest.mark.parametrize("name,params_m", [("base", 110.1), ("large", 336.2)])
def test_presets_match_paper_sizes(name, params_m):
    config = BertConfig.from_preset(name)
    layers, hidden, heads = PRESETS[name]
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
    assert config.intermediate_size == 4 * hidden and config.max_position_embeddings == 512
    with torch.device("meta"):
        model = BertForPreTraining(config)
    # The paper's 110M / 340M (Hugging Face counts 110.1M / 336.2M for the same shapes with the heads).
    assert model.num_parameters() / 1e6 == pytest.approx(params_m, abs=0.1)


def test_config_validation_errors():
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        BertConfig(hidden_size=100, num_attention_heads=12)
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        BertConfig.from_preset("huge")
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig(hidden_act="relu")
    with pytest.raises(ValueError, match=r"unknown BertConfig field.*hiden_size"):
        BertConfig.from_dict({"hiden_size": 3})
    assert BertConfig.from_preset("mini", hidden_size=384, num_attention_heads=6).intermediate_size == 1536


def test_sequence_longer_than_positions_is_refused():
    model = BertModel(BertConfig(**TINY))
    with pytest.raises(ValueError, match="exceeds max_position_embeddings 64"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_flops_per_token_matches_what_torch_counts():
    """The weight matmuls of a real forward + backward, counted by ``torch.utils.flop_counter`` (independent of
    the formula), equal ``flops_per_token`` without its attention-score term (``seq_length=0``): encoder
    layers and the MLM head on the masked fraction; the pooler and NSP head are left out (< 0.5% here)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=128,
    )
    model = BertForPreTraining(config)
    B, T, P = 4, 64, 8
    batch = {
        "input_ids": torch.randint(5, 1000, (B, T)),
        "token_type_ids": torch.zeros(B, T, dtype=torch.long),
        "attention_mask": torch.ones(B, T, dtype=torch.long),
        "masked_lm_positions": torch.stack([torch.randperm(T - 2)[:P] + 1 for _ in range(B)]),
        "masked_lm_ids": torch.randint(5, 1000, (B, P)),
        "next_sentence_label": torch.zeros(B, dtype=torch.long),
    }
    with FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    weight_matmuls = counts.get("aten.mm", 0) + counts.get("aten.addmm", 0)
    predicted = flops_per_token(config, seq_length=0, masked_lm_fraction=P / T) * B * T
    assert abs(weight_matmuls / predicted - 1) < 0.005
    # the attention scores and weighted sum: 2 matmuls of T x H per token and layer, x3 for the backward
    attention = flops_per_token(config, T, P / T) - flops_per_token(config, 0, P / T)
    assert attention == 3 * config.num_hidden_layers * 2 * 2 * T * config.hidden_size


# ----------------------------------------------------------------------------------- transformers parity

transformers = need_module("transformers")


def _hf_model(config: BertConfig):
    hf_config = transformers.BertConfig(**config.to_dict(), attn_implementation="sdpa")
    torch.manual_seed(1)
    return transformers.BertForPreTraining(hf_config).eval()


def test_state_dict_keys_are_those_of_transformers():
    config = BertConfig(**TINY)
    ours = BertForPreTraining(config).state_dict()
    theirs = _hf_model(config).state_dict()
    assert list(ours) == list(theirs)  # same names, same order, tied aliases included
    assert all(ours[k].shape == theirs[k].shape for k in ours)


def test_logits_equal_transformers_with_copied_weights():
    config = BertConfig(**TINY)
    hf = _hf_model(config)
    # Random non-trivial values everywhere (HF's init leaves biases and LayerNorms at 0/1).
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.2)
    ours = BertForPreTraining(config).eval()
    load_state_dict_strict(ours, hf.state_dict())  # strict, with the tied aliases checked
    batch = _batch(config)
    with torch.no_grad():
        theirs = hf(
            input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
        )
        mine_all = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        mine = ours(**batch)
    torch.testing.assert_close(mine_all.prediction_logits, theirs.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(mine.seq_relationship_logits, theirs.seq_relationship_logits, atol=1e-5, rtol=0)
    gathered = torch.gather(
        theirs.prediction_logits, 1, batch["masked_lm_positions"][..., None].expand(-1, -1, config.vocab_size)
    )
    torch.testing.assert_close(mine.prediction_logits, gathered, atol=1e-5, rtol=0)

    # Same losses as transformers' labels (B, T) formulation.
    labels = torch.full_like(batch["input_ids"], -100)
    real = batch["masked_lm_ids"] != -100
    rows = torch.arange(3)[:, None].expand_as(real)
    labels[rows[real], batch["masked_lm_positions"][real]] = batch["masked_lm_ids"][real]
    with torch.no_grad():
        hf_loss = hf(
            input_ids=batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=labels,
            next_sentence_label=batch["next_sentence_label"],
        ).loss
    torch.testing.assert_close(mine.loss, hf_loss, atol=1e-5, rtol=0)


def test_export_loads_in_transformers(tmp_path):
    from safetensors.torch import save_file

    config = BertConfig(**TINY)
    ours = BertForPreTraining(config).eval()
    save_file(trainable_state_dict(ours), str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    hf = transformers.BertForPreTraining.from_pretrained(str(tmp_path)).eval()
    batch = _batch(config)
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).prediction_logits
        b = hf(
            input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
        ).prediction_logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_load_state_dict_strict_names_bad_keys():
    model = BertForPreTraining(BertConfig(**TINY))
    sd = trainable_state_dict(model)
    sd["bert.pooler.dense.weight_typo"] = sd.pop("bert.pooler.dense.weight")
    with pytest.raises(ValueError, match=r"missing \['bert.pooler.dense.weight'\].*weight_typo"):
        load_state_dict_strict(model, sd)
