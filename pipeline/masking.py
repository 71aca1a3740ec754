"""The masked-LM rule of BERT, written once: which positions to predict and what each one becomes.

Source: BERT paper (Devlin et al. 2018) section 3.1 and appendix A.1, as google-research/bert
``create_pretraining_data.py`` (HEAD eedf571) ``create_masked_lm_predictions`` implements it, restated in
``design/reference-algorithm.md``:

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
  (``tests/test_golden.py``). Also holds :func:`shuffle`, the original's ``rng.shuffle`` made faster.
* **numpy** (:func:`replace_positions`, :func:`mask_table` for ``--sampling fast``, :func:`mask_instance`
  for the trainer's dynamic masking): the same distribution from a ``numpy.random.Generator``; the random
  stream is not the original's.

Masking schemes (``--masking-scheme``, :data:`MASKING_SCHEMES`): what one masking decision covers. ``token``
is the above; ``whole-word`` (the original's ``do_whole_word_mask``), ``ngram`` (Megatron-LM / ERNIE n-grams
of up to 3 words, ``P(n)`` proportional to ``1/n``) and ``span`` (SpanBERT, Joshi et al. 2020 section 3.1:
geometric span lengths in words, p = 0.2, at most 10) choose whole words, in one code path
(:func:`choose_word_spans`) for both forms: :func:`word_masked_lm_predictions` (static, ``random.Random``) and
:func:`mask_instance` (dynamic, numpy); :class:`Draws` gives both the same three kinds of draw. The words are
given as groups of piece positions: by default a piece and its ``##`` pieces (whitespace + punctuation),
or from a word segmenter via the ``word_ids`` column (:mod:`bertprep.pipeline.word_segmentation`).

pyarrow and numpy only (no Beam, no torch): ``bertprep.bert_model`` imports it for dynamic masking.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # (instances.py imports this module; the types are only annotations here)
    from bertprep.pipeline.config import InstanceConfig
    from bertprep.pipeline.instances import InstanceStats, VocabIds

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

_BITS = [0] + [n.bit_length() for n in range(1, 1 << 12)]


def _shuffle_inlined(x: list, rng: random.Random) -> None:
    """``rng.shuffle(x)``, draw for draw, without a Python-level ``_randbelow`` call per element.

    CPython's ``Random.shuffle`` swaps ``x[i]`` with ``x[_randbelow(i + 1)]`` for i from the end, and
    ``_randbelow(n)`` takes ``getrandbits(n.bit_length())`` until it is below ``n`` (``random.py``,
    ``_randbelow_with_getrandbits``). This is that loop inlined: about half the time of ``rng.shuffle``
    for the ~125 masking candidates of a 128-token instance (the hottest loop of the algorithm).
    """
    getrandbits = rng.getrandbits
    bits = _BITS
    for i in range(len(x) - 1, 0, -1):
        n = i + 1
        k = bits[n] if n < 4096 else n.bit_length()
        j = getrandbits(k)
        while j >= n:
            j = getrandbits(k)
        x[i], x[j] = x[j], x[i]


def _inlined_shuffle_matches() -> bool:
    """Check once that this interpreter's ``Random.shuffle`` is the loop above (CPython 3.x is)."""
    for size in (0, 1, 2, 7, 125, 5000):
        a, b = list(range(size)), list(range(size))
        ra, rb = random.Random(size), random.Random(size)
        ra.shuffle(a)
        _shuffle_inlined(b, rb)
        if a != b or ra.random() != rb.random():
            return False
    return True


_INLINED_SHUFFLE_OK = _inlined_shuffle_matches()


def shuffle(x: list, rng: random.Random) -> None:
    """Shuffle ``x`` in place exactly as ``rng.shuffle(x)`` (faster for a plain ``random.Random``)."""
    if _INLINED_SHUFFLE_OK and type(rng) is random.Random:
        _shuffle_inlined(x, rng)
    else:
        rng.shuffle(x)


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


