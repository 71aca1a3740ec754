"""What the encoders and heads return, and the losses they share, for BERT and ModernBERT alike.

The field names are those of the Hugging Face ``transformers`` output classes of the same names, so the
loops and ``predict`` read any model's output the same way. Shapes: B batch, T sequence length, H hidden size,
P prediction slots per row, C number of labels, N candidates, V vocab size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: Label that the losses ignore (PyTorch's cross-entropy ``ignore_index``): padding entries of
#: ``masked_lm_ids``, positions without a label. The one definition.
IGNORE_INDEX = -100


@dataclass
class EncoderOutput:
    """What an encoder (``BertModel``, ``ModernBertModel``) returns (``transformers``'
    ``BaseModelOutputWithPooling``)."""

    last_hidden_state: torch.Tensor
    """float (B, T, H): the final hidden states (those at padding positions are meaningless)."""
    pooler_output: torch.Tensor | None = None
    """float (B, H), or (D, H) for a packed batch of D sequences: BERT's tanh pooler on [CLS]; None for an
    encoder without a pooler."""
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """With ``output_hidden_states``: the embedding output and every layer's output, L + 1 tensors (B, T, H)."""

    def __getitem__(self, index: int) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """``out[0]`` is ``last_hidden_state``, ``out[1]`` the next field that is not None, as ``transformers``'
        ``ModelOutput.to_tuple()``."""
        fields = (self.last_hidden_state, self.pooler_output, self.hidden_states)
        return tuple(f for f in fields if f is not None)[index]


