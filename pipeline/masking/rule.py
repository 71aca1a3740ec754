"""The masked-LM rule of BERT, written once: which positions to predict and what each one becomes.

Source: BERT paper (Devlin et al. 2018) section 3.1 and appendix A.1, as google-research/bert
``create_pretraining_data.py`` (HEAD eedf571) ``create_masked_lm_predictions`` implements it:

* ``num_to_predict = min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))`` for an instance of
  ``n`` tokens (including [CLS] and both [SEP]; Python's round half to even on the float64 product);
* the positions are a uniformly random subset of the candidates (every token but [CLS]/[SEP]); under
  whole-word masking a candidate is a word (a piece and its following ``##`` pieces), taken whole or
  skipped when it does not fit;
* each chosen piece becomes [MASK] with probability 0.8 (:data:`MASK_PROB`), a uniformly random vocab
  entry with 0.1, or stays itself with 0.1; the label is the original piece.

Two forms of the same rule, and nothing else in the code base restates it:

* **exact** (:func:`draw_replacements`, :func:`create_masked_lm_predictions`): CPython ``random.Random``
  draw for draw as the original, so ``make-shards --sampling exact`` reproduces the original's instances
  (``tests/test_golden.py``); its shuffles are :mod:`bertprep.pipeline.masking.exact_draws`'s.
* **numpy** (:func:`replace_positions`, :func:`mask_instance` for the trainer's dynamic masking): the same
  distribution from a ``numpy.random.Generator``; the random stream is not the original's.
  :func:`~bertprep.pipeline.masking.fast.mask_table` (``--sampling fast``) applies it to a whole table.

Masking schemes (``--masking-scheme``): what one masking decision covers. ``token`` is the above; the
word-level schemes (``whole-word``, ``ngram``, ``span``) choose whole words in
:mod:`bertprep.pipeline.masking.schemes` (:func:`~bertprep.pipeline.masking.schemes.choose_word_spans`), and
:func:`word_masked_lm_predictions` applies the rule to them, one code path for the static form
(:func:`create_masked_lm_predictions`, ``random.Random``) and the dynamic one (:func:`mask_instance`, numpy).

The settings are ``config.MaskingConfig``'s (one declaration for both forms); what the rule needs of the vocab
and where it adds its counts are the protocols :class:`MaskIds` and :class:`MaskCounts` (the instance code's
``VocabIds`` and ``InstanceStats`` are such objects), and :class:`MaskingVocab` for the dynamic form.

numpy only (no Beam, no torch): ``bertprep.bert_model`` imports it for dynamic masking.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.exact_draws import shuffle
from bertprep.pipeline.masking.schemes import Draws, choose_word_spans, words_from_starts


class MaskIds(Protocol):
    """What the exact form needs of the vocab, as ids (``instances.common.VocabIds`` is one)."""

    cls_id: int
    sep_id: int
    mask_id: int

    @property
    def random_ids(self) -> Sequence[int]:
        """Id of each entry of the original's ``vocab_words``: what a random replacement is drawn from."""
        ...

    @property
    def is_continuation(self) -> Sequence[bool]:
        """Per id, whether it is a ``##`` piece (the default word boundaries)."""
        ...


class MaskCounts(Protocol):
    """Where the exact form adds what it masked (``instances.common.InstanceStats`` is one)."""

    masked: int
    masked_as_mask: int
    masked_as_random: int
    masked_as_kept: int


#: Probability that a chosen piece becomes [MASK].
MASK_PROB = 0.8
#: The original's second draw: a piece not turned into [MASK] stays itself when ``random() < 0.5``, else it
#: becomes a random entry (so 10% / 10% overall). Exact form only.
KEEP_GIVEN_NOT_MASKED = 0.5
#: One-draw form of the same split (numpy): ``u < 0.8`` [MASK], ``0.8 <= u < 0.9`` random, else kept.
MASK_OR_RANDOM_PROB = 0.9

