"""bertprep build-vocab: WordPiece vocab training (pipeline/text/vocab.py) and its command (cli/build_vocab.py).

These tests check properties of the result (size, layout, agreement between files, round trips, [UNK] rate);
that the bytes are the same in every process is ``test_vocab_determinism.py``'s.
Fixtures: ``tests/fixtures/vocab/train.txt`` and ``heldout.txt``, excerpts of four public-domain books
(Project Gutenberg via the NLTK corpus: Austen, Chesterton, Melville, Whitman); see the README there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest.mock import ANY

import pytest
from tokenizers import Tokenizer, decoders

from bertprep.pipeline.text import vocab as vocab_lib
from bertprep.pipeline.text.tokenization import load_vocab
from bertprep.pipeline.text.vocab import (
    CorpusStats,
    VocabConfig,
    VocabSizeError,
    save_vocab,
    train_wordpiece,
    unused_tokens,
)
from conftest import FIXTURES, need_module

VOCAB_FIXTURES = FIXTURES / "vocab"
TRAIN = VOCAB_FIXTURES / "train.txt"
HELDOUT = VOCAB_FIXTURES / "heldout.txt"
SPECIALS_IN_ORDER = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB_SIZE = 2000
NUM_UNUSED = 20


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _heldout_sentences() -> list[str]:
    return [line for line in _lines(HELDOUT) if line.strip()]


def _config(**kw) -> VocabConfig:
    settings = dict(vocab_size=VOCAB_SIZE, num_unused=NUM_UNUSED, show_progress=False)
    settings.update(kw)
    return VocabConfig(**settings)


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def trained(request, tmp_path_factory):
    """(TrainedVocab, output dir with the saved files) for an uncased and a cased vocab."""
    result = train_wordpiece(_lines(TRAIN), _config(do_lower_case=request.param))
    outdir = tmp_path_factory.mktemp("uncased" if request.param else "cased")
    save_vocab(result, str(outdir))
    return result, outdir


# ---------------------------------------------------------------------------------------------------------
# layout and files


def test_vocab_has_exactly_the_requested_size(trained):
    result, outdir = trained
    assert result.vocab_size == VOCAB_SIZE
    assert len(_lines(outdir / "vocab.txt")) == VOCAB_SIZE
    assert Tokenizer.from_file(str(outdir / "tokenizer.json")).get_vocab_size() == VOCAB_SIZE


def test_specials_first_then_unused_slots(trained):
    result, outdir = trained
    lines = _lines(outdir / "vocab.txt")
    assert lines[:5] == SPECIALS_IN_ORDER
    assert all(t == t.upper() for t in lines[:5])
    assert lines[5 : 5 + NUM_UNUSED] == [f"[unused{i}]" for i in range(NUM_UNUSED)]
    assert unused_tokens(3) == ["[unused0]", "[unused1]", "[unused2]"]
    tokenizer = result.tokenizer
    assert [tokenizer.token_to_id(t) for t in SPECIALS_IN_ORDER] == [0, 1, 2, 3, 4]
    # no bracketed entry outside the reserved block
    assert not any(t.startswith("[") and t.endswith("]") and len(t) > 1 for t in lines[5 + NUM_UNUSED :])


def test_vocab_txt_lines_are_unique_non_empty_tokens(trained):
    _, outdir = trained
    raw = (outdir / "vocab.txt").read_bytes()
    assert raw.endswith(b"\n") and b"\r" not in raw
    lines = raw.decode("utf-8").split("\n")[:-1]
    assert all(lines), "empty line in vocab.txt"
    assert len(set(lines)) == len(lines), "duplicate token in vocab.txt"
    assert all(line == line.strip() and not any(c.isspace() for c in line) for line in lines)


def test_vocab_txt_and_tokenizer_json_agree_id_for_id(trained):
    _, outdir = trained
    lines = _lines(outdir / "vocab.txt")
    from_json = Tokenizer.from_file(str(outdir / "tokenizer.json"))
    assert [from_json.token_to_id(t) for t in lines] == list(range(len(lines)))
    assert [from_json.id_to_token(i) for i in range(len(lines))] == lines
    # make-shards' loader reads both files to the same vocab
    assert load_vocab(str(outdir / "vocab.txt")).tokens == load_vocab(str(outdir / "tokenizer.json")).tokens


def test_tokenizer_json_is_the_bert_pipeline(trained):
    result, outdir = trained
    do_lower_case = result.config.do_lower_case
    spec = json.loads((outdir / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["normalizer"] == {
        "type": "BertNormalizer",
        "clean_text": True,
        "handle_chinese_chars": True,
        "strip_accents": do_lower_case,
        "lowercase": do_lower_case,
    }
    assert spec["pre_tokenizer"]["type"] == "BertPreTokenizer"
    model = spec["model"]
    assert (model["type"], model["unk_token"], model["continuing_subword_prefix"]) == ("WordPiece", "[UNK]", "##")
    assert model["max_input_chars_per_word"] == 200
    assert spec["decoder"]["type"] == "WordPiece" and spec["decoder"]["prefix"] == "##"
    # only the five BERT specials are added (special) tokens; [unusedN] are plain vocab entries
    assert sorted(t["content"] for t in spec["added_tokens"]) == sorted(SPECIALS_IN_ORDER)
    assert all(t["special"] for t in spec["added_tokens"])
    config = json.loads((outdir / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["do_lower_case"] is do_lower_case
    assert config["model_max_length"] == 512 and config["tokenizer_class"] == "BertTokenizerFast"
    special_map = json.loads((outdir / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert set(special_map.values()) == set(SPECIALS_IN_ORDER)


def test_post_processor_adds_cls_and_sep_with_segment_ids(trained):
    result, _ = trained
    tok = result.tokenizer
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    single = tok.encode("the whale")
    assert single.ids[0] == cls_id and single.ids[-1] == sep_id and set(single.type_ids) == {0}
    pair = tok.encode("the whale", "said my soul")
    len_a = len(tok.encode("the whale", add_special_tokens=False).ids)
    len_b = len(tok.encode("said my soul", add_special_tokens=False).ids)
    assert pair.ids[0] == cls_id and pair.ids[len_a + 1] == sep_id and pair.ids[-1] == sep_id
    assert pair.type_ids == [0] * (len_a + 2) + [1] * (len_b + 1)


# ---------------------------------------------------------------------------------------------------------
# casing


def test_uncased_vocab_has_no_capitals_and_strips_accents(trained):
    result, _ = trained
    learned = result.learned_tokens
    with_capitals = [t for t in learned if t != t.lower()]
    if result.config.do_lower_case:
        assert with_capitals == []
        assert result.tokenizer.normalizer.normalize_str("Café NAÏVE") == "cafe naive"
    else:
        # a cased vocab keeps capitals: sentence-initial words and names are frequent in the fixture
        assert len(with_capitals) > 50
        assert "The" in result.tokens and "the" in result.tokens
        assert result.tokenizer.normalizer.normalize_str("Café NAÏVE") == "Café NAÏVE"


# ---------------------------------------------------------------------------------------------------------
# round trip and coverage on held-out text


def test_round_trip_and_unk_rate_on_heldout_text(trained):
    result, _ = trained
    tok = result.tokenizer
    unk_id = tok.token_to_id("[UNK]")
    no_cleanup = decoders.WordPiece(prefix="##", cleanup=False)
    sentences = _heldout_sentences()
    encodings = tok.encode_batch(sentences, add_special_tokens=False)
    n_tokens = sum(len(e.ids) for e in encodings)
    n_unk = sum(e.ids.count(unk_id) for e in encodings)
    assert n_tokens > 2000
    assert n_unk / n_tokens < 0.01
    checked = 0
    for sentence, encoding in zip(sentences, encodings, strict=True):
        if unk_id in encoding.ids:
            continue
        normalized = tok.normalizer.normalize_str(sentence)
        words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(normalized)]
        assert no_cleanup.decode(encoding.tokens) == " ".join(words)
        # the saved decoder (with BERT's cleanup of spaces before punctuation) keeps every character
        assert "".join(tok.decode(encoding.ids).split()) == "".join(normalized.split())
        checked += 1
    assert checked >= 0.95 * len(sentences)


def test_words_up_to_200_characters_become_pieces_not_unk(trained):
    result, _ = trained
    tok = result.tokenizer
    unk = tok.token_to_id("[UNK]")
    word = "whale" * 30  # 150 characters: word pieces with the original's limit of 200
    assert unk not in tok.encode(word, add_special_tokens=False).ids
    assert tok.encode("w" + "whale" * 40, add_special_tokens=False).ids == [unk]  # 201 characters


# ---------------------------------------------------------------------------------------------------------
# transformers


def test_bert_tokenizer_fast_loads_the_output_dir(trained):
    transformers = need_module("transformers")
    result, outdir = trained
    ours = result.tokenizer
    hf = transformers.BertTokenizerFast.from_pretrained(str(outdir))
    assert hf.model_max_length == 512
    assert hf.pad_token_id == ours.token_to_id("[PAD]") and hf.mask_token_id == ours.token_to_id("[MASK]")
    sentences = _heldout_sentences()
    for a, b in zip(sentences[::2], sentences[1::2], strict=False):  # an odd last sentence has no pair
        assert hf(a)["input_ids"] == ours.encode(a).ids
        pair = hf(a, b)
        expected = ours.encode(a, b)
        assert pair["input_ids"] == expected.ids and pair["token_type_ids"] == expected.type_ids
    auto = transformers.AutoTokenizer.from_pretrained(str(outdir))
    assert auto(sentences[0])["input_ids"] == ours.encode(sentences[0]).ids
    # Loaded from the tokenizer file itself, the pipeline is kept exactly (the 200-character limit too).
    direct = transformers.BertTokenizerFast(
        tokenizer_file=str(outdir / "tokenizer.json"), do_lower_case=result.config.do_lower_case
    )
    long_word = "whale" * 30
    assert direct(long_word)["input_ids"] == ours.encode(long_word).ids
    assert direct("Call me Ishmael.")["input_ids"] == ours.encode("Call me Ishmael.").ids


# ---------------------------------------------------------------------------------------------------------
# options and errors


def test_stats_count_what_was_read_from_a_one_shot_generator():
    lines = _lines(TRAIN)
    non_blank = [line for line in lines if line.strip()]
    result = train_wordpiece((line for line in lines), _config(vocab_size=500))
    assert result.stats == CorpusStats(sentences=len(non_blank), characters=sum(map(len, non_blank)))
    assert 0.0 < result.continuation_share < 1.0
    summary = result.summary()
    assert "500" in summary and f"{len(non_blank):,} sentences" in summary


def test_poor_corpus_gives_a_smaller_vocab_and_says_so():
    result = train_wordpiece(["the cat sat on the mat", "the dog sat on the log"], _config(vocab_size=5000))
    assert result.vocab_size < 5000
    assert "no more pairs" in result.summary()
    stricter = train_wordpiece(_lines(TRAIN), _config(vocab_size=30000, min_frequency=20))
    looser = train_wordpiece(_lines(TRAIN), _config(vocab_size=30000, min_frequency=2))
    assert stricter.vocab_size < looser.vocab_size < 30000


def test_limit_alphabet_caps_single_characters():
    result = train_wordpiece(_lines(TRAIN), _config(vocab_size=1000, limit_alphabet=30))
    singles = [t for t in result.learned_tokens if len(t) == 1]
    assert len(singles) == 30
    assert "e" in singles  # the most frequent characters are the ones kept
    unlimited = train_wordpiece(_lines(TRAIN), _config(vocab_size=1000, limit_alphabet=None))
    assert len([t for t in unlimited.learned_tokens if len(t) == 1]) > 30


def test_vocab_size_below_reserved_tokens_is_refused_before_reading():
    with pytest.raises(VocabSizeError, match="the minimum is 107") as err:
        VocabConfig(vocab_size=50, num_unused=100)
    assert err.value.minimum == 107


def test_vocab_size_below_the_corpus_alphabet_reports_the_exact_minimum():
    lines = _lines(TRAIN)
    with pytest.raises(VocabSizeError, match="the minimum is") as err:
        train_wordpiece(lines, _config(vocab_size=40, num_unused=0))
    minimum = err.value.minimum
    assert minimum > 40
    assert train_wordpiece(lines, _config(vocab_size=minimum, num_unused=0)).vocab_size == minimum
    with pytest.raises(VocabSizeError):
        train_wordpiece(lines, _config(vocab_size=minimum - 1, num_unused=0))


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(num_unused=-1), "num_unused"),
        (dict(min_frequency=-1), "min_frequency"),
        (dict(limit_alphabet=0), "limit_alphabet"),
    ],
)
def test_bad_settings_raise_value_error(kw, message):
    with pytest.raises(ValueError, match=message):
        _config(**kw)


def test_blank_input_is_an_error():
    with pytest.raises(ValueError, match="no text"):
        train_wordpiece(["", "   ", "\n"], _config())


# ---------------------------------------------------------------------------------------------------------
# writing


@pytest.fixture(scope="module")
def small_vocab():
    return train_wordpiece(_lines(TRAIN), _config(vocab_size=300))


def test_save_refuses_to_overwrite_unless_asked(small_vocab, tmp_path):
    outdir = tmp_path / "out"
    written = save_vocab(small_vocab, str(outdir))
    assert sorted(written) == ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    before = (outdir / "vocab.txt").read_bytes()
    with pytest.raises(FileExistsError, match="--overwrite"):
        save_vocab(small_vocab, str(outdir))
    assert (outdir / "vocab.txt").read_bytes() == before
    save_vocab(small_vocab, str(outdir), overwrite=True)
    assert sorted(os.listdir(outdir)) == sorted(written)  # no temporary file left behind


def _files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_interrupted_publish_leaves_the_old_set_or_the_new_one(small_vocab, tmp_path, monkeypatch, fail_at):
    """The four files are published in one step (a directory swap): killed at any rename (1: old directory
    aside, 2: new one in place, 3: the user's file moved back), the directory holds the old complete set or
    the new one, never a mix; the next run repairs the swap, and the user's own file is kept."""
    new = _files(Path(save_vocab(small_vocab, str(tmp_path / "new"))["vocab.txt"]).parent)
    outdir = tmp_path / "out"
    save_vocab(small_vocab, str(outdir))
    (outdir / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nold\n")  # tell the old set from the new
    (outdir / "notes.md").write_text("mine")
    old = _files(outdir)
    real_replace = os.replace
    calls = []

    def killed_replace(src, dst):
        calls.append(dst)
        if len(calls) == fail_at:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(vocab_lib.os, "replace", killed_replace)
    with pytest.raises(KeyboardInterrupt):
        save_vocab(small_vocab, str(outdir), overwrite=True)
    monkeypatch.setattr(vocab_lib.os, "replace", real_replace)
    if outdir.exists():
        vocab_files = {k: v for k, v in _files(outdir).items() if k in vocab_lib.WRITTEN_FILES}
        assert vocab_files in ({k: v for k, v in old.items() if k != "notes.md"}, new)
    assert vocab_lib.repair_interrupted_publish(str(outdir)) == (None if fail_at == 1 else ANY)
    assert _files(outdir) == (old if fail_at <= 2 else {**new, "notes.md": b"mine"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out"]  # no staging or .old folder left


# ---------------------------------------------------------------------------------------------------------
# the command


@pytest.fixture(scope="module")
def runner():
    from click.testing import CliRunner

    return CliRunner()


def _invoke(runner, *args):
    from bertprep.cli.main import cli

    return runner.invoke(cli, ["build-vocab", *map(str, args)])


def test_cli_builds_a_vocab_dir(runner, tmp_path):
    outdir = tmp_path / "vocab"
    result = _invoke(runner, TRAIN, "-o", outdir, "--vocab-size", 1500, "--num-unused", 10, "-q")
    assert result.exit_code == 0, result.output
    lines = _lines(outdir / "vocab.txt")
    assert len(lines) == 1500 and lines[:5] == SPECIALS_IN_ORDER and lines[14] == "[unused9]"
    assert "vocab size: 1,500" in result.output and "## pieces" in result.output and "sentences" in result.output
    assert json.loads((outdir / "tokenizer_config.json").read_text())["do_lower_case"] is True
    assert sorted(os.listdir(outdir)) == [
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]


def test_cli_cased_directory_input_and_input_file_option(runner, tmp_path):
    outdir = tmp_path / "cased"
    # a directory (README.md in it is skipped by the readers) plus the same file again through -i
    result = _invoke(
        runner,
        VOCAB_FIXTURES,
        "-i",
        str(TRAIN),
        "-o",
        outdir,
        "--cased",
        "--vocab-size",
        1500,
        "--num-unused",
        0,
        "--input-format",
        "bert",
        "-q",
    )
    assert result.exit_code == 0, result.output
    lines = _lines(outdir / "vocab.txt")
    assert lines[5] != "[unused0]" and "[unused0]" not in lines
    assert any(t != t.lower() for t in lines[5:])
    assert json.loads((outdir / "tokenizer_config.json").read_text())["do_lower_case"] is False
    # both fixture files were read once each (bert format: one sentence per non-blank line)
    n_sentences = len([x for x in _lines(TRAIN) + _lines(HELDOUT) if x.strip()])
    assert f"read: {n_sentences:,} sentences" in result.output


def test_cli_without_inputs_trains_on_the_demo_corpus_with_low_unk_rate(runner, tmp_path):
    outdir = tmp_path / "demo"
    result = _invoke(runner, "-o", outdir, "--vocab-size", 4000, "-q")
    assert result.exit_code == 0, result.output
    assert "demo corpus" in result.output
    tok = Tokenizer.from_file(str(outdir / "tokenizer.json"))
    unk_id = tok.token_to_id("[UNK]")
    ids = [i for e in tok.encode_batch(_heldout_sentences(), add_special_tokens=False) for i in e.ids]
    assert ids.count(unk_id) / len(ids) < 0.01  # other authors than the demo corpus's


def test_cli_refuses_to_overwrite(runner, tmp_path):
    outdir = tmp_path / "vocab"
    assert _invoke(runner, TRAIN, "-o", outdir, "--vocab-size", 500, "-q").exit_code == 0
    before = (outdir / "vocab.txt").read_bytes()
    refused = _invoke(runner, TRAIN, "-o", outdir, "--vocab-size", 600, "-q")
    assert refused.exit_code == 1 and "--overwrite" in refused.output
    assert (outdir / "vocab.txt").read_bytes() == before
    replaced = _invoke(runner, TRAIN, "-o", outdir, "--vocab-size", 600, "--overwrite", "-q")
    assert replaced.exit_code == 0, replaced.output
    assert len(_lines(outdir / "vocab.txt")) == 600


def test_cli_vocab_size_below_reserved_tokens(runner, tmp_path):
    result = _invoke(runner, TRAIN, "-o", tmp_path / "v", "--vocab-size", 50, "-q")
    assert result.exit_code == 2
    assert "--vocab-size" in result.output and "the minimum is 107" in result.output
    assert not (tmp_path / "v").exists()


def test_cli_vocab_size_below_corpus_alphabet(runner, tmp_path):
    result = _invoke(runner, TRAIN, "-o", tmp_path / "v", "--vocab-size", 110, "--num-unused", 100, "-q")
    assert result.exit_code == 2
    assert "--vocab-size" in result.output and "the minimum is" in result.output
    assert not (tmp_path / "v" / "vocab.txt").exists()


def test_cli_inputs_matching_nothing(runner, tmp_path):
    result = _invoke(runner, tmp_path / "nothing-*.txt", "-o", tmp_path / "v", "-q")
    assert result.exit_code == 1
    assert "nothing-*.txt" in result.output and "matches no file" in result.output
    assert not (tmp_path / "v").exists()


def test_cli_bad_input_file_writes_nothing(runner, tmp_path):
    binary = tmp_path / "data.txt"
    binary.write_bytes(b"some text\x00\x01\x02 and a NUL byte")
    result = _invoke(runner, TRAIN, binary, "-o", tmp_path / "v", "-q")
    assert result.exit_code == 1 and str(binary) in result.output and "binary" in result.output
    assert not (tmp_path / "v" / "vocab.txt").exists()
    bad_encoding = _invoke(runner, TRAIN, "-o", tmp_path / "v", "--encoding", "no-such-codec", "-q")
    assert bad_encoding.exit_code == 1 and "--encoding" in bad_encoding.output


def test_cli_help_says_what_users_must_know(runner):
    result = _invoke(runner, "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Deterministic: the same input and options give byte-identical files" in text
    assert "--model [wordpiece|bpe|unigram]" in text
    assert "without resizing the embedding matrix" in text  # what --num-unused slots are for
    assert "BertTokenizerFast" in text


# ---------------------------------------------------------------------------------------------------------
# real data


@pytest.mark.slow
def test_vocab_from_books_and_wikipedia_covers_other_wikipedia_articles(shared_data, runner, tmp_path):
    transformers = need_module("transformers")
    books = shared_data / "gutenberg"
    wiki = shared_data / "wikipedia" / "wikiextractor-featured" / "AA"
    outdir = tmp_path / "vocab"
    result = _invoke(
        runner, books / "austen-persuasion.txt", wiki / "wiki_01", "-o", outdir, "--vocab-size", 6000, "-q"
    )
    assert result.exit_code == 0, result.output
    assert len(_lines(outdir / "vocab.txt")) == 6000
    ours = Tokenizer.from_file(str(outdir / "tokenizer.json"))
    from bertprep.pipeline.readers import read_documents

    held_out = [s for doc in read_documents(str(wiki / "wiki_02"), "wikiextractor") for s in doc.sentences][:2000]
    encodings = ours.encode_batch(held_out)
    ids = [i for e in encodings for i in e.ids]
    assert ids.count(ours.token_to_id("[UNK]")) / len(ids) < 0.01
    hf = transformers.BertTokenizerFast.from_pretrained(str(outdir))
    assert hf(held_out[:200])["input_ids"] == [e.ids for e in encodings[:200]]


def test_cli_defaults_are_the_library_defaults():
    from bertprep.cli.build_vocab import build_vocab

    defaults = {p.name: p.default for p in build_vocab.params}
    library = VocabConfig()
    assert defaults["vocab_size"] == library.vocab_size == 30522
    assert defaults["num_unused"] == library.num_unused
    assert defaults["min_frequency"] == library.min_frequency
    assert defaults["limit_alphabet"] == library.limit_alphabet
    assert defaults["do_lower_case"] is library.do_lower_case is True


def test_cli_has_the_max_line_chars_its_readers_name(runner, tmp_path):
    """Round two: the readers' warning about an over-long line says 'raise --max-line-chars', which build-vocab
    lacked; it now has the option, as make-shards does."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("x" * 300 + "\n" + "the city was in the river\nthe a is was\n" * 20)
    result = _invoke(runner, corpus, "-o", tmp_path / "v", "--vocab-size", 100, "--num-unused", 0, "--min-frequency",
                     1, "--input-format", "bert", "--max-line-chars", 100, "-q")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "x" * 20 not in (tmp_path / "v" / "vocab.txt").read_text()  # the long line was skipped
    assert "--max-line-chars" in _invoke(runner, "--help").output
