"""Word boundaries for word-level masking (``--masking-scheme whole-word|ngram|span``): which word each
word piece belongs to.

Not to be confused with :mod:`bertprep.pipeline.readers.segmentation`, which splits prose into *sentences*.

Two sources of word boundaries:

* **Default: whitespace + punctuation.** A word is a pre-token of BERT's ``BasicTokenizer`` (Hugging Face
  ``BertPreTokenizer``): text between whitespace, each punctuation character on its own, and each CJK
  ideograph on its own (the original's ``_tokenize_chinese_chars``). In word pieces that is the original's
  rule: a word is a piece and its following ``##`` pieces (google-research/bert ``create_pretraining_data.py``
  ``do_whole_word_mask``), so it needs no extra data and ``--do-whole-word-mask`` alone stays exactly the
  original's output.
* **A pluggable word segmenter** (``--word-segmenter``): any callable ``str -> list[str]`` given by import
  path ``module:callable``, returning the words of a sentence in order, each a substring of it (whitespace
  between words may be left out or returned as words of its own: blank words are ignored). This is how
  Chinese (no spaces: the default makes every character a word) and Korean (an eojeol joins a stem and its
  particles) get real words. Built in, when their package is installed: ``jieba`` (:func:`jieba_words`,
  ``pip install jieba``) and ``kiwi`` (:func:`kiwi_words`, the Kiwi Korean morphological analyser,
  ``pip install kiwipiepy``; wheels with the model, no system libraries). A minimal plug-in::

      # my_words.py (importable on every worker: installed, or shipped with --setup_file on Dataflow)
      def words(text: str) -> list[str]:
          return text.split()

      bertprep make-shards ... --masking-scheme whole-word --word-segmenter my_words:words

  The segmenter only groups word pieces: the pieces themselves (the ids) are WordPiece's, unchanged. A
  piece belongs to the word whose characters contain the piece's first character (the tokenizer's
  offsets); a piece in no word (text the segmenter left out) is a word of its own. A word boundary inside
  a piece is ignored, and a word made of several pre-tokens (a Chinese word of several characters) is
  masked as a whole.

What comes out is one flag per piece, "starts a word" (:func:`word_starts`), carried with the document's
ids; ``make-shards`` turns it into the optional ``word_ids`` column (the word index of each piece within
its instance, -1 at [CLS]/[SEP]).
"""

from __future__ import annotations

import functools
import importlib
import logging
from bisect import bisect_right
from collections.abc import Callable, Sequence

import numpy as np

WordSegmenter = Callable[[str], Sequence[str]]

#: Short names for the built-in segmenters (``--word-segmenter jieba``).
BUILTIN_SEGMENTERS = {
    "jieba": "bertprep.pipeline.text.word_segmentation:jieba_words",
    "kiwi": "bertprep.pipeline.text.word_segmentation:kiwi_words",
}

#: Text a segmenter is tried on when it is loaded (Latin, Chinese and Korean).
_PROBE_TEXT = "Word segmentation, 中文分词 and 한국어 형태소 분석."


class WordSegmenterError(ValueError):
    """A word segmenter cannot be loaded or returned words that are not in its input; the message names it."""


def jieba_words(text: str) -> list[str]:
    """Chinese words of ``text`` by jieba (``jieba.lcut``, its default accurate mode with HMM).

    Raises:
        WordSegmenterError: jieba is not installed.
    """
    return _jieba().lcut(text)


@functools.lru_cache(maxsize=1)
def _jieba():
    try:
        import jieba
    except ImportError:
        raise WordSegmenterError("--word-segmenter jieba needs the jieba package: pip install jieba") from None
    jieba.setLogLevel(logging.WARNING)  # (its dictionary loading logs at DEBUG/INFO)
    jieba.initialize()
    return jieba


def kiwi_words(text: str) -> list[str]:
    """Korean morphemes of ``text`` by Kiwi (kiwipiepy), as the substrings they cover.

    Kiwi gives each morpheme a lemma form and its character span; a contraction gives two morphemes one
    span (갔 = 가 + 었), so overlapping spans are merged into one word. Returns the covered substrings in
    order.

    Raises:
        WordSegmenterError: kiwipiepy is not installed.
    """
    spans: list[list[int]] = []
    for token in _kiwi().tokenize(text):
        start, end = token.start, token.start + token.len
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return [text[s:e] for s, e in spans]


@functools.lru_cache(maxsize=1)
def _kiwi():
    try:
        from kiwipiepy import Kiwi
    except ImportError:
        raise WordSegmenterError("--word-segmenter kiwi needs the kiwipiepy package: pip install kiwipiepy") from None
    return Kiwi()


def load_word_segmenter(spec: str) -> WordSegmenter:
    """The callable named by ``spec``: a built-in name (:data:`BUILTIN_SEGMENTERS`) or ``module:callable``
    (the callable may be a dotted attribute path). It is tried once on a short text.

    Raises:
        WordSegmenterError: naming ``--word-segmenter``: the spec is malformed, the module does not import,
            the attribute is missing or not callable, or the trial call fails or returns something other than
            a list of strings.
    """
    path = BUILTIN_SEGMENTERS.get(spec, spec)
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise WordSegmenterError(
            f"--word-segmenter {spec!r}: give module:callable (a function str -> list[str] of words), or one of "
            f"{', '.join(BUILTIN_SEGMENTERS)}"
        )
    try:
        target = importlib.import_module(module_name)
    except ImportError as err:
        raise WordSegmenterError(
            f"--word-segmenter {spec!r}: cannot import {module_name} ({err}); install it or put it on PYTHONPATH"
        ) from None
    try:
        for name in attribute.split("."):
            target = getattr(target, name)
    except AttributeError:
        raise WordSegmenterError(f"--word-segmenter {spec!r}: {module_name} has no {attribute}") from None
    if not callable(target):
        raise WordSegmenterError(f"--word-segmenter {spec!r}: {attribute} is not callable")
    try:
        probe = target(_PROBE_TEXT)
    except WordSegmenterError:
        raise
    except Exception as err:
        raise WordSegmenterError(
            f"--word-segmenter {spec!r} failed on a test sentence: {type(err).__name__}: {err}"
        ) from None
    if isinstance(probe, str) or not all(isinstance(w, str) for w in probe):
        raise WordSegmenterError(
            f"--word-segmenter {spec!r} must return a list of str (the words in order), got {type(probe).__name__}"
        )
    return target


