"""`bertprep train --init-from` a Hugging Face ModernBERT directory (config.json model_type "modernbert" +
safetensors, as transformers' save_pretrained or `bertprep export` writes it): continued pre-training.

The run is a ModernBERT run whatever --architecture says by default; each layout (``ModernBertForMaskedLM``, a
bare ``ModernBertModel``) starts a ``ModernBertForMaskedLM`` that computes what transformers computes, and the
first training step's loss is transformers' loss on the same batch.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from bertprep.bert_model.hf.interop import load_model_source, load_pretraining_weights
from bertprep.bert_model.models import modernbert
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertForMaskedLM
from bertprep.bert_model.pretrain import architectures
from bertprep.bert_model.pretrain.trainer import TrainConfig, train
from conftest import need_module
from model_factory import init_from_train_config, tiny_modernbert, write_uncased_vocab
from shard_factory import make_vocab, write_shard_dir

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB_SIZE = 64
# make_vocab: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4. Layers 0 and 3 global, 1 and 2 local (window 8).
TINY = tiny_modernbert(vocab_size=VOCAB_SIZE)


def _save_hf(path, cls_name: str = "ModernBertForMaskedLM"):
    """A random transformers model saved with save_pretrained, plus the vocab and tokenizer settings."""
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(**ModernBertConfig(**TINY).to_hf_dict())
    model = getattr(transformers, cls_name)(config).eval()
    model.save_pretrained(path)
    write_uncased_vocab(path, make_vocab(VOCAB_SIZE))
    return model


def _batch():
    g = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, VOCAB_SIZE, (2, 20), generator=g)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 13:] = 0
    labels = torch.full_like(input_ids, -100)
    labels[0, [2, 9, 15]] = input_ids[0, [2, 9, 15]]
    labels[1, [4, 11]] = input_ids[1, [4, 11]]
    input_ids[labels != -100] = 4  # [MASK]
    return input_ids, attention_mask, labels


@pytest.mark.parametrize("cls_name", ["ModernBertForMaskedLM", "ModernBertModel"])
def test_each_layout_starts_a_masked_lm_equal_to_transformers(tmp_path, cls_name):
    hf = _save_hf(tmp_path / "hf", cls_name)
    source = load_model_source(str(tmp_path / "hf"))
    assert isinstance(source.config, ModernBertConfig) and source.architecture == cls_name
    assert all(k.startswith(("model.", "head.", "decoder.")) for k in source.state_dict)  # bare: prefixed
    model = ModernBertForMaskedLM(source.config).eval()
    initialised, unused = load_pretraining_weights(model, source.state_dict)
    assert unused == []
    input_ids, attention_mask, _ = _batch()
    real = attention_mask.bool()
    with torch.no_grad():
        ours = model(input_ids, attention_mask=attention_mask).logits
        if cls_name == "ModernBertForMaskedLM":
            assert initialised == []
            ref = hf(input_ids=input_ids, attention_mask=attention_mask).logits
            assert (ours - ref)[real].abs().max().item() < 1e-4
        else:  # the encoder is the source's; the MLM head starts as ModernBERT initialises it
            assert initialised == ["decoder.bias", "head.dense.weight", "head.norm.weight"]
            ref = hf(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            ours_hidden = model.model(input_ids, attention_mask=attention_mask).last_hidden_state
            assert (ours_hidden - ref)[real].abs().max().item() < 1e-4


def test_a_fine_tuned_head_starts_a_run_with_its_classifier_unused(tmp_path):
    _save_hf(tmp_path / "hf", "ModernBertForSequenceClassification")
    source = load_model_source(str(tmp_path / "hf"))
    initialised, unused = load_pretraining_weights(ModernBertForMaskedLM(source.config), source.state_dict)
    assert initialised == ["decoder.bias"] and unused == ["classifier.bias", "classifier.weight"]


def test_another_size_or_a_bert_state_dict_is_refused(tmp_path):
    _save_hf(tmp_path / "hf")
    source = load_model_source(str(tmp_path / "hf"))
    wider = ModernBertForMaskedLM(ModernBertConfig(**{**TINY, "hidden_size": 64, "intermediate_size": 96}))
    with pytest.raises(ValueError, match="other shapes than this model"):
        load_pretraining_weights(wider, source.state_dict)
    bert_keys = {"bert.embeddings.word_embeddings.weight": torch.zeros(VOCAB_SIZE, 32)}
    with pytest.raises(ValueError, match="lack encoder parameters"):
        load_pretraining_weights(ModernBertForMaskedLM(source.config), bert_keys)


def _train_config(tmp_path, hf_dir, **kw) -> TrainConfig:
    write_shard_dir(
        tmp_path / "shards", num_shards=2, rows_per_shard=24, vocab_size=VOCAB_SIZE, max_seq_length=32, seed=1
    )
    settings = dict(max_steps=1, warmup_steps=0, log_every=1)
    return init_from_train_config(tmp_path / "shards", tmp_path / "run", hf_dir, **{**settings, **kw})


def test_train_init_from_a_transformers_modernbert_directory_first_loss_equals_transformers(
    tmp_path, monkeypatch, caplog
):
    """save_pretrained of a random transformers ModernBertForMaskedLM, `train --init-from` it: a ModernBERT run
    (without --architecture) whose first step's loss is transformers' loss on that step's batch."""
    hf = _save_hf(tmp_path / "hf")
    first: dict = {}
    forward = architectures.PretrainingModel.forward

    def recording_forward(self, **batch):
        output = forward(self, **batch)
        if not first:
            first.update(batch={k: v.detach().clone() for k, v in batch.items()}, loss=output.mlm_loss.item())
        return output

    monkeypatch.setattr(architectures.PretrainingModel, "forward", recording_forward)
    with caplog.at_level(logging.INFO, logger="bertprep.train"):
        result = train(_train_config(tmp_path, tmp_path / "hf"))
    assert result.step == 1 and isinstance(result.model, modernbert.ModernBertForMaskedLM)
    assert result.model.config.hidden_size == 32 and result.model.config.sparse_prediction
    assert "initialised as in the original (not in the source): none" in caplog.text
    batch = first["batch"]
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    labels = torch.full_like(input_ids, -100).scatter(1, batch["masked_lm_positions"], batch["masked_lm_ids"])
    labels[:, 0] = -100  # (empty slots point at [CLS] with label -100: never a target)
    assert (labels != -100).sum() > 0
    with torch.no_grad():
        ref = hf(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.item()
    assert abs(first["loss"] - ref) < 1e-4
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert logged["step"] == 1 and abs(logged["mlm_loss"] - ref) < 1e-4


def test_train_init_from_a_modernbert_directory_refuses_another_explicit_architecture(tmp_path):
    _save_hf(tmp_path / "hf")
    hf_dir = tmp_path / "bert"
    hf_dir.mkdir()
    config = transformers.BertConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    transformers.BertForMaskedLM(config).save_pretrained(hf_dir)
    (hf_dir / "vocab.txt").write_text("".join(t + "\n" for t in make_vocab(VOCAB_SIZE)), encoding="utf-8")
    with pytest.raises(ValueError, match=r"is a bert model .* not --architecture modernbert"):
        train(_train_config(tmp_path, hf_dir, architecture="modernbert", preset="tiny"))
