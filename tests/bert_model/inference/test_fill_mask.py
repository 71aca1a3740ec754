"""`bertprep fill-mask` (bert_model/inference/fill_mask.py): the model's own MLM probabilities at each [MASK]."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.inference.fill_mask import encode_with_masks, fill_mask, load_mlm_model
from bertprep.cli.main import cli
from conftest import need_module
from model_factory import tiny_bert, write_uncased_vocab

transformers = need_module("transformers")

WORDS = ["the", "capital", "of", "france", "is", "paris", "a", "city", ".", "run", "##ning", "big"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"w{i}" for i in range(40)]


def _save(path, cls_name="BertForMaskedLM"):
    torch.manual_seed(0)
    config = transformers.BertConfig(**tiny_bert(len(VOCAB), intermediate_size=64, max_position_embeddings=32))
    model = getattr(transformers, cls_name)(config).eval()
    model.save_pretrained(path)
    write_uncased_vocab(path, VOCAB)
    return model


def test_encode_keeps_each_literal_mask_as_one_token(tmp_path):
    _save(tmp_path)
    _, tokenizer = load_mlm_model(str(tmp_path))
    ids, pieces = encode_with_masks(tokenizer, "The capital of [MASK] is [MASK].")
    assert pieces == ["[CLS]", "the", "capital", "of", "[MASK]", "is", "[MASK]", ".", "[SEP]"]
    assert ids == [VOCAB.index(p) for p in pieces]
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        encode_with_masks(tokenizer, "nothing to fill")


def test_probabilities_equal_transformers_and_are_sorted(tmp_path):
    hf = _save(tmp_path)
    model, tokenizer = load_mlm_model(str(tmp_path))
    texts = ["the capital of france is [MASK] .", "[MASK] big city [MASK] running"]
    results = fill_mask(model, tokenizer, texts, top_k=len(VOCAB), batch_size=2)
    assert [r.text for r in results] == texts
    for text, result in zip(texts, results, strict=True):
        ids, _ = encode_with_masks(tokenizer, text)
        with torch.no_grad():
            logits = hf(input_ids=torch.tensor([ids])).logits[0]  # (T, V)
        for mask in result.masks:
            assert result.pieces[mask.position] == "[MASK]"
            expected = torch.softmax(logits[mask.position], -1)
            got = torch.tensor([p for _, p in sorted(mask.candidates, key=lambda c: VOCAB.index(c[0]))])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
            probs = [p for _, p in mask.candidates]
            assert probs == sorted(probs, reverse=True) and abs(sum(probs) - 1) < 1e-4
    assert len(results[1].masks) == 2 and len(results[0].masks) == 1
    # Batching does not change the answers (padding is masked out).
    alone = fill_mask(model, tokenizer, texts[:1], top_k=3)[0]
    assert [c[0] for c in alone.masks[0].candidates] == [c[0] for c in results[0].masks[0].candidates[:3]]


def test_a_model_without_mlm_head_is_refused(tmp_path):
    _save(tmp_path, "BertModel")
    with pytest.raises(ValueError, match="BertModel, which has no masked-LM head"):
        load_mlm_model(str(tmp_path))


def test_cli_prints_top_k_per_mask_and_json(tmp_path):
    _save(tmp_path)
    probes = tmp_path / "probes.txt"
    probes.write_text("a [MASK] city\n\n", encoding="utf-8")
    result = CliRunner().invoke(
        cli,
        [
            "fill-mask",
            "--model",
            str(tmp_path),
            "--top-k",
            "3",
            "--device",
            "cpu",
            "the capital of france is [MASK] .",
            "--input",
            str(probes),
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "the capital of france is [MASK] ." and lines[2] == "a [MASK] city"
    assert lines[1].startswith("  [MASK] 1: ") and len(lines[1].split("  ")) == 4  # three candidates
    result = CliRunner().invoke(
        cli, ["fill-mask", "--model", str(tmp_path), "--json", "--top-k", "2", "x [MASK] [MASK]"]
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)
    assert row["pieces"][0] == "[CLS]" and [m["position"] for m in row["masks"]] == [2, 3]
    assert all(len(m["candidates"]) == 2 for m in row["masks"])
    result = CliRunner().invoke(cli, ["fill-mask", "--model", str(tmp_path), "no mask here"])
    assert result.exit_code != 0 and "no [MASK] in 'no mask here'" in result.output


def test_minilm_has_no_mlm_head_and_says_how_to_get_one(minilm_dir):
    result = CliRunner().invoke(cli, ["fill-mask", "--model", str(minilm_dir), "the [MASK] ."])
    assert result.exit_code != 0
    assert "BertModel, which has no masked-LM head" in result.output and "bertprep train --model" in result.output