def create_masked_lm_predictions(tokens: list[int], config: "InstanceConfig", ids: "VocabIds", rng: random.Random,
                                 stats: "InstanceStats | None" = None,
                                 num_tokens_a: int | None = None, word_starts: Sequence[int] | None = None
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
    cls_id, sep_id = ids.cls_id, ids.sep_id
    scheme = config.effective_masking_scheme
    if scheme in ("ngram", "span") or (scheme == "whole-word" and word_starts is not None):
        return _word_level(tokens, config, ids, rng, stats, word_starts)
    wanted = num_to_predict(len(tokens), config.masked_lm_prob, config.max_predictions_per_seq)
    positions: list[int] = []
    if scheme == "whole-word":
        is_cont = ids.is_continuation
        cand_indexes: list[list[int]] = []
        for i, token in enumerate(tokens):
            if token == cls_id or token == sep_id:
                continue
            if cand_indexes and is_cont[token]:
                cand_indexes[-1].append(i)
            else:
                cand_indexes.append([i])
        # (the original's loop over its shuffled words, same draws; candidate words are disjoint, so its
        # "already covered" check never fires)
        for first, _ in choose_word_spans(cand_indexes, None, wanted, "whole-word", Draws(rng)):
            positions.extend(cand_indexes[first])
    else:
        if num_tokens_a is not None:
            cand = list(range(1, num_tokens_a + 1))
            cand.extend(range(num_tokens_a + 2, len(tokens) - 1))
        else:
            cand = [i for i, token in enumerate(tokens) if token != cls_id and token != sep_id]
        shuffle(cand, rng)  # every draw counts, although at most num_to_predict are used
        positions = cand[:wanted]

    # (the original draws each piece's fate as it takes the piece; no other draw comes in between)
    output = list(tokens)
    n_mask = n_kept = 0
    for index, code in zip(positions, draw_replacements(len(positions), rng, ids.random_ids)):
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
    return output, positions, [tokens[i] for i in positions]


def _word_level(tokens: list[int], config: "InstanceConfig", ids: "VocabIds", rng: random.Random,
                stats: "InstanceStats | None", word_starts: Sequence[int] | None) -> tuple[list[int], list[int], list[int]]:
    """:func:`create_masked_lm_predictions` under a word-level scheme (see there)."""
    cls_id, sep_id = ids.cls_id, ids.sep_id
    is_cont = ids.is_continuation
    words: list[list[int]] = []
    word_segment: list[int] = []
    segment = -1
    new_word = True
    for i, token in enumerate(tokens):
        if token == cls_id or token == sep_id:
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
        tokens, words, word_segment, config, ids.mask_id, ids.random_ids, Draws(rng))
    if stats is not None:
        stats.masked += len(positions)
        stats.masked_as_mask += n_mask
        stats.masked_as_random += n_random
        stats.masked_as_kept += n_kept
    return output, positions, labels


# ------------------------------------------------------------------------------------- numpy (fast, dynamic)


def replace_positions(values: np.ndarray, positions: np.ndarray, mask_id: int, random_ids: np.ndarray | int,
                      rng: np.random.Generator, groups: np.ndarray | None = None) -> tuple[int, int]:
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


_CHUNK_ROWS = 8192


