"""Extend an existing WordPiece vocab with the most useful new pieces of a corpus (``build-vocab --extend``).

What comes in: a base vocab (``vocab.txt`` or ``tokenizer.json``, e.g. Google's uncased one), a corpus read
as ``build-vocab`` reads it, and ``extend_size`` (N). What goes out: the base vocab with at most N new
pieces, every existing id kept, written as ``build-vocab`` writes a vocab plus ``extension.json`` (what was
added, where and why). Entry points: :func:`read_base_vocab`, :func:`extend_vocab` (texts -> result) and
:func:`extend_vocab_files` (files -> files).

**Candidates.** A WordPiece vocab is trained on the corpus with Hugging Face ``tokenizers``
(``text.vocab.train_wordpiece``, the base vocab's normalisation; by default as many entries as the base
vocab): its entries that the base vocab lacks are the candidates.

**Ranking: tokens saved, greedily.** The corpus is counted as words (normalised and pre-tokenised exactly as
the tokenizer does). The *gain* of a candidate is how many fewer word pieces the whole corpus needs when the
candidate is added to the current vocab: ``sum over words of count(word) * (pieces now - pieces with it)``,
with WordPiece's greedy longest-match-first split. The candidate with the largest gain is added, the gains
of the others are brought up to date (lazy greedy: a gain is recomputed only when it reaches the top of the
queue), and so on until N pieces are added or no candidate saves a token. Ties: more occurrences, then the
piece's text. Chosen one by one, two pieces that would save the same tokens (``cyclopropane`` and
``##propane`` in one word) are not both taken. Words that are ``[UNK]`` under the base vocab (a character it
lacks) are left out: one new piece does not fix them; a piece that would make a word [UNK] (greedy matching
can strand the rest of a word) is not taken.

**Placement.** New pieces take the base vocab's ``[unusedK]`` slots first, in id order (their ids stay; a
model's embedding matrix keeps its size), then are appended after the last id.
"""

from __future__ import annotations

import heapq
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bertprep.core import strict_json
from bertprep.core.atomic import atomic_files
from bertprep.core.normalization import looks_cased, resolve_strip_accents
from bertprep.core.vocab_files import (
    CONTINUING_SUBWORD_PREFIX,
    SPECIAL_TOKENS,
    TOKENIZER_FILE,
    VOCAB_FILE,
    VocabError,
    build_tokenizer,
    is_unused_slot,
    parse_tokenizer_json,
    parse_vocab_txt,
    tokenizer_files,
    wordpiece_split,
)
from bertprep.pipeline.config import ReadOptions
from bertprep.pipeline.readers.base import DEFAULT_MAX_LINE_CHARS
from bertprep.pipeline.readers.segmentation import DEFAULT_SEGMENTER
from bertprep.pipeline.text.vocab import (
    DEFAULT_LIMIT_ALPHABET,
    DEFAULT_MIN_FREQUENCY,
    TrainedVocab,
    VocabConfig,
    _sentences_with_progress,
    check_output_dir,
    existing_outputs,
    train_wordpiece,
)

if TYPE_CHECKING:
    from bertprep.pipeline.readers import ReaderStats

#: The record of what ``--extend`` added, written beside vocab.txt.
EXTENSION_FILE = "extension.json"


# ------------------------------------------------------------------------------------------- base vocab


@dataclass
class BaseVocab:
    """The vocab being extended and the normalisation it was made with."""

    path: str
    tokens: list[str]
    do_lower_case: bool
    strip_accents: bool | None = None
    """Effective accent stripping; None follows ``do_lower_case`` (the original's rule)."""

    @property
    def unused_slots(self) -> list[int]:
        """Ids of the ``[unusedK]`` entries, ascending: where new pieces go first."""
        return [i for i, t in enumerate(self.tokens) if is_unused_slot(t)]


