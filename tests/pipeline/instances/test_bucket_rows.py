"""Described instances into Arrow rows (``pipeline/instances/bucket_rows.py``): the row layout, the masks applied and
sorted, the objective ``none`` layout, the ``word_ids`` column, and rows that do not depend on the batch size.
(That the rows equal the list-based reference's, draw for draw, is ``test_bucket_instances.py``'s.)"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from bertprep.core import schema
from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments, InstanceDescriptions
from bertprep.pipeline.instances.bucket_instances import describe_instances
from bertprep.pipeline.instances.bucket_rows import assemble_batches
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.rule import KEEP
from bertprep.pipeline.text.tokenization import Vocab

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CLS, SEP, MASK = 2, 3, 4
W0, W1, W2, P0 = 5, 6, 7, 305  # words w0 w1 w2, and the ## piece ##p0


def _vocab() -> Vocab:
    return Vocab.from_tokens(
        SPECIALS + [f"w{i}" for i in range(300)] + [f"##p{i}" for i in range(300)], source="synthetic"
    )


def _describe(rows, objective: str = "nsp") -> InstanceDescriptions:
    """Descriptions by hand: per row ``(a_start, a_len, b_start, b_len, label, [(position, replacement)])``."""
    out = InstanceDescriptions()
    out.objective = objective
    for a_start, a_len, b_start, b_len, label, masks in rows:
        out.a_start.append(a_start)
        out.a_len.append(a_len)
        out.b_start.append(b_start)
        out.b_len.append(b_len)
        out.label.append(label)
        out.n_masked.append(len(masks))
        for position, replacement in masks:
            out.m_pos.append(position)
            out.m_rep.append(replacement)
    return out


def _rows(docs, described, word_ids: bool = False, chunk_rows: int = 8192) -> list[dict]:
    vocab = _vocab()
    batches = list(
        assemble_batches(docs, described, VocabIds(vocab), vocab.size, chunk_rows=chunk_rows, word_ids=word_ids)
    )
    return pa.Table.from_batches(batches, schema.shard_schema(vocab.size, described.objective, word_ids)).to_pylist()


def test_rows_are_cls_a_sep_b_sep_in_the_final_order_with_the_masks_applied():
    docs = BucketDocuments.from_lists([[[10, 11, 12], [13, 14]], [[20, 21], [22]]])  # flat: 10 11 12 13 14 20 21 22
    described = _describe(
        [
            (0, 3, 5, 2, 1, [(5, MASK), (2, KEEP), (1, 99)]),  # positions in draw order, not sorted
            (3, 2, 7, 1, 0, []),
        ]
    )
    described.order = [1, 0]
    assert _rows(docs, described) == [
        {
            "input_ids": [CLS, 13, 14, SEP, 22, SEP],
            "token_type_ids": [0, 0, 0, 0, 1, 1],
            "masked_lm_positions": [],
            "masked_lm_ids": [],
            "next_sentence_label": 0,
        },
        {
            "input_ids": [CLS, 99, 11, 12, SEP, MASK, 21, SEP],
            "token_type_ids": [0, 0, 0, 0, 0, 1, 1, 1],
            "masked_lm_positions": [1, 2, 5],
            "masked_lm_ids": [10, 11, 20],
            "next_sentence_label": 1,
        },
    ]


def test_objective_none_rows_are_one_segment_of_the_stream():
    docs = BucketDocuments.from_lists([[[10, 11]], [[20]]])
    described = _describe([(0, 3, 3, 0, 0, [(2, MASK)]), (3, 1, 4, 0, 0, [])], objective="none")
    described.ids = np.array([10, 11, SEP, 20], dtype=np.uint32)  # the documents joined by [SEP]
    described.order = [0, 1]
    assert _rows(docs, described) == [
        {
            "input_ids": [CLS, 10, MASK, SEP, SEP],
            "token_type_ids": [0] * 5,
            "masked_lm_positions": [2],
            "masked_lm_ids": [11],
        },
        {"input_ids": [CLS, 20, SEP], "token_type_ids": [0] * 3, "masked_lm_positions": [], "masked_lm_ids": []},
    ]


@pytest.mark.parametrize("segmenter", [False, True])
def test_word_ids_number_each_rows_words_from_the_unmasked_ids(segmenter):
    docs = BucketDocuments.from_lists([[[W0, P0, W1], [P0, W2]]])  # A = w0 ##p0 w1, B = ##p0 w2
    if segmenter:  # a segmenter's word starts: w0 ##p0 w1 is one word
        docs.word_starts = np.array([1, 0, 0, 1, 1], dtype=np.uint8)
    described = _describe([(0, 3, 3, 2, 0, [(2, MASK), (3, 99)])])  # masking changes no word id
    described.order = [0]
    (row,) = _rows(docs, described, word_ids=True)
    assert row["input_ids"] == [CLS, W0, MASK, 99, SEP, P0, W2, SEP]
    # a word never crosses [SEP]: the ##p0 that opens B starts a word
    assert row["word_ids"] == ([-1, 0, 0, 0, -1, 1, 2, -1] if segmenter else [-1, 0, 0, 1, -1, 2, 3, -1])


def test_rows_do_not_depend_on_the_batch_size():
    vocab = _vocab()
    rng = random.Random(4)
    docs = BucketDocuments.from_lists(
        [
            [[rng.randint(5, vocab.size - 1) for _ in range(rng.randint(1, 30))] for _ in range(rng.randint(1, 12))]
            for _ in range(30)
        ]
    )
    described = describe_instances(
        docs,
        InstanceConfig(max_seq_length=64, mlm=MaskingConfig(max_predictions_per_seq=10)),
        VocabIds(vocab),
        random.Random(0),
    )
    assert len(described) > 40
    whole = _rows(docs, described, word_ids=True)
    for chunk_rows in (1, 7, 40):
        batches = list(assemble_batches(docs, described, VocabIds(vocab), vocab.size, chunk_rows=chunk_rows))
        assert max(b.num_rows for b in batches) <= chunk_rows
        assert _rows(docs, described, word_ids=True, chunk_rows=chunk_rows) == whole
