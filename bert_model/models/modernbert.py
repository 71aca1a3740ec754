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
positions and ``out.logits`` is (M, V); otherwise it is (B, T, V). ``bertprep.bert_model.models.packing`` builds the
packed and unpadded inputs (``pack_documents``, ``unpad``). Weights: ``trainable_state_dict(model)`` is what
``model.safetensors`` holds; ``load_state_dict_strict`` reads it back with or without the tied decoder weight;
``config.to_hf_dict()`` is the ``config.json``.

Fine-tuning heads, with the names and behaviour of the ``transformers`` classes of the same names (all four
put the final hidden states through ``head`` (dense + GELU + LayerNorm), dropout and a linear ``classifier``):
``ModernBertForSequenceClassification`` (GLUE), ``ModernBertForQuestionAnswering`` (SQuAD),
``ModernBertForTokenClassification`` (NER) and ``ModernBertForMultipleChoice`` (SWAG); they take BERT's
fine-tuning batches (``token_type_ids`` accepted and ignored) and return ``outputs.py``'s classes.

Architecture, as Hugging Face ``transformers`` ``models/modernbert/modeling_modernbert.py``: token embeddings
then LayerNorm (no position table); pre-LN layers (the first layer's ``attn_norm`` is the identity, since the
embeddings were just normalised) with rotary position embeddings (RoPE), a fused ``Wqkv`` projection and a
GeGLU feed-forward (``Wi`` -> input, gate; ``Wo(gelu(input) * gate)``); every ``global_attn_every_n_layers``-th
layer (0, 3, 6, ...) attends globally with RoPE base ``global_rope_theta``, the others within a sliding
window of ``local_attention`` tokens (half on each side) with base ``local_rope_theta``; a final LayerNorm; the
MLM head is dense + GELU + LayerNorm, then the decoder tied to the token embeddings, with a bias. No biases in
the linear and norm layers by default (``attention_bias``, ``mlp_bias``, ``norm_bias``, ``classifier_bias``).

Parameter names are exactly those of ``transformers.ModernBertForMaskedLM``, so a state dict maps one to one
in both directions (``TIED_WEIGHTS_KEYS`` names the tied alias). Attention runs through
``torch.nn.functional.scaled_dot_product_attention`` with a boolean mask: the padding mask, or the
block-diagonal mask of a packed batch, intersected with the sliding-window band in local layers. That is the
exact path on every device; it does the full T x T work in local layers (a windowed or varlen kernel such as
FlashAttention would skip the masked blocks).

Shapes in comments: B batch, T sequence length, N unpadded tokens, H hidden size, nh heads, hs head size
(H // nh), I intermediate size, M labelled positions, V vocab size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.modernbert_config import (  # re-exported (__all__)
    MASKED_LM_ARCHITECTURE,
    PRESETS,
    ModernBertConfig,
    flops_per_token,
)
from bertprep.bert_model.models.outputs import (
    MultipleChoiceModelOutput,
    QuestionAnsweringOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
    question_answering_loss,
    sequence_classification_loss,
    token_classification_loss,
)
from bertprep.bert_model.models.packing import (
    PADDING_SEQUENCE_ID,
    block_diagonal_mask,
    position_ids_from_cu_seqlens,
    position_ids_from_sequence_ids,
    sequence_ids_from_cu_seqlens,
    sliding_window_band,
)

#: Label that the loss ignores (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX = -100

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
    """Rotate ``x`` (B, nh, T, hs) by the angles of ``cos``/``sin`` (B, T, hs), in float32, back to x's dtype."""
    cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, hs)
    xf = x.float()
    return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)  # (B, nh, T, hs)


