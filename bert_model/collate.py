"""Batches padded per batch: pre-training shard rows (:func:`collate`) and fine-tuning task features
(:func:`collate_features`), both through one padding rule (:func:`pad_sequences`); and the original's pair
truncation (:func:`truncate_seq_pair`), which fine-tuning (GLUE) and feature extraction both apply before.

Padding per batch (to a multiple of 8 by default), not to ``max_seq_length``: the rows of a shard are
unpadded (``core/schema.py``), and so are the features of a task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bertprep.bert_model.models.bert import IGNORE_INDEX
from bertprep.bert_model.models.packing import (
    cu_seqlens_from_sequence_ids,
    pack_documents,
    sequence_starts_from_sequence_ids,
)


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_length: int) -> None:
    """Shorten the longer list by one from its end until the total fits, in place (google-research/bert
    ``run_classifier.py`` and ``extract_features.py`` ``_truncate_seq_pair``)."""
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple) if multiple > 1 else max(n, 1)


def pad_sequences(
    input_ids: Sequence[Sequence[int] | np.ndarray],
    token_type_ids: Sequence[Sequence[int] | np.ndarray],
    *,
    pad_token_id: int = 0,
    pad_to_multiple_of: int = 8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-pad N token sequences (and their segment ids) to one length.

    Returns ``input_ids`` (padding ``pad_token_id``), ``token_type_ids`` (padding 0) and ``attention_mask``
    (1 = real token, 0 = padding), each int64 [N, T], where T is the longest sequence rounded up to a multiple
    of ``pad_to_multiple_of`` (at least one multiple; 8 suits tensor cores and keeps the shapes
    ``torch.compile`` sees few).
    """
    T = _round_up(max(len(seq) for seq in input_ids), pad_to_multiple_of)
    out_ids = np.full((len(input_ids), T), pad_token_id, dtype=np.int64)
    out_types = np.zeros((len(input_ids), T), dtype=np.int64)
    attention_mask = np.zeros((len(input_ids), T), dtype=np.int64)
    for i, (seq, typ) in enumerate(zip(input_ids, token_type_ids, strict=True)):
        n = len(seq)
        out_ids[i, :n] = seq
        out_types[i, :n] = typ
        attention_mask[i, :n] = 1
    return out_ids, out_types, attention_mask


def collate(
    rows: list[dict[str, np.ndarray]], *, pad_token_id: int = 0, pad_to_multiple_of: int = 8
) -> dict[str, torch.Tensor]:
    """Pad a list of shard rows into a batch of int64 tensors (``collate_numpy`` as ``torch.from_numpy``).

    Args:
        rows: dicts with the shard columns (``input_ids``, ``token_type_ids``, ``masked_lm_positions``,
            ``masked_lm_ids`` as 1-D integer arrays, ``next_sentence_label`` an int).
        pad_token_id: id written after each sequence (``[PAD]``).
        pad_to_multiple_of: both the sequence length T and the number of prediction slots P are rounded up to
            a multiple of this (8 suits tensor cores and keeps the shapes ``torch.compile`` sees few).
    Returns:
        ``input_ids``, ``token_type_ids``, ``attention_mask`` (1 = real token): [B, T];
        ``masked_lm_positions`` [B, P] (padding entries point at 0); ``masked_lm_ids`` [B, P] (padding
        entries are -100, ignored by the loss); ``cu_seqlens`` int32 [S + 1] and ``sequence_starts`` [B] (see
        ``layout_indices``); ``next_sentence_label`` [B] (1 = NotNext; objective sop: 1 =
        swapped), only when the rows have it (not under objective ``none``); ``word_ids`` [B, T] (the word index
        of each piece, -1 at [CLS]/[SEP] and at padding), only when the rows have it (shards made with
        ``--word-ids`` or ``--word-segmenter``; ``ShardDataset`` uses it for dynamic masking and leaves it out
        of the model's batch).
    """
    return {
        k: torch.from_numpy(v)
        for k, v in collate_numpy(rows, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of).items()
    }


