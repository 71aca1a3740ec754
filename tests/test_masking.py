"""The masked-LM rule (``pipeline/masking.py``): exact form draw for draw as the original, numpy form with the
original's rates, both deterministic."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from bertprep.pipeline import schema
from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.masking import (
    KEEP,
    MASK,
    MaskingConfig,
    create_masked_lm_predictions,
    draw_replacements,
    mask_instance,
    mask_table,
    num_to_predict,
    replace_positions,
    shuffle,
)

CLS, SEP, MASK_ID, VOCAB = 101, 102, 103, 1000


class _Ids:
    """The ``VocabIds`` fields the rule reads: ids 500.. are ``##`` pieces."""

    cls_id, sep_id, mask_id = CLS, SEP, MASK_ID
    random_ids = list(range(VOCAB))
    is_continuation = [i >= 500 for i in range(VOCAB)]


def _original(tokens, config, ids, rng):
    """google-research/bert ``create_masked_lm_predictions`` (HEAD eedf571) transcribed line for line on ids."""
    cand_indexes = []
    for (i, token) in enumerate(tokens):
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
    config = InstanceConfig(max_seq_length=128, max_predictions_per_seq=20, do_whole_word_mask=whole_word)
    data = random.Random(0)
    for seed in range(300):
        tokens, len_a = _instance(data)
        ours, theirs = random.Random(seed), random.Random(seed)
        got = create_masked_lm_predictions(tokens, config, _Ids, ours, num_tokens_a=None if whole_word else len_a)
        assert got == _original(tokens, config, _Ids, theirs)
        assert ours.random() == theirs.random()  # the same number of draws was taken


def test_exact_shuffle_is_random_shuffle():
    class Sub(random.Random):
        pass

    for rng_type in (random.Random, Sub):
        for size in (0, 1, 5, 125, 1000):
            a, b = list(range(size)), list(range(size))
            ra, rb = rng_type(size), random.Random(size)
            shuffle(a, ra)
            rb.shuffle(b)
            assert a == b and ra.random() == rb.random()


def test_exact_replacements_have_the_80_10_10_rates():
    codes = np.array(draw_replacements(200_000, random.Random(1), list(range(VOCAB))))
    assert abs((codes == MASK).mean() - 0.8) < 0.005
    assert abs((codes == KEEP).mean() - 0.1) < 0.005
    assert abs((codes >= 0).mean() - 0.1) < 0.005
    assert codes.max() < VOCAB
    assert draw_replacements(1000, random.Random(1), list(range(VOCAB))) == codes[:1000].tolist()


def test_num_to_predict_rounds_half_to_even_and_caps():
    assert num_to_predict(10, 0.15, 20) == 2      # 1.5 -> 2
    assert num_to_predict(30, 0.15, 20) == 4      # 4.5 -> 4 (Python round)
    assert num_to_predict(3, 0.15, 20) == 1       # at least one
    assert num_to_predict(512, 0.15, 20) == 20    # capped


def test_numpy_replacements_have_the_80_10_10_rates_and_are_deterministic():
    values = np.full(300_000, 7, dtype=np.int64)
    n_mask, n_random = replace_positions(values, np.arange(len(values)), MASK_ID, np.arange(200, 300),
                                         np.random.default_rng(3))
    assert abs(n_mask / len(values) - 0.8) < 0.005 and abs(n_random / len(values) - 0.1) < 0.005
    assert (values == MASK_ID).sum() == n_mask
    assert ((values >= 200) & (values < 300)).sum() == n_random
    assert (values == 7).sum() == len(values) - n_mask - n_random
    again = np.full(300_000, 7, dtype=np.int64)
    replace_positions(again, np.arange(len(again)), MASK_ID, np.arange(200, 300), np.random.default_rng(3))
    assert np.array_equal(values, again)


def test_mask_instance_follows_the_rule():
    config = MaskingConfig(vocab_size=VOCAB, cls_token_id=CLS, sep_token_id=SEP, mask_token_id=MASK_ID)
    data = random.Random(2)
    rng = np.random.default_rng(0)
    total = masked = 0
    for _ in range(2000):
        tokens, _ = _instance(data)
        out, positions, labels = mask_instance(np.array(tokens), config, rng)
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
    first = mask_instance(np.array(tokens), config, np.random.default_rng(5))
    second = mask_instance(np.array(tokens), config, np.random.default_rng(5))
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


def test_mask_instance_whole_words():
    is_subword = np.array(_Ids.is_continuation)
    config = MaskingConfig(vocab_size=VOCAB, cls_token_id=CLS, sep_token_id=SEP, mask_token_id=MASK_ID,
                           is_subword=is_subword)
    # words of three pieces: 200 ##600 ##601
    tokens = np.array([CLS] + [200, 600, 601] * 10 + [SEP] + [201, 602, 603] * 10 + [SEP])
    rng = np.random.default_rng(1)
    for _ in range(200):
        _, positions, _ = mask_instance(tokens, config, rng)
        assert len(positions) % 3 == 0 and len(positions) <= num_to_predict(len(tokens), 0.15, 20)
        starts = positions[::3]
        assert not is_subword[tokens[starts]].any()            # each group starts a word ...
        assert np.array_equal(positions.reshape(-1, 3), starts[:, None] + np.arange(3))  # ... and is whole


def _unmasked_table(n_rows: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    ids, types = [], []
    for _ in range(n_rows):
        tokens, len_a = _instance(rng)
        ids.append(tokens)
        types.append([0] * (len_a + 2) + [1] * (len(tokens) - len_a - 2))
    return pa.Table.from_pydict({"input_ids": ids, "token_type_ids": types, "masked_lm_positions": [[]] * n_rows,
                                 "masked_lm_ids": [[]] * n_rows, "next_sentence_label": [0] * n_rows},
                                schema=schema.shard_schema(VOCAB))


def test_mask_table_follows_the_rule_and_is_deterministic():
    config = InstanceConfig(max_seq_length=128, max_predictions_per_seq=20)
    table = _unmasked_table(3000, 4)
    random_ids = np.arange(200, VOCAB)
    masked, counts = mask_table(table, config, MASK_ID, random_ids, np.random.default_rng(0))
    again, _ = mask_table(table, config, MASK_ID, random_ids, np.random.default_rng(0))
    assert masked.equals(again)
    rows, originals = masked.to_pylist(), table.column("input_ids").to_pylist()
    for row, original in zip(rows, originals):
        positions = row["masked_lm_positions"]
        assert len(positions) == num_to_predict(len(original), 0.15, 20)
        assert positions == sorted(set(positions))
        assert all(original[p] not in (CLS, SEP) for p in positions)
        assert row["masked_lm_ids"] == [original[p] for p in positions]
    assert counts["masked"] == sum(len(r["masked_lm_positions"]) for r in rows)
    assert abs(counts["masked_as_mask"] / counts["masked"] - 0.8) < 0.02
    assert abs(counts["masked_as_random"] / counts["masked"] - 0.1) < 0.02
