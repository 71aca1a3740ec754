"""End to end: `bertprep finetune` learns trivially learnable synthetic tasks, then predict and export."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from bertprep.bert_model.collate import collate_features
from bertprep.bert_model.tasks.finetune import FinetuneConfig, finetune
from bertprep.bert_model.tasks.registry import make_task
from bertprep.cli.main import cli
from conftest import FIXTURES, need_module
from finetune_factory import (
    predict_args,
    sst2_finetune_args,
    write_ner_files,
    write_sentiment_files,
    write_squad_files,
    write_tiny_checkpoint,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = FIXTURES / "finetune" / "vocab.txt"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """A tiny 'pre-trained' bertprep checkpoint (random weights) with the fixture vocab."""
    run = tmp_path_factory.mktemp("pretrain")
    write_tiny_checkpoint(run)
    return str(run)


def _fast(**overrides) -> dict:
    values = dict(
        learning_rate=5e-3, batch_size=16, num_train_epochs=6, eval_batch_size=32, progress=False, log_every=4
    )
    values.update(overrides)
    return values


def test_sequence_classification_learns_a_keyword_task(tmp_path, checkpoint):
    train, dev = write_sentiment_files(tmp_path)
    task = make_task("glue", glue_task="sst2", max_seq_length=16)
    config = FinetuneConfig(
        train_file=str(train), eval_file=str(dev), output_dir=str(tmp_path / "run"), init_from=checkpoint, **_fast()
    )
    result = finetune(config, task)
    assert result.steps == 72 and result.stop_reason == "completed"
    assert result.best_metrics["accuracy"] >= 0.95
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["epoch"] for r in evals] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # once per epoch
    train_losses = [r["loss"] for r in records if r["split"] == "train"]
    assert train_losses[-1] < train_losses[0] / 2
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["best_step"] == result.best_step and results["train_examples"] == 192
    saved = json.loads((tmp_path / "run" / "best" / "finetune.json").read_text())
    assert saved["task"] == "glue" and saved["glue_task"] == "sst2" and saved["selected_step"] == result.best_step
    preds = (tmp_path / "run" / "eval_predictions.tsv").read_text().splitlines()
    assert preds[0] == "index\tprediction" and len(preds) == 49


def test_bf16_precision_on_cpu_learns_the_keyword_task_too(tmp_path, checkpoint):
    train, dev = write_sentiment_files(tmp_path)
    task = make_task("glue", glue_task="sst2", max_seq_length=16)
    config = FinetuneConfig(
        train_file=str(train),
        eval_file=str(dev),
        output_dir=str(tmp_path / "run"),
        init_from=checkpoint,
        precision="bf16",
        **_fast(),
    )
    result = finetune(config, task)
    assert result.best_metrics["accuracy"] >= 0.95
    assert all(p.dtype == torch.float32 for p in result.model.parameters())  # autocast only: fp32 weights
    with pytest.raises(ValueError, match="precision must be one of"):
        FinetuneConfig(train_file=str(train), output_dir=str(tmp_path / "x"), init_from=checkpoint, precision="half")


def test_same_seed_gives_the_same_model_and_random_init_differs(tmp_path, checkpoint):
    train, _dev = write_sentiment_files(tmp_path)
    weights = []
    for name, random_init in (("a", False), ("b", False), ("c", True)):
        config = FinetuneConfig(
            train_file=str(train),
            output_dir=str(tmp_path / name),
            init_from=checkpoint,
            random_init=random_init,
            **_fast(max_steps=4),
        )
        result = finetune(config, make_task("glue", glue_task="sst2", max_seq_length=16))
        assert result.best_metrics is None and result.steps == 4  # no eval file: the last model is kept
        weights.append(load_file(str(tmp_path / name / "best" / "model.safetensors")))
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not torch.equal(
        weights[0]["bert.embeddings.word_embeddings.weight"], weights[2]["bert.embeddings.word_embeddings.weight"]
    )


def test_token_classification_learns_name_tags(tmp_path, checkpoint):
    train, dev = write_ner_files(tmp_path, boundary="\t\n")  # a TAB-only boundary, as WNUT-17 train
    config = FinetuneConfig(
        train_file=str(train),
        eval_file=str(dev),
        output_dir=str(tmp_path / "run"),
        init_from=checkpoint,
        **_fast(),
    )
    result = finetune(config, make_task("ner", max_seq_length=16))
    assert result.best_metrics["f1"] >= 0.95


def test_question_answering_learns_to_point_at_the_name(tmp_path, checkpoint):
    train, dev = write_squad_files(tmp_path)
    config = FinetuneConfig(
        train_file=str(train),
        eval_file=str(dev),
        output_dir=str(tmp_path / "run"),
        init_from=checkpoint,
        **_fast(),
    )
    result = finetune(config, make_task("squad", max_seq_length=24, doc_stride=8, max_query_length=4))
    assert result.best_metrics["exact_match"] >= 90.0
    predictions = json.loads((tmp_path / "run" / "eval_predictions.json").read_text())
    assert len(predictions) == 48 and set(predictions.values()) <= {"john", "mary", ""}


def test_cli_finetune_predict_export(tmp_path, checkpoint):
    train, dev = write_sentiment_files(tmp_path)
    runner = CliRunner()
    run = tmp_path / "run"
    args = sst2_finetune_args(checkpoint, train, dev, run, epochs=6)
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "72 steps (completed" in result.output and "accuracy" in result.output
    # A second run into the same directory is refused unless --overwrite.
    again = runner.invoke(cli, args)
    assert again.exit_code != 0 and "--overwrite" in again.output
    # predict on an unlabelled file, then on the labelled dev file (metrics printed).
    test_file = tmp_path / "test.tsv"
    test_file.write_text("index\tsentence\n0\tthe city was good\n1\tthey said awful\n", encoding="utf-8")
    out = runner.invoke(
        cli,
        predict_args(run, test_file, tmp_path / "pred.tsv"),
    )
    assert out.exit_code == 0, out.output
    assert (tmp_path / "pred.tsv").read_text() == "index\tprediction\n0\t1\n1\t0\n"
    out = runner.invoke(
        cli,
        predict_args(run / "best", dev, tmp_path / "dev-pred.tsv"),
    )
    assert out.exit_code == 0 and "48 predictions" in out.output and "accuracy" in out.output
    # export the fine-tuned model: transformers loads it with the labels.
    transformers = need_module("transformers")
    out = runner.invoke(cli, ["export", str(run), "-o", str(tmp_path / "hf")])
    assert out.exit_code == 0, out.output
    hf = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert hf.config.id2label == {0: "0", 1: "1"} and hf.config.finetuning_task == "sst2"
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tok(["the city was good", "they said awful"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert hf(**batch).logits.argmax(-1).tolist() == [1, 0]


def test_cli_reports_bad_options_and_bad_data(tmp_path, checkpoint):
    runner = CliRunner()
    train, _ = write_sentiment_files(tmp_path)
    out = runner.invoke(
        cli,
        [
            "finetune",
            "--task",
            "ner",
            "--glue-task",
            "sst2",
            "--init-from",
            checkpoint,
            "--train-file",
            str(train),
            "-o",
            str(tmp_path / "x"),
        ],
    )
    assert out.exit_code == 2 and "do not apply to --task ner" in out.output
    out = runner.invoke(
        cli,
        [
            "finetune",
            "--task",
            "glue",
            "--init-from",
            checkpoint,
            "--train-file",
            str(train),
            "-o",
            str(tmp_path / "x"),
        ],
    )
    assert out.exit_code == 2 and "--glue-task" in out.output
    bad = tmp_path / "bad.conll"
    bad.write_text("john\tB-person\nsaid\n", encoding="utf-8")
    out = runner.invoke(
        cli,
        [
            "finetune",
            "--task",
            "ner",
            "--init-from",
            checkpoint,
            "--train-file",
            str(bad),
            "-o",
            str(tmp_path / "y"),
            "--max-seq-length",
            "16",
            "--no-progress",
        ],
    )
    assert out.exit_code == 1 and "bad.conll:2: no tag" in out.output
    assert not (tmp_path / "y" / "best").exists()
    out = runner.invoke(
        cli,
        [
            "finetune",
            "--task",
            "ner",
            "--init-from",
            checkpoint,
            "--train-file",
            str(train),
            "-o",
            str(tmp_path / "z"),
            "--no-progress",
        ],
    )
    assert out.exit_code == 1 and "max_seq_length 128 exceeds the model's max_position_embeddings 64" in out.output


def test_collate_pads_to_a_multiple_of_8():
    features = [
        {"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "labels": [-100, 1, -100]},
        {"input_ids": [2, 9, 9, 9, 9, 9, 9, 9, 9, 3], "token_type_ids": [0] * 10, "labels": [-100] * 10},
    ]
    batch = collate_features(features, pad_token_id=0)
    assert batch["input_ids"].shape == (2, 16) and batch["labels"].shape == (2, 16)
    assert batch["attention_mask"].sum(1).tolist() == [3, 10]
    assert (batch["labels"][0, 3:] == -100).all() and batch["input_ids"][0, 3:].eq(0).all()
