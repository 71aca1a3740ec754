"""The reference algorithm: sentence pairs (IsNext/NotNext) and masked-LM predictions.

Source: google-research/bert ``create_pretraining_data.py`` (HEAD eedf571): ``create_training_instances``,
``create_instances_from_document``, ``truncate_seq_pair`` and ``create_masked_lm_predictions``, restated in
``design/reference-algorithm.md``. This module reproduces it exactly, draw for draw on CPython's
``random.Random``: given the same documents (same order), vocab, settings and seed, it yields the same
instances in the same order as the original (checked against the original's output in
``tests/test_golden.py``).

It works on integer word-piece ids instead of token strings (same output, ~3x faster), keeps segment
boundaries as index ranges instead of deleting from lists, and pauses the garbage collector while a bucket
is processed (the algorithm makes no reference cycles). Every function takes its ``rng`` and settings
explicitly and reads no globals, so the Beam DoFns in ``beam_pipeline.py`` only adapt them.
"""

from __future__ import annotations

import gc
import random
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.masking import create_masked_lm_predictions, shuffle
from bertprep.pipeline.tokenization import Vocab

Sentence = Sequence[int]  # word-piece ids of one sentence (non-empty)
Document = Sequence[Sentence]


class VocabIds:
    """What the algorithm needs from the vocab, as ids.

    Attributes:
        cls_id, sep_id, mask_id: ids of [CLS], [SEP], [MASK].
        random_ids: id of each entry of the original's ``vocab_words`` (distinct entries in first-seen
            order), so ``random_ids[rng.randint(0, len - 1)]`` is the original's random replacement.
        is_continuation: ``is_continuation[id]`` is True for ``##`` pieces (whole-word masking).
    """

    def __init__(self, vocab: Vocab):
        self.cls_id = vocab.token_to_id["[CLS]"]
        self.sep_id = vocab.token_to_id["[SEP]"]
        self.mask_id = vocab.token_to_id["[MASK]"]
        self.random_ids = [vocab.token_to_id[w] for w in vocab.vocab_words]
        self.is_continuation = [t.startswith("##") for t in vocab.tokens]


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


@dataclass
class InstanceStats:
    """Counters of what instance creation did; summed across buckets into the manifest."""

    instances: int = 0
    not_next: int = 0
    tokens: int = 0
    masked: int = 0
    masked_as_mask: int = 0
    masked_as_random: int = 0
    masked_as_kept: int = 0
    truncated: int = 0
    unk_tokens: int = 0
    same_document_not_next: int = 0
    length_histogram: dict[int, int] = field(default_factory=dict)  # length -> count

    def merge(self, other: "InstanceStats") -> "InstanceStats":
        for name in ("instances", "not_next", "tokens", "masked", "masked_as_mask", "masked_as_random",
                     "masked_as_kept", "truncated", "unk_tokens", "same_document_not_next"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for length, count in other.length_histogram.items():
            self.length_histogram[length] = self.length_histogram.get(length, 0) + count
        return self

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["length_histogram"] = {str(k): v for k, v in sorted(self.length_histogram.items())}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "InstanceStats":
        d = dict(d)
        d["length_histogram"] = {int(k): v for k, v in d.get("length_histogram", {}).items()}
        return cls(**d)


def truncation_bounds(len_a: int, len_b: int, max_num_tokens: int, rng: random.Random) -> tuple[int, int, int, int]:
    """What the original ``truncate_seq_pair`` keeps of segments of ``len_a`` and ``len_b`` tokens.

    While the pair is longer than ``max_num_tokens``, the longer segment (ties: B) loses a token from the
    front or the back with equal probability (one ``rng.random()`` per removed token).

    Returns:
        ``(a_lo, a_hi, b_lo, b_hi)``: the kept slices ``A[a_lo:a_hi]`` and ``B[b_lo:b_hi]``.
    """
    a_lo, a_hi, b_lo, b_hi = 0, len_a, 0, len_b
    rand = rng.random
    while (a_hi - a_lo) + (b_hi - b_lo) > max_num_tokens:
        if a_hi - a_lo > b_hi - b_lo:
            if rand() < 0.5:
                a_lo += 1
            else:
                a_hi -= 1
        else:
            if rand() < 0.5:
                b_lo += 1
            else:
                b_hi -= 1
    return a_lo, a_hi, b_lo, b_hi


def truncation_bounds_fast(len_a: int, len_b: int, max_num_tokens: int,
                           rng: random.Random) -> tuple[int, int, int, int]:
    """Same distribution as :func:`truncation_bounds` with two draws instead of one per removed token.

    How many tokens each segment loses does not depend on the random draws (the longer loses one per
    round, ties B), so it is computed directly; each removal is from the front with probability 1/2
    independently, so the number taken from the front is Binomial(r, 1/2) = the number of set bits of
    ``rng.getrandbits(r)``. Used by ``sampling="fast"``; the random stream differs from the original's.
    """
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return 0, len_a, 0, len_b
    if len_a > len_b:
        ra, rb = min(excess, len_a - len_b), 0
    else:
        ra, rb = 0, min(excess, len_b - len_a)
    rest = excess - ra - rb  # segments now equal: B, A, B, ... (ties truncate B)
    rb += (rest + 1) // 2
    ra += rest // 2
    fa = rng.getrandbits(ra).bit_count() if ra else 0
    fb = rng.getrandbits(rb).bit_count() if rb else 0
    return fa, len_a - (ra - fa), fb, len_b - (rb - fb)


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                      rng: random.Random) -> tuple[list[int], list[int], bool]:
    """Truncate a pair to at most ``max_num_tokens`` in total, as the original ``truncate_seq_pair``
    (see :func:`truncation_bounds`).

    Returns:
        (tokens_a, tokens_b, truncated): the kept slices (new lists) and whether anything was removed.
    """
    if len(tokens_a) + len(tokens_b) <= max_num_tokens:
        return tokens_a, tokens_b, False
    a_lo, a_hi, b_lo, b_hi = truncation_bounds(len(tokens_a), len(tokens_b), max_num_tokens, rng)
    return tokens_a[a_lo:a_hi], tokens_b[b_lo:b_hi], True


