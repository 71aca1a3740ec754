"""``train --init-from`` a model whose vocab the shards' vocab extends (bert_model/pretrain/vocab_extension.py).

A tiny Hugging Face BERT with a 64-entry vocab (two ``[unusedK]`` slots) continues pre-training on shards of a
66-entry extension: the embeddings, the tied decoder and the MLM bias grow, new rows start as the mean of the
old pieces' rows, the old rows are untouched, and export and fill-mask work on the result. A tiny ModernBERT
(a transformers ``ModernBertForMaskedLM`` directory, and a bertprep ModernBERT run) grows the same way: its token
embeddings, the decoder tied to them and the decoder bias.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.hf.interop import load_model_source, load_pretraining_weights
from bertprep.bert_model.inference.fill_mask import fill_mask, load_mlm_model
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertForMaskedLM
from bertprep.bert_model.pretrain.trainer import train
from bertprep.bert_model.pretrain.vocab_extension import check_extension, extend_source_vocab, extension_ids
from bertprep.cli.main import cli
from conftest import need_module
from model_factory import init_from_train_config, tiny_bert, tiny_modernbert, write_uncased_vocab
from shard_factory import write_shard_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")

transformers = need_module("transformers")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["psi", "##lo", "##cy", "##bin", "the", "cat", "##s", "p", "##i"]
OLD = SPECIALS + ["[unused0]", "[unused1]"] + WORDS + [f"w{i}" for i in range(64 - 16)]
# [unused0] and [unused1] take two pieces; two more are appended.
NEW = [*OLD[:5], "psilocybin", "##locy", *OLD[7:], "cats", "##bincy"]
TINY = tiny_bert(vocab_size=len(OLD), intermediate_size=64, pad_token_id=0)
# ModernBERT of the same vocab: layers 0 and 3 global, 1 and 2 local (window 8); ids of OLD's special tokens.
TINY_MODERNBERT = tiny_modernbert(vocab_size=len(OLD))
MODERN_EMB = "model.embeddings.tok_embeddings.weight"


def _save_hf(path, cls_name="BertForMaskedLM"):
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(transformers.BertConfig(**TINY)).eval()
    model.save_pretrained(path)
    write_uncased_vocab(path, OLD)
    return path


def _save_hf_modernbert(path):
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(**ModernBertConfig(**TINY_MODERNBERT).to_hf_dict())
    model = transformers.ModernBertForMaskedLM(config)
    with torch.no_grad():  # transformers starts the decoder bias at 0: random, so that growing it is seen
        model.decoder.bias.normal_()
    model.eval().save_pretrained(path)
    write_uncased_vocab(path, OLD)
    return path


def _config(shards, out, init_from, **kw):
    return init_from_train_config(shards, out, init_from, **{"max_steps": 2, "warmup_steps": 1, "log_every": 1, **kw})


#: Each new token of NEW and the old pieces it splits into: its rows start as their mean.
GROWN = {
    "psilocybin": ["psi", "##lo", "##cy", "##bin"],
    "##locy": ["##lo", "##cy"],  # a ## entry splits as a continuation
    "cats": ["cat", "##s"],
    "##bincy": ["##bin", "##cy"],
}


def _rows_of(pieces, weight):
    """The mean of ``weight``'s rows (or entries) of the old ``pieces``."""
    return weight[[OLD.index(p) for p in pieces]].mean(0)


def _grow_from_hf(tmp_path, hf_dir, caplog):
    """One step at lr 1e-9 from the Hugging Face directory ``hf_dir`` (vocab OLD) on shards of NEW into
    ``tmp_path/run``: the model grows to NEW's size and the log says how; the TrainResult."""
    shards = tmp_path / "shards"
    write_shard_dir(shards, num_shards=2, rows_per_shard=16, vocab=NEW, max_seq_length=32, seed=1)
    with caplog.at_level(logging.INFO, logger="bertprep.train"):
        result = train(_config(shards, tmp_path / "run", hf_dir, learning_rate=1e-9, max_steps=1))
    assert result.step == 1 and result.model.config.vocab_size == len(NEW)
    assert "4 new tokens (2 in [unusedK] slots, 2 appended; vocab 64 -> 66)" in caplog.text
    assert "'psilocybin' = mean(psi ##lo ##cy ##bin)" in caplog.text
    return result