def mask_table(table: pa.Table, config: "InstanceConfig", mask_id: int, random_ids: np.ndarray,
               rng: np.random.Generator, sep_id: int | None = None) -> tuple[pa.Table, dict[str, int]]:
    """Mask an unmasked shard table (``masked_lm_*`` columns empty) and fill its prediction columns
    (``make-shards --sampling fast``).

    Per row :func:`num_to_predict` positions chosen uniformly among the tokens that are not [CLS]/[SEP]
    (the ``k`` smallest of one uniform key per token: a uniform random subset, as the first ``k`` of the
    original's shuffle), then :func:`replace_positions`. The distribution is the original's; the random
    stream is not. Whole-word masking is not vectorized (the fast mode keeps the exact per-instance
    masking for it). Why: at ``max_seq_length=128`` the original spends ~60% of its time shuffling ~125
    candidates per instance one Python-level draw at a time (``benchmarks/README.md``); here a chunk of
    rows is masked with a few numpy operations.

    Args:
        table: rows ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` (schema ``schema.shard_schema``); with
            ``sep_id``, rows ``[CLS] ... [SEP]`` holding any number of ``[SEP]`` (objective ``none``). Columns
            other than ``input_ids`` and ``masked_lm_*`` are kept as they are.
        random_ids: ids a random replacement is drawn from (the original's ``vocab_words``).
        rng: numpy generator (seeded per bucket by the caller).
        sep_id: when given, every token equal to it is excluded (found by value, not from the token types),
            and a row with fewer candidates than :func:`num_to_predict` gets one prediction per candidate.

    Returns:
        (masked table, counts ``{"masked", "masked_as_mask", "masked_as_random", "masked_as_kept"}``).
    """
    table = table.combine_chunks()
    ids_col = table.column("input_ids").chunk(0)
    tt_col = table.column("token_type_ids").chunk(0)
    offsets = ids_col.offsets.to_numpy().astype(np.int64)
    values = ids_col.values.to_numpy()
    lengths = np.diff(offsets)
    n_rows = len(lengths)
    if n_rows == 0:
        return table, {"masked": 0, "masked_as_mask": 0, "masked_as_random": 0, "masked_as_kept": 0}
    # B starts after the tokens of type 0 ([CLS] A [SEP]); the middle [SEP] is just before it
    tt = tt_col.values.to_numpy()
    first_b = lengths - np.add.reduceat(tt.astype(np.int64), offsets[:-1])

    # numbers to predict, as num_to_predict: round half to even of n * p (float64), capped
    k = np.minimum(config.max_predictions_per_seq,
                   np.maximum(1, np.rint(lengths * config.masked_lm_prob).astype(np.int64)))
    if sep_id is None:
        k = np.minimum(k, lengths - 3)  # never more than the candidates
    else:
        specials = (values == sep_id).astype(np.int64)
        specials[offsets[:-1]] = 1  # [CLS]
        k = np.minimum(k, lengths - np.add.reduceat(specials, offsets[:-1]))

    out_values = values.copy()
    all_positions = []
    max_k = int(k.max())
    for lo in range(0, n_rows, _CHUNK_ROWS):
        hi = min(lo + _CHUNK_ROWS, n_rows)
        rows = hi - lo
        row_lengths = lengths[lo:hi]
        width = int(row_lengths.max())
        inside = np.arange(width)[None, :] < row_lengths[:, None]
        keys = np.full((rows, width), np.inf)
        keys[inside] = rng.random(int(offsets[hi] - offsets[lo]))  # row-major = the tokens' order
        ar = np.arange(rows)
        keys[ar, 0] = np.inf                                   # [CLS]
        keys[ar, first_b[lo:hi] - 1] = np.inf                   # middle [SEP]
        keys[ar, row_lengths - 1] = np.inf                      # last [SEP]
        if sep_id is not None:                                   # every [SEP]
            is_sep = np.zeros((rows, width), dtype=bool)
            is_sep[inside] = values[offsets[lo]:offsets[hi]] == sep_id
            keys[is_sep] = np.inf
        kk = min(max_k, width)
        part = np.argpartition(keys, kk - 1, axis=1)[:, :kk]
        order = np.argsort(np.take_along_axis(keys, part, axis=1), axis=1)
        chosen = np.take_along_axis(part, order, axis=1)        # candidates by ascending key
        take = np.arange(kk)[None, :] < k[lo:hi, None]
        chosen = np.where(take, chosen, np.iinfo(np.int64).max)
        chosen.sort(axis=1)                                     # positions ascending, unused at the end
        all_positions.append(chosen[take])                      # row-major: each row's k positions
    positions = np.concatenate(all_positions) if all_positions else np.zeros(0, dtype=np.int64)
    m_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(k, out=m_offsets[1:])
    flat = offsets[:-1][np.repeat(np.arange(n_rows), k)] + positions
    labels = values[flat]
    n_mask, n_random = replace_positions(out_values, flat, mask_id, random_ids, rng)
    counts = {"masked": int(len(flat)), "masked_as_mask": n_mask, "masked_as_random": n_random,
              "masked_as_kept": int(len(flat)) - n_mask - n_random}

    schema = table.schema
    id_type = schema.field("input_ids").type

    def list_array(offs: np.ndarray, vals: np.ndarray, typ: pa.DataType) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offs.astype(np.int32)), pa.array(vals, type=typ.value_type), type=typ)

    new = {
        "input_ids": list_array(offsets, out_values, id_type),
        "masked_lm_positions": list_array(m_offsets, positions.astype(np.uint16),
                                          schema.field("masked_lm_positions").type),
        "masked_lm_ids": list_array(m_offsets, labels, schema.field("masked_lm_ids").type),
    }
    columns = [new[name] if name in new else table.column(name).chunk(0) for name in schema.names]
    return pa.Table.from_arrays(columns, schema=schema), counts


