"""Documents to word-piece ids as the original BERT generator tokenizes them, for ``make-shards``.

Source: google-research/bert ``tokenization.py`` (``FullTokenizer`` = ``BasicTokenizer`` + greedy
longest-match-first ``WordpieceTokenizer``); its exact behaviour is pinned by the golden tests against the
original's output. The tokenizer itself, vocab parsing and the special tokens are
``vocab_files.py``'s (Beam-free, shared with ``bert_model``); this module adds the pipeline's side: the
:class:`Vocab` (ids the instance algorithm draws from), :func:`load_vocab` from any Beam filesystem (``gs://``
too; Beam is imported only there), the casing / accent checks against the vocab and the fast
:class:`SentenceEncoder`.
"""

from __future__ import annotations

import logging
import os
import re
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer

from bertprep.core import storage, vocab_files
from bertprep.core.normalization import (
    check_vocab_strip_accents,
    looks_cased,
    resolve_strip_accents,
    strip_accents_flag,
)
from bertprep.core.pretrained_tokenizer import (
    PretrainedTokenizer,
    beside,
    load_pretrained_tokenizer,
    model_type_of,
    tokenizer_json_model_type,
)
from bertprep.core.schema import vocab_sha256
from bertprep.core.vocab_files import (  # noqa: F401  (re-exported: the pipeline's names for them)
    MAX_INPUT_CHARS_PER_WORD,
    REQUIRED_TOKENS,
    SPECIAL_TOKENS,
    VocabError,
)

log = logging.getLogger(__name__)


@dataclass
class Vocab:
    """A WordPiece vocabulary with the original generator's semantics.

    Attributes:
        tokens: every entry in file order (line number = id), specials and ``[unusedN]`` included.
        token_to_id: token -> id. As in the original ``load_vocab`` (an ``OrderedDict`` assignment), a
            duplicate entry maps to its *last* line (:func:`load_vocab` refuses a vocab.txt with one).
        vocab_words: the distinct entries in order of first appearance: the list the original draws
            random replacement tokens from (``list(vocab.keys())``).
        do_lower_case: the casing the vocab was made for, when known (``tokenizer.json``), else ``None``.
        source: where it was loaded from.
        strip_accents: the accent stripping the vocab was made with, when known (``tokenizer.json``: its
            ``BertNormalizer``'s ``strip_accents``, ``null`` meaning the same as ``lowercase``), else ``None``.
    """

    tokens: list[str]
    token_to_id: dict[str, int]
    vocab_words: list[str]
    do_lower_case: bool | None = None
    source: str = ""
    strip_accents: bool | None = None
    _sha256: str | None = field(default=None, repr=False)
    settings_source: str | None = None
    """The file ``do_lower_case`` / ``strip_accents`` come from when it is not ``source`` (the tokenizer.json
    beside a vocab.txt), for messages."""
    pretrained: PretrainedTokenizer | None = None
    """A BPE or Unigram ``tokenizer.json`` (a published model's, ``build-vocab --model bpe|unigram``): it
    tokenizes, names the special tokens and marks the word boundaries; None for BERT's WordPiece (the original
    tokenizer, :func:`build_tokenizer`)."""

    @classmethod
    def from_pretrained(cls, tokenizer: PretrainedTokenizer) -> Vocab:
        """The vocab of a BPE / Unigram tokenizer (every id, added tokens included)."""
        token_to_id = {t: i for i, t in enumerate(tokenizer.tokens)}
        return cls(
            list(tokenizer.tokens), token_to_id, list(token_to_id), source=tokenizer.source, pretrained=tokenizer
        )

    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[str],
        *,
        do_lower_case: bool | None = None,
        source: str = "",
        strip_accents: bool | None = None,
    ) -> Vocab:
        token_to_id: dict[str, int] = {}
        for index, token in enumerate(tokens):
            token_to_id[token] = index  # later duplicates win, first position kept in key order
        vocab = cls(
            list(tokens),
            token_to_id,
            list(token_to_id),
            do_lower_case=do_lower_case,
            source=source,
            strip_accents=strip_accents,
        )
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
        """Role (``[CLS]``, ``[SEP]``, ``[MASK]``, ``[PAD]``, ``[UNK]``, BERT's spelling) -> id: the shard
        manifest's ``special_token_ids``. RoBERTa's ``<s>`` has the role ``[CLS]``."""
        if self.pretrained is not None:
            return self.pretrained.special_token_ids()
        return vocab_files.special_token_ids(self.token_to_id)

    def is_continuation(self) -> list[bool]:
        """Per id, whether the piece continues the word before it (whole-word masking): WordPiece's ``##``
        pieces; a BPE / Unigram tokenizer's by its word marks (``PretrainedTokenizer.is_continuation``; all
        False when it has none, see :func:`check_tokenizer_options`)."""
        if self.pretrained is not None:
            return self.pretrained.is_continuation() or [False] * self.size
        return [t.startswith(vocab_files.CONTINUING_SUBWORD_PREFIX) for t in self.tokens]

    def files(self) -> dict[str, str] | None:
        """The tokenizer files make-shards copies beside the shards: a BPE / Unigram tokenizer's
        ``tokenizer.json`` (and its config files); None for WordPiece (its ``vocab.txt`` is written from
        :attr:`tokens`)."""
        return dict(self.pretrained.files) if self.pretrained is not None else None

    def looks_cased(self) -> bool:
        """True when the vocab has upper-case word pieces outside the bracketed special entries."""
        return looks_cased(self.tokens)


