"""ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer") for masked-LM pre-training, in one file.

Entry points for the trainer::

    from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertForMaskedLM
    config = ModernBertConfig.from_preset("tiny", vocab_size=V, pad_token_id=PAD, cls_token_id=CLS,
                                          sep_token_id=SEP, bos_token_id=CLS, eos_token_id=SEP,
                                          sparse_prediction=True)
    model = ModernBertForMaskedLM(config)
    out = model(input_ids, attention_mask=mask, labels=labels)                    # padded (B, T) batch
    out = model(input_ids, sequence_ids=seq_ids, position_ids=pos, labels=labels)  # packed (B, T) batch
    out = model(flat_ids, cu_seqlens=cu_seqlens, labels=flat_labels)               # unpadded (N,) tokens
    out.loss.backward()   # scalar mean cross-entropy over the labels != -100 (padding never counts)

``labels`` has the shape of ``input_ids``: the original id at the masked positions, -100 elsewhere (no NSP:
ModernBERT is trained on MLM alone). With ``config.sparse_prediction`` the head runs only on the labelled
positions and ``out.logits`` is (M, V); otherwise it is (B, T, V). ``packing`` builds the packed and unpadded
inputs (``pack_documents``, ``unpad``). Weights: ``trainable_state_dict(model)`` is what ``model.safetensors``
holds; ``load_state_dict_strict`` reads it back with or without the tied decoder weight (``weights.py``);
``config.to_hf_dict()`` is the ``config.json``. The fine-tuning heads (``ModernBertForSequenceClassification``
and the three others, with ``transformers``' names and behaviour) are ``heads.py``'s, written once for BERT and
ModernBERT.

Architecture, as Hugging Face ``transformers`` ``models/modernbert/modeling_modernbert.py``: token embeddings
then LayerNorm (no position table); pre-LN layers (the first layer's ``attn_norm`` is the identity, since the
embeddings were just normalised) with rotary position embeddings (RoPE), a fused ``Wqkv`` projection and a
GeGLU feed-forward (``Wi`` -> input, gate; ``Wo(gelu(input) * gate)``); every ``global_attn_every_n_layers``-th
layer (0, 3, 6, ...) attends globally with RoPE base ``global_rope_theta``, the others within a sliding
window of ``local_attention`` tokens (half on each side) with base ``local_rope_theta``; a final LayerNorm; the
MLM head is dense + GELU + LayerNorm, then the decoder tied to the token embeddings, with a bias. No biases in
the linear and norm layers by default (``attention_bias``, ``mlp_bias``, ``norm_bias``, ``classifier_bias``).

Parameter names are exactly those of ``transformers.ModernBertForMaskedLM``, so a state dict maps one to one
in both directions (``TIED_WEIGHTS_KEYS`` names the tied alias). Every layer attends through the batch's
``AttentionPlan`` (``attention.py``), global layers over the whole sequence and local ones within the window:
``sdpa`` with a boolean mask by default (the full T x T work), FlashAttention's varlen kernel with its window
on a GPU (masked blocks skipped).

Shapes in comments: B batch, T sequence length, N unpadded tokens, H hidden size, nh heads, hs head size
(H // nh), I intermediate size, M labelled positions, V vocab size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.attention import AttentionPlan
from bertprep.bert_model.models.modernbert_config import (  # re-exported (__all__)
    MASKED_LM_ARCHITECTURE,
    PRESETS,
    ModernBertConfig,
    flops_per_token,
)
from bertprep.bert_model.models.outputs import IGNORE_INDEX, EncoderOutput
from bertprep.bert_model.models.packing import position_ids_from_cu_seqlens, sequence_ids_from_cu_seqlens
from bertprep.bert_model.models.weights import (  # re-exported (__all__)
    count_parameters,
    load_state_dict_strict,
    trainable_state_dict,
)

#: Keys of a ``ModernBertForMaskedLM`` state dict that alias another parameter (Hugging Face ties them the
#: same way). Both appear in ``state_dict()``; safetensors files omit the alias.
TIED_WEIGHTS_KEYS: dict[str, str] = {"decoder.weight": "model.embeddings.tok_embeddings.weight"}

GLOBAL, LOCAL = "full_attention", "sliding_attention"


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, LayerNorm and dropout (no position or token-type table: positions come from RoPE)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = nn.Dropout(config.embedding_dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))  # (B, T, H)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021) in the "rotate half" layout of GPT-NeoX and transformers.

    Holds no parameters or buffers: the inverse frequencies are recomputed in float32 at each call (a few
    hundred numbers), so casting the model to bfloat16 cannot degrade them.
    """

    def __init__(self, head_size: int, theta: float):
        super().__init__()
        self.head_size, self.theta = head_size, theta

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables for ``position_ids`` (B, T): each (B, T, hs), in ``dtype``."""
        exponent = torch.arange(0, self.head_size, 2, dtype=torch.float, device=position_ids.device) / self.head_size
        inv_freq = 1.0 / (self.theta**exponent)  # (hs/2,)
        freqs = position_ids[..., None].float() * inv_freq  # (B, T, hs/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, hs)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # (..., hs/2) each
    return torch.cat((-x2, x1), dim=-1)  # (..., hs)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, T, nh, hs) by the angles of ``cos``/``sin`` (B, T, hs), in float32, back to x's dtype."""
    cos, sin = cos[:, :, None], sin[:, :, None]  # (B, T, 1, hs)
    xf = x.float()
    return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)  # (B, T, nh, hs)


