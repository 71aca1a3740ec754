"""Former home of the fine-tuning tokenizer; it lives in ``bertprep.pipeline.vocab_files`` (Beam-free).

Kept as a re-export so that existing imports (``from bertprep.bert_model.wordpiece import
WordPieceTokenizer``) keep working; new code imports ``bertprep.pipeline.vocab_files``.
"""

from __future__ import annotations

from bertprep.pipeline.vocab_files import (  # noqa: F401  (re-exports)
    MAX_INPUT_CHARS_PER_WORD,
    SPECIAL_TOKENS,
    WordPieceTokenizer,
    do_lower_case_of_tokenizer_json,
    hf_tokenizer_json,
    looks_cased,
    read_vocab_file,
    strip_accents_of_tokenizer_json,
)
from bertprep.pipeline.vocab_files import tokenizer_config as hf_tokenizer_config  # noqa: F401

__all__ = [
    "MAX_INPUT_CHARS_PER_WORD", "SPECIAL_TOKENS", "WordPieceTokenizer", "do_lower_case_of_tokenizer_json",
    "hf_tokenizer_config", "hf_tokenizer_json", "looks_cased", "read_vocab_file", "strip_accents_of_tokenizer_json",
]
