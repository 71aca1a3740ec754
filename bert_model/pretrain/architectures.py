"""The two encoders ``bertprep train`` pre-trains, behind one interface: BERT (``models/bert.py``: MLM + NSP) and
ModernBERT (``models/modernbert.py``: MLM alone, sparse prediction), each on padded or packed batches.

In: a ``TrainConfig`` (``architecture``, ``preset`` and overrides) and the shards' ``ShardInfo``. Out: the model
config (``model_config_from_preset`` / ``model_config_from_dict``), the model (``build_model``) and
``PretrainingModel``, the module the loop calls as ``model(**batch)`` for any architecture and layout, which
returns a ``PretrainingOutput``. The weights stay those of the wrapped model (Hugging Face names), so
checkpoints and exports do not see the wrapper.

Batch layouts (``pretrain/data.py``): padded rows (``collate.collate_numpy``) or packed rows
(``collate.collate_packed_numpy``, which adds ``sequence_ids`` and ``position_ids``); both give
``masked_lm_positions`` / ``masked_lm_ids`` [B, P] and the layout indices the attention kernels use. Shapes:
B rows, T row length, P prediction slots per row, V vocab, D instances (sequences) of a packed batch.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch
from torch import nn

from bertprep.bert_model.models import modernbert_config
from bertprep.bert_model.models.bert_config import PRESETS as BERT_PRESETS
from bertprep.bert_model.models.bert_config import BertConfig
from bertprep.bert_model.models.bert_config import flops as bert_flops
from bertprep.bert_model.models.bert_config import flops_per_token as bert_flops_per_token
from bertprep.bert_model.models.modernbert_config import DROPOUT_FIELDS as MODERNBERT_DROPOUT
from bertprep.bert_model.models.modernbert_config import PRESETS as MODERNBERT_PRESETS
from bertprep.bert_model.models.modernbert_config import ModernBertConfig
from bertprep.bert_model.models.outputs import gather_positions, pretraining_heads

logger = logging.getLogger("bertprep.train")

#: ``--architecture`` values and their size presets (``--preset`` picks from the architecture's table).
ARCHITECTURES: dict[str, dict] = {"bert": BERT_PRESETS, "modernbert": MODERNBERT_PRESETS}

ModelConfig = BertConfig | ModernBertConfig


def architecture_of(model_config: ModelConfig) -> str:
    """``"bert"`` or ``"modernbert"``."""
    return "modernbert" if isinstance(model_config, ModernBertConfig) else "bert"


def model_config_from_dict(values: dict) -> ModelConfig:
    """The config a checkpoint's ``state.json`` recorded (``to_dict()``): ModernBERT's carries
    ``architecture: "modernbert"``, BERT's has no such key."""
    if values.get("architecture") == "modernbert":
        return ModernBertConfig.from_dict(values)
    return BertConfig.from_dict(values)


def model_config_from_preset(
    architecture: str, preset: str, *, vocab_size: int, special_token_ids: dict[str, int], overrides: dict
) -> ModelConfig:
    """The preset's config with the shards' vocab and the command line's overrides.

    BERT takes the overrides by their names (and refuses ModernBERT's dropout fields: ``ValueError``). ModernBERT
    takes the sizes by the same names, the dropout as ``modernbert_dropout`` maps it, the special ids ([CLS] =
    bos, [SEP] = eos) from the shards, and always ``sparse_prediction`` (the MLM head runs on the masked positions
    only).
    """
    pad = special_token_ids.get("[PAD]", 0)
    overrides = dict(overrides)
    if architecture == "bert":
        _refuse_modernbert_dropout(overrides)
        return BertConfig.from_preset(preset, vocab_size=vocab_size, pad_token_id=pad, **overrides)
    dropout = modernbert_dropout(overrides)  # (pops every dropout option)
    cls_id, sep_id = special_token_ids["[CLS]"], special_token_ids["[SEP]"]
    return ModernBertConfig.from_preset(
        preset,
        vocab_size=vocab_size,
        pad_token_id=pad,
        cls_token_id=cls_id,
        sep_token_id=sep_id,
        bos_token_id=cls_id,
        eos_token_id=sep_id,
        sparse_prediction=True,
        **dropout,
        **overrides,
    )


def modernbert_dropout(options: dict) -> dict:
    """The ModernBERT dropout fields that the dropout options ``options`` give (popped from it): BERT's names first
    (``hidden_dropout_prob`` as ``embedding_dropout`` and ``mlp_dropout``, ``attention_probs_dropout_prob`` as
    ``attention_dropout``), then ModernBERT's own names, which win. Options that are None are left out."""
    hidden = options.pop("hidden_dropout_prob", None)
    attention = options.pop("attention_probs_dropout_prob", None)
    fields = {"embedding_dropout": hidden, "mlp_dropout": hidden, "attention_dropout": attention}
    for name in MODERNBERT_DROPOUT:
        value = options.pop(name, None)
        fields[name] = value if value is not None else fields.get(name)
    return {k: v for k, v in fields.items() if v is not None}


def _refuse_modernbert_dropout(options: dict) -> None:
    """Raise ``ValueError`` when ``options`` set a ModernBERT dropout field for a BERT model (dropped if None)."""
    given = [name for name in MODERNBERT_DROPOUT if options.pop(name, None) is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} ModernBERT's dropout; a BERT model takes "
            "hidden_dropout_prob and attention_probs_dropout_prob"
        )


def with_dropout(model_config: ModelConfig, dropout: dict) -> ModelConfig:
    """``model_config`` with the dropout options of the command line (BERT's names, see
    ``model_config_from_preset`` for ModernBERT's)."""
    dropout = dict(dropout)
    if isinstance(model_config, ModernBertConfig):
        dropout = modernbert_dropout(dropout)
    else:
        _refuse_modernbert_dropout(dropout)
    return dataclasses.replace(model_config, **{k: v for k, v in dropout.items() if v is not None})


