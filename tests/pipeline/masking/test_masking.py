"""The masked-LM rule (``pipeline/masking/rule.py``): exact form draw for draw as the original, numpy form with the
original's rates, both deterministic; the rule over the words a word-level scheme chose (whole words, span-level
replacement), static and dynamic."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.rule import (
    KEEP,
    MASK,
    MaskingVocab,
    create_masked_lm_predictions,
    draw_replacements,
    mask_instance,
    num_to_predict,
    replace_positions,
    word_masked_lm_predictions,
)
from bertprep.pipeline.masking.schemes import Draws

CLS, SEP, MASK_ID, VOCAB = 101, 102, 103, 1000
DYNAMIC = MaskingVocab(vocab_size=VOCAB, cls_token_id=CLS, sep_token_id=SEP, mask_token_id=MASK_ID)


class _Ids:
    """The ``VocabIds`` fields the rule reads: ids 500.. are ``##`` pieces."""

    cls_id, sep_id, mask_id = CLS, SEP, MASK_ID
    random_ids: ClassVar[list[int]] = list(range(VOCAB))
    is_continuation: ClassVar[list[bool]] = [i >= 500 for i in range(VOCAB)]


def _original(tokens, config, ids, rng):
    """google-research/bert ``create_masked_lm_predictions`` (HEAD eedf571) transcribed line for line on ids."""
    cand_indexes = []
    for i, token in enumerate(tokens):
        if token == ids.cls_id or token == ids.sep_id:
            continue
        if config.do_whole_word_mask and len(cand_indexes) >= 1 and ids.is_continuation[token]:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(config.max_predictions_per_seq, max(1, int(round(len(tokens) * config.masked_lm_prob))))
    masked_lms = []
    covered_indexes = set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        is_any_index_covered = False
        for index in index_set:
            if index in covered_indexes:
                is_any_index_covered = True
                break
        if is_any_index_covered:
            continue
        for index in index_set:
            covered_indexes.add(index)
            if rng.random() < 0.8:
                masked_token = ids.mask_id
            else:
                if rng.random() < 0.5:
                    masked_token = tokens[index]
                else:
                    masked_token = ids.random_ids[rng.randint(0, len(ids.random_ids) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append((index, tokens[index]))
    masked_lms = sorted(masked_lms, key=lambda x: x[0])
    return output_tokens, [p for p, _ in masked_lms], [label for _, label in masked_lms]


def _instance(rng: random.Random) -> tuple[list[int], int]:
    len_a, len_b = rng.randint(1, 60), rng.randint(1, 60)
    body = [rng.randint(200, VOCAB - 1) for _ in range(len_a + len_b)]
    return [CLS, *body[:len_a], SEP, *body[len_a:], SEP], len_a


@pytest.mark.parametrize("whole_word", [False, True])
def test_exact_form_is_the_original_draw_for_draw(whole_word):
    config = InstanceConfig(
        max_seq_length=128, mlm=MaskingConfig(max_predictions_per_seq=20, do_whole_word_mask=whole_word)
    )
    data = random.Random(0)
    for seed in range(300):
        tokens, len_a = _instance(data)
        ours, theirs = random.Random(seed), random.Random(seed)
        got = create_masked_lm_predictions(tokens, config.mlm, _Ids, ours, num_tokens_a=None if whole_word else len_a)
        assert got == _original(tokens, config.mlm, _Ids, theirs)
        assert ours.random() == theirs.random()  # the same number of draws was taken


def test_exact_replacements_have_the_80_10_10_rates():
    codes = np.array(draw_replacements(200_000, random.Random(1), list(range(VOCAB))))
    assert abs((codes == MASK).mean() - 0.8) < 0.005
    assert abs((codes == KEEP).mean() - 0.1) < 0.005
    assert abs((codes >= 0).mean() - 0.1) < 0.005
    assert codes.max() < VOCAB
    assert draw_replacements(1000, random.Random(1), list(range(VOCAB))) == codes[:1000].tolist()


def test_num_to_predict_rounds_half_to_even_and_caps():
    assert num_to_predict(10, 0.15, 20) == 2  # 1.5 -> 2
    assert num_to_predict(30, 0.15, 20) == 4  # 4.5 -> 4 (Python round)
    assert num_to_predict(3, 0.15, 20) == 1  # at least one
    assert num_to_predict(512, 0.15, 20) == 20  # capped


def test_numpy_replacements_have_the_80_10_10_rates_and_are_deterministic():
    values = np.full(300_000, 7, dtype=np.int64)
    n_mask, n_random = replace_positions(
        values, np.arange(len(values)), MASK_ID, np.arange(200, 300), np.random.default_rng(3)
    )
    assert abs(n_mask / len(values) - 0.8) < 0.005 and abs(n_random / len(values) - 0.1) < 0.005
    assert (values == MASK_ID).sum() == n_mask
    assert ((values >= 200) & (values < 300)).sum() == n_random
    assert (values == 7).sum() == len(values) - n_mask - n_random
    again = np.full(300_000, 7, dtype=np.int64)
    replace_positions(again, np.arange(len(again)), MASK_ID, np.arange(200, 300), np.random.default_rng(3))
    assert np.array_equal(values, again)


def test_mask_instance_follows_the_rule():
    config = MaskingConfig()
    data = random.Random(2)
    rng = np.random.default_rng(0)
    total = masked = 0
    for _ in range(2000):
        tokens, _ = _instance(data)
        out, positions, labels = mask_instance(np.array(tokens), config, DYNAMIC, rng)
        assert len(positions) == num_to_predict(len(tokens), 0.15, 20)
        assert np.all(np.diff(positions) > 0)
        assert not np.isin(np.array(tokens)[positions], [CLS, SEP]).any()
        assert np.array_equal(labels, np.array(tokens)[positions])
        unchanged = np.ones(len(tokens), bool)
        unchanged[positions] = False
        assert np.array_equal(out[unchanged], np.array(tokens)[unchanged])
        total += len(positions)
        masked += int((out[positions] == MASK_ID).sum())
    assert abs(masked / total - 0.8) < 0.02
    tokens, _ = _instance(random.Random(9))
    first = mask_instance(np.array(tokens), config, DYNAMIC, np.random.default_rng(5))
    second = mask_instance(np.array(tokens), config, DYNAMIC, np.random.default_rng(5))
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_mask_instance_whole_words():
    is_subword = np.array(_Ids.is_continuation)
    config, vocab = MaskingConfig(), dataclasses.replace(DYNAMIC, is_subword=is_subword)
    # words of three pieces: 200 ##600 ##601
    tokens = np.array([CLS] + [200, 600, 601] * 10 + [SEP] + [201, 602, 603] * 10 + [SEP])
    rng = np.random.default_rng(1)
    for _ in range(200):
        _, positions, _ = mask_instance(tokens, config, vocab, rng)
        assert len(positions) % 3 == 0 and len(positions) <= num_to_predict(len(tokens), 0.15, 20)
        starts = positions[::3]
        assert not is_subword[tokens[starts]].any()  # each group starts a word ...
        assert np.array_equal(positions.reshape(-1, 3), starts[:, None] + np.arange(3))  # ... and is whole


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
            tokens, words, segment, config, MASK_ID, VOCAB, Draws(random.Random(11))
        )
        results.append((out, positions, labels))
        assert positions == sorted(positions) and len(positions) <= wanted
        assert labels == [tokens[p] for p in positions]
        assert n_mask + n_random + n_kept == len(positions)
        chosen = set(positions)
        for word in words:  # all of a word's pieces or none
            assert len(chosen & set(word)) in (0, len(word))
        assert [i for i, (a, b) in enumerate(zip(out, tokens, strict=True)) if a != b] == sorted(
            p for p in positions if out[p] != tokens[p]
        )
    assert results[0] == results[1]  # same seed, same output


def test_span_replacement_is_decided_per_span():
    """SpanBERT replaces at the span level: with ``groups`` every piece of a span is [MASK], or none is."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(400), 4)
    values = np.arange(2000, 2000 + len(groups))
    positions = np.arange(len(groups))
    _n_mask, _n_random = replace_positions(values, positions, MASK_ID, VOCAB, rng, groups=groups)
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
        config = MaskingConfig(masking_scheme=scheme)
        for seed in range(30):
            out, positions, labels = mask_instance(ids, config, DYNAMIC, np.random.default_rng(seed), word_ids=word_ids)
            again = mask_instance(ids, config, DYNAMIC, np.random.default_rng(seed), word_ids=word_ids)
            assert all(np.array_equal(a, b) for a, b in zip((out, positions, labels), again, strict=True))
            assert 1 <= len(positions) <= num_to_predict(len(ids), 0.15, 20)
            masked_words = set(word_ids[positions].tolist())
            assert -1 not in masked_words
            for w in masked_words:  # whole words
                assert set(np.flatnonzero(word_ids == w).tolist()) <= set(positions.tolist())
    with pytest.raises(ValueError, match="word boundaries"):
        mask_instance(ids, MaskingConfig(masking_scheme="span"), DYNAMIC, np.random.default_rng(0))
