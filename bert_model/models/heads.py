"""Fine-tuning heads: one extra layer on the pre-trained encoder (BERT paper, section 4 and figure 4).

* ``BertForSequenceClassification``: dropout + linear on the pooled ``[CLS]`` output (GLUE; one output =
  regression, as STS-B);
* ``BertForQuestionAnswering``: a linear layer giving a start and an end score per token (SQuAD v1.1);
* ``BertForTokenClassification``: dropout + linear on every token's hidden state (NER);
* ``BertForMultipleChoice``: dropout + a linear layer with one output on the pooled ``[CLS]`` of every
  ``[CLS] context [SEP] ending [SEP]`` pair, softmax over the N candidates (SWAG, paper section 4.4).

Module and parameter names are those of the Hugging Face ``transformers`` classes of the same names
(``bert.*`` encoder, ``classifier.weight/bias``, ``qa_outputs.weight/bias``), so their state dicts map one to
one onto ``from_pretrained`` / ``save_pretrained`` files. As in ``transformers``, the question-answering and
token-classification models have no pooler (``add_pooling_layer=False``): ``bert.pooler`` is an
``nn.Identity`` without parameters there, so its ``pooled_output`` is unused.

The ModernBERT forms of all four (``ModernBertForSequenceClassification``, ``ModernBertForQuestionAnswering``,
``ModernBertForTokenClassification``, ``ModernBertForMultipleChoice``) live in ``modernbert.py`` with
``transformers``' names and behaviour; ``HEADS`` maps every head's ``architectures`` name to its class. The
output classes are in ``outputs.py``.

Shapes: B batch, T sequence length, H hidden size, C number of labels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.bert import BertConfig, BertModel
from bertprep.bert_model.models.modernbert import (
    ModernBertForMultipleChoice,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
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


def _init_linear(layer: nn.Linear, initializer_range: float) -> None:
    """google-research/bert ``run_classifier.py`` ``output_weights``: truncated normal(0, 0.02) weight, 0 bias."""
    nn.init.trunc_normal_(
        layer.weight, mean=0.0, std=initializer_range, a=-2 * initializer_range, b=2 * initializer_range
    )
    nn.init.zeros_(layer.bias)


class BertForSequenceClassification(nn.Module):
    """``[CLS]``-pooled classification or regression (``transformers.BertForSequenceClassification``).

    ``num_labels == 1`` means regression (Hugging Face ``problem_type="regression"``, MSE loss).
    """

    architecture = "BertForSequenceClassification"
    #: Output fields that have one value per token (evaluation trims them to each sequence's length).
    per_token_outputs: tuple[str, ...] = ()

    def __init__(self, config: BertConfig, num_labels: int, classifier_dropout: float | None = None):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        self.config = config
        self.num_labels = num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        _init_linear(self.classifier, config.initializer_range)

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput:
        """Scores of a padded batch.

        Args:
            input_ids, token_type_ids, attention_mask: int [batch_size, seq_length] (see ``BertModel``).
            labels: int64 [batch_size] class indices, or float [batch_size] targets for regression.
        """
        _, pooled_output = self.bert(input_ids, token_type_ids, attention_mask)  # (B, H)
        logits = self.classifier(self.dropout(pooled_output))  # (B, C)
        return SequenceClassifierOutput(logits, sequence_classification_loss(logits, labels))


class BertForQuestionAnswering(nn.Module):
    """Extractive QA: start / end scores per token (``transformers.BertForQuestionAnswering``; paper 4.2)."""

    architecture = "BertForQuestionAnswering"
    per_token_outputs: tuple[str, ...] = ("start_logits", "end_logits")

    def __init__(self, config: BertConfig, num_labels: int = 2):
        super().__init__()
        if num_labels != 2:
            raise ValueError(f"a question-answering head has 2 outputs (start, end), got num_labels={num_labels}")
        self.config = config
        self.num_labels = 2
        self.bert = BertModel(config)
        self.bert.pooler = nn.Identity()  # no pooler, as transformers' add_pooling_layer=False
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        _init_linear(self.qa_outputs, config.initializer_range)

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
            input_ids, token_type_ids, attention_mask: int [batch_size, seq_length] (see ``BertModel``).
            start_positions, end_positions: int64 [batch_size], token indices of the answer's first and last
                piece (0 = the ``[CLS]`` token, the original's target when the answer is not in the window).
                Positions outside the sequence are ignored, as in ``transformers``.
        """
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)  # (B, T, H)
        logits = self.qa_outputs(sequence_output)  # (B, T, 2)
        start_logits, end_logits = logits.unbind(-1)  # (B, T) each
        out = QuestionAnsweringOutput(start_logits, end_logits)
        if start_positions is not None and end_positions is not None:
            out.loss = question_answering_loss(start_logits, end_logits, start_positions, end_positions)
        return out


