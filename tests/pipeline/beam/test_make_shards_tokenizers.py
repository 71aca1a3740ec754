"""make-shards with a BPE or Unigram tokenizer (``--vocab DIR`` of a RoBERTa-style, ModernBERT-style or Unigram
tokenizer trained in the test): the special tokens by role, the tokenizer files beside the shards, the text
coming back when the pieces are decoded, whole-word masking by the pieces' word marks, and the options that do
not apply refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core.pretrained_tokenizer import load_pretrained_tokenizer
from bertprep.pipeline import readers
from bertprep.pipeline.shards.inspection import iter_rows, load_vocab_tokens
from conftest import FIXTURES
from tokenizer_factory import modernbert_tokenizer_dir, roberta_tokenizer_dir, unigram_tokenizer_dir

INPUTS = [FIXTURES / "pipeline" / "a.txt", FIXTURES / "pipeline" / "b.txt"]
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
MAKERS = {"roberta": roberta_tokenizer_dir, "modernbert": modernbert_tokenizer_dir, "unigram": unigram_tokenizer_dir}


def _make(vocab, out, *extra):
    args = ["make-shards", "-i", ",".join(map(str, INPUTS)), "--vocab", vocab, "-o", out, "--input-format", "bert"]
    args += ["--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "2", "-q", *extra]
    return CliRunner().invoke(cli, [str(a) for a in args + IN_PROCESS], catch_exceptions=False)


def _unmasked(row: dict) -> list[int]:
    ids = list(row["input_ids"])
    for position, original in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
        ids[position] = original
    return ids


def _documents() -> list[str]:
    return [" ".join(d.sentences) for path in INPUTS for d in readers.read_documents(str(path), "bert")]


@pytest.mark.parametrize(
    "name, extra",
    [("roberta", ["--objective", "none", "--masking-scheme", "whole-word"]), ("modernbert", []), ("unigram", [])],
)
def test_shards_of_a_pretrained_tokenizer(tmp_path, name, extra):
    directory = MAKERS[name](tmp_path / name)
    tokenizer = load_pretrained_tokenizer(str(directory))
    result = _make(directory, tmp_path / "shards", *extra)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    vocab = manifest["vocab"]
    assert vocab["model"] == tokenizer.model_type and vocab["special_tokens"] == tokenizer.special_tokens
    assert vocab["special_token_ids"] == tokenizer.special_token_ids() and vocab["do_lower_case"] is None
    for file in vocab["files"]:  # the tokenizer travels with the shards, byte for byte
        assert (tmp_path / "shards" / file).read_bytes() == (directory / file).read_bytes()
    assert load_vocab_tokens(str(tmp_path / "shards")) == tokenizer.tokens
    ids = tokenizer.special_token_ids()
    documents = _documents()
    rows = list(iter_rows(str(tmp_path / "shards")))
    assert rows
    for row in rows:
        original = _unmasked(row)
        assert original[0] == ids["[CLS]"] and original[-1] == ids["[SEP]"]
        segments, current = [], []
        for token in original[1:]:
            if token == ids["[SEP]"]:
                segments.append(current)
                current = []
            else:
                current.append(token)
        for segment in segments:  # each segment decodes to text of one document (the pieces lose nothing)
            text = tokenizer.full.decode(segment).strip()
            assert any(text in doc for doc in documents), text


def test_whole_word_masking_masks_words_by_their_marks(tmp_path):
    directory = roberta_tokenizer_dir(tmp_path / "roberta")
    tokenizer = load_pretrained_tokenizer(str(directory))
    result = _make(directory, tmp_path / "shards", "--objective", "none", "--masking-scheme", "whole-word")
    assert result.exit_code == 0, result.output
    continuation = np.array(tokenizer.is_continuation())
    special = set(tokenizer.special_token_ids().values())
    words_seen = 0
    for row in iter_rows(str(tmp_path / "shards")):
        original = _unmasked(row)
        masked = set(row["masked_lm_positions"])
        word: list[int] = []
        for position, token in enumerate(original + [-1]):
            if token == -1 or token in special or not continuation[token] or not word:
                if word:  # a word is masked whole or not at all
                    assert len(masked & set(word)) in (0, len(word)), [tokenizer.tokens[original[p]] for p in word]
                    words_seen += len(word) > 1
                word = [] if token == -1 or token in special else [position]
            else:
                word.append(position)
    assert words_seen > 100  # (many words of several pieces were checked)


def test_options_that_do_not_apply_are_refused_in_one_line(tmp_path):
    directory = roberta_tokenizer_dir(tmp_path / "roberta")
    lower = _make(directory, tmp_path / "s1", "--do-lower-case")
    assert lower.exit_code == 2 and "--do-lower-case applies to BERT WordPiece vocabs only: drop it" in lower.output
    segmenter = _make(directory, tmp_path / "s2", "--word-segmenter", "jieba")
    assert segmenter.exit_code == 2 and "drop --word-segmenter" in segmenter.output
    assert "Traceback" not in lower.output + segmenter.output
    assert not (tmp_path / "s1").exists() and not (tmp_path / "s2").exists()
