"""bertprep's own encoder of a retrieval model, and exact search.

``RetrievalEncoder`` loads any model ``bertprep extract-features`` reads (``inference.features.load_encoder``:
bertprep runs and checkpoints, Hugging Face BERT / RoBERTa / ModernBERT directories, sentence-transformers
directories) and turns texts into one L2-normalised vector each: the encoder's last hidden state pooled as a
sentence-transformers directory's ``Pooling`` module says (``pooling_mode_mean_tokens``: the attention-mask mean
over every piece, ``[CLS]`` and ``[SEP]`` included; ``pooling_mode_cls_token``: the first piece), truncated to
its ``sentence_bert_config.json`` ``max_seq_length``. A directory without them is pooled by the mean (the
pooling of Sentence-BERT, Reimers & Gurevych 2019) at ``min(256, max_position_embeddings)`` pieces.
So ``SentenceTransformer(DIR).encode(texts, normalize_embeddings=True)`` and ``RetrievalEncoder(DIR).encode(texts)``
agree (a test holds them to cosine 0.9999).

``exact_search`` scores every query against every document (cosine: a dot product of normalised vectors) in
blocks, so memory holds one block of scores at a time, and keeps each query's best ``k``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertprep.bert_model.hf.interop import max_sequence_length
from bertprep.bert_model.inference.features import load_encoder
from bertprep.bert_model.retrieval.config import DEFAULT_MAX_SEQ_LENGTH, POOLINGS
from bertprep.bert_model.runtime import resolve_device


@dataclass(frozen=True)
class PoolingSettings:
    """How a retrieval model turns pieces into one vector (from its sentence-transformers files, if any)."""

    pooling: str
    """``mean`` or ``cls``."""
    max_seq_length: int | None
    """Pieces kept per text, special tokens included; None: not recorded."""


def read_pooling_settings(model_dir: str) -> PoolingSettings:
    """The pooling and ``max_seq_length`` a sentence-transformers directory records, as sentence-transformers
    reads them: the ``Pooling`` module of ``modules.json`` (its ``pooling_mode``, or the older
    ``pooling_mode_mean_tokens`` / ``pooling_mode_cls_token`` flags), and ``sentence_bert_config.json``'s
    ``max_seq_length`` or else ``tokenizer_config.json``'s ``model_max_length``. ``mean`` and None for a directory
    without ``modules.json``.

    Raises ValueError for a pooling other than mean or [CLS] (max, weighted mean...)."""
    modules_file = os.path.join(model_dir, "modules.json")
    if not os.path.isfile(modules_file):
        return PoolingSettings("mean", None)
    pooling = "mean"
    for module in _read_json(modules_file):
        if str(module.get("type", "")).endswith("Pooling"):
            pooling = _pooling_mode(_read_json(os.path.join(model_dir, module["path"], "config.json")), model_dir)
    max_len = None
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        path = os.path.join(model_dir, name)
        if max_len is None and os.path.isfile(path):
            max_len = _read_json(path).get(key)
    return PoolingSettings(pooling, int(max_len) if max_len is not None else None)


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _pooling_mode(config: dict, model_dir: str) -> str:
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [k[len("pooling_mode_") :] for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
        mode = {"mean_tokens": "mean", "cls_token": "cls"}.get(modes[0], modes[0]) if len(modes) == 1 else modes
    if mode not in POOLINGS:
        raise ValueError(f"{model_dir}: pooling {mode} is not mean or cls; bertprep encodes with those two")
    return str(mode)


class RetrievalEncoder:
    """Texts -> L2-normalised float32 vectors [n, hidden_size] with bertprep's encoder (module docstring).

    Raises ValueError / FileNotFoundError (``load_encoder``'s) for a directory without weights or tokenizer."""

    def __init__(
        self,
        model_dir: str,
        *,
        pooling: str | None = None,
        max_seq_length: int | None = None,
        device: str = "auto",
    ) -> None:
        recorded = read_pooling_settings(model_dir)
        self.pooling = pooling or recorded.pooling
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        self.encoder, self.tokenizer, config = load_encoder(model_dir)
        limit = max_sequence_length(config)
        # sentence-transformers caps a recorded length at the model's positions; so do we
        recorded_length = min(recorded.max_seq_length, limit) if recorded.max_seq_length else None
        self.max_seq_length = max_seq_length or recorded_length or min(DEFAULT_MAX_SEQ_LENGTH, limit)
        if not 3 <= self.max_seq_length <= limit:
            raise ValueError(f"max_seq_length must be 3..{limit} (the model's positions), got {self.max_seq_length}")
        self.hidden_size = config.hidden_size
        self.device = resolve_device(device)
        self.encoder.to(self.device)

    def _batch_tensors(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """``[CLS] text [SEP]`` pieces, cut to ``max_seq_length``, padded: int64 [batch, longest]."""
        encodings = self.tokenizer.encode_batch(list(texts))
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        rows = [[cls_id, *e.ids[: self.max_seq_length - 2], sep_id] for e in encodings]
        longest = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), longest), self.tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    @torch.no_grad()
    def encode_batch(self, texts: Sequence[str]) -> np.ndarray:
        """One forward pass: float32 [len(texts), hidden_size], each row of L2 norm 1."""
        batch = {k: v.to(self.device) for k, v in self._batch_tensors(texts).items()}
        mask = batch["attention_mask"]
        hidden = self.encoder(
            batch["input_ids"], token_type_ids=torch.zeros_like(mask), attention_mask=mask
        ).last_hidden_state  # (B, T, H)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled.float(), dim=-1).cpu().numpy()

    def encode(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 64,
        out: np.ndarray | None = None,
        start: int = 0,
        on_batch: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Vectors of ``texts`` (float32 [n, hidden_size], normalised), batch by batch in order of length (less
        padding), written into ``out`` (e.g. a memory-mapped ``.npy``) from row ``start`` when given;
        ``on_batch(rows done)`` after each batch (a progress bar, a checkpoint)."""
        out = np.zeros((len(texts), self.hidden_size), dtype=np.float32) if out is None else out
        order = sorted(range(start, len(texts)), key=lambda i: len(texts[i]))
        for b in range(0, len(order), batch_size):
            chosen = order[b : b + batch_size]
            out[chosen] = self.encode_batch([texts[i] for i in chosen])
            if on_batch is not None:
                on_batch(len(chosen))
        return out


def exact_search(
    query_vectors: np.ndarray, doc_vectors: np.ndarray, k: int, *, block: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``k`` best documents by dot product (cosine for normalised vectors), exhaustively.

    Args:
        query_vectors: float32 [n_queries, H]; doc_vectors: float32 [n_docs, H] (a memory map is read a
            block at a time).
        k: documents kept per query (at most n_docs).
        block: queries and documents scored per step: memory holds a [block, block + k] score matrix.
    Returns:
        ``(indices, scores)``, int64 and float32 [n_queries, min(k, n_docs)], best first (ties: lower index).
    """
    k = min(k, len(doc_vectors))
    all_idx, all_scores = [], []
    for q0 in range(0, len(query_vectors), block):
        queries = torch.from_numpy(np.array(query_vectors[q0 : q0 + block], dtype=np.float32))  # a writable copy
        best_scores = torch.full((len(queries), 0), -float("inf"))
        best_idx = torch.zeros((len(queries), 0), dtype=torch.long)
        for d0 in range(0, len(doc_vectors), block):
            docs = torch.from_numpy(np.array(doc_vectors[d0 : d0 + block], dtype=np.float32))
            scores = torch.cat([best_scores, queries @ docs.T], dim=1)  # (Q, kept + block)
            idx = torch.cat([best_idx, torch.arange(d0, d0 + len(docs)).expand(len(queries), -1)], dim=1)
            # a stable sort keeps the lower document index first among equal scores
            order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
            best_scores, best_idx = scores.gather(1, order), idx.gather(1, order)
        all_idx.append(best_idx.numpy())
        all_scores.append(best_scores.numpy())
    return np.concatenate(all_idx), np.concatenate(all_scores)
