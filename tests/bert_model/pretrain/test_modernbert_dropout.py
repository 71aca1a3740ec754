"""ModernBERT's dropout under transformers' ``ModernBertConfig`` names, with the attention-output dropout apart from
the attention-probability one as ModernBERT's pre-training sets them (attn_out_dropout_prob 0.1,
attention_probs_dropout_prob 0.0); BERT refuses them."""

from __future__ import annotations

import pytest

from bertprep.bert_model.models.modernbert import ModernBertAttention
from bertprep.bert_model.models.modernbert_config import ModernBertConfig
from bertprep.bert_model.pretrain.architectures import model_config_from_preset, with_dropout

SPECIAL = {"[PAD]": 0, "[CLS]": 2, "[SEP]": 3}


def _modernbert(**overrides) -> ModernBertConfig:
    return model_config_from_preset("modernbert", "tiny", vocab_size=64, special_token_ids=SPECIAL, overrides=overrides)


def test_attention_output_dropout_is_apart_from_the_probabilities():
    config = _modernbert(attention_dropout=0.0, attention_output_dropout=0.1, mlp_dropout=0.0, embedding_dropout=0.0)
    attention = ModernBertAttention(config)
    assert attention.dropout_p == 0.0 and attention.out_drop.p == 0.1
    # Without it, transformers' meaning: attention_dropout on both.
    attention = ModernBertAttention(_modernbert(attention_dropout=0.2))
    assert attention.dropout_p == 0.2 and attention.out_drop.p == 0.2


def test_bert_names_map_and_modernbert_names_win():
    config = _modernbert(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, mlp_dropout=0.05)
    assert (config.embedding_dropout, config.mlp_dropout, config.attention_dropout) == (0.1, 0.05, 0.1)
    assert config.attention_output_dropout is None
    assert with_dropout(config, {"attention_output_dropout": 0.3}).attention_output_dropout == 0.3


def test_export_writes_the_output_dropout_only_when_set_and_reads_it_back():
    plain = _modernbert()
    assert "attention_output_dropout" not in plain.to_hf_dict()
    config = _modernbert(attention_output_dropout=0.1)
    assert ModernBertConfig.from_dict(config.to_hf_dict()).attention_output_dropout == 0.1


def test_a_bert_model_refuses_modernberts_dropout_in_one_line():
    with pytest.raises(ValueError, match=r"^attention_output_dropout is ModernBERT's dropout; a BERT model takes"):
        model_config_from_preset(
            "bert", "tiny", vocab_size=64, special_token_ids=SPECIAL, overrides={"attention_output_dropout": 0.1}
        )
