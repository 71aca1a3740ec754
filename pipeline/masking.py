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
                                 num_tokens_a: int | None = None) -> tuple[list[int], list[int], list[int]]:
    """Choose and mask positions as the original ``create_masked_lm_predictions`` (BERT paper, section 3.1).

    :func:`num_to_predict` positions, drawn from a shuffle of all candidates (every token but [CLS]/[SEP];
    under whole-word masking a candidate is a word: a piece plus its following ``##`` pieces, and a word
    that does not fit is skipped); each chosen piece as :func:`draw_replacements` says. Same draws, in the
    same order, as the original on CPython's ``random.Random``.

    Args:
        tokens: ids of ``[CLS] A [SEP] B [SEP]``; not modified.
        num_tokens_a: len(A) when known: the candidates are then built from the layout instead of by
            comparing every token with [CLS]/[SEP] (same list: word pieces of text are never [CLS]/[SEP],
            because the pre-tokenizer splits ``[`` and ``]`` off).

    Returns:
        (output_ids, masked_lm_positions, masked_lm_ids), positions ascending.
    """
    cls_id, sep_id = ids.cls_id, ids.sep_id
    wanted = num_to_predict(len(tokens), config.masked_lm_prob, config.max_predictions_per_seq)
    positions: list[int] = []
    if config.do_whole_word_mask:
        is_cont = ids.is_continuation
        cand_indexes: list[list[int]] = []
        for i, token in enumerate(tokens):
            if token == cls_id or token == sep_id:
                continue
            if cand_indexes and is_cont[token]:
                cand_indexes[-1].append(i)
            else:
                cand_indexes.append([i])
        shuffle(cand_indexes, rng)
        for index_set in cand_indexes:
            if len(positions) >= wanted:
                break
            if len(positions) + len(index_set) > wanted:
                continue
            # Candidate words are disjoint, so the original's "already covered" check never fires.
            positions.extend(index_set)
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


# ------------------------------------------------------------------------------------- numpy (fast, dynamic)


def replace_positions(values: np.ndarray, positions: np.ndarray, mask_id: int, random_ids: np.ndarray | int,
                      rng: np.random.Generator) -> tuple[int, int]:
    """Apply the 80/10/10 rule in place at ``values[positions]`` (numpy form).

    One uniform per position (``rng.random(len(positions))``): below 0.8 [MASK], below 0.9 a random entry,
    else kept; then ``rng.integers(0, len(random_ids), n_random)`` picks the random entries in position
    order.

    Args:
        values: 1-D integer array, modified in place.
        positions: 1-D integer indices into ``values`` (distinct).
        random_ids: ids a random replacement is drawn from (the original's ``vocab_words``), or an int
            ``V`` meaning ``range(V)``.

    Returns:
        ``(n_mask, n_random)``; the kept count is ``len(positions) - n_mask - n_random``.
    """
    u = rng.random(len(positions))
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
               rng: np.random.Generator) -> tuple[pa.Table, dict[str, int]]:
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
        table: rows ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` (schema ``schema.shard_schema``).
        random_ids: ids a random replacement is drawn from (the original's ``vocab_words``).
        rng: numpy generator (seeded per bucket by the caller).

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
    k = np.minimum(k, lengths - 3)  # never more than the candidates

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

    columns = [
        list_array(offsets, out_values, id_type),
        tt_col,
        list_array(m_offsets, positions.astype(np.uint16), schema.field("masked_lm_positions").type),
        list_array(m_offsets, labels, schema.field("masked_lm_ids").type),
        table.column("next_sentence_label").chunk(0),
    ]
    return pa.Table.from_arrays(columns, schema=schema), counts


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
    """bool [vocab_size], True for ``##`` continuation pieces: whole-word masking when given."""


def mask_instance(input_ids: np.ndarray, config: MaskingConfig, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Choose and corrupt the positions to predict in one unmasked instance (dynamic masking, numpy form).

    :func:`num_to_predict` positions among the tokens that are not [CLS] / [SEP], the first of a random
    permutation of them; with ``is_subword``, of the words (a piece and its following ``##`` pieces), each
    taken whole or skipped when it does not fit. Then :func:`replace_positions` with the random entry drawn
    from ``range(vocab_size)``.

    Args:
        input_ids: 1-D integer array, ``[CLS] A [SEP] B [SEP]``, not masked.
    Returns:
        ``(masked_input_ids, masked_lm_positions, masked_lm_ids)``: int64 arrays, positions ascending,
        ids = the original tokens there. Same numbers from the same ``rng`` state.
    """
    ids = np.asarray(input_ids, dtype=np.int64)
    n = len(ids)
    cand = np.flatnonzero((ids != config.cls_token_id) & (ids != config.sep_token_id))
    wanted = num_to_predict(n, config.masked_lm_prob, config.max_predictions_per_seq)
    if config.is_subword is None:
        positions = cand[rng.permutation(len(cand))[:wanted]]
    else:
        # A word starts at every candidate that is not a ## piece (and at the first candidate).
        starts = ~config.is_subword[ids[cand]]
        if len(starts):
            starts[0] = True
        bounds = np.flatnonzero(np.append(starts, True))
        chosen: list[np.ndarray] = []
        count = 0
        for w in rng.permutation(len(bounds) - 1):
            if count >= wanted:
                break
            size = bounds[w + 1] - bounds[w]
            if count + size > wanted:
                continue
            chosen.append(cand[bounds[w]:bounds[w + 1]])
            count += size
        positions = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    positions = np.sort(positions).astype(np.int64)
    labels = ids[positions]
    out = ids.copy()
    replace_positions(out, positions, config.mask_token_id, config.vocab_size, rng)
    return out, positions, labels


__all__ = ["KEEP", "KEEP_GIVEN_NOT_MASKED", "MASK", "MASK_OR_RANDOM_PROB", "MASK_PROB", "MaskingConfig",
           "create_masked_lm_predictions", "draw_replacements", "mask_instance", "mask_table", "num_to_predict",
           "replace_positions", "shuffle"]