def word_spans(text: str, words: Sequence[str], segmenter_name: str = "the word segmenter") -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of ``words`` in ``text``, found left to right (blank words skipped).

    Raises:
        WordSegmenterError: a word is not found in ``text`` after the previous one (the segmenter changed
            the text: a segmenter must return substrings of its input, in order).
    """
    spans = []
    cursor = 0
    for word in words:
        if not word or word.isspace():
            continue
        start = text.find(word, cursor)
        if start < 0:
            raise WordSegmenterError(
                f"{segmenter_name} returned {word!r}, which is not in the sentence after character {cursor} "
                f"({text[:80]!r}); a word segmenter must return substrings of its input, in order"
            )
        cursor = start + len(word)
        spans.append((start, cursor))
    return spans


def word_starts_from_offsets(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[bool]:
    """Per piece, whether it starts a word: a piece (character ``offsets`` as the tokenizer gives them)
    belongs to the word span holding its first character; a piece in no word is a word of its own; the
    first piece always starts a word."""
    span_starts = [s for s, _ in spans]
    out = []
    previous = None
    for k, (start, _end) in enumerate(offsets):
        j = bisect_right(span_starts, start) - 1
        key = j if j >= 0 and start < spans[j][1] else ("gap", k)
        out.append(key != previous)
        previous = key
    return out


def word_starts(
    tokenizer,
    sentences: Sequence[str],
    segmenter: WordSegmenter,
    lengths: Sequence[int] | np.ndarray,
    segmenter_name: str = "the word segmenter",
) -> np.ndarray:
    """The "starts a word" flag of every piece of ``sentences`` (concatenated, as ``encode_flat`` gives the ids).

    Args:
        tokenizer: the Hugging Face ``Tokenizer`` that produced the ids (``SentenceEncoder.tokenizer``); it is
            run again for its character offsets.
        segmenter: ``str -> list[str]`` (:func:`load_word_segmenter`).
        lengths: pieces per sentence as the ids were made (checked against the offsets).
    Returns:
        ``uint8`` array, 1 where a piece starts a word, one entry per piece.
    Raises:
        WordSegmenterError: a word is not a substring of its sentence (:func:`word_spans`).
        RuntimeError: the tokenizer gives another number of pieces than ``lengths`` (internal error).
    """
    lengths = [int(n) for n in lengths]
    flags: list[bool] = []
    todo = [k for k, n in enumerate(lengths) if n]
    encodings = tokenizer.encode_batch([sentences[k] for k in todo], add_special_tokens=False)
    for k, encoding in zip(todo, encodings, strict=True):
        if len(encoding.offsets) != lengths[k]:
            raise RuntimeError(
                f"internal error: sentence {k} has {lengths[k]} pieces but {len(encoding.offsets)} offsets"
            )
        text = sentences[k]
        flags.extend(word_starts_from_offsets(encoding.offsets, word_spans(text, segmenter(text), segmenter_name)))
    return np.array(flags, dtype=np.uint8)


def default_word_starts(ids: np.ndarray, is_continuation: Sequence[bool] | np.ndarray) -> np.ndarray:
    """The default boundaries (whitespace + punctuation): 1 for every piece that is not a ``##`` piece.

    Args:
        ids: 1-D integer array of piece ids.
        is_continuation: per vocab id, True for ``##`` pieces.
    Returns:
        ``uint8`` array like ``ids``.
    """
    return (~np.asarray(is_continuation, dtype=bool)[np.asarray(ids, dtype=np.int64)]).astype(np.uint8)


def instance_word_ids(word_starts_of_row: np.ndarray, is_special: np.ndarray) -> np.ndarray:
    """The ``word_ids`` of one row: ``-1`` at [CLS]/[SEP], else the 0-based index of the piece's word in the row.

    The first piece after a special token always starts a word (a word never crosses [SEP]).

    Args:
        word_starts_of_row: 1-D flags (1 = starts a word) per position (values at specials are ignored).
        is_special: 1-D bool, True at [CLS]/[SEP].
    Returns:
        ``int32`` array of the row's length.
    """
    starts = np.asarray(word_starts_of_row, dtype=bool).copy()
    special = np.asarray(is_special, dtype=bool)
    after_special = np.zeros(len(special), dtype=bool)
    after_special[1:] = special[:-1]
    starts |= after_special
    starts &= ~special
    ids = np.cumsum(starts, dtype=np.int64) - 1
    ids[special] = -1
    return ids.astype(np.int32)


__all__ = [
    "BUILTIN_SEGMENTERS",
    "WordSegmenter",
    "WordSegmenterError",
    "default_word_starts",
    "instance_word_ids",
    "jieba_words",
    "kiwi_words",
    "load_word_segmenter",
    "word_spans",
    "word_starts",
    "word_starts_from_offsets",
]
