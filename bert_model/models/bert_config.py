"""The encoder's configuration: :class:`BertConfig` (Hugging Face ``transformers.BertConfig`` field names), the
size presets of the paper and Turc et al. 2019, and the training FLOPs per token that MFU is measured against.

Plain Python (no ``nn.Module``): the CLI, ``hf/interop.py`` and the benchmarks read configurations without
building a model; ``bert.py`` builds the encoder from one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

#: ``attn_implementation`` values (``auto`` resolves to one of the others; ``models/attention.py`` selects the
#: kernel). Here, not there, so that the command line's options need no torch.
ATTN_IMPLEMENTATIONS = ("auto", "sdpa", "varlen", "flash_attention_2", "flex_attention")
#: ``kernels`` values (``auto`` resolves to one of the others; ``models/kernels.py``), here for the same reason.
KERNELS = ("auto", "torch", "liger")

#: Model sizes (num_hidden_layers, hidden_size, num_attention_heads): the paper's Base/Large and the
#: smaller models of Turc et al. 2019 ("Well-Read Students Learn Better", google-research/bert README).
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


@dataclass
class BertConfig:
    """Hyper-parameters of a BERT encoder; field names and defaults are those of Hugging Face
    ``transformers.BertConfig`` (defaults = BERT-Base, uncased vocab)."""

    vocab_size: int = 30522
    """Number of WordPiece ids (rows of the word embedding / columns of the MLM decoder)."""
    hidden_size: int = 768
    """Width H of every layer."""
    num_hidden_layers: int = 12
    """Number L of Transformer layers."""
    num_attention_heads: int = 12
    """Number A of attention heads; must divide ``hidden_size``."""
    intermediate_size: int = 3072
    """Width of the feed-forward layer (4H in the paper)."""
    hidden_act: str = "gelu"
    """Activation of the feed-forward and MLM transform layers; only exact (erf) ``"gelu"``, as the paper."""
    hidden_dropout_prob: float = 0.1
    """Dropout on embeddings and on every sub-layer output before the residual add."""
    attention_probs_dropout_prob: float = 0.1
    """Dropout on the attention probabilities."""
    max_position_embeddings: int = 512
    """Longest sequence the position embeddings cover (tokens, [CLS] and [SEP] included)."""
    type_vocab_size: int = 2
    """Number of segment (token type) ids: 2 for sentence A / B."""
    initializer_range: float = 0.02
    """Standard deviation of the (truncated at 2 sigma) normal initializer of weight matrices."""
    layer_norm_eps: float = 1e-12
    """Epsilon of every LayerNorm (1e-12 as in the original code)."""
    pad_token_id: int = 0
    """Id of [PAD] (0 in Google's and bertprep's vocabs); the trainer takes it from the shard manifest."""
    position_offset: int = 0
    """Added to every position id before the position-embedding look-up: 0 for BERT. RoBERTa (Hugging Face
    ``model_type`` ``roberta``) numbers its positions from ``pad_token_id + 1`` = 2 (``padding_idx`` 1 and the
    unused row 0 come first), so it loads as BERT weights with ``position_offset`` 2, ``type_vocab_size`` 1
    and ``max_position_embeddings`` 514 (512 tokens); ``to_hf_dict`` then writes RoBERTa's config."""
    pad_vocab_size_multiple: int = 1
    """Inside the model only, round the word-embedding / MLM-decoder rows up to a multiple of this (64: the
    30,522 ids of BERT's uncased vocab become 30,528 rows, as MosaicBERT; aligned shapes keep the decoder's
    matrix multiply on the GPU's fast tensor-core tiles). The padding rows stay 0, are never predicted (the
    logits are cut back to ``vocab_size`` columns) and never saved: state dicts, checkpoints and ``export`` hold
    ``vocab_size`` rows. 1 = no padding (what a Hugging Face model loads as; ``bertprep train`` sets 64)."""

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
            "pad_vocab_size_multiple",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads}); choose e.g. hidden_size={self.num_attention_heads * 64}"
            )
        if self.hidden_act != "gelu":
            raise ValueError(f"BertConfig.hidden_act {self.hidden_act!r} is not supported; use 'gelu' (exact GELU)")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        if self.initializer_range <= 0:
            raise ValueError(f"BertConfig.initializer_range must be positive, got {self.initializer_range!r}")
        if not 0 <= self.position_offset < self.max_position_embeddings:
            raise ValueError(
                f"BertConfig.position_offset {self.position_offset} must be in [0, max_position_embeddings)"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"BertConfig.pad_token_id {self.pad_token_id} is outside the vocab (size {self.vocab_size})"
            )

    @classmethod
    def from_preset(cls, name: str, **overrides) -> BertConfig:
        """Config of a named size (``PRESETS``) with ``intermediate_size = 4 * hidden_size``.

        ``overrides`` replace any field; when ``hidden_size`` is overridden and ``intermediate_size`` is not,
        the latter follows as 4H. Raises ``ValueError`` for an unknown preset name or field.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        values = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads}
        values.update({k: v for k, v in overrides.items() if v is not None})
        values.setdefault("intermediate_size", 4 * values["hidden_size"])
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, values: dict) -> BertConfig:
        """Build from a dict of these fields (e.g. ``to_dict()`` output or a Hugging Face ``config.json``).

        Hugging Face keys that carry nothing this model uses (``model_type``, ``architectures``...) are
        ignored; any other unknown key raises ``ValueError`` (a typo must not be silently dropped).
        """
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names - _HF_EXTRA_KEYS
        if unknown:
            raise ValueError(f"unknown BertConfig field(s): {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict:
        """Plain dict of the fields (JSON-serialisable); ``position_offset`` only when set (a RoBERTa),
        ``pad_vocab_size_multiple`` only when above 1."""
        values = asdict(self)
        if not values["position_offset"]:
            del values["position_offset"]
        if values["pad_vocab_size_multiple"] == 1:
            del values["pad_vocab_size_multiple"]
        return values

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the word embedding inside the model: ``vocab_size`` rounded up to ``pad_vocab_size_multiple``."""
        return -(-self.vocab_size // self.pad_vocab_size_multiple) * self.pad_vocab_size_multiple

    @property
    def max_sequence_length(self) -> int:
        """The longest sequence the position embeddings cover: ``max_position_embeddings - position_offset``."""
        return self.max_position_embeddings - self.position_offset

    def to_hf_dict(self) -> dict:
        """A Hugging Face ``config.json`` for ``BertForPreTraining`` with these values, so a checkpoint
        directory holding it and ``model.safetensors`` loads with ``from_pretrained``; with a
        ``position_offset`` RoBERTa's (``RobertaForMaskedLM``, whose weights ``hf.export`` renames). The real
        ``vocab_size``, never the padded one (``pad_vocab_size_multiple`` is this model's own)."""
        if self.position_offset:
            values = self.to_dict()
            del values["position_offset"]
            values.pop("pad_vocab_size_multiple", None)
            return {
                "architectures": ["RobertaForMaskedLM"],
                "model_type": "roberta",
                **values,
                "tie_word_embeddings": True,
            }
        return {
            "architectures": ["BertForPreTraining"],
            "model_type": "bert",
            **{k: v for k, v in self.to_dict().items() if k != "pad_vocab_size_multiple"},
            "position_embedding_type": "absolute",
            "tie_word_embeddings": True,
        }

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads


# Keys found in Hugging Face config.json files that carry no information this model uses.
_HF_EXTRA_KEYS = {
    "architectures",
    "model_type",
    "position_embedding_type",
    "tie_word_embeddings",
    "transformers_version",
    "use_cache",
    "classifier_dropout",
    "gradient_checkpointing",
    "torch_dtype",
    "dtype",
    "is_decoder",
    "add_cross_attention",
    "bos_token_id",
    "eos_token_id",
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
}


def flops(config: BertConfig, tokens: float, attention_pairs: float, masked_lm_fraction: float = 0.15) -> float:
    """Training FLOPs (forward + backward = 3 x forward) of ``BertForPreTraining`` on ``tokens`` real tokens whose
    documents (instances) have lengths l with ``attention_pairs`` = sum(l^2) (``packing.attention_pairs``).

    Counts matrix multiplies only (2 FLOPs per multiply-add), as the PaLM paper's MFU (appendix B): per layer
    and token 4H^2 (Q, K, V, output) + 2*H*I (feed-forward) weights; per layer and (query, key) pair 2*H for
    the attention scores and 2*H for the weighted sum, counted over each document's own l^2 pairs (a packed
    row of two 64-token documents attends 2 x 64^2 pairs, not 128^2; padding attends nothing); plus the MLM
    head (H^2 transform + H*V decoder, the real ``vocab_size``) on ``masked_lm_fraction`` of the tokens.
    Embedding look-ups, the pooler and the NSP head (per sequence) are negligible and left out.
    """
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    weights = layers * 2 * (4 * h * h + 2 * h * i) * tokens
    attention = layers * 2 * 2 * h * attention_pairs
    mlm_head = masked_lm_fraction * 2 * (h * h + h * config.vocab_size) * tokens
    return 3.0 * (weights + attention + mlm_head)


def flops_per_token(config: BertConfig, seq_length: int, masked_lm_fraction: float = 0.15) -> float:
    """Training FLOPs per token of documents ``seq_length`` tokens long (:func:`flops` of one token attending to
    ``seq_length`` keys): 6 N + 12 L T H plus the MLM head (PaLM appendix B)."""
    return flops(config, 1, seq_length, masked_lm_fraction)


__all__ = ["PRESETS", "BertConfig", "flops", "flops_per_token"]