def collate_numpy(
    rows: list[dict[str, np.ndarray]], *, pad_token_id: int = 0, pad_to_multiple_of: int = 8
) -> dict[str, np.ndarray]:
    """``collate`` with int64 numpy arrays (what loader workers send: one pickled buffer per array is much
    cheaper than a shared-memory tensor per array for batches of this size)."""
    B = len(rows)
    input_ids, token_type_ids, attention_mask = pad_sequences(
        [r["input_ids"] for r in rows],
        [r["token_type_ids"] for r in rows],
        pad_token_id=pad_token_id,
        pad_to_multiple_of=pad_to_multiple_of,
    )
    P = _round_up(max(len(r["masked_lm_positions"]) for r in rows), pad_to_multiple_of)
    masked_lm_positions = np.zeros((B, P), dtype=np.int64)
    masked_lm_ids = np.full((B, P), IGNORE_INDEX, dtype=np.int64)
    has_label = "next_sentence_label" in rows[0]  # not under objective none
    next_sentence_label = np.empty(B, dtype=np.int64)
    has_word_ids = "word_ids" in rows[0]  # shards made with --word-ids / --word-segmenter
    word_ids = np.full(input_ids.shape, -1, dtype=np.int64) if has_word_ids else None
    for i, r in enumerate(rows):
        m = len(r["masked_lm_positions"])
        masked_lm_positions[i, :m] = r["masked_lm_positions"]
        masked_lm_ids[i, :m] = r["masked_lm_ids"]
        if has_label:
            next_sentence_label[i] = r["next_sentence_label"]
        if word_ids is not None:
            word_ids[i, : len(r["word_ids"])] = r["word_ids"]
    return (
        {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": attention_mask,
            "masked_lm_positions": masked_lm_positions,
            "masked_lm_ids": masked_lm_ids,
            **layout_indices(attention_mask - 1),  # (sequence_ids: 0 on real tokens, -1 on padding)
        }
        | ({"next_sentence_label": next_sentence_label} if has_label else {})
        | ({"word_ids": word_ids} if word_ids is not None else {})
    )


def collate_features(
    features: Sequence[dict[str, Any]], pad_token_id: int = 0, pad_to_multiple_of: int = 8
) -> dict[str, torch.Tensor]:
    """Pad fine-tuning task features into a batch.

    Returns ``input_ids``, ``token_type_ids``, ``attention_mask`` as int64 [B, T] (T = longest feature
    rounded up to ``pad_to_multiple_of``), or [B, N, T] when each feature holds N sequences (multiple
    choice: ``input_ids`` is a list of N lists), and whichever targets the features carry: ``labels`` as
    int64 [B] (class or candidate), float32 [B] (regression) or int64 [B, T] (per token, padded with -100);
    ``start_positions`` and ``end_positions`` as int64 [B].
    """
    B = len(features)
    choices = bool(features[0]["input_ids"]) and isinstance(features[0]["input_ids"][0], list)
    sequences = [seq for f in features for seq in (f["input_ids"] if choices else [f["input_ids"]])]
    types = [seq for f in features for seq in (f["token_type_ids"] if choices else [f["token_type_ids"]])]
    input_ids, token_type_ids, attention_mask = pad_sequences(
        sequences, types, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of
    )
    T = input_ids.shape[1]
    shape = (B, len(sequences) // B, T) if choices else (B, T)
    batch = {
        "input_ids": torch.from_numpy(input_ids.reshape(shape)),
        "token_type_ids": torch.from_numpy(token_type_ids.reshape(shape)),
        "attention_mask": torch.from_numpy(attention_mask.reshape(shape)),
    }
    first = features[0]
    if "labels" in first:
        if isinstance(first["labels"], list):
            labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
            for i, f in enumerate(features):
                labels[i, : len(f["labels"])] = f["labels"]
            batch["labels"] = torch.from_numpy(labels)
        elif isinstance(first["labels"], float):
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.float32)
        else:
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.int64)
    for key in ("start_positions", "end_positions"):
        if key in first:
            batch[key] = torch.tensor([f[key] for f in features], dtype=torch.int64)
    return batch


