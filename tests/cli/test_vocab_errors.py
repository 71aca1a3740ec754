"""Vague lines of build-vocab and --vocab made precise: a Unigram ``--vocab-size`` too small is told about
Unigram's tokens (not WordPiece's ``[unusedN]`` slots and ``c``/``##c``); a binary, UTF-16 or truncated ``.gz``
input to bpe/unigram is named as the input's fault (not ``--vocab-size``'s); a ``tokenizer.json`` of random bytes
is called damaged (not told what a vocab.txt holds)."""

from __future__ import annotations

import gzip

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli


def _error(result) -> str:
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize("size", ["0", "1"])
def test_a_unigram_vocab_size_too_small_speaks_of_unigram(tmp_path, size):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world.\nthe cat sat.\n")
    args = ["build-vocab", str(corpus), "-o", str(tmp_path / "v"), "--model", "unigram", "--vocab-size", size]
    line = _error(CliRunner().invoke(cli, args))
    assert "Unigram" in line and "the minimum is" in line
    assert "[unused" not in line and "##c" not in line


def _inputs(tmp_path):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    utf16 = tmp_path / "utf16.txt"
    utf16.write_text("hello world. the cat sat on the mat.\n" * 50, encoding="utf-16")
    data = gzip.compress(b"hello world. the cat sat on the mat.\n" * 2000)
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(data[: len(data) // 2])
    return {"binary": (binary, "binary file"), "utf16": (utf16, "binary file"), "gz": (cut, "truncated or corrupt")}


@pytest.mark.parametrize("model", ["bpe", "unigram"])
@pytest.mark.parametrize("kind", ["binary", "utf16", "gz"])
def test_bad_input_to_bpe_and_unigram_is_the_inputs_fault(tmp_path, model, kind):
    path, what = _inputs(tmp_path)[kind]
    args = ["build-vocab", str(path), "-o", str(tmp_path / "v"), "--model", model, "--vocab-size", "300", "-q"]
    line = _error(CliRunner().invoke(cli, args))
    assert str(path) in line and what in line
    assert "--vocab-size" not in line


def test_a_tokenizer_json_of_random_bytes_is_called_damaged(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_bytes(bytes(range(128, 256)) * 16)
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world.\n")
    for vocab in (model, model / "tokenizer.json"):
        args = ["make-shards", "-i", str(corpus), "--vocab", str(vocab), "-o", str(tmp_path / "s"), "-q"]
        line = _error(CliRunner().invoke(cli, args))
        assert "not a tokenizer.json" in line and "damaged" in line and "vocab.txt" not in line


def test_an_output_dir_whose_parent_is_missing_is_created_as_help_says(tmp_path, monkeypatch):
    """``--help``: "The directory to write, created if needed"; ``-o voc/x`` with ``voc/`` missing was refused,
    its parent "not writable (No such file or directory)"."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world.\nthe cat sat on the mat.\n\nanother document here.\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["build-vocab", str(corpus), "-o", "voc/x", "--vocab-size", "200"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "voc" / "x" / "vocab.txt").is_file()
    assert sorted(p.name for p in (tmp_path / "voc").iterdir()) == ["x"]  # no staging or test file left
    help_text = " ".join(CliRunner().invoke(cli, ["build-vocab", "--help"]).output.split())
    assert "The directory to write, created if needed." in help_text
