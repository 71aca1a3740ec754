"""The feature-based approach to NER (BERT paper, section 5.3 and Table 7).

The pre-trained encoder is frozen (no gradients, dropout off, its weights never change); the activations of
one or more of its layers feed a task model trained from scratch: as in the paper, a two-layer bidirectional
LSTM (768 units per direction for BERT-Base; here ``hidden_size`` of the model unless set) and a linear
classifier over each word's first piece. The combinations of Table 7:

==================  ==========================================  =======================
``feature_based``   input to the BiLSTM at every piece          width
==================  ==========================================  =======================
``embeddings``      the embedding output (hidden state 0)       H
``second-to-last``  hidden state L-1                            H
``last``            hidden state L                              H
``last4-sum``       sum of hidden states L-3 .. L               H
``last4-concat``    concatenation of L, L-1, L-2, L-3           4H
==================  ==========================================  =======================

(Table 7 also lists "weighted sum of all 12 layers", not built here.) The model's parameter names are
``bert.*`` (the frozen encoder, Hugging Face names), ``lstm.*`` and ``classifier.*``; ``bertprep predict``
loads it from a ``bertprep finetune`` output. ``ModernBertFeatureBasedForTokenClassification`` is the same
on a frozen ModernBERT encoder (``model.*``; its hidden states as ``transformers`` ``output_hidden_states``
gives them, the last one after the final LayerNorm). No ``transformers`` class has this shape, so it is not for
``bertprep export``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bertprep.bert_model.inference.features import encoder_hidden_states
from bertprep.bert_model.models.bert import BertConfig, BertModel
from bertprep.bert_model.models.heads import HEADS, LabelledScores, TokenClassifierOutput, _init_linear, family_of
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertModel
from bertprep.bert_model.models.outputs import token_classification_loss

FEATURE_MODES = ("last4-concat", "last4-sum", "second-to-last", "last", "embeddings")


def feature_width(mode: str, hidden_size: int) -> int:
    """Width of the BiLSTM input for ``mode`` (4H for ``last4-concat``, else H)."""
    if mode not in FEATURE_MODES:
        raise ValueError(f"feature_based must be one of {', '.join(FEATURE_MODES)}, got {mode!r}")
    return 4 * hidden_size if mode == "last4-concat" else hidden_size


def combine_layers(states: list[torch.Tensor], mode: str) -> torch.Tensor:
    """The features of ``mode`` from ``encoder_hidden_states`` (L + 1 tensors [B, T, H]) -> [B, T, width]."""
    if mode == "embeddings":
        return states[0]
    if mode == "last":
        return states[-1]
    if mode == "second-to-last":
        return states[-2]
    if mode == "last4-sum":
        return torch.stack(states[-4:]).sum(0)
    return torch.cat([states[-1], states[-2], states[-3], states[-4]], dim=-1)


class FeatureBasedTokenClassifier(LabelledScores):
    """Frozen encoder features -> two-layer BiLSTM -> linear tag scores (see the module docstring), for BERT
    (``bert.*``) or ModernBERT (``model.*``) as the config says (``heads.family_of``). The BiLSTM's dropout
    defaults to the family's dropout of task heads (BERT ``hidden_dropout_prob``, ModernBERT
    ``classifier_dropout``)."""

    #: The architecture name of a named tagger (``_named``), what ``config.json`` records.
    architecture: ClassVar[str]
    per_token_outputs: tuple[str, ...] = ("logits",)

    def __init__(
        self,
        config: BertConfig | ModernBertConfig,
        num_labels: int,
        feature_based: str = "last4-concat",
        lstm_hidden_size: int | None = None,
        dropout: float | None = None,
        feature_cache_mb: float = 2048.0,
    ):
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"token classification needs at least 2 labels, got {num_labels}")
        if feature_based in ("last4-concat", "last4-sum") and config.num_hidden_layers < 4:
            raise ValueError(f"{feature_based} needs at least 4 layers; the model has {config.num_hidden_layers}")
        if feature_based == "second-to-last" and config.num_hidden_layers < 2:
            raise ValueError("second-to-last needs at least 2 layers")
        family = family_of(config)
        self.config = config
        self.num_labels = num_labels
        self.feature_based = feature_based
        self.base_model_prefix = "model" if isinstance(config, ModernBertConfig) else "bert"
        setattr(self, self.base_model_prefix, family.encoder(config, add_pooling_layer=False))
        self.encoder.requires_grad_(False)
        hidden = lstm_hidden_size or config.hidden_size
        if dropout is None:
            dropout = family.default_dropout(config)
        self.lstm = nn.LSTM(
            feature_width(feature_based, config.hidden_size),
            hidden,
            num_layers=2,
            bidirectional=True,
            batch_first=True,
            dropout=dropout,
        )
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * hidden, num_labels)
        _init_linear(self.classifier, config.initializer_range)
        # The encoder is frozen, so a sequence's features never change: computed once, then reused in later
        # epochs and evaluations (keyed by its input_ids and token_type_ids; not saved with the model).
        self.feature_cache_mb = feature_cache_mb
        self._cache: dict[bytes, torch.Tensor] = {}
        self._cache_bytes = 0

    @property
    def encoder(self) -> BertModel | ModernBertModel:
        """The frozen encoder (``self.bert``, or ``self.model`` for ModernBERT)."""
        return getattr(self, self.base_model_prefix)

    def train(self, mode: bool = True) -> FeatureBasedTokenClassifier:
        """Train the BiLSTM and classifier; the frozen encoder always stays in eval mode (no dropout)."""
        super().train(mode)
        self.encoder.eval()
        return self

    @torch.no_grad()
    def frozen_features(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        """The BiLSTM input [B, T, width] (0 at padding), from the cache where every sequence of the batch is
        in it, else from the encoder (then cached while the cache is under ``feature_cache_mb``)."""
        B, T = input_ids.shape
        ids, types = input_ids.cpu(), token_type_ids.cpu()
        keys = [ids[i, : lengths[i]].numpy().tobytes() + types[i, : lengths[i]].numpy().tobytes() for i in range(B)]
        width = self.lstm.input_size
        if all(k in self._cache for k in keys):
            features = torch.zeros(B, T, width)
            for i, k in enumerate(keys):
                features[i, : lengths[i]] = self._cache[k]
            return features.to(input_ids.device)
        states = encoder_hidden_states(self.encoder, input_ids, token_type_ids, attention_mask)
        features = combine_layers(states, self.feature_based).float() * attention_mask[..., None]
        limit = self.feature_cache_mb * 2**20
        for i, k in enumerate(keys):
            if k not in self._cache and self._cache_bytes < limit:
                row = features[i, : lengths[i]].cpu().clone()
                self._cache[k] = row
                self._cache_bytes += row.numel() * row.element_size()
        return features

    output_type = TokenClassifierOutput
    #: labels: int64 [batch_size, seq_length], tag index at each word's first piece, -100 elsewhere; the loss is
    #: the mean cross-entropy over labelled positions.
    loss = staticmethod(token_classification_loss)

    def logits(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """float [batch_size, seq_length, num_labels] tag scores (0 at padding) of int [batch_size, seq_length]
        inputs (``token_type_ids`` None: all 0; ``attention_mask`` None: all 1)."""
        _B, T = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        lengths = attention_mask.sum(1).clamp(min=1).cpu()
        features = self.frozen_features(input_ids, token_type_ids, attention_mask, lengths)  # (B, T, F)
        packed = pack_padded_sequence(self.dropout(features), lengths, batch_first=True, enforce_sorted=False)
        output, _ = self.lstm(packed)
        output, _ = pad_packed_sequence(output, batch_first=True, total_length=T)  # (B, T, 2 * hidden)
        return self.classifier(self.dropout(output))  # (B, T, C)


def _named(name: str) -> type[FeatureBasedTokenClassifier]:
    """The feature-based tagger under the architecture name a saved model's ``config.json`` records."""
    return type(name, (FeatureBasedTokenClassifier,), {"architecture": name})


BertFeatureBasedForTokenClassification = _named("BertFeatureBasedForTokenClassification")
ModernBertFeatureBasedForTokenClassification = _named("ModernBertFeatureBasedForTokenClassification")


# Registered so that a fine-tuned model is saved as a Hugging Face style directory and recognised on loading.
for _cls in (BertFeatureBasedForTokenClassification, ModernBertFeatureBasedForTokenClassification):
    HEADS[_cls.architecture] = _cls