class BertForTokenClassification(nn.Module):
    """Per-token tags (``transformers.BertForTokenClassification``; paper 5.3, labels on the first piece)."""

    architecture = "BertForTokenClassification"
    per_token_outputs: tuple[str, ...] = ("logits",)

    def __init__(self, config: BertConfig, num_labels: int, classifier_dropout: float | None = None):
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"token classification needs at least 2 labels, got {num_labels}")
        self.config = config
        self.num_labels = num_labels
        self.bert = BertModel(config)
        self.bert.pooler = nn.Identity()  # no pooler, as transformers' add_pooling_layer=False
        self.dropout = nn.Dropout(config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        _init_linear(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TokenClassifierOutput:
        """Tag scores of a padded batch.

        Args:
            input_ids, token_type_ids, attention_mask: int [batch_size, seq_length] (see ``BertModel``).
            labels: int64 [batch_size, seq_length], tag index of each word's first piece, -100 elsewhere
                (other pieces, special tokens, padding).
        """
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)  # (B, T, H)
        logits = self.classifier(self.dropout(sequence_output))  # (B, T, C)
        return TokenClassifierOutput(logits, token_classification_loss(logits, labels))


class BertForMultipleChoice(nn.Module):
    """Multiple choice (``transformers.BertForMultipleChoice``; paper section 4.4, SWAG).

    Each of the N candidates is encoded as its own ``[CLS] context [SEP] ending [SEP]`` sequence; the only new
    parameters are a vector (``classifier``, a linear layer with one output) whose dot product with the pooled
    ``[CLS]`` representation scores the candidate, and a softmax over the N scores chooses. The number of
    choices is not a parameter: one model serves any N. ``num_labels`` is accepted for a uniform
    constructor and ignored (Hugging Face writes 2 by default; the head has 1 output).
    """

    architecture = "BertForMultipleChoice"
    per_token_outputs: tuple[str, ...] = ()
    num_labels = 1

    def __init__(self, config: BertConfig, num_labels: int | None = None, classifier_dropout: float | None = None):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, 1)
        _init_linear(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> MultipleChoiceModelOutput:
        """Candidate scores of a padded batch.

        Args:
            input_ids, token_type_ids, attention_mask: int [batch_size, num_choices, seq_length], one
                ``[CLS] context [SEP] ending [SEP]`` sequence per candidate (see ``BertModel``).
            labels: int64 [batch_size], index of the right candidate.
        """
        B, N, T = input_ids.shape
        flat = [None if t is None else t.reshape(B * N, T) for t in (input_ids, token_type_ids, attention_mask)]
        _, pooled_output = self.bert(*flat)  # (B*N, H)
        logits = self.classifier(self.dropout(pooled_output)).view(B, N)  # (B, N)
        out = MultipleChoiceModelOutput(logits)
        if labels is not None:
            out.loss = F.cross_entropy(logits.float(), labels.long())
        return out


#: Hugging Face architecture name -> head class.
HEADS: dict[str, type[nn.Module]] = {
    cls.architecture: cls
    for cls in (
        BertForSequenceClassification,
        BertForQuestionAnswering,
        BertForTokenClassification,
        BertForMultipleChoice,
        ModernBertForSequenceClassification,  # (modernbert.py, transformers' ModernBERT heads)
        ModernBertForQuestionAnswering,
        ModernBertForTokenClassification,
        ModernBertForMultipleChoice,
    )
}


def encoder_prefix(model: nn.Module) -> str:
    """The key prefix of a head model's encoder weights: ``model.`` for ModernBERT, ``bert.`` for BERT."""
    return "model." if getattr(model.config, "architecture", "bert") == "modernbert" else "bert."


def has_pooler(model: nn.Module) -> bool:
    """Whether ``model.bert`` has a pooler with parameters (sequence classification and pre-training do)."""
    return not isinstance(model.bert.pooler, nn.Identity)


def load_encoder_weights(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> list[str]:
    """Copy the encoder weights of a pre-training (or any BERT / ModernBERT) state dict into a head model.

    BERT: the ``bert.*`` weights. Every encoder parameter of ``model`` must be present with the same shape,
    except the pooler, which is left freshly initialised when the source has none (e.g. a
    token-classification model). Keys outside ``bert.`` (``cls.*`` pre-training heads, another task's
    ``classifier``) are not used.

    ModernBERT: the ``model.*`` weights, and the prediction head ``head.*`` (dense + GELU + LayerNorm) where
    the source has it (a ``ModernBertForMaskedLM``): ``transformers`` ``from_pretrained`` of a ModernBERT MLM
    checkpoint into any ModernBERT task head loads ``head.*`` too, since the names match. ``decoder.bias`` is
    not used.

    Returns the names of ``model``'s parameters left at their initial values (the new head, maybe the
    pooler). Raises ``ValueError`` naming the missing keys or mismatched shapes (another model size).
    """
    own = model.state_dict()
    prefix = encoder_prefix(model)
    taken = (prefix, "head.") if prefix == "model." else (prefix,)
    wanted = [k for k in own if k.startswith(taken)]
    check_source_weights(own, state_dict, wanted, prefix)
    model.load_state_dict({k: state_dict[k] for k in wanted if k in state_dict}, strict=False)
    return [k for k in own if k not in state_dict or not k.startswith(taken)]


def check_source_weights(
    own: dict[str, torch.Tensor], state_dict: dict[str, torch.Tensor], wanted: list[str], prefix: str = "bert."
) -> None:
    """Check that a source state dict can start a model whose state dict is ``own``: every encoder
    parameter (``bert.embeddings.*``, ``bert.encoder.*``) present, and every key of ``wanted`` that the
    source has of the model's shape. Raises ``ValueError`` naming the missing keys (not a BERT checkpoint)
    or the mismatched shapes (another model size)."""
    encoder = ("model.",) if prefix == "model." else ("bert.embeddings.", "bert.encoder.")
    missing = [k for k in own if k.startswith(encoder) and k not in state_dict]
    if missing:
        raise ValueError(
            f"the source weights lack encoder parameters {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}; is it a BERT checkpoint?"
        )
    wrong = [
        f"{k}: model {tuple(own[k].shape)}, source {tuple(state_dict[k].shape)}"
        for k in wanted
        if k in state_dict and own[k].shape != state_dict[k].shape
    ]
    if wrong:
        raise ValueError(f"the source weights have other shapes than this model: {'; '.join(wrong[:3])}")


def load_full_weights(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a head model's complete state dict (encoder and head) strictly.

    Raises ``ValueError`` naming missing / unexpected keys or mismatched shapes (e.g. another label count).
    """
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"weights do not match {type(model).__name__}: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    wrong = [
        f"{k}: model {tuple(own[k].shape)}, file {tuple(v.shape)}"
        for k, v in state_dict.items()
        if own[k].shape != v.shape
    ]
    if wrong:
        raise ValueError(f"weights have other shapes than {type(model).__name__}: {'; '.join(wrong[:3])}")
    model.load_state_dict(state_dict, strict=True)


__all__ = [
    "HEADS",
    "BertForMultipleChoice",
    "BertForQuestionAnswering",
    "MultipleChoiceModelOutput",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "QuestionAnsweringOutput",
    "SequenceClassifierOutput",
    "TokenClassifierOutput",
    "check_source_weights",
    "has_pooler",
    "load_encoder_weights",
    "load_full_weights",
    "sequence_classification_loss",
]
