"""A compact BERT (Devlin et al. 2019) for pre-training and fine-tuning, in one file.

Architecture as in the paper and google-research/bert ``modeling.py``: word + position + token-type
embeddings, a post-LayerNorm Transformer encoder with exact (erf) GELU, a tanh pooler on ``[CLS]``, a
masked-LM head (dense + GELU + LayerNorm, decoder tied to the word embeddings, output bias) and a
next-sentence head on the pooled output. Every layer attends through the batch's ``AttentionPlan``
(``attention.py``): the padding mask of a padded batch or the per-sequence mask of a packed one, with the kernel
``attn_implementation`` names (``sdpa`` by default; FlashAttention's varlen kernel on a GPU).

Parameter names are exactly those of Hugging Face ``transformers.BertForPreTraining``, so a state dict maps
one to one in both directions (see ``TIED_WEIGHTS_KEYS`` for the two tied aliases). ``BertModel`` is the
bare encoder that the task heads (``heads.py``) reuse under the name ``bert``. The configuration (``BertConfig``,
the size presets, the FLOP count) is ``bert_config.py``; state-dict helpers are ``weights.py``.

Shapes in comments: B batch, T sequence length, H hidden size, nh heads, hs head size (H // nh),
P masked positions per sequence, V vocab size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.attention import AttentionPlan
from bertprep.bert_model.models.bert_config import PRESETS, BertConfig, flops_per_token  # re-exported (__all__)
from bertprep.bert_model.models.outputs import (  # IGNORE_INDEX re-exported (__all__)
    IGNORE_INDEX,
    EncoderOutput,
    pretraining_heads,
)
from bertprep.bert_model.models.weights import (  # re-exported (__all__)
    count_parameters,
    load_state_dict_strict,
    register_row_layout,
    trainable_state_dict,
)

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
        # padded_vocab_size rows, the last ones padding (``pad_vocab_size_multiple``): never looked up, never saved.
        weight = torch.zeros(config.padded_vocab_size, config.hidden_size)
        nn.init.normal_(weight[: config.vocab_size])  # as nn.Embedding(vocab_size, ...): the same draws
        self.word_embeddings = nn.Embedding(config.padded_vocab_size, config.hidden_size, _weight=weight)
        self.word_embeddings.num_real_rows = config.vocab_size  # type: ignore[assignment]  # (_init_weights; torch types module attributes as Tensor | Module)
        if config.padded_vocab_size != config.vocab_size:
            register_row_layout(self.word_embeddings, {"weight": [("weight", 0, config.vocab_size)]})
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.position_offset = config.position_offset  # RoBERTa: 2 (its positions start after padding_idx 1)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        position_ids = position_ids + self.position_offset  # (B, T); RoBERTa's table starts at 2
        x = (
            self.word_embeddings(input_ids)  # (B, T, H)
            + self.token_type_embeddings(token_type_ids)  # (B, T, H)
            + self.position_embeddings(position_ids)  # (B, T, H)
        )
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention; the kernel and the mask come from the batch's ``AttentionPlan``
    (``attention.py``).

    The ``query``, ``key`` and ``value`` projections are one ``(3H, H)`` matrix and bias, ``qkv``, so that a layer
    makes one matrix multiply instead of three (as NVIDIA's and MosaicBERT's BERTs); the state dict still holds
    them as ``query.weight``, ``key.weight``, ``value.weight`` (+ biases), rows 0..H, H..2H, 2H..3H of ``qkv``
    (``weights.register_row_layout``), so checkpoints and Hugging Face weights load and save unchanged.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.head_size = config.head_size
        H = config.hidden_size
        self.qkv = nn.Linear(H, 3 * H)
        self.qkv.row_init_blocks = 3  # type: ignore[assignment]  # (_init_weights: three H x H matrices, as unfused)
        names = ("query", "key", "value")
        register_row_layout(
            self,
            {
                f"qkv.{p}": [(f"{name}.{p}", i * H, (i + 1) * H) for i, name in enumerate(names)]
                for p in ("weight", "bias")
            },
        )
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, hidden_states: torch.Tensor, plan: AttentionPlan) -> torch.Tensor:
        B, T, H = hidden_states.shape
        nh, hs = self.num_attention_heads, self.head_size
        qkv = self.qkv(hidden_states).view(B, T, 3, nh, hs)  # (B, T, 3, nh, hs)
        q, k, v = qkv.unbind(2)  # (B, T, nh, hs) each
        y = plan.attend(q, k, v, None, self.dropout_p if self.training else 0.0)  # (B, T, nh, hs)
        return y.reshape(B, T, H)  # (B, T, H)


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

    def forward(self, hidden_states: torch.Tensor, plan: AttentionPlan) -> torch.Tensor:
        return self.output(self.self(hidden_states, plan), hidden_states)


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

    def forward(self, hidden_states: torch.Tensor, plan: AttentionPlan) -> torch.Tensor:
        attention_output = self.attention(hidden_states, plan)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(
        self, hidden_states: torch.Tensor, plan: AttentionPlan, output_hidden_states: bool = False
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """The last layer's output (B, T, H) and, with ``output_hidden_states``, the input and every layer's
        output (L + 1 tensors, as ``transformers``)."""
        states = [hidden_states] if output_hidden_states else None
        for layer in self.layer:
            hidden_states = layer(hidden_states, plan)
            if states is not None:
                states.append(hidden_states)
        return hidden_states, None if states is None else tuple(states)


class BertPooler(nn.Module):
    """tanh(dense(hidden state of [CLS])), the sentence representation for NSP and classification."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, first_token_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(first_token_states))  # (B, H) or (D, H)


