"""Described instances into Arrow rows: the second half of what ``make-shards`` runs for each bucket.

:func:`~bertprep.pipeline.instances.bucket_instances.describe_instances` makes every random draw of the reference
algorithm on sentence lengths and leaves each instance as offsets into the bucket's flat ids plus its masked
positions and replacement ids (:class:`~bertprep.pipeline.instances.bucket_arrays.InstanceDescriptions`).
:func:`assemble_batches` turns those descriptions into Arrow rows (schema ``schema.shard_schema``) with numpy,
a chunk of rows at a time (bounded temporary memory): gathers the ids, inserts [CLS]/[SEP], applies the masks,
sorts positions, and (``--word-ids``) numbers each row's words. No random draw happens here; the rows equal
the list-based reference's (``tests/test_bucket_instances.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from bertprep.core import schema
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments, InstanceDescriptions
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.masking.rule import KEEP

#: Rows assembled per numpy pass (bounds the temporary arrays: ~1M tokens at 128).
ASSEMBLE_CHUNK_ROWS = 8192


def assemble_batches(
    docs: BucketDocuments,
    described: InstanceDescriptions,
    ids: VocabIds,
    vocab_size: int,
    chunk_rows: int = ASSEMBLE_CHUNK_ROWS,
    word_ids: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Arrow rows (schema :func:`schema.shard_schema`) of the described instances in their final order.

    Per row: ``input_ids`` = ``[CLS] A [SEP] B [SEP]`` gathered from ``docs.ids`` with the masks applied,
    ``token_type_ids`` 0 up to and including the first [SEP] and 1 after, ``masked_lm_positions``
    ascending and ``masked_lm_ids`` the original ids there. ``chunk_rows`` rows per batch. Objective
    ``none`` (``described.objective``): ``[CLS] A [SEP]`` gathered from ``described.ids``, token types all 0,
    no ``next_sentence_label`` column. With ``word_ids``, a ``word_ids`` column: the word index of each piece
    in its row, -1 at [CLS]/[SEP] (words from ``docs.word_starts``, else a piece and its ``##`` pieces; a word
    never crosses [SEP]; :func:`~bertprep.pipeline.text.word_segmentation.instance_word_ids`).
    """
    single = described.objective == "none"
    arrow_schema = schema.shard_schema(vocab_size, described.objective, word_ids=word_ids)
    id_dtype = np.uint16 if arrow_schema.field("input_ids").type.value_type == pa.uint16() else np.uint32
    if len(described) == 0:
        return
    arrays = _DescribedArrays.of(described)
    flat_ids = described.ids if described.ids is not None else docs.ids

    def list_array(offs: np.ndarray, vals: np.ndarray, field_name: str) -> pa.Array:
        typ = arrow_schema.field(field_name).type
        return pa.ListArray.from_arrays(pa.array(offs.astype(np.int32)), pa.array(vals, type=typ.value_type), type=typ)

    for lo in range(0, len(described), chunk_rows):
        rows = arrays.order[lo : lo + chunk_rows]
        offsets, values, token_type = _gather_rows(flat_ids, arrays, rows, single, ids)
        m_offsets, positions, labels, at = _apply_masks(values, offsets, arrays, rows)
        columns = [
            list_array(offsets, values.astype(id_dtype), "input_ids"),
            list_array(offsets, token_type, "token_type_ids"),
            list_array(m_offsets, positions.astype(np.uint16), "masked_lm_positions"),
            list_array(m_offsets, labels.astype(id_dtype), "masked_lm_ids"),
        ]
        if not single:
            columns.append(pa.array(arrays.label[rows], type=pa.uint8()))
        if word_ids:
            unmasked = _unmasked_values(values, at, labels)
            columns.append(
                list_array(offsets, _row_word_ids(docs, described, ids, arrays, rows, offsets, unmasked), "word_ids")
            )
        yield pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