def _train_old_then_new(tmp_path, hf_dir):
    """One step from ``hf_dir`` on shards of OLD (``run1``), then one step at lr 1e-9 from that bertprep run on
    shards of NEW (``run2``); the two TrainResults."""
    old_shards, new_shards = tmp_path / "old-shards", tmp_path / "new-shards"
    write_shard_dir(old_shards, num_shards=1, rows_per_shard=16, vocab=OLD, max_seq_length=32, seed=1)
    write_shard_dir(new_shards, num_shards=1, rows_per_shard=16, vocab=NEW, max_seq_length=32, seed=2)
    first = train(_config(old_shards, tmp_path / "run1", hf_dir, max_steps=1))
    second = train(_config(new_shards, tmp_path / "run2", tmp_path / "run1", max_steps=1, learning_rate=1e-9))
    return first, second


def _fill_mask_predicts_the_new_tokens(run, export, runner):
    """fill-mask of the grown ``run`` keeps the new tokens whole and predicts them too; the CLI fills a mask with
    the ``export`` of it."""
    mlm, tokenizer = load_mlm_model(str(run))
    [filled] = fill_mask(mlm, tokenizer, ["psilocybin [MASK] cats"], top_k=len(NEW))
    assert filled.pieces == ["[CLS]", "psilocybin", "[MASK]", "cats", "[SEP]"]  # new tokens are whole pieces
    assert {piece for piece, _ in filled.masks[0].candidates} == set(NEW)  # the new tokens are predicted too
    shown = runner.invoke(cli, ["fill-mask", "--model", str(export), "the [MASK] cats"])
    assert shown.exit_code == 0, shown.output


def test_an_extension_keeps_every_old_id_except_unused_slots():
    assert extension_ids(OLD, NEW) == [5, 6, 64, 65]
    assert extension_ids(OLD, OLD) == []
    assert extension_ids(OLD, OLD[:-1]) is None
    moved = list(NEW)
    moved[11], moved[12] = moved[12], moved[11]
    assert extension_ids(OLD, moved) is None
    with pytest.raises(ValueError, match=r"does not extend the vocab of M \(64\): at id 11 the model has 'the'"):
        check_extension(OLD, moved, shards="S", model="M")
    with pytest.raises(ValueError, match=re.escape("build-vocab --extend M/vocab.txt")):
        check_extension(OLD, moved, shards="S", model="M")
    reused = list(NEW)
    reused[5] = "cat"  # a slot may not take a token the model already has at another id
    with pytest.raises(ValueError, match=r"at id 5 .*already has elsewhere"):
        check_extension(OLD, reused, shards="S", model="M")


def test_new_rows_are_the_mean_of_their_old_pieces(tmp_path):
    source = load_model_source(str(_save_hf(tmp_path / "hf")))
    grown = extend_source_vocab(source, NEW, shards="S")
    assert grown.config.vocab_size == len(NEW) and grown.vocab_tokens == NEW
    old_emb = source.state_dict["bert.embeddings.word_embeddings.weight"]
    emb = grown.state_dict["bert.embeddings.word_embeddings.weight"]
    bias = grown.state_dict["cls.predictions.bias"]
    assert emb.shape == (66, 32) and bias.shape == (66,)
    keep = [i for i in range(64) if i not in (5, 6)]
    torch.testing.assert_close(emb[keep], old_emb[keep], rtol=0, atol=0)
    old_bias = source.state_dict["cls.predictions.bias"]
    for token, pieces in GROWN.items():
        torch.testing.assert_close(emb[NEW.index(token)], _rows_of(pieces, old_emb))
        torch.testing.assert_close(bias[NEW.index(token)], _rows_of(pieces, old_bias))
    assert extend_source_vocab(source, OLD, shards="S") is source