#: Replacement codes of :func:`draw_replacements` (every other value is a random replacement id).
MASK = -2
KEEP = -1


def num_to_predict(num_tokens: int, masked_lm_prob: float, max_predictions_per_seq: int) -> int:
    """``min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob)))``, as the original."""
    return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


# ------------------------------------------------------------------------------------ exact (random.Random)


def draw_replacements(count: int, rng: random.Random, random_ids: Sequence[int]) -> list[int]:
    """What each of ``count`` chosen pieces becomes, draw for draw as the original.

    Per piece, in order: ``rng.random() < 0.8`` -> [MASK]; else ``rng.random() < 0.5`` -> kept; else
    ``random_ids[rng.randint(0, len(random_ids) - 1)]`` (the original's ``vocab_words[...]``).

    Returns:
        ``count`` codes: :data:`MASK`, :data:`KEEP` or the replacement id (>= 0).
    """
    rand = rng.random
    randint = rng.randint
    last = len(random_ids) - 1
    out: list[int] = []
    append = out.append
    for _ in range(count):
        if rand() < MASK_PROB:
            append(MASK)
        elif rand() < KEEP_GIVEN_NOT_MASKED:
            append(KEEP)
        else:
            append(random_ids[randint(0, last)])
    return out


def create_masked_lm_predictions(
    tokens: list[int],
    config: MaskingConfig,
    ids: MaskIds,
    rng: random.Random,
    stats: MaskCounts | None = None,
    num_tokens_a: int | None = None,
    word_starts: Sequence[int] | None = None,
) -> tuple[list[int], list[int], list[int]]:
    """Choose and mask positions as the original ``create_masked_lm_predictions`` (BERT paper, section 3.1).

    Under the ``ngram`` and ``span`` schemes (``config.masking_scheme``), and under ``whole-word`` with
    ``word_starts`` given (a word segmenter's boundaries), the words go through
    :func:`word_masked_lm_predictions` instead (same budget and 80/10/10; no original to equal): the words
    are the ``word_starts`` groups, else a piece and its ``##`` pieces; a word never crosses [SEP].

    :func:`num_to_predict` positions, drawn from a shuffle of all candidates (every token but [CLS]/[SEP];
    under whole-word masking a candidate is a word: a piece plus its following ``##`` pieces, and a word
    that does not fit is skipped); each chosen piece as :func:`draw_replacements` says. Same draws, in the
    same order, as the original on CPython's ``random.Random``.

    Args:
        tokens: ids of ``[CLS] A [SEP] B [SEP]``; not modified.
        num_tokens_a: len(A) when known: the candidates are then built from the layout instead of by
            comparing every token with [CLS]/[SEP] (same list: word pieces of text are never [CLS]/[SEP],
            because the pre-tokenizer splits ``[`` and ``]`` off).

        word_starts: per token of ``tokens``, 1 where a piece starts a word (values at [CLS]/[SEP] unused).

    Returns:
        (output_ids, masked_lm_positions, masked_lm_ids), positions ascending.
    """
    scheme = config.effective_masking_scheme
    if scheme in ("ngram", "span") or (scheme == "whole-word" and word_starts is not None):
        return _word_level(tokens, config, ids, rng, stats, word_starts)
    wanted = num_to_predict(len(tokens), config.masked_lm_prob, config.max_predictions_per_seq)
    if scheme == "whole-word":
        positions = _whole_word_positions(tokens, ids, rng, wanted)
    else:
        positions = _piece_positions(tokens, ids, rng, wanted, num_tokens_a)
    output = _replace_at(tokens, positions, ids, rng, stats)
    return output, positions, [tokens[i] for i in positions]


