"""Sentence segmentation of prose paragraphs (for every input format that is not one sentence per line).

BERT's generator reads one sentence per line; ``make-shards`` and ``build-vocab`` also read prose
(books, JSON lines, WikiExtractor output, Wikipedia dumps), where each paragraph must first be split
into sentences. Two well-kept libraries are offered:

``syntok`` (default)
    syntok 1.4 (``syntok.segmenter``), a rule-based segmenter written in Python. It knows
    abbreviations ("Mr. Smith", "e.g.", "U.S."), initials ("J. R. R. Tolkien"), decimals and
    ellipses, and keeps a quoted exclamation with its reporting clause (``"Stop!" he said.``).
``blingfire``
    Microsoft's BlingFire 0.1.8 (``blingfire.text_to_sentences``), a finite-state segmenter in C++.
    About 13x faster, but it splits after a quoted "!"/"?" (``"Stop!" | he said.``) and after some
    titles ("Mrs. | Hudson", "Col. | Pickering"), and it normalizes whitespace inside a sentence (runs
    of spaces -> one space), which does not change BERT's tokens.

Why syntok is the default: ``python benchmarks/bench_segmenters.py`` (4.0 MB of the shared Gutenberg
and Wikipedia prose, 8,666 paragraphs, median of 3 runs, one core of the 2-core development machine):

==========  ========  ==================  ===============================
segmenter   MB/s      hard cases correct  sentences on the 4 MB
==========  ========  ==================  ===============================
syntok      1.05      29/30               32,083
blingfire   13.3      25/30               32,395
==========  ========  ==================  ===============================

The two disagree on 6 of the 30 hand-made hard cases and on 16.0% of the real paragraphs. syntok's one
miss is an abbreviation that ends a sentence ("... in the U.S. Then he ..." is kept as one sentence);
blingfire's misses are quoted questions and exclamations followed by their reporting clause (very common
in books: ``"Can I do anything for you?" | he said, at last.``) and titles before names. Sentence
boundaries are where BERT's next-sentence pairs are cut, so a tool whose point is faithful pre-training
data takes the more correct segmenter. Its cost is bounded: at 1 MB/s per core, 20 GB of English
Wikipedia text is about 5.5 core-hours, which Beam spreads over workers; that is about three times the
cost of WordPiece tokenization (16 MB in 5-6 s on one thread). Users who
need the speed pass ``--segmenter blingfire`` (``pip install blingfire``).

Sentences are returned stripped and non-empty, in order. With syntok each sentence is the exact
substring of the paragraph (syntok's token values are not used, so "n't" is not rewritten to "not").
"""

from __future__ import annotations

import functools
from collections.abc import Callable

#: Names accepted by :func:`get_segmenter` (and by the ``--segmenter`` option).
SEGMENTERS = ("syntok", "blingfire")

#: The default segmenter; see the module docstring for the measurement behind the choice.
DEFAULT_SEGMENTER = "syntok"

Segmenter = Callable[[str], list[str]]


def _syntok_segmenter() -> Segmenter:
    from syntok import segmenter as syntok_segmenter
    from syntok import tokenizer as syntok_tokenizer

    tokenizer = syntok_tokenizer.Tokenizer(emit_hyphen_or_underscore_sep=False, replace_not_contraction=False)
    segment = syntok_segmenter.segment

    def split_sentences(paragraph: str) -> list[str]:
        sentences = []
        for sentence in segment(tokenizer.tokenize(paragraph)):
            if not sentence:
                continue
            last = sentence[-1]
            # Slice the original text with the tokens' character offsets: the exact source text.
            text = paragraph[sentence[0].offset : last.offset + len(last.value)].strip()
            if text:
                sentences.append(text)
        return sentences

    return split_sentences


def _blingfire_segmenter() -> Segmenter:
    import blingfire

    text_to_sentences = blingfire.text_to_sentences

    def split_sentences(paragraph: str) -> list[str]:
        if not paragraph or paragraph.isspace():
            return []
        # text_to_sentences joins sentences with "\n" and turns newlines inside the input into spaces.
        return [s for s in (part.strip() for part in text_to_sentences(paragraph).split("\n")) if s]

    return split_sentences


_FACTORIES: dict[str, Callable[[], Segmenter]] = {
    "syntok": _syntok_segmenter,
    "blingfire": _blingfire_segmenter,
}


@functools.cache
def get_segmenter(name: str = DEFAULT_SEGMENTER) -> Segmenter:
    """Return a function ``split(paragraph: str) -> list[str]`` for the segmenter called ``name``.

    The function returns the paragraph's sentences in order, each stripped and non-empty; an empty or
    all-whitespace paragraph gives ``[]``. Segmenters are created once per process and cached.

    Raises:
        ValueError: ``name`` is not one of :data:`SEGMENTERS` (the message lists them).
        ImportError: the library behind ``name`` is not installed (the message says which package).
    """
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown segmenter {name!r}; choose one of: {', '.join(SEGMENTERS)} (--segmenter)") from None
    try:
        return factory()
    except ImportError as err:
        raise ImportError(f"segmenter {name!r} needs the package {err.name!r}: pip install {err.name}") from err


def split_sentences(paragraph: str, segmenter: str = DEFAULT_SEGMENTER) -> list[str]:
    """Split one paragraph into stripped, non-empty sentences with the named segmenter."""
    return get_segmenter(segmenter)(paragraph)
