"""What the instance algorithm shares: vocab ids, counters, truncation and the per-bucket seed.

The algorithm is google-research/bert ``create_pretraining_data.py`` (HEAD eedf571), whose
behaviour the golden tests pin against the original's output. ``make-shards`` runs it per bucket as
:mod:`bertprep.pipeline.instances.bucket_instances`
(on sentence lengths and flat arrays); the readable list-based restatement, ``create_training_instances``, is the
test oracle in ``tests/reference/instances.py``. Both use these pieces and the masking rule of
:mod:`bertprep.pipeline.masking.rule`, so the two cannot drift apart:

* :class:`VocabIds`: the ids the algorithm needs from the vocab;
* :class:`InstanceStats`: counters summed into the manifest;
* :func:`truncation_bounds`: the original ``truncate_seq_pair`` draw for draw, and
  :func:`truncation_bounds_fast` (``--sampling fast``, same distribution);
* :func:`bucket_seed`: the ``random.Random`` seed of a bucket.

Every function takes its ``rng`` and settings explicitly and reads no globals.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertprep.pipeline.text.tokenization import Vocab


class VocabIds:
    """What the algorithm needs from the vocab, as ids.

    Attributes:
        cls_id, sep_id, mask_id: ids of the tokens of the roles [CLS], [SEP], [MASK] (RoBERTa: ``<s>``,
            ``</s>``, ``<mask>``).
        random_ids: id of each entry of the original's ``vocab_words`` (distinct entries in first-seen
            order), so ``random_ids[rng.randint(0, len - 1)]`` is the original's random replacement. A BPE /
            Unigram tokenizer's added tokens (its special tokens among them) are left out, as fairseq's RoBERTa
            masking leaves out its special tokens: a random ``<pad>`` would move RoBERTa's positions.
        is_continuation: ``is_continuation[id]`` is True for a piece that continues a word (whole-word masking):
            WordPiece's ``##`` pieces, a byte-level BPE's pieces without ``Ġ`` (``Vocab.is_continuation``).
    """

    def __init__(self, vocab: Vocab):
        specials = vocab.special_token_ids()
        self.cls_id = specials["[CLS]"]
        self.sep_id = specials["[SEP]"]
        self.mask_id = specials["[MASK]"]
        self.random_ids = [vocab.token_to_id[w] for w in vocab.vocab_words]
        if vocab.pretrained is not None:
            added = set(vocab.pretrained.full.get_added_tokens_decoder())
            self.random_ids = [i for i in self.random_ids if i not in added]
        self.is_continuation = vocab.is_continuation()


@dataclass
class InstanceStats:
    """Counters of what instance creation did; summed across buckets into the manifest."""

    instances: int = 0
    not_next: int = 0  # rows with next_sentence_label 1 (NotNext; under objective sop: swapped)
    tokens: int = 0
    masked: int = 0
    masked_as_mask: int = 0
    masked_as_random: int = 0
    masked_as_kept: int = 0
    truncated: int = 0
    unk_tokens: int = 0
    same_document_not_next: int = 0
    length_histogram: dict[int, int] = field(default_factory=dict)  # length -> count
    # objective sop: chunks of one sentence, merged with the next sentence or (at a document's end) skipped
    one_segment_chunks_merged: int = 0
    one_segment_chunks_skipped: int = 0
    one_segment_tokens_skipped: int = 0
    # objective none: [SEP] tokens put between two documents
    document_separators: int = 0

    def merge(self, other: InstanceStats) -> InstanceStats:
        for name in (
            "instances",
            "not_next",
            "tokens",
            "masked",
            "masked_as_mask",
            "masked_as_random",
            "masked_as_kept",
            "truncated",
            "unk_tokens",
            "same_document_not_next",
            "one_segment_chunks_merged",
            "one_segment_chunks_skipped",
            "one_segment_tokens_skipped",
            "document_separators",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for length, count in other.length_histogram.items():
            self.length_histogram[length] = self.length_histogram.get(length, 0) + count
        return self

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["length_histogram"] = {str(k): v for k, v in sorted(self.length_histogram.items())}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> InstanceStats:
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


def truncation_bounds_fast(
    len_a: int, len_b: int, max_num_tokens: int, rng: random.Random
) -> tuple[int, int, int, int]:
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


def bucket_seed(random_seed: int, bucket: int) -> int:
    """Seed of ``random.Random`` for bucket ``bucket``: ``random_seed`` itself for bucket 0 (so one-bucket
    mode is the original generator exactly), and a distinct integer for every other bucket.

    ``random.Random(int)`` uses every bit of the integer, so ``random_seed + bucket * 2**32`` gives each
    bucket its own stream. Stable across processes and machines (no ``hash()``).
    """
    if random_seed < 0 or bucket < 0:
        raise ValueError("random_seed and bucket must be >= 0")
    return random_seed + (bucket << 32)
