"""The masked-LM rule's settings (:class:`MaskingConfig`) and the masking schemes' constants, declared once.

make-shards' static masking (``pipeline.config.InstanceConfig.mlm``) and the trainer's dynamic masking (the
settings read back from a manifest, ``bert_model.pretrain``) use the same class; the rule that reads it is
``masking/rule.py``. Kept here, with the rule, so that ``bert_model`` reads it without importing the rest of
``pipeline``. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``--masking-scheme`` choices: what one masking decision covers (``masking/schemes.py``).
MASKING_SCHEMES = ("token", "whole-word", "ngram", "span")
#: SpanBERT's span lengths (Joshi et al. 2020, section 3.1): Geo(p = 0.2) words, clipped at 10 (mean 3.8).
SPAN_GEOMETRIC_P = 0.2
MAX_SPAN_LENGTH = 10
#: The ERNIE / Megatron-LM n-gram variant: n words with probability proportional to 1/n, n <= 3.
MAX_NGRAM_SIZE = 3


@dataclass(frozen=True)
class MaskingConfig:
    """The masked-LM rule's settings (BERT paper section 3.1 and the masking schemes): make-shards' static
    masking (``InstanceConfig.mlm``) and the trainer's dynamic masking (read back from a manifest) use the
    same one; the rule itself is ``masking/rule.py``."""

    max_predictions_per_seq: int = 20
    """Cap on masked positions per instance; must be below max_seq_length (about max_seq_length x
    masked_lm_prob: 20 at 128, 76-80 at 512)."""
    masked_lm_prob: float = 0.15
    """Fraction of tokens to predict (paper section 3.1); each is [MASK] 80%, random 10%, kept 10% of the time."""
    do_whole_word_mask: bool = False
    """Mask whole words (a piece and its following ``##`` pieces) instead of single pieces: the original's flag,
    the same as masking_scheme ``whole-word`` (with no word_segmenter the output is the original's)."""
    masking_scheme: str = "token"
    """What one masking decision covers; the budget (masked_lm_prob, max_predictions_per_seq) and 80/10/10 stay.
    ``token``: single pieces (the original). ``whole-word``: whole words, each taken or skipped (the original's
    do_whole_word_mask). ``ngram``: n consecutive words, P(n) proportional to 1/n, n <= max_ngram_size (ERNIE /
    Megatron-LM). ``span``: spans of words with geometric lengths (span_geometric_p, at most max_span_length;
    SpanBERT sec. 3.1, mean 3.8 words), 80/10/10 decided per span. Words: whitespace + punctuation (a piece and
    its ``##`` pieces; every Chinese character is a word), or word_segmenter's. Static and dynamic masking both
    honour it; sampling ``fast`` keeps the per-instance masking for the word-level schemes."""
    max_ngram_size: int = MAX_NGRAM_SIZE
    """Longest n-gram in words (masking_scheme ``ngram``)."""
    span_geometric_p: float = SPAN_GEOMETRIC_P
    """p of the geometric span length in words (masking_scheme ``span``; SpanBERT 0.2)."""
    max_span_length: int = MAX_SPAN_LENGTH
    """Longest span in words (masking_scheme ``span``; SpanBERT 10); longer draws are redrawn (the geometric
    truncated and renormalised, as SpanBERT's code)."""

    @property
    def effective_masking_scheme(self) -> str:
        """``masking_scheme``, with ``do_whole_word_mask`` meaning ``whole-word``."""
        return "whole-word" if self.do_whole_word_mask else self.masking_scheme

    def __post_init__(self) -> None:
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be at least 1, got {self.max_predictions_per_seq}")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1], got {self.masked_lm_prob}")
        if self.masking_scheme not in MASKING_SCHEMES:
            raise ValueError(f"masking_scheme must be one of {', '.join(MASKING_SCHEMES)}, got {self.masking_scheme!r}")
        if self.do_whole_word_mask and self.masking_scheme not in ("token", "whole-word"):
            raise ValueError(
                f"--do-whole-word-mask is --masking-scheme whole-word; it cannot be combined with "
                f"--masking-scheme {self.masking_scheme} (which masks whole words already): drop one"
            )
        if self.max_ngram_size < 1:
            raise ValueError(f"max_ngram_size must be at least 1, got {self.max_ngram_size}")
        if not 0.0 < self.span_geometric_p <= 1.0:
            raise ValueError(f"span_geometric_p must be in (0, 1], got {self.span_geometric_p}")
        if self.max_span_length < 1:
            raise ValueError(f"max_span_length must be at least 1, got {self.max_span_length}")
