"""Masking schemes and word boundaries end to end: ``make-shards --masking-scheme ... --word-segmenter ...``,
the ``word_ids`` column, ``inspect``, determinism, dynamic masking in the trainer's loader, and the errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core.storage import read_manifest
from bertprep.pipeline.shards.inspection import iter_rows
from conftest import FIXTURES, need_module
from pipeline_factory import make_shards

FIXTURES = FIXTURES / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")
BEAM_IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _make(out: Path, *extra: str):
    result = make_shards(out, *extra)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def default_manifest(tmp_path_factory) -> dict:
    """The manifest of a run without a masking scheme (the fixture corpus, make_shards' settings)."""
    default = tmp_path_factory.mktemp("default") / "shards"
    _make(default)
    return read_manifest(str(default))


def _digest(shard_dir: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(shard_dir.glob("shard-*.arrow")))).hexdigest()


def _check_whole_words(rows: list[dict]) -> int:
    """Every word (by ``word_ids``) is masked whole or not at all; returns how many multi-piece words were masked."""
    multi = 0
    for row in rows:
        word_ids = np.array(row["word_ids"])
        assert len(word_ids) == len(row["input_ids"])
        positions = list(row["masked_lm_positions"])
        masked = set(positions)
        for w in set(word_ids[positions].tolist()):
            assert w >= 0  # never [CLS] / [SEP]
            pieces = set(np.flatnonzero(word_ids == w).tolist())
            assert pieces <= masked, (row, w)
            multi += len(pieces) > 1
    return multi


@pytest.mark.parametrize("scheme", ["ngram", pytest.param("span", marks=pytest.mark.slow)])  # span: make test
def test_schemes_with_default_words_are_deterministic_and_recorded(tmp_path, scheme, default_manifest):
    """Same input and seed, same bytes; the manifest records the scheme; ``word_ids`` groups a piece with
    its ``##`` pieces, -1 at [CLS]/[SEP]; every masked word is masked whole."""
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        _make(out, "--masking-scheme", scheme, "--word-ids")
    assert _digest(first) == _digest(second)
    manifest = read_manifest(str(first))
    assert manifest["config"]["masking_scheme"] == scheme and manifest["schema"]["columns"][-1] == "word_ids"
    tokens = (FIXTURES / "vocab.txt").read_text(encoding="utf-8").split("\n")
    rows = list(iter_rows(str(first), manifest))
    for row in rows[:50]:
        ids = list(row["input_ids"])
        for p, label in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
            ids[p] = label
        word_ids = row["word_ids"]
        for k, (token_id, w) in enumerate(zip(ids, word_ids, strict=True)):
            if tokens[token_id] in ("[CLS]", "[SEP]"):
                assert w == -1
            elif k > 0 and word_ids[k - 1] >= 0:
                assert (w == word_ids[k - 1]) == tokens[token_id].startswith("##")
    _check_whole_words(rows)
    statistics = manifest["statistics"]
    assert 0.12 < statistics["masked"]["per_token"] < 0.16  # the 15% budget (a word that does not fit is skipped)
    # the default run (no scheme) has neither the column nor the new config keys
    plain = default_manifest
    assert "word_ids" not in plain["schema"]["columns"]
    assert not {"masking_scheme", "word_segmenter", "word_ids", "max_span_length"} & set(plain["config"])


PAIRS_SEGMENTER = """
import re

def words(text):
    # every two whitespace-separated tokens make one word (a fake segmenter that merges BERT's words)
    return re.findall(r"\\S+(?:\\s+\\S+)?", text)
"""