def build_model(model_config: ModelConfig) -> nn.Module:
    """``BertForPreTraining`` or ``ModernBertForMaskedLM`` (sparse prediction on), freshly initialised."""
    if isinstance(model_config, ModernBertConfig):
        from bertprep.bert_model.models.modernbert import ModernBertForMaskedLM

        if not model_config.sparse_prediction:
            model_config = dataclasses.replace(model_config, sparse_prediction=True)
        return ModernBertForMaskedLM(model_config)
    from bertprep.bert_model.models.bert import BertForPreTraining

    return BertForPreTraining(model_config)


def flops_per_token(model_config: ModelConfig, seq_length: int, masked_lm_fraction: float) -> float:
    """Training FLOPs per input token (for MFU) of either architecture."""
    if isinstance(model_config, ModernBertConfig):
        return modernbert_config.flops_per_token(model_config, seq_length, masked_lm_fraction)
    return bert_flops_per_token(model_config, seq_length, masked_lm_fraction)


def training_flops(
    model_config: ModelConfig, tokens: float, attention_pairs: float, masked_lm_fraction: float
) -> float:
    """Training FLOPs (for MFU) of either architecture on ``tokens`` real tokens whose documents have sum(l^2) =
    ``attention_pairs`` (``bert_config.flops``, ``modernbert_config.flops``)."""
    if isinstance(model_config, ModernBertConfig):
        return modernbert_config.flops(model_config, tokens, attention_pairs, masked_lm_fraction)
    return bert_flops(model_config, tokens, attention_pairs, masked_lm_fraction)


@dataclass
class PretrainingOutput:
    """What ``PretrainingModel`` returns, whatever the architecture and layout (``metrics.PretrainingMetrics``
    reads it)."""

    prediction_logits: torch.Tensor
    """float (B, P, V) or (1, M, V): MLM scores of the prediction slots (``masked_lm_positions``)."""
    mlm_labels: torch.Tensor
    """int64 (B, P) or (1, M): the original id of each slot, -100 for empty slots (``masked_lm_ids``)."""
    mlm_inputs: torch.Tensor
    """int64, the same shape: the input id at each slot ([MASK], a random id or the original)."""
    mlm_loss: torch.Tensor
    """Scalar mean cross-entropy over the slots whose label is not -100."""
    seq_relationship_logits: torch.Tensor | None = None
    """float (B, 2) or (D, 2): NSP / SOP scores (BERT); None for ModernBERT, which has no such head."""
    nsp_loss: torch.Tensor | None = None
    """Scalar NSP / SOP loss when the batch has ``next_sentence_label`` and the model an NSP head."""

    def training_loss(self, nsp_loss_weight: float) -> torch.Tensor:
        """``mlm_loss + nsp_loss_weight * nsp_loss``. Without a label (objective none) BERT's NSP head stays
        in the graph with a zero gradient (DDP needs every parameter used); ModernBERT has none."""
        if self.nsp_loss is not None:
            return self.mlm_loss + nsp_loss_weight * self.nsp_loss  # weight 0 keeps DDP's graph whole
        if self.seq_relationship_logits is not None:
            return self.mlm_loss + 0.0 * self.seq_relationship_logits.sum()
        return self.mlm_loss


class PretrainingModel(nn.Module):
    """``model(**batch)`` for the training loop, one path for every architecture and layout: the encoder
    (``model.base_model``) on the batch, as padded or packed as it comes; the MLM head
    (``model.masked_lm_logits``) on the hidden states at ``masked_lm_positions`` only; the sentence head
    (``model.sentence_logits``) on the pooled [CLS] of each instance, where the model has one (BERT's NSP /
    SOP; ModernBERT has none and ignores ``next_sentence_label``, so NSP / SOP shards serve it as they are).

    Holds the model as ``self.model``; checkpoint and optimise ``self.model``, not this wrapper.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        masked_lm_positions: torch.Tensor,
        masked_lm_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        **layout: torch.Tensor,
    ) -> PretrainingOutput:
        """Losses and scores of one batch (``collate.collate_numpy`` or ``collate.collate_packed_numpy``).

        Args:
            input_ids, attention_mask, token_type_ids: int64 (B, T).
            masked_lm_positions, masked_lm_ids: int64 (B, P), the prediction slots of each row; or (1, M) over the
                flattened rows (a packed batch, ``collate.collate_packed_numpy``).
            next_sentence_label: int64 (B,) padded, (D,) packed (one per instance, row-major); optional.
            layout: ``sequence_ids``, ``position_ids`` (B, T) of a packed batch, ``cu_seqlens`` and
                ``sequence_starts`` of either (see ``BertModel.forward``).
        """
        labels = (masked_lm_positions, masked_lm_ids, next_sentence_label)
        heads = pretraining_heads(self.model, input_ids, token_type_ids, attention_mask, *labels, **layout)
        inputs = gather_positions(input_ids, masked_lm_positions)  # (B, P) or (1, M)
        assert heads.mlm_loss is not None, "pretraining_heads computes the MLM loss whenever masked_lm_ids is given"
        return PretrainingOutput(
            heads.prediction_logits,
            masked_lm_ids,
            inputs,
            heads.mlm_loss,
            heads.seq_relationship_logits,
            heads.nsp_loss,
        )


__all__ = [
    "ARCHITECTURES",
    "PretrainingModel",
    "PretrainingOutput",
    "architecture_of",
    "build_model",
    "flops_per_token",
    "model_config_from_dict",
    "model_config_from_preset",
    "modernbert_dropout",
    "training_flops",
    "with_dropout",
]
