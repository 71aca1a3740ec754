"""Word-level masking schemes (``--masking-scheme whole-word|ngram|span``, ``pipeline/masking/schemes.py``):
whole words only, the budget, segment boundaries, the span and n-gram length distributions (chi-square), in both
the static (``random.Random``) and the dynamic (numpy) form; and the scheme settings ``InstanceConfig`` checks."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats

from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.schemes import (
    Draws,
    choose_word_spans,
    ngram_probabilities,
    span_length_probabilities,
    words_from_starts,
)


def _generators(seed: int):
    return {"random.Random": Draws(random.Random(seed)), "numpy": Draws(np.random.default_rng(seed))}


def test_span_lengths_are_spanbert_truncated_geometric():
    probs = span_length_probabilities(0.2, 10)
    assert len(probs) == 10 and abs(sum(probs) - 1) < 1e-12
    assert probs[0] / probs[1] == pytest.approx(1 / 0.8)  # geometric ratio (1 - p)
    assert sum(length * p for length, p in zip(range(1, 11), probs, strict=True)) == pytest.approx(
        3.797, abs=1e-3
    )  # paper: 3.8
    ngram = ngram_probabilities(3)
    assert ngram == pytest.approx([6 / 11, 3 / 11, 2 / 11])  # 1 : 1/2 : 1/3


@pytest.mark.parametrize("form", ["random.Random", "numpy"])
def test_span_length_distribution_chi_square(form):
    """Realised span lengths (words) against the truncated geometric, p = 0.2, max 10.

    One-piece words, one segment of 509 words, budget 77 pieces (512 tokens, 15%): the first 5 spans of an
    instance hold at most 50 pieces, so none of them is cut by the budget; each is a fresh draw."""
    draws = _generators(20)[form]
    words = [[i] for i in range(1, 510)]
    lengths = []
    for _ in range(800):
        spans = choose_word_spans(words, None, 77, "span", draws)
        assert sum(n for _, n in spans) == 77  # the budget is spent exactly with one-piece words
        lengths.extend(n for _, n in spans[:5])
    observed = np.bincount(lengths, minlength=11)[1:]
    expected = np.array(span_length_probabilities()) * len(lengths)
    chi2, p_value = stats.chisquare(observed, expected)
    assert p_value > 0.001, (observed, expected.round(1), chi2)
    assert np.mean(lengths) == pytest.approx(3.8, abs=0.15)
    # and a wrong hypothesis is rejected by the same test: Geo(0.3) or no truncation would not pass
    wrong = np.array(span_length_probabilities(0.3, 10)) * len(lengths)
    assert stats.chisquare(observed, wrong)[1] < 1e-6


@pytest.mark.parametrize("form", ["random.Random", "numpy"])
def test_ngram_size_distribution_chi_square(form):
    """The first n-gram of an instance (budget and coverage cannot shorten it) has P(n) proportional to 1/n."""
    draws = _generators(3)[form]
    words = [[i] for i in range(1, 120)]
    first = [choose_word_spans(words, None, 18, "ngram", draws)[0][1] for _ in range(3000)]
    observed = np.bincount(first, minlength=4)[1:]
    _chi2, p_value = stats.chisquare(observed, np.array(ngram_probabilities(3)) * len(first))
    assert p_value > 0.001, observed


@pytest.mark.parametrize("scheme", ["whole-word", "ngram", "span"])
@pytest.mark.parametrize("form", ["random.Random", "numpy"])
def test_spans_are_whole_words_within_budget_and_segment(scheme, form):
    rng = random.Random(1)
    draws = _generators(7)[form]
    for _ in range(300):
        # words of 1-4 pieces in two segments; positions as in [CLS] A [SEP] B [SEP]
        sizes_a = [rng.randint(1, 4) for _ in range(rng.randint(2, 30))]
        sizes_b = [rng.randint(1, 4) for _ in range(rng.randint(2, 30))]
        words, segment, pos = [], [], 1
        for seg, sizes in ((0, sizes_a), (1, sizes_b)):
            for size in sizes:
                words.append(list(range(pos, pos + size)))
                segment.append(seg)
                pos += size
            pos += 1  # [SEP]
        wanted = rng.randint(1, 20)
        spans = choose_word_spans(words, segment, wanted, scheme, draws)
        chosen = [w for first, n in spans for w in range(first, first + n)]
        assert len(chosen) == len(set(chosen))  # no word twice
        assert sum(len(words[w]) for w in chosen) <= wanted
        for first, n in spans:
            assert n >= 1 and len({segment[w] for w in range(first, first + n)}) == 1  # never across [SEP]
            if scheme == "ngram":
                assert n <= 3
            if scheme == "span":
                assert n <= 10


def test_whole_word_budget_is_filled_like_the_original():
    """whole-word takes every word that fits until the budget is met; with one-piece words exactly ``wanted``."""
    words = [[i] for i in range(1, 40)]
    for seed in range(20):
        spans = choose_word_spans(words, None, 6, "whole-word", Draws(random.Random(seed)))
        assert len(spans) == 6 and all(n == 1 for _, n in spans)


def test_words_from_starts_on_hand_built_flags():
    assert words_from_starts([1, 2, 3, 5, 6], [True, False, True, True, False]) == [[1, 2], [3], [5, 6]]
    assert words_from_starts([4, 5], [False, False]) == [[4, 5]]  # the first position always starts a word


def test_masking_config_checks_the_scheme_settings():
    with pytest.raises(ValueError, match="masking_scheme"):
        InstanceConfig(mlm=MaskingConfig(masking_scheme="words"))
    with pytest.raises(ValueError, match="--do-whole-word-mask"):
        InstanceConfig(mlm=MaskingConfig(masking_scheme="span", do_whole_word_mask=True))
    assert InstanceConfig(mlm=MaskingConfig(do_whole_word_mask=True)).mlm.effective_masking_scheme == "whole-word"
    assert InstanceConfig().mlm.effective_masking_scheme == "token"
    with pytest.raises(ValueError, match="max_span_length"):
        InstanceConfig(mlm=MaskingConfig(masking_scheme="span", max_span_length=0))
