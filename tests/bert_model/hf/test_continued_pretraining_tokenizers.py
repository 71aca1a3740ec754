"""Continued pre-training of a published RoBERTa or ModernBERT with its own BPE tokenizer, against transformers.

Each model is a small random-weight ``RobertaForMaskedLM`` / ``ModernBertForMaskedLM`` saved by transformers'
``save_pretrained`` beside a byte-level BPE tokenizer trained in the test (``tokenizer_factory``: RoBERTa's
``<s> <pad> </s> <unk> <mask>``, ModernBERT's ``[CLS] [SEP] [MASK] [PAD] [UNK]`` after the pieces). The shards are
made with ``--vocab DIR`` and ``--objective none``; then:

* ``train --model DIR``: the first step's masked-LM loss equals transformers' loss on the same batch within 1e-5;
* ``export`` of the run: ``AutoModelForMaskedLM`` loads it (``RobertaForMaskedLM`` / ``ModernBertForMaskedLM``) and
  its logits equal the run's model's within 1e-4, and ``AutoTokenizer`` on it encodes as the run's tokenizer;
* ``fill-mask``: the top-5 pieces equal transformers' ``pipeline("fill-mask")`` top-5 on the directory.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.inference.fill_mask import fill_mask, load_mlm_model
from bertprep.bert_model.pretrain import architectures
from bertprep.bert_model.pretrain.trainer import train
from bertprep.cli.main import cli
from bertprep.core.pretrained_tokenizer import load_pretrained_tokenizer
from conftest import FIXTURES, need_module
from model_factory import init_from_train_config
from tokenizer_factory import modernbert_tokenizer_dir, roberta_tokenizer_dir

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.usefixtures("one_torch_thread")

INPUTS = [FIXTURES / "pipeline" / "a.txt", FIXTURES / "pipeline" / "b.txt"]
SIZE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
PROBES = ["The man was there, said [MASK].", "He [MASK] the door and went out."]


def _roberta(directory):
    roberta_tokenizer_dir(directory)
    tokenizer = load_pretrained_tokenizer(str(directory))
    config = transformers.RobertaConfig(
        vocab_size=len(tokenizer.tokens),
        max_position_embeddings=64 + 2,  # RoBERTa's positions start at pad_token_id + 1
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        layer_norm_eps=1e-5,
        **SIZE,
    )
    return transformers.RobertaForMaskedLM(config)


def _modernbert(directory):
    modernbert_tokenizer_dir(directory)
    tokenizer = load_pretrained_tokenizer(str(directory))
    ids = tokenizer.special_token_ids()
    config = transformers.ModernBertConfig(
        vocab_size=len(tokenizer.tokens),
        max_position_embeddings=64,
        local_attention=8,
        global_attn_every_n_layers=2,
        pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
    )
    return transformers.ModernBertForMaskedLM(config)


@pytest.fixture(scope="module", params=["roberta", "modernbert"])
def published(request, tmp_path_factory):
    """(kind, model directory, transformers model, shard directory)."""
    root = tmp_path_factory.mktemp(request.param)
    directory = root / "model"
    torch.manual_seed(0)
    model = (_roberta if request.param == "roberta" else _modernbert)(directory).eval()
    model.save_pretrained(directory)
    args = ["make-shards", "-i", ",".join(map(str, INPUTS)), "--input-format", "bert", "--vocab", directory]
    args += ["-o", root / "shards", "--objective", "none", "--max-seq-length", "64", "--max-predictions-per-seq"]
    args += ["10", "--dupe-factor", "1", "-q", "--direct_num_workers=1", "--direct_running_mode=in_memory"]
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return request.param, directory, model, root / "shards"


def _labels(bound: dict, shape) -> torch.Tensor:
    """transformers' ``labels`` [B, T] (-100 = no label) of bertprep's gathered masked-LM labels."""
    labels = torch.full(shape, -100, dtype=torch.long)
    positions, ids = bound["masked_lm_positions"], bound["masked_lm_ids"]
    for row in range(shape[0]):
        keep = ids[row] != -100
        labels[row, positions[row][keep]] = ids[row][keep]
    return labels


def test_first_step_loss_equals_transformers(published, tmp_path, monkeypatch):
    kind, directory, hf, shards = published
    first: dict = {}
    forward = architectures.PretrainingModel.forward

    def recording_forward(self, **batch):
        output = forward(self, **batch)
        if not first:  # the first step's batch and MLM loss (the pre-training loop's one forward path)
            first.update(bound={k: v.detach().clone() for k, v in batch.items()}, loss=output.mlm_loss.item())
        return output

    monkeypatch.setattr(architectures.PretrainingModel, "forward", recording_forward)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    settings = dict(batch_size=4, max_steps=1, warmup_steps=0, log_every=1, **no_dropout)
    result = train(init_from_train_config(shards, tmp_path / "run", directory, **settings))
    assert result.step == 1
    bound = first["bound"]
    input_ids, attention_mask = bound["input_ids"], bound["attention_mask"]
    labels = _labels(bound, input_ids.shape)
    assert (labels != -100).sum() > 0
    with torch.no_grad():
        ref = hf(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.item()
    assert abs(first["loss"] - ref) < 1e-5, (first["loss"], ref)
    if kind == "roberta":  # BERT weights with RoBERTa's embeddings: positions from 2, one token type
        assert result.model.config.position_offset == 2 and result.model.config.type_vocab_size == 1
    checkpoint = sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1]
    assert (checkpoint / "tokenizer.json").read_bytes() == (directory / "tokenizer.json").read_bytes()


def test_export_loads_in_transformers_with_the_same_logits(published, tmp_path):
    kind, directory, _, shards = published
    settings = dict(batch_size=4, max_steps=2, warmup_steps=0)
    run = train(init_from_train_config(shards, tmp_path / "run", directory, **settings)).model.eval()
    printed = CliRunner().invoke(cli, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "hf")])
    assert printed.exit_code == 0, printed.output
    exported = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert exported["model_type"] == kind and exported["architectures"] == [
        "RobertaForMaskedLM" if kind == "roberta" else "ModernBertForMaskedLM"
    ]
    assert printed.output.startswith(f"wrote {exported['architectures'][0]} (")  # the class config.json names
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    ours = load_pretrained_tokenizer(str(tmp_path / "hf"))
    batch = hf_tokenizer(["The man said nothing.", "He went out"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0].tolist() == ours.full.encode("The man said nothing.").ids
    with torch.no_grad():
        reference = loaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        if kind == "roberta":
            logits = run(batch["input_ids"], attention_mask=batch["attention_mask"]).prediction_logits
        else:
            logits = run(batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    real = batch["attention_mask"].bool()
    assert (logits - reference)[real].abs().max().item() < 1e-4


def test_fill_mask_top5_equals_the_transformers_pipeline(published):
    _kind, directory, _, _ = published
    model, tokenizer = load_mlm_model(str(directory))
    pipe = transformers.pipeline("fill-mask", model=str(directory), tokenizer=str(directory), device="cpu")
    for probe in PROBES:
        text = probe.replace("[MASK]", tokenizer.mask_token)
        [result] = fill_mask(model, tokenizer, [text], top_k=5)
        expected = [tokenizer.tokens[c["token"]] for c in pipe(text, top_k=5)]
        assert [piece for piece, _ in result.masks[0].candidates] == expected
        assert [round(p, 4) for _, p in result.masks[0].candidates] == [
            round(c["score"], 4) for c in pipe(text, top_k=5)
        ]
