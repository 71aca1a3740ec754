"""The array-based bucket path (what make-shards runs) equals the list-based reference, row for row.

``bucket_instances.describe_instances`` + ``bucket_rows.assemble_batches`` must give exactly the Arrow rows that
``reference.instances.create_training_instances`` + ``instances_to_table`` (``tests/reference/``) give
(same draws, same order), for every mode make-shards has: exact and fast truncation, static masking (single
pieces and whole words) and no masking (dynamic), short and one-sentence documents, truncation-heavy settings,
several seeds; and the
random generator must be left in the same state.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments
from bertprep.pipeline.instances.bucket_instances import describe_instances
from bertprep.pipeline.instances.bucket_rows import assemble_batches
from bertprep.pipeline.instances.common import InstanceStats, VocabIds
from bertprep.pipeline.text.tokenization import Vocab
from reference.instances import create_training_instances, instances_to_table

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _vocab(n_words: int = 600) -> Vocab:
    words = [f"w{i}" for i in range(n_words // 2)] + [f"##p{i}" for i in range(n_words - n_words // 2)]
    return Vocab.from_tokens(SPECIALS + words, source="synthetic")


def _corpus(vocab: Vocab, n_docs: int, seed: int, max_sentences: int = 30, max_len: int = 40):
    rng = random.Random(seed)
    ids = list(range(len(SPECIALS), vocab.size))
    docs = []
    for _ in range(n_docs):
        n = rng.choice([0, 1, 1, 2]) if rng.random() < 0.2 else rng.randint(1, max_sentences)
        docs.append([[rng.choice(ids) for _ in range(rng.randint(1, max_len))] for _ in range(n)])
    return docs


def _both(docs, config: InstanceConfig, *, mask: bool, fast: bool, chunk_rows: int = 97):
    vocab = _vocab()
    ids = VocabIds(vocab)
    ref_rng, new_rng = random.Random(config.random_seed), random.Random(config.random_seed)
    ref_stats, new_stats = InstanceStats(), InstanceStats()
    reference = create_training_instances(docs, config, ids, ref_rng, ref_stats, mask=mask, fast_truncation=fast)
    ref_table = instances_to_table(reference, vocab.size)
    described = describe_instances(
        BucketDocuments.from_lists(docs), config, ids, new_rng, new_stats, mask=mask, fast_truncation=fast
    )
    batches = list(
        assemble_batches(BucketDocuments.from_lists(docs), described, ids, vocab.size, chunk_rows=chunk_rows)
    )
    new_table = pa.Table.from_batches(batches, schema=ref_table.schema)
    return ref_table, new_table, ref_stats, new_stats, ref_rng, new_rng


CASES = [
    # (config kwargs, mask, fast truncation)
    (dict(), True, False),
    (dict(dupe_factor=3, random_seed=7, short_seq_prob=0.5), True, False),
    (dict(max_seq_length=24, max_predictions_per_seq=5, dupe_factor=2, random_seed=3), True, False),
    (dict(max_seq_length=64, max_predictions_per_seq=10, do_whole_word_mask=True, dupe_factor=2), True, False),
    (dict(max_seq_length=32, max_predictions_per_seq=30, masked_lm_prob=0.9), True, False),
    (dict(dupe_factor=2, random_seed=11), False, False),
    (dict(dupe_factor=2, random_seed=5, max_seq_length=40, max_predictions_per_seq=6), True, True),
    (dict(dupe_factor=2, random_seed=5, do_whole_word_mask=True), True, True),
    (dict(dupe_factor=2, random_seed=13), False, True),
]


@pytest.mark.parametrize("kwargs,mask,fast", CASES)
@pytest.mark.parametrize("corpus_seed", [0, 1])
def test_array_path_equals_the_reference_row_for_row(kwargs, mask, fast, corpus_seed):
    vocab = _vocab()
    config = InstanceConfig.from_flat(**kwargs)
    docs = _corpus(vocab, 40, corpus_seed)
    ref, new, ref_stats, new_stats, ref_rng, new_rng = _both(docs, config, mask=mask, fast=fast)
    assert ref.num_rows > 50
    assert new.num_rows == ref.num_rows
    for column in ref.column_names:
        assert new.column(column).to_pylist() == ref.column(column).to_pylist(), column
    assert new_stats.to_dict() == ref_stats.to_dict()
    assert new_rng.getstate() == ref_rng.getstate()  # every draw made, none extra


def test_one_document_bucket_and_all_empty_bucket():
    vocab = _vocab()
    config = InstanceConfig(dupe_factor=2)
    ref, new, *_ = _both([[[5, 6, 7], [8, 9], [10]]], config, mask=True, fast=False)
    assert new.to_pylist() == ref.to_pylist() and ref.num_rows > 0
    ids = VocabIds(vocab)
    described = describe_instances(BucketDocuments.from_lists([[], []]), config, ids, random.Random(1))
    assert len(described) == 0
    assert list(assemble_batches(BucketDocuments.from_lists([[], []]), described, ids, vocab.size)) == []
