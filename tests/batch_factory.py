"""Tiny pre-training models and loader batches for the model tests (no shards needed): synthetic shard rows
as ``ShardDataset`` reads them, collated as the trainer does, padded or packed."""

from __future__ import annotations

import numpy as np
import torch

from bertprep.bert_model.collate import collate_numpy, collate_packed_numpy
from bertprep.bert_model.pretrain.architectures import model_config_from_preset

VOCAB = 64
SPECIALS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


def tiny_config(architecture: str, **overrides):
    """A 2-layer BERT or 4-layer ModernBERT (layers 0 and 3 global) of width 32 over a 64-entry vocab."""
    values = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 48}
    values["num_hidden_layers"] = 4 if architecture == "modernbert" else 2
    values.update(overrides)
    return model_config_from_preset(
        architecture, "tiny", vocab_size=VOCAB, special_token_ids=SPECIALS, overrides=values
    )


def shard_rows(n: int = 6, seed: int = 0, lengths: tuple[int, int] = (10, 30)) -> list[dict]:
    """Shard rows: [CLS] A [SEP] B [SEP] of ``lengths`` tokens, ~15% replaced by [MASK], NSP labels 0/1."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        length = int(rng.integers(*lengths))
        ids = rng.integers(5, VOCAB, size=length)
        ids[0], ids[length // 2], ids[-1] = 2, 3, 3
        positions = np.sort(rng.choice(np.arange(1, length - 1), size=max(1, length // 7), replace=False))
        original = ids[positions].copy()
        ids[positions] = 4
        rows.append(
            {
                "input_ids": ids,
                "token_type_ids": (np.arange(length) > length // 2).astype(np.int64),
                "masked_lm_positions": positions,
                "masked_lm_ids": original,
                "next_sentence_label": i % 2,
            }
        )
    return rows


def loader_batch(packing: bool, rows: list[dict] | None = None, max_seq_length: int = 64) -> dict[str, torch.Tensor]:
    """The batch the trainer's loader makes of ``rows``: ``collate_numpy`` (padded) or ``collate_packed_numpy``."""
    rows = shard_rows() if rows is None else rows
    arrays = collate_packed_numpy(rows, max_seq_length=max_seq_length) if packing else collate_numpy(rows)
    return {k: torch.from_numpy(v) for k, v in arrays.items()}
