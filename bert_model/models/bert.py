"""A compact BERT (Devlin et al. 2019) for pre-training and fine-tuning, in one file.

Architecture as in the paper and google-research/bert ``modeling.py``: word + position + token-type
embeddings, a post-LayerNorm Transformer encoder with exact (erf) GELU, a tanh pooler on ``[CLS]``, a
masked-LM head (dense + GELU + LayerNorm, decoder tied to the word embeddings, output bias) and a
next-sentence head on the pooled output. Attention runs through
``torch.nn.functional.scaled_dot_product_attention`` with the padding mask.

Parameter names are exactly those of Hugging Face ``transformers.BertForPreTraining``, so a state dict maps
one to one in both directions (see ``TIED_WEIGHTS_KEYS`` for the two tied aliases). ``BertModel`` is the
bare encoder that fine-tuning heads reuse under the name ``bert``. The configuration (``BertConfig``, the size
presets, the FLOP count) is ``config.py``.

Shapes in comments: B batch, T sequence length, H hidden size, nh heads, hs head size (H // nh),
P masked positions per sequence, V vocab size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.bert_config import PRESETS, BertConfig, flops_per_token  # re-exported (__all__)

#: Label that the losses ignore (PyTorch's cross-entropy ``ignore_index``): padding entries of
#: ``masked_lm_ids`` and positions without a label. The one definition.
IGNORE_INDEX = -100

#: Keys of a ``BertForPreTraining`` state dict that alias another parameter (Hugging Face ties them the
#: same way): the MLM decoder weight is the word embedding matrix and the decoder bias is
#: ``cls.predictions.bias``. Both appear in ``state_dict()``; safetensors files omit them.
TIED_WEIGHTS_KEYS: dict[str, str] = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}


class BertEmbeddings(nn.Module):
    """Sum of word, position and token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.position_offset = config.position_offset  # RoBERTa: 2 (its positions start after padding_idx 1)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        seq_length = input_ids.size(1)
        position_ids = torch.arange(seq_length, device=input_ids.device) + self.position_offset  # (T,)
        x = (
            self.word_embeddings(input_ids)  # (B, T, H)
            + self.token_type_embeddings(token_type_ids)  # (B, T, H)
            + self.position_embeddings(position_ids)
        )  # (T, H), broadcast over B
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention (``query``/``key``/``value`` projections)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, hidden_states: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        B, T, H = hidden_states.shape
        nh, hs = self.num_attention_heads, self.head_size
        q = self.query(hidden_states).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = self.key(hidden_states).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = self.value(hidden_states).view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(  # (B, nh, T, hs)
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        return y.transpose(1, 2).reshape(B, T, H)  # (B, T, H)


class BertSelfOutput(nn.Module):
    """Attention output projection, dropout, residual add, LayerNorm (post-LN)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(hidden_states, attn_mask), hidden_states)


class BertIntermediate(nn.Module):
    """First feed-forward layer with exact GELU."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(hidden_states))  # (B, T, I)


class BertOutput(nn.Module):
    """Second feed-forward layer, dropout, residual add, LayerNorm (post-LN)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    """One Transformer encoder layer: attention block then feed-forward block, each post-LN."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        attention_output = self.attention(hidden_states, attn_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states, attn_mask)
        return hidden_states


class BertPooler(nn.Module):
    """tanh(dense(hidden state of [CLS])), the sentence representation for NSP and classification."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden_states[:, 0]))  # (B, H)


def _init_weights(module: nn.Module, initializer_range: float) -> None:
    """google-research/bert ``modeling.py``: weight matrices and embeddings from a normal(0, 0.02)
    truncated at two standard deviations (TF ``truncated_normal_initializer``), biases 0, LayerNorm 1/0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.trunc_normal_(
            module.weight, mean=0.0, std=initializer_range, a=-2 * initializer_range, b=2 * initializer_range
        )
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class BertModel(nn.Module):
    """The bare encoder: embeddings, L encoder layers and the pooler.

    Fine-tuning heads hold it as ``self.bert`` so their parameter names match Hugging Face
    (``bert.embeddings...``, ``bert.encoder.layer.N...``, ``bert.pooler.dense...``).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)
        self.apply(lambda m: _init_weights(m, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded batch.

        Args:
            input_ids: int64 (or int32) tensor of shape [batch_size, seq_length], WordPiece ids.
            token_type_ids: same shape, 0 for [CLS] + sentence A + first [SEP], 1 for sentence B and the last
                [SEP]; all zeros when omitted.
            attention_mask: same shape, 1 (or True) for real tokens, 0 for padding; no padding when omitted.
        Returns:
            ``(sequence_output, pooled_output)``: float tensors of shapes [batch_size, seq_length, hidden_size]
            and [batch_size, hidden_size] (tanh of a dense layer on [CLS]).
        Raises:
            ValueError: the sequence is longer than ``max_position_embeddings``.
        """
        if input_ids.size(1) > self.config.max_sequence_length:
            raise ValueError(
                f"sequence length {input_ids.size(1)} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
                + (f" less position_offset {self.config.position_offset}" if self.config.position_offset else "")
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        attn_mask = None
        if attention_mask is not None:
            attn_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): True = attend to that key
        hidden_states = self.embeddings(input_ids, token_type_ids)  # (B, T, H)
        sequence_output = self.encoder(hidden_states, attn_mask)  # (B, T, H)
        return sequence_output, self.pooler(sequence_output)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):
    """MLM head: transform, then the decoder whose weight is the word embedding matrix plus an output bias."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight  # tied (TIED_WEIGHTS_KEYS)
        self.decoder.bias = self.bias  # tied alias, as in Hugging Face

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))  # (..., V)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.predictions = BertLMPredictionHead(config, word_embeddings)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


@dataclass
class BertForPreTrainingOutput:
    """What ``BertForPreTraining.forward`` returns; losses are None when labels were not given."""

    prediction_logits: torch.Tensor
    """float [batch_size, num_positions, vocab_size]: MLM scores at ``masked_lm_positions`` (or every position)."""
    seq_relationship_logits: torch.Tensor
    """float [batch_size, 2]: NSP scores, index 1 = NotNext (B is a random segment)."""
    loss: torch.Tensor | None = None
    """Scalar ``mlm_loss + nsp_loss`` (the paper's objective)."""
    mlm_loss: torch.Tensor | None = None
    """Scalar mean cross-entropy over the real masked positions (labels != -100)."""
    nsp_loss: torch.Tensor | None = None
    """Scalar mean cross-entropy of the next-sentence prediction."""


class BertForPreTraining(nn.Module):
    """BERT with the masked-LM and next-sentence-prediction heads (paper section 3.1).

    The MLM head runs only on the gathered ``masked_lm_positions`` (as the original
    ``get_masked_lm_output``), not on every token, which saves the H x V decoder on ~85% of the tokens.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config, self.bert.embeddings.word_embeddings)
        # The decoder is not initialised: its weight is the word embedding matrix, its bias starts at 0.
        for module in (self.cls.predictions.transform, self.cls.seq_relationship):
            module.apply(lambda m: _init_weights(m, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
        masked_lm_ids: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
    ) -> BertForPreTrainingOutput:
        """Scores and (given labels) losses of the two pre-training tasks.

        Args:
            input_ids, token_type_ids, attention_mask: int tensors [batch_size, seq_length] (see ``BertModel``).
            masked_lm_positions: int64 [batch_size, num_positions], indices into the sequence of the tokens to
                predict (padding entries may point anywhere, e.g. 0, when their label is -100). When omitted,
                scores are computed for every position (num_positions = seq_length).
            masked_lm_ids: int64 [batch_size, num_positions], original ids at those positions, -100 = ignore.
            next_sentence_label: int64 [batch_size], 1 = NotNext, 0 = IsNext.
        Returns:
            ``BertForPreTrainingOutput``; ``loss`` is set only when both label tensors are given, the MLM and
            NSP losses each when their labels are given.
        """
        sequence_output, pooled_output = self.bert(input_ids, token_type_ids, attention_mask)
        if masked_lm_positions is not None:
            index = masked_lm_positions.long().unsqueeze(-1).expand(-1, -1, sequence_output.size(-1))  # (B, P, H)
            sequence_output = torch.gather(sequence_output, 1, index)  # (B, P, H)
        prediction_logits = self.cls.predictions(sequence_output)  # (B, P, V)
        seq_relationship_logits = self.cls.seq_relationship(pooled_output)  # (B, 2)
        out = BertForPreTrainingOutput(prediction_logits, seq_relationship_logits)
        if masked_lm_ids is not None:
            out.mlm_loss = F.cross_entropy(
                prediction_logits.reshape(-1, prediction_logits.size(-1)).float(),  # (B*P, V)
                masked_lm_ids.reshape(-1).long(),  # (B*P,)
                ignore_index=IGNORE_INDEX,
            )
        if next_sentence_label is not None:
            out.nsp_loss = F.cross_entropy(seq_relationship_logits.float(), next_sentence_label.reshape(-1).long())
        if out.mlm_loss is not None and out.nsp_loss is not None:
            out.loss = out.mlm_loss + out.nsp_loss
        return out

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (tied ones counted once); optionally without the embedding tables."""
        params = {id(p): p for p in self.parameters()}
        total = sum(p.numel() for p in params.values())
        if exclude_embeddings:
            emb = self.bert.embeddings
            total -= sum(
                e.weight.numel() for e in (emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings)
            )
        return total


def load_state_dict_strict(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a ``BertForPreTraining`` state dict with or without the tied alias keys (``TIED_WEIGHTS_KEYS``).

    Every other key must match exactly (names and shapes), as ``load_state_dict(strict=True)``; a tied alias
    present in ``state_dict`` must equal the tensor it aliases. Raises ``ValueError`` naming the keys (or the
    shapes) otherwise.
    """
    state_dict = dict(state_dict)
    for alias, target in TIED_WEIGHTS_KEYS.items():
        if alias in state_dict:
            if target in state_dict and not torch.equal(state_dict[alias], state_dict[target]):
                raise ValueError(f"{alias} should be tied to {target} but holds different values")
            state_dict.setdefault(target, state_dict[alias])
            del state_dict[alias]
    expected = set(model.state_dict()) - set(TIED_WEIGHTS_KEYS)
    missing, unexpected = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
    if missing or unexpected:
        raise ValueError(f"state dict does not match the model: missing {missing}, unexpected {unexpected}")
    own = model.state_dict()
    wrong = [
        f"{k}: model {tuple(own[k].shape)}, given {tuple(v.shape)}"
        for k, v in state_dict.items()
        if own[k].shape != v.shape
    ]
    if wrong:
        raise ValueError(f"state dict does not match the model's shapes: {'; '.join(wrong[:5])}")
    result = model.load_state_dict(state_dict, strict=False)
    assert set(result.missing_keys) <= set(TIED_WEIGHTS_KEYS) and not result.unexpected_keys, result


def trainable_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` without the tied aliases: what ``model.safetensors`` holds (as Hugging Face)."""
    return {k: v for k, v in model.state_dict().items() if k not in TIED_WEIGHTS_KEYS}


__all__ = [
    "PRESETS",
    "TIED_WEIGHTS_KEYS",
    "BertConfig",
    "BertModel",
    "BertForPreTraining",
    "BertForPreTrainingOutput",
    "flops_per_token",
    "load_state_dict_strict",
    "trainable_state_dict",
]
