"""Masking a whole table with numpy (``pipeline/masking/fast.py``, ``make-shards --sampling fast``): the
rule's budget, positions and 80/10/10 rates, the original's statistics on the reference algorithm's
instances, and the same table from the same seed."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from bertprep.core import schema
from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.fast import mask_table
from bertprep.pipeline.masking.rule import num_to_predict
from reference.instances import create_training_instances, instances_to_table
from synthetic_corpus import synthetic_corpus, synthetic_vocab

CLS, SEP, MASK_ID, VOCAB = 101, 102, 103, 1000


def _instance(rng: random.Random) -> tuple[list[int], int]:
    len_a, len_b = rng.randint(1, 60), rng.randint(1, 60)
    body = [rng.randint(200, VOCAB - 1) for _ in range(len_a + len_b)]
    return [CLS, *body[:len_a], SEP, *body[len_a:], SEP], len_a


def _unmasked_table(n_rows: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    ids, types = [], []
    for _ in range(n_rows):
        tokens, len_a = _instance(rng)
        ids.append(tokens)
        types.append([0] * (len_a + 2) + [1] * (len(tokens) - len_a - 2))
    return pa.Table.from_pydict(
        {
            "input_ids": ids,
            "token_type_ids": types,
            "masked_lm_positions": [[]] * n_rows,
            "masked_lm_ids": [[]] * n_rows,
            "next_sentence_label": [0] * n_rows,
        },
        schema=schema.shard_schema(VOCAB),
    )


def test_mask_table_follows_the_rule_and_is_deterministic():
    config = InstanceConfig(max_seq_length=128, mlm=MaskingConfig(max_predictions_per_seq=20))
    table = _unmasked_table(3000, 4)
    random_ids = np.arange(200, VOCAB)
    masked, counts = mask_table(table, config.mlm, MASK_ID, random_ids, np.random.default_rng(0))
    again, _ = mask_table(table, config.mlm, MASK_ID, random_ids, np.random.default_rng(0))
    assert masked.equals(again)
    rows, originals = masked.to_pylist(), table.column("input_ids").to_pylist()
    for row, original in zip(rows, originals, strict=True):
        positions = row["masked_lm_positions"]
        assert len(positions) == num_to_predict(len(original), 0.15, 20)
        assert positions == sorted(set(positions))
        assert all(original[p] not in (CLS, SEP) for p in positions)
        assert row["masked_lm_ids"] == [original[p] for p in positions]
    assert counts["masked"] == sum(len(r["masked_lm_positions"]) for r in rows)
    assert abs(counts["masked_as_mask"] / counts["masked"] - 0.8) < 0.02
    assert abs(counts["masked_as_random"] / counts["masked"] - 0.1) < 0.02


def test_fast_masking_has_the_original_statistics():
    vocab = synthetic_vocab()
    ids = VocabIds(vocab)
    config = InstanceConfig(max_seq_length=128, dupe_factor=3, mlm=MaskingConfig(max_predictions_per_seq=20))
    instances = create_training_instances(
        synthetic_corpus(vocab, 150), config, ids, random.Random(5), mask=False, fast_truncation=True
    )
    table = instances_to_table(instances, vocab.size)
    masked, counts = mask_table(table, config.mlm, ids.mask_id, np.asarray(ids.random_ids), np.random.default_rng(0))
    assert masked.num_rows == len(instances)
    assert counts["masked"] > 20000
    assert abs(counts["masked_as_mask"] / counts["masked"] - 0.8) < 0.01
    assert abs(counts["masked_as_random"] / counts["masked"] - 0.1) < 0.01
    assert abs(counts["masked_as_kept"] / counts["masked"] - 0.1) < 0.01
    rows = masked.to_pylist()
    for inst, row in zip(instances, rows, strict=True):
        n = len(inst.input_ids)
        assert len(row["masked_lm_positions"]) == min(20, max(1, int(round(n * 0.15))))
        assert row["masked_lm_positions"] == sorted(set(row["masked_lm_positions"]))
        assert row["masked_lm_ids"] == [inst.input_ids[p] for p in row["masked_lm_positions"]]
        special = {0, inst.num_tokens_a + 1, n - 1}
        assert not special & set(row["masked_lm_positions"])
        changed = {p for p, (x, y) in enumerate(zip(inst.input_ids, row["input_ids"], strict=True)) if x != y}
        assert changed <= set(row["masked_lm_positions"])
    # every candidate position is equally likely to be chosen (uniform subset, as the original's shuffle)
    first_half = sum(sum(1 for p in r["masked_lm_positions"] if p < len(r["input_ids"]) / 2) for r in rows)
    assert abs(first_half / counts["masked"] - 0.5) < 0.02
