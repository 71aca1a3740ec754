"""Packed batches for the existing BERT (``model.py``), without changing it: several documents per row, each
with positions restarting at 0 and a block-diagonal attention mask, as ``packing.py`` builds them.

``BertModel.forward`` always uses positions 0..T-1 and a key-padding mask, so these functions call its
sub-modules directly (``embeddings.*``, ``encoder``, ``pooler``): same parameters, same arithmetic, only the
positions and the mask differ. ``BertEncoder.forward`` passes its mask straight to
``scaled_dot_product_attention``, which takes the (B, 1, T, T) block-diagonal mask as it takes the
(B, 1, 1, T) padding one.

Shapes: B rows, T row length, H hidden size, D documents in the batch, M labelled positions, V vocab size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.bert import IGNORE_INDEX, BertForPreTraining, BertModel
from bertprep.bert_model.models.packing import block_diagonal_mask, position_ids_from_sequence_ids


def packed_bert_forward(
    bert: BertModel,
    input_ids: torch.Tensor,
    sequence_ids: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Encode a packed batch with a ``BertModel``: what ``bert(...)`` gives each document run on its own.

    Args:
        bert: the encoder (``model.bert`` of any bertprep BERT model).
        input_ids: int (B, T), documents one after another in each row.
        sequence_ids: int (B, T), document number within the row, -1 on padding (``pack_documents``).
        position_ids: int (B, T), positions restarting at 0 at each document; derived from ``sequence_ids``
            when omitted.
        token_type_ids: int (B, T), segment ids (0 / 1) of each document; zeros when omitted.
    Returns:
        ``(sequence_output, pooled_output)``: float (B, T, H) (padding positions meaningless) and float (D, H),
        the pooler on each document's first token in row-major order (None when ``bert.pooler`` is an
        ``nn.Identity``, as in the QA and token-classification heads).
    Raises:
        ValueError: a position beyond ``max_position_embeddings``.
    """
    if position_ids is None:
        position_ids = position_ids_from_sequence_ids(sequence_ids)  # (B, T)
    if int(position_ids.max()) >= bert.config.max_position_embeddings:
        raise ValueError(
            f"position {int(position_ids.max())} exceeds max_position_embeddings {bert.config.max_position_embeddings}"
        )
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    emb = bert.embeddings
    x = (
        emb.word_embeddings(input_ids)  # (B, T, H)
        + emb.token_type_embeddings(token_type_ids)  # (B, T, H)
        + emb.position_embeddings(position_ids)
    )  # (B, T, H)
    hidden_states = emb.dropout(emb.LayerNorm(x))  # (B, T, H)
    attn_mask = block_diagonal_mask(sequence_ids)  # (B, 1, T, T)
    sequence_output = bert.encoder(hidden_states, attn_mask)  # (B, T, H)
    pooled_output = None
    if not isinstance(bert.pooler, nn.Identity):
        starts = (position_ids == 0) & (sequence_ids >= 0)  # (B, T)
        pooled_output = bert.pooler(sequence_output[starts][:, None])  # (D, H)
    return sequence_output, pooled_output


@dataclass
class PackedPreTrainingOutput:
    """What :func:`packed_pretraining_forward` returns; losses are None without their labels."""

    prediction_logits: torch.Tensor
    """float (M, V) at the labelled positions (row-major order), or (B, T, V) without labels."""
    seq_relationship_logits: torch.Tensor
    """float (D, 2): NSP scores of each document, row-major order."""
    mlm_loss: torch.Tensor | None = None
    """Scalar mean cross-entropy over the labelled real positions."""
    nsp_loss: torch.Tensor | None = None
    """Scalar mean cross-entropy of the next-sentence prediction over the documents."""
    loss: torch.Tensor | None = None
    """``mlm_loss + nsp_loss`` when both are given."""


def packed_pretraining_forward(
    model: BertForPreTraining,
    input_ids: torch.Tensor,
    sequence_ids: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    next_sentence_label: torch.Tensor | None = None,
) -> PackedPreTrainingOutput:
    """``BertForPreTraining`` on a packed batch: the MLM head on the labelled positions only, NSP per document.

    Args:
        model: the pre-training model.
        input_ids, sequence_ids, position_ids, token_type_ids: see :func:`packed_bert_forward`.
        labels: int64 (B, T), the original id at masked positions, -100 elsewhere; padding never counts.
        next_sentence_label: int64 (D,), one per document in row-major order (1 = NotNext).
    Returns:
        :class:`PackedPreTrainingOutput`.
    """
    sequence_output, pooled_output = packed_bert_forward(
        model.bert, input_ids, sequence_ids, position_ids, token_type_ids
    )
    out_labels = None
    if labels is not None:
        keep = (labels != IGNORE_INDEX) & (sequence_ids >= 0)  # (B, T)
        sequence_output, out_labels = sequence_output[keep], labels[keep].long()  # (M, H), (M,)
    prediction_logits = model.cls.predictions(sequence_output)  # (M, V) or (B, T, V)
    seq_relationship_logits = model.cls.seq_relationship(pooled_output)  # (D, 2)
    out = PackedPreTrainingOutput(prediction_logits, seq_relationship_logits)
    if out_labels is not None:
        out.mlm_loss = F.cross_entropy(prediction_logits.float(), out_labels, ignore_index=IGNORE_INDEX)
    if next_sentence_label is not None:
        out.nsp_loss = F.cross_entropy(seq_relationship_logits.float(), next_sentence_label.reshape(-1).long())
    if out.mlm_loss is not None and out.nsp_loss is not None:
        out.loss = out.mlm_loss + out.nsp_loss
    return out


__all__ = ["PackedPreTrainingOutput", "packed_bert_forward", "packed_pretraining_forward"]
