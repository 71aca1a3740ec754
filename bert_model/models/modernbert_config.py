"""ModernBERT's configuration: :class:`ModernBertConfig` (Hugging Face ``transformers.ModernBertConfig`` field
names), its size presets and the training FLOPs per token.

Plain Python (no ``nn.Module``), as ``config.py`` is for BERT: the CLI and the exporter can read a configuration
without building a model; ``modernbert.py`` builds the encoder from one (and re-exports this module's names).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

#: Model sizes (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size).
#:
#: ``base`` and ``large`` are answerdotai/ModernBERT-base and -large (Warner et al. 2024, table 10).
#: The smaller ones are ours, scaled down the way ModernBERT scales: head size 64 throughout,
#: ``intermediate_size = 1.5 * hidden_size`` (base's 1152 / 768; GeGLU's ``Wi`` is twice that wide), and a
#: layer count of the form 3k + 1 so that with ``global_attn_every_n_layers = 3`` the first and the last
#: layers are global, as in base (22) and large (28). Widths follow BERT's Turc et al. 2019 tiny/mini/small
#: (128/256/512) so the two families compare at equal width; ModernBERT is "deep and narrow", so each has
#: more layers than its BERT namesake (4/7/10 vs 2/4/4).
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (4, 128, 2, 192),
    "mini": (7, 256, 4, 384),
    "small": (10, 512, 8, 768),
    "base": (22, 768, 12, 1152),
    "large": (28, 1024, 16, 2624),
}

#: The dropout fields of the encoder (``ModernBertConfig``'s names; ``attention_output_dropout`` bertprep's own).
DROPOUT_FIELDS = ("embedding_dropout", "mlp_dropout", "attention_dropout", "attention_output_dropout")

#: The ``architectures`` entry of an exported ``config.json`` (a ``transformers`` class name).
MASKED_LM_ARCHITECTURE = "ModernBertForMaskedLM"


@dataclass
class ModernBertConfig:
    """Hyper-parameters of a ModernBERT encoder; field names and defaults are those of Hugging Face
    ``transformers.ModernBertConfig`` (defaults = ModernBERT-base with its OLMo-derived 50,368-entry vocab),
    in the flat form of the published ``config.json`` files (``global_rope_theta``, ``local_rope_theta``,
    ``global_attn_every_n_layers`` rather than transformers 5's ``rope_parameters`` / ``layer_types``)."""

    vocab_size: int = 50368
    """Number of token ids (rows of ``tok_embeddings`` / columns of the MLM decoder)."""
    hidden_size: int = 768
    """Width H of every layer."""
    intermediate_size: int = 1152
    """Width I of the GeGLU feed-forward: ``Wi`` maps H -> 2I (input and gate), ``Wo`` maps I -> H."""
    num_hidden_layers: int = 22
    """Number L of Transformer layers."""
    num_attention_heads: int = 12
    """Number of attention heads; must divide ``hidden_size``."""
    hidden_activation: str = "gelu"
    """Activation of the GeGLU input half; only exact (erf) ``"gelu"``, as ModernBERT."""
    max_position_embeddings: int = 8192
    """Longest sequence the model is meant for (RoPE has no table; this is a limit, checked in ``forward``)."""
    initializer_range: float = 0.02
    """Standard deviation of the truncated-normal initializer of the input projections and embeddings."""
    initializer_cutoff_factor: float = 2.0
    """The truncated normal is cut at this many standard deviations."""
    norm_eps: float = 1e-5
    """Epsilon of every LayerNorm."""
    norm_bias: bool = False
    """Whether the LayerNorms have a bias (ModernBERT: no)."""
    pad_token_id: int = 50283
    """Id of the padding token; its embedding row gets no gradient (``padding_idx``)."""
    eos_token_id: int = 50282
    """End-of-sequence id (the tokenizer's [SEP]); recorded for Hugging Face, unused by the model."""
    bos_token_id: int = 50281
    """Beginning-of-sequence id (the tokenizer's [CLS]); recorded for Hugging Face, unused by the model."""
    cls_token_id: int = 50281
    """[CLS] id; recorded for Hugging Face (classification heads pool it), unused by the MLM model."""
    sep_token_id: int = 50282
    """[SEP] id; recorded for Hugging Face, unused by the model."""
    global_rope_theta: float = 160000.0
    """RoPE base of the global-attention layers (long context: 160k)."""
    attention_bias: bool = False
    """Whether ``Wqkv`` and the attention ``Wo`` have biases."""
    attention_dropout: float = 0.0
    """Dropout on the attention probabilities and (unless ``attention_output_dropout`` is set) on the attention
    output, as transformers' ``ModernBertConfig`` uses it."""
    attention_output_dropout: float | None = None
    """Dropout on the attention output (after ``Wo``) apart from ``attention_dropout``, as ModernBERT's training code
    has it (``attn_out_dropout_prob`` of AnswerDotAI/ModernBERT's ``FlexBertConfig``); None: ``attention_dropout``.
    bertprep's own field: transformers has none, so an exported model fine-tuned by transformers takes
    ``attention_dropout`` for both (inference has no dropout)."""
    global_attn_every_n_layers: int = 3
    """Layer i is global when ``i % global_attn_every_n_layers == 0``, local (sliding window) otherwise."""
    local_attention: int = 128
    """Whole width of the local layers' sliding window: a token sees ``local_attention // 2`` on each side."""
    local_rope_theta: float = 10000.0
    """RoPE base of the local (sliding-window) layers."""
    embedding_dropout: float = 0.0
    """Dropout after the embedding LayerNorm."""
    mlp_bias: bool = False
    """Whether ``Wi`` and the MLP ``Wo`` have biases."""
    mlp_dropout: float = 0.0
    """Dropout on the GeGLU output before ``Wo``."""
    decoder_bias: bool = True
    """Whether the MLM decoder has an output bias (``decoder.bias``)."""
    classifier_pooling: str = "cls"
    """Pooling of sequence-classification heads (``"cls"`` or ``"mean"``); recorded for fine-tuning."""
    classifier_dropout: float = 0.0
    """Dropout of classification heads; recorded for fine-tuning."""
    classifier_bias: bool = False
    """Whether the prediction head's ``dense`` layer has a bias."""
    classifier_activation: str = "gelu"
    """Activation of the prediction head (``head.act``); only exact ``"gelu"``."""
    sparse_prediction: bool = False
    """When labels are given, run the MLM head only on the positions whose label is not
    ``sparse_pred_ignore_index`` (logits then have shape (M, V)). False as in Hugging Face; the trainer sets it."""
    sparse_pred_ignore_index: int = -100
    """Label of the positions that carry no MLM target."""
    tie_word_embeddings: bool = True
    """The MLM decoder's weight is ``tok_embeddings.weight``; only True is supported."""
    architecture: str = "modernbert"
    """Which encoder family this config builds (bertprep's own key; not written to Hugging Face config.json)."""

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "max_position_embeddings",
            "global_attn_every_n_layers",
            "local_attention",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModernBertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"ModernBertConfig.hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads}); choose e.g. hidden_size={self.num_attention_heads * 64}"
            )
        if self.head_size % 2:
            raise ValueError(f"ModernBertConfig: the head size ({self.head_size}) must be even for RoPE")
        if self.local_attention % 2:
            raise ValueError(
                f"ModernBertConfig.local_attention ({self.local_attention}) must be even (it is the whole window: "
                "local_attention // 2 tokens on each side)"
            )
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) != "gelu":
                raise ValueError(f"ModernBertConfig.{name} {getattr(self, name)!r} is not supported; use 'gelu'")
        for name in (
            "global_rope_theta",
            "local_rope_theta",
            "norm_eps",
            "initializer_range",
            "initializer_cutoff_factor",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"ModernBertConfig.{name} must be positive, got {getattr(self, name)!r}")
        for name in (*DROPOUT_FIELDS, "classifier_dropout"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"ModernBertConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("pad_token_id", "cls_token_id", "sep_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"ModernBertConfig.{name} {value!r} is outside the vocab (size {self.vocab_size}); "
                    "set the special token ids of your vocab (the trainer reads them from the shards)"
                )
        if self.classifier_pooling not in ("cls", "mean"):
            raise ValueError(
                f"ModernBertConfig.classifier_pooling must be 'cls' or 'mean', got {self.classifier_pooling!r}"
            )
        if not self.tie_word_embeddings:
            raise ValueError("ModernBertConfig.tie_word_embeddings=False is not supported (the decoder is tied)")
        if self.architecture != "modernbert":
            raise ValueError(f"ModernBertConfig.architecture must be 'modernbert', got {self.architecture!r}")

    @classmethod
    def from_preset(cls, name: str, **overrides) -> ModernBertConfig:
        """Config of a named size (``PRESETS``); ``overrides`` replace any field (None values are ignored).

        When ``hidden_size`` is overridden and ``intermediate_size`` is not, the latter follows as 1.5 H
        (rounded down to an even number). Raises ``ValueError`` for an unknown preset name or field.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads, intermediate = PRESETS[name]
        values = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads}
        values.update({k: v for k, v in overrides.items() if v is not None})
        scaled = (3 * values["hidden_size"] // 2) // 2 * 2  # 1.5 H, even
        values.setdefault("intermediate_size", intermediate if values["hidden_size"] == hidden else scaled)
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, values: dict) -> ModernBertConfig:
        """Build from a dict of these fields (``to_dict()`` output or a Hugging Face ``config.json``).

        Keys that carry nothing this model uses (``model_type``, ``architectures``...) are ignored. A
        transformers-5 ``config.json`` is read too: ``rope_parameters`` gives the two RoPE bases and
        ``layer_types`` the global/local pattern (which must be "every n-th layer global, starting at 0").
        Any other unknown key raises ``ValueError``.
        """
        values = dict(values)
        rope = values.pop("rope_parameters", None) or {}
        for layer_type, name in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
            params = rope.get(layer_type) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"RoPE type {params['rope_type']!r} of {layer_type} layers is not supported")
            if "rope_theta" in params:
                values.setdefault(name, params["rope_theta"])
        layer_types = values.pop("layer_types", None)
        if layer_types is not None:
            n = _every_n_from_layer_types(layer_types)
            values.setdefault("global_attn_every_n_layers", n)
            values.setdefault("num_hidden_layers", len(layer_types))
        if "sliding_window" in values:  # transformers' half window
            values.setdefault("local_attention", 2 * values.pop("sliding_window"))
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names - _HF_EXTRA_KEYS
        if unknown:
            raise ValueError(f"unknown ModernBertConfig field(s): {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict:
        """Plain dict of the fields (JSON-serialisable)."""
        return asdict(self)

    def to_hf_dict(self) -> dict:
        """A Hugging Face ``config.json`` for ``ModernBertForMaskedLM`` with these values.

        ``transformers.ModernBertConfig(**d)`` accepts it. It carries both the flat keys of the published
        ModernBERT configs (read by transformers 4.48+) and transformers 5's ``layer_types`` /
        ``rope_parameters`` (which 4.x keeps as plain attributes), so either version builds the same model.
        """
        out = {k: v for k, v in self.to_dict().items() if k != "architecture"}
        if out["attention_output_dropout"] is None:  # (bertprep's own field: written only when set)
            del out["attention_output_dropout"]
        return {
            "architectures": [MASKED_LM_ARCHITECTURE],
            "model_type": "modernbert",
            **out,
            "layer_types": self.layer_types,
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": self.global_rope_theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": self.local_rope_theta},
            },
        }

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def layer_types(self) -> list[str]:
        """Per layer, ``"full_attention"`` (global) or ``"sliding_attention"`` (local), as transformers names them."""
        return [
            "sliding_attention" if i % self.global_attn_every_n_layers else "full_attention"
            for i in range(self.num_hidden_layers)
        ]


def _every_n_from_layer_types(layer_types: list[str]) -> int:
    """The n of "layer i global iff i % n == 0" that ``layer_types`` follows; ValueError if it follows none."""
    L = len(layer_types)
    for n in range(1, L + 1):
        if layer_types == ["sliding_attention" if i % n else "full_attention" for i in range(L)]:
            return n
    raise ValueError(f"layer_types {layer_types} is not 'every n-th layer global, starting at 0'")


# Keys of Hugging Face ModernBERT config.json files that carry nothing this model uses.
_HF_EXTRA_KEYS = {
    "architectures",
    "model_type",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "reference_compile",
    "repad_logits_with_grad",
    "deterministic_flash_attn",
    "gradient_checkpointing",
    "position_embedding_type",
    "norm_eps_head",
    "head_pred_act",
    "head_class_act",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "id2label",
    "label2id",
    "problem_type",
    "_name_or_path",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
}


def flops(config: ModernBertConfig, tokens: float, attention_pairs: float, masked_lm_fraction: float = 0.3) -> float:
    """Training FLOPs (forward + backward = 3 x forward) of a ``ModernBertForMaskedLM`` step on ``tokens`` real
    tokens whose documents have ``attention_pairs`` = sum(l^2) (``packing.attention_pairs``).

    Matrix multiplies only (2 FLOPs per multiply-add), as ``bert_config.flops``: per layer and token ``Wqkv`` +
    ``Wo`` (4 H^2), GeGLU ``Wi`` (2 H I) + ``Wo`` (H I); per layer and (query, key) pair 2 x 2 x H for the scores
    and the weighted sum, over sum(l^2) pairs for global layers and min(sum(l^2), tokens x (local_attention + 1))
    for local ones (the keys a windowed kernel visits: exact when every document is shorter than the window, or
    every one longer, as at 128 and 512 tokens with the 128-token window; a dense masked kernel does the full
    T^2). The MLM head (H^2 + H V) runs on ``masked_lm_fraction`` of the tokens (ModernBERT masks 30%) with
    sparse prediction.
    """
    h, i = config.hidden_size, config.intermediate_size
    local_pairs = min(attention_pairs, tokens * (config.local_attention + 1))
    encoder = 0.0
    for layer_type in config.layer_types:
        pairs = attention_pairs if layer_type == "full_attention" else local_pairs
        encoder += 2 * (4 * h * h + 3 * h * i) * tokens + 2 * 2 * pairs * h
    mlm_head = masked_lm_fraction * 2 * (h * h + h * config.vocab_size) * tokens
    return 3.0 * (encoder + mlm_head)


def flops_per_token(config: ModernBertConfig, seq_length: int, masked_lm_fraction: float = 0.3) -> float:
    """Training FLOPs per token of documents ``seq_length`` tokens long (:func:`flops` of one token attending to
    ``seq_length`` keys, ``min(seq_length, local_attention + 1)`` in local layers)."""
    return flops(config, 1, seq_length, masked_lm_fraction)


__all__ = ["DROPOUT_FIELDS", "MASKED_LM_ARCHITECTURE", "PRESETS", "ModernBertConfig", "flops", "flops_per_token"]
