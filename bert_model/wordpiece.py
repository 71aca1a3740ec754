"""WordPiece tokenization for fine-tuning and export, from a ``vocab.txt``, with Hugging Face ``tokenizers``.

The same pipeline as the pre-training data (``pipeline/tokenization.py``, the original ``FullTokenizer``):
``BertNormalizer(lowercase=do_lower_case, strip_accents=strip_accents)`` + ``BertPreTokenizer`` +
``WordPiece(max_input_chars_per_word=200)``, where ``strip_accents`` is ``do_lower_case`` unless chosen apart
(``pipeline/normalization.py``, Beam-free: NFD splits Hangul syllables into jamo, so Korean wants
``strip_accents=False``). It is rebuilt here because ``bert_model`` never imports
``apache_beam`` (ARCHITECTURE.md), which ``pipeline/tokenization.py`` does to read ``gs://`` paths.

Encodings carry character offsets into the *original* text (``tokenizers`` tracks them through
normalisation), which SQuAD uses to cut answers out of the context and NER uses to find each word's first
piece. ``hf_tokenizer_json`` writes the same tokenizer, plus the special tokens and the
``[CLS] A [SEP] B [SEP]`` template, as the ``tokenizer.json`` that ``transformers`` loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from tokenizers import Encoding, Tokenizer, decoders, models, pre_tokenizers, processors

from bertprep.pipeline.normalization import bert_normalizer, normalizer_settings, resolve_strip_accents

#: The special entries a BERT vocab must have (looked up by name: a trained vocab has [PAD]=0..[MASK]=4,
#: Google's has [CLS]=101).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: The original ``WordpieceTokenizer``'s limit (Hugging Face's BertTokenizer uses 100).
MAX_INPUT_CHARS_PER_WORD = 200


def read_vocab_file(path: str) -> list[str]:
    """The tokens of a ``vocab.txt`` (one per line, line number = id), each stripped as the original
    ``tokenization.load_vocab`` does.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is empty, not UTF-8, or lacks one of ``SPECIAL_TOKENS`` (message names the file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err}); a vocab.txt has one UTF-8 token per line") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tokens = [line.strip() for line in lines]
    if not tokens:
        raise ValueError(f"{path}: the vocab file is empty")
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise ValueError(f"{path}: missing special token(s) {', '.join(missing)}; a BERT vocab needs "
                         f"{', '.join(SPECIAL_TOKENS)} (one per line)")
    return tokens


def looks_cased(tokens: Sequence[str]) -> bool:
    """True when the vocab has upper-case word pieces outside bracketed special entries (20 or more)."""
    upper = 0
    for token in tokens:
        if token.startswith("[") and token.endswith("]"):
            continue
        if any(c.isupper() for c in token):
            upper += 1
            if upper >= 20:
                return True
    return False


def _wordpiece_model(tokens: Sequence[str]) -> models.WordPiece:
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab[token] = index  # a duplicate line maps to its last id, as the original OrderedDict does
    return models.WordPiece(vocab=vocab, unk_token="[UNK]", continuing_subword_prefix="##",
                            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD)


def _normalizer(do_lower_case: bool, strip_accents: bool | None = None):
    return bert_normalizer(do_lower_case, strip_accents)


@dataclass
class WordPieceTokenizer:
    """A vocab's WordPiece tokenizer and its special ids; ``encode*`` add no special tokens.

    Build it with ``WordPieceTokenizer.from_tokens(tokens, do_lower_case, strip_accents=None)`` or
    ``from_vocab_file``.
    """

    tokens: list[str]
    """Vocab entries in id order."""
    do_lower_case: bool
    """Lower-case and strip accents before splitting (uncased vocabs)."""
    tokenizer: Tokenizer
    """The ``tokenizers`` pipeline (normalizer, pre-tokenizer, WordPiece model)."""
    strip_accents: bool | None = None
    """Strip accents (NFD, combining marks dropped); ``None`` at construction resolves to ``do_lower_case``."""

    def __post_init__(self) -> None:
        self.strip_accents = resolve_strip_accents(self.strip_accents, self.do_lower_case)

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], do_lower_case: bool,
                    strip_accents: bool | None = None) -> WordPieceTokenizer:
        tokenizer = Tokenizer(_wordpiece_model(tokens))
        tokenizer.normalizer = _normalizer(do_lower_case, strip_accents)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        return cls(list(tokens), do_lower_case, tokenizer, strip_accents)

    @classmethod
    def from_vocab_file(cls, path: str, do_lower_case: bool, strip_accents: bool | None = None) -> WordPieceTokenizer:
        return cls.from_tokens(read_vocab_file(path), do_lower_case, strip_accents)

    def token_id(self, token: str) -> int:
        """Id of ``token`` (the last line holding it); ``KeyError`` if absent."""
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise KeyError(token)
        return found

    @property
    def cls_token_id(self) -> int:
        return self.token_id("[CLS]")

    @property
    def sep_token_id(self) -> int:
        return self.token_id("[SEP]")

    @property
    def pad_token_id(self) -> int:
        return self.token_id("[PAD]")

    def encode_batch(self, texts: Sequence[str]) -> list[Encoding]:
        """Encodings (``ids``, ``tokens``, ``offsets`` into each original text) of plain strings."""
        return self.tokenizer.encode_batch(list(texts), add_special_tokens=False) if texts else []

    def encode_words_batch(self, sentences: Sequence[Sequence[str]]) -> list[Encoding]:
        """Encodings of pre-split sentences (lists of words); ``word_ids`` maps each piece to its word index."""
        if not sentences:
            return []
        return self.tokenizer.encode_batch([list(s) for s in sentences], is_pretokenized=True,
                                           add_special_tokens=False)


