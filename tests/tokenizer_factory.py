"""Small BPE and Unigram tokenizers trained in the tests (on ``tests/fixtures/vocab/train.txt``), laid out as the
published models have theirs:

* :func:`roberta_tokenizer_dir`: byte-level BPE with RoBERTa's ``<s> <pad> </s> <unk> <mask>``, as
  ``build-vocab --model bpe`` writes it (``tokenizer.json``, ``tokenizer_config.json``,
  ``special_tokens_map.json``);
* :func:`modernbert_tokenizer_dir`: byte-level BPE with BERT's ``[CLS] [SEP] [MASK] [PAD] [UNK]`` as added
  tokens after the learned ones and BERT's template, as ModernBERT's tokenizer;
* :func:`unigram_tokenizer_dir`: ``build-vocab --model unigram``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, processors, trainers

from bertprep.pipeline.text.vocab_models import bpe_tokenizer, model_files, train_model
from conftest import FIXTURES

TRAIN = FIXTURES / "vocab" / "train.txt"


def _lines() -> list[str]:
    return [line for line in TRAIN.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def roberta_tokenizer_dir(directory: Path, vocab_size: int = 600) -> Path:
    """A RoBERTa-style byte-level BPE directory (``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, ``<mask>``=4)."""
    tokenizer = train_model(_lines(), "bpe", vocab_size, False, 2, False)
    return _write(directory, model_files(tokenizer, "bpe"))


def unigram_tokenizer_dir(directory: Path, vocab_size: int = 500) -> Path:
    """An XLM-R-style Unigram directory (the same special tokens)."""
    tokenizer = train_model(_lines(), "unigram", vocab_size, False, 2, False)
    return _write(directory, model_files(tokenizer, "unigram"))


MODERNBERT_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")


def modernbert_tokenizer_dir(directory: Path, vocab_size: int = 600) -> Path:
    """A ModernBERT-style byte-level BPE: the learned pieces first, then ``[UNK] [CLS] [SEP] [PAD] [MASK]`` as
    special added tokens (``[MASK]`` strips the space on its left), ``[CLS] $A [SEP]`` / ``... $B:1 [SEP]:1``."""
    tokenizer = bpe_tokenizer(False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(MODERNBERT_SPECIALS), show_progress=False)
    tokenizer.train_from_iterator(_lines(), trainer=trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, lstrip=t == "[MASK]") for t in MODERNBERT_SPECIALS])
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 512,
        "clean_up_tokenization_spaces": True,
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
    }
    return _write(
        directory,
        {"tokenizer.json": tokenizer.to_str(pretty=True), "tokenizer_config.json": json.dumps(config, indent=2)},
    )
