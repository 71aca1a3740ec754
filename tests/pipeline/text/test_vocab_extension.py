"""build-vocab --extend (pipeline/text/vocab_extension.py): new word pieces of a corpus added to an existing
vocab, every old id kept, ``[unusedK]`` slots filled first.

The domain word is ``psilocybin``: the shared Wikipedia article "Psilocybin" (wikiextractor-featured wiki_09)
uses it 159 times, and Google's uncased vocab splits it into 4 pieces (``psi ##lo ##cy ##bin``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer

from bertprep.cli.main import cli
from bertprep.core.vocab_files import VocabError, read_vocab_file, tokenizer_files, wordpiece_split
from bertprep.pipeline.text.vocab_extension import (
    EXTENSION_FILE,
    place_pieces,
    rank_pieces,
    read_base_vocab,
)
from conftest import FIXTURES

TRAIN = FIXTURES / "vocab" / "train.txt"
DOMAIN = (
    "Psilocybin is a naturally occurring psychedelic prodrug compound produced by more than 200 species of fungi.\n"
    "In the body psilocybin is converted to psilocin, which has mind-altering effects.\n"
    "The chemist Albert Hofmann isolated psilocybin from the mushroom Psilocybe mexicana in 1958.\n"
    "Clinical trials test psilocybin against depression; psilocybin therapy remains experimental.\n"
)


def _planted_corpus(tmp_path: Path, copies: int = 12) -> Path:
    """General English (the book fixture) with the domain paragraph planted ``copies`` times."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "books.txt").write_text(TRAIN.read_text(encoding="utf-8"), encoding="utf-8")
    (corpus / "domain.txt").write_text((DOMAIN + "\n") * copies, encoding="utf-8")
    return corpus


def _extend(*args: str):
    return CliRunner().invoke(cli, ["build-vocab", "-q", *args])


def test_wordpiece_split_is_greedy_longest_match_first():
    vocab = {"psi", "##lo", "##cy", "##bin", "##locybin", "p"}
    assert wordpiece_split("psilocybin", vocab) == ["psi", "##locybin"]
    assert wordpiece_split("psilocybin", vocab - {"##locybin"}) == ["psi", "##lo", "##cy", "##bin"]
    assert wordpiece_split("locybin", vocab, continuation=True) == ["##locybin"]
    assert wordpiece_split("psix", vocab) is None  # no entry matches "x": the word is [UNK]


def test_greedy_ranking_counts_tokens_saved_and_does_not_take_overlapping_pieces():
    base = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##a", "##b", "##c"]
    words = Counter({"abc": 10, "cab": 3})
    # "abc" alone saves 2 pieces in 10 words; "##bc" saves 1 there; once "abc" is in, "##bc" saves nothing.
    chosen, before, after, uses = rank_pieces(words, base, ["abc", "##bc", "ca", "zz"], extend_size=5)
    assert chosen == [("abc", 20), ("ca", 3)]
    assert (before, after) == (39, 16) and uses == {"abc": 10, "ca": 3}


def test_pieces_fill_unused_slots_first_then_are_appended():
    base = ["[PAD]", "[unused0]", "[UNK]", "[unused1]", "x"]
    tokens, placed = place_pieces(base, ["p", "q", "r"])
    assert tokens == ["[PAD]", "p", "[UNK]", "q", "x", "r"]
    assert placed == [(1, "[unused0]"), (3, "[unused1]"), (5, None)]


