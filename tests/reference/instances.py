"""The list-based reference algorithm: the oracle the production code is checked against.

google-research/bert ``create_pretraining_data.py`` (HEAD eedf571) ``create_training_instances``,
``create_instances_from_document`` and ``truncate_seq_pair``, restated in ``design/reference-algorithm.md``
and reproduced here draw for draw on CPython's ``random.Random``: given the same documents (same order),
vocab, settings and seed it yields the same instances in the same order as the original (checked against the
original's output in ``tests/test_golden.py``). It works on integer word-piece ids instead of token strings
and keeps segment boundaries as index ranges instead of deleting from lists.

``make-shards`` does not run this: it runs ``bertprep.pipeline.instances.bucket_instances`` (the same draws on sentence
lengths and flat arrays) and ``bertprep.pipeline.instances.bucket_rows``, which ``tests/test_bucket_instances.py``
checks
row for row against :func:`create_training_instances` + :func:`instances_to_table`. The masking and truncation
rules themselves are production code (``bertprep.pipeline.masking.rule``, ``bertprep.pipeline.instances.common``),
and so is
the shuffle (``bertprep.pipeline.masking.exact_draws``), shared by both.
Tests import it as ``from reference.instances import ...`` (``tests/`` is on ``sys.path``); benchmarks put
``tests/`` on ``sys.path`` first.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from bertprep.core import schema
from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.instances.common import InstanceStats, VocabIds, truncation_bounds, truncation_bounds_fast
from bertprep.pipeline.masking.exact_draws import shuffle
from bertprep.pipeline.masking.rule import create_masked_lm_predictions

Sentence = Sequence[int]  # word-piece ids of one sentence (non-empty)
Document = Sequence[Sentence]


class TrainingInstance(NamedTuple):
    """One pre-training example, unpadded.

    Attributes:
        input_ids: ``[CLS] A [SEP] B [SEP]`` after masking, length <= max_seq_length.
        num_tokens_a: len(A) after truncation; ``token_type_ids`` are 0 for the first ``num_tokens_a + 2``
            tokens and 1 for the rest.
        masked_lm_positions: predicted positions, ascending.
        masked_lm_ids: original ids at those positions (the labels).
        next_sentence_label: 1 = NotNext (B is random), 0 = IsNext.
    """

    input_ids: list[int]
    num_tokens_a: int
    masked_lm_positions: list[int]
    masked_lm_ids: list[int]
    next_sentence_label: int


def truncate_seq_pair(
    tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random
) -> tuple[list[int], list[int], bool]:
    """Truncate a pair to at most ``max_num_tokens`` in total, as the original ``truncate_seq_pair``
    (see :func:`truncation_bounds`).

    Returns:
        (tokens_a, tokens_b, truncated): the kept slices (new lists) and whether anything was removed.
    """
    if len(tokens_a) + len(tokens_b) <= max_num_tokens:
        return tokens_a, tokens_b, False
    a_lo, a_hi, b_lo, b_hi = truncation_bounds(len(tokens_a), len(tokens_b), max_num_tokens, rng)
    return tokens_a[a_lo:a_hi], tokens_b[b_lo:b_hi], True


def truncate_seq_pair_fast(
    tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random
) -> tuple[list[int], list[int], bool]:
    """:func:`truncate_seq_pair` with :func:`truncation_bounds_fast` (``sampling="fast"``)."""
    if len(tokens_a) + len(tokens_b) <= max_num_tokens:
        return tokens_a, tokens_b, False
    a_lo, a_hi, b_lo, b_hi = truncation_bounds_fast(len(tokens_a), len(tokens_b), max_num_tokens, rng)
    return tokens_a[a_lo:a_hi], tokens_b[b_lo:b_hi], True


def create_instances_from_document(
    all_documents: Sequence[Document],
    document_index: int,
    config: InstanceConfig,
    ids: VocabIds,
    rng: random.Random,
    stats: InstanceStats | None = None,
    mask: bool = True,
    fast_truncation: bool = False,
) -> list[TrainingInstance]:
    """All instances of one pass over one document, as the original ``create_instances_from_document``.

    Sentences are packed into chunks up to a target length (``max_seq_length - 3``, or with probability
    ``short_seq_prob`` a random length in [2, max_seq_length - 3]); each chunk is split at a random
    sentence boundary into A and B, and with probability 0.5 (always for a one-sentence chunk) B is
    replaced by a random span of another document (NotNext), the unused sentences going back to the pool.
    With ``mask=False`` (dynamic masking, done later by the trainer) no masking draws are made and the
    instances carry no predictions. ``fast_truncation`` uses :func:`truncate_seq_pair_fast` (same
    distribution, different random stream).
    """
    document = all_documents[document_index]
    max_num_tokens = config.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < config.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    cls_id, sep_id = ids.cls_id, ids.sep_id
    truncate = truncate_seq_pair_fast if fast_truncation else truncate_seq_pair
    instances: list[TrainingInstance] = []
    current_chunk: list[Sentence] = []
    current_length = 0
    n_sentences = len(document)
    i = 0
    while i < n_sentences:
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == n_sentences - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a: list[int] = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])

                tokens_b: list[int] = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    random_document_index = document_index
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    if stats is not None and random_document_index == document_index:
                        stats.same_document_not_next += 1
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(current_chunk) - a_end  # put the unused segments back
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])

                tokens_a, tokens_b, truncated = truncate(tokens_a, tokens_b, max_num_tokens, rng)
                assert tokens_a and tokens_b, "the reference guarantees non-empty segments"
                tokens = [cls_id, *tokens_a, sep_id, *tokens_b, sep_id]
                if mask:
                    output, positions, labels = create_masked_lm_predictions(
                        tokens, config.mlm, ids, rng, stats, len(tokens_a)
                    )
                else:
                    output, positions, labels = tokens, [], []
                instances.append(TrainingInstance(output, len(tokens_a), positions, labels, 1 if is_random_next else 0))
                if stats is not None:
                    stats.instances += 1
                    stats.not_next += is_random_next
                    stats.tokens += len(tokens)
                    stats.truncated += truncated
                    stats.length_histogram[len(tokens)] = stats.length_histogram.get(len(tokens), 0) + 1
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def create_training_instances(
    documents: Sequence[Document],
    config: InstanceConfig,
    ids: VocabIds,
    rng: random.Random,
    stats: InstanceStats | None = None,
    mask: bool = True,
    fast_truncation: bool = False,
) -> list[TrainingInstance]:
    """The original ``create_training_instances`` after tokenization, for one bucket of documents.

    Drops empty documents, shuffles the documents with ``rng``, makes ``dupe_factor`` passes of
    :func:`create_instances_from_document` over them, and shuffles the resulting instances.

    Args:
        documents: the bucket's documents in id order, each a list of sentences of word-piece ids.
        rng: ``random.Random(random_seed)`` for one-bucket mode (this is the original exactly); see
            :func:`bertprep.pipeline.instances.common.bucket_seed` for the per-bucket seed.
    """
    all_documents = [d for d in documents if d]
    if not all_documents:
        return []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small lists, no cycles: the collector only costs time here
    try:
        shuffle(all_documents, rng)
        instances: list[TrainingInstance] = []
        for _ in range(config.dupe_factor):
            for document_index in range(len(all_documents)):
                instances.extend(
                    create_instances_from_document(
                        all_documents, document_index, config, ids, rng, stats, mask, fast_truncation
                    )
                )
        shuffle(instances, rng)
    finally:
        if gc_was_enabled:
            gc.enable()
    return instances


def instances_to_table(instances: Sequence[TrainingInstance], vocab_size: int) -> pa.Table:
    """Arrow table (schema :func:`schema.shard_schema`) of unpadded instances, in the given order."""
    arrow_schema = schema.shard_schema(vocab_size)
    id_dtype = np.uint16 if arrow_schema.field("input_ids").type.value_type == pa.uint16() else np.uint32
    n = len(instances)
    flat: list[int] = []
    extend = flat.extend
    lengths = np.empty(n, dtype=np.int64)
    first_b = np.empty(n, dtype=np.int64)
    m_flat: list[int] = []
    m_labels: list[int] = []
    m_lengths = np.empty(n, dtype=np.int64)
    nsp = np.empty(n, dtype=np.uint8)
    for k, x in enumerate(instances):
        extend(x.input_ids)
        lengths[k] = len(x.input_ids)
        first_b[k] = x.num_tokens_a + 2
        m_flat.extend(x.masked_lm_positions)
        m_labels.extend(x.masked_lm_ids)
        m_lengths[k] = len(x.masked_lm_positions)
        nsp[k] = x.next_sentence_label
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    input_ids = np.array(flat, dtype=id_dtype)
    del flat
    # token_type_ids: 1 from each row's first B position to its end (a +1/-1 step function, summed)
    steps = np.zeros(total + 1, dtype=np.int8)
    steps[offsets[:-1] + first_b] += 1
    steps[offsets[1:]] -= 1
    token_type_ids = np.cumsum(steps[:-1], dtype=np.int8).astype(np.uint8)
    m_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(m_lengths, out=m_offsets[1:])
    positions = np.array(m_flat, dtype=np.uint16)
    labels = np.array(m_labels, dtype=id_dtype)

    def list_array(offs: np.ndarray, values: np.ndarray, field_name: str) -> pa.Array:
        return pa.ListArray.from_arrays(
            pa.array(offs.astype(np.int32)), pa.array(values), type=arrow_schema.field(field_name).type
        )

    return pa.Table.from_arrays(
        [
            list_array(offsets, input_ids, "input_ids"),
            list_array(offsets, token_type_ids, "token_type_ids"),
            list_array(m_offsets, positions, "masked_lm_positions"),
            list_array(m_offsets, labels, "masked_lm_ids"),
            pa.array(nsp, type=pa.uint8()),
        ],
        schema=arrow_schema,
    )