class ModernBertAttention(nn.Module):
    """Multi-head attention with a fused ``Wqkv`` projection and RoPE on queries and keys."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.num_attention_heads, self.head_size = config.num_attention_heads, config.head_size
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.out_drop = nn.Dropout(config.attention_dropout)
        self.dropout_p = config.attention_dropout

    def forward(
        self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn_mask: torch.Tensor | None
    ) -> torch.Tensor:
        B, T, H = hidden_states.shape
        nh, hs = self.num_attention_heads, self.head_size
        qkv = self.Wqkv(hidden_states).view(B, T, 3, nh, hs)  # (B, T, 3, nh, hs)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=2))  # (B, nh, T, hs) each
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(  # (B, nh, T, hs)
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        return self.out_drop(self.Wo(y))


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
        self.attn = ModernBertAttention(config)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)
        self.attention_type = config.layer_types[layer_idx]

    def forward(
        self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn_mask: torch.Tensor | None
    ) -> torch.Tensor:
        hidden_states = hidden_states + self.attn(self.attn_norm(hidden_states), cos, sin, attn_mask)
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))  # (B, T, H)


def _init_weights(module: nn.Module, config: ModernBertConfig) -> None:
    """ModernBERT's initialisation (transformers ``ModernBertPreTrainedModel._init_weights``): truncated normals
    cut at ``initializer_cutoff_factor`` sigma; std ``initializer_range`` for the input projections (``Wqkv``,
    ``Wi``) and the token embeddings, ``initializer_range / sqrt(2 L)`` for the output projections (both
    ``Wo``) and the head's ``dense``; biases 0, LayerNorm weights 1."""

    def init(linear: nn.Module, std: float) -> None:
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


class ModernBertModel(nn.Module):
    """The bare encoder: embeddings, L layers, final LayerNorm. Heads hold it as ``self.model`` (HF's name)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config
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
    ) -> torch.Tensor:
        """Encode a padded, packed or unpadded batch.

        Args:
            input_ids: int (B, T); or int (N,) together with ``cu_seqlens`` (the unpadded layout).
            attention_mask: (B, T), 1 / True for real tokens, 0 for padding; all real when omitted.
            sequence_ids: int (B, T), packed batch: the document number of each token within its row, -1 on
                padding (``packing.pack_documents``). Tokens attend only within their document.
            position_ids: int (B, T) (or (N,)), the RoPE positions; by default 0..T-1 for a padded batch and
                restarting at 0 at each document for a packed or unpadded one.
            cu_seqlens: int (D + 1,), unpadded layout only: document d is ``input_ids[cu[d]:cu[d+1]]``.
        Returns:
            float (B, T, H), or (N, H) in the unpadded layout: the final-LayerNorm hidden states (those of
            padding positions are meaningless).
        Raises:
            ValueError: a padded sequence longer than ``max_position_embeddings``, or inconsistent arguments.
        """
        unpadded = input_ids.dim() == 1
        if unpadded:
            if cu_seqlens is None:
                raise ValueError("1-D input_ids (the unpadded layout) need cu_seqlens")
            if attention_mask is not None or sequence_ids is not None:
                raise ValueError("the unpadded layout takes cu_seqlens, not attention_mask or sequence_ids")
            sequence_ids = sequence_ids_from_cu_seqlens(cu_seqlens)[None]  # (1, N)
            if position_ids is None:
                position_ids = position_ids_from_cu_seqlens(cu_seqlens)
            input_ids, position_ids = input_ids[None], position_ids.reshape(1, -1)  # (1, N)
        elif cu_seqlens is not None:
            raise ValueError("cu_seqlens goes with 1-D (unpadded) input_ids")
        elif input_ids.size(1) > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {input_ids.size(1)} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        B, T = input_ids.shape
        if sequence_ids is not None and position_ids is None:
            position_ids = position_ids_from_sequence_ids(sequence_ids)  # (B, T)
        if attention_mask is not None:
            real = attention_mask.bool()
            sequence_ids = (
                torch.where(real, 0, PADDING_SEQUENCE_ID)
                if sequence_ids is None
                else sequence_ids.masked_fill(~real, PADDING_SEQUENCE_ID)
            )  # (B, T)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)[None].expand(B, T)  # (B, T)
        masks = self._attention_masks(sequence_ids, T, input_ids.device)

        hidden_states = self.embeddings(input_ids)  # (B, T, H)
        rope = {kind: self.rotary[kind](position_ids, hidden_states.dtype) for kind in masks}
        for layer in self.layers:
            cos, sin = rope[layer.attention_type]  # (B, T, hs) each
            hidden_states = layer(hidden_states, cos, sin, masks[layer.attention_type])
        hidden_states = self.final_norm(hidden_states)  # (B, T, H)
        return hidden_states[0] if unpadded else hidden_states  # (N, H) or (B, T, H)

    def _attention_masks(
        self, sequence_ids: torch.Tensor | None, T: int, device: torch.device
    ) -> dict[str, torch.Tensor | None]:
        """Boolean SDPA masks per layer type: (B, 1, T, T) block-diagonal (& band), or None / (1, 1, T, T)."""
        kinds = set(self.config.layer_types)
        window = self.config.local_attention
        if sequence_ids is None:  # one document per row, no padding: no mask for global layers
            masks = {GLOBAL: None, LOCAL: sliding_window_band(T, window, device)[None, None]}  # (1, 1, T, T)
        else:
            block = block_diagonal_mask(sequence_ids)  # (B, 1, T, T)
            masks = {GLOBAL: block, LOCAL: block & sliding_window_band(T, window, device)}
        return {kind: masks[kind] for kind in kinds}


class ModernBertPredictionHead(nn.Module):
    """dense + GELU + LayerNorm before the decoder (``head`` in transformers)."""

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
    """ModernBERT with the masked-LM head (``transformers.ModernBertForMaskedLM``)."""

    architecture = MASKED_LM_ARCHITECTURE

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
        hidden_states = self.model(input_ids, attention_mask, sequence_ids, position_ids, cu_seqlens)
        if labels is None:
            return ModernBertMaskedLMOutput(self.decoder(self.head(hidden_states)))  # (B, T, V)
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
        logits = self.decoder(self.head(hidden_states))  # (M, V) or (B, T, V)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), ignore_index=IGNORE_INDEX
        )
        return ModernBertMaskedLMOutput(logits, loss)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (tied ones counted once); optionally without the token embeddings."""
        params = {id(p): p for p in self.parameters()}
        total = sum(p.numel() for p in params.values())
        if exclude_embeddings:
            total -= self.model.embeddings.tok_embeddings.weight.numel()
        return total