def _whole_word_positions(tokens: list[int], ids: MaskIds, rng: random.Random, wanted: int) -> list[int]:
    """The original's whole-word choice: candidate words (a piece plus its following ``##`` pieces, never
    [CLS]/[SEP]) shuffled, taken while they fit ``wanted``; their pieces' positions, in the order taken."""
    cls_id, sep_id, is_cont = ids.cls_id, ids.sep_id, ids.is_continuation
    cand_indexes: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token in (cls_id, sep_id):
            continue
        if cand_indexes and is_cont[token]:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    # (the original's loop over its shuffled words, same draws; candidate words are disjoint, so its
    # "already covered" check never fires)
    positions: list[int] = []
    for first, _ in choose_word_spans(cand_indexes, None, wanted, "whole-word", Draws(rng)):
        positions.extend(cand_indexes[first])
    return positions


def _piece_positions(
    tokens: list[int], ids: MaskIds, rng: random.Random, wanted: int, num_tokens_a: int | None
) -> list[int]:
    """The original's piece choice: every position but [CLS]/[SEP] shuffled (every draw counts), the first
    ``wanted`` taken."""
    if num_tokens_a is not None:
        cand = list(range(1, num_tokens_a + 1))
        cand.extend(range(num_tokens_a + 2, len(tokens) - 1))
    else:
        cls_id, sep_id = ids.cls_id, ids.sep_id
        cand = [i for i, token in enumerate(tokens) if token != cls_id and token != sep_id]
    shuffle(cand, rng)  # every draw counts, although at most num_to_predict are used
    return cand[:wanted]


def _replace_at(
    tokens: list[int], positions: list[int], ids: MaskIds, rng: random.Random, stats: MaskCounts | None
) -> list[int]:
    """``tokens`` with each position's piece replaced as :func:`draw_replacements` draws it (in the order of
    ``positions``, which this then sorts in place), counted in ``stats``."""
    # (the original draws each piece's fate as it takes the piece; no other draw comes in between)
    output = list(tokens)
    n_mask = n_kept = 0
    for index, code in zip(positions, draw_replacements(len(positions), rng, ids.random_ids), strict=True):
        if code == MASK:
            output[index] = ids.mask_id
            n_mask += 1
        elif code == KEEP:
            n_kept += 1
        else:
            output[index] = code
    positions.sort()
    if stats is not None:
        stats.masked += len(positions)
        stats.masked_as_mask += n_mask
        stats.masked_as_random += len(positions) - n_mask - n_kept
        stats.masked_as_kept += n_kept
    return output


def _word_level(
    tokens: list[int],
    config: MaskingConfig,
    ids: MaskIds,
    rng: random.Random,
    stats: MaskCounts | None,
    word_starts: Sequence[int] | None,
) -> tuple[list[int], list[int], list[int]]:
    """:func:`create_masked_lm_predictions` under a word-level scheme (see there)."""
    cls_id, sep_id = ids.cls_id, ids.sep_id
    is_cont = ids.is_continuation
    words: list[list[int]] = []
    word_segment: list[int] = []
    segment = -1
    new_word = True
    for i, token in enumerate(tokens):
        if token in (cls_id, sep_id):
            segment += 1
            new_word = True
            continue
        starts = word_starts[i] if word_starts is not None else not is_cont[token]
        if new_word or starts:
            words.append([i])
            word_segment.append(segment)
            new_word = False
        else:
            words[-1].append(i)
    output, positions, labels, (n_mask, n_random, n_kept) = word_masked_lm_predictions(
        tokens, words, word_segment, config, ids.mask_id, ids.random_ids, Draws(rng)
    )
    if stats is not None:
        stats.masked += len(positions)
        stats.masked_as_mask += n_mask
        stats.masked_as_random += n_random
        stats.masked_as_kept += n_kept
    return output, positions, labels


# -------------------------------------------------------------------------- word-level schemes (both forms)


