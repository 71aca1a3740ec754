"""Pre-training batches: shard rows padded per batch into ``input_ids`` / ``attention_mask`` / ... tensors.

Padding per batch (to a multiple of 8 by default), not to ``max_seq_length``: the rows of a shard are
unpadded (``pipeline/schema.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from bertprep.bert_model.model import IGNORE_INDEX


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple) if multiple > 1 else max(n, 1)


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
        entries are -100, ignored by the loss); ``next_sentence_label`` [B] (1 = NotNext).
    """
    return {k: torch.from_numpy(v) for k, v in
            collate_numpy(rows, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of).items()}


def collate_numpy(
    rows: list[dict[str, np.ndarray]], *, pad_token_id: int = 0, pad_to_multiple_of: int = 8
) -> dict[str, np.ndarray]:
    """``collate`` with int64 numpy arrays (what loader workers send: one pickled buffer per array is much
    cheaper than a shared-memory tensor per array for batches of this size)."""
    B = len(rows)
    T = _round_up(max(len(r["input_ids"]) for r in rows), pad_to_multiple_of)
    P = _round_up(max(len(r["masked_lm_positions"]) for r in rows), pad_to_multiple_of)
    input_ids = np.full((B, T), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((B, T), dtype=np.int64)
    attention_mask = np.zeros((B, T), dtype=np.int64)
    masked_lm_positions = np.zeros((B, P), dtype=np.int64)
    masked_lm_ids = np.full((B, P), IGNORE_INDEX, dtype=np.int64)
    next_sentence_label = np.empty(B, dtype=np.int64)
    for i, r in enumerate(rows):
        n, m = len(r["input_ids"]), len(r["masked_lm_positions"])
        input_ids[i, :n] = r["input_ids"]
        token_type_ids[i, :n] = r["token_type_ids"]
        attention_mask[i, :n] = 1
        masked_lm_positions[i, :m] = r["masked_lm_positions"]
        masked_lm_ids[i, :m] = r["masked_lm_ids"]
        next_sentence_label[i] = r["next_sentence_label"]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "masked_lm_positions": masked_lm_positions,
        "masked_lm_ids": masked_lm_ids,
        "next_sentence_label": next_sentence_label,
    }