def hf_tokenizer_json(tokens: Sequence[str], do_lower_case: bool, model_max_length: int = 512, *,
                      strip_accents: bool | None = None) -> str:
    """The ``tokenizer.json`` of a Hugging Face fast BERT tokenizer for this vocab.

    Same normalizer / pre-tokenizer / WordPiece as ``WordPieceTokenizer``, plus the special tokens as added
    tokens (never split), the ``[CLS] $A [SEP] $B:1 [SEP]:1`` template (token type 1 for the second
    segment), and the ``##``-joining decoder, as ``tokenizers``' ``BertWordPieceTokenizer`` sets them up.
    The one difference from ``WordPieceTokenizer``: a literal ``[SEP]`` (or other special token) inside the
    text stays one token here, as in every Hugging Face BERT tokenizer, while the original (and bertprep's
    fine-tuning) splits it into ``[``, ``sep``, ``]``.
    ``model_max_length`` is not part of this file (see ``hf_tokenizer_config``); it is accepted for symmetry.
    ``strip_accents`` is written out resolved (``None`` -> ``do_lower_case``).
    """
    del model_max_length
    tokenizer = Tokenizer(_wordpiece_model(tokens))
    tokenizer.normalizer = _normalizer(do_lower_case, strip_accents)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer.to_str(pretty=True)


def hf_tokenizer_config(do_lower_case: bool, model_max_length: int = 512, *,
                        strip_accents: bool | None = None) -> dict:
    """``tokenizer_config.json`` for ``transformers.AutoTokenizer`` (a ``BertTokenizer`` on tokenizer.json).

    ``strip_accents`` is written resolved, never ``null``: ``transformers`` rebuilds the tokenizer.json's
    normalizer from these settings, and its ``null`` means "as ``do_lower_case``", which would strip the
    accents (and split the Hangul syllables) of a tokenizer built without stripping."""
    return {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": do_lower_case,
        "strip_accents": resolve_strip_accents(strip_accents, do_lower_case),
        "tokenize_chinese_chars": True,
        "model_max_length": model_max_length,
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "clean_up_tokenization_spaces": True,
    }


def do_lower_case_of_tokenizer_json(text: str) -> bool | None:
    """``lowercase`` of a ``tokenizer.json``'s ``BertNormalizer`` (None when it has none)."""
    spec = json.loads(text)
    normalizer = spec.get("normalizer") or {}
    stack = [normalizer]
    while stack:
        item = stack.pop()
        if item.get("type") == "BertNormalizer":
            return bool(item.get("lowercase", True))
        if item.get("type") == "Lowercase":
            return True
        stack.extend(item.get("normalizers", []))
    return None


def strip_accents_of_tokenizer_json(text: str) -> bool | None:
    """Effective ``strip_accents`` of a ``tokenizer.json``'s normalizer (``null`` follows its ``lowercase``);
    None when it does not say."""
    return normalizer_settings(json.loads(text).get("normalizer"))[1]


__all__ = [
    "MAX_INPUT_CHARS_PER_WORD", "SPECIAL_TOKENS", "WordPieceTokenizer", "do_lower_case_of_tokenizer_json",
    "hf_tokenizer_config", "hf_tokenizer_json", "looks_cased", "read_vocab_file", "strip_accents_of_tokenizer_json",
]
