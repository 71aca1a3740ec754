"""Vectorized masked-LM predictions over a whole table of instances (``--sampling fast``).

Same rule as the original ``create_masked_lm_predictions`` (BERT paper section 3.1;
``instances.create_masked_lm_predictions``): per instance ``min(max_predictions_per_seq,
max(1, round(n * masked_lm_prob)))`` positions chosen uniformly among the tokens that are not [CLS]/[SEP]
(the original takes the first positions of a uniform shuffle of the candidates, i.e. a uniform random
subset), each becoming [MASK] with probability 0.8, a uniformly random vocab entry with 0.1, or staying
with 0.1. The distribution is the original's; the random stream (numpy ``Generator``) is not, so the
output is not the original's instance for instance. Whole-word masking is not vectorized (the fast mode
keeps the exact per-instance masking for it).

Why: at ``max_seq_length=128`` the original spends ~60% of its time shuffling ~125 candidates per
instance one Python-level draw at a time (see ``benchmarks/README.md``); here a chunk of rows is masked with
a few numpy operations.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from bertprep.pipeline.config import InstanceConfig

_CHUNK_ROWS = 8192


def mask_table(table: pa.Table, config: InstanceConfig, mask_id: int, random_ids: np.ndarray,
               rng: np.random.Generator) -> tuple[pa.Table, dict[str, int]]:
    """Mask an unmasked shard table (``masked_lm_*`` columns empty) and fill its prediction columns.

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

    # numbers to predict, as the original: round half to even of n * p (float64), capped
    k = np.minimum(config.max_predictions_per_seq,
                   np.maximum(1, np.rint(lengths * config.masked_lm_prob).astype(np.int64)))
    k = np.minimum(k, lengths - 3)  # never more than the candidates

    out_values = values.copy()
    all_positions = []
    counts = {"masked": 0, "masked_as_mask": 0, "masked_as_random": 0, "masked_as_kept": 0}
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
    u = rng.random(len(flat))
    as_mask = u < 0.8
    as_random = (u >= 0.8) & (u < 0.9)
    out_values[flat[as_mask]] = mask_id
    n_random = int(as_random.sum())
    out_values[flat[as_random]] = random_ids[rng.integers(0, len(random_ids), size=n_random)]
    counts["masked"] = int(len(flat))
    counts["masked_as_mask"] = int(as_mask.sum())
    counts["masked_as_random"] = n_random
    counts["masked_as_kept"] = int(len(flat)) - counts["masked_as_mask"] - n_random

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