class ModernBertAttention(nn.Module):
    """Multi-head attention with a fused ``Wqkv`` projection and RoPE on queries and keys; global, or local
    within a sliding window of ``local_attention`` tokens (``window``)."""

    def __init__(self, config: ModernBertConfig, window: int | None = None):
        super().__init__()
        self.num_attention_heads, self.head_size = config.num_attention_heads, config.head_size
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        out_dropout = config.attention_output_dropout
        self.out_drop = nn.Dropout(config.attention_dropout if out_dropout is None else out_dropout)
        self.dropout_p = config.attention_dropout
        self.window = window

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: AttentionPlan):
        B, T, H = hidden_states.shape
        nh, hs = self.num_attention_heads, self.head_size
        qkv = self.Wqkv(hidden_states).view(B, T, 3, nh, hs)  # (B, T, 3, nh, hs)
        q, k, v = qkv.unbind(dim=2)  # (B, T, nh, hs) each
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # (B, T, nh, hs)
        y = plan.attend(q, k, v, self.window, self.dropout_p if self.training else 0.0)  # (B, T, nh, hs)
        return self.out_drop(self.Wo(y.reshape(B, T, H)))  # (B, T, H)


class ModernBertMLP(nn.Module):
    """GeGLU feed-forward: ``Wo(dropout(gelu(input) * gate))`` with ``input, gate = Wi(x).chunk(2)``."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input, gate = self.Wi(hidden_states).chunk(2, dim=-1)  # (B, T, I) each
        return self.Wo(self.drop(F.gelu(input) * gate))  # (B, T, H)


class ModernBertEncoderLayer(nn.Module):
    """Pre-LN layer: ``x + attn(attn_norm(x))`` then ``x + mlp(mlp_norm(x))``; global or local attention."""

    def __init__(self, config: ModernBertConfig, layer_idx: int):
        super().__init__()
        # Layer 0 reads the embedding output, already normalised: no second LayerNorm (as transformers).
        self.attn_norm = (
            nn.Identity()
            if layer_idx == 0
            else nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        )
        self.attention_type = config.layer_types[layer_idx]
        self.attn = ModernBertAttention(config, config.local_attention if self.attention_type == LOCAL else None)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: AttentionPlan):
        hidden_states = hidden_states + self.attn(self.attn_norm(hidden_states), cos, sin, plan)
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))  # (B, T, H)


def _init_weights(module: nn.Module, config: ModernBertConfig) -> None:
    """ModernBERT's initialisation (transformers ``ModernBertPreTrainedModel._init_weights``): truncated normals
    cut at ``initializer_cutoff_factor`` sigma; std ``initializer_range`` for the input projections (``Wqkv``,
    ``Wi``) and the token embeddings, ``initializer_range / sqrt(2 L)`` for the output projections (both
    ``Wo``) and the head's ``dense``; biases 0, LayerNorm weights 1."""

    def init(linear: nn.Linear | nn.Embedding, std: float) -> None:
        c = config.initializer_cutoff_factor
        nn.init.trunc_normal_(linear.weight, mean=0.0, std=std, a=-c * std, b=c * std)
        if isinstance(linear, nn.Linear) and linear.bias is not None:
            nn.init.zeros_(linear.bias)

    std_in = config.initializer_range
    std_out = config.initializer_range / math.sqrt(2.0 * config.num_hidden_layers)
    if isinstance(module, ModernBertEmbeddings):
        init(module.tok_embeddings, std_in)
    elif isinstance(module, ModernBertAttention):
        init(module.Wqkv, std_in)
        init(module.Wo, std_out)
    elif isinstance(module, ModernBertMLP):
        init(module.Wi, std_in)
        init(module.Wo, std_out)
    elif isinstance(module, ModernBertPredictionHead):
        init(module.dense, std_out)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def _unpadded_as_one_row(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    sequence_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The unpadded layout (int ``input_ids`` (N,) with int32 ``cu_seqlens`` (S + 1,)) as one packed row:
    ``(input_ids, sequence_ids, position_ids)``, int (1, N) each; the positions restart at 0 at each document
    unless given ((N,) or (1, N)).

    Raises:
        ValueError: no ``cu_seqlens``, or an ``attention_mask`` / ``sequence_ids`` given with them.
    """
    if cu_seqlens is None:
        raise ValueError("1-D input_ids (the unpadded layout) need cu_seqlens")
    if attention_mask is not None or sequence_ids is not None:
        raise ValueError("the unpadded layout takes cu_seqlens, not attention_mask or sequence_ids")
    sequence_ids = sequence_ids_from_cu_seqlens(cu_seqlens)[None]  # (1, N)
    if position_ids is None:
        position_ids = position_ids_from_cu_seqlens(cu_seqlens)
    return input_ids[None], sequence_ids, position_ids.reshape(1, -1)  # (1, N) each


class ModernBertModel(nn.Module):
    """The bare encoder: embeddings, L layers, final LayerNorm. Heads hold it as ``self.model`` (HF's name).
    ``attn_implementation`` picks the attention kernel (``attention.py``; ``sdpa`` unless set)."""

    base_model_prefix = "model"

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config
        self.attn_implementation = "sdpa"
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.rotary = nn.ModuleDict(
            {
                GLOBAL: RotaryEmbedding(config.head_size, config.global_rope_theta),
                LOCAL: RotaryEmbedding(config.head_size, config.local_rope_theta),
            }
        )
        self.apply(lambda m: _init_weights(m, config))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        sequence_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        *,
        token_type_ids: torch.Tensor | None = None,
        sequence_starts: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> EncoderOutput:
        """Encode a padded, packed or unpadded batch.

        Args:
            input_ids: int (B, T); or int (N,) together with ``cu_seqlens`` (the unpadded layout).
            attention_mask: (B, T), 1 / True for real tokens, 0 for padding; all real when omitted.
            sequence_ids: int (B, T), packed batch: the document number of each token within its row, -1 on
                padding (``packing.pack_documents``). Tokens attend only within their document.
            position_ids: int (B, T) (or (N,)), the RoPE positions; by default 0..T-1 for a padded batch and
                restarting at 0 at each document for a packed or unpadded one.
            cu_seqlens: int32 (S + 1,): with 1-D ``input_ids``, document d is ``input_ids[cu[d]:cu[d+1]]``; with
                (B, T) ``input_ids``, the varlen segments of the flattened rows (``packing``), when the loader
                computed them.
            token_type_ids, sequence_starts: accepted and unused (no segment embeddings, no pooler), so that
                the batches of BERT serve ModernBERT as they are.
            output_hidden_states: also return the embedding output and every layer's output.
        Returns:
            ``EncoderOutput``: ``last_hidden_state`` float (B, T, H), or (N, H) in the unpadded layout (the
            final-LayerNorm hidden states; those of padding positions are meaningless); no pooler output;
            ``hidden_states`` as ``transformers`` (before the final LayerNorm) when asked.
        Raises:
            ValueError: a sequence longer than ``max_position_embeddings``, or inconsistent arguments.
        """
        unpadded = input_ids.dim() == 1
        if unpadded:
            input_ids, sequence_ids, position_ids = _unpadded_as_one_row(
                input_ids, attention_mask, sequence_ids, position_ids, cu_seqlens
            )
        elif input_ids.size(1) > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {input_ids.size(1)} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        plan = AttentionPlan.build(self.attn_implementation, input_ids, attention_mask, sequence_ids, cu_seqlens)
        if position_ids is None:
            position_ids = plan.position_ids()  # (B, T)
        hidden_states = self.embeddings(input_ids)  # (B, T, H)
        hidden_states, states = self._layers(hidden_states, position_ids, plan, output_hidden_states)
        last = hidden_states[0] if unpadded else hidden_states  # (N, H) or (B, T, H)
        return EncoderOutput(last, None, None if states is None else tuple(states))

    def _layers(
        self, hidden_states: torch.Tensor, position_ids: torch.Tensor, plan: AttentionPlan, output_hidden_states: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Every layer, then the final LayerNorm, over the embedding output float (B, T, H), each layer with the
        rotary tables of its attention kind at int ``position_ids`` (B, T). Returns the normalised float
        (B, T, H) and, when ``output_hidden_states``, the embedding output and every layer's output (before
        the final LayerNorm, as ``transformers``), else None."""
        kinds = dict.fromkeys(self.config.layer_types)  # (global, local: each table once)
        rope = {kind: self.rotary[kind](position_ids, hidden_states.dtype) for kind in kinds}
        states = [hidden_states] if output_hidden_states else None
        for layer in self.layers:
            cos, sin = rope[str(layer.attention_type)]  # (B, T, hs) each
            hidden_states = layer(hidden_states, cos, sin, plan)
            if states is not None:
                states.append(hidden_states)
        return self.final_norm(hidden_states), states  # (B, T, H)

    def sentence_representation(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None):
        """One vector per sequence as ``config.classifier_pooling`` says: (B, T, H) -> (B, H). ``cls``: the
        first real token (the first token of a right-padded row); ``mean``: the mean over the real tokens (all
        of them without a mask). As ``transformers``' ModernBERT classification and multiple-choice heads."""
        if self.config.classifier_pooling == "cls":
            if attention_mask is None:
                return hidden_states[:, 0]  # (B, H)
            first = attention_mask.long().argmax(dim=-1)  # (B,) the first real token, left or right padding
            return hidden_states[torch.arange(hidden_states.size(0), device=hidden_states.device), first]
        if attention_mask is None:
            return hidden_states.mean(dim=1)  # (B, H)
        mask = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # (B, T, 1)
        return (hidden_states * mask).sum(dim=1) / mask.sum(dim=1)  # (B, H)


class ModernBertPredictionHead(nn.Module):
    """dense + GELU + LayerNorm before the decoder (``head`` in transformers); the task heads put the encoder
    output through it too."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(hidden_states)))  # (..., H)


@dataclass
class ModernBertMaskedLMOutput:
    """What ``ModernBertForMaskedLM.forward`` returns."""

    logits: torch.Tensor
    """float (B, T, V) (or (N, V) unpadded); (M, V) at the labelled positions only, in order, with sparse
    prediction and labels."""
    loss: torch.Tensor | None = None
    """Scalar mean cross-entropy over the positions whose label is not -100, when labels are given."""


class ModernBertForMaskedLM(nn.Module):
    """ModernBERT with the masked-LM head (``transformers.ModernBertForMaskedLM``). ``base_model`` /
    ``masked_lm_logits`` / ``sentence_logits`` are the parts the pre-training loop composes, as for BERT."""

    architecture = MASKED_LM_ARCHITECTURE
    tied_weights_keys = TIED_WEIGHTS_KEYS

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.decoder.weight = self.model.embeddings.tok_embeddings.weight  # tied (TIED_WEIGHTS_KEYS)
        self.head.apply(lambda m: _init_weights(m, config))
        if self.decoder.bias is not None:
            nn.init.zeros_(self.decoder.bias)

    @property
    def base_model(self) -> ModernBertModel:
        return self.model

    def masked_lm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """MLM scores (..., V) of final hidden states (..., H)."""
        return self.decoder(self.head(hidden_states))

    def sentence_logits(self, pooled_output: torch.Tensor | None) -> None:
        """ModernBERT has no sentence-pair head (MLM alone)."""
        return None

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        sequence_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> ModernBertMaskedLMOutput:
        """MLM scores and (given labels) the loss; implements ``transformers.ModernBertForMaskedLM.forward``.

        Args:
            input_ids, attention_mask, sequence_ids, position_ids, cu_seqlens: see ``ModernBertModel.forward``
                (padded (B, T), packed (B, T) or unpadded (N,) layouts).
            labels: int64 of ``input_ids``' shape: the original id at the masked positions, -100 elsewhere.
                Padding positions (attention_mask 0 / sequence_ids -1) never count, whatever their label.
        Returns:
            ``ModernBertMaskedLMOutput``: logits float (B, T, V) / (N, V), or (M, V) at the M labelled
            positions when ``config.sparse_prediction`` and labels are given (the head and the decoder then run
            on those positions only); ``loss`` when labels are given.
        """
        hidden_states = self.model(input_ids, attention_mask, sequence_ids, position_ids, cu_seqlens).last_hidden_state
        if labels is None:
            return ModernBertMaskedLMOutput(self.masked_lm_logits(hidden_states))  # (B, T, V)
        labels = labels.long()
        if input_ids.dim() == 2:
            if attention_mask is not None:
                labels = labels.masked_fill(~attention_mask.bool(), IGNORE_INDEX)
            if sequence_ids is not None:
                labels = labels.masked_fill(sequence_ids < 0, IGNORE_INDEX)
        if self.config.sparse_prediction:
            labels = labels.reshape(-1)  # (B*T,)
            keep = labels != self.config.sparse_pred_ignore_index  # (B*T,)
            hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))[keep]  # (M, H)
            labels = labels[keep]  # (M,)
        logits = self.masked_lm_logits(hidden_states)  # (M, V) or (B, T, V)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), ignore_index=IGNORE_INDEX
        )
        return ModernBertMaskedLMOutput(logits, loss)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (tied ones counted once); optionally without the token embeddings."""
        return count_parameters(self, [self.model.embeddings.tok_embeddings] if exclude_embeddings else [])


__all__ = [
    "IGNORE_INDEX",
    "MASKED_LM_ARCHITECTURE",
    "PRESETS",
    "TIED_WEIGHTS_KEYS",
    "ModernBertConfig",
    "ModernBertForMaskedLM",
    "ModernBertMaskedLMOutput",
    "ModernBertModel",
    "ModernBertPredictionHead",
    "flops_per_token",
    "load_state_dict_strict",
    "trainable_state_dict",
]