def word_masked_lm_predictions(
    tokens: Sequence[int],
    words: Sequence[Sequence[int]],
    word_segment: Sequence[int] | None,
    config: MaskingConfig,
    mask_id: int,
    random_ids: Sequence[int] | int,
    draws: Draws,
) -> tuple[list[int], list[int], list[int], tuple[int, int, int]]:
    """Mask one instance under a word-level scheme (``config.masking_scheme``): the one code path of the
    ``whole-word``, ``ngram`` and ``span`` schemes for static (make-shards) and dynamic (trainer) masking.

    The budget is :func:`num_to_predict` of ``len(tokens)``; the words are chosen by
    :func:`choose_word_spans`; each chosen piece then becomes [MASK] (80%), a random id (10%) or stays (10%)
    with the original's draws (:func:`draw_replacements` order: ``random() < 0.8``, then ``random() < 0.5``
    kept). Under ``span`` the fate is drawn once per span and applies to all its pieces, as SpanBERT does
    ("we perform this replacement at the span level"; a random span gets a random id per piece).

    Args:
        tokens: ids of the instance (``[CLS] A [SEP] B [SEP]``), not modified.
        words: the candidate words (positions of their pieces; never [CLS]/[SEP]).
        word_segment: per word, its segment (see :func:`choose_word_spans`).
        config: ``masking_scheme``, ``masked_lm_prob``, ``max_predictions_per_seq``, ``max_ngram_size``,
            ``span_geometric_p``, ``max_span_length``.
        random_ids: ids a random replacement is drawn from, or an int ``V`` for ``range(V)``.
    Returns:
        ``(output_ids, masked_lm_positions ascending, masked_lm_ids, (n_mask, n_random, n_kept))``.
    """
    wanted = num_to_predict(len(tokens), config.masked_lm_prob, config.max_predictions_per_seq)
    spans = choose_word_spans(
        words,
        word_segment,
        wanted,
        config.masking_scheme,
        draws,
        max_ngram_size=config.max_ngram_size,
        span_geometric_p=config.span_geometric_p,
        max_span_length=config.max_span_length,
    )
    output, positions, n_mask, n_random = _replace_spans(
        tokens, words, spans, config.masking_scheme == "span", mask_id, random_ids, draws
    )
    return (
        output,
        positions,
        [int(tokens[p]) for p in positions],
        (n_mask, n_random, len(positions) - n_mask - n_random),
    )


def _replace_spans(
    tokens: Sequence[int],
    words: Sequence[Sequence[int]],
    spans: Sequence[tuple[int, int]],
    per_span: bool,
    mask_id: int,
    random_ids: Sequence[int] | int,
    draws: Draws,
) -> tuple[list[int], list[int], int, int]:
    """:func:`word_masked_lm_predictions`'s 80/10/10: ``tokens`` with the pieces of the chosen ``spans``
    (``(first word, number of words)``, in the order chosen) replaced, each fate drawn as
    :func:`draw_replacements` does (``random() < 0.8`` [MASK], then ``random() < 0.5`` kept, else a random id
    drawn with ``randbelow`` when its piece is replaced); with ``per_span`` one fate per span (SpanBERT).

    Returns:
        ``(output_ids, masked_lm_positions ascending, n_mask, n_random)``.
    """
    n_random_ids = random_ids if isinstance(random_ids, (int, np.integer)) else len(random_ids)

    def random_id() -> int:
        k = draws.randbelow(int(n_random_ids))
        return k if isinstance(random_ids, (int, np.integer)) else int(random_ids[k])

    output = [int(t) for t in tokens]
    positions: list[int] = []
    n_mask = n_random = 0
    for first, n in spans:
        span_positions = [p for w in range(first, first + n) for p in words[w]]
        fate = None
        for p in span_positions:
            if fate is None or not per_span:
                fate = MASK if draws.random() < MASK_PROB else (KEEP if draws.random() < KEEP_GIVEN_NOT_MASKED else 0)
            if fate == MASK:
                output[p] = mask_id
                n_mask += 1
            elif fate != KEEP:
                output[p] = random_id()
                n_random += 1
        positions.extend(span_positions)
    positions.sort()
    return output, positions, n_mask, n_random


# ------------------------------------------------------------------------------------------ numpy (dynamic)


