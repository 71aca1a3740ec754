"""Masking a whole shard table at once with numpy: the masking of ``make-shards --sampling fast``.

The masked-LM rule of :mod:`bertprep.pipeline.masking.rule` (how many positions, 80/10/10), vectorized over a
chunk of rows: :func:`mask_table` chooses each row's positions with one uniform key per token and replaces
them with :func:`~bertprep.pipeline.masking.rule.replace_positions`. Only the ``token`` scheme: the word-level
schemes keep the per-instance masking of ``masking.py`` in the fast mode too.

pyarrow and numpy only (no Beam, no torch).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from bertprep.core import schema
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.rule import replace_positions

_CHUNK_ROWS = 8192


def mask_table(
    table: pa.Table,
    config: MaskingConfig,
    mask_id: int,
    random_ids: np.ndarray,
    rng: np.random.Generator,
    sep_id: int | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """Mask an unmasked shard table (``masked_lm_*`` columns empty) and fill its prediction columns
    (``make-shards --sampling fast``).

    Per row :func:`~bertprep.pipeline.masking.rule.num_to_predict` positions chosen uniformly among the tokens
    that are not [CLS]/[SEP] (the ``k`` smallest of one uniform key per token: a uniform random subset, as the
    first ``k`` of the original's shuffle), then :func:`~bertprep.pipeline.masking.rule.replace_positions`. The
    distribution is the original's; the random stream is not. Whole-word masking is not vectorized (the fast
    mode keeps the exact per-instance masking for it). Why: at ``max_seq_length=128`` the original spends ~60%
    of its time shuffling ~125 candidates per instance one Python-level draw at a time
    (``benchmarks/README.md``); here a chunk of rows is masked with a few numpy operations.

    Args:
        table: rows ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` (schema ``schema.shard_schema``); with
            ``sep_id``, rows ``[CLS] ... [SEP]`` holding any number of ``[SEP]`` (objective ``none``). Columns
            other than ``input_ids`` and ``masked_lm_*`` are kept as they are.
        random_ids: ids a random replacement is drawn from (the original's ``vocab_words``).
        rng: numpy generator (seeded per bucket by the caller).
        sep_id: when given, every token equal to it is excluded (found by value, not from the token types),
            and a row with fewer candidates than :func:`~bertprep.pipeline.masking.rule.num_to_predict` gets one
            prediction per candidate.

    Returns:
        (masked table, counts ``{"masked", "masked_as_mask", "masked_as_random", "masked_as_kept"}``).
    """
    table = table.combine_chunks()
    ids_col = table.column("input_ids").chunk(0)
    offsets = schema.numpy_view(ids_col.offsets).astype(np.int64)
    values = schema.numpy_view(ids_col.values)
    lengths = np.diff(offsets)
    n_rows = len(lengths)
    if n_rows == 0:
        return table, {"masked": 0, "masked_as_mask": 0, "masked_as_random": 0, "masked_as_kept": 0}
    k, positions = _choose_positions(table, config, offsets, values, rng, sep_id)
    m_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(k, out=m_offsets[1:])
    flat = offsets[:-1][np.repeat(np.arange(n_rows), k)] + positions
    labels = values[flat]
    out_values = values.copy()
    n_mask, n_random = replace_positions(out_values, flat, mask_id, random_ids, rng)
    counts = {
        "masked": len(flat),
        "masked_as_mask": n_mask,
        "masked_as_random": n_random,
        "masked_as_kept": len(flat) - n_mask - n_random,
    }
    return _with_predictions(table, offsets, out_values, m_offsets, positions, labels), counts


def _choose_positions(
    table: pa.Table,
    config: MaskingConfig,
    offsets: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
    sep_id: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The positions to mask in a single-chunk table with at least one row: per row the number of predictions
    ``k`` (int64, (rows,)), and the positions, int64 (sum of ``k``,), row-major, each row's ascending and
    relative to its start (``_chunk_positions`` over chunks of ``_CHUNK_ROWS`` rows, in order)."""
    lengths = np.diff(offsets)
    n_rows = len(lengths)
    # B starts after the tokens of type 0 ([CLS] A [SEP]); the middle [SEP] is just before it
    tt = schema.numpy_view(table.column("token_type_ids").chunk(0).values)
    first_b = lengths - np.add.reduceat(tt.astype(np.int64), offsets[:-1])
    k = _predictions_per_row(config, offsets, values, sep_id)
    max_k = int(k.max())
    positions = np.concatenate(
        [
            _chunk_positions(offsets, values, first_b, k, max_k, lo, min(lo + _CHUNK_ROWS, n_rows), rng, sep_id)
            for lo in range(0, n_rows, _CHUNK_ROWS)
        ]
    )
    return k, positions


def _predictions_per_row(
    config: MaskingConfig, offsets: np.ndarray, values: np.ndarray, sep_id: int | None
) -> np.ndarray:
    """Per row, the number of positions to predict (int64): as
    :func:`~bertprep.pipeline.masking.rule.num_to_predict`, round half to even of ``length * masked_lm_prob``
    (float64), at least 1, capped at ``max_predictions_per_seq`` and at the row's candidates (the tokens
    other than [CLS] and [SEP]: 3 of them, or with ``sep_id`` [CLS] and every ``sep_id``)."""
    lengths = np.diff(offsets)
    k = np.minimum(
        config.max_predictions_per_seq, np.maximum(1, np.rint(lengths * config.masked_lm_prob).astype(np.int64))
    )
    if sep_id is None:
        return np.minimum(k, lengths - 3)  # never more than the candidates
    specials = (values == sep_id).astype(np.int64)
    specials[offsets[:-1]] = 1  # [CLS]
    return np.minimum(k, lengths - np.add.reduceat(specials, offsets[:-1]))


def _chunk_positions(
    offsets: np.ndarray,
    values: np.ndarray,
    first_b: np.ndarray,
    k: np.ndarray,
    max_k: int,
    lo: int,
    hi: int,
    rng: np.random.Generator,
    sep_id: int | None,
) -> np.ndarray:
    """The masked positions of rows ``lo .. hi - 1``, row-major, each row's ``k`` positions ascending (int64,
    positions in the row): the ``k`` candidates with the smallest of one uniform key per token (one
    ``rng.random`` call for the chunk's tokens in order). ``max_k`` is ``k.max()``."""
    rows = hi - lo
    row_lengths = offsets[lo + 1 : hi + 1] - offsets[lo:hi]
    width = int(row_lengths.max())
    inside = np.arange(width)[None, :] < row_lengths[:, None]
    keys = np.full((rows, width), np.inf)
    keys[inside] = rng.random(int(offsets[hi] - offsets[lo]))  # row-major = the tokens' order
    ar = np.arange(rows)
    keys[ar, 0] = np.inf  # [CLS]
    keys[ar, first_b[lo:hi] - 1] = np.inf  # middle [SEP]
    keys[ar, row_lengths - 1] = np.inf  # last [SEP]
    if sep_id is not None:  # every [SEP]
        is_sep = np.zeros((rows, width), dtype=bool)
        is_sep[inside] = values[offsets[lo] : offsets[hi]] == sep_id
        keys[is_sep] = np.inf
    kk = min(max_k, width)
    part = np.argpartition(keys, kk - 1, axis=1)[:, :kk]
    order = np.argsort(np.take_along_axis(keys, part, axis=1), axis=1)
    chosen = np.take_along_axis(part, order, axis=1)  # candidates by ascending key
    take = np.arange(kk)[None, :] < k[lo:hi, None]
    chosen = np.where(take, chosen, np.iinfo(np.int64).max)
    chosen.sort(axis=1)  # positions ascending, unused at the end
    return chosen[take]  # row-major: each row's k positions


def _with_predictions(
    table: pa.Table,
    offsets: np.ndarray,
    out_values: np.ndarray,
    m_offsets: np.ndarray,
    positions: np.ndarray,
    labels: np.ndarray,
) -> pa.Table:
    """``table`` with ``input_ids`` replaced by ``out_values`` and the ``masked_lm_*`` columns filled (rows of
    ``positions`` and ``labels`` cut at ``m_offsets``); the other columns as they are."""
    schema = table.schema
    id_type = schema.field("input_ids").type
    new = {
        "input_ids": _list_array(offsets, out_values, id_type),
        "masked_lm_positions": _list_array(
            m_offsets, positions.astype(np.uint16), schema.field("masked_lm_positions").type
        ),
        "masked_lm_ids": _list_array(m_offsets, labels, schema.field("masked_lm_ids").type),
    }
    columns = [new[name] if name in new else table.column(name).chunk(0) for name in schema.names]
    return pa.Table.from_arrays(columns, schema=schema)


def _list_array(offs: np.ndarray, vals: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A list array of type ``typ`` of ``vals`` cut at ``offs``."""
    return pa.ListArray.from_arrays(pa.array(offs.astype(np.int32)), pa.array(vals, type=typ.value_type), type=typ)


__all__ = ["mask_table"]