def collate_packed_numpy(
    rows: list[dict[str, np.ndarray]],
    *,
    max_seq_length: int,
    pad_token_id: int = 0,
    layout: list[list[int]] | None = None,
    pad_to_multiple_of: int = 8,
) -> dict[str, np.ndarray]:
    """Pack shard rows into rows of ``max_seq_length`` tokens (``packing.pack_documents``: next-fit in order, or
    the rows ``layout`` gives, as ``packing.TokenBudgetPacker`` fills a training step).

    Each row (instance) is one sequence: its positions restart at 0 and it attends only to itself. The batch
    holds the same instances, masked alike, as ``collate_numpy`` of the same rows, in R rows instead of
    len(rows) padded ones (R <= len(rows) without ``layout``; ``len(layout)`` with it, empty rows included), and
    the same keys, so that one forward path serves both (``outputs.gather_positions`` reads the slots of either).
    It also carries what the attention kernels and the pooler would otherwise find on the GPU (a host sync
    each): the varlen segments and each instance's first token.

    Args:
        rows: shard rows as ``collate_numpy`` takes them (each at most ``max_seq_length`` tokens).
        max_seq_length: length T of every packed row.
        pad_token_id: id written at padding positions.
        layout: row ``b`` holds the instances ``rows[i]`` for ``i`` in ``layout[b]``, in that order (every
            index once); None = next-fit in the order of ``rows``.
        pad_to_multiple_of: P, the prediction slots per row, is rounded up to a multiple of this.
    Returns:
        int64 arrays: ``input_ids``, ``token_type_ids``, ``attention_mask`` (1 = real token), ``sequence_ids``
        (instance number within its row, -1 on padding), ``position_ids`` (restarting at 0 per instance): each
        (R, T); ``masked_lm_positions`` (1, M), the masked positions of every instance as indices into the R
        rows seen as one stream (row * T + column), row-major, and ``masked_lm_ids`` (1, M), their original ids
        (-100 in empty slots, whose position is 0);
        ``sequence_starts`` (D,), flat index (row * T + column) of each instance's first token, row-major;
        ``cu_seqlens`` int32 (S + 1,), the segments of the flattened rows
        (``packing.cu_seqlens_from_sequence_ids``); and ``next_sentence_label`` (D,), the instances' labels in
        row-major order (the order of ``rows`` without ``layout``), when the rows have one.
    Raises:
        ValueError: see ``packing.pack_documents``.
    """
    labels = [_token_labels(r) for r in rows]
    packed = pack_documents(
        [r["input_ids"] for r in rows],
        max_seq_length,
        pad_token_id=pad_token_id,
        aligned={"token_type_ids": ([r["token_type_ids"] for r in rows], 0), "labels": (labels, IGNORE_INDEX)},
        layout=layout,
    )
    sequence_ids = packed["sequence_ids"]
    out = {
        "input_ids": packed["input_ids"],
        "token_type_ids": packed["token_type_ids"],
        "attention_mask": (sequence_ids >= 0).astype(np.int64),
        "sequence_ids": sequence_ids,
        "position_ids": packed["position_ids"],
        **_stream_slots(packed["labels"], pad_to_multiple_of),
        **layout_indices(sequence_ids),
    }
    if "next_sentence_label" in rows[0]:
        out["next_sentence_label"] = _packed_next_sentence_labels(rows, layout)
    return out


def _token_labels(row: dict[str, np.ndarray]) -> np.ndarray:
    """Per-token targets of a shard row: int64 (len(input_ids),), the original id at each of its
    ``masked_lm_positions``, -100 elsewhere."""
    row_labels = np.full(len(row["input_ids"]), IGNORE_INDEX, dtype=np.int64)
    row_labels[np.asarray(row["masked_lm_positions"], dtype=np.int64)] = row["masked_lm_ids"]
    return row_labels


def _packed_next_sentence_labels(rows: list[dict[str, np.ndarray]], layout: list[list[int]] | None) -> np.ndarray:
    """The rows' ``next_sentence_label`` as int64 (D,) in the packed batch's row-major order (the order of
    ``rows`` without ``layout``)."""
    order = range(len(rows)) if layout is None else [i for row in layout for i in row]  # row-major
    return np.array([rows[i]["next_sentence_label"] for i in order], dtype=np.int64)


def _stream_slots(labels: np.ndarray, pad_to_multiple_of: int) -> dict[str, np.ndarray]:
    """``masked_lm_positions`` and ``masked_lm_ids`` (1, M) of per-token ``labels`` (R, T) (-100 = no target):
    the targets' indices into the R rows seen as one stream (row * T + column), M rounded up to a multiple of
    ``pad_to_multiple_of`` with empty slots (position 0, id -100). One stream rather than (R, P) slots per row:
    rows of several instances hold unequal numbers of targets, and the MLM head would score every row's
    padding up to the fullest."""
    flat = labels.reshape(-1)
    targets = np.flatnonzero(flat != IGNORE_INDEX)
    M = _round_up(len(targets), pad_to_multiple_of)
    positions = np.zeros((1, M), dtype=np.int64)
    ids = np.full((1, M), IGNORE_INDEX, dtype=np.int64)
    positions[0, : len(targets)] = targets
    ids[0, : len(targets)] = flat[targets]
    return {"masked_lm_positions": positions, "masked_lm_ids": ids}


def layout_indices(sequence_ids: np.ndarray) -> dict[str, np.ndarray]:
    """What a (B, T) batch's layout gives the model without a GPU search: ``cu_seqlens`` (int32 (S + 1,), the
    varlen segments) and ``sequence_starts`` (int64 (D,), each sequence's first token, flat), from
    ``sequence_ids`` (B, T) (-1 on padding; a padded batch's are 0 on its real tokens)."""
    ids = torch.from_numpy(np.ascontiguousarray(sequence_ids))
    return {
        "cu_seqlens": cu_seqlens_from_sequence_ids(ids).numpy(),
        "sequence_starts": sequence_starts_from_sequence_ids(ids).numpy(),
    }