def replace_positions(
    values: np.ndarray,
    positions: np.ndarray,
    mask_id: int,
    random_ids: np.ndarray | int,
    rng: np.random.Generator,
    groups: np.ndarray | None = None,
) -> tuple[int, int]:
    """Apply the 80/10/10 rule in place at ``values[positions]`` (numpy form).

    One uniform per position (``rng.random(len(positions))``): below 0.8 [MASK], below 0.9 a random entry,
    else kept; then ``rng.integers(0, len(random_ids), n_random)`` picks the random entries in position
    order.

    Args:
        values: 1-D integer array, modified in place.
        positions: 1-D integer indices into ``values`` (distinct).
        random_ids: ids a random replacement is drawn from (the original's ``vocab_words``), or an int
            ``V`` meaning ``range(V)``.
        groups: optional 1-D int array, per position the index (0..G-1) of its span: then one uniform per
            span (``rng.random(G)``) decides for all its pieces (SpanBERT's span-level replacement); a
            random span still gets a random id per piece.

    Returns:
        ``(n_mask, n_random)``; the kept count is ``len(positions) - n_mask - n_random``.
    """
    if groups is None:
        u = rng.random(len(positions))
    else:
        u = rng.random(int(groups.max()) + 1 if len(groups) else 0)[groups]
    as_mask = u < MASK_PROB
    as_random = (u >= MASK_PROB) & (u < MASK_OR_RANDOM_PROB)
    values[positions[as_mask]] = mask_id
    n_random = int(as_random.sum())
    if isinstance(random_ids, (int, np.integer)):
        values[positions[as_random]] = rng.integers(0, int(random_ids), size=n_random)
    else:
        values[positions[as_random]] = random_ids[rng.integers(0, len(random_ids), size=n_random)]
    return int(as_mask.sum()), n_random


@dataclass(frozen=True)
class MaskingVocab:
    """What the dynamic form (:func:`mask_instance`) needs of the vocab: its size, the special ids, and which
    pieces continue a word."""

    vocab_size: int
    cls_token_id: int
    sep_token_id: int
    mask_token_id: int
    is_subword: np.ndarray | None = None
    """bool [vocab_size], True for ``##`` continuation pieces: the default word boundaries (a word is a piece and
    its following ``##`` pieces). Given with ``masking_scheme="token"`` it asks for whole-word masking (as
    before the schemes existed)."""


def _word_starts(
    ids: np.ndarray, cand: np.ndarray, word_ids: np.ndarray | None, vocab: MaskingVocab, scheme: str
) -> np.ndarray:
    """Per candidate position of :func:`mask_instance`, whether it starts a word: from the row's ``word_ids``,
    else from the vocab's ``##`` pieces. Raises ``ValueError`` with neither, or ``word_ids`` of another length."""
    if word_ids is not None:
        word_ids = np.asarray(word_ids, dtype=np.int64)
        if len(word_ids) != len(ids):
            raise ValueError(f"word_ids has {len(word_ids)} entries for {len(ids)} input_ids")
        cand_words = word_ids[cand]
        starts = np.ones(len(cand), dtype=bool)
        starts[1:] = cand_words[1:] != cand_words[:-1]
        return starts
    if vocab.is_subword is not None:
        return ~vocab.is_subword[ids[cand]]
    raise ValueError(
        f"masking scheme {scheme!r} needs word boundaries: shards with a word_ids column, or "
        "the vocab's ## pieces (is_subword)"
    )


def _word_level_positions(
    ids: np.ndarray,
    is_special: np.ndarray,
    cand: np.ndarray,
    word_ids: np.ndarray | None,
    config: MaskingConfig,
    vocab: MaskingVocab,
    rng: np.random.Generator,
    wanted: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mask_instance`'s choice under a word-level scheme: the words (never crossing a [SEP]) that
    :func:`choose_word_spans` picks; ``(positions, span index of each)``, int64, in the order chosen."""
    scheme = config.effective_masking_scheme
    if scheme == "token":  # (the vocab's ## pieces given: whole words)
        scheme = "whole-word"
    starts = _word_starts(ids, cand, word_ids, vocab, scheme)
    # a word never crosses [SEP]: the first piece after a special token starts one
    segment_of = np.cumsum(is_special)[cand]  # (A after one special, B after two)
    if len(starts):
        starts[0] = True
        starts[1:] |= segment_of[1:] != segment_of[:-1]
    words = words_from_starts(cand.tolist(), starts.tolist())
    word_segment = segment_of[np.flatnonzero(starts)].tolist()
    spans = choose_word_spans(
        words,
        word_segment,
        wanted,
        scheme,
        Draws(rng),
        max_ngram_size=config.max_ngram_size,
        span_geometric_p=config.span_geometric_p,
        max_span_length=config.max_span_length,
    )
    chosen = [(p, k) for k, (first, count) in enumerate(spans) for w in range(first, first + count) for p in words[w]]
    return np.array([p for p, _ in chosen], dtype=np.int64), np.array([k for _, k in chosen], dtype=np.int64)


def mask_instance(
    input_ids: np.ndarray,
    config: MaskingConfig,
    vocab: MaskingVocab,
    rng: np.random.Generator,
    word_ids: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Choose and corrupt the positions to predict in one unmasked instance (dynamic masking, numpy form).

    :func:`num_to_predict` positions among the tokens that are not [CLS] / [SEP]: under ``token`` the first of
    a random permutation of them; under a word-level scheme (``whole-word``, ``ngram``, ``span``, or
    ``vocab.is_subword`` given with ``token``) the words :func:`choose_word_spans` picks, drawn from ``rng``. Then
    :func:`replace_positions` (80/10/10) with the random entry drawn from ``range(vocab_size)``; under
    ``span`` one fate per span.

    Args:
        input_ids: 1-D integer array, ``[CLS] A [SEP] B [SEP]``, not masked.
        word_ids: optional 1-D integer array of the same length (the shard's ``word_ids`` column: the word
            index of each piece, -1 at [CLS]/[SEP]): the word boundaries. Without it the words are a piece and
            its following ``##`` pieces (``vocab.is_subword``). A word never crosses a [SEP].
    Returns:
        ``(masked_input_ids, masked_lm_positions, masked_lm_ids)``: int64 arrays, positions ascending,
        ids = the original tokens there. Same numbers from the same ``rng`` state.
    Raises:
        ValueError: a word-level scheme with neither ``word_ids`` nor ``is_subword``, or ``word_ids`` of
            another length than ``input_ids``.
    """
    ids = np.asarray(input_ids, dtype=np.int64)
    n = len(ids)
    is_special = (ids == vocab.cls_token_id) | (ids == vocab.sep_token_id)
    cand = np.flatnonzero(~is_special)
    wanted = num_to_predict(n, config.masked_lm_prob, config.max_predictions_per_seq)
    scheme = config.effective_masking_scheme
    if scheme == "token" and vocab.is_subword is not None:
        scheme = "whole-word"
    groups = None
    if scheme == "token":
        positions = cand[rng.permutation(len(cand))[:wanted]]
    else:
        positions, span_of = _word_level_positions(ids, is_special, cand, word_ids, config, vocab, rng, wanted)
        if scheme == "span":
            groups = span_of
    order = np.argsort(positions, kind="stable")
    positions = positions[order].astype(np.int64)
    if groups is not None:
        groups = groups[order]
    labels = ids[positions]
    out = ids.copy()
    replace_positions(out, positions, vocab.mask_token_id, vocab.vocab_size, rng, groups=groups)
    return out, positions, labels


__all__ = [
    "KEEP",
    "KEEP_GIVEN_NOT_MASKED",
    "MASK",
    "MASK_OR_RANDOM_PROB",
    "MASK_PROB",
    "MaskCounts",
    "MaskIds",
    "MaskingVocab",
    "create_masked_lm_predictions",
    "draw_replacements",
    "mask_instance",
    "num_to_predict",
    "replace_positions",
    "word_masked_lm_predictions",
]
