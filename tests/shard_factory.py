"""Tiny synthetic shard directories in the exact on-disk format of ``make-shards`` (core/schema.py).

Used by the trainer tests and benchmarks; nothing here imports torch or Beam. The text is learnable on
purpose: a segment is an arithmetic progression of word ids (``start, start+step, ...`` modulo the word
range), sentence B continues A for IsNext and starts elsewhere for NotNext, so a tiny model can learn both
tasks in a few hundred steps. Masking follows the reference rule (design/reference-algorithm.md): per
instance ``min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))`` positions among the
non-[CLS]/[SEP] tokens, 80% [MASK], 10% a random vocab entry, 10% kept.

    manifest = write_shard_dir(tmp_path / "shards", num_shards=4, rows_per_shard=50)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bertprep.core import schema

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, as a bertprep-trained vocab


def make_vocab(vocab_size: int) -> list[str]:
    """A vocab of ``vocab_size`` tokens: the five specials (ids 0-4), then ``w5``, ``w6``..."""
    if vocab_size < len(SPECIAL_TOKENS) + 8:
        raise ValueError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 8}, got {vocab_size}")
    return SPECIAL_TOKENS + [f"w{i}" for i in range(len(SPECIAL_TOKENS), vocab_size)]


def make_rows(
    num_rows: int,
    *,
    vocab_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    masked_lm_prob: float = 0.15,
    masking: str = "static",
    rng: np.random.Generator,
    short_seq_prob: float | None = None,
) -> dict[str, list]:
    """Column lists of ``num_rows`` synthetic instances (see the module docstring).

    Lengths (with [CLS]/[SEP]): uniform in ``max_seq_length // 2 .. max_seq_length`` by default; with
    ``short_seq_prob``, make-shards' distribution: ``max_seq_length`` (a full instance), or with that
    probability uniform in ``5 .. max_seq_length``."""
    cls_id, sep_id, mask_id, first_word = 2, 3, 4, len(SPECIAL_TOKENS)
    num_words = vocab_size - first_word
    cols: dict[str, list] = {c: [] for c in schema.COLUMNS}
    for _ in range(num_rows):
        if short_seq_prob is None:
            n = int(rng.integers(max(5, max_seq_length // 2), max_seq_length + 1))  # total length with specials
        else:
            n = int(rng.integers(5, max_seq_length + 1)) if rng.random() < short_seq_prob else max_seq_length
        len_a = int(rng.integers(1, n - 3))
        len_b = n - 3 - len_a
        step = int(rng.integers(1, 4))
        start = int(rng.integers(0, num_words))
        is_random_next = bool(rng.random() < 0.5)
        a = [(start + k * step) % num_words for k in range(len_a)]
        b_start = int(rng.integers(0, num_words)) if is_random_next else start + len_a * step
        b = [(b_start + k * step) % num_words for k in range(len_b)]
        tokens = [cls_id] + [first_word + t for t in a] + [sep_id] + [first_word + t for t in b] + [sep_id]
        token_type_ids = [0] * (len_a + 2) + [1] * (len_b + 1)
        positions: list[int] = []
        labels: list[int] = []
        if masking == "static":
            cand = [i for i, t in enumerate(tokens) if t not in (cls_id, sep_id)]
            num_to_predict = min(max_predictions_per_seq, max(1, int(round(n * masked_lm_prob))))
            positions = sorted(int(i) for i in rng.permutation(cand)[:num_to_predict])
            labels = [tokens[i] for i in positions]
            for i in positions:
                r = rng.random()
                if r < 0.8:
                    tokens[i] = mask_id
                elif r < 0.9:
                    tokens[i] = int(rng.integers(0, vocab_size))
        elif masking != "dynamic":
            raise ValueError(f"masking must be 'static' or 'dynamic', got {masking!r}")
        cols["input_ids"].append(tokens)
        cols["token_type_ids"].append(token_type_ids)
        cols["masked_lm_positions"].append(positions)
        cols["masked_lm_ids"].append(labels)
        cols["next_sentence_label"].append(int(is_random_next))
    return cols


def write_shard_dir(
    path: str | os.PathLike,
    *,
    num_shards: int = 2,
    rows_per_shard: int | list[int] = 20,
    vocab_size: int = 64,
    max_seq_length: int = 32,
    max_predictions_per_seq: int = 5,
    masked_lm_prob: float = 0.15,
    masking: str = "static",
    seed: int = 0,
    vocab: list[str] | None = None,
    record_batch_rows: int | None = None,
    short_seq_prob: float | None = None,
) -> dict[str, Any]:
    """Write a finished shard directory (shards, ``vocab.txt``, then ``manifest.json``) and return the manifest.

    ``rows_per_shard`` is one count for every shard or a list of counts; ``record_batch_rows`` splits each
    Arrow file into record batches of that many rows (one batch when None); ``short_seq_prob``: see
    ``make_rows``.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = vocab if vocab is not None else make_vocab(vocab_size)
    vocab_size = len(vocab)
    counts = rows_per_shard if isinstance(rows_per_shard, list) else [rows_per_shard] * num_shards
    rng = np.random.default_rng(seed)
    arrow_schema = schema.shard_schema(vocab_size)
    shards, total_tokens = [], 0
    for index, count in enumerate(counts):
        cols = make_rows(
            count,
            vocab_size=vocab_size,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            masked_lm_prob=masked_lm_prob,
            masking=masking,
            rng=rng,
            short_seq_prob=short_seq_prob,
        )
        table = pa.Table.from_pydict(cols, schema=arrow_schema)
        name = schema.shard_name(index, len(counts))
        with pa.OSFile(str(path / name), "wb") as sink, pa.ipc.new_file(sink, arrow_schema) as writer:
            writer.write_table(table, max_chunksize=record_batch_rows)
        tokens = sum(len(x) for x in cols["input_ids"])
        total_tokens += tokens
        shards.append({"file": name, "rows": count, "tokens": tokens, "sha256": schema.sha256_file(str(path / name))})
    (path / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    manifest = {
        "format_version": schema.FORMAT_VERSION,
        "created_by": "bertprep 0.1.0 (tests/shard_factory.py)",
        "config": {
            "max_seq_length": max_seq_length,
            "max_predictions_per_seq": max_predictions_per_seq,
            "masked_lm_prob": masked_lm_prob,
            "short_seq_prob": 0.1,
            "dupe_factor": 1,
            "random_seed": seed,
            "do_lower_case": True,
            "do_whole_word_mask": False,
            "masking": masking,
        },
        "vocab": {
            "size": vocab_size,
            "sha256": schema.vocab_sha256(vocab),
            "do_lower_case": True,
            "special_token_ids": {t: vocab.index(t) for t in SPECIAL_TOKENS if t in vocab},
            "file": "vocab.txt",
        },
        "schema": {"id_type": str(schema.id_type_for_vocab(vocab_size)), "columns": list(schema.COLUMNS)},
        "shards": shards,
        "statistics": {"instances": sum(counts), "tokens": total_tokens},
    }
    (path / schema.MANIFEST_NAME).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest
