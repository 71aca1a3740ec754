"""`bertprep train --init-from` a Hugging Face BERT directory: continued pre-training (issue 11).

Each layout a user may hold (``BertModel`` with and without the ``bert.`` prefix, ``BertForMaskedLM``,
``BertForPreTraining``; safetensors or ``pytorch_model.bin``) starts a ``BertForPreTraining`` whose encoder
(and MLM head, where the source has one) computes exactly what ``transformers`` computes; a shard vocab that
differs from the model's stops the run before any step, naming the first differing id.
"""

from __future__ import annotations

import json
import logging
import re

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.hf.interop import check_same_vocab, load_model_source, load_pretraining_weights
from bertprep.bert_model.models.bert import BertForPreTraining
from bertprep.bert_model.pretrain.trainer import train
from bertprep.cli.main import cli
from conftest import need_module
from model_factory import init_from_train_config, tiny_bert, write_uncased_vocab
from shard_factory import make_vocab, write_shard_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")

transformers = need_module("transformers")

VOCAB_SIZE = 64
TINY = tiny_bert(vocab_size=VOCAB_SIZE, intermediate_size=64, pad_token_id=0)


def _save_hf(path, cls_name: str, *, safe: bool = True, vocab: list[str] | None = None):
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY)
    model = getattr(transformers, cls_name)(config).eval()
    model.save_pretrained(path, safe_serialization=safe)
    write_uncased_vocab(path, vocab or make_vocab(VOCAB_SIZE))
    return model


def _batch():
    g = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, VOCAB_SIZE, (2, 12), generator=g)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 6:] = 1
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0
    return input_ids, token_type_ids, attention_mask


@pytest.mark.parametrize(
    "cls_name, safe",
    [
        ("BertModel", True),
        ("BertModel", False),
        ("BertForMaskedLM", True),
        ("BertForPreTraining", True),
        ("BertForPreTraining", False),
    ],
)
def test_every_hf_layout_starts_a_pretraining_model_equal_to_transformers(tmp_path, cls_name, safe):
    hf = _save_hf(tmp_path, cls_name, safe=safe)
    source = load_model_source(str(tmp_path))
    assert source.kind == "huggingface" and source.architecture == cls_name
    model = BertForPreTraining(source.config).eval()
    initialised, unused = load_pretraining_weights(model, source.state_dict)
    assert not unused
    heads = {
        "BertModel": {"cls.predictions.bias", "cls.predictions.transform.dense.weight", "cls.seq_relationship.weight"},
        "BertForMaskedLM": {"bert.pooler.dense.weight", "cls.seq_relationship.weight"},
        "BertForPreTraining": set(),
    }[cls_name]
    assert heads <= set(initialised)
    if cls_name == "BertForPreTraining":
        assert initialised == []
    assert not any(k.startswith(("bert.embeddings.", "bert.encoder.")) for k in initialised)

    input_ids, token_type_ids, attention_mask = _batch()
    with torch.no_grad():
        ours_seq = model.bert(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask).last_hidden_state
        base = hf if cls_name == "BertModel" else hf.bert
        theirs = base(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        keep = attention_mask.bool()
        torch.testing.assert_close(ours_seq[keep], theirs.last_hidden_state[keep], atol=1e-5, rtol=1e-5)
        if cls_name != "BertModel":  # the source's MLM head came along: same logits at every position
            their_logits = (
                hf(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask).logits
                if cls_name == "BertForMaskedLM"
                else hf(
                    input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask
                ).prediction_logits
            )
            our_logits = model.cls.predictions(ours_seq)
            torch.testing.assert_close(our_logits[keep], their_logits[keep], atol=1e-4, rtol=1e-4)
        # The decoder stays tied to the word embeddings.
        assert (
            model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
        )


def test_fine_tuned_head_keys_are_reported_unused(tmp_path):
    _save_hf(tmp_path, "BertForSequenceClassification")
    source = load_model_source(str(tmp_path))
    _, unused = load_pretraining_weights(BertForPreTraining(source.config), source.state_dict)
    assert unused == ["classifier.bias", "classifier.weight"]


def test_another_model_size_or_a_non_bert_state_dict_is_refused(tmp_path):
    _save_hf(tmp_path, "BertModel")
    source = load_model_source(str(tmp_path))
    bigger = BertForPreTraining(type(source.config)(**{**TINY, "hidden_size": 48, "num_attention_heads": 2}))
    with pytest.raises(ValueError, match="other shapes"):
        load_pretraining_weights(bigger, source.state_dict)
    with pytest.raises(ValueError, match="lack encoder parameters"):
        load_pretraining_weights(BertForPreTraining(source.config), {"classifier.weight": torch.zeros(2, 32)})


def test_check_same_vocab_names_the_first_differing_id():
    vocab = make_vocab(20)
    check_same_vocab(vocab, list(vocab), shards="S", model="M")
    other = list(vocab)
    other[7] = "zzz"
    with pytest.raises(ValueError, match=r"differs from M/vocab.txt at id 7: 'w7' in the shards, 'zzz' in the model"):
        check_same_vocab(vocab, other, shards="S", model="M")
    with pytest.raises(ValueError, match=re.escape("has 20 entries and M/vocab.txt 19: they differ from id 19 on")):
        check_same_vocab(vocab, vocab[:-1], shards="S", model="M")
    with pytest.raises(ValueError, match=re.escape("has no vocab.txt")):
        check_same_vocab(vocab, None, shards="S", model="M")


def _shards(root, vocab=None):
    write_shard_dir(
        root, num_shards=2, rows_per_shard=24, vocab_size=VOCAB_SIZE, max_seq_length=32, seed=1, vocab=vocab
    )
    return root


def _train_config(shards, out, hf_dir, **kw):
    settings = dict(max_steps=3, warmup_steps=1, log_every=1, hidden_dropout_prob=0.0)
    return init_from_train_config(shards, out, hf_dir, **{**settings, **kw})


def test_train_init_from_hf_directory_starts_from_its_weights_and_logs_new_heads(tmp_path, caplog):
    hf_dir = tmp_path / "hf"
    _save_hf(hf_dir, "BertModel")
    shards = _shards(tmp_path / "shards")
    with caplog.at_level(logging.INFO, logger="bertprep.train"):
        result = train(_train_config(shards, tmp_path / "run", hf_dir, max_steps=1, learning_rate=1e-9))
    assert result.step == 1
    log = caplog.text
    assert "initialised as in the original" in log and "cls.seq_relationship.weight" in log
    assert "bert.encoder.layer.0" not in log.split("initialised as in the original")[1].split("\n")[0]
    # Dropout from the command line applies; the architecture is the directory's.
    assert result.model.config.hidden_dropout_prob == 0.0 and result.model.config.hidden_size == 32
    # After one step at lr 1e-9 the encoder still equals the source's.
    source = load_model_source(str(hf_dir))
    weight = result.model.state_dict()["bert.encoder.layer.1.attention.self.query.weight"]
    torch.testing.assert_close(
        weight, source.state_dict["bert.encoder.layer.1.attention.self.query.weight"], atol=1e-6, rtol=0
    )


def test_train_init_from_hf_refuses_shards_of_another_vocab_before_any_step(tmp_path):
    hf_dir = tmp_path / "hf"
    vocab = make_vocab(VOCAB_SIZE)
    _save_hf(hf_dir, "BertForMaskedLM")
    other = list(vocab)
    other[40], other[41] = other[41], other[40]  # same size and tokens, two ids swapped
    shards = _shards(tmp_path / "shards", vocab=other)
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--shards",
            str(shards),
            "-o",
            str(tmp_path / "run"),
            "--init-from",
            str(hf_dir),
            "--max-steps",
            "2",
            "--warmup-steps",
            "0",
            "--num-workers",
            "0",
            "--no-progress",
        ],
    )
    assert result.exit_code != 0
    assert f"differs from {hf_dir}/vocab.txt at id 40: 'w41' in the shards, 'w40' in the model" in result.output
    assert "make-shards --vocab" in result.output
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_train_init_from_hf_refuses_shards_of_another_casing(tmp_path):
    hf_dir = tmp_path / "hf"
    _save_hf(hf_dir, "BertModel")
    (hf_dir / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}), encoding="utf-8")
    shards = _shards(tmp_path / "shards")  # the factory writes do_lower_case=True
    with pytest.raises(ValueError, match=r"do_lower_case=True but .* do_lower_case=False"):
        train(_train_config(shards, tmp_path / "run", hf_dir))


