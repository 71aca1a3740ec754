"""The reference algorithm over a bucket held as arrays: what ``make-shards`` runs for each bucket.

Same algorithm, same random draws and same output as ``tests/reference/instances.py`` (the readable,
list-based restatement of google-research/bert ``create_pretraining_data.py``, kept as the test oracle); the
equality is tested instance for instance in ``tests/test_bucket_instances.py`` and end to end by the golden tests. What
differs is where the work happens:

* A bucket's documents are one flat ``uint32`` array of word-piece ids plus each document's sentence
  lengths (:class:`~bertprep.pipeline.instances.bucket_arrays.BucketDocuments`): ~4 bytes per token instead of a Python
  list of lists (~40 bytes per token), and no decode to Python ints.
* The Python loop (:func:`describe_instances`) makes every random draw of the original in the same order,
  but works on sentence *lengths* only. In the reference algorithm nothing random depends on token values
  except whole-word masking: segments are runs of consecutive sentences, truncation removes tokens by
  count, and masking shuffles candidate *positions*. So an instance is described by
  ``(a_start, a_len, b_start, b_len, next_sentence_label)`` in flat-array coordinates plus its masked
  positions and replacement ids (:class:`~bertprep.pipeline.instances.bucket_arrays.InstanceDescriptions`), and no token
  list is ever built.
* :func:`~bertprep.pipeline.instances.bucket_rows.assemble_batches` turns the descriptions into Arrow rows with numpy.

Whole-word masking needs the tokens (a candidate is a piece plus its following ``##`` pieces), so for it
the loop reads the instance's ids from a Python copy of the bucket and calls the reference
:func:`~bertprep.pipeline.masking.rule.create_masked_lm_predictions`. The masking rule itself (how many
positions, 80/10/10) is :mod:`bertprep.pipeline.masking.rule`'s.

The other objectives (``InstanceConfig.objective``) use the same descriptions:

* ``sop`` (ALBERT, Lan et al. 2020, section 4.2; :func:`_describe_document_sop`): the pairing loop of the
  original with B always the rest of A's chunk (never another document), then A and B swapped with
  probability 0.5 (label 1 = swapped): a swapped row is described with B's offsets first. ALBERT's
  ``create_pretraining_data.py`` takes a random document when a chunk holds one sentence; here such a chunk
  is merged with the next sentence, or skipped (and counted) when it is a document's last.
* ``none`` (RoBERTa, Liu et al. 2019, section 4.2, FULL-SENTENCES; :func:`_describe_stream`): the bucket's
  documents (in a seeded shuffled order) back to back with one ``[SEP]`` between two documents, cut into rows
  of exactly ``max_seq_length - 2`` tokens between ``[CLS]`` and ``[SEP]`` (the last row of a bucket is
  shorter). The descriptions then index that stream (``InstanceDescriptions.ids``), ``b_len`` is 0 and
  there is no middle ``[SEP]``; ``dupe_factor`` passes repeat the rows with fresh masks (RoBERTa's static
  masking baseline, section 4.1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import random
from bisect import bisect_left
from collections.abc import Iterator

import numpy as np

from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments, InstanceDescriptions
from bertprep.pipeline.instances.common import InstanceStats, VocabIds, truncation_bounds, truncation_bounds_fast
from bertprep.pipeline.masking.exact_draws import randbelow_of, shuffle, shuffle_first
from bertprep.pipeline.masking.rule import KEEP, MASK, create_masked_lm_predictions, draw_replacements, num_to_predict


def describe_instances(
    docs: BucketDocuments,
    config: InstanceConfig,
    ids: VocabIds,
    rng: random.Random,
    stats: InstanceStats | None = None,
    mask: bool = True,
    fast_truncation: bool = False,
) -> InstanceDescriptions:
    """``create_training_instances`` (the original's), as descriptions instead of token lists.

    Draws from ``rng`` exactly what the reference draws, in the same order: the document shuffle,
    ``dupe_factor`` passes of pairing (target length, split point, IsNext/NotNext, random document and
    start), truncation, masking (with ``mask``) and the final instance shuffle. ``fast_truncation`` draws
    truncation as :func:`~bertprep.pipeline.instances.common.truncation_bounds_fast` does.

    ``config.objective`` ``sop`` and ``none`` make their rows as the module docstring says (same ``rng``, a
    different stream of draws; no original to equal).

    Returns:
        :class:`InstanceDescriptions`; adds to ``stats`` (instances, NotNext, tokens, truncations, masked
        counts by kind, length histogram; one-segment chunks under ``sop``, document separators under
        ``none``) what the reference would count.
    """
    out = InstanceDescriptions()
    objective = config.objective
    out.objective = objective
    stats = stats if stats is not None else InstanceStats()
    used = [d for d in range(len(docs.sentence_lengths)) if docs.sentence_lengths[d]]
    if not used:
        return out
    # word-level schemes (whole-word, ngram, span) mask through create_masked_lm_predictions, on the tokens
    whole_word = mask and config.mlm.effective_masking_scheme != "token"
    if whole_word and docs.word_starts is not None:
        out.word_starts = docs.word_starts.tolist()
    # truncated instances, NotNext from the document itself, (sop) one-segment chunks merged / skipped and
    # the tokens skipped with them
    counts = [0, 0, 0, 0, 0]
    with _gc_paused():
        if objective == "none":
            _describe_stream(docs, used, config, ids, rng, stats, mask, out)
        else:
            token_lists = docs.ids.tolist() if whole_word else None
            work = _Pass(config, ids, rng, stats, mask, fast_truncation, token_lists, out, counts)
            _describe_documents(docs, used, work)
        out.order = list(range(len(out)))
        shuffle(out.order, rng)
    _count_instances(out, stats, counts)
    if mask and not whole_word and objective != "none":  # (whole-word and `none`: counted by the reference function)
        _finish_token_masks(out, ids, stats)
    return out


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (the loop allocates millions of small objects that hold
    no cycles), back on after it if it was on."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()


def _count_instances(out: InstanceDescriptions, stats: InstanceStats, counts: list[int]) -> None:
    """Add to ``stats`` the counters the reference keeps per instance, from the descriptions, and ``counts``
    (the per-document loops' truncations, same-document NotNext, one-segment chunks)."""
    specials = 2 if out.objective == "none" else 3  # [CLS] A [SEP] (B [SEP])
    lengths = (
        np.frombuffer(out.a_len, dtype=np.int32).astype(np.int64) + np.frombuffer(out.b_len, dtype=np.int32) + specials
    )
    stats.instances += len(out)
    stats.not_next += int(np.frombuffer(out.label, dtype=np.uint8).sum(dtype=np.int64))
    stats.tokens += int(lengths.sum())
    stats.truncated += counts[0]
    stats.same_document_not_next += counts[1]
    stats.one_segment_chunks_merged += counts[2]
    stats.one_segment_chunks_skipped += counts[3]
    stats.one_segment_tokens_skipped += counts[4]
    histogram = stats.length_histogram
    for length, count in enumerate(np.bincount(lengths).tolist()):
        if count:
            histogram[length] = histogram.get(length, 0) + count


def _finish_token_masks(out: InstanceDescriptions, ids: VocabIds, stats: InstanceStats) -> None:
    """The ``token`` scheme's masks as :func:`_pair_masks` left them made final, in place: ``MASK`` becomes
    the [MASK] id and candidate ordinals become positions in the row (A is at 1..a_len, B after the middle
    [SEP]); ``stats`` gets the masked counts by kind."""
    rep = np.frombuffer(out.m_rep, dtype=np.int64)
    n_mask, n_kept = int(np.count_nonzero(rep == MASK)), int(np.count_nonzero(rep == KEEP))
    stats.masked += len(rep)
    stats.masked_as_mask += n_mask
    stats.masked_as_kept += n_kept
    stats.masked_as_random += len(rep) - n_mask - n_kept
    rep[rep == MASK] = ids.mask_id  # (a view of out.m_rep)
    ordinal = np.frombuffer(out.m_pos, dtype=np.int32)
    a_len = np.repeat(np.frombuffer(out.a_len, dtype=np.int32), np.frombuffer(out.n_masked, dtype=np.int32))
    ordinal += np.where(ordinal < a_len, 1, 2).astype(np.int32)


@dataclasses.dataclass(slots=True)
class _Pass:
    """What the per-document functions of one :func:`describe_instances` call share; ``cums`` and ``starts``
    (per document in shuffled order: prefix sums of sentence lengths, offset of the first token) are set by
    :func:`_describe_documents`."""

    config: InstanceConfig
    ids: VocabIds
    rng: random.Random
    stats: InstanceStats
    mask: bool
    fast_truncation: bool
    token_lists: list[int] | None
    out: InstanceDescriptions
    counts: list[int]
    cums: list[list[int]] = dataclasses.field(default_factory=list)
    starts: list[int] = dataclasses.field(default_factory=list)


def _describe_documents(docs: BucketDocuments, used: list[int], work: _Pass) -> None:
    """Objectives ``nsp`` and ``sop``: the reference's shuffle of the ``used`` documents, then ``dupe_factor``
    passes of :func:`_describe_document` (or :func:`_describe_document_sop`) over them."""
    cums, starts = [], []
    for d in used:  # per document: prefix sums of sentence lengths (cum[j] = tokens before sentence j)
        cum = [0]
        total = 0
        for n in docs.sentence_lengths[d]:
            total += n
            cum.append(total)
        cums.append(cum)
        starts.append(docs.doc_starts[d])
    perm = list(range(len(used)))
    shuffle(perm, work.rng)  # the reference shuffles the document list itself; same draws
    work.cums = [cums[p] for p in perm]
    work.starts = [starts[p] for p in perm]
    describe_document = _describe_document_sop if work.config.objective == "sop" else _describe_document
    for _ in range(work.config.dupe_factor):
        for document_index in range(len(work.cums)):
            describe_document(work, document_index)


def _chunk_size(cum: list[int], chunk_first: int, target_seq_length: int) -> int:
    """How many sentences the chunk that starts at sentence ``chunk_first`` takes, as the original's
    ``create_instances_from_document`` accumulates ``current_chunk``: sentence after sentence until the chunk
    holds ``target_seq_length`` tokens or more, or the document ends. ``cum`` is the document's prefix sums of
    sentence lengths (``cum[j]`` = tokens before sentence ``j``). No random draw."""
    end = bisect_left(cum, cum[chunk_first] + target_seq_length, chunk_first + 1)  # first j: chunk reaches target
    return min(end, len(cum) - 1) - chunk_first


def _target_seq_length(config: InstanceConfig, rand, randbelow) -> int:
    """A document's target length, as the original draws it: ``max_seq_length - 3``, or with probability
    ``short_seq_prob`` a length uniform in ``2 .. max_seq_length - 3``. ``rand``, ``randbelow``: the ``rng``'s."""
    max_num_tokens = config.max_seq_length - 3
    if rand() < config.short_seq_prob:
        return 2 + randbelow(max_num_tokens - 1)
    return max_num_tokens


def _random_next_segment(work: _Pass, document_index: int, target_b_length: int, randbelow) -> tuple[int, int, bool]:
    """The original's random B for NotNext: a document other than ``document_index`` (10 tries; the last one
    drawn is used even when it is the same), a random sentence in it, and sentences from there until B holds
    ``target_b_length`` tokens or the document ends. Returns ``(b_start, b_len, same document)``."""
    random_document_index = document_index
    for _ in range(10):
        random_document_index = randbelow(len(work.cums))
        if random_document_index != document_index:
            break
    rcum = work.cums[random_document_index]
    random_start = randbelow(len(rcum) - 1)
    end = bisect_left(rcum, rcum[random_start] + target_b_length, random_start + 1)
    if end >= len(rcum):
        end = len(rcum) - 1
    b_start = work.starts[random_document_index] + rcum[random_start]
    return b_start, rcum[end] - rcum[random_start], random_document_index == document_index


def _describe_document(work: _Pass, document_index: int) -> None:
    """One pass over one document: ``create_instances_from_document`` on lengths.

    Appends to ``work.out`` (masked positions as candidate ordinals and [MASK] as ``MASK``, except under
    whole-word masking; ``describe_instances`` converts them) and adds to ``work.counts``.
    """
    cum = work.cums[document_index]
    base = work.starts[document_index]
    n_sentences = len(cum) - 1
    config, rng, out = work.config, work.rng, work.out
    max_num_tokens = config.max_seq_length - 3
    rand = rng.random
    randbelow = randbelow_of(rng)
    target_seq_length = _target_seq_length(config, rand, randbelow)
    truncate = truncation_bounds_fast if work.fast_truncation else truncation_bounds
    a_starts, a_lens, b_starts, b_lens = out.a_start.append, out.a_len.append, out.b_start.append, out.b_len.append
    labels, n_maskeds = out.label.append, out.n_masked.append
    truncated_count = same_document = 0

    chunk_first = 0
    while chunk_first < n_sentences:
        chunk_count = _chunk_size(cum, chunk_first, target_seq_length)
        next_first = chunk_first + chunk_count
        a_end = 1
        if chunk_count >= 2:
            a_end = 1 + randbelow(chunk_count - 1)
        a_start = base + cum[chunk_first]
        a_len = cum[chunk_first + a_end] - cum[chunk_first]
        if chunk_count == 1 or rand() < 0.5:
            is_random_next = 1
            b_start, b_len, same = _random_next_segment(work, document_index, target_seq_length - a_len, randbelow)
            same_document += same
            next_first = chunk_first + a_end  # put the unused segments back
        else:
            is_random_next = 0
            b_start = base + cum[chunk_first + a_end]
            b_len = cum[chunk_first + chunk_count] - cum[chunk_first + a_end]

        if a_len + b_len > max_num_tokens:
            truncated_count += 1
            a_lo, a_hi, b_lo, b_hi = truncate(a_len, b_len, max_num_tokens, rng)
            a_start, a_len = a_start + a_lo, a_hi - a_lo
            b_start, b_len = b_start + b_lo, b_hi - b_lo

        n_masked = 0
        if work.mask:
            n_masked = _pair_masks(work, a_start, a_len, b_start, b_len)
        a_starts(a_start)
        a_lens(a_len)
        b_starts(b_start)
        b_lens(b_len)
        labels(is_random_next)
        n_maskeds(n_masked)
        chunk_first = next_first
    work.counts[0] += truncated_count
    work.counts[1] += same_document


def _describe_document_sop(work: _Pass, document_index: int) -> None:
    """One pass over one document for sentence-order prediction (ALBERT section 4.2).

    The chunks of :func:`_describe_document` (:func:`_chunk_size`, ``short_seq_prob``, a random split point of
    the chunk) with B always the rest of the chunk, then truncation, then a swap with probability 0.5
    (``rng.random() < 0.5``; label 1 = swapped, the row is ``[CLS] B [SEP] A [SEP]``). A chunk of one
    sentence cannot be split into two segments: when it is not the document's last it takes the next sentence
    too (``counts[2]``); when it is, it is skipped (``counts[3]``, its tokens ``counts[4]``). A one-sentence
    document therefore makes no instance. Masking as in :func:`_describe_document`, over the row as swapped.
    """
    cum = work.cums[document_index]
    base = work.starts[document_index]
    n_sentences = len(cum) - 1
    config, rng, out, counts = work.config, work.rng, work.out, work.counts
    max_num_tokens = config.max_seq_length - 3
    rand = rng.random
    randbelow = randbelow_of(rng)
    target_seq_length = _target_seq_length(config, rand, randbelow)
    truncate = truncation_bounds_fast if work.fast_truncation else truncation_bounds

    chunk_first = 0
    while chunk_first < n_sentences:
        chunk_count = _chunk_size(cum, chunk_first, target_seq_length)
        if chunk_count == 1:
            if chunk_first == n_sentences - 1:  # nothing to pair it with in its document: skipped, never another's
                counts[3] += 1
                counts[4] += cum[chunk_first + 1] - cum[chunk_first]
                break
            counts[2] += 1  # one sentence reaches the target alone: the chunk takes the next one too
            chunk_count = 2
        a_end = 1 + randbelow(chunk_count - 1)
        a_start = base + cum[chunk_first]
        a_len = cum[chunk_first + a_end] - cum[chunk_first]
        b_start = base + cum[chunk_first + a_end]
        b_len = cum[chunk_first + chunk_count] - cum[chunk_first + a_end]
        if a_len + b_len > max_num_tokens:
            counts[0] += 1
            a_lo, a_hi, b_lo, b_hi = truncate(a_len, b_len, max_num_tokens, rng)
            a_start, a_len = a_start + a_lo, a_hi - a_lo
            b_start, b_len = b_start + b_lo, b_hi - b_lo
        swapped = 1 if rand() < 0.5 else 0
        if swapped:
            a_start, a_len, b_start, b_len = b_start, b_len, a_start, a_len
        n_masked = 0
        if work.mask:
            n_masked = _pair_masks(work, a_start, a_len, b_start, b_len)
        out.a_start.append(a_start)
        out.a_len.append(a_len)
        out.b_start.append(b_start)
        out.b_len.append(b_len)
        out.label.append(swapped)
        out.n_masked.append(n_masked)
        chunk_first += chunk_count


def _pair_masks(work: _Pass, a_start: int, a_len: int, b_start: int, b_len: int) -> int:
    """The masks of one row ``[CLS] A [SEP] B [SEP]`` (after truncation; under ``sop`` as swapped), appended to
    ``out``; returns their count. The ``token`` scheme (no ``token_lists``) draws as the original's
    ``create_masked_lm_predictions``: a shuffle of the candidates (:func:`shuffle_first`), then each piece's
    fate (:func:`~bertprep.pipeline.masking.rule.draw_replacements`); the positions are candidate ordinals
    ``0 .. a_len + b_len - 1`` and [MASK] is ``MASK`` until ``describe_instances`` converts them. Whole-word
    masking (and the other word-level schemes) goes through the reference function (it needs the tokens, and
    the segmenter's word starts when the bucket has them), with final positions and ids."""
    config, ids, rng, out, token_lists = work.config, work.ids, work.rng, work.out, work.token_lists
    if token_lists is None:
        chosen = shuffle_first(
            a_len + b_len,
            num_to_predict(a_len + b_len + 3, config.mlm.masked_lm_prob, config.mlm.max_predictions_per_seq),
            rng,
        )
        out.m_pos.extend(chosen)
        out.m_rep.extend(draw_replacements(len(chosen), rng, ids.random_ids))
        return len(chosen)
    tokens = [
        ids.cls_id,
        *token_lists[a_start : a_start + a_len],
        ids.sep_id,
        *token_lists[b_start : b_start + b_len],
        ids.sep_id,
    ]
    word_starts = None
    if out.word_starts is not None:
        ws = out.word_starts
        word_starts = [0, *ws[a_start : a_start + a_len], 0, *ws[b_start : b_start + b_len], 0]
    output, positions, _ = create_masked_lm_predictions(tokens, config.mlm, ids, rng, work.stats, a_len, word_starts)
    for p in positions:
        out.m_pos.append(p)
        out.m_rep.append(output[p])
    return len(positions)


def _describe_stream(
    docs: BucketDocuments,
    used: list[int],
    config: InstanceConfig,
    ids: VocabIds,
    rng: random.Random,
    stats: InstanceStats,
    mask: bool,
    out: InstanceDescriptions,
) -> None:
    """Objective ``none`` (RoBERTa FULL-SENTENCES, section 4.2): rows cut from the documents back to back.

    The ``used`` documents are shuffled (one ``shuffle`` of their list, as the reference shuffles its
    documents) and joined with one ``[SEP]`` between two documents into ``out.ids``; that stream is cut into
    rows of ``max_seq_length - 2`` tokens (every row full but the last), each row ``[CLS] tokens [SEP]``.
    A sentence that does not fit a row goes on in the next one, so no token is truncated away (fairseq's
    ``--sample-break-mode none``, Hugging Face ``run_mlm``'s ``group_texts``). Each of the ``dupe_factor``
    passes makes the same rows with fresh masks (with ``mask``:
    :func:`~bertprep.pipeline.masking.rule.create_masked_lm_predictions`, which never picks a ``[SEP]``).
    Positions and replacement ids go into ``out`` final (not as ordinals); ``stats`` gets the masked counts
    and ``document_separators``.
    """
    perm = list(range(len(used)))
    shuffle(perm, rng)
    order = [used[p] for p in perm]
    stream = _join_documents(docs, order, ids.sep_id, out)
    stream_starts = out.stream_word_starts if out.word_starts is not None else None
    word_starts = stream_starts.tolist() if mask and stream_starts is not None else None
    width = config.max_seq_length - 2
    token_list = stream.tolist() if mask else None
    cls_id, sep_id = ids.cls_id, ids.sep_id
    for _ in range(config.dupe_factor):
        for start in range(0, len(stream), width):
            length = min(width, len(stream) - start)
            n_masked = 0
            if mask:
                assert token_list is not None
                tokens = [cls_id, *token_list[start : start + length], sep_id]
                row_starts = None if word_starts is None else [0, *word_starts[start : start + length], 0]
                output, positions, _ = create_masked_lm_predictions(
                    tokens, config.mlm, ids, rng, stats, word_starts=row_starts
                )
                for p in positions:
                    out.m_pos.append(p)
                    out.m_rep.append(output[p])
                n_masked = len(positions)
            out.a_start.append(start)
            out.a_len.append(length)
            out.b_start.append(start + length)
            out.b_len.append(0)
            out.label.append(0)
            out.n_masked.append(n_masked)
    stats.document_separators += (len(order) - 1) * config.dupe_factor


def _join_documents(docs: BucketDocuments, order: list[int], sep_id: int, out: InstanceDescriptions) -> np.ndarray:
    """:func:`_describe_stream`'s stream: the documents of ``order`` (indices into ``docs``) back to back, one
    ``[SEP]`` (``sep_id``) between two, set as ``out.ids``, with ``out.stream_documents = order`` and, where
    ``docs`` has a word segmenter's word starts, ``out.stream_word_starts`` laid out the same (0 at a
    ``[SEP]``). Returns the stream: uint32 array of shape ``[tokens of the documents + len(order) - 1]``."""
    separator = np.array([sep_id], dtype=np.uint32)
    pieces = []
    for n, d in enumerate(order):
        if n:
            pieces.append(separator)
        start = docs.doc_starts[d]
        pieces.append(docs.ids[start : start + sum(docs.sentence_lengths[d])])
    stream = np.concatenate(pieces).astype(np.uint32, copy=False)
    out.ids = stream
    out.stream_documents = order
    if docs.word_starts is not None:  # a word segmenter's word starts, laid out as the stream (0 at a [SEP])
        flag_pieces = []
        for n, d in enumerate(order):
            if n:
                flag_pieces.append(np.zeros(1, dtype=np.uint8))
            start = docs.doc_starts[d]
            flag_pieces.append(docs.word_starts[start : start + sum(docs.sentence_lengths[d])])
        out.stream_word_starts = np.concatenate(flag_pieces)
    return stream


__all__ = ["describe_instances"]