def _init_weights(module: nn.Module, initializer_range: float) -> None:
    """google-research/bert ``modeling.py``: weight matrices and embeddings from a normal(0, 0.02)
    truncated at two standard deviations (TF ``truncated_normal_initializer``), biases 0, LayerNorm 1/0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        # A padded word embedding draws its real rows only (padding rows 0); a fused projection draws its blocks
        # one by one: the same numbers, in the same order, as the unpadded, unfused model.
        rows = getattr(module, "num_real_rows", module.weight.size(0))
        blocks = module.weight[:rows].chunk(getattr(module, "row_init_blocks", 1))
        with torch.no_grad():
            module.weight[rows:].zero_()
        for block in blocks:
            nn.init.trunc_normal_(
                block, mean=0.0, std=initializer_range, a=-2 * initializer_range, b=2 * initializer_range
            )
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class BertModel(nn.Module):
    """The bare encoder: embeddings, L encoder layers and the pooler (none with ``add_pooling_layer=False``, as
    ``transformers``' question-answering and token-classification models).

    Heads hold it as ``self.bert`` so their parameter names match Hugging Face (``bert.embeddings...``,
    ``bert.encoder.layer.N...``, ``bert.pooler.dense...``). ``attn_implementation`` picks the attention kernel
    (``attention.py``; ``sdpa`` unless set).
    """

    base_model_prefix = "bert"

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.attn_implementation = "sdpa"
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(lambda m: _init_weights(m, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        sequence_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        sequence_starts: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> EncoderOutput:
        """Encode a padded or packed batch.

        Args:
            input_ids: int64 (or int32) tensor of shape [batch_size, seq_length], WordPiece ids.
            token_type_ids: same shape, 0 for [CLS] + sentence A + first [SEP], 1 for sentence B and the last
                [SEP]; all zeros when omitted.
            attention_mask: same shape, 1 (or True) for real tokens, 0 for padding; no padding when omitted.
            sequence_ids: same shape, a packed batch: the sequence (instance) number of each token within its
                row, -1 on padding (``packing.pack_documents``); a token attends only within its sequence.
            position_ids: same shape, positions; 0..T-1 by default, restarting at 0 at each sequence when packed.
            cu_seqlens: int32 [num_segments + 1], the varlen kernels' segments (``packing``), when the loader
                computed them; derived otherwise.
            sequence_starts: int64 [num_sequences], flat index (row * seq_length + column) of each sequence's
                [CLS], for the pooler of a packed batch; derived when omitted (one host sync).
            output_hidden_states: also return the embedding output and every layer's output.
        Returns:
            ``EncoderOutput``: ``last_hidden_state`` float [batch_size, seq_length, hidden_size];
            ``pooler_output`` float [batch_size, hidden_size] (tanh of a dense layer on [CLS]), or [num_sequences,
            hidden_size] for a packed batch, None without a pooler; ``hidden_states`` (L + 1 tensors) if asked.
        Raises:
            ValueError: the sequence is longer than ``max_position_embeddings``.
        """
        if input_ids.size(1) > self.config.max_sequence_length:
            raise ValueError(
                f"sequence length {input_ids.size(1)} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
                + (f" less position_offset {self.config.position_offset}" if self.config.position_offset else "")
            )
        plan = AttentionPlan.build(self.attn_implementation, input_ids, attention_mask, sequence_ids, cu_seqlens)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = plan.position_ids()  # (B, T)
        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids)  # (B, T, H)
        sequence_output, all_states = self.encoder(hidden_states, plan, output_hidden_states)  # (B, T, H)
        pooled_output = None
        if self.pooler is not None:
            pooled_output = self.pooler(first_token_states(sequence_output, plan, sequence_starts))  # (B or D, H)
        return EncoderOutput(sequence_output, pooled_output, all_states)


def first_token_states(
    hidden_states: torch.Tensor, plan: AttentionPlan, sequence_starts: torch.Tensor | None = None
) -> torch.Tensor:
    """The hidden state of each sequence's first token ([CLS]): (B, H) of a padded batch, (D, H) of a packed
    one (at ``sequence_starts``, flat indices, or where each sequence starts)."""
    if sequence_starts is None and not plan.packed:
        return hidden_states[:, 0]  # (B, H)
    if sequence_starts is None:
        sequence_starts = plan.sequence_starts()
    return hidden_states.reshape(-1, hidden_states.size(-1)).index_select(0, sequence_starts)  # (D, H)


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
        self.vocab_size = config.vocab_size
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)  # (its own draws, replaced:)
        self.decoder.weight = word_embeddings.weight  # tied (TIED_WEIGHTS_KEYS), padded_vocab_size rows
        self.decoder.out_features = config.padded_vocab_size
        self.decoder.bias = self.bias  # tied alias, as in Hugging Face
        if config.padded_vocab_size != config.vocab_size:  # the padding rows (pad_vocab_size_multiple) unsaved
            real = [("bias", 0, config.vocab_size)]
            register_row_layout(self, {"bias": real})
            register_row_layout(self.decoder, {"weight": [("weight", 0, config.vocab_size)], "bias": real})

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Scores (..., V) of hidden states (..., H): the decoder over the padded rows, cut back to the
        ``vocab_size`` real ids (a padding id is never predicted)."""
        logits = self.decoder(self.transform(hidden_states))  # (..., V padded)
        return logits if logits.size(-1) == self.vocab_size else logits[..., : self.vocab_size]  # (..., V)


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
    """float [batch_size, 2] (packed: [num_sequences, 2]): NSP scores, index 1 = NotNext (B is random)."""
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
    ``base_model`` / ``masked_lm_logits`` / ``sentence_logits`` are the parts that ``outputs.pretraining_heads``
    (the pre-training forward pass and losses, written once) composes, for this ``forward`` and for the training
    loop's ``pretrain.architectures.PretrainingModel`` alike, the same for every encoder.
    """

    tied_weights_keys = TIED_WEIGHTS_KEYS

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config, self.bert.embeddings.word_embeddings)
        # The decoder is not initialised: its weight is the word embedding matrix, its bias starts at 0.
        for module in (self.cls.predictions.transform, self.cls.seq_relationship):
            module.apply(lambda m: _init_weights(m, config.initializer_range))

    @property
    def base_model(self) -> BertModel:
        return self.bert

    def masked_lm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """MLM scores (..., V) of hidden states (..., H)."""
        return self.cls.predictions(hidden_states)

    def sentence_logits(self, pooled_output: torch.Tensor | None) -> torch.Tensor | None:
        """NSP / SOP scores (N, 2) of pooled [CLS] states (N, H)."""
        return None if pooled_output is None else self.cls.seq_relationship(pooled_output)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
        masked_lm_ids: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        **layout: torch.Tensor | None,
    ) -> BertForPreTrainingOutput:
        """Scores and (given labels) losses of the two pre-training tasks.

        Args:
            input_ids, token_type_ids, attention_mask: int tensors [batch_size, seq_length] (see ``BertModel``).
            masked_lm_positions: int64 [batch_size, num_positions], indices into each row of the tokens to
                predict (padding entries may point anywhere, e.g. 0, when their label is -100); or [1,
                num_positions] into the rows seen as one stream (a packed batch's). When omitted, scores are
                computed for every position (num_positions = seq_length).
            masked_lm_ids: int64 [batch_size, num_positions], original ids at those positions, -100 = ignore.
            next_sentence_label: int64 [batch_size] (packed: [num_sequences]), 1 = NotNext, 0 = IsNext.
            layout: ``sequence_ids``, ``position_ids``, ``cu_seqlens``, ``sequence_starts`` of a packed batch
                (see ``BertModel.forward``).
        Returns:
            ``BertForPreTrainingOutput``; ``loss`` is set only when both label tensors are given, the MLM and
            NSP losses each when their labels are given.
        """
        heads = pretraining_heads(
            self,
            input_ids,
            token_type_ids,
            attention_mask,
            masked_lm_positions,
            masked_lm_ids,
            next_sentence_label,
            **layout,
        )
        assert heads.seq_relationship_logits is not None  # BERT always has its sentence head
        out = BertForPreTrainingOutput(
            heads.prediction_logits, heads.seq_relationship_logits, mlm_loss=heads.mlm_loss, nsp_loss=heads.nsp_loss
        )
        if out.mlm_loss is not None and out.nsp_loss is not None:
            out.loss = out.mlm_loss + out.nsp_loss
        return out

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (tied ones counted once); optionally without the embedding tables."""
        emb = self.bert.embeddings
        tables = (emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings)
        return count_parameters(self, tables if exclude_embeddings else ())


__all__ = [
    "IGNORE_INDEX",
    "PRESETS",
    "TIED_WEIGHTS_KEYS",
    "BertConfig",
    "BertForPreTraining",
    "BertForPreTrainingOutput",
    "BertModel",
    "first_token_states",
    "flops_per_token",
    "load_state_dict_strict",
    "trainable_state_dict",
]