class _ModernBertWithClassifier(nn.Module):
    """The encoder (``model``), the prediction head (``head``: dense + GELU + LayerNorm), dropout (``drop``,
    ``classifier_dropout``) and a linear ``classifier`` with ``num_outputs`` outputs: the modules every
    ``transformers`` ModernBERT task head has, initialised as ``ModernBertPreTrainedModel._init_weights`` does
    (the ``classifier`` with std ``hidden_size ** -0.5``, its "final_out", cut at ``initializer_cutoff_factor``
    sigma; bias 0). Fine-tuning starts them from a pre-trained model's ``model.*`` and ``head.*`` weights."""

    def __init__(self, config: ModernBertConfig, num_outputs: int, classifier_dropout: float | None = None):
        super().__init__()
        self.config = config
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = nn.Dropout(config.classifier_dropout if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_outputs)
        self.head.apply(lambda m: _init_weights(m, config))
        std, c = config.hidden_size**-0.5, config.initializer_cutoff_factor
        nn.init.trunc_normal_(self.classifier.weight, mean=0.0, std=std, a=-c * std, b=c * std)
        nn.init.zeros_(self.classifier.bias)

    def scores(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``classifier(drop(head(hidden_states)))``: (..., H) -> (..., num_outputs)."""
        return self.classifier(self.drop(self.head(hidden_states)))

    def pool(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """One vector per sequence as ``config.classifier_pooling`` says: (B, T, H) -> (B, H). ``cls``: the
        first token; ``mean``: the mean over the real tokens (all of them without a mask)."""
        if self.config.classifier_pooling == "cls":
            return hidden_states[:, 0]  # (B, H)
        if attention_mask is None:
            return hidden_states.mean(dim=1)  # (B, H)
        mask = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # (B, T, 1)
        return (hidden_states * mask).sum(dim=1) / mask.sum(dim=1)  # (B, H)


class ModernBertForSequenceClassification(_ModernBertWithClassifier):
    """Sequence classification or regression (``transformers.ModernBertForSequenceClassification``, same
    parameter names: ``model.*``, ``head.dense``, ``head.norm``, ``drop``, ``classifier``).

    The encoder output is pooled as ``config.classifier_pooling`` says (``cls``: the first token; ``mean``: the
    mean over the real tokens), then ``head`` (dense + GELU + LayerNorm), dropout ``classifier_dropout`` and the
    linear ``classifier``. ``num_labels == 1`` means regression (MSE loss).
    """

    architecture = "ModernBertForSequenceClassification"
    #: Output fields that have one value per token (none here; see ``heads.BertForSequenceClassification``).
    per_token_outputs: tuple[str, ...] = ()

    def __init__(self, config: ModernBertConfig, num_labels: int, classifier_dropout: float | None = None):
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        super().__init__(config, num_labels, classifier_dropout)
        self.num_labels = num_labels

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
            input_ids, attention_mask: int (B, T) (see ``ModernBertModel.forward``).
            token_type_ids: ignored (ModernBERT has no segment embeddings; accepted so that the fine-tuning
                batches of BERT serve it as they are).
            labels: int64 (B,) class indices, or float (B,) targets for regression.
        Returns:
            ``SequenceClassifierOutput``: logits float (B, num_labels), and the loss given labels.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden_states = self.model(input_ids, attention_mask=attention_mask)  # (B, T, H)
        logits = self.scores(self.pool(hidden_states, attention_mask))  # (B, C)
        return SequenceClassifierOutput(logits, sequence_classification_loss(logits, labels))


class ModernBertForTokenClassification(_ModernBertWithClassifier):
    """Per-token tags (``transformers.ModernBertForTokenClassification``, same parameter names): every
    token's final hidden state through ``head`` (dense + GELU + LayerNorm), dropout and the linear
    ``classifier``. NER labels sit on each word's first piece, as for BERT (paper 5.3)."""

    architecture = "ModernBertForTokenClassification"
    per_token_outputs: tuple[str, ...] = ("logits",)

    def __init__(self, config: ModernBertConfig, num_labels: int, classifier_dropout: float | None = None):
        if num_labels < 2:
            raise ValueError(f"token classification needs at least 2 labels, got {num_labels}")
        super().__init__(config, num_labels, classifier_dropout)
        self.num_labels = num_labels

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TokenClassifierOutput:
        """Tag scores of a padded batch.

        Args:
            input_ids, attention_mask: int (B, T) (see ``ModernBertModel.forward``).
            token_type_ids: ignored (no segment embeddings).
            labels: int64 (B, T), tag index of each word's first piece, -100 elsewhere (other pieces, special
                tokens, padding).
        Returns:
            ``TokenClassifierOutput``: logits float (B, T, num_labels), and given labels the mean cross-entropy
            over the positions whose label is not -100.
        """
        hidden_states = self.model(input_ids, attention_mask=attention_mask)  # (B, T, H)
        logits = self.scores(hidden_states)  # (B, T, C)
        return TokenClassifierOutput(logits, token_classification_loss(logits, labels))


class ModernBertForQuestionAnswering(_ModernBertWithClassifier):
    """Extractive QA (``transformers.ModernBertForQuestionAnswering``, same parameter names): every token's
    final hidden state through ``head``, dropout and a ``classifier`` with 2 outputs, the start and end scores
    (transformers' ModernBERT names the layer ``classifier``, BERT's ``qa_outputs``)."""

    architecture = "ModernBertForQuestionAnswering"
    per_token_outputs: tuple[str, ...] = ("start_logits", "end_logits")

    def __init__(self, config: ModernBertConfig, num_labels: int = 2, classifier_dropout: float | None = None):
        if num_labels != 2:
            raise ValueError(f"a question-answering head has 2 outputs (start, end), got num_labels={num_labels}")
        super().__init__(config, 2, classifier_dropout)
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
            input_ids, attention_mask: int (B, T) (see ``ModernBertModel.forward``).
            token_type_ids: ignored (no segment embeddings).
            start_positions, end_positions: int64 (B,), token indices of the answer's first and last piece
                (0 = the first token, the target when the answer is not in the window). Positions outside the
                sequence are ignored, as in ``transformers``.
        Returns:
            ``QuestionAnsweringOutput``: start_logits, end_logits float (B, T), and given both positions the
            loss (start cross-entropy + end cross-entropy) / 2.
        """
        hidden_states = self.model(input_ids, attention_mask=attention_mask)  # (B, T, H)
        start_logits, end_logits = self.scores(hidden_states).unbind(-1)  # (B, T) each
        out = QuestionAnsweringOutput(start_logits, end_logits)
        if start_positions is not None and end_positions is not None:
            out.loss = question_answering_loss(start_logits, end_logits, start_positions, end_positions)
        return out


class ModernBertForMultipleChoice(_ModernBertWithClassifier):
    """Multiple choice (``transformers.ModernBertForMultipleChoice``, same parameter names; SWAG, BERT paper
    4.4): each of the N candidates is encoded as its own sequence, pooled as ``config.classifier_pooling``
    says (``cls``: the first real token, which is the first token of a right-padded row; ``mean``: the mean
    over the real tokens), put through ``head`` and dropout, and scored by a ``classifier`` with one output; a
    softmax over the N scores chooses. One model serves any N; ``num_labels`` is accepted for a uniform
    constructor and ignored."""

    architecture = "ModernBertForMultipleChoice"
    per_token_outputs: tuple[str, ...] = ()
    num_labels = 1

    def __init__(
        self, config: ModernBertConfig, num_labels: int | None = None, classifier_dropout: float | None = None
    ):
        super().__init__(config, 1, classifier_dropout)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> MultipleChoiceModelOutput:
        """Candidate scores of a padded batch.

        Args:
            input_ids, attention_mask: int (B, N, T), one ``[CLS] context [SEP] ending [SEP]`` sequence per
                candidate.
            token_type_ids: ignored (no segment embeddings).
            labels: int64 (B,), index of the right candidate.
        Returns:
            ``MultipleChoiceModelOutput``: logits float (B, N), and given labels the mean cross-entropy.
        """
        B, N, T = input_ids.shape
        flat_ids = input_ids.reshape(B * N, T)  # (B*N, T)
        flat_mask = None if attention_mask is None else attention_mask.reshape(B * N, T)  # (B*N, T)
        hidden_states = self.model(flat_ids, attention_mask=flat_mask)  # (B*N, T, H)
        if self.config.classifier_pooling == "cls" and flat_mask is not None:
            first = flat_mask.argmax(dim=-1)  # (B*N,) the first real token (transformers: left or right padding)
            pooled = hidden_states[torch.arange(B * N, device=hidden_states.device), first]  # (B*N, H)
        else:
            pooled = self.pool(hidden_states, flat_mask)  # (B*N, H)
        logits = self.scores(pooled).view(B, N)  # (B, N)
        out = MultipleChoiceModelOutput(logits)
        if labels is not None:
            out.loss = F.cross_entropy(logits.float(), labels.long())
        return out


def trainable_state_dict(model: ModernBertForMaskedLM) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` without the tied alias ``decoder.weight``: what ``model.safetensors`` holds."""
    return {k: v for k, v in model.state_dict().items() if k not in TIED_WEIGHTS_KEYS}


def load_state_dict_strict(model: ModernBertForMaskedLM, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a ``ModernBertForMaskedLM`` state dict with or without the tied alias (``TIED_WEIGHTS_KEYS``).

    Every other key must match exactly, names and shapes; a tied alias present must equal its target.
    Raises ``ValueError`` naming the offending keys.
    """
    state_dict = dict(state_dict)
    for alias, target in TIED_WEIGHTS_KEYS.items():
        if alias in state_dict:
            if target in state_dict and not torch.equal(state_dict[alias], state_dict[target]):
                raise ValueError(f"{alias} should be tied to {target} but holds different values")
            state_dict.setdefault(target, state_dict.pop(alias))
    own = trainable_state_dict(model)
    missing, unexpected = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise ValueError(f"state dict does not match the model: missing {missing}, unexpected {unexpected}")
    wrong = [
        f"{k}: model {tuple(own[k].shape)}, given {tuple(v.shape)}"
        for k, v in state_dict.items()
        if own[k].shape != v.shape
    ]
    if wrong:
        raise ValueError(f"state dict does not match the model's shapes: {'; '.join(wrong[:5])}")
    result = model.load_state_dict(state_dict, strict=False)
    assert set(result.missing_keys) <= set(TIED_WEIGHTS_KEYS) and not result.unexpected_keys, result


__all__ = [
    "IGNORE_INDEX",
    "MASKED_LM_ARCHITECTURE",
    "PRESETS",
    "TIED_WEIGHTS_KEYS",
    "ModernBertConfig",
    "ModernBertForMaskedLM",
    "ModernBertMaskedLMOutput",
    "ModernBertModel",
    "ModernBertForMultipleChoice",
    "ModernBertForQuestionAnswering",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "flops_per_token",
    "load_state_dict_strict",
    "trainable_state_dict",
]