def _refuse_other_models(text: str, path: str) -> None:
    """Raise :class:`VocabError` for a BPE / Unigram ``tokenizer.json``: ``--extend`` extends WordPiece vocabs."""
    import json

    try:
        model = (json.loads(text).get("model") or {}).get("type")
    except (ValueError, AttributeError):
        return  # parse_tokenizer_json says what is wrong
    if model in ("BPE", "Unigram"):
        how = "merges ranked against the old ones" if model == "BPE" else "scores fitted with the old pieces"
        raise VocabError(
            f"{path} is a {model} tokenizer; --extend extends WordPiece vocabs only (a new {model} piece is reached "
            f"only through {how}, which adding entries does not give): continue pre-training with the tokenizer as "
            "it is (make-shards --vocab with its directory)"
        )


def read_base_vocab(path: str, do_lower_case: bool | None = None, strip_accents: bool | None = None) -> BaseVocab:
    """The vocab to extend: a ``vocab.txt``, a ``tokenizer.json`` or a directory holding one (tokenizer.json
    preferred, as it records the normalisation).

    The normalisation is the base vocab's: a ``tokenizer.json``'s normalizer, else (a bare ``vocab.txt``)
    uncased unless the vocab has upper-case entries (``normalization.looks_cased``). ``do_lower_case`` /
    ``strip_accents``, when given, must agree with it.

    Raises:
        FileNotFoundError: no such file (or no vocab in the directory).
        VocabError (a ValueError): the file is not a vocab, lacks one of ``[PAD] [UNK] [CLS] [SEP] [MASK]``,
            or a given setting contradicts the vocab (``.option`` names the option).
    """
    if os.path.isdir(path):
        for name in (TOKENIZER_FILE, VOCAB_FILE):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            raise FileNotFoundError(f"--extend {path}: the directory holds no {TOKENIZER_FILE} or {VOCAB_FILE}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"--extend {path}: no such file; pass a vocab.txt or tokenizer.json")
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            text = f.read()
        except UnicodeDecodeError as err:
            raise VocabError(f"{path}: not UTF-8 text ({err}); pass a vocab.txt or tokenizer.json") from None
    if text.lstrip().startswith("{"):
        _refuse_other_models(text, path)
        tokens, recorded_lower, recorded_strip = parse_tokenizer_json(text, path)
        source = "its tokenizer.json normalizer"
    else:
        tokens = parse_vocab_txt(text, path)
        recorded_lower, recorded_strip = not looks_cased(tokens), None
        source = f"its entries ({'upper-case pieces' if not recorded_lower else 'no upper-case piece'})"
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise VocabError(
            f"{path}: the vocab to extend lacks the special token(s) {', '.join(missing)}; a BERT vocab needs "
            f"{', '.join(SPECIAL_TOKENS)} (the model and the shards look them up by name)"
        )
    if recorded_lower is None:
        recorded_lower = True if do_lower_case is None else do_lower_case
    if do_lower_case is not None and do_lower_case != recorded_lower:
        raise VocabError(
            f"{path} is {'uncased' if recorded_lower else 'cased'} ({source}) but "
            f"{'--lowercase' if do_lower_case else '--cased'} was given; an extension keeps the base vocab's "
            f"casing: drop the option (or pass {'--lowercase' if recorded_lower else '--cased'})",
            option="--lowercase/--cased",
        )
    if strip_accents is not None and recorded_strip is not None and strip_accents != recorded_strip:
        raise VocabError(
            f"{path} was made with strip_accents={recorded_strip} but "
            f"{'--strip-accents' if strip_accents else '--no-strip-accents'} was given; an extension keeps the "
            "base vocab's normalisation: drop the option",
            option="--strip-accents/--no-strip-accents",
        )
    return BaseVocab(path, tokens, recorded_lower, recorded_strip if recorded_strip is not None else strip_accents)


# --------------------------------------------------------------------------------------------- ranking


@dataclass(frozen=True)
class AddedPiece:
    """One piece an extension added."""

    piece: str
    id: int
    count: int
    """Occurrences of the piece in the corpus tokenised with the extended vocab."""
    saved_tokens: int
    """Word pieces the corpus needs fewer when the piece was added (its gain when chosen)."""
    replaced: str | None
    """The ``[unusedK]`` entry whose id it took; None when appended."""


@dataclass
class ExtendedVocab:
    """What :func:`extend_vocab` returns."""

    base: BaseVocab
    tokens: list[str]
    """The extended vocab in id order: the base's with ``[unusedK]`` slots filled, then appended pieces."""
    added: list[AddedPiece]
    trained: TrainedVocab
    """The corpus vocab the candidates came from."""
    candidates: int
    """Entries of the trained vocab that the base vocab lacks."""
    words: int
    """Word occurrences in the corpus (pre-tokenised)."""
    pieces_before: int
    """Word pieces of the corpus under the base vocab (words that are [UNK] under it left out)."""
    pieces_after: int
    """The same words' pieces under the extended vocab."""
    seconds: float = 0.0

    def record(self) -> dict:
        """The content of ``extension.json``."""
        return {
            "base_vocab": self.base.path,
            "base_size": len(self.base.tokens),
            "vocab_size": len(self.tokens),
            "do_lower_case": self.base.do_lower_case,
            "strip_accents": resolve_strip_accents(self.base.strip_accents, self.base.do_lower_case),
            "rule": "greedy: the candidate saving the most word pieces of the corpus, gains updated after each",
            "candidates": self.candidates,
            "words": self.words,
            "pieces_before": self.pieces_before,
            "pieces_after": self.pieces_after,
            "added": [
                {"piece": a.piece, "id": a.id, "count": a.count, "saved_tokens": a.saved_tokens, "replaced": a.replaced}
                for a in self.added
            ],
        }

    def summary(self) -> str:
        in_slots = sum(a.replaced is not None for a in self.added)
        saved = 1 - self.pieces_after / self.pieces_before if self.pieces_before else 0.0
        examples = ", ".join(f"{a.piece} ({a.count:,})" for a in self.added[:8])
        return "\n".join(
            [
                f"vocab size: {len(self.tokens):,} ({len(self.base.tokens):,} in {self.base.path}; "
                f"{len(self.added):,} pieces added: {in_slots:,} in [unusedK] slots, "
                f"{len(self.added) - in_slots:,} appended)",
                f"candidates: {self.candidates:,} entries of a {self.trained.vocab_size:,}-entry corpus vocab not "
                "in the base vocab",
                f"corpus: {self.words:,} words, {self.pieces_before:,} -> {self.pieces_after:,} word pieces "
                f"({saved:.1%} fewer)",
                f"added (count): {examples}{', ...' if len(self.added) > 8 else ''}",
                f"time: {self.seconds:.1f} s",
            ]
        )


class _WordCounter:
    """Counts the corpus's words as the tokenizer sees them (normalised, pre-tokenised) while passing the texts
    through to the trainer."""

    def __init__(self, do_lower_case: bool, strip_accents: bool | None):
        tokenizer = build_tokenizer({}, do_lower_case, strip_accents)
        self._normalizer = tokenizer.normalizer
        self._pre_tokenizer = tokenizer.pre_tokenizer
        self.counts: Counter[str] = Counter()

    def passing(self, texts: Iterable[str]) -> Iterator[str]:
        for text in texts:
            normalized = self._normalizer.normalize_str(text)
            self.counts.update(word for word, _ in self._pre_tokenizer.pre_tokenize_str(normalized))
            yield text


def _substring_candidates(word: str, candidates: set[str], longest: int) -> set[str]:
    """The candidates that occur in ``word`` at a place WordPiece can use them (``##`` off the start)."""
    found = set()
    for start in range(len(word)):
        prefix = CONTINUING_SUBWORD_PREFIX if start else ""
        for end in range(start + 1, min(len(word), start + longest) + 1):
            piece = prefix + word[start:end]
            if piece in candidates:
                found.add(piece)
    return found


def rank_pieces(
    word_counts: Counter[str], base_tokens: Sequence[str], candidates: Iterable[str], extend_size: int
) -> tuple[list[tuple[str, int]], int, int, dict[str, int]]:
    """Choose up to ``extend_size`` of ``candidates`` by tokens saved, greedily (module docstring).

    Returns:
        ``(chosen, pieces_before, pieces_after, uses)``: ``chosen`` the ``(piece, saved_tokens)`` in the order
        chosen; the corpus's word pieces under the base and the extended vocab; ``uses[piece]`` the
        occurrences of each chosen piece in the extended tokenisation.
    """
    vocab = set(base_tokens)
    candidate_set = {c for c in candidates if c not in vocab}
    corpus = _split_words(word_counts, vocab, candidate_set)
    chosen = _choose_greedily(corpus, vocab, extend_size)
    saved_in_all, uses = _tally(
        corpus.words, corpus.counts, corpus.base_lengths, corpus.current, vocab, {p for p, _ in chosen}
    )
    return chosen, corpus.pieces_before, corpus.pieces_before - saved_in_all, uses


@dataclass
class _SplitWords:
    """The corpus's words that the base vocab splits into two pieces or more (the only ones a piece can
    shorten), by index, with what ``rank_pieces`` tracks of them."""

    words: list[str] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    """Occurrences of each word in the corpus."""
    base_lengths: list[int] = field(default_factory=list)
    """Pieces of each word under the base vocab."""
    current: list[int] = field(default_factory=list)
    """Pieces of each word under the current vocab (the base plus the pieces chosen so far)."""
    words_of: dict[str, list[int]] = field(default_factory=dict)
    """Per candidate, the indices of the words it occurs in where WordPiece can use it."""
    pieces_before: int = 0
    """Word pieces of the whole corpus under the base vocab (words it cannot split not counted)."""


def _split_words(word_counts: Counter[str], vocab: set[str], candidate_set: set[str]) -> _SplitWords:
    """The words of ``word_counts`` split by the base ``vocab``, and the ``candidate_set`` pieces in each."""
    longest = max((len(c.removeprefix(CONTINUING_SUBWORD_PREFIX)) for c in candidate_set), default=0)
    corpus = _SplitWords()
    for word, count in word_counts.items():
        pieces = wordpiece_split(word, vocab)
        if pieces is None:
            continue
        corpus.pieces_before += count * len(pieces)
        if len(pieces) < 2:
            continue
        index = len(corpus.words)
        corpus.words.append(word)
        corpus.counts.append(count)
        corpus.base_lengths.append(len(pieces))
        corpus.current.append(len(pieces))
        for piece in _substring_candidates(word, candidate_set, longest):
            corpus.words_of.setdefault(piece, []).append(index)
    return corpus


def _gain(piece: str, corpus: _SplitWords, vocab: set[str]) -> tuple[int, int, dict[int, int]]:
    """(pieces saved, occurrences of the words it helps, new piece counts of those words) with ``piece`` added
    to the current ``vocab`` (left as it was); ``(-1, 0, {})`` when it would leave a word unsplittable."""
    vocab.add(piece)
    saved = occurrences = 0
    new_lengths = {}
    for index in corpus.words_of[piece]:
        pieces = wordpiece_split(corpus.words[index], vocab)
        if pieces is None:  # greedy matching can strand a word's rest: never make a word [UNK]
            vocab.discard(piece)
            return -1, 0, {}
        if len(pieces) != corpus.current[index]:  # shorter, or (rarely, greedy again) longer
            saved += corpus.counts[index] * (corpus.current[index] - len(pieces))
            occurrences += corpus.counts[index]
            new_lengths[index] = len(pieces)
    vocab.discard(piece)
    return saved, occurrences, new_lengths


def _choose_greedily(corpus: _SplitWords, vocab: set[str], extend_size: int) -> list[tuple[str, int]]:
    """Up to ``extend_size`` ``(piece, saved_tokens)``, each the best by its gain over the vocab chosen so far
    (lazy greedy: a popped entry whose gain fell goes back with its true gain); adds them to ``vocab`` and
    updates ``corpus.current``."""
    # Max-heap on (saved, occurrences, then the piece's text) via negation; an entry's gain may be stale.
    heap = []
    for piece in corpus.words_of:
        saved, occurrences, _ = _gain(piece, corpus, vocab)
        if saved > 0:
            heap.append((-saved, -occurrences, piece))
    heapq.heapify(heap)
    chosen: list[tuple[str, int]] = []
    while heap and len(chosen) < extend_size:
        _, _, piece = heapq.heappop(heap)
        saved, occurrences, new_lengths = _gain(piece, corpus, vocab)
        if saved <= 0:
            continue
        if heap and (-saved, -occurrences, piece) > heap[0]:
            heapq.heappush(heap, (-saved, -occurrences, piece))  # no longer the best: back with its true gain
            continue
        vocab.add(piece)
        chosen.append((piece, saved))
        for index, length in new_lengths.items():
            corpus.current[index] = length
    return chosen


def _tally(
    words: list[str],
    counts: list[int],
    base_lengths: list[int],
    current: list[int],
    vocab: set[str],
    chosen: set[str],
) -> tuple[int, dict[str, int]]:
    """The pieces the extended ``vocab`` saves over the corpus's ``words`` (``counts`` occurrences each,
    ``base_lengths`` pieces under the base vocab, ``current`` under the extended one: checked), and the
    occurrences of each ``chosen`` piece in the extended tokenisation."""
    uses: Counter[str] = Counter()
    saved = 0
    for index, word in enumerate(words):
        pieces = wordpiece_split(word, vocab)
        assert pieces is not None and len(pieces) == current[index]
        saved += counts[index] * (base_lengths[index] - len(pieces))
        for piece in pieces:
            if piece in chosen:
                uses[piece] += counts[index]
    return saved, dict(uses)


def place_pieces(base_tokens: Sequence[str], pieces: Sequence[str]) -> tuple[list[str], list[tuple[int, str | None]]]:
    """The base vocab with ``pieces`` in its ``[unusedK]`` slots (in id order), the rest appended.

    Returns:
        ``(tokens, placed)``: the new vocab, and for each piece its id and the slot it replaced (None: appended).
    """
    tokens = list(base_tokens)
    slots = [i for i, t in enumerate(tokens) if is_unused_slot(t)]
    placed: list[tuple[int, str | None]] = []
    for n, piece in enumerate(pieces):
        if n < len(slots):
            placed.append((slots[n], tokens[slots[n]]))
            tokens[slots[n]] = piece
        else:
            placed.append((len(tokens), None))
            tokens.append(piece)
    return tokens, placed


def extend_vocab(
    texts: Iterable[str],
    base: BaseVocab,
    extend_size: int,
    *,
    train_vocab_size: int | None = None,
    min_frequency: int = DEFAULT_MIN_FREQUENCY,
    limit_alphabet: int | None = DEFAULT_LIMIT_ALPHABET,
    show_progress: bool = False,
) -> ExtendedVocab:
    """Add the ``extend_size`` most useful new pieces of ``texts`` (sentences, read once) to ``base``.

    ``train_vocab_size``: entries of the corpus vocab trained for candidates (default: the base vocab's size).

    Raises:
        ValueError: ``extend_size`` < 1, or no text.
    """
    if extend_size < 1:
        raise ValueError(f"extend_size (--extend-size) must be at least 1, got {extend_size}")
    start = time.perf_counter()
    counter = _WordCounter(base.do_lower_case, base.strip_accents)
    config = VocabConfig(
        vocab_size=train_vocab_size or len(base.tokens),
        do_lower_case=base.do_lower_case,
        strip_accents=base.strip_accents,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        num_unused=0,
        show_progress=show_progress,
    )
    trained = train_wordpiece(counter.passing(texts), config)
    base_set = set(base.tokens)
    candidates = [t for t in trained.learned_tokens if t not in base_set]
    chosen, before, after, uses = rank_pieces(counter.counts, base.tokens, candidates, extend_size)
    tokens, placed = place_pieces(base.tokens, [p for p, _ in chosen])
    added = [
        AddedPiece(piece, id_, uses.get(piece, 0), saved, replaced)
        for (piece, saved), (id_, replaced) in zip(chosen, placed, strict=True)
    ]
    return ExtendedVocab(
        base=base,
        tokens=tokens,
        added=added,
        trained=trained,
        candidates=len(candidates),
        words=sum(counter.counts.values()),
        pieces_before=before,
        pieces_after=after,
        seconds=time.perf_counter() - start,
    )


def save_extended_vocab(extended: ExtendedVocab, output_dir: str, *, overwrite: bool = False) -> dict[str, str]:
    """Write the extended vocab as ``build-vocab`` writes a vocab (``text.vocab.save_vocab``: tokenizer.json
    with the base vocab's normalisation, tokenizer_config.json, special_tokens_map.json, vocab.txt last)
    and ``extension.json`` (:meth:`ExtendedVocab.record`); all or nothing.

    Raises:
        FileExistsError: ``vocab.txt`` or ``tokenizer.json`` exists and ``overwrite`` is false.
    """
    os.makedirs(output_dir, exist_ok=True)
    found = existing_outputs(output_dir)
    if found and not overwrite:
        raise FileExistsError(f"{', '.join(found)} already exist(s); pass overwrite=True (--overwrite) to replace")
    files = tokenizer_files(extended.tokens, extended.base.do_lower_case, strip_accents=extended.base.strip_accents)
    contents = {EXTENSION_FILE: strict_json.dumps(extended.record(), indent=2, ensure_ascii=False) + "\n", **files}
    contents[VOCAB_FILE] = contents.pop(VOCAB_FILE)  # last: its presence marks a complete directory
    with atomic_files([os.path.join(output_dir, name) for name in contents]) as temps:
        for tmp, text in zip(temps, contents.values(), strict=True):
            with open(tmp, "x", encoding="utf-8", newline="\n") as f:
                f.write(text)
    return {name: os.path.join(output_dir, name) for name in contents}


@dataclass
class VocabExtension:
    """What :func:`extend_vocab_files` returns."""

    extended: ExtendedVocab
    written: dict[str, str]
    reader_stats: ReaderStats = field(repr=False)


def extend_vocab_files(
    inputs: list[str],
    output_dir: str,
    base_vocab: str,
    extend_size: int,
    *,
    do_lower_case: bool | None = None,
    strip_accents: bool | None = None,
    train_vocab_size: int | None = None,
    min_frequency: int = DEFAULT_MIN_FREQUENCY,
    limit_alphabet: int | None = DEFAULT_LIMIT_ALPHABET,
    show_progress: bool = True,
    input_format: str = ReadOptions.input_format,
    text_field: str = ReadOptions.text_field,
    segmenter: str = DEFAULT_SEGMENTER,
    encoding: str = ReadOptions.encoding,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    overwrite: bool = False,
) -> VocabExtension:
    """``bertprep build-vocab --extend``: read ``base_vocab`` (:func:`read_base_vocab`), the sentences of
    ``inputs`` (as ``text.vocab.build_vocab`` reads them), :func:`extend_vocab`, :func:`save_extended_vocab`.
    Every check that can fail runs before the corpus is read.

    Raises:
        FileExistsError: vocab files already in ``output_dir`` and not ``overwrite``.
        FileNotFoundError / VocabError: ``base_vocab`` missing or not usable (see :func:`read_base_vocab`).
        ValueError: ``extend_size`` < 1, a bad reader option or input, ``output_dir`` unusable, no text.
    """
    from bertprep.pipeline.readers import ReaderStats, check_options, expand_inputs

    if extend_size < 1:
        raise ValueError(f"--extend-size must be at least 1, got {extend_size}")
    found = existing_outputs(output_dir)
    if found and not overwrite:
        raise FileExistsError(f"{', '.join(found)} already exist(s); pass --overwrite to replace")
    base = read_base_vocab(base_vocab, do_lower_case, strip_accents)
    check_options(input_format, segmenter=segmenter, encoding=encoding, max_line_chars=max_line_chars)
    files = expand_inputs(inputs)
    check_output_dir(output_dir, files)
    stats = ReaderStats()
    read_options = dict(
        input_format=input_format,
        text_field=text_field,
        segmenter=segmenter,
        encoding=encoding,
        max_line_chars=max_line_chars,
    )
    extended = extend_vocab(
        _sentences_with_progress(files, read_options, stats, show_progress),
        base,
        extend_size,
        train_vocab_size=train_vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        show_progress=show_progress,
    )
    written = save_extended_vocab(extended, output_dir, overwrite=overwrite)
    return VocabExtension(extended, written, stats)