# ------------------------------------------------------------------------------ word-level masking schemes

#: ``--masking-scheme`` choices: what one masking decision covers.
MASKING_SCHEMES = ("token", "whole-word", "ngram", "span")
#: SpanBERT's span lengths (Joshi et al. 2020, section 3.1): Geo(p = 0.2) words, clipped at 10 (mean 3.8).
SPAN_GEOMETRIC_P = 0.2
MAX_SPAN_LENGTH = 10
#: The ERNIE / Megatron-LM n-gram variant: n words with probability proportional to 1/n, n <= 3.
MAX_NGRAM_SIZE = 3


def span_length_probabilities(p: float = SPAN_GEOMETRIC_P, max_length: int = MAX_SPAN_LENGTH) -> list[float]:
    """``P(length = l)`` for ``l = 1 .. max_length`` words: the geometric ``p (1 - p)^(l - 1)`` truncated at
    ``max_length`` and renormalised, as SpanBERT's code draws it (``np.random.choice`` over the normalised
    ``p (1 - p)^(l - 1)``); with p = 0.2 and 10 the mean is 3.80, the paper's "mean span length 3.8"
    (Joshi et al. 2020, section 3.1). Returns ``max_length`` floats summing to 1.

    Raises:
        ValueError: ``p`` outside (0, 1] or ``max_length`` < 1.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"span geometric p must be in (0, 1], got {p}")
    if max_length < 1:
        raise ValueError(f"max span length must be at least 1, got {max_length}")
    weights = [p * (1.0 - p) ** (length - 1) for length in range(1, max_length + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def ngram_probabilities(max_ngram_size: int = MAX_NGRAM_SIZE) -> list[float]:
    """``P(n)`` for ``n = 1 .. max_ngram_size`` words, proportional to ``1 / n`` (Megatron-LM
    ``dataset_utils.create_masked_lm_predictions`` with ``geometric_dist=False``, after ERNIE 2.0 / ALBERT's
    n-gram masking; ALBERT section 4.5). Raises ``ValueError`` when ``max_ngram_size`` < 1."""
    if max_ngram_size < 1:
        raise ValueError(f"max n-gram size must be at least 1, got {max_ngram_size}")
    weights = [1.0 / n for n in range(1, max_ngram_size + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def _cumulative(probabilities: Sequence[float]) -> list[float]:
    out, running = [], 0.0
    for p in probabilities:
        running += p
        out.append(running)
    out[-1] = 1.0  # (rounding) every uniform draw in [0, 1) falls below the last entry
    return out


class Draws:
    """The three kinds of random draw the word-level schemes make, from either generator, so that static
    masking (``random.Random``, make-shards) and dynamic masking (``numpy.random.Generator``, the trainer) run
    the same code: ``random()`` (a uniform float in [0, 1)), ``randbelow(n)`` (an int in [0, n)) and
    ``shuffle(list)`` (in place; for ``random.Random`` exactly ``rng.shuffle``)."""

    def __init__(self, rng: random.Random | np.random.Generator):
        self.rng = rng
        if isinstance(rng, np.random.Generator):
            self.random = rng.random
            self.randbelow = lambda n: int(rng.integers(n))
            self.shuffle = self._numpy_shuffle
        else:
            self.random = rng.random
            self.randbelow = rng.randrange
            self.shuffle = lambda x: shuffle(x, rng)

    def _numpy_shuffle(self, x: list) -> None:
        x[:] = [x[i] for i in self.rng.permutation(len(x)).tolist()]


def words_from_starts(positions: Sequence[int], starts: Sequence[bool]) -> list[list[int]]:
    """Group candidate ``positions`` into words: a word begins at each position whose ``starts`` flag is true
    (and at the first position). Returns the words, each a list of positions, in order."""
    words: list[list[int]] = []
    for position, start in zip(positions, starts):
        if start or not words:
            words.append([position])
        else:
            words[-1].append(position)
    return words


def choose_word_spans(words: Sequence[Sequence[int]], word_segment: Sequence[int] | None, wanted: int, scheme: str,
                      draws: Draws, *, max_ngram_size: int = MAX_NGRAM_SIZE,
                      span_geometric_p: float = SPAN_GEOMETRIC_P,
                      max_span_length: int = MAX_SPAN_LENGTH) -> list[tuple[int, int]]:
    """Which words to predict under a word-level scheme, as spans ``(first word, number of words)`` in the
    order chosen; together they hold at most ``wanted`` pieces and never share a word.

    * ``whole-word``: the original's loop (google-research/bert ``create_masked_lm_predictions`` with
      ``do_whole_word_mask``): the words in a shuffled order, each taken whole, or skipped when it does not fit
      the budget, until ``wanted`` pieces are taken. Same draws as the original for ``random.Random``.
    * ``ngram``: Megatron-LM's n-gram masking: the word positions in a shuffled order; from each, ``n`` words
      with ``P(n)`` from :func:`ngram_probabilities` (renormalised over the n-grams that stay inside the
      segment), shortened while it exceeds the budget, skipped when it overlaps words already taken.
    * ``span``: SpanBERT (Joshi et al. 2020, section 3.1): repeatedly a length ``l`` in words from
      :func:`span_length_probabilities`, then a start uniformly among the places where ``l`` consecutive
      words of one segment are all still unmasked (no such place: a new length); the last span is cut to
      the words that fit the budget. Stops when the budget is spent or after ``4 * wanted + 16`` draws
      that took nothing.

    Args:
        words: each word as the list of its piece positions, in order.
        word_segment: per word, its segment (A = 0, B = 1): n-grams and spans never cross a segment
            boundary (``None``: one segment).
        wanted: the budget in pieces (:func:`num_to_predict`).
        scheme: ``whole-word``, ``ngram`` or ``span``.
        draws: the random source (:class:`Draws`).
    Raises:
        ValueError: an unknown scheme (``token`` has no words: use the per-piece forms).
    """
    n_words = len(words)
    sizes = [len(w) for w in words]
    spans: list[tuple[int, int]] = []
    count = 0
    if scheme == "whole-word":
        order = list(range(n_words))
        draws.shuffle(order)  # the original shuffles its list of words: the same permutation
        for w in order:
            if count >= wanted:
                break
            if count + sizes[w] > wanted:
                continue
            spans.append((w, 1))
            count += sizes[w]
        return spans
    if scheme not in ("ngram", "span"):
        raise ValueError(f"unknown word-level masking scheme {scheme!r}; one of whole-word, ngram, span")
    segment = list(word_segment) if word_segment is not None else [0] * n_words
    # the end (exclusive) of each word's segment
    segment_end = [0] * n_words
    end = n_words
    for w in range(n_words - 1, -1, -1):
        if w + 1 < n_words and segment[w + 1] != segment[w]:
            end = w + 1
        segment_end[w] = end
    taken = [False] * n_words

    if scheme == "ngram":
        cdf = _cumulative(ngram_probabilities(max_ngram_size))
        order = list(range(n_words))
        draws.shuffle(order)
        for w in order:
            if count >= wanted:
                break
            available = min(max_ngram_size, segment_end[w] - w)
            u = draws.random() * cdf[available - 1]
            n = 1
            while n < available and u >= cdf[n - 1]:
                n += 1
            size = sum(sizes[w:w + n])
            while n > 0 and count + size > wanted:  # shorter n-grams until one fits the budget
                n -= 1
                size -= sizes[w + n]
            if n == 0 or any(taken[w:w + n]):
                continue
            for k in range(w, w + n):
                taken[k] = True
            spans.append((w, n))
            count += size
        return spans

    cdf = _cumulative(span_length_probabilities(span_geometric_p, max_span_length))
    misses = 0
    while count < wanted and misses < 4 * wanted + 16:
        u = draws.random()
        length = 1
        while length < len(cdf) and u >= cdf[length - 1]:
            length += 1
        # runs of free words inside one segment: a run of r words has r - length + 1 places
        runs: list[tuple[int, int]] = []  # (first word, places)
        places = 0
        w = 0
        while w < n_words:
            if taken[w]:
                w += 1
                continue
            first = w
            while w < segment_end[first] and not taken[w]:
                w += 1
            if w - first >= length:
                runs.append((first, w - first - length + 1))
                places += w - first - length + 1
        if places == 0:
            misses += 1
            continue
        k = draws.randbelow(places)
        for first, n_places in runs:
            if k < n_places:
                start = first + k
                break
            k -= n_places
        n = 0
        while n < length and count + sizes[start + n] <= wanted:
            count += sizes[start + n]
            n += 1
        if n == 0:
            misses += 1
            continue
        for k in range(start, start + n):
            taken[k] = True
        spans.append((start, n))
    return spans


def word_masked_lm_predictions(tokens: Sequence[int], words: Sequence[Sequence[int]],
                               word_segment: Sequence[int] | None, config: "InstanceConfig | MaskingConfig",
                               mask_id: int, random_ids: Sequence[int] | int, draws: Draws,
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
    spans = choose_word_spans(words, word_segment, wanted, config.masking_scheme, draws,
                              max_ngram_size=config.max_ngram_size, span_geometric_p=config.span_geometric_p,
                              max_span_length=config.max_span_length)
    n_random_ids = random_ids if isinstance(random_ids, (int, np.integer)) else len(random_ids)

    def random_id() -> int:
        k = draws.randbelow(int(n_random_ids))
        return k if isinstance(random_ids, (int, np.integer)) else int(random_ids[k])

    output = [int(t) for t in tokens]
    positions: list[int] = []
    n_mask = n_random = 0
    per_span = config.masking_scheme == "span"
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
    return output, positions, [int(tokens[p]) for p in positions], (n_mask, n_random, len(positions) - n_mask - n_random)


@dataclass(frozen=True)
class MaskingConfig:
    """The settings of the masking rule for :func:`mask_instance` (the trainer's dynamic masking)."""

    vocab_size: int
    cls_token_id: int
    sep_token_id: int
    mask_token_id: int
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    is_subword: np.ndarray | None = None
    """bool [vocab_size], True for ``##`` continuation pieces: the default word boundaries (a word is a piece and
    its following ``##`` pieces). Given with ``masking_scheme="token"`` it asks for whole-word masking (as
    before the schemes existed)."""
    masking_scheme: str = "token"
    """One of :data:`MASKING_SCHEMES`; the word-level ones take their words from the row's ``word_ids`` when
    :func:`mask_instance` is given them, else from ``is_subword``."""
    max_ngram_size: int = MAX_NGRAM_SIZE
    span_geometric_p: float = SPAN_GEOMETRIC_P
    max_span_length: int = MAX_SPAN_LENGTH

    def __post_init__(self) -> None:
        if self.masking_scheme not in MASKING_SCHEMES:
            raise ValueError(f"masking_scheme must be one of {', '.join(MASKING_SCHEMES)}, got {self.masking_scheme!r}")


def mask_instance(input_ids: np.ndarray, config: MaskingConfig, rng: np.random.Generator,
                  word_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Choose and corrupt the positions to predict in one unmasked instance (dynamic masking, numpy form).

    :func:`num_to_predict` positions among the tokens that are not [CLS] / [SEP]: under ``token`` the first of
    a random permutation of them; under a word-level scheme (``whole-word``, ``ngram``, ``span``, or
    ``is_subword`` given with ``token``) the words :func:`choose_word_spans` picks, drawn from ``rng``. Then
    :func:`replace_positions` (80/10/10) with the random entry drawn from ``range(vocab_size)``; under
    ``span`` one fate per span.

    Args:
        input_ids: 1-D integer array, ``[CLS] A [SEP] B [SEP]``, not masked.
        word_ids: optional 1-D integer array of the same length (the shard's ``word_ids`` column: the word
            index of each piece, -1 at [CLS]/[SEP]): the word boundaries. Without it the words are a piece and
            its following ``##`` pieces (``config.is_subword``). A word never crosses a [SEP].
    Returns:
        ``(masked_input_ids, masked_lm_positions, masked_lm_ids)``: int64 arrays, positions ascending,
        ids = the original tokens there. Same numbers from the same ``rng`` state.
    Raises:
        ValueError: a word-level scheme with neither ``word_ids`` nor ``is_subword``, or ``word_ids`` of
            another length than ``input_ids``.
    """
    ids = np.asarray(input_ids, dtype=np.int64)
    n = len(ids)
    is_special = (ids == config.cls_token_id) | (ids == config.sep_token_id)
    cand = np.flatnonzero(~is_special)
    wanted = num_to_predict(n, config.masked_lm_prob, config.max_predictions_per_seq)
    scheme = config.masking_scheme
    if scheme == "token" and config.is_subword is not None:
        scheme = "whole-word"
    groups = None
    if scheme == "token":
        positions = cand[rng.permutation(len(cand))[:wanted]]
    else:
        if word_ids is not None:
            word_ids = np.asarray(word_ids, dtype=np.int64)
            if len(word_ids) != n:
                raise ValueError(f"word_ids has {len(word_ids)} entries for {n} input_ids")
            cand_words = word_ids[cand]
            starts = np.ones(len(cand), dtype=bool)
            starts[1:] = cand_words[1:] != cand_words[:-1]
        elif config.is_subword is not None:
            starts = ~config.is_subword[ids[cand]]
        else:
            raise ValueError(f"masking scheme {scheme!r} needs word boundaries: shards with a word_ids column, or "
                             "the vocab's ## pieces (is_subword)")
        # a word never crosses [SEP]: the first piece after a special token starts one
        segment_of = np.cumsum(is_special)[cand]  # (A after one special, B after two)
        if len(starts):
            starts[0] = True
            starts[1:] |= segment_of[1:] != segment_of[:-1]
        words = words_from_starts(cand.tolist(), starts.tolist())
        word_segment = segment_of[np.flatnonzero(starts)].tolist()
        spans = choose_word_spans(words, word_segment, wanted, scheme, Draws(rng),
                                  max_ngram_size=config.max_ngram_size, span_geometric_p=config.span_geometric_p,
                                  max_span_length=config.max_span_length)
        chosen = [(p, k) for k, (first, count) in enumerate(spans) for w in range(first, first + count)
                  for p in words[w]]
        positions = np.array([p for p, _ in chosen], dtype=np.int64)
        if scheme == "span":
            groups = np.array([k for _, k in chosen], dtype=np.int64)
    order = np.argsort(positions, kind="stable")
    positions = positions[order].astype(np.int64)
    if groups is not None:
        groups = groups[order]
    labels = ids[positions]
    out = ids.copy()
    replace_positions(out, positions, config.mask_token_id, config.vocab_size, rng, groups=groups)
    return out, positions, labels


__all__ = ["KEEP", "KEEP_GIVEN_NOT_MASKED", "MASK", "MASKING_SCHEMES", "MASK_OR_RANDOM_PROB", "MASK_PROB",
           "MAX_NGRAM_SIZE", "MAX_SPAN_LENGTH", "SPAN_GEOMETRIC_P", "Draws", "MaskingConfig", "choose_word_spans",
           "create_masked_lm_predictions", "draw_replacements", "mask_instance", "mask_table", "ngram_probabilities",
           "num_to_predict", "replace_positions", "shuffle", "span_length_probabilities", "word_masked_lm_predictions",
           "words_from_starts"]