@pytest.mark.parametrize("objective", ["nsp", pytest.param("none", marks=pytest.mark.slow)])  # none: make test
def test_plugin_segmenter_words_reach_word_ids_and_masks(tmp_path, monkeypatch, objective):
    """A plug-in segmenter (a small fake one, as a user writes one) decides the words: ``word_ids`` follows
    its words (each a union of default words), and whole-word masking takes them whole; for both objectives."""
    (tmp_path / "pairs_words.py").write_text(PAIRS_SEGMENTER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "shards"
    _make(out, "--masking-scheme", "whole-word", "--word-segmenter", "pairs_words:words", "--objective", objective)
    manifest = read_manifest(str(out))
    tokens = (FIXTURES / "vocab.txt").read_text(encoding="utf-8").split("\n")
    rows = list(iter_rows(str(out), manifest))
    merged = 0
    for row in rows:
        ids = list(row["input_ids"])
        for p, label in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
            ids[p] = label
        word_ids = row["word_ids"]
        for k in range(1, len(ids)):
            if word_ids[k - 1] >= 0 and word_ids[k] != word_ids[k - 1]:  # a segmenter word starts: a default one too
                # (a row or segment may start inside a word: truncation)
                assert not tokens[ids[k]].startswith("##")
            merged += word_ids[k] >= 0 and word_ids[k] == word_ids[k - 1] and not tokens[ids[k]].startswith("##")
    assert merged > len(rows)  # default words joined into the segmenter's
    assert _check_whole_words(rows) > len(rows) / 2
    again = tmp_path / "again"  # same input, segmenter and seed: same bytes
    _make(again, "--masking-scheme", "whole-word", "--word-segmenter", "pairs_words:words", "--objective", objective)
    assert _digest(again) == _digest(out)


def test_whole_word_masking_on_chinese_with_a_plugin_segmenter(shared_data, tmp_path):
    """jieba through the plug-in point (``module:callable``) on the US Constitution in Chinese: every masked
    word is a whole jieba word, and ``inspect`` shows the multi-character words masked together."""
    need_module("jieba")
    vocab_dir = tmp_path / "vocab"
    zh = shared_data / "cjk" / "zh"
    result = _run(
        "build-vocab",
        "-i",
        str(zh),
        "--input-format",
        "text",
        "--vocab-size",
        "3000",
        "--no-strip-accents",
        "-o",
        str(vocab_dir),
    )
    assert result.exit_code == 0, result.output
    out = tmp_path / "shards"
    result = _run(
        "make-shards",
        "-i",
        str(zh / "us-constitution-zh-hans.txt"),
        "--input-format",
        "text",
        "--vocab",
        str(vocab_dir / "vocab.txt"),
        "--no-strip-accents",
        "-o",
        str(out),
        "--masking-scheme",
        "whole-word",
        "--word-segmenter",
        "jieba:lcut",
        "--max-seq-length",
        "64",
        "--max-predictions-per-seq",
        "10",
        "--dupe-factor",
        "2",
        "--num-shards",
        "1",
        "-q",
        *BEAM_IN_PROCESS,
    )
    assert result.exit_code == 0, result.output
    manifest = read_manifest(str(out))
    assert manifest["config"]["word_segmenter"] == "jieba:lcut" and manifest["config"]["word_ids"] is True
    rows = list(iter_rows(str(out), manifest))
    assert _check_whole_words(rows) > 50  # many two- and three-character words masked whole
    # a word of several characters is several pieces (each Chinese character is a pre-token)
    sizes = np.bincount(
        np.unique(np.concatenate([np.array(r["word_ids"]) + 1000 * k for k, r in enumerate(rows)]), return_counts=True)[
            1
        ]
    )
    assert sizes[2:].sum() > sizes[1] * 0.3
    inspected = _run("inspect", str(out), "-n", "5", "--no-stats", "--verify")
    assert inspected.exit_code == 0, inspected.output
    # as inspect prints it: the pieces of a masked multi-character word, each {shown→label}, side by side
    tokens = (vocab_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    shown = []
    for row in rows[:5]:
        word_ids = np.array(row["word_ids"])
        labels = dict(zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True))
        for w in set(word_ids[list(labels)].tolist()):
            pieces = np.flatnonzero(word_ids == w).tolist()
            if len(pieces) > 1:
                shown.append(" ".join(f"{{{tokens[row['input_ids'][p]]}→{tokens[labels[p]]}}}" for p in pieces))
    assert shown and all(text in inspected.output for text in shown), (shown, inspected.output)
    assert "verified" in inspected.output


def test_dynamic_masking_takes_the_segmenters_words(shared_data, tmp_path):
    """``--masking dynamic`` with a segmenter: the trainer's loader masks whole words of the ``word_ids`` column."""
    need_module("jieba")
    need_module("torch")
    from bertprep.bert_model.pretrain.data import ShardDataset

    out = tmp_path / "shards"
    result = _run(
        "make-shards",
        "-i",
        str(shared_data / "cjk" / "zh" / "luxun-kongyiji.txt"),
        "--input-format",
        "text",
        "--vocab",
        str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"),
        "-o",
        str(out),
        "--masking",
        "dynamic",
        "--masking-scheme",
        "span",
        "--word-segmenter",
        "jieba",
        "--max-seq-length",
        "64",
        "--max-predictions-per-seq",
        "10",
        "--num-shards",
        "1",
        "-q",
        *BEAM_IN_PROCESS,
    )
    assert result.exit_code == 0, result.output
    rows = list(iter_rows(str(out)))
    dataset = ShardDataset(str(out), batch_size=len(rows), shuffle=False, infinite=False)
    assert dataset.masking.masking_scheme == "span"
    ((batch, _),) = list(dataset)
    assert "word_ids" not in batch  # a masking input, not a model input
    by_ids = {tuple(r["input_ids"]): np.array(r["word_ids"]) for r in rows}
    whole = 0
    for input_ids, positions, labels in zip(
        batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_ids"], strict=True
    ):
        keep = labels >= 0
        positions, labels = np.asarray(positions)[keep], np.asarray(labels)[keep]
        original = np.asarray(input_ids).copy()
        original[positions] = labels
        original = original[original != 0]
        word_ids = by_ids[tuple(original.tolist())]
        masked = set(positions.tolist())
        for w in set(word_ids[positions].tolist()):
            assert set(np.flatnonzero(word_ids == w).tolist()) <= masked
            whole += 1
    assert whole > 20


def test_scheme_and_segmenter_errors_are_one_line(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "make-shards",
            "-i",
            f"{FIXTURES}/a.txt",
            "--vocab",
            VOCAB,
            "-o",
            str(tmp_path / "o"),
            "--word-segmenter",
            "no_such_module_xyz:words",
        ],
    )
    assert result.exit_code == 2 and "--word-segmenter" in result.output and "cannot import" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(
        cli,
        [
            "make-shards",
            "-i",
            f"{FIXTURES}/a.txt",
            "--vocab",
            VOCAB,
            "-o",
            str(tmp_path / "o"),
            "--do-whole-word-mask",
            "--masking-scheme",
            "span",
        ],
    )
    assert result.exit_code == 2 and "cannot be combined" in result.output
    help_text = " ".join(_run("make-shards", "--help").output.split())
    for option in (
        "--masking-scheme",
        "--max-ngram-size",
        "--span-geometric-p",
        "--max-span-length",
        "--word-segmenter",
        "--word-ids",
    ):
        assert option in help_text
    assert "SpanBERT" in help_text and "jieba" in help_text