def truncate_seq_pair_fast(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                           rng: random.Random) -> tuple[list[int], list[int], bool]:
    """:func:`truncate_seq_pair` with :func:`truncation_bounds_fast` (``sampling="fast"``)."""
    if len(tokens_a) + len(tokens_b) <= max_num_tokens:
        return tokens_a, tokens_b, False
    a_lo, a_hi, b_lo, b_hi = truncation_bounds_fast(len(tokens_a), len(tokens_b), max_num_tokens, rng)
    return tokens_a[a_lo:a_hi], tokens_b[b_lo:b_hi], True


def create_instances_from_document(all_documents: Sequence[Document], document_index: int, config: InstanceConfig,
                                   ids: VocabIds, rng: random.Random,
                                   stats: InstanceStats | None = None, mask: bool = True,
                                   fast_truncation: bool = False) -> list[TrainingInstance]:
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
                    output, positions, labels = create_masked_lm_predictions(tokens, config, ids, rng, stats,
                                                                             len(tokens_a))
                else:
                    output, positions, labels = tokens, [], []
                instances.append(
                    TrainingInstance(output, len(tokens_a), positions, labels, 1 if is_random_next else 0)
                )
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


def create_training_instances(documents: Sequence[Document], config: InstanceConfig, ids: VocabIds,
                              rng: random.Random, stats: InstanceStats | None = None,
                              mask: bool = True, fast_truncation: bool = False) -> list[TrainingInstance]:
    """The original ``create_training_instances`` after tokenization, for one bucket of documents.

    Drops empty documents, shuffles the documents with ``rng``, makes ``dupe_factor`` passes of
    :func:`create_instances_from_document` over them, and shuffles the resulting instances.

    Args:
        documents: the bucket's documents in id order, each a list of sentences of word-piece ids.
        rng: ``random.Random(random_seed)`` for one-bucket mode (this is the original exactly); see
            :func:`bucket_seed` for the per-bucket seed.
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
                    create_instances_from_document(all_documents, document_index, config, ids, rng, stats, mask,
                                                   fast_truncation)
                )
        shuffle(instances, rng)
    finally:
        if gc_was_enabled:
            gc.enable()
    return instances


def bucket_seed(random_seed: int, bucket: int) -> int:
    """Seed of ``random.Random`` for bucket ``bucket``: ``random_seed`` itself for bucket 0 (so one-bucket
    mode is the original generator exactly), and a distinct integer for every other bucket.

    ``random.Random(int)`` uses every bit of the integer, so ``random_seed + bucket * 2**32`` gives each
    bucket its own stream. Stable across processes and machines (no ``hash()``).
    """
    if random_seed < 0 or bucket < 0:
        raise ValueError("random_seed and bucket must be >= 0")
    return random_seed + (bucket << 32)
