"""The reference algorithm's properties (pure functions, no Beam): lengths, structure, ratios, seeds."""

from __future__ import annotations

import random

import pytest

from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.instances.common import InstanceStats, VocabIds, bucket_seed
from bertprep.pipeline.masking.config import MaskingConfig
from reference.instances import create_training_instances, truncate_seq_pair
from synthetic_corpus import synthetic_corpus, synthetic_vocab


def _make(config: InstanceConfig, n_docs: int = 60, seed: int = 0):
    vocab = synthetic_vocab()
    ids = VocabIds(vocab)
    stats = InstanceStats()
    instances = create_training_instances(
        synthetic_corpus(vocab, n_docs, seed), config, ids, random.Random(config.random_seed), stats
    )
    return vocab, ids, instances, stats


def _unmasked(instance) -> list[int]:
    tokens = list(instance.input_ids)
    for pos, label in zip(instance.masked_lm_positions, instance.masked_lm_ids, strict=True):
        tokens[pos] = label
    return tokens


def test_truncate_seq_pair_keeps_the_budget_and_trims_the_longer_segment_first():
    rng = random.Random(1)
    a, b, truncated = truncate_seq_pair(list(range(10)), list(range(100, 103)), 8, rng)
    assert truncated and len(a) + len(b) == 8
    assert b == [100, 101, 102]  # the shorter segment is untouched
    assert a == list(range(a[0], a[0] + len(a)))  # a contiguous slice of A
    a2, b2, truncated2 = truncate_seq_pair([1, 2], [3], 5, rng)
    assert (a2, b2, truncated2) == ([1, 2], [3], False)


def test_truncate_ties_truncate_b():
    a, b, _ = truncate_seq_pair([1, 2, 3], [4, 5, 6], 5, random.Random(0))
    assert len(a) == 3 and len(b) == 2


def test_instances_are_well_formed():
    config = InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10))
    _vocab, ids, instances, stats = _make(config)
    assert instances and stats.instances == len(instances)
    for inst in instances:
        tokens = _unmasked(inst)
        assert len(tokens) <= config.max_seq_length
        assert tokens[0] == ids.cls_id and tokens[-1] == ids.sep_id
        assert tokens.count(ids.sep_id) == 2 and tokens.count(ids.cls_id) == 1
        assert tokens[inst.num_tokens_a + 1] == ids.sep_id  # A is followed by the middle [SEP]
        assert inst.num_tokens_a >= 1 and len(tokens) - inst.num_tokens_a - 3 >= 1
        n = len(tokens)
        assert len(inst.masked_lm_positions) == min(
            config.mlm.max_predictions_per_seq, max(1, int(round(n * config.mlm.masked_lm_prob)))
        )
        assert inst.masked_lm_positions == sorted(set(inst.masked_lm_positions))
        assert all(tokens[p] not in (ids.cls_id, ids.sep_id) for p in inst.masked_lm_positions)
        assert inst.next_sentence_label in (0, 1)


def test_masking_ratios_follow_80_10_10_and_15_percent():
    config = InstanceConfig(max_seq_length=128, dupe_factor=3, mlm=MaskingConfig(max_predictions_per_seq=20))
    _, _, _instances, stats = _make(config, n_docs=150)
    assert stats.masked > 20000
    assert abs(stats.masked_as_mask / stats.masked - 0.80) < 0.01
    assert abs(stats.masked_as_random / stats.masked - 0.10) < 0.01
    assert abs(stats.masked_as_kept / stats.masked - 0.10) < 0.01
    assert 0.14 < stats.masked / stats.tokens < 0.16
    # NotNext is 50% plus the forced one-segment chunks
    assert 0.49 < stats.not_next / stats.instances < 0.65
    assert sum(stats.length_histogram.values()) == stats.instances


def test_whole_word_masking_masks_whole_words():
    config = InstanceConfig(max_seq_length=64, mlm=MaskingConfig(max_predictions_per_seq=10, do_whole_word_mask=True))
    _, ids, instances, _ = _make(config)
    for inst in instances:
        tokens = _unmasked(inst)
        masked = set(inst.masked_lm_positions)
        for p in masked:
            # a masked ## piece has its word's previous piece masked too (unless it follows [CLS]/[SEP])
            if ids.is_continuation[tokens[p]] and tokens[p - 1] not in (ids.cls_id, ids.sep_id):
                assert p - 1 in masked
            # and the word's following ## pieces are masked with it
            if p + 1 < len(tokens) and ids.is_continuation[tokens[p + 1]]:
                assert p + 1 in masked