def _read_text(path: str) -> str:
    from apache_beam.io.filesystems import FileSystems  # (here only: the rest of the module is Beam-free)

    refusal = storage.beam_read_refusal(path, "vocab")
    if refusal:
        raise VocabError(refusal)
    if not storage.is_remote(path) and os.path.isdir(path):
        raise VocabError(f"{path} is a directory without a vocab.txt or tokenizer.json; pass the vocab file itself")
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
        raise vocab_files.not_utf8(path, err) from err


def load_vocab(path: str) -> Vocab:
    """Load a ``vocab.txt`` (one token per line, line number = id), a Hugging Face ``tokenizer.json`` of any model
    type, or a local directory holding one (a model's or ``build-vocab``'s).

    A ``vocab.txt`` is read as the original ``tokenization.load_vocab`` does: each line stripped with
    ``str.strip()``, ids counted by line. From a WordPiece ``tokenizer.json`` the WordPiece model's vocab is
    taken (ids must be 0..n-1), ``do_lower_case`` and ``strip_accents`` from its ``BertNormalizer``. A vocab.txt
    with a ``tokenizer.json`` beside it (what build-vocab and export write) takes the two settings from that
    tokenizer.json, which must hold the same vocab: the vocab carries its own normalisation, so make-shards
    follows it (:func:`resolve_text_settings`). Google's vocab.txt alone records nothing. A BPE or Unigram
    ``tokenizer.json`` (RoBERTa's, ModernBERT's, ``build-vocab --model bpe``'s) is read with the
    ``tokenizer_config.json`` and ``special_tokens_map.json`` beside it (:class:`PretrainedTokenizer`: it
    tokenizes, names the special tokens, marks the word boundaries). A directory gives its BPE / Unigram
    ``tokenizer.json``, else its ``vocab.txt``, else its WordPiece ``tokenizer.json``.

    Raises:
        VocabError: the file is missing (or a directory without either), empty, not UTF-8, not a tokenizer.json,
            lacks [UNK]/[CLS]/[SEP]/[MASK] (a BPE / Unigram tokenizer: names no [CLS]/[SEP]/[MASK]/[PAD] token),
            or (vocab.txt) lists a token twice: the original silently gives the token its last line's id, which
            moves ids (a second ``[MASK]`` on line 201 makes [MASK] 200); or the tokenizer.json beside a
            vocab.txt holds another vocab.
    """
    path = _vocab_file_in(path)
    text = _read_text(path)
    if path.endswith(".json") or text.lstrip().startswith("{"):
        if model_type_of(text) not in (None, "WordPiece"):
            return Vocab.from_pretrained(_load_pretrained(path, text))
        tokens, do_lower_case, strip_accents = vocab_files.parse_tokenizer_json(text, path)
        return Vocab.from_tokens(tokens, do_lower_case=do_lower_case, source=path, strip_accents=strip_accents)
    tokens = vocab_files.parse_vocab_txt(text, path)
    beside = _tokenizer_json_beside(path)
    if beside is None:  # Google's plain vocab.txt: nothing recorded, today's defaults
        return Vocab.from_tokens(tokens, source=path)
    do_lower_case, strip_accents = vocab_files.settings_of_tokenizer_json_beside(tokens, _read_text(beside), beside)
    vocab = Vocab.from_tokens(tokens, do_lower_case=do_lower_case, source=path, strip_accents=strip_accents)
    vocab.settings_source = beside
    return vocab


