"""WordPiece tokenization that reproduces the original BERT generator's, through Hugging Face ``tokenizers``.

Source: google-research/bert ``tokenization.py`` (``FullTokenizer`` = ``BasicTokenizer`` + greedy
longest-match-first ``WordpieceTokenizer``), restated in ``design/reference-algorithm.md`` ("Precise
details for exact reproduction"). The equivalent ``tokenizers`` pipeline is ``BertNormalizer`` +
``BertPreTokenizer`` + ``WordPiece(max_input_chars_per_word=200)`` with **no added special tokens**: a
literal ``[SEP]`` in the text is split into ``[``, ``sep``, ``]`` exactly as the original does, and a word of
101-200 characters becomes word pieces, not ``[UNK]`` (the ready-made ``BertWordPieceTokenizer`` gets both
wrong).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from apache_beam.io.filesystems import FileSystems
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from bertprep.pipeline.schema import vocab_sha256

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_INPUT_CHARS_PER_WORD = 200  # the original WordpieceTokenizer's limit (HF's default is 100)


class VocabError(ValueError):
    """A vocab file that cannot be used; the message names the file and what to do."""


@dataclass
class Vocab:
    """A WordPiece vocabulary with the original generator's semantics.

    Attributes:
        tokens: every entry in file order (line number = id), specials and ``[unusedN]`` included.
        token_to_id: token -> id. As in the original ``load_vocab`` (an ``OrderedDict`` assignment), a
            duplicate entry maps to its *last* line.
        vocab_words: the distinct entries in order of first appearance: the list the original draws
            random replacement tokens from (``list(vocab.keys())``).
        do_lower_case: the casing the vocab was made for, when known (``tokenizer.json``), else ``None``.
        source: where it was loaded from.
    """

    tokens: list[str]
    token_to_id: dict[str, int]
    vocab_words: list[str]
    do_lower_case: bool | None = None
    source: str = ""
    _sha256: str | None = field(default=None, repr=False)

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], *, do_lower_case: bool | None = None, source: str = "") -> "Vocab":
        token_to_id: dict[str, int] = {}
        for index, token in enumerate(tokens):
            token_to_id[token] = index  # later duplicates win, first position kept in key order
        vocab = cls(list(tokens), token_to_id, list(token_to_id), do_lower_case, source)
        vocab.check()
        return vocab

    def check(self) -> None:
        """Raise :class:`VocabError` unless [UNK], [CLS], [SEP] and [MASK] are present."""
        missing = [t for t in REQUIRED_TOKENS if t not in self.token_to_id]
        if missing:
            raise VocabError(
                f"{self.source or 'vocab'}: missing special token(s) {', '.join(missing)}; a BERT vocab needs "
                "[UNK], [CLS], [SEP] and [MASK] (upper-case, one per line). Use a vocab from "
                "`bertprep build-vocab` or Google's vocab.txt"
            )

    @property
    def size(self) -> int:
        """Number of ids (= lines of vocab.txt); the model's ``vocab_size``."""
        return len(self.tokens)

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = vocab_sha256(self.tokens)
        return self._sha256

    def special_token_ids(self) -> dict[str, int]:
        return {t: self.token_to_id[t] for t in SPECIAL_TOKENS if t in self.token_to_id}

    def looks_cased(self) -> bool:
        """True when the vocab has upper-case word pieces outside the bracketed special entries."""
        upper = 0
        for token in self.tokens:
            if token.startswith("[") and token.endswith("]"):
                continue
            if any(c.isupper() for c in token):
                upper += 1
                if upper >= 20:
                    return True
        return False


def _read_text(path: str) -> str:
    if not FileSystems.exists(path):  # a missing gs:// object raises google's NotFound (not an OSError) on open
        raise VocabError(f"{path}: vocab file not found")
    try:
        with FileSystems.open(path) as f:
            return f.read().decode("utf-8")
    except FileNotFoundError as err:
        raise VocabError(f"{path}: vocab file not found") from err
    except OSError as err:
        if "not found" in str(err).lower() or "no such file" in str(err).lower():
            raise VocabError(f"{path}: vocab file not found") from err
        raise
    except UnicodeDecodeError as err:
        raise VocabError(f"{path}: not UTF-8 text ({err}); a vocab.txt has one UTF-8 token per line") from err


def load_vocab(path: str) -> Vocab:
    """Load a ``vocab.txt`` (one token per line, line number = id) or a Hugging Face ``tokenizer.json``.

    A ``vocab.txt`` is read as the original ``tokenization.load_vocab`` does: each line stripped with
    ``str.strip()``, ids counted by line. From a ``tokenizer.json`` the WordPiece model's vocab is taken
    (ids must be 0..n-1) and ``do_lower_case`` from its ``BertNormalizer``.

    Raises:
        VocabError: the file is missing, empty, not UTF-8, not a WordPiece tokenizer.json, or lacks
            [UNK]/[CLS]/[SEP]/[MASK].
    """
    text = _read_text(path)
    if path.endswith(".json") or text.lstrip().startswith("{"):
        return _vocab_from_tokenizer_json(path, text)
    if not text.strip():
        raise VocabError(f"{path}: the vocab file is empty")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return Vocab.from_tokens([line.strip() for line in lines], source=path)


def _vocab_from_tokenizer_json(path: str, text: str) -> Vocab:
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise VocabError(f"{path}: not valid JSON ({err}); pass a vocab.txt or a tokenizer.json") from err
    model = spec.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise VocabError(
            f"{path}: not a WordPiece tokenizer.json (model type {model.get('type')!r}); BERT needs WordPiece"
        )
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise VocabError(f"{path}: WordPiece vocab ids are not contiguous from 0")
    do_lower_case = _lowercase_of(spec.get("normalizer"))
    return Vocab.from_tokens([t for t, _ in by_id], do_lower_case=do_lower_case, source=path)