def test_train_init_from_hf_onto_extended_shards_grows_the_model_and_exports(tmp_path, caplog):
    hf_dir = _save_hf(tmp_path / "hf")
    model = _grow_from_hf(tmp_path, hf_dir, caplog).model
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
    assert model.state_dict()["cls.predictions.bias"].shape == (len(NEW),)  # (64-row padding inside the model)
    old_emb = load_model_source(str(hf_dir)).state_dict["bert.embeddings.word_embeddings.weight"]
    after_one_step = model.bert.embeddings.word_embeddings.weight.detach()
    torch.testing.assert_close(after_one_step[10], old_emb[10], atol=1e-6, rtol=0)  # an old row, at lr 1e-9

    runner = CliRunner()
    exported = runner.invoke(cli, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "export")])
    assert exported.exit_code == 0, exported.output
    hf = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "export"))
    assert hf.config.vocab_size == len(NEW)
    assert (tmp_path / "export" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == NEW

    _fill_mask_predicts_the_new_tokens(tmp_path / "run", tmp_path / "export", runner)


@pytest.mark.slow  # ~3 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_train_init_from_a_bertprep_run_onto_extended_shards(tmp_path):
    hf_dir = _save_hf(tmp_path / "hf")
    first, second = _train_old_then_new(tmp_path, hf_dir)
    assert first.model.config.vocab_size == 64 and second.model.config.vocab_size == len(NEW)
    trained = first.model.bert.embeddings.word_embeddings.weight.detach()
    pieces = [OLD.index(p) for p in ("cat", "##s")]
    torch.testing.assert_close(
        second.model.bert.embeddings.word_embeddings.weight[NEW.index("cats")].detach(),
        trained[pieces].mean(0),
        atol=1e-6,
        rtol=0,
    )


def test_shards_of_a_larger_vocab_that_moves_old_ids_are_refused_before_any_step(tmp_path):
    hf_dir = _save_hf(tmp_path / "hf")
    moved = list(NEW)
    moved[11], moved[12] = moved[12], moved[11]
    shards = tmp_path / "shards"
    write_shard_dir(shards, num_shards=1, rows_per_shard=8, vocab=moved, max_seq_length=32, seed=1)
    with pytest.raises(ValueError, match=r"does not extend the vocab of .*hf \(64\): at id 11 the model has 'the'"):
        train(_config(shards, tmp_path / "run", hf_dir))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_modernbert_new_rows_are_the_mean_of_their_old_pieces(tmp_path):
    source = load_model_source(str(_save_hf_modernbert(tmp_path / "hf")))
    assert isinstance(source.config, ModernBertConfig)
    grown = extend_source_vocab(source, NEW, shards="S")
    assert isinstance(grown.config, ModernBertConfig)
    assert grown.config.vocab_size == len(NEW) and grown.vocab_tokens == NEW
    old_emb, old_bias = source.state_dict[MODERN_EMB], source.state_dict["decoder.bias"]
    emb, bias = grown.state_dict[MODERN_EMB], grown.state_dict["decoder.bias"]
    assert emb.shape == (66, 32) and bias.shape == (66,)
    keep = [i for i in range(64) if i not in (5, 6)]
    torch.testing.assert_close(emb[keep], old_emb[keep], rtol=0, atol=0)
    torch.testing.assert_close(bias[keep], old_bias[keep], rtol=0, atol=0)
    for token, pieces in GROWN.items():
        torch.testing.assert_close(emb[NEW.index(token)], _rows_of(pieces, old_emb))
        torch.testing.assert_close(bias[NEW.index(token)], _rows_of(pieces, old_bias))
    assert "decoder.weight" not in source.state_dict  # (save_pretrained leaves the tied alias out)
    # A file that holds the alias too: it grows alike, so the model still loads it as tied.
    aliased = dataclasses.replace(source, state_dict={**source.state_dict, "decoder.weight": old_emb.clone()})
    grown_aliased = extend_source_vocab(aliased, NEW, shards="S")
    torch.testing.assert_close(grown_aliased.state_dict["decoder.weight"], emb, rtol=0, atol=0)
    for state_dict in (grown.state_dict, grown_aliased.state_dict):
        model = ModernBertForMaskedLM(grown.config)
        assert load_pretraining_weights(model, state_dict) == ([], [])  # (initialised, unused)
        assert model.decoder.weight.data_ptr() == model.model.embeddings.tok_embeddings.weight.data_ptr()


def test_train_init_from_hf_modernbert_onto_extended_shards_grows_the_model_and_exports(tmp_path, caplog):
    hf_dir = _save_hf_modernbert(tmp_path / "hf")
    model = _grow_from_hf(tmp_path, hf_dir, caplog).model
    assert isinstance(model, ModernBertForMaskedLM)
    assert model.decoder.weight.data_ptr() == model.model.embeddings.tok_embeddings.weight.data_ptr()
    assert model.decoder.bias.shape == (len(NEW),)
    source = load_model_source(str(hf_dir))
    old_emb, old_bias = source.state_dict[MODERN_EMB], source.state_dict["decoder.bias"]
    after_one_step = model.model.embeddings.tok_embeddings.weight.detach()
    torch.testing.assert_close(after_one_step[10], old_emb[10], atol=1e-6, rtol=0)  # an old row, at lr 1e-9
    for token, pieces in GROWN.items():
        torch.testing.assert_close(after_one_step[NEW.index(token)], _rows_of(pieces, old_emb), atol=1e-6, rtol=0)
        torch.testing.assert_close(
            model.decoder.bias.detach()[NEW.index(token)], _rows_of(pieces, old_bias), atol=1e-6, rtol=0
        )

    runner = CliRunner()
    exported = runner.invoke(cli, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "export")])
    assert exported.exit_code == 0, exported.output
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "export")).eval()
    assert type(hf).__name__ == "ModernBertForMaskedLM" and hf.config.vocab_size == len(NEW)
    torch.testing.assert_close(hf.model.embeddings.tok_embeddings.weight.detach(), after_one_step, rtol=0, atol=0)
    assert hf.decoder.weight.data_ptr() == hf.model.embeddings.tok_embeddings.weight.data_ptr()
    assert (tmp_path / "export" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == NEW
    input_ids = torch.tensor([[2, NEW.index("psilocybin"), 4, NEW.index("cats"), 3]])
    with torch.no_grad():
        ours = model.eval()(input_ids, attention_mask=torch.ones_like(input_ids)).logits
        theirs = hf(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
    assert theirs.shape == (1, 5, len(NEW)) and (ours - theirs).abs().max().item() < 1e-4

    _fill_mask_predicts_the_new_tokens(tmp_path / "run", tmp_path / "export", runner)


def test_train_init_from_a_bertprep_modernbert_run_onto_extended_shards(tmp_path):
    hf_dir = _save_hf_modernbert(tmp_path / "hf")
    first, second = _train_old_then_new(tmp_path, hf_dir)
    assert isinstance(second.model, ModernBertForMaskedLM)
    assert first.model.config.vocab_size == 64 and second.model.config.vocab_size == len(NEW)
    trained = first.model.model.embeddings.tok_embeddings.weight.detach()
    grown = second.model.model.embeddings.tok_embeddings.weight.detach()
    torch.testing.assert_close(grown[NEW.index("cats")], _rows_of(["cat", "##s"], trained), atol=1e-6, rtol=0)
    torch.testing.assert_close(grown[10], trained[10], atol=1e-6, rtol=0)
    trained_bias = first.model.decoder.bias.detach()
    torch.testing.assert_close(
        second.model.decoder.bias.detach()[NEW.index("cats")], _rows_of(["cat", "##s"], trained_bias), atol=1e-6, rtol=0
    )
    assert second.model.decoder.weight.data_ptr() == second.model.model.embeddings.tok_embeddings.weight.data_ptr()