@dataclasses.dataclass
class _DescribedArrays:
    """The columns of :class:`InstanceDescriptions` as numpy arrays (int64 but ``label``, uint8), plus
    ``m_first``: the index of each instance's first mask entry (``n + 1`` entries)."""

    a_start: np.ndarray
    a_len: np.ndarray
    b_start: np.ndarray
    b_len: np.ndarray
    label: np.ndarray
    n_masked: np.ndarray
    m_first: np.ndarray
    m_pos: np.ndarray
    m_rep: np.ndarray
    order: np.ndarray

    @classmethod
    def of(cls, described: InstanceDescriptions) -> _DescribedArrays:
        n_masked = np.frombuffer(described.n_masked, dtype=np.int32).astype(np.int64)
        m_first = np.zeros(len(described) + 1, dtype=np.int64)
        np.cumsum(n_masked, out=m_first[1:])
        return cls(
            a_start=np.frombuffer(described.a_start, dtype=np.int64),
            a_len=np.frombuffer(described.a_len, dtype=np.int32).astype(np.int64),
            b_start=np.frombuffer(described.b_start, dtype=np.int64),
            b_len=np.frombuffer(described.b_len, dtype=np.int32).astype(np.int64),
            label=np.frombuffer(described.label, dtype=np.uint8),
            n_masked=n_masked,
            m_first=m_first,
            m_pos=np.frombuffer(described.m_pos, dtype=np.int32).astype(np.int64),
            m_rep=np.frombuffer(described.m_rep, dtype=np.int64),
            order=np.asarray(described.order, dtype=np.int64),
        )


def _gather_rows(
    flat_ids: np.ndarray, arrays: _DescribedArrays, rows: np.ndarray, single: bool, ids: VocabIds
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(offsets, input_ids, token_type_ids)`` of the instances ``rows``, unmasked and concatenated: row ``i``
    occupies ``offsets[i]:offsets[i + 1]`` (int64); ids int64, token types uint8. ``single`` (objective
    ``none``): ``[CLS] A [SEP]``, token types all 0; else :func:`_gather_pairs`."""
    al = arrays.a_len[rows]
    lengths = al + arrays.b_len[rows] + (2 if single else 3)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    starts = offsets[:-1]
    if not single:
        values, token_type = _gather_pairs(
            flat_ids, arrays.a_start[rows], arrays.b_start[rows], al, starts, offsets, total, ids.cls_id, ids.sep_id
        )
        return offsets, values, token_type
    src = np.repeat(arrays.a_start[rows] - starts - 1, lengths) + np.arange(total)  # one shift per row
    values = flat_ids.take(src, mode="clip").astype(np.int64)
    values[starts] = ids.cls_id
    values[offsets[1:] - 1] = ids.sep_id
    return offsets, values, np.zeros(total, dtype=np.uint8)


def _apply_masks(
    values: np.ndarray, offsets: np.ndarray, arrays: _DescribedArrays, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Apply the masks of the instances ``rows`` to their gathered ``values`` (in place), each row's
    ``(position, replacement)`` entries sorted by position. Returns ``(m_offsets, positions, labels, at)``:
    row ``i``'s entries are ``m_offsets[i]:m_offsets[i + 1]``; ``positions`` in the row, ``labels`` the ids
    there before masking, ``at`` their indexes in ``values``."""
    counts = arrays.n_masked[rows]
    m_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=m_offsets[1:])
    m_row = np.repeat(np.arange(len(rows)), counts)
    m_src = arrays.m_first[rows][m_row] + (np.arange(int(m_offsets[-1])) - m_offsets[:-1][m_row])
    positions = arrays.m_pos[m_src]
    replacement = arrays.m_rep[m_src]
    key = m_row * (1 << 20) + positions
    sort = np.argsort(key, kind="stable")
    positions, replacement, m_row = positions[sort], replacement[sort], m_row[sort]
    at = offsets[:-1][m_row] + positions
    labels = values[at]
    replaced = replacement != KEEP
    values[at[replaced]] = replacement[replaced]
    return m_offsets, positions, labels, at