def gather_positions(hidden_states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The hidden states at the prediction slots ``positions``, as the original ``gather_indexes``
    (google-research/bert ``run_pretraining.py``).

    Args:
        hidden_states: (B, T, H), or any (B, T) tensor (e.g. ``input_ids``) when ``positions`` index it alone.
        positions: int (B, P), indices into each row of ``hidden_states``; or (1, M), indices into the B rows
            seen as one stream (row * T + column: a packed batch's slots, no row padded to the fullest).
    Returns:
        (B, P, H) or (1, M, H) (without the H dimension for a (B, T) input).
    """
    rows = positions.size(0)  # B, or 1 for slots over the flattened rows
    flat = hidden_states.reshape(rows, -1, *hidden_states.shape[2:])  # (rows, B*T/rows, ...)
    if flat.dim() == 2:
        return torch.gather(flat, 1, positions.long())  # (rows, P)
    index = positions.long().unsqueeze(-1).expand(-1, -1, flat.size(-1))  # (rows, P, H)
    return torch.gather(flat, 1, index)  # (rows, P, H)


def masked_lm_loss(prediction_logits: torch.Tensor, masked_lm_ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy, in float32, of MLM scores (..., V) against the original ids (...) over the slots
    whose id is not -100 (the original's ``masked_lm_weights``: empty slots weigh nothing)."""
    return F.cross_entropy(
        prediction_logits.reshape(-1, prediction_logits.size(-1)).float(),  # (B*P, V)
        masked_lm_ids.reshape(-1).long(),  # (B*P,)
        ignore_index=IGNORE_INDEX,
    )


@dataclass
class PretrainingHeadsOutput:
    """What :func:`pretraining_heads` returns: the two pre-training tasks' scores and losses."""

    prediction_logits: torch.Tensor
    """float (B, P, V) or (1, M, V): MLM scores of the prediction slots (every position: (B, T, V))."""
    seq_relationship_logits: torch.Tensor | None
    """float (B, 2) or (D, 2): NSP / SOP scores; None for a model without a sentence head (ModernBERT)."""
    mlm_loss: torch.Tensor | None
    """Scalar :func:`masked_lm_loss`, when ``masked_lm_ids`` are given."""
    nsp_loss: torch.Tensor | None
    """Scalar mean cross-entropy (float32) of the sentence head, when it exists and labels are given."""


def pretraining_heads(
    model,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    masked_lm_positions: torch.Tensor | None,
    masked_lm_ids: torch.Tensor | None,
    next_sentence_label: torch.Tensor | None,
    **layout: torch.Tensor | None,
) -> PretrainingHeadsOutput:
    """The pre-training forward pass and losses, written once (``BertForPreTraining.forward`` and the training
    loop's ``pretrain.architectures.PretrainingModel`` call it): the encoder (``model.base_model``) on the batch,
    the MLM head (``model.masked_lm_logits``) on the hidden states at ``masked_lm_positions`` only (as the
    original ``get_masked_lm_output``; every position when None), the sentence head (``model.sentence_logits``,
    None for ModernBERT) on the pooled [CLS] of each instance; :func:`masked_lm_loss` and the sentence head's
    cross-entropy where labels are given (paper section 3.1; google-research/bert ``run_pretraining.py``).

    Args:
        model: ``BertForPreTraining`` or ``ModernBertForMaskedLM`` (anything with those three members).
        input_ids, token_type_ids, attention_mask: int64 (B, T).
        masked_lm_positions, masked_lm_ids: int64 (B, P), or (1, M) over the flattened rows of a packed batch.
        next_sentence_label: int64 (B,) padded, (D,) packed; 1 = NotNext.
        layout: ``sequence_ids``, ``position_ids``, ``cu_seqlens``, ``sequence_starts`` of a packed batch.
    """
    encoded = model.base_model(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask, **layout)
    states = encoded.last_hidden_state  # (B, T, H)
    if masked_lm_positions is not None:
        states = gather_positions(states, masked_lm_positions)  # (B, P, H) or (1, M, H)
    prediction_logits = model.masked_lm_logits(states)  # (B, P, V) or (1, M, V)
    sentence_logits = model.sentence_logits(encoded.pooler_output)  # (B or D, 2) or None
    mlm_loss = None if masked_lm_ids is None else masked_lm_loss(prediction_logits, masked_lm_ids)
    nsp_loss = None
    if sentence_logits is not None and next_sentence_label is not None:
        nsp_loss = F.cross_entropy(sentence_logits.float(), next_sentence_label.reshape(-1).long())
    return PretrainingHeadsOutput(prediction_logits, sentence_logits, mlm_loss, nsp_loss)


@dataclass
class SequenceClassifierOutput:
    logits: torch.Tensor
    """float [batch_size, num_labels]; for regression (num_labels = 1) the predicted value in column 0."""
    loss: torch.Tensor | None = None
    """Scalar: mean cross-entropy (classification) or mean squared error (regression), when labels are given."""


@dataclass
class QuestionAnsweringOutput:
    start_logits: torch.Tensor
    """float [batch_size, seq_length]: score of each token being the answer's first token."""
    end_logits: torch.Tensor
    """float [batch_size, seq_length]: score of each token being the answer's last token."""
    loss: torch.Tensor | None = None
    """Scalar (start cross-entropy + end cross-entropy) / 2, when positions are given."""


@dataclass
class TokenClassifierOutput:
    logits: torch.Tensor
    """float [batch_size, seq_length, num_labels]."""
    loss: torch.Tensor | None = None
    """Scalar mean cross-entropy over tokens whose label is not -100, when labels are given."""


@dataclass
class MultipleChoiceModelOutput:
    logits: torch.Tensor
    """float [batch_size, num_choices]: one score per candidate (softmax over them gives the choice)."""
    loss: torch.Tensor | None = None
    """Scalar mean cross-entropy over the candidates, when labels are given."""


def question_answering_loss(
    start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor, end_positions: torch.Tensor
) -> torch.Tensor:
    """(start cross-entropy + end cross-entropy) / 2, as ``transformers`` ``ForQuestionAnsweringLoss``.

    Args:
        start_logits, end_logits: float [batch_size, seq_length].
        start_positions, end_positions: int [batch_size], token indices; positions outside the sequence are
            clamped to ``seq_length`` and ignored.
    Returns:
        A scalar float32 tensor.
    """
    T = start_logits.size(1)
    start = start_positions.long().clamp(0, T)
    end = end_positions.long().clamp(0, T)
    return (
        F.cross_entropy(start_logits.float(), start, ignore_index=T)
        + F.cross_entropy(end_logits.float(), end, ignore_index=T)
    ) / 2


def sequence_classification_loss(logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
    """The loss of sequence scores ``logits`` (float [batch_size, num_labels]) against ``labels`` (None: no
    loss), in float32: with one output (regression) the mean squared error against float targets
    [batch_size], else the mean cross-entropy against int64 class indices [batch_size]. As
    ``transformers.BertForSequenceClassification`` for ``problem_type`` regression and
    single_label_classification."""
    if labels is None:
        return None
    if logits.size(-1) == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels.long())


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
    """Mean cross-entropy, in float32, of per-token scores ``logits`` (float [batch_size, seq_length,
    num_labels]) against ``labels`` (int64 [batch_size, seq_length]; positions labelled -100, the
    ``ignore_index`` of ``transformers``' token-classification loss, are left out); None without labels."""
    if labels is None:
        return None
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1).long(), ignore_index=IGNORE_INDEX
    )


__all__ = [
    "IGNORE_INDEX",
    "EncoderOutput",
    "MultipleChoiceModelOutput",
    "QuestionAnsweringOutput",
    "SequenceClassifierOutput",
    "TokenClassifierOutput",
    "gather_positions",
    "masked_lm_loss",
    "question_answering_loss",
    "sequence_classification_loss",
    "token_classification_loss",
]
