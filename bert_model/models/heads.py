"""Fine-tuning heads, written once for every encoder: one extra layer on the pre-trained encoder (BERT paper,
section 4 and figure 4), with the names and behaviour of the Hugging Face ``transformers`` classes.

* :class:`SequenceClassifier`: one vector per sequence, dropout, a linear ``classifier`` (GLUE; one output =
  regression, as STS-B);
* :class:`QuestionAnswerer`: a start and an end score per token (SQuAD);
* :class:`TokenClassifier`: dropout and a linear ``classifier`` on every token's hidden state (NER);
* :class:`MultipleChoiceScorer`: the sequence vector of every ``[CLS] context [SEP] ending [SEP]`` candidate scored
  by a linear layer with one output, softmax over the N candidates (SWAG, paper section 4.4).

All but the QA head output one scores tensor and, given labels, a loss: they share :class:`LabelledScores`'
``forward`` and say only how they score (``logits``) and which loss they take.

Each is generic over the encoder, as ``transformers``' ``GenericForSequenceClassification`` takes any backbone
under its ``base_model_prefix``: the config's type picks the family (:data:`FAMILIES`), which says how the two
encoders differ, and nothing else does:

=====================  =================================  ==============================================
                       BERT (``bert.*``)                  ModernBERT (``model.*``)
=====================  =================================  ==============================================
sequence vector        the tanh pooler on [CLS]           ``classifier_pooling``: first real token or mean
before the classifier  nothing                            ``head``: dense + GELU + LayerNorm
dropout                ``classifier_dropout`` or          ``classifier_dropout`` (0)
                       ``hidden_dropout_prob``; none
                       before BERT's ``qa_outputs``
QA output layer        ``qa_outputs``                     ``classifier``
classifier init        normal(0, 0.02) cut at 2 sigma     normal(0, H ** -0.5) cut at the cutoff factor
=====================  =================================  ==============================================

The named classes (``BertForSequenceClassification``, ``ModernBertForQuestionAnswering``, ...) are these heads
under ``transformers``' ``architectures`` names, so that exported ``config.json`` files load there;
``HEADS`` maps every name to its class. The output classes are ``outputs.py``'s; state-dict helpers
(``load_encoder_weights`` ...) are ``weights.py``'s.

Shapes: B batch, T sequence length, H hidden size, C number of labels, N candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.bert import BertConfig, BertModel
from bertprep.bert_model.models.modernbert import (
    ModernBertConfig,
    ModernBertModel,
    ModernBertPredictionHead,
)
from bertprep.bert_model.models.modernbert import (
    _init_weights as _modernbert_init_weights,
)
from bertprep.bert_model.models.outputs import (  # re-exported (__all__)
    MultipleChoiceModelOutput,
    QuestionAnsweringOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
    question_answering_loss,
    sequence_classification_loss,
    token_classification_loss,
)
from bertprep.bert_model.models.weights import (  # re-exported (__all__): where the task code imports them
    check_source_weights,
    encoder_prefix,
    has_pooler,
    load_encoder_weights,
    load_full_weights,
)


def _init_linear(layer: nn.Linear, initializer_range: float) -> None:
    """google-research/bert ``run_classifier.py`` ``output_weights``: truncated normal(0, 0.02) weight, 0 bias."""
    nn.init.trunc_normal_(
        layer.weight, mean=0.0, std=initializer_range, a=-2 * initializer_range, b=2 * initializer_range
    )
    nn.init.zeros_(layer.bias)


def _init_modernbert_classifier(layer: nn.Linear, config: ModernBertConfig) -> None:
    """transformers ``ModernBertPreTrainedModel._init_weights``'s "final_out": std ``hidden_size ** -0.5`` cut at
    ``initializer_cutoff_factor`` sigma, bias 0."""
    std, c = config.hidden_size**-0.5, config.initializer_cutoff_factor
    nn.init.trunc_normal_(layer.weight, mean=0.0, std=std, a=-c * std, b=c * std)
    nn.init.zeros_(layer.bias)


@dataclass(frozen=True)
class Family:
    """How the task heads of one encoder family differ (see the module docstring's table)."""

    encoder: Callable[..., nn.Module]
    """Builds the encoder from the config (``add_pooling_layer`` where the family has a pooler)."""
    has_pooler: bool
    """Whether the sequence vector is the encoder's pooler output (BERT) rather than a pooling of the last
    hidden states (ModernBERT's ``sentence_representation``)."""
    # (each takes the family's config: BertConfig or ModernBertConfig, hence Any)
    transform: Callable[[Any], nn.Module]
    """The module between the encoder and dropout, registered as ``head`` (BERT: none, an ``nn.Identity``)."""
    init_transform: Callable[[nn.Module, Any], object]
    default_dropout: Callable[[Any], float]
    init_output: Callable[[nn.Linear, Any], None]
    qa_output_name: str
    qa_dropout: bool
    """Whether dropout precedes the QA output layer (``transformers``' BERT: no)."""


FAMILIES: dict[type, Family] = {
    BertConfig: Family(
        encoder=BertModel,
        has_pooler=True,
        transform=lambda config: nn.Identity(),
        init_transform=lambda head, config: None,
        default_dropout=lambda config: config.hidden_dropout_prob,
        init_output=lambda layer, config: _init_linear(layer, config.initializer_range),
        qa_output_name="qa_outputs",
        qa_dropout=False,
    ),
    ModernBertConfig: Family(
        encoder=lambda config, add_pooling_layer=False: ModernBertModel(config),
        has_pooler=False,
        transform=ModernBertPredictionHead,
        init_transform=lambda head, config: head.apply(lambda m: _modernbert_init_weights(m, config)),
        default_dropout=lambda config: config.classifier_dropout,
        init_output=_init_modernbert_classifier,
        qa_output_name="classifier",
        qa_dropout=True,
    ),
}


def family_of(config: BertConfig | ModernBertConfig) -> Family:
    """The :class:`Family` of a config. Raises ``TypeError`` for another config type."""
    for config_type, family in FAMILIES.items():
        if isinstance(config, config_type):
            return family
    raise TypeError(f"no task heads for {type(config).__name__}")


class TaskHead(nn.Module):
    """The parts every task head has: the encoder under its family's ``base_model_prefix`` (``bert`` /
    ``model``), the family's ``head`` transform, dropout, and a linear output layer (``classifier``, or
    ``qa_outputs`` for BERT's QA) with ``num_outputs`` outputs, initialised as the family does."""

    #: The ``transformers`` architecture name of a named head (``_named``), what ``config.json`` records.
    architecture: ClassVar[str]
    #: Output fields that have one value per token (evaluation trims them to each sequence's length).
    per_token_outputs: tuple[str, ...] = ()
    #: Whether BERT's pooler is part of this head (``transformers``' ``add_pooling_layer``).
    uses_pooler = False
    output_name = "classifier"

    def __init__(self, config, num_outputs: int, classifier_dropout: float | None = None, dropout: bool = True):
        super().__init__()
        family = family_of(config)
        self.config = config
        self.family = family
        self.base_model_prefix = "model" if isinstance(config, ModernBertConfig) else "bert"
        setattr(self, self.base_model_prefix, family.encoder(config, add_pooling_layer=self.uses_pooler))
        self.head = family.transform(config)
        p = family.default_dropout(config) if classifier_dropout is None else classifier_dropout
        self.dropout = nn.Dropout(p if dropout else 0.0)
        output = nn.Linear(config.hidden_size, num_outputs)
        family.init_transform(self.head, config)
        family.init_output(output, config)
        setattr(self, self.output_name, output)

    @property
    def encoder(self) -> Any:
        """The encoder (``self.bert`` or ``self.model``): a ``BertModel`` or a ``ModernBertModel``."""
        return getattr(self, self.base_model_prefix)

    def scores(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``output(dropout(head(hidden_states)))``: (..., H) -> (..., num_outputs)."""
        return getattr(self, self.output_name)(self.dropout(self.head(hidden_states)))

    def sequence_vectors(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """One vector per sequence (B, H): BERT's pooler output, or ModernBERT's pooling of the last states."""
        out = self.encoder(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        if self.family.has_pooler:
            return out.pooler_output  # (B, H)
        return self.encoder.sentence_representation(out.last_hidden_state, attention_mask)  # (B, H)

    def token_states(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """The last hidden states (B, T, H)."""
        return self.encoder(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask).last_hidden_state


class LabelledScores(nn.Module):
    """The ``forward`` of the heads whose output is one scores tensor and, given labels, a loss (sequence and
    token classification, multiple choice, ``feature_based``'s tagger): each says how it scores (``logits``),
    which output class holds the scores (``output_type``) and how they meet the labels (``loss``)."""

    #: The output class: ``output_type(logits, loss)``.
    output_type: type

    def logits(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The scores of a padded batch (shape: each head's)."""
        raise NotImplementedError

    def loss(self, logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
        """The loss of ``logits`` against ``labels`` (each head's); None without labels."""
        raise NotImplementedError

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ):
        """Scores of a padded batch, and their loss given labels.

        Args:
            input_ids, token_type_ids, attention_mask: int [batch_size, seq_length] (multiple choice:
                [batch_size, num_choices, seq_length]; see the encoder; ModernBERT ignores ``token_type_ids``).
            labels: the targets of the head's ``loss``, or None.
        Returns:
            ``output_type``: the ``logits`` (float, shaped as the head's ``logits`` says), and the loss given
            labels.
        """
        logits = self.logits(input_ids, token_type_ids, attention_mask)
        return self.output_type(logits, self.loss(logits, labels))


class SequenceClassifier(LabelledScores, TaskHead):
    """Sequence classification or regression (``transformers.*ForSequenceClassification``); ``num_labels == 1``
    means regression (Hugging Face ``problem_type="regression"``, MSE loss)."""

    uses_pooler = True
    output_type = SequenceClassifierOutput
    #: labels: int64 [batch_size] class indices, or float [batch_size] targets for regression.
    loss = staticmethod(sequence_classification_loss)

    def __init__(self, config, num_labels: int, classifier_dropout: float | None = None):
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        super().__init__(config, num_labels, classifier_dropout)
        self.num_labels = num_labels

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    def logits(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """float [batch_size, num_labels]: the scores of the sequence vectors."""
        return self.scores(self.sequence_vectors(input_ids, token_type_ids, attention_mask))  # (B, C)


class QuestionAnswerer(TaskHead):
    """Extractive QA: start / end scores per token (``transformers.*ForQuestionAnswering``; paper 4.2)."""

    per_token_outputs = ("start_logits", "end_logits")

    def __init__(self, config, num_labels: int = 2, classifier_dropout: float | None = None):
        if num_labels != 2:
            raise ValueError(f"a question-answering head has 2 outputs (start, end), got num_labels={num_labels}")
        self.output_name = family_of(config).qa_output_name
        super().__init__(config, 2, classifier_dropout, dropout=family_of(config).qa_dropout)
        self.num_labels = 2

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> QuestionAnsweringOutput:
        """Start / end scores of a padded batch.

        Args:
            input_ids, token_type_ids, attention_mask: int [batch_size, seq_length].
            start_positions, end_positions: int64 [batch_size], token indices of the answer's first and last
                piece (0 = the ``[CLS]`` token, the original's target when the answer is not in the window).
                Positions outside the sequence are ignored, as in ``transformers``.
        Returns:
            ``QuestionAnsweringOutput``: start_logits, end_logits float [batch_size, seq_length], and given both
            positions the loss (start cross-entropy + end cross-entropy) / 2.
        """
        logits = self.scores(self.token_states(input_ids, token_type_ids, attention_mask))  # (B, T, 2)
        start_logits, end_logits = logits.unbind(-1)  # (B, T) each
        out = QuestionAnsweringOutput(start_logits, end_logits)
        if start_positions is not None and end_positions is not None:
            out.loss = question_answering_loss(start_logits, end_logits, start_positions, end_positions)
        return out


class TokenClassifier(LabelledScores, TaskHead):
    """Per-token tags (``transformers.*ForTokenClassification``; paper 5.3, labels on each word's first piece)."""

    per_token_outputs = ("logits",)
    output_type = TokenClassifierOutput
    #: labels: int64 [batch_size, seq_length], tag index of each word's first piece, -100 elsewhere (other
    #: pieces, special tokens, padding); the loss is the mean cross-entropy over the positions not -100.
    loss = staticmethod(token_classification_loss)

    def __init__(self, config, num_labels: int, classifier_dropout: float | None = None):
        if num_labels < 2:
            raise ValueError(f"token classification needs at least 2 labels, got {num_labels}")
        super().__init__(config, num_labels, classifier_dropout)
        self.num_labels = num_labels

    def logits(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """float [batch_size, seq_length, num_labels]: tag scores of every token."""
        return self.scores(self.token_states(input_ids, token_type_ids, attention_mask))  # (B, T, C)


class MultipleChoiceScorer(LabelledScores, TaskHead):
    """Multiple choice (``transformers.*ForMultipleChoice``; paper section 4.4, SWAG).

    Each of the N candidates is encoded as its own ``[CLS] context [SEP] ending [SEP]`` sequence; its sequence
    vector is scored by a linear layer with one output, and a softmax over the N scores chooses. The number of
    choices is not a parameter: one model serves any N. ``num_labels`` is accepted for a uniform constructor
    and ignored (Hugging Face writes 2 by default; the head has 1 output).
    """

    uses_pooler = True
    num_labels = 1

    def __init__(self, config, num_labels: int | None = None, classifier_dropout: float | None = None):
        super().__init__(config, 1, classifier_dropout)

    output_type = MultipleChoiceModelOutput

    def logits(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """float [batch_size, num_choices] of int [batch_size, num_choices, seq_length] inputs: each candidate's
        score."""
        B, N, T = input_ids.shape
        flat = [None if t is None else t.reshape(B * N, T) for t in (input_ids, token_type_ids, attention_mask)]
        return self.scores(self.sequence_vectors(*flat)).view(B, N)  # (B, N)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
        """Mean cross-entropy against ``labels``, int64 [batch_size], the right candidate's index."""
        return None if labels is None else F.cross_entropy(logits.float(), labels.long())


def _named(base: type[TaskHead], name: str) -> type[TaskHead]:
    """``base`` under a ``transformers`` architecture name (what ``config.json``'s ``architectures`` holds)."""
    return type(name, (base,), {"architecture": name, "__doc__": f"``transformers.{name}``: {base.__doc__}"})


BertForSequenceClassification = _named(SequenceClassifier, "BertForSequenceClassification")
BertForQuestionAnswering = _named(QuestionAnswerer, "BertForQuestionAnswering")
BertForTokenClassification = _named(TokenClassifier, "BertForTokenClassification")
BertForMultipleChoice = _named(MultipleChoiceScorer, "BertForMultipleChoice")
ModernBertForSequenceClassification = _named(SequenceClassifier, "ModernBertForSequenceClassification")
ModernBertForQuestionAnswering = _named(QuestionAnswerer, "ModernBertForQuestionAnswering")
ModernBertForTokenClassification = _named(TokenClassifier, "ModernBertForTokenClassification")
ModernBertForMultipleChoice = _named(MultipleChoiceScorer, "ModernBertForMultipleChoice")

#: Hugging Face architecture name -> head class (``tasks.feature_based`` adds its BiLSTM taggers, not ``TaskHead``s).
HEADS: dict[str, type[nn.Module]] = {
    cls.architecture: cls
    for cls in (
        BertForSequenceClassification,
        BertForQuestionAnswering,
        BertForTokenClassification,
        BertForMultipleChoice,
        ModernBertForSequenceClassification,
        ModernBertForQuestionAnswering,
        ModernBertForTokenClassification,
        ModernBertForMultipleChoice,
    )
}


__all__ = [
    "FAMILIES",
    "HEADS",
    "BertForMultipleChoice",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "Family",
    "LabelledScores",
    "ModernBertForMultipleChoice",
    "ModernBertForQuestionAnswering",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "MultipleChoiceModelOutput",
    "MultipleChoiceScorer",
    "QuestionAnswerer",
    "QuestionAnsweringOutput",
    "SequenceClassifier",
    "SequenceClassifierOutput",
    "TaskHead",
    "TokenClassifier",
    "TokenClassifierOutput",
    "check_source_weights",
    "encoder_prefix",
    "family_of",
    "has_pooler",
    "load_encoder_weights",
    "load_full_weights",
    "sequence_classification_loss",
]