def _unmasked_values(values: np.ndarray, at: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The rows' ids before masking (``values`` with the ``labels`` put back at ``at``)."""
    unmasked = values.copy()
    unmasked[at] = labels
    return unmasked


def _row_word_ids(
    docs: BucketDocuments,
    described: InstanceDescriptions,
    ids: VocabIds,
    arrays: _DescribedArrays,
    rows: np.ndarray,
    offsets: np.ndarray,
    unmasked: np.ndarray,
) -> np.ndarray:
    """``word_ids`` of a chunk of rows, concatenated (int32, -1 at [CLS]/[SEP])."""
    from bertprep.pipeline.text.word_segmentation import default_word_starts

    starts, total, al = offsets[:-1], int(offsets[-1]), arrays.a_len[rows]
    a_start, b_start = arrays.a_start, arrays.b_start
    is_special = (unmasked == ids.cls_id) | (unmasked == ids.sep_id)
    is_special[starts] = True
    is_special[offsets[1:] - 1] = True
    if described.objective == "none" and described.stream_word_starts is not None:
        lengths = np.diff(offsets)
        src = np.repeat(a_start[rows] - starts - 1, lengths) + np.arange(total)  # as the rows' ids were gathered
        flags = described.stream_word_starts.take(src, mode="clip")
    elif described.objective == "none" or docs.word_starts is None:
        flags = default_word_starts(unmasked, ids.is_continuation)
    else:
        flags, _ = _gather_pairs(docs.word_starts, a_start[rows], b_start[rows], al, starts, offsets, total, 0, 0)
        is_special[starts + al + 1] = True
    # as instance_word_ids, numbered per row: a word starts at a flag or right after [CLS]/[SEP]
    start = flags.astype(bool)
    start[1:] |= is_special[:-1]
    start &= ~is_special
    seen = np.cumsum(start, dtype=np.int64)
    word_id = seen - np.repeat(seen[starts], np.diff(offsets)) - 1  # ([CLS] is no start: seen = words before)
    word_id[is_special] = -1
    return word_id.astype(np.int32)


def _gather_pairs(
    flat_ids: np.ndarray,
    a_start: np.ndarray,
    b_start: np.ndarray,
    al: np.ndarray,
    starts: np.ndarray,
    offsets: np.ndarray,
    total: int,
    cls_id: int,
    sep_id: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``input_ids`` (int64, unmasked) and ``token_type_ids`` (uint8) of rows ``[CLS] A [SEP] B [SEP]``,
    concatenated; row ``i`` occupies ``offsets[i]:offsets[i + 1]`` (``starts = offsets[:-1]``)."""
    first_b = starts + al + 2  # where each row's B begins
    # source index of every token in flat_ids: position + a per-segment shift, built as a step
    # function (row start: shift to A; B start: shift to B) summed once; [CLS]/[SEP] are set after
    shift_a = a_start - starts - 1
    shift_b = b_start - first_b
    steps = np.zeros(total + 1, dtype=np.int64)
    steps[starts] = shift_a - np.concatenate([[0], shift_b[:-1]])
    steps[first_b] += shift_b - shift_a
    src = np.cumsum(steps[:-1])
    src += np.arange(total)
    values = flat_ids.take(src, mode="clip").astype(np.int64)
    values[starts] = cls_id
    values[first_b - 1] = sep_id
    values[offsets[1:] - 1] = sep_id
    # token_type_ids: 1 from B's first token to the row's end
    tt_steps = np.zeros(total + 1, dtype=np.int8)
    tt_steps[first_b] = 1
    tt_steps[offsets[1:]] -= 1
    token_type = np.cumsum(tt_steps[:-1], dtype=np.int8).view(np.uint8)
    return values, token_type


__all__ = ["ASSEMBLE_CHUNK_ROWS", "assemble_batches"]