@pytest.mark.slow
def test_train_init_from_minilm_runs_on_shards_of_its_vocab(tmp_path, minilm_dir):
    """The real all-MiniLM-L6-v2 (a BertModel without MLM head) continues pre-training on shards of its vocab."""
    vocab = (minilm_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    shards = tmp_path / "shards"
    write_shard_dir(shards, num_shards=2, rows_per_shard=8, vocab=vocab, max_seq_length=32, seed=1)
    result = train(_train_config(shards, tmp_path / "run", minilm_dir, max_steps=2, batch_size=4))
    assert result.step == 2 and result.model.config.num_hidden_layers == 6
    assert result.model.config.hidden_size == 384 and result.model.config.vocab_size == 30522
    assert result.checkpoint is not None


def test_train_init_from_a_model_with_more_rows_than_its_tokenizer_keeps_them_through_export(tmp_path):
    """A padded embedding matrix (vocab_size 64, a tokenizer of 60 entries: as MosaicBERT's 30,528 rows for
    30,522 WordPieces) is accepted, since every id of the shards fits; the export keeps the model's 64 rows."""
    hf_dir = tmp_path / "hf"
    _save_hf(hf_dir, "BertForPreTraining", vocab=make_vocab(VOCAB_SIZE - 4))
    shards = _shards(tmp_path / "shards", vocab=make_vocab(VOCAB_SIZE - 4))
    result = train(_train_config(shards, tmp_path / "run", hf_dir, max_steps=1))
    assert result.model.config.vocab_size == VOCAB_SIZE
    exported = CliRunner().invoke(cli, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "export")])
    assert exported.exit_code == 0, exported.output
    assert json.loads((tmp_path / "export" / "config.json").read_text())["vocab_size"] == VOCAB_SIZE
    assert len((tmp_path / "export" / "vocab.txt").read_text(encoding="utf-8").split()) == VOCAB_SIZE - 4
    hf = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "export"))
    assert hf.config.vocab_size == VOCAB_SIZE and hf.bert.embeddings.word_embeddings.weight.shape[0] == VOCAB_SIZE