def test_extension_keeps_old_ids_and_makes_the_domain_word_one_piece(tmp_path, uncased_vocab):
    corpus = _planted_corpus(tmp_path)
    base_tokens = read_vocab_file(str(uncased_vocab))
    base_tokenizer = Tokenizer.from_str(tokenizer_files(base_tokens, True)["tokenizer.json"])
    assert len(base_tokenizer.encode("psilocybin", add_special_tokens=False).tokens) >= 4

    result = _extend(str(corpus), "--extend", str(uncased_vocab), "--extend-size", "10", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    tokens = read_vocab_file(str(tmp_path / "out" / "vocab.txt"))
    record = json.loads((tmp_path / "out" / EXTENSION_FILE).read_text(encoding="utf-8"))
    added = {a["id"]: a for a in record["added"]}
    # Every old id holds its old token, except the [unusedK] slots that took a new piece (Google's has 994).
    assert len(tokens) == len(base_tokens)
    for i, (old, new) in enumerate(zip(base_tokens, tokens, strict=True)):
        assert new == old or (i in added and re.fullmatch(r"\[unused\d+\]", old) and added[i]["replaced"] == old)
    assert [a["piece"] for a in record["added"]] == [tokens[a["id"]] for a in record["added"]]
    assert 1 <= len(added) <= 10 and record["added"][0]["piece"] == "psilocybin"
    assert record["added"][0]["count"] == 5 * 12  # its occurrences in the planted paragraph x 12
    assert record["pieces_after"] < record["pieces_before"]

    extended = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    assert extended.encode("Psilocybin", add_special_tokens=False).tokens == ["psilocybin"]  # casing kept
    # Text without the new words tokenizes exactly as before.
    plain = "The whale swam past the ship at dawn."
    assert extended.encode(plain).ids == base_tokenizer.encode(plain).ids


def test_more_pieces_than_unused_slots_are_appended(tmp_path, uncased_vocab):
    corpus = _planted_corpus(tmp_path)
    google = read_vocab_file(str(uncased_vocab))
    base = [t for t in google if not re.fullmatch(r"\[unused\d+\]", t) or t in ("[unused0]", "[unused1]")]
    (tmp_path / "base.txt").write_text("".join(t + "\n" for t in base), encoding="utf-8")
    out = tmp_path / "out"
    result = _extend(str(corpus), "--extend", str(tmp_path / "base.txt"), "--extend-size", "5", "-o", str(out))
    assert result.exit_code == 0, result.output
    tokens = read_vocab_file(str(out / "vocab.txt"))
    record = json.loads((out / EXTENSION_FILE).read_text(encoding="utf-8"))
    assert len(tokens) == len(base) + 3 and tokens[len(base) :] == [a["piece"] for a in record["added"][2:]]
    assert [a["replaced"] for a in record["added"]] == ["[unused0]", "[unused1]", None, None, None]
    assert [t for i, t in enumerate(tokens[: len(base)]) if t != base[i]] == [a["piece"] for a in record["added"][:2]]
    assert "2 in [unusedK] slots, 3 appended" in result.output


def test_extending_a_tokenizer_json_keeps_its_normalisation(tmp_path):
    corpus = _planted_corpus(tmp_path, copies=6)
    cased, out = tmp_path / "cased", tmp_path / "out"
    built = _extend(str(TRAIN), "--cased", "--vocab-size", "1500", "-o", str(cased))
    assert built.exit_code == 0, built.output
    result = _extend(str(corpus), "--extend", str(cased), "--extend-size", "3", "-o", str(out))
    assert result.exit_code == 0, result.output
    extended = Tokenizer.from_file(str(out / "tokenizer.json"))
    base_normalizer = Tokenizer.from_file(str(cased / "tokenizer.json")).normalizer
    assert extended.normalizer.__getstate__() == base_normalizer.__getstate__()
    assert read_base_vocab(str(tmp_path / "out")).do_lower_case is False
    record = json.loads((tmp_path / "out" / EXTENSION_FILE).read_text(encoding="utf-8"))
    # The best piece serves both spellings: "##silocybin" after "p" or "P" (upper case is kept).
    assert record["do_lower_case"] is False and record["added"][0]["piece"] == "##silocybin"
    pieces = extended.encode("Psilocybin", add_special_tokens=False).tokens
    assert len(pieces) == 2 and pieces[0].startswith("P"), pieces


@pytest.mark.parametrize(
    "args, message",
    [
        (["--extend-size", "0"], "--extend-size.*must be at least 1"),
        (["--extend-size", "-3"], "--extend-size.*must be at least 1"),
        ([], "--extend-size N"),
        (["--extend-size", "5", "--cased"], "is uncased .* but --cased was given"),
        (["--extend-size", "5", "--num-unused", "4"], "--num-unused"),
    ],
)
def test_bad_extension_options_are_refused_before_reading(tmp_path, uncased_vocab, args, message):
    result = _extend(str(TRAIN), "--extend", str(uncased_vocab), *args, "-o", str(tmp_path / "out"))
    assert result.exit_code == 2 and re.search(message, result.output.replace("\n", " ")), result.output
    assert not (tmp_path / "out" / "vocab.txt").exists()


def test_extend_size_without_extend_is_refused(tmp_path):
    result = _extend(str(TRAIN), "--extend-size", "5", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2 and "--extend-size needs --extend" in result.output


def test_a_base_vocab_without_the_special_tokens_is_refused(tmp_path):
    (tmp_path / "base.txt").write_text("[PAD]\n[UNK]\nthe\n##s\n", encoding="utf-8")
    base, out = tmp_path / "base.txt", tmp_path / "out"
    result = _extend(str(TRAIN), "--extend", str(base), "--extend-size", "5", "-o", str(out))
    assert result.exit_code == 2
    assert "lacks the special token(s) [CLS], [SEP], [MASK]" in result.output.replace("\n", " ")


def test_a_cased_tokenizer_json_with_lowercase_is_refused(tmp_path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "The", "the", "##s"]
    (tmp_path / "tokenizer.json").write_text(tokenizer_files(tokens, False)["tokenizer.json"], encoding="utf-8")
    with pytest.raises(VocabError, match=r"is cased .* but --lowercase was given"):
        read_base_vocab(str(tmp_path / "tokenizer.json"), do_lower_case=True)
    assert read_base_vocab(str(tmp_path)).do_lower_case is False


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_extending_a_bpe_or_unigram_tokenizer_is_refused_in_one_line(tmp_path, model):
    from tokenizer_factory import roberta_tokenizer_dir, unigram_tokenizer_dir

    base = (roberta_tokenizer_dir if model == "bpe" else unigram_tokenizer_dir)(tmp_path / "base")
    result = _extend(str(TRAIN), "--extend", str(base), "--extend-size", "5", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    kind = "BPE" if model == "bpe" else "Unigram"
    assert f"is a {kind} tokenizer; --extend extends WordPiece vocabs only" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
