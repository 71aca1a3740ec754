"""Vocabularies other trainers expect (``build-vocab --special-tokens bert`` and ``--pad-to-multiple-of``): a BPE or
Unigram vocab with BERT's special tokens and ``[CLS] A [SEP] B [SEP]`` template, and any vocab padded with
``[unusedK]`` entries to a multiple of 64, as ModernBERT's tokenizer is; transformers, make-shards and train read
the same ``tokenizer.json``.

Fixture: ``tests/fixtures/vocab/train.txt`` (four public-domain books, see the README there).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core.pretrained_tokenizer import load_pretrained_tokenizer
from bertprep.pipeline.text import vocab_models
from bertprep.pipeline.text.vocab import VocabConfig, save_vocab, train_vocab
from conftest import FIXTURES

TRAIN = FIXTURES / "vocab" / "train.txt"
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _lines() -> list[str]:
    """The fixture's first 600 non-blank lines (enough text for a 600-entry vocab)."""
    return [line for line in TRAIN.read_text(encoding="utf-8").splitlines() if line.strip()][:600]


def _train(**kw):
    return train_vocab(_lines(), VocabConfig(show_progress=False, **kw))


def test_padding_to_a_multiple_appends_unused_tokens_after_the_learned_ones():
    assert vocab_models.padding_size(50280, 64) == 24 and vocab_models.padding_size(30522, 64) == 6
    assert vocab_models.padding_size(640, 64) == 0 and vocab_models.padding_size(641, 64) == 63
    plain = _train(vocab_size=600, num_unused=10)
    padded = _train(vocab_size=600, num_unused=10, pad_to_multiple_of=64)
    assert len(plain.tokens) == 600 and len(padded.tokens) == 640
    assert padded.tokens[:600] == plain.tokens  # the trained vocab is the same; the padding comes after it
    assert padded.padding == padded.tokens[600:] == [f"[unused{k}]" for k in range(10, 50)]
    assert padded.learned_tokens == plain.learned_tokens
    vocab_txt = padded.files()["vocab.txt"].splitlines()
    assert vocab_txt == padded.tokens and padded.tokenizer.get_vocab_size() == 640
    assert "40 [unusedK] padding to a multiple of 64" in padded.summary()
    for model in ("bpe", "unigram"):
        trained = _train(model=model, vocab_size=600, do_lower_case=False, num_unused=0, pad_to_multiple_of=64)
        assert len(trained.tokens) == 640 and trained.padding == [f"[unused{k}]" for k in range(40)], model
        added = {t.content: t for t in trained.tokenizer.get_added_tokens_decoder().values()}
        assert all(added[name].special for name in trained.padding)  # never produced from text


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_bert_special_tokens_and_template_for_a_bpe_or_unigram_vocab(tmp_path, model):
    trained = _train(
        model=model, vocab_size=600, do_lower_case=False, num_unused=0, special_tokens="bert", pad_to_multiple_of=64
    )
    assert trained.tokens[:5] == BERT_SPECIALS and len(trained.tokens) % 64 == 0
    assert not any(t in trained.tokens for t in vocab_models.SPECIAL_TOKENS)  # no <s> </s> <mask>...
    save_vocab(trained, str(tmp_path / "vocab"))
    config = json.loads((tmp_path / "vocab" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["cls_token"] == "[CLS]"
    # bertprep's reader: the roles, the layouts and the token types of BERT
    tokenizer = load_pretrained_tokenizer(str(tmp_path / "vocab"))
    assert tokenizer.special_token_ids() == {t: i for i, t in enumerate(BERT_SPECIALS)}
    assert tokenizer.build_inputs_with_special_tokens([10, 11], [12]) == [2, 10, 11, 3, 12, 3]
    assert tokenizer.create_token_type_ids_from_sequences([10, 11], [12]) == [0, 0, 0, 0, 1, 1]
    assert len(tokenizer.tokens) == len(trained.tokens)
    # [unusedK] and [MASK] written in text are their characters for pre-training data
    ids = tokenizer.encode_sentences(["The door [unused3] opened [MASK]."])[0]
    never = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", *trained.padding]  # ([UNK]: a Unigram's for unseen characters)
    assert not set(ids) & {tokenizer.token_id(t) for t in never}


@pytest.mark.slow  # ~8 s on 2 busy cores, most of it importing transformers
def test_transformers_loads_the_bert_style_bpe_with_token_type_ids(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    trained = _train(
        model="bpe", vocab_size=600, do_lower_case=False, num_unused=0, special_tokens="bert", pad_to_multiple_of=64
    )
    save_vocab(trained, str(tmp_path / "vocab"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "vocab" / "tokenizer.json"))
    encoded = fast("The door opened.", "It was late.", return_token_type_ids=True)
    tokens = fast.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
    second = tokens.index("[SEP]") + 1
    assert encoded["token_type_ids"] == [0] * second + [1] * (len(tokens) - second)
    assert len(fast) == 640
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "vocab"))
    encoded_auto = auto("The door opened.", "It was late.")  # token_type_ids without being asked for
    assert encoded_auto["input_ids"] == encoded["input_ids"]
    assert encoded_auto["token_type_ids"] == encoded["token_type_ids"]
    assert auto.mask_token == "[MASK]" and auto.pad_token_id == 0 and auto.cls_token_id == 2


def _build(tmp_path: Path, *extra: str) -> CliRunner:
    return CliRunner().invoke(cli, ["build-vocab", str(TRAIN), "-o", str(tmp_path / "vocab"), "-q", *extra])


def test_options_that_do_not_fit_are_refused_naming_them(tmp_path):
    result = _build(tmp_path, "--special-tokens", "roberta")
    assert result.exit_code == 2 and "--special-tokens" in result.output and "wordpiece" in result.output
    result = _build(tmp_path, "--pad-to-multiple-of", "0")
    assert result.exit_code == 2 and "--pad-to-multiple-of" in result.output
    base = FIXTURES / "pipeline" / "vocab.txt"
    for option, value in (("--pad-to-multiple-of", "64"), ("--special-tokens", "bert")):
        result = _build(tmp_path, "--extend", str(base), "--extend-size", "5", option, value)
        assert result.exit_code == 2 and option in result.output and "extension" in result.output
    assert not (tmp_path / "vocab").exists()


@pytest.mark.slow  # ~25 s on 2 busy cores: build-vocab, make-shards, and train's start and 2 steps
def test_make_shards_and_train_read_a_padded_bert_style_bpe(tmp_path):
    pytest.importorskip("torch", reason="train needs torch")
    result = _build(
        tmp_path, "--model", "bpe", "--special-tokens", "bert", "--vocab-size", "600", "--pad-to-multiple-of", "64"
    )
    assert result.exit_code == 0, result.output
    vocab = tmp_path / "vocab"
    args = ["make-shards", "-i", str(FIXTURES / "pipeline" / "a.txt"), "--input-format", "bert", "--vocab", vocab]
    args += ["-o", tmp_path / "shards", "--max-seq-length", "64", "--max-predictions-per-seq", "10", "-q"]
    args += ["--dupe-factor", "2", "--direct_num_workers=1", "--direct_running_mode=in_memory"]
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert manifest["vocab"]["size"] == 640
    assert manifest["vocab"]["special_token_ids"] == {t: i for i, t in enumerate(BERT_SPECIALS)}
    from bertprep.pipeline.shards.inspection import iter_rows

    rows = list(iter_rows(str(tmp_path / "shards")))
    assert rows and all(row["input_ids"][0] == 2 and row["input_ids"][-1] == 3 for row in rows)
    for row in rows:  # [CLS] A [SEP] B [SEP]: B and its [SEP] are token type 1
        first_sep = list(row["input_ids"]).index(3)
        assert list(row["token_type_ids"]) == [0] * (first_sep + 1) + [1] * (len(row["input_ids"]) - first_sep - 1)
    args = ["train", "--shards", tmp_path / "shards", "-o", tmp_path / "run", "--preset", "tiny", "--hidden-size", "32"]
    args += ["--num-attention-heads", "2", "--batch-size", "4", "--max-steps", "2", "--warmup-steps", "1"]
    args += ["--num-workers", "0", "--no-progress", "--device", "cpu"]
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
