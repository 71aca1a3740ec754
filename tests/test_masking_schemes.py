"""Word-level masking schemes (``--masking-scheme whole-word|ngram|span``, ``pipeline/masking.py``): whole words
only, the budget, segment boundaries, the span and n-gram length distributions (chi-square), determinism, in
both the static (``random.Random``) and the dynamic (numpy) form."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.masking import (
    Draws,
    MaskingConfig,
    choose_word_spans,
    mask_instance,
    ngram_probabilities,
    num_to_predict,
    replace_positions,
    span_length_probabilities,
    word_masked_lm_predictions,
    words_from_starts,
)

CLS, SEP, MASK_ID, VOCAB = 101, 102, 103, 1000


def _generators(seed: int):
    return {"random.Random": Draws(random.Random(seed)), "numpy": Draws(np.random.default_rng(seed))}


def test_span_lengths_are_spanbert_truncated_geometric():
    probs = span_length_probabilities(0.2, 10)
    assert len(probs) == 10 and abs(sum(probs) - 1) < 1e-12
    assert probs[0] / probs[1] == pytest.approx(1 / 0.8)  # geometric ratio (1 - p)
    assert sum(length * p for length, p in zip(range(1, 11), probs)) == pytest.approx(3.797, abs=1e-3)  # paper: 3.8
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
    chi2, p_value = stats.chisquare(observed, np.array(ngram_probabilities(3)) * len(first))
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


@dataclass(frozen=True)
class _Config:
    masking_scheme: str
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    max_ngram_size: int = 3
    span_geometric_p: float = 0.2
    max_span_length: int = 10


@pytest.mark.parametrize("scheme", ["whole-word", "ngram", "span"])
def test_word_masked_lm_predictions_masks_whole_words_deterministically(scheme):
    # [CLS] + 30 words of 1-3 pieces + [SEP] + 20 words + [SEP]; piece ids 200.. distinct
    rng = random.Random(5)
    tokens, words, segment = [CLS], [], []
    for seg, count in ((0, 30), (1, 20)):
        for _ in range(count):
            size = rng.randint(1, 3)
            words.append(list(range(len(tokens), len(tokens) + size)))
            segment.append(seg)
            tokens.extend(200 + len(tokens) + k for k in range(size))
        tokens.append(SEP)
    config = _Config(scheme)
    wanted = num_to_predict(len(tokens), 0.15, 20)
    results = []
    for _ in range(2):
        out, positions, labels, (n_mask, n_random, n_kept) = word_masked_lm_predictions(
            tokens, words, segment, config, MASK_ID, VOCAB, Draws(random.Random(11)))
        results.append((out, positions, labels))
        assert positions == sorted(positions) and len(positions) <= wanted
        assert labels == [tokens[p] for p in positions]
        assert n_mask + n_random + n_kept == len(positions)
        chosen = set(positions)
        for word in words:  # all of a word's pieces or none
            assert len(chosen & set(word)) in (0, len(word))
        assert [i for i, (a, b) in enumerate(zip(out, tokens)) if a != b] == sorted(
            p for p in positions if out[p] != tokens[p])
    assert results[0] == results[1]  # same seed, same output


def test_span_replacement_is_decided_per_span():
    """SpanBERT replaces at the span level: with ``groups`` every piece of a span is [MASK], or none is."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(400), 4)
    values = np.arange(2000, 2000 + len(groups))
    positions = np.arange(len(groups))
    n_mask, n_random = replace_positions(values, positions, MASK_ID, VOCAB, rng, groups=groups)
    is_mask = (values == MASK_ID).reshape(400, 4)
    assert (is_mask.all(axis=1) | ~is_mask.any(axis=1)).all()
    assert 0.74 < is_mask.all(axis=1).mean() < 0.86  # 80% of the spans


def test_dynamic_mask_instance_uses_word_ids_and_is_deterministic():
    """``mask_instance`` with a row's ``word_ids`` (-1 at [CLS]/[SEP]) takes whole words of that column."""
    word_sizes = [3, 1, 2, 4, 1, 1, 2, 3, 1, 2] * 4
    ids, word_ids = [CLS], [-1]
    for w, size in enumerate(word_sizes):
        ids.extend(300 + len(ids) + k for k in range(size))
        word_ids.extend([w] * size)
        if w == 19:
            ids.append(SEP)
            word_ids.append(-1)
    ids.append(SEP)
    word_ids.append(-1)
    ids, word_ids = np.array(ids), np.array(word_ids)
    for scheme in ("whole-word", "ngram", "span"):
        config = MaskingConfig(vocab_size=VOCAB, cls_token_id=CLS, sep_token_id=SEP, mask_token_id=MASK_ID,
                               masking_scheme=scheme)
        for seed in range(30):
            out, positions, labels = mask_instance(ids, config, np.random.default_rng(seed), word_ids=word_ids)
            again = mask_instance(ids, config, np.random.default_rng(seed), word_ids=word_ids)
            assert all(np.array_equal(a, b) for a, b in zip((out, positions, labels), again))
            assert 1 <= len(positions) <= num_to_predict(len(ids), 0.15, 20)
            masked_words = set(word_ids[positions].tolist())
            assert -1 not in masked_words
            for w in masked_words:  # whole words
                assert set(np.flatnonzero(word_ids == w).tolist()) <= set(positions.tolist())
    with pytest.raises(ValueError, match="word boundaries"):
        mask_instance(ids, MaskingConfig(vocab_size=VOCAB, cls_token_id=CLS, sep_token_id=SEP,
                                         mask_token_id=MASK_ID, masking_scheme="span"), np.random.default_rng(0))


def test_instance_config_checks_the_scheme_settings():
    with pytest.raises(ValueError, match="masking_scheme"):
        InstanceConfig(masking_scheme="words")
    with pytest.raises(ValueError, match="--do-whole-word-mask"):
        InstanceConfig(masking_scheme="span", do_whole_word_mask=True)
    assert InstanceConfig(do_whole_word_mask=True).effective_masking_scheme == "whole-word"
    assert InstanceConfig().effective_masking_scheme == "token"
    with pytest.raises(ValueError, match="max_span_length"):
        InstanceConfig(masking_scheme="span", max_span_length=0)