def test_whole_word_scheme_without_segmenter_is_the_original_flag(tmp_path):
    """``--masking-scheme whole-word`` with the default words writes the same shards as the original's
    ``--do-whole-word-mask`` (the golden test pins the latter to the original generator)."""
    flag, scheme = tmp_path / "flag", tmp_path / "scheme"
    _make(flag, "--do-whole-word-mask")
    _make(scheme, "--masking-scheme", "whole-word")
    assert _digest(flag) == _digest(scheme)


def test_fast_sampling_keeps_word_level_masking(tmp_path):
    """``--sampling fast`` vectorizes token masking only; a word-level scheme still masks whole words."""
    out = tmp_path / "fast"
    _make(out, "--sampling", "fast", "--masking-scheme", "span", "--word-ids")
    rows = list(iter_rows(str(out)))
    assert _check_whole_words(rows) > len(rows) / 2
    assert 0.12 < read_manifest(str(out))["statistics"]["masked"]["per_token"] < 0.16


def test_file_pairing_scope_carries_the_segmenters_words(tmp_path, monkeypatch):
    """The streaming ``--pairing-scope file`` path tokenizes through the same word segmenter."""
    (tmp_path / "pairs_words.py").write_text(PAIRS_SEGMENTER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    global_scope, file_scope = tmp_path / "global", tmp_path / "file"
    _make(global_scope, "--masking-scheme", "span", "--word-segmenter", "pairs_words:words", "--bucket-size", "0")
    _make(file_scope, "--masking-scheme", "span", "--word-segmenter", "pairs_words:words", "--pairing-scope", "file")
    for out in (global_scope, file_scope):
        rows = list(iter_rows(str(out)))
        assert _check_whole_words(rows) > len(rows) / 2
        # the segmenter joined default words: fewer words than word starts by the ## rule
        assert max(max(r["word_ids"]) for r in rows) < max(len(r["input_ids"]) for r in rows) / 1.5


def test_collate_pads_word_ids_with_minus_one():
    """``word_ids`` rows collate to [B, T] with -1 at padding, as at [CLS]/[SEP]."""
    need_module("torch")
    from bertprep.bert_model.collate import collate

    rows = [
        {
            "input_ids": np.array(ids),
            "token_type_ids": np.zeros(len(ids), dtype=np.uint8),
            "masked_lm_positions": np.array([1]),
            "masked_lm_ids": np.array([ids[1]]),
            "next_sentence_label": 0,
            "word_ids": np.array(words),
        }
        for ids, words in (
            ([101, 7, 8, 102, 9, 102], [-1, 0, 0, -1, 1, -1]),
            ([101, 5, 102, 6, 102], [-1, 0, -1, 1, -1]),
        )
    ]
    batch = collate(rows, pad_to_multiple_of=8)
    assert batch["word_ids"].tolist() == [[-1, 0, 0, -1, 1, -1, -1, -1], [-1, 0, -1, 1, -1, -1, -1, -1]]
    assert "word_ids" not in collate([{k: v for k, v in r.items() if k != "word_ids"} for r in rows])


def test_inspect_verify_checks_word_ids_and_whole_words(tmp_path):
    """``inspect --verify`` checks the word_ids column and, for a word-level scheme, that no word is partly
    masked: token-masked shards passed off as whole-word ones fail it."""
    from bertprep.pipeline.shards.inspection import verify_shards

    out = tmp_path / "shards"
    _make(out, "--word-ids")  # token masking: multi-piece words are often partly masked
    assert verify_shards(str(out))["errors"] == []
    manifest = read_manifest(str(out))
    manifest["config"]["masking_scheme"] = "whole-word"
    errors = verify_shards(str(out), manifest)["errors"]
    assert errors and all("partly masked" in e for e in errors)