def _vocab_file_in(path: str) -> str:
    """``path``, or for a local directory the vocab file in it: a BPE / Unigram ``tokenizer.json``, else
    ``vocab.txt``, else a ``tokenizer.json`` (an absent one is refused by :func:`_read_text`)."""
    if storage.is_remote(path) or not os.path.isdir(path):
        return path
    tokenizer_json = os.path.join(path, vocab_files.TOKENIZER_FILE)
    vocab_txt = os.path.join(path, vocab_files.VOCAB_FILE)
    if os.path.isfile(tokenizer_json) and tokenizer_json_model_type(tokenizer_json) not in ("WordPiece", None):
        return tokenizer_json
    for candidate in (vocab_txt, tokenizer_json):
        if os.path.isfile(candidate):
            return candidate
    return path


def _load_pretrained(path: str, text: str) -> PretrainedTokenizer:
    """The BPE / Unigram tokenizer of ``path`` (text ``text``), with the config files beside it, on any file
    system (``pretrained_tokenizer.load_pretrained_tokenizer`` reading through Beam's ``FileSystems``)."""
    from apache_beam.io.filesystems import FileSystems

    def read_text(where: str) -> str | None:
        if where == path:
            return text
        return _read_text(where) if FileSystems.exists(where) else None

    return load_pretrained_tokenizer(path, read_text)


def _tokenizer_json_beside(path: str) -> str | None:
    """The ``tokenizer.json`` in the directory of the vocab.txt ``path`` (build-vocab and export write both),
    or None."""
    from apache_beam.io.filesystems import FileSystems

    other = beside(path, vocab_files.TOKENIZER_FILE)
    try:
        return other if FileSystems.exists(other) else None
    except Exception:  # a filesystem that cannot tell (no credentials...): as without one
        return None


def _casing_flag(do_lower_case: bool) -> str:
    return "--do-lower-case" if do_lower_case else "--no-do-lower-case"


