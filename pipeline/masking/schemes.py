"""Masking schemes (``--masking-scheme``, ``config.MASKING_SCHEMES``): which words one masking decision covers.

``token`` has no words: a piece at a time, chosen in :mod:`bertprep.pipeline.masking.rule`. The word-level schemes
choose whole words, in one code path (:func:`choose_word_spans`) for the static form (``random.Random``,
make-shards) and the dynamic one (``numpy.random.Generator``, the trainer); :class:`Draws` gives both the same
three kinds of draw:

* ``whole-word``: the original's ``do_whole_word_mask`` (google-research/bert ``create_pretraining_data.py``,
  HEAD eedf571), same draws as the original;
* ``ngram``: Megatron-LM / ERNIE n-grams of up to 3 words, ``P(n)`` proportional to ``1/n``
  (:func:`ngram_probabilities`);
* ``span``: SpanBERT (Joshi et al. 2020, section 3.1): geometric span lengths in words, p = 0.2, at most 10
  (:func:`span_length_probabilities`).

The words are given as groups of piece positions (:func:`words_from_starts`): by default a piece and its ``##``
pieces (whitespace + punctuation), or from a word segmenter via the ``word_ids`` column
(:mod:`bertprep.pipeline.text.word_segmentation`). How many pieces to predict and what each chosen piece becomes
(80/10/10) is the masking rule's, :mod:`bertprep.pipeline.masking.rule`, which calls this module.

numpy only (no Beam, no torch): ``bertprep.bert_model`` imports it through ``masking`` for dynamic masking.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

# the scheme names and their defaults are settings (config.py, with MaskingConfig)
from bertprep.pipeline.masking.config import MAX_NGRAM_SIZE, MAX_SPAN_LENGTH, SPAN_GEOMETRIC_P
from bertprep.pipeline.masking.exact_draws import shuffle


def span_length_probabilities(p: float = SPAN_GEOMETRIC_P, max_length: int = MAX_SPAN_LENGTH) -> list[float]:
    """``P(length = l)`` for ``l = 1 .. max_length`` words: the geometric ``p (1 - p)^(l - 1)`` truncated at
    ``max_length`` and renormalised, as SpanBERT's code draws it (``np.random.choice`` over the normalised
    ``p (1 - p)^(l - 1)``); with p = 0.2 and 10 the mean is 3.80, the paper's "mean span length 3.8"
    (Joshi et al. 2020, section 3.1). Returns ``max_length`` floats summing to 1.

    Raises:
        ValueError: ``p`` outside (0, 1] or ``max_length`` < 1.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"span geometric p must be in (0, 1], got {p}")
    if max_length < 1:
        raise ValueError(f"max span length must be at least 1, got {max_length}")
    weights = [p * (1.0 - p) ** (length - 1) for length in range(1, max_length + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def ngram_probabilities(max_ngram_size: int = MAX_NGRAM_SIZE) -> list[float]:
    """``P(n)`` for ``n = 1 .. max_ngram_size`` words, proportional to ``1 / n`` (Megatron-LM
    ``dataset_utils.create_masked_lm_predictions`` with ``geometric_dist=False``, after ERNIE 2.0 / ALBERT's
    n-gram masking; ALBERT section 4.5). Raises ``ValueError`` when ``max_ngram_size`` < 1."""
    if max_ngram_size < 1:
        raise ValueError(f"max n-gram size must be at least 1, got {max_ngram_size}")
    weights = [1.0 / n for n in range(1, max_ngram_size + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def _cumulative(probabilities: Sequence[float]) -> list[float]:
    out, running = [], 0.0
    for p in probabilities:
        running += p
        out.append(running)
    out[-1] = 1.0  # (rounding) every uniform draw in [0, 1) falls below the last entry
    return out


class Draws:
    """The three kinds of random draw the word-level schemes make, from either generator, so that static
    masking (``random.Random``, make-shards) and dynamic masking (``numpy.random.Generator``, the trainer) run
    the same code: ``random()`` (a uniform float in [0, 1)), ``randbelow(n)`` (an int in [0, n)) and
    ``shuffle(list)`` (in place; for ``random.Random`` exactly ``rng.shuffle``)."""

    def __init__(self, rng: random.Random | np.random.Generator):
        self.rng = rng
        self.random: Callable[[], float]
        self.randbelow: Callable[[int], int]
        self.shuffle: Callable[[list], None]
        if isinstance(rng, np.random.Generator):
            self.random = rng.random
            self.randbelow = lambda n: int(rng.integers(n))
            self.shuffle = self._numpy_shuffle
        else:
            self.random = rng.random
            self.randbelow = rng.randrange
            self.shuffle = lambda x: shuffle(x, rng)

    def _numpy_shuffle(self, x: list) -> None:
        assert isinstance(self.rng, np.random.Generator)
        x[:] = [x[i] for i in self.rng.permutation(len(x)).tolist()]


def words_from_starts(positions: Sequence[int], starts: Sequence[bool]) -> list[list[int]]:
    """Group candidate ``positions`` into words: a word begins at each position whose ``starts`` flag is true
    (and at the first position). Returns the words, each a list of positions, in order."""
    words: list[list[int]] = []
    for position, start in zip(positions, starts, strict=True):
        if start or not words:
            words.append([position])
        else:
            words[-1].append(position)
    return words


def choose_word_spans(
    words: Sequence[Sequence[int]],
    word_segment: Sequence[int] | None,
    wanted: int,
    scheme: str,
    draws: Draws,
    *,
    max_ngram_size: int = MAX_NGRAM_SIZE,
    span_geometric_p: float = SPAN_GEOMETRIC_P,
    max_span_length: int = MAX_SPAN_LENGTH,
) -> list[tuple[int, int]]:
    """Which words to predict under a word-level scheme, as spans ``(first word, number of words)`` in the
    order chosen; together they hold at most ``wanted`` pieces and never share a word.

    * ``whole-word``: the original's loop (google-research/bert ``create_masked_lm_predictions`` with
      ``do_whole_word_mask``): the words in a shuffled order, each taken whole, or skipped when it does not fit
      the budget, until ``wanted`` pieces are taken. Same draws as the original for ``random.Random``.
    * ``ngram``: Megatron-LM's n-gram masking: the word positions in a shuffled order; from each, ``n`` words
      with ``P(n)`` from :func:`ngram_probabilities` (renormalised over the n-grams that stay inside the
      segment), shortened while it exceeds the budget, skipped when it overlaps words already taken.
    * ``span``: SpanBERT (Joshi et al. 2020, section 3.1): repeatedly a length ``l`` in words from
      :func:`span_length_probabilities`, then a start uniformly among the places where ``l`` consecutive
      words of one segment are all still unmasked (no such place: a new length); the last span is cut to
      the words that fit the budget. Stops when the budget is spent or after ``4 * wanted + 16`` draws
      that took nothing.

    Args:
        words: each word as the list of its piece positions, in order.
        word_segment: per word, its segment (A = 0, B = 1): n-grams and spans never cross a segment
            boundary (``None``: one segment).
        wanted: the budget in pieces (:func:`~bertprep.pipeline.masking.rule.num_to_predict`).
        scheme: ``whole-word``, ``ngram`` or ``span``.
        draws: the random source (:class:`Draws`).
    Raises:
        ValueError: an unknown scheme (``token`` has no words: use the per-piece forms).
    """
    sizes = [len(w) for w in words]
    if scheme == "whole-word":
        return _whole_word_spans(sizes, wanted, draws)
    if scheme not in ("ngram", "span"):
        raise ValueError(f"unknown word-level masking scheme {scheme!r}; one of whole-word, ngram, span")
    segment_end = _segment_ends(word_segment, len(words))
    if scheme == "ngram":
        return _ngram_spans(sizes, segment_end, wanted, draws, max_ngram_size)
    return _geometric_spans(sizes, segment_end, wanted, draws, span_geometric_p, max_span_length)


def _whole_word_spans(sizes: list[int], wanted: int, draws: Draws) -> list[tuple[int, int]]:
    """``whole-word`` (:func:`choose_word_spans`): the words in a shuffled order, each taken whole or skipped
    when it does not fit the budget. ``sizes``: pieces per word."""
    spans: list[tuple[int, int]] = []
    count = 0
    order = list(range(len(sizes)))
    draws.shuffle(order)  # the original shuffles its list of words: the same permutation
    for w in order:
        if count >= wanted:
            break
        if count + sizes[w] > wanted:
            continue
        spans.append((w, 1))
        count += sizes[w]
    return spans


def _segment_ends(word_segment: Sequence[int] | None, n_words: int) -> list[int]:
    """Per word, the end (exclusive, in words) of its segment; ``word_segment`` None: one segment."""
    segment = list(word_segment) if word_segment is not None else [0] * n_words
    segment_end = [0] * n_words
    end = n_words
    for w in range(n_words - 1, -1, -1):
        if w + 1 < n_words and segment[w + 1] != segment[w]:
            end = w + 1
        segment_end[w] = end
    return segment_end


def _draw_from_cdf(cdf: list[float], u: float, limit: int) -> int:
    """The value ``n`` in ``1 .. limit`` that the uniform ``u`` falls on in the cumulative ``cdf`` (entry
    ``n - 1`` is ``P(value <= n)``)."""
    n = 1
    while n < limit and u >= cdf[n - 1]:
        n += 1
    return n


def _ngram_spans(
    sizes: list[int], segment_end: list[int], wanted: int, draws: Draws, max_ngram_size: int
) -> list[tuple[int, int]]:
    """``ngram`` (:func:`choose_word_spans`): from each word in a shuffled order an n-gram inside its segment,
    shortened until it fits the budget, skipped when it overlaps a word already taken."""
    cdf = _cumulative(ngram_probabilities(max_ngram_size))
    n_words = len(sizes)
    taken = [False] * n_words
    spans: list[tuple[int, int]] = []
    count = 0
    order = list(range(n_words))
    draws.shuffle(order)
    for w in order:
        if count >= wanted:
            break
        available = min(max_ngram_size, segment_end[w] - w)
        n = _draw_from_cdf(cdf, draws.random() * cdf[available - 1], available)
        size = sum(sizes[w : w + n])
        while n > 0 and count + size > wanted:  # shorter n-grams until one fits the budget
            n -= 1
            size -= sizes[w + n]
        if n == 0 or any(taken[w : w + n]):
            continue
        for k in range(w, w + n):
            taken[k] = True
        spans.append((w, n))
        count += size
    return spans


def _free_runs(taken: list[bool], segment_end: list[int], length: int) -> tuple[list[tuple[int, int]], int]:
    """The runs of free words inside one segment that hold a span of ``length`` words: ``(first word,
    places)`` for each (a run of ``r`` words has ``r - length + 1`` places), and the places in all."""
    runs: list[tuple[int, int]] = []
    places = 0
    n_words = len(taken)
    w = 0
    while w < n_words:
        if taken[w]:
            w += 1
            continue
        first = w
        while w < segment_end[first] and not taken[w]:
            w += 1
        if w - first >= length:
            runs.append((first, w - first - length + 1))
            places += w - first - length + 1
    return runs, places


def _place_start(runs: list[tuple[int, int]], k: int) -> int:
    """The first word of place ``k`` (0-based, counted over ``runs`` in order)."""
    for first, n_places in runs:
        if k < n_places:
            return first + k
        k -= n_places
    raise AssertionError("place out of range")


def _geometric_spans(
    sizes: list[int],
    segment_end: list[int],
    wanted: int,
    draws: Draws,
    span_geometric_p: float,
    max_span_length: int,
) -> list[tuple[int, int]]:
    """``span`` (:func:`choose_word_spans`): SpanBERT's loop of a length, then a start among the free places
    for it; the last span is cut to the budget; ``4 * wanted + 16`` draws that take nothing end it."""
    cdf = _cumulative(span_length_probabilities(span_geometric_p, max_span_length))
    taken = [False] * len(sizes)
    spans: list[tuple[int, int]] = []
    count = 0
    misses = 0
    while count < wanted and misses < 4 * wanted + 16:
        length = _draw_from_cdf(cdf, draws.random(), len(cdf))
        runs, places = _free_runs(taken, segment_end, length)
        if places == 0:
            misses += 1
            continue
        start = _place_start(runs, draws.randbelow(places))
        n = 0
        while n < length and count + sizes[start + n] <= wanted:
            count += sizes[start + n]
            n += 1
        if n == 0:
            misses += 1
            continue
        for k in range(start, start + n):
            taken[k] = True
        spans.append((start, n))
    return spans


__all__ = [
    "Draws",
    "choose_word_spans",
    "ngram_probabilities",
    "span_length_probabilities",
    "words_from_starts",
]
