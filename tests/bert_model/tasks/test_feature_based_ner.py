"""Feature-based NER (paper 5.3, Table 7): frozen encoder, the chosen layers, a two-layer BiLSTM, a classifier."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.inference.features import encoder_hidden_states
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.optim import create_optimizer
from bertprep.bert_model.tasks.feature_based import (
    FEATURE_MODES,
    BertFeatureBasedForTokenClassification,
    combine_layers,
)
from bertprep.bert_model.tasks.registry import make_task
from bertprep.cli.main import cli
from conftest import FIXTURES
from finetune_factory import predict_args, write_ner_files
from model_factory import tiny_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = FIXTURES / "finetune" / "vocab.txt"


def _config() -> BertConfig:
    return BertConfig(**tiny_bert(len(VOCAB.read_text().splitlines()), num_hidden_layers=4, intermediate_size=64))


def test_each_mode_feeds_the_layers_of_table_7():
    torch.manual_seed(0)
    ids = torch.randint(5, 100, (2, 7))
    for mode in FEATURE_MODES:
        model = BertFeatureBasedForTokenClassification(_config(), num_labels=3, feature_based=mode).eval()
        states = encoder_hidden_states(model.bert, ids)
        features = combine_layers(states, mode)
        expected = {
            "embeddings": states[0],
            "last": states[4],
            "second-to-last": states[3],
            "last4-sum": states[1] + states[2] + states[3] + states[4],
            "last4-concat": torch.cat([states[4], states[3], states[2], states[1]], -1),
        }[mode]
        assert torch.allclose(features, expected, atol=1e-6)
        assert model.lstm.input_size == features.shape[-1] and model.lstm.hidden_size == 32
        assert model.lstm.num_layers == 2 and model.lstm.bidirectional
        assert model(ids).logits.shape == (2, 7, 3)
    with pytest.raises(ValueError, match="at least 4 layers"):
        BertFeatureBasedForTokenClassification(
            BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
            num_labels=3,
            feature_based="last4-sum",
        )


def test_encoder_is_frozen_and_stays_in_eval_mode():
    model = BertFeatureBasedForTokenClassification(_config(), num_labels=3, lstm_hidden_size=16).train()
    assert not model.bert.training and model.lstm.training
    assert not any(p.requires_grad for p in model.bert.parameters())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("lstm.", "classifier.")) for n in trainable)
    # Padding does not change a sequence's scores (packed BiLSTM).
    ids = torch.randint(5, 100, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 2, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 6 + [0] * 2])
    model.eval()
    assert torch.allclose(model(ids).logits, model(padded, attention_mask=mask).logits[:, :6], atol=1e-5)
    # The second pass reads the frozen features from the cache (one entry per distinct sequence).
    assert len(model._cache) == 1
    cached = model(padded, attention_mask=mask).logits
    model._cache.clear()
    assert torch.allclose(cached, model(padded, attention_mask=mask).logits, atol=1e-5)


@pytest.mark.slow
def test_feature_based_ner_learns_names_and_predict_reloads_it(tmp_path):
    run = tmp_path / "pretrain"
    torch.manual_seed(0)
    pretrained = BertForPreTraining(_config())
    ckpt.save_checkpoint(
        str(run),
        1,
        model=pretrained,
        optimizer=create_optimizer(pretrained),
        state={"model_config": pretrained.config.to_dict(), "data": {"vocab_sha256": "test"}},
        hf_config=pretrained.config.to_hf_dict(),
        vocab_file=str(VOCAB),
    )
    write_ner_files(tmp_path)
    runner = CliRunner()
    out = runner.invoke(
        cli,
        [
            "finetune",
            "--task",
            "ner",
            "--feature-based",
            "last4-concat",
            "--init-from",
            str(run),
            "--train-file",
            str(tmp_path / "train.conll"),
            "--eval-file",
            str(tmp_path / "dev.conll"),
            "-o",
            str(tmp_path / "run"),
            "--lr",
            "5e-3",
            "--batch-size",
            "16",
            "--num-train-epochs",
            "15",
            "--max-seq-length",
            "16",
            "--no-progress",
        ],
    )
    assert out.exit_code == 0, out.output
    best = json.loads((tmp_path / "run" / "results.json").read_text())["best_metrics"]
    assert best["f1"] >= 0.9, best
    # The encoder did not move: the saved bert.* weights are the pre-trained ones.
    saved = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))
    original = pretrained.state_dict()
    for key, value in saved.items():
        if key.startswith("bert.") and key in original:
            assert torch.equal(value, original[key]), key
    assert any(k.startswith("lstm.") for k in saved)
    out = runner.invoke(
        cli,
        predict_args(tmp_path / "run", tmp_path / "dev.conll", tmp_path / "p.conll"),
    )
    assert out.exit_code == 0, out.output
    assert (tmp_path / "p.conll").read_text() == (tmp_path / "run" / "eval_predictions.conll").read_text()
    with pytest.raises(ValueError, match="feature_based must be one of"):
        make_task("ner", feature_based="all-layers")