def check_casing(vocab: Vocab, do_lower_case: bool) -> str | None:
    """Check ``do_lower_case`` against the vocab: a warning text when it obviously does not match, else ``None``.

    The original generator has the same trap (its ``validate_case_matches_checkpoint``): lower-casing
    text for a cased vocab loses every capital; not lower-casing for an uncased vocab turns every
    capitalised word into [UNK] or odd pieces. A ``tokenizer.json`` records its ``lowercase``: the other
    setting is refused. A ``vocab.txt`` records nothing, and whether it looks cased (upper-case pieces) is a
    guess, so a mismatch there is only a warning.

    Raises:
        VocabError: the tokenizer.json records the other casing (the message names both settings and the fix;
            ``option`` is the flag given).
    """
    if vocab.do_lower_case is not None and vocab.do_lower_case != do_lower_case:
        raise VocabError(
            f"{vocab.settings_source or vocab.source}: the tokenizer was built with "
            f"lowercase={vocab.do_lower_case} but "
            f"{_casing_flag(do_lower_case)} was given; shards must be tokenized as their vocab was built: pass "
            f"{_casing_flag(vocab.do_lower_case)} (or leave it out), or build a vocab with "
            f"`bertprep build-vocab {_casing_flag(do_lower_case)}`",
            option=_casing_flag(do_lower_case),
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


def default_strip_accents(vocab: Vocab) -> bool | None:
    """make-shards' ``strip_accents`` when none is given: the tokenizer.json's when it differs from its
    ``lowercase`` (a vocab built with ``--no-strip-accents``), else ``None`` (the same as ``do_lower_case``,
    the original's behaviour)."""
    recorded, lower = vocab.strip_accents, vocab.do_lower_case
    if recorded is not None and lower is not None and recorded != lower:
        return recorded
    return None


def check_strip_accents(
    vocab: Vocab, do_lower_case: bool, strip_accents: bool | None, *, explicit: bool = False
) -> str | None:
    """Check the accent stripping of a run against the vocab: a warning text, or ``None``.

    A ``tokenizer.json`` records its ``strip_accents``; a run that ``explicit``-ly asks for the other one
    is refused, since every word the two settings normalize differently would tokenize to pieces the
    vocab was not built for. (Without ``explicit``, a difference follows from a ``do_lower_case`` that
    differs from the vocab's, which :func:`check_casing` reports.) A ``vocab.txt`` records nothing; its
    Korean entries tell (:func:`~bertprep.core.normalization.check_vocab_strip_accents`).

    Raises:
        VocabError: ``explicit`` and the tokenizer.json records the other setting (message names the flag).
    """
    strip = resolve_strip_accents(strip_accents, do_lower_case)
    if vocab.strip_accents is not None:
        if explicit and vocab.strip_accents != strip:
            raise VocabError(
                f"{vocab.settings_source or vocab.source}: the tokenizer was built with "
                f"strip_accents={vocab.strip_accents} but "
                f"{strip_accents_flag(strip)} was given; shards must be tokenized as their vocab was built: pass "
                f"{strip_accents_flag(vocab.strip_accents)} (or leave it out), or build a vocab with "
                f"`bertprep build-vocab {strip_accents_flag(strip)}`",
                option=strip_accents_flag(strip),
            )
        return None
    return check_vocab_strip_accents(vocab.tokens, strip, vocab.source or "vocab")


def resolve_text_settings(
    vocab: Vocab, do_lower_case: bool | None, strip_accents: bool | None
) -> tuple[bool, bool | None, list[str]]:
    """make-shards' casing and accent stripping for ``vocab``, from the options given (``None``: not given).

    ``do_lower_case`` defaults to the tokenizer.json's setting, else on (the original's default);
    ``strip_accents`` to :func:`default_strip_accents`. Both are then checked against the vocab
    (:func:`check_casing`, :func:`check_strip_accents`).

    Returns:
        ``(do_lower_case, strip_accents, warnings)``: the settings to run with and the warning texts to show.
    Raises:
        VocabError: ``do_lower_case`` or ``strip_accents`` was given and contradicts the tokenizer.json's (the
            message names both settings and the fix; ``option`` is the flag given).
    """
    if vocab.pretrained is not None:
        return _pretrained_text_settings(vocab, do_lower_case, strip_accents)
    if do_lower_case is None:
        do_lower_case = vocab.do_lower_case if vocab.do_lower_case is not None else True
    warnings = [w for w in (check_casing(vocab, do_lower_case),) if w]
    explicit = strip_accents is not None
    if strip_accents is None:
        strip_accents = default_strip_accents(vocab)
    warning = check_strip_accents(vocab, do_lower_case, strip_accents, explicit=explicit)
    if warning:
        warnings.append(warning)
    return do_lower_case, strip_accents, warnings


def _pretrained_text_settings(
    vocab: Vocab, do_lower_case: bool | None, strip_accents: bool | None
) -> tuple[bool, bool, list[str]]:
    """:func:`resolve_text_settings` for a BPE / Unigram tokenizer: its own normaliser decides, so
    ``--do-lower-case`` and ``--strip-accents`` (either way) are refused; ``(False, False, [])`` (bertprep changes
    no text before the tokenizer)."""
    assert vocab.pretrained is not None, "resolve_text_settings asks this of a BPE / Unigram vocab only"
    for value, flag in ((do_lower_case, "do-lower-case"), (strip_accents, "strip-accents")):
        if value is not None:
            given = f"--{'' if value else 'no-'}{flag}"
            raise VocabError(
                f"{vocab.source}: a {vocab.pretrained.model_type} tokenizer.json normalises text itself (its "
                f"normalizer); {given} applies to BERT WordPiece vocabs only: drop it",
                option=given,
            )
    return False, False, []


def check_tokenizer_options(vocab: Vocab, masking_scheme: str, word_segmenter: str | None) -> None:
    """Refuse make-shards options a BPE / Unigram tokenizer cannot serve (WordPiece: nothing to check).

    Raises:
        VocabError: ``--word-segmenter`` (it groups WordPiece pieces; these tokenizers mark their own word
            starts), or a word-level ``--masking-scheme`` with a tokenizer whose pieces carry no word marks.
    """
    if vocab.pretrained is None:
        return
    if word_segmenter:
        raise VocabError(
            f"--word-segmenter groups BERT WordPiece pieces into words; {vocab.source} is a "
            f"{vocab.pretrained.model_type} tokenizer, whose pieces mark their own word starts: drop --word-segmenter",
            option="--word-segmenter",
        )
    if masking_scheme != "token" and vocab.pretrained.is_continuation() is None:
        raise VocabError(
            f"{vocab.source}: its pieces carry no word marks (Ġ, ▁ or ##), so --masking-scheme {masking_scheme} "
            "has no words to mask; use --masking-scheme token",
            option="--masking-scheme",
        )


def sentence_encoder(
    vocab: Vocab, do_lower_case: bool, *, strip_accents: bool | None = None
) -> SentenceEncoder | PretrainedSentenceEncoder:
    """make-shards' encoder for ``vocab``: :class:`SentenceEncoder` (WordPiece, the original's ids) or
    :class:`PretrainedSentenceEncoder` (a BPE / Unigram tokenizer)."""
    if vocab.pretrained is not None:
        return PretrainedSentenceEncoder(vocab)
    return SentenceEncoder(vocab, do_lower_case, strip_accents=strip_accents)


class PretrainedSentenceEncoder:
    """:class:`SentenceEncoder`'s interface for a BPE / Unigram tokenizer
    (``PretrainedTokenizer.encode_sentences``: each sentence encoded as it reads after a space where the
    tokenizer marks words so, no special tokens recognised in the text)."""

    def __init__(self, vocab: Vocab):
        assert vocab.pretrained is not None, f"{vocab.source} is a WordPiece vocab: SentenceEncoder serves it"
        self.vocab = vocab
        self.pretrained = vocab.pretrained
        unk = self.pretrained.unk_token_id
        self.unk_id = -1 if unk is None else unk  # (a byte-level BPE has none: every byte is a piece)

    def encode(self, sentences: Sequence[str]) -> list[list[int]]:
        """Piece ids of each sentence (an empty list for a sentence that tokenizes to nothing)."""
        return self.pretrained.encode_sentences(list(sentences))

    def encode_flat(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``encode`` concatenated: (ids ``uint32``, each sentence's length ``int64``)."""
        ids = self.encode(sentences)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((i for row in ids for i in row), dtype=np.uint32, count=int(lengths.sum()))
        return flat, lengths

    def encode_documents(self, documents: Iterable[Sequence[str]]) -> list[list[list[int]]]:
        """Per document the non-empty sentences' ids."""
        return [[ids for ids in self.encode(doc) if ids] for doc in documents]


def build_tokenizer(vocab: Vocab, do_lower_case: bool, strip_accents: bool | None = None) -> Tokenizer:
    """:func:`vocab_files.build_tokenizer` (the original ``FullTokenizer``, no special tokens) for a
    :class:`Vocab`."""
    return vocab_files.build_tokenizer(vocab.token_to_id, do_lower_case, strip_accents)


# BertNormalizer on a pure-ASCII string (clean_text, then lowercase; handle_chinese_chars and strip_accents
# change no ASCII character: NFD of ASCII is itself and it has no Mn mark, so the shortcut is the same with
# and without strip_accents): \t \n \r become a space, every other ASCII control character (Cc: 0x00-0x1f,
# 0x7f) is removed. Same rules as the original ``BasicTokenizer._clean_text`` (``_is_whitespace``,
# ``_is_control``) and tokenizers' ``BertNormalizer::do_clean_text``.
_ASCII_CLEAN = dict.fromkeys((*range(0x00, 0x20), 0x7F)) | {ord("\t"): " ", ord("\n"): " ", ord("\r"): " "}


# After ``_ASCII_CLEAN`` the only whitespace left in an ASCII string is " ", and every printable ASCII
# character that is not a letter or digit is punctuation to ``BertPreTokenizer`` (it splits on whitespace,
# then isolates each punctuation character): so its pre-tokens are these matches. A batch of sentences is
# normalized and split as one string, joined with a control character that the batch's own cleaning
# keeps (it is removed inside sentences, so a batch where it occurs takes a slower path) and that then
# matches as a token of its own: the sentence break.
_SENTENCE_BREAK = "\x1e"
_ASCII_CLEAN_BATCH = {k: v for k, v in _ASCII_CLEAN.items() if k != ord(_SENTENCE_BREAK)}
_ASCII_PRE_TOKENS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9 ]")


class SentenceEncoder:
    """Encodes sentences to word-piece ids with :func:`build_tokenizer` (Hugging Face ``tokenizers``).

    ``encode(sentences)`` returns one ``list[int]`` per sentence; a sentence that tokenizes to nothing
    gives an empty list (the original drops such lines). ``encode_flat`` gives the same ids concatenated
    in a ``uint32`` array, with each sentence's length.

    Pure-ASCII sentences (most of an English corpus) take a shortcut with the same result: normalization
    is a ``str.translate`` and ``str.lower`` (``BertNormalizer`` on ASCII, see ``_ASCII_CLEAN``),
    pre-tokenization a regular expression (``BertPreTokenizer`` on ASCII, ``_ASCII_PRE_TOKENS``), both over
    a whole batch of sentences at once, and WordPiece runs through ``tokenizers`` once per distinct word:
    the word pieces of up to ``cache_size`` words are kept (all dropped when the next batch would overflow
    them; one batch's words are always kept) and a batch's ids are gathered from them with numpy.
    Natural text repeats its words (Zipf), so this costs a fraction of encoding every sentence in
    ``tokenizers``, whose per-token bookkeeping (alignments, token strings, Python objects per encoding)
    is most of its time. Other sentences go through the full pipeline. The
    ids are identical (tested on real text and on random ASCII with control characters, both casings, with
    and without accent stripping, which changes no ASCII character).

    ``strip_accents``: as in :func:`build_tokenizer` (``None``: the same as ``do_lower_case``).
    """

    def __init__(
        self, vocab: Vocab, do_lower_case: bool, cache_size: int = 500_000, *, strip_accents: bool | None = None
    ):
        self.vocab = vocab
        self.do_lower_case = do_lower_case
        self.strip_accents = resolve_strip_accents(strip_accents, do_lower_case)
        self.tokenizer = build_tokenizer(vocab, do_lower_case, strip_accents)
        self.ascii_tokenizer = build_tokenizer(vocab, do_lower_case, strip_accents)
        self.ascii_tokenizer.normalizer = None
        self.unk_id = vocab.token_to_id["[UNK]"]
        self.cache_size = cache_size
        self._clear_cache()

    def _clear_cache(self) -> None:
        # word -> index; index -> its pieces at _pieces[_first[index] : _first[index] + _count[index]]
        self._index: dict[str, int] = {_SENTENCE_BREAK: 0}
        self._pieces = array("I")
        self._first = array("q", [0])
        self._count = array("q", [0])

    def normalize_ascii(self, sentence: str) -> str:
        """``BertNormalizer`` applied to a pure-ASCII ``sentence``."""
        cleaned = sentence.translate(_ASCII_CLEAN)
        return cleaned.lower() if self.do_lower_case else cleaned

    def _encode_ascii(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids as ``uint32``, per-sentence lengths as ``int64``) of pure-ASCII sentences."""
        text = _SENTENCE_BREAK.join(sentences)
        if text.count(_SENTENCE_BREAK) == len(sentences) - 1:
            text = text.translate(_ASCII_CLEAN_BATCH)
        else:  # a sentence holds the break character itself: normalize sentence by sentence
            text = _SENTENCE_BREAK.join(s.translate(_ASCII_CLEAN) for s in sentences)
        words = _ASCII_PRE_TOKENS.findall(text.lower() if self.do_lower_case else text)
        index = self._index
        get = index.get
        word_index = [get(w, -1) for w in words]
        if -1 in word_index:  # words not seen yet: their pieces from tokenizers, once each
            missing = list({w for w, i in zip(words, word_index, strict=True) if i < 0})
            if len(index) + len(missing) > self.cache_size:
                self._clear_cache()
                index = self._index
                missing = list({w for w in words if w not in index})
            for word, encoding in zip(
                missing, self.ascii_tokenizer.encode_batch_fast(missing, add_special_tokens=False), strict=True
            ):
                index[word] = len(self._first)
                self._first.append(len(self._pieces))
                self._count.append(len(encoding.ids))
                self._pieces.extend(encoding.ids)
            word_index = [index[w] for w in words]
        word_rows = np.array(word_index, dtype=np.int64)
        first = np.frombuffer(self._first, dtype=np.int64)[word_rows]
        count = np.frombuffer(self._count, dtype=np.int64)[word_rows]  # 0 at sentence breaks
        ends = np.cumsum(count)
        total = int(ends[-1]) if len(ends) else 0
        # every piece: its word's first piece + its rank within the word
        piece_word = np.repeat(np.arange(len(count)), count)
        ranks = np.arange(total) - (ends - count)[piece_word]
        ids = np.frombuffer(self._pieces, dtype=np.uint32)[first[piece_word] + ranks]
        # sentence lengths: pieces between consecutive breaks
        breaks = ends[word_rows == 0]
        bounds = np.concatenate([[0], breaks, [total]])
        return ids, np.diff(bounds)

    def encode(self, sentences: Sequence[str]) -> list[list[int]]:
        """Word-piece ids of each sentence (an empty list for a sentence that tokenizes to nothing)."""
        ids, lengths = self.encode_flat(sentences)
        ids_list = ids.tolist()
        out, pos = [], 0
        for n in lengths.tolist():
            out.append(ids_list[pos : pos + n])
            pos += n
        return out

    def encode_flat(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``encode`` concatenated: (ids of every sentence in order, ``uint32``; each sentence's length,
        ``int64``, 0 for a sentence that tokenizes to nothing)."""
        n = len(sentences)
        if n == 0:
            return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
        is_ascii = np.fromiter((s.isascii() for s in sentences), dtype=bool, count=n)
        if is_ascii.all():
            return self._encode_ascii(sentences)
        ascii_at = np.flatnonzero(is_ascii)
        other_at = np.flatnonzero(~is_ascii)
        if len(ascii_at):
            ascii_ids, ascii_lengths = self._encode_ascii([sentences[k] for k in ascii_at.tolist()])
        else:
            ascii_ids, ascii_lengths = np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
        encodings = self.tokenizer.encode_batch_fast(
            [sentences[k] for k in other_at.tolist()], add_special_tokens=False
        )
        other_lists = [e.ids for e in encodings]
        other_lengths = np.fromiter(map(len, other_lists), dtype=np.int64, count=len(other_lists))
        other_ids = np.fromiter(
            (i for ids in other_lists for i in ids), dtype=np.uint32, count=int(other_lengths.sum())
        )
        # interleave the two groups back into sentence order: a gather over [ascii ids | other ids]
        lengths = np.empty(n, dtype=np.int64)
        lengths[ascii_at] = ascii_lengths
        lengths[other_at] = other_lengths
        source_start = np.empty(n, dtype=np.int64)
        source_start[ascii_at] = np.cumsum(ascii_lengths) - ascii_lengths
        source_start[other_at] = len(ascii_ids) + np.cumsum(other_lengths) - other_lengths
        ends = np.cumsum(lengths)
        sentence_of = np.repeat(np.arange(n), lengths)
        ranks = np.arange(int(ends[-1])) - (ends - lengths)[sentence_of]
        ids = np.concatenate([ascii_ids, other_ids])[source_start[sentence_of] + ranks]
        return ids, lengths

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
