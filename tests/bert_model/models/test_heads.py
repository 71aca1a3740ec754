"""bert_model/models/heads.py: output shapes, losses, Hugging Face parameter names, encoder initialisation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.heads import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    has_pooler,
    load_encoder_weights,
    load_full_weights,
)
from model_factory import tiny_bert

TINY = tiny_bert(vocab_size=80)


def _inputs(B: int = 3, T: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([T, T - 4, T - 7])[:B]
    attention_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    input_ids = torch.randint(5, TINY["vocab_size"], (B, T), generator=g) * attention_mask
    token_type_ids = ((torch.arange(T)[None, :] >= (lengths // 2)[:, None]) & attention_mask.bool()).long()
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def test_sequence_classification_shapes_and_losses():
    config = BertConfig(**TINY)
    model = BertForSequenceClassification(config, num_labels=3).eval()
    batch = _inputs()
    labels = torch.tensor([0, 2, 1])
    out = model(**batch, labels=labels)
    assert out.logits.shape == (3, 3) and out.logits.dtype == torch.float32
    assert torch.allclose(out.loss, F.cross_entropy(out.logits, labels))
    assert model(**batch).loss is None

    regression = BertForSequenceClassification(config, num_labels=1).eval()
    targets = torch.tensor([0.5, 3.0, 4.5])
    out = regression(**batch, labels=targets)
    assert regression.is_regression and out.logits.shape == (3, 1)
    assert torch.allclose(out.loss, F.mse_loss(out.logits.squeeze(-1), targets))


def test_question_answering_shapes_and_ignored_positions():
    model = BertForQuestionAnswering(BertConfig(**TINY)).eval()
    batch = _inputs()
    out = model(**batch, start_positions=torch.tensor([1, 2, 3]), end_positions=torch.tensor([2, 2, 4]))
    assert out.start_logits.shape == (3, 12) and out.end_logits.shape == (3, 12)
    expected = (
        F.cross_entropy(out.start_logits, torch.tensor([1, 2, 3]))
        + F.cross_entropy(out.end_logits, torch.tensor([2, 2, 4]))
    ) / 2
    assert torch.allclose(out.loss, expected)
    # A position beyond the sequence is ignored (transformers clamps it to T and ignores T).
    out2 = model(**batch, start_positions=torch.tensor([1, 2, 99]), end_positions=torch.tensor([2, 2, 99]))
    expected2 = (
        F.cross_entropy(out.start_logits[:2], torch.tensor([1, 2]))
        + F.cross_entropy(out.end_logits[:2], torch.tensor([2, 2]))
    ) / 2
    assert torch.allclose(out2.loss, expected2)
    with pytest.raises(ValueError, match="2 outputs"):
        BertForQuestionAnswering(BertConfig(**TINY), num_labels=3)


def test_token_classification_ignores_minus_100():
    model = BertForTokenClassification(BertConfig(**TINY), num_labels=5).eval()
    batch = _inputs()
    labels = torch.full((3, 12), -100)
    labels[0, 1], labels[1, 3], labels[2, 2] = 4, 0, 2
    out = model(**batch, labels=labels)
    assert out.logits.shape == (3, 12, 5)
    real = labels != -100
    assert torch.allclose(out.loss, F.cross_entropy(out.logits[real], labels[real]))


def test_parameter_names_follow_hugging_face():
    config = BertConfig(**TINY)
    seq = BertForSequenceClassification(config, 2).state_dict()
    qa = BertForQuestionAnswering(config).state_dict()
    tok = BertForTokenClassification(config, 3).state_dict()
    assert {"classifier.weight", "classifier.bias", "bert.pooler.dense.weight"} <= set(seq)
    assert {"qa_outputs.weight", "qa_outputs.bias"} <= set(qa)
    # transformers builds QA and token classification with add_pooling_layer=False.
    assert not any(k.startswith("bert.pooler") for k in qa) and not any(k.startswith("bert.pooler") for k in tok)
    assert all(k.startswith(("bert.", "classifier.")) for k in tok)
    encoder = {k for k in BertForPreTraining(config).state_dict() if k.startswith("bert.")}
    assert {k for k in seq if k.startswith("bert.")} == encoder


def test_encoder_weights_come_from_a_pretraining_checkpoint():
    config = BertConfig(**TINY)
    torch.manual_seed(1)
    pretrained = BertForPreTraining(config).state_dict()
    for cls, kwargs in (
        (BertForSequenceClassification, {"num_labels": 2}),
        (BertForQuestionAnswering, {}),
        (BertForTokenClassification, {"num_labels": 4}),
    ):
        torch.manual_seed(2)
        model = cls(config, **kwargs)
        fresh = load_encoder_weights(model, pretrained)
        state = model.state_dict()
        for key, value in state.items():
            if key.startswith("bert."):
                assert torch.equal(value, pretrained[key]), key
        assert fresh == [k for k in state if not k.startswith("bert.")]  # only the new head
        assert has_pooler(model) == (cls is BertForSequenceClassification)


def test_encoder_weights_of_another_size_are_refused():
    small = BertForPreTraining(BertConfig(**TINY)).state_dict()
    bigger = BertForSequenceClassification(BertConfig(**dict(TINY, hidden_size=64, intermediate_size=96)), 2)
    with pytest.raises(ValueError, match="other shapes"):
        load_encoder_weights(bigger, small)
    with pytest.raises(ValueError, match="lack encoder parameters"):
        load_encoder_weights(bigger, {"cls.predictions.bias": torch.zeros(80)})


def test_full_weights_must_match_the_label_count():
    config = BertConfig(**TINY)
    two = BertForSequenceClassification(config, 2).state_dict()
    with pytest.raises(ValueError, match="shapes"):
        load_full_weights(BertForSequenceClassification(config, 3), two)
    model = BertForSequenceClassification(config, 2)
    load_full_weights(model, two)
    assert all(torch.equal(v, two[k]) for k, v in model.state_dict().items())
