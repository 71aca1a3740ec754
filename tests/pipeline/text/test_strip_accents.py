"""Accent stripping apart from lower-casing (``--strip-accents/--no-strip-accents``), tested on real Korean.

Uncased BERT strips accents with NFD, which splits every Hangul syllable into conjoining jamo. These tests
check the rule in every place the tokenizer is built (vocab training, make-shards' encoder with its ASCII
shortcut, the tokenizer files ``transformers`` loads), the warning with the share of the corpus affected,
the refusal of a vocab / shards mismatch, and, on the Korean prose in ``shared/data/cjk/ko/`` (public-domain
constitution and a CC BY-SA Wikipedia article, see its README), that ``--no-strip-accents`` gives a vocab of
syllables and shards with almost no [UNK].
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core.normalization import (
    accent_stripping_stats,
    check_vocab_strip_accents,
    hangul_vocab_counts,
    is_conjoining_jamo,
    is_hangul_syllable,
    normalizer_settings,
    resolve_strip_accents,
    vocab_strip_accents,
)
from bertprep.pipeline.readers import read_documents
from bertprep.pipeline.text.tokenization import SentenceEncoder, Vocab, load_vocab
from bertprep.pipeline.text.vocab import VocabConfig, save_vocab, train_wordpiece
from conftest import need_module

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BEAM_IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
KOREAN_VOCAB_SIZE = 3000


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _korean_sentences(ko_dir: Path) -> list[str]:
    return [
        s
        for path in sorted(ko_dir.glob("*.txt"))
        for doc in read_documents(str(path), input_format="text")
        for s in doc.sentences
    ]


@pytest.fixture(scope="module")
def ko_dir(shared_data) -> Path:
    return shared_data / "cjk" / "ko"


@pytest.fixture(scope="module")
def korean(ko_dir) -> list[str]:
    return _korean_sentences(ko_dir)


@pytest.fixture(scope="module", params=[True, False], ids=["strip", "no-strip"])
def korean_vocab(request, korean, tmp_path_factory):
    """(strip_accents, TrainedVocab, directory with its files) for a 3,000-entry uncased vocab of the sample."""
    config = VocabConfig(vocab_size=KOREAN_VOCAB_SIZE, strip_accents=request.param, show_progress=False)
    trained = train_wordpiece(korean, config)
    outdir = tmp_path_factory.mktemp("strip" if request.param else "nostrip")
    save_vocab(trained, str(outdir))
    return request.param, trained, outdir


# ---------------------------------------------------------------------------------------------------------
# the settings


def test_none_follows_do_lower_case_as_the_original():
    assert resolve_strip_accents(None, True) is True and resolve_strip_accents(None, False) is False
    assert resolve_strip_accents(False, True) is False and resolve_strip_accents(True, False) is True


@pytest.mark.parametrize(
    "normalizer, expected",
    [
        ({"type": "BertNormalizer", "lowercase": True, "strip_accents": None}, (True, True)),
        ({"type": "BertNormalizer", "lowercase": False, "strip_accents": None}, (False, False)),
        ({"type": "BertNormalizer", "lowercase": True, "strip_accents": False}, (True, False)),
        ({"type": "BertNormalizer", "lowercase": False, "strip_accents": True}, (False, True)),
        (
            {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}, {"type": "StripAccents"}]},
            (True, True),
        ),
        (None, (None, None)),
    ],
)
def test_tokenizer_json_settings_are_read_back(normalizer, expected):
    assert normalizer_settings(normalizer) == expected


def test_share_counts_hangul_and_non_latin_marks_but_not_latin_accents():
    english = accent_stripping_stats(Counter("Café déjà vu, naïve façade"))
    assert english.damaged == 0 and english.letters == 21
    korean = accent_stripping_stats(Counter("한국어 abc"))
    assert (korean.damaged, korean.hangul_syllables, korean.letters) == (3, 3, 6)
    assert korean.share == pytest.approx(0.5)
    # Vietnamese tone letters, Greek tonos, Russian й, a Devanagari virama (dropped): all changed
    others = accent_stripping_stats(Counter("ếάй्"))
    assert others.damaged == 4 and others.hangul_syllables == 0


def test_vocab_evidence_from_its_korean_entries():
    syllables = ["[PAD]", "[UNK]"] + [chr(0xAC00 + i) for i in range(30)]
    jamo = ["[PAD]", "[UNK]"] + [chr(0x1100 + i) for i in range(30)] + ["##" + chr(0x1161)]
    assert hangul_vocab_counts(syllables) == (30, 0) and vocab_strip_accents(syllables) is False
    assert hangul_vocab_counts(jamo) == (0, 31) and vocab_strip_accents(jamo) is True
    assert vocab_strip_accents(["[UNK]", "the", "##s"]) is None


# ---------------------------------------------------------------------------------------------------------
# make-shards' encoder: the ASCII shortcut and the full pipeline agree with and without stripping


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("strip_accents", [None, True, False])
def test_encoder_ids_equal_the_full_pipeline_with_and_without_stripping(
    korean, korean_vocab, do_lower_case, strip_accents
):
    _, trained, _ = korean_vocab
    vocab = Vocab.from_tokens(trained.tokens)
    encoder = SentenceEncoder(vocab, do_lower_case, strip_accents=strip_accents)
    ascii_lines = [
        line for line in (FIXTURES / "vocab" / "heldout.txt").read_text(encoding="utf-8").splitlines() if line.strip()
    ][:200]
    mixed = ["Café ÉTÉ naïve", "Ελληνικά ά", "Tiếng Việt", "हिन्दी", "\x00ctrl\x7f A-B"]
    # interleaved up to the shorter list
    sentences = [s for group in zip(korean, ascii_lines, strict=False) for s in group] + mixed
    assert any(s.isascii() for s in sentences) and not all(s.isascii() for s in sentences)
    expected = [e.ids for e in encoder.tokenizer.encode_batch_fast(sentences, add_special_tokens=False)]
    assert encoder.encode(sentences) == expected
    effective = resolve_strip_accents(strip_accents, do_lower_case)
    assert encoder.tokenizer.normalizer.normalize_str("한") == (
        unicodedata.normalize("NFD", "한") if effective else "한"
    )


# ---------------------------------------------------------------------------------------------------------
# the vocab and its tokenizer files on real Korean


def test_no_strip_accents_vocab_holds_syllables_and_no_jamo_the_input_lacks(korean, korean_vocab):
    strip, trained, outdir = korean_vocab
    syllables, jamo = hangul_vocab_counts(trained.tokens)
    input_jamo = {c for s in korean for c in s if is_conjoining_jamo(c)}
    vocab_jamo = {c for t in trained.tokens for c in t if is_conjoining_jamo(c)}
    if strip:
        assert syllables == 0 and jamo > 1000  # the trap: the vocab spends its entries on jamo
    else:
        assert syllables > 2000 and vocab_jamo <= input_jamo
    recorded = load_vocab(str(outdir / "tokenizer.json"))
    assert (recorded.do_lower_case, recorded.strip_accents) == (True, strip)
    assert json.loads((outdir / "tokenizer_config.json").read_text())["strip_accents"] is strip


def test_default_vocab_warns_with_the_share_and_the_fix(korean, korean_vocab):
    strip, trained, _ = korean_vocab
    warning = trained.accent_warning()
    if not strip:
        assert warning is None
        return
    stats = trained.stats.accent_stats()
    assert stats.share > 0.9  # nearly every letter of Korean prose is a syllable
    assert f"{stats.share:.1%}" in warning and "Hangul syllables" in warning
    assert "--no-strip-accents" in warning and "--cased" in warning


def test_english_vocab_does_not_warn():
    lines = (FIXTURES / "vocab" / "train.txt").read_text(encoding="utf-8").splitlines()
    trained = train_wordpiece(lines, VocabConfig(vocab_size=500, num_unused=0, show_progress=False))
    assert trained.stats.accent_stats().share < 0.01 and trained.accent_warning() is None


def test_googles_uncased_vocab_does_not_raise_the_korean_warning(uncased_vocab, cased_vocab):
    """Round two: the jamo warning fired on Google's English uncased vocab (70 jamo entries of 30,522, leftovers
    of a few Korean words): a vocab tells how it was built only when a share of it is Korean."""
    for path in (uncased_vocab, cased_vocab):
        vocab = load_vocab(str(path))
        for strip in (True, False):
            assert check_vocab_strip_accents(vocab.tokens, strip, str(path)) is None
    _, jamo = hangul_vocab_counts(load_vocab(str(uncased_vocab)).tokens)
    assert jamo == 70


def test_transformers_encodes_korean_to_bertprep_ids(korean, korean_vocab):
    transformers = need_module("transformers")
    strip, _trained, outdir = korean_vocab
    hf = transformers.AutoTokenizer.from_pretrained(str(outdir))
    encoder = SentenceEncoder(load_vocab(str(outdir / "tokenizer.json")), True, strip_accents=strip)
    cls_id, sep_id = hf.cls_token_id, hf.sep_token_id
    sentences = korean[:200]
    ours = encoder.encode(sentences)
    theirs = hf(sentences, add_special_tokens=True)["input_ids"]
    for ids, hf_ids in zip(ours, theirs, strict=True):
        assert hf_ids == [cls_id, *ids, sep_id]
    unk = hf.unk_token_id
    unk_share = sum(i == unk for ids in ours for i in ids) / sum(map(len, ours))
    assert unk_share < 0.01


# ---------------------------------------------------------------------------------------------------------
# the commands


def _make_shards(vocab: str, out: Path, *extra: str, ko_dir: Path):
    return _run(
        [
            "make-shards",
            "-i",
            str(ko_dir),
            "--input-format",
            "text",
            "--vocab",
            vocab,
            "-o",
            str(out),
            "--dupe-factor",
            "1",
            "--num-shards",
            "1",
            "-q",
            *extra,
            *BEAM_IN_PROCESS,
        ]
    )


def test_korean_end_to_end_build_vocab_make_shards_inspect(ko_dir, korean, tmp_path):
    vocab_dir = tmp_path / "vocab"
    built = _run(
        [
            "build-vocab",
            str(ko_dir),
            "-o",
            str(vocab_dir),
            "--vocab-size",
            str(KOREAN_VOCAB_SIZE),
            "--input-format",
            "text",
            "--no-strip-accents",
            "-q",
        ]
    )
    assert built.exit_code == 0, built.output
    assert "Warning" not in built.output
    tokens = (vocab_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    syllables, _ = hangul_vocab_counts(tokens)
    input_jamo = {c for s in korean for c in s if is_conjoining_jamo(c)}
    assert syllables > 2000 and {c for t in tokens for c in t if is_conjoining_jamo(c)} <= input_jamo

    out = tmp_path / "shards"
    made = _make_shards(str(vocab_dir / "tokenizer.json"), out, ko_dir=ko_dir)
    assert made.exit_code == 0, made.output
    assert "Warning" not in made.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["statistics"]["unk_rate"] < 0.01
    assert manifest["config"]["strip_accents"] is False and manifest["vocab"]["strip_accents"] is False

    shown = _run(["inspect", str(out), "-n", "3"])
    assert shown.exit_code == 0, shown.output
    assert "strip_accents=False" in shown.output
    examples = "\n".join(line for line in shown.output.splitlines() if line.startswith("#"))
    assert sum(map(is_hangul_syllable, examples)) > 100  # whole syllables in the decoded examples
    assert not any(is_conjoining_jamo(c) for c in examples)

    # the defaults: one warning, with the share of the letters read
    default_dir = tmp_path / "default-vocab"
    default = _run(
        [
            "build-vocab",
            str(ko_dir),
            "-o",
            str(default_dir),
            "--vocab-size",
            str(KOREAN_VOCAB_SIZE),
            "--input-format",
            "text",
            "-q",
        ]
    )
    assert default.exit_code == 0, default.output
    assert default.output.count("Warning:") == 1
    share = accent_stripping_stats(Counter("".join(korean))).share
    assert f"changes {share:.1%} of the letters read" in default.output
    assert "--no-strip-accents" in default.output


def test_make_shards_refuses_a_strip_accents_mismatch_with_the_tokenizer_json(korean_vocab, ko_dir, tmp_path):
    strip, _, outdir = korean_vocab
    flag = "--strip-accents" if not strip else "--no-strip-accents"
    result = _make_shards(str(outdir / "tokenizer.json"), tmp_path / "shards", flag, ko_dir=ko_dir)
    assert result.exit_code == 2
    assert f"strip_accents={strip}" in result.output and flag in result.output
    assert not (tmp_path / "shards" / "manifest.json").exists()


def test_make_shards_follows_the_tokenizer_json_beside_a_vocab_txt(korean_vocab, ko_dir, tmp_path):
    """Round two: `build-vocab --no-strip-accents` on Korean, then `make-shards --vocab DIR/vocab.txt` without
    the flag warned and wrote shards with a 77.7% [UNK] rate. The tokenizer.json beside the vocab.txt says
    how the vocab was built: an unset option follows it, a contrary one is refused naming that file."""
    strip, _, outdir = korean_vocab
    result = _make_shards(str(outdir / "vocab.txt"), tmp_path / "shards", ko_dir=ko_dir)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    # as with --vocab DIR/tokenizer.json: the recorded setting is followed without a warning (build-vocab
    # warned about a stripped Korean vocab when it made it)
    assert "Warning" not in result.output
    if strip:
        assert "strip_accents" not in manifest["config"]  # the default run records nothing new
    else:
        assert manifest["statistics"]["unk_rate"] < 0.01
        assert manifest["config"]["strip_accents"] is False
    flag = "--strip-accents" if not strip else "--no-strip-accents"
    refused = _make_shards(str(outdir / "vocab.txt"), tmp_path / "refused", flag, ko_dir=ko_dir)
    assert refused.exit_code == 2
    assert f"{outdir / 'tokenizer.json'}: the tokenizer was built with strip_accents={strip}" in refused.output
    assert f"Invalid value for {flag}" in refused.output
    assert not (tmp_path / "refused" / "manifest.json").exists()


def test_make_shards_warns_once_about_a_plain_vocab_txt(korean_vocab, ko_dir, tmp_path):
    """A vocab.txt alone (as Google's) records nothing: today's defaults, and the Korean entries warn; a
    syllable vocab.txt that the default stripping would turn into [UNK]s is refused unless the option is given
    (it made shards of 86% [UNK] after a warning)."""
    strip, _, outdir = korean_vocab
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "vocab.txt").write_bytes((outdir / "vocab.txt").read_bytes())
    result = _make_shards(str(tmp_path / "plain" / "vocab.txt"), tmp_path / "shards", ko_dir=ko_dir)
    if not strip:  # a syllable vocab.txt with the default stripping: every Korean word would be [UNK]
        assert result.exit_code == 2, result.output
        assert "Invalid value for --vocab" in result.output and "Hangul syllables" in result.output
        assert "[UNK]" in result.output
        assert "does not record how it was built" in result.output
        assert not (tmp_path / "shards" / "manifest.json").exists()
        result = _make_shards(str(tmp_path / "plain" / "vocab.txt"), tmp_path / "shards", "--no-strip-accents",
                              ko_dir=ko_dir)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / "shards" / "manifest.json").read_text())["statistics"]["unk_rate"] < 0.01
        return
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    # a vocab built with the defaults, used with the defaults: consistent but bad for Korean
    assert result.output.count("Warning:") == 1
    assert "conjoining Hangul jamo" in result.output and "--no-strip-accents" in result.output
    # the default run records nothing new: strip_accents follows do_lower_case
    assert "strip_accents" not in manifest["config"] and "strip_accents" not in manifest["vocab"]


def test_a_tokenizer_json_of_another_vocab_beside_a_vocab_txt_is_refused(korean_vocab, tmp_path):
    _, _, outdir = korean_vocab
    (tmp_path / "vocab.txt").write_bytes((outdir / "vocab.txt").read_bytes())
    (tmp_path / "tokenizer.json").write_bytes((FIXTURES / "pipeline" / "vocab.txt").read_bytes())
    with pytest.raises(ValueError, match=re.escape("tokenizer.json: not valid JSON")):
        load_vocab(str(tmp_path / "vocab.txt"))
    spec = json.loads((outdir / "tokenizer.json").read_text())
    spec["model"]["vocab"] = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=re.escape("is not the vocab.txt beside it")):
        load_vocab(str(tmp_path / "vocab.txt"))


def test_help_explains_the_option():
    for command in ("build-vocab", "make-shards", "finetune", "predict", "export"):
        result = _run([command, "--help"])
        assert result.exit_code == 0
        assert "--strip-accents / --no-strip-accents" in result.output
    for command in ("build-vocab", "make-shards"):
        assert "Hangul" in _run([command, "--help"]).output


def test_fine_tuning_takes_the_models_record_unless_told_otherwise():
    from bertprep.core.normalization import resolve_strip_accents_setting

    assert resolve_strip_accents_setting(None, False, True, True) is False  # a --no-strip-accents model
    assert resolve_strip_accents_setting(None, True, True, True) is True
    assert resolve_strip_accents_setting(None, True, True, False) is False  # a casing override changes both
    assert resolve_strip_accents_setting(None, None, None, True) is True  # nothing recorded: the original
    assert resolve_strip_accents_setting(True, False, True, True) is True  # explicit wins (with a warning)


# ---------------------------------------------------------------------------------------------------------
# bertprep export: the tokenizer files of an exported model tokenize Korean as bertprep did


def test_export_records_strip_accents_and_transformers_encodes_korean_to_bertprep_ids(korean, korean_vocab, tmp_path):
    transformers = need_module("transformers")
    torch = need_module("torch")
    from bertprep.bert_model import checkpoint as ckpt
    from bertprep.bert_model.hf.interop import load_model_source
    from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
    from bertprep.bert_model.optim import create_optimizer
    from bertprep.core.vocab_files import WordPieceTokenizer

    strip, trained, outdir = korean_vocab
    # a pre-training checkpoint whose shards' manifest records the setting as make-shards writes it
    shards = tmp_path / "shards"
    shards.mkdir()
    vocab_info = {"do_lower_case": True, **({} if strip else {"strip_accents": False})}
    (shards / "manifest.json").write_text(json.dumps({"vocab": vocab_info, "config": {"do_lower_case": True}}))
    torch.manual_seed(0)
    model = BertForPreTraining(
        BertConfig(
            vocab_size=len(trained.tokens),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=48,
            max_position_embeddings=128,
        )
    )
    state = {"model_config": model.config.to_dict(), "data": {"vocab_sha256": "x", "shards": str(shards)}}
    ckpt.save_checkpoint(
        str(tmp_path / "run"),
        1,
        model=model,
        optimizer=create_optimizer(model),
        state=state,
        hf_config=model.config.to_hf_dict(),
        vocab_file=str(outdir / "vocab.txt"),
    )

    result = _run(["export", str(tmp_path / "run"), "-o", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert config["strip_accents"] is strip and config["do_lower_case"] is True
    assert load_model_source(str(tmp_path / "hf")).strip_accents is strip  # read back for finetune/predict
    from bertprep.bert_model.inference.fill_mask import load_mlm_model

    assert load_mlm_model(str(tmp_path / "hf"))[1].strip_accents is strip
    from bertprep.bert_model.inference.features import load_encoder

    assert load_encoder(str(tmp_path / "hf"))[1].strip_accents is strip

    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    pipeline_ids = SentenceEncoder(Vocab.from_tokens(trained.tokens), True, strip_accents=strip).encode(korean)
    finetune_ids = [e.ids for e in WordPieceTokenizer.from_tokens(trained.tokens, True, strip).encode_batch(korean)]
    hf_ids = hf(korean, add_special_tokens=False)["input_ids"]
    assert hf_ids == pipeline_ids == finetune_ids
    # an explicit override is recorded as given
    again = _run(
        [
            "export",
            str(tmp_path / "run"),
            "-o",
            str(tmp_path / "hf2"),
            "--strip-accents" if not strip else "--no-strip-accents",
        ]
    )
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "hf2" / "tokenizer_config.json").read_text())["strip_accents"] is (not strip)