def _lowercase_of(normalizer: dict | None) -> bool | None:
    if not normalizer:
        return None
    if normalizer.get("type") == "BertNormalizer":
        return bool(normalizer.get("lowercase", True))
    if normalizer.get("type") == "Sequence":
        for item in normalizer.get("normalizers", []):
            found = _lowercase_of(item)
            if found is not None:
                return found
    if normalizer.get("type") == "Lowercase":
        return True
    return None


def check_casing(vocab: Vocab, do_lower_case: bool) -> str | None:
    """A warning text when ``do_lower_case`` obviously does not match the vocab, else ``None``.

    The original generator has the same trap (its ``validate_case_matches_checkpoint``): lower-casing
    text for a cased vocab loses every capital; not lower-casing for an uncased vocab turns every
    capitalised word into [UNK] or odd pieces.
    """
    if vocab.do_lower_case is not None and vocab.do_lower_case != do_lower_case:
        return (
            f"{vocab.source}: the tokenizer was built with lowercase={vocab.do_lower_case} but "
            f"do_lower_case={do_lower_case}; pass {'--do-lower-case' if vocab.do_lower_case else '--no-do-lower-case'}"
        )
    cased = vocab.looks_cased()
    if cased and do_lower_case:
        return (
            f"{vocab.source}: the vocab has upper-case word pieces (a cased vocab) but do_lower_case is on; "
            "pass --no-do-lower-case"
        )
    if not cased and not do_lower_case:
        return (
            f"{vocab.source}: the vocab has no upper-case word pieces (an uncased vocab) but do_lower_case "
            "is off; pass --do-lower-case"
        )
    return None


def build_tokenizer(vocab: Vocab, do_lower_case: bool) -> Tokenizer:
    """The original ``FullTokenizer`` as a Hugging Face ``Tokenizer`` (no special tokens added)."""
    tokenizer = Tokenizer(
        models.WordPiece(
            vocab=dict(vocab.token_to_id),
            unk_token="[UNK]",
            continuing_subword_prefix="##",
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


# BertNormalizer on a pure-ASCII string (clean_text, then lowercase; handle_chinese_chars and strip_accents
# change no ASCII character): \t \n \r become a space, every other ASCII control character (Cc: 0x00-0x1f,
# 0x7f) is removed. Same rules as the original ``BasicTokenizer._clean_text`` (``_is_whitespace``,
# ``_is_control``) and tokenizers' ``BertNormalizer::do_clean_text``.
_ASCII_CLEAN = {c: None for c in (*range(0x00, 0x20), 0x7F)} | {ord("\t"): " ", ord("\n"): " ", ord("\r"): " "}


class SentenceEncoder:
    """Encodes sentences to word-piece ids with :func:`build_tokenizer` in batches (Rust, multi-threaded).

    ``encode(sentences)`` returns one ``list[int]`` per sentence; a sentence that tokenizes to nothing
    gives an empty list (the original drops such lines).

    Pure-ASCII sentences (most of an English corpus) skip the Rust normalizer: their normalization is a
    ``str.translate`` and ``str.lower`` in Python (see ``_ASCII_CLEAN``), and a second tokenizer without a
    normalizer encodes them. That saves about a quarter of the tokenization time (the normalizer tracks
    alignments per character) and gives the same ids (tested against the full pipeline, control
    characters included); other sentences go through the full pipeline.
    """

    def __init__(self, vocab: Vocab, do_lower_case: bool):
        self.vocab = vocab
        self.do_lower_case = do_lower_case
        self.tokenizer = build_tokenizer(vocab, do_lower_case)
        self.ascii_tokenizer = build_tokenizer(vocab, do_lower_case)
        self.ascii_tokenizer.normalizer = None
        self.unk_id = vocab.token_to_id["[UNK]"]

    def normalize_ascii(self, sentence: str) -> str:
        """``BertNormalizer`` applied to a pure-ASCII ``sentence``."""
        cleaned = sentence.translate(_ASCII_CLEAN)
        return cleaned.lower() if self.do_lower_case else cleaned

    def encode(self, sentences: Sequence[str]) -> list[list[int]]:
        if not sentences:
            return []
        ascii_at = [k for k, s in enumerate(sentences) if s.isascii()]
        if len(ascii_at) == len(sentences):
            encodings = self.ascii_tokenizer.encode_batch_fast([self.normalize_ascii(s) for s in sentences],
                                                               add_special_tokens=False)
            return [e.ids for e in encodings]
        out: list[list[int]] = [None] * len(sentences)  # type: ignore[list-item]
        if ascii_at:
            encodings = self.ascii_tokenizer.encode_batch_fast(
                [self.normalize_ascii(sentences[k]) for k in ascii_at], add_special_tokens=False)
            for k, e in zip(ascii_at, encodings):
                out[k] = e.ids
        other_at = [k for k, s in enumerate(sentences) if out[k] is None]
        encodings = self.tokenizer.encode_batch_fast([sentences[k] for k in other_at], add_special_tokens=False)
        for k, e in zip(other_at, encodings):
            out[k] = e.ids
        return out

    def encode_documents(self, documents: Iterable[Sequence[str]]) -> list[list[list[int]]]:
        """Encode several documents in one batch; returns per document the non-empty sentences' ids."""
        documents = list(documents)
        flat = [s for doc in documents for s in doc]
        ids = self.encode(flat)
        out, k = [], 0
        for doc in documents:
            sentences = [s for s in ids[k : k + len(doc)] if s]
            k += len(doc)
            out.append(sentences)
        return out
