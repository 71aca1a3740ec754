"""The ModernBERT task heads of heads.py against transformers' classes of the same names: the same
parameter names, logits within 1e-4 and equal losses from the same weights, and the same start from a
pre-trained ModernBertForMaskedLM (``head.*`` taken over, as from_pretrained does)."""

from __future__ import annotations

import pytest
import torch

from bertprep.bert_model.models.heads import (
    HEADS,
    ModernBertForMultipleChoice,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    load_encoder_weights,
)
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertForMaskedLM, trainable_state_dict
from conftest import need_module
from model_factory import tiny_modernbert_own_rope

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Layers 0 and 3 global, 1 and 2 local with a window of 8 (4 each side) so that 24-token rows reach beyond it.
TINY = tiny_modernbert_own_rope()
T = 24
LENGTHS = [T, 17, 6]


def _pair(cls, num_labels: int, **overrides):
    """(ours, transformers') of the head ``cls`` with the same transformers-initialised weights, in eval mode."""
    config = ModernBertConfig(**{**TINY, **overrides})
    torch.manual_seed(0)
    hf_config = transformers.ModernBertConfig(**config.to_hf_dict(), num_labels=num_labels)
    hf = getattr(transformers, cls.__name__)._from_config(hf_config, attn_implementation="sdpa").eval()
    ours = (cls(config) if cls is ModernBertForMultipleChoice else cls(config, num_labels=num_labels)).eval()
    assert set(ours.state_dict()) == set(hf.state_dict())  # the names map one to one
    ours.load_state_dict(hf.state_dict(), strict=True)
    return ours, hf


def _batch(rows: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) starting with [CLS], and their attention mask."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, TINY["vocab_size"], (rows, T), generator=g)
    input_ids[:, 0] = TINY["cls_token_id"]
    lengths = torch.tensor((LENGTHS * rows)[:rows])
    attention_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T)
    return input_ids * attention_mask, attention_mask


def _both(ours, hf, input_ids: torch.Tensor, **inputs):
    """Our head's output and transformers' on the same ``input_ids`` and keyword ``inputs`` (no gradients)."""
    with torch.no_grad():
        return ours(input_ids, **inputs), hf(input_ids=input_ids, **inputs)


def test_every_head_is_registered_under_its_transformers_name():
    for cls in (
        ModernBertForSequenceClassification,
        ModernBertForQuestionAnswering,
        ModernBertForTokenClassification,
        ModernBertForMultipleChoice,
    ):
        assert cls.architecture == cls.__name__ and HEADS[cls.architecture] is cls
        assert hasattr(transformers, cls.architecture)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_matches_transformers(pooling):
    ours, hf = _pair(ModernBertForSequenceClassification, 3, classifier_pooling=pooling)
    input_ids, attention_mask = _batch()
    labels = torch.tensor([0, 2, 1])
    a, b = _both(ours, hf, input_ids, attention_mask=attention_mask, labels=labels)
    assert a.logits.shape == (3, 3)
    assert (a.logits - b.logits).abs().max().item() < 1e-4
    assert abs(a.loss.item() - b.loss.item()) < 1e-5


def test_token_classification_matches_transformers():
    ours, hf = _pair(ModernBertForTokenClassification, 5)
    input_ids, attention_mask = _batch()
    labels = torch.randint(0, 5, input_ids.shape, generator=torch.Generator().manual_seed(1))
    labels[attention_mask == 0] = -100
    labels[:, 0] = -100
    a, b = _both(ours, hf, input_ids, attention_mask=attention_mask, labels=labels)
    real = attention_mask.bool()
    assert a.logits.shape == (3, T, 5)
    assert (a.logits - b.logits)[real].abs().max().item() < 1e-4
    assert abs(a.loss.item() - b.loss.item()) < 1e-5


def test_question_answering_matches_transformers():
    ours, hf = _pair(ModernBertForQuestionAnswering, 2)
    assert ours.classifier.out_features == 2  # transformers' ModernBERT names it classifier (BERT: qa_outputs)
    input_ids, attention_mask = _batch()
    a, b = _both(ours, hf, input_ids, attention_mask=attention_mask)
    real = attention_mask.bool()
    assert a.start_logits.shape == a.end_logits.shape == (3, T)
    assert (a.start_logits - b.start_logits)[real].abs().max().item() < 1e-4
    assert (a.end_logits - b.end_logits)[real].abs().max().item() < 1e-4
    # The loss is a softmax over every position, padding included (transformers, and BERT's run_squad.py), and
    # what a padding position scores depends on the attention kernel (transformers' sdpa and flash differ):
    # equal losses on full rows. The second row's positions lie outside the sequence (ignored), the third
    # points at [CLS] (no answer).
    start, end = torch.tensor([3, 40, 0]), torch.tensor([5, 41, 0])
    a, b = _both(ours, hf, input_ids, start_positions=start, end_positions=end)
    assert abs(a.loss.item() - b.loss.item()) < 1e-5


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_multiple_choice_matches_transformers(pooling):
    ours, hf = _pair(ModernBertForMultipleChoice, 1, classifier_pooling=pooling)
    input_ids, attention_mask = _batch(rows=8)
    input_ids, attention_mask = input_ids.view(2, 4, T), attention_mask.view(2, 4, T)  # 2 examples, 4 candidates
    labels = torch.tensor([3, 1])
    a, b = _both(ours, hf, input_ids, attention_mask=attention_mask, labels=labels)
    assert a.logits.shape == (2, 4)
    assert (a.logits - b.logits).abs().max().item() < 1e-4
    assert abs(a.loss.item() - b.loss.item()) < 1e-5


@pytest.mark.parametrize(
    "cls", [ModernBertForSequenceClassification, ModernBertForTokenClassification, ModernBertForQuestionAnswering]
)
def test_a_head_starts_from_a_masked_lm_as_from_pretrained_does(tmp_path, cls):
    """From a pre-trained ModernBertForMaskedLM transformers takes ``model.*`` and the prediction head
    ``head.*`` (names match) and leaves ``classifier`` new; so does ``load_encoder_weights``."""
    config = ModernBertConfig(**TINY)
    torch.manual_seed(1)
    mlm = ModernBertForMaskedLM(config)
    hf_mlm = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**config.to_hf_dict()))
    hf_mlm.load_state_dict(mlm.state_dict())
    hf_mlm.save_pretrained(tmp_path / "mlm")
    hf = getattr(transformers, cls.__name__).from_pretrained(tmp_path / "mlm", num_labels=2).eval()
    ours = cls(config, num_labels=2).eval()
    fresh = load_encoder_weights(ours, trainable_state_dict(mlm))
    assert fresh == ["classifier.weight", "classifier.bias"]
    for name, value in ours.state_dict().items():
        if not name.startswith("classifier."):
            torch.testing.assert_close(value, hf.state_dict()[name], rtol=0, atol=0)