def test_same_seed_same_instances_other_seed_other_instances():
    config = InstanceConfig(max_seq_length=64, dupe_factor=1, mlm=MaskingConfig(max_predictions_per_seq=10))
    _, _, first, _ = _make(config)
    _, _, again, _ = _make(config)
    _, _, other, _ = _make(
        InstanceConfig(max_seq_length=64, dupe_factor=1, random_seed=1, mlm=MaskingConfig(max_predictions_per_seq=10))
    )
    assert first == again
    assert first != other


def test_unmasked_mode_makes_pairs_without_predictions():
    vocab = synthetic_vocab()
    ids = VocabIds(vocab)
    config = InstanceConfig(max_seq_length=64, dupe_factor=1, mlm=MaskingConfig(max_predictions_per_seq=10))
    instances = create_training_instances(synthetic_corpus(vocab, 20), config, ids, random.Random(3), mask=False)
    assert instances
    assert all(not i.masked_lm_positions and ids.mask_id not in i.input_ids for i in instances)


def test_bucket_seed_is_the_plain_seed_for_bucket_zero_and_distinct_otherwise():
    assert bucket_seed(12345, 0) == 12345
    seeds = {bucket_seed(12345, b) for b in range(1000)}
    assert len(seeds) == 1000
    with pytest.raises(ValueError):
        bucket_seed(-1, 0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_seq_length=4), "at least 5"),
        (dict(max_seq_length=20, max_predictions_per_seq=20), "must be smaller than max_seq_length"),
        (dict(masked_lm_prob=0.0), "masked_lm_prob"),
        (dict(dupe_factor=0), "dupe_factor"),
        (dict(short_seq_prob=1.5), "short_seq_prob"),
    ],
)
def test_config_rejects_conflicting_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        InstanceConfig.from_flat(**kwargs)


def test_fast_truncation_matches_the_original_lengths_and_front_share():
    from reference.instances import truncate_seq_pair_fast

    rng_exact, rng_fast = random.Random(0), random.Random(0)
    fronts_exact = fronts_fast = 0
    for la, lb, budget in [(10, 3, 8), (3, 10, 8), (7, 7, 5), (50, 40, 30), (1, 200, 100), (30, 30, 125)] * 300:
        a, b = list(range(la)), list(range(1000, 1000 + lb))
        ea, eb, et = truncate_seq_pair(a, b, budget, rng_exact)
        fa, fb, ft = truncate_seq_pair_fast(a, b, budget, rng_fast)
        assert (len(ea), len(eb), et) == (len(fa), len(fb), ft)  # lengths are deterministic
        assert fa == list(range(fa[0], fa[0] + len(fa)))  # a contiguous slice of A
        fronts_exact += (ea[0] if ea else 0) + ((eb[0] - 1000) if eb else 0)
        fronts_fast += (fa[0] if fa else 0) + ((fb[0] - 1000) if fb else 0)
    # tokens removed from the front: same expectation (half of the removals)
    assert abs(fronts_fast / fronts_exact - 1) < 0.05


def test_fast_and_exact_sampling_agree_over_many_seeds():
    vocab = synthetic_vocab()
    ids = VocabIds(vocab)
    docs = synthetic_corpus(vocab, 80, seed=3)
    totals = {}
    for fast in (False, True):
        count = InstanceStats()
        for seed in range(10):
            stats = InstanceStats()
            create_training_instances(
                docs,
                InstanceConfig(dupe_factor=2, random_seed=seed),
                ids,
                random.Random(seed),
                stats,
                mask=not fast,
                fast_truncation=fast,
            )
            count.merge(stats)
        totals[fast] = count
    exact, fast = totals[False], totals[True]
    assert abs(fast.instances / exact.instances - 1) < 0.02
    assert abs(fast.not_next / fast.instances - exact.not_next / exact.instances) < 0.015
    assert abs(fast.truncated / fast.instances - exact.truncated / exact.instances) < 0.015
    assert abs(fast.tokens / fast.instances - exact.tokens / exact.instances) < 1.0
