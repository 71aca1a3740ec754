"""`finetune` on a ModernBERT checkpoint for every task but GLUE (tests/bert_model/test_modernbert_downstream.py
has GLUE): SQuAD v1.1 and v2.0, NER (fine-tuned and feature-based) and SWAG-style multiple choice learn a
trivially learnable synthetic task with transformers' ModernBERT heads; `export` of the result loads in the
matching transformers Auto class with the same logits, and `predict` reloads it."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.collate import collate_features
from bertprep.bert_model.hf.export import export_model
from bertprep.bert_model.hf.interop import build_model, load_model_source
from bertprep.bert_model.models.heads import (
    ModernBertForMultipleChoice,
    ModernBertForQuestionAnswering,
    ModernBertForTokenClassification,
)
from bertprep.bert_model.tasks.feature_based import ModernBertFeatureBasedForTokenClassification
from bertprep.bert_model.tasks.finetune import FinetuneConfig, finetune
from bertprep.bert_model.tasks.predict import load_finetuned
from bertprep.bert_model.tasks.registry import make_task
from bertprep.cli.main import cli
from bertprep.core.vocab_files import WordPieceTokenizer, read_vocab_file
from conftest import FIXTURES, need_module
from finetune_factory import FILLER, write_ner_files, write_squad_files, write_tiny_modernbert_checkpoint

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = FIXTURES / "finetune" / "vocab.txt"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """A tiny 'pre-trained' ModernBERT run (random weights, 4 layers, a local window of 8) with the fixture vocab."""
    return write_tiny_modernbert_checkpoint(tmp_path_factory.mktemp("modernbert"))


def _fast(**overrides) -> dict:
    values = dict(
        learning_rate=3e-3, batch_size=16, num_train_epochs=6, eval_batch_size=32, progress=False, log_every=4
    )
    values.update(overrides)
    return values


def _tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_tokens(read_vocab_file(str(VOCAB)), True, True)


def _export_equals_transformers(run: Path, out: Path, auto_class: str, architecture: str, batch: dict) -> None:
    """``export`` the fine-tuning run; the matching transformers Auto class loads it as ``architecture`` and
    computes our logits (within 1e-4) on ``batch`` (a collated batch of the task's features)."""
    export_model(str(run), str(out))
    assert json.loads((out / "config.json").read_text())["architectures"] == [architecture]
    hf = getattr(transformers, auto_class).from_pretrained(str(out)).eval()
    assert type(hf).__name__ == architecture
    ours = build_model(load_model_source(str(out))).eval()
    assert type(ours).__name__ == architecture
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        a, b = ours(**inputs), hf(**inputs)
    real = batch["attention_mask"].bool()
    for name in ("logits", "start_logits", "end_logits"):
        if hasattr(a, name) and getattr(a, name) is not None:
            x, y = getattr(a, name), getattr(b, name)
            assert x.shape == y.shape
            if name in ours.per_token_outputs:  # per-token scores: those of padding positions are never read
                x, y = x[real], y[real]
            assert (x - y).abs().max().item() < 1e-4, name


def _exports_and_predicts(tmp_path: Path, task, dev: Path, examples: int, architecture: str, name: str) -> Path:
    """The fine-tuning run ``tmp_path/run`` exports as ``architecture`` (``_export_equals_transformers`` on the
    first ``examples`` examples of ``dev``, into ``tmp_path/exported``), and ``predict`` of it on ``dev`` succeeds;
    returns its predictions file, ``tmp_path/name``."""
    features = task.featurize(task.read(str(dev))[:examples], _tokenizer(), with_labels=False)
    batch = collate_features(features, pad_token_id=0)
    auto_class = architecture.replace("ModernBert", "AutoModel")
    _export_equals_transformers(tmp_path / "run", tmp_path / "exported", auto_class, architecture, batch)
    args = ["predict", "-m", str(tmp_path / "run"), "-i", str(dev), "-o", str(tmp_path / name), "--no-progress"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    return tmp_path / name


# ------------------------------------------------------------------------------------------------ SQuAD


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_squad_on_modernbert_learns_exports_and_predicts(tmp_path, checkpoint, version):
    train, dev = write_squad_files(tmp_path, version)
    config = FinetuneConfig(
        train_file=str(train), eval_file=str(dev), output_dir=str(tmp_path / "run"), init_from=checkpoint, **_fast()
    )
    task = make_task("squad", max_seq_length=24, doc_stride=8, max_query_length=4)
    result = finetune(config, task)
    assert isinstance(result.model, ModernBertForQuestionAnswering)
    if version == "1.1":
        assert result.best_metrics["exact_match"] >= 90.0
    else:  # the official v2.0 figures, answerable and unanswerable questions both learnt
        assert result.best_metrics["HasAns_exact"] >= 90.0 and result.best_metrics["NoAns_exact"] >= 90.0
        assert (tmp_path / "run" / "eval_predictions.null_odds.json").exists()
    predictions = _exports_and_predicts(tmp_path, task, dev, 6, "ModernBertForQuestionAnswering", "p.json")
    assert len(json.loads(predictions.read_text())) == 48


def test_squad_fixture_predicts_from_a_transformers_directory_without_finetune_json(tmp_path, checkpoint):
    """A ModernBertForQuestionAnswering saved by transformers (no finetune.json) is recognised as SQuAD."""
    config = FinetuneConfig(
        train_file=str(FIXTURES / "finetune" / "squad_tiny.json"),
        output_dir=str(tmp_path / "run"),
        init_from=checkpoint,
        **_fast(max_steps=2),
    )
    finetune(config, make_task("squad", max_seq_length=32, doc_stride=8, max_query_length=8))
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(str(tmp_path / "run" / "best"))
    hf.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "vocab.txt").write_text(VOCAB.read_text(), encoding="utf-8")
    model, task, _ = load_finetuned(str(tmp_path / "hf"), do_lower_case=True)
    assert isinstance(model, ModernBertForQuestionAnswering) and task.name == "squad"
    torch.testing.assert_close(model.classifier.weight, hf.classifier.weight, rtol=0, atol=0)


# -------------------------------------------------------------------------------------------------- NER


def _transformers_directory(checkpoint: str, out: Path) -> Path:
    """The checkpoint as a transformers ``ModernBertForMaskedLM.save_pretrained`` directory plus its vocab.txt
    and tokenizer_config.json (what a downloaded ModernBERT-style model directory holds)."""
    export_model(checkpoint, str(out / "export"))
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(out / "export"))
    hf.save_pretrained(out / "hf")
    for name in ("vocab.txt", "tokenizer_config.json"):
        (out / "hf" / name).write_text((out / "export" / name).read_text(), encoding="utf-8")
    return out / "hf"


def test_ner_on_modernbert_from_a_transformers_directory_learns_exports_and_predicts(tmp_path, checkpoint):
    train, dev = write_ner_files(tmp_path)
    hf_dir = _transformers_directory(checkpoint, tmp_path)
    config = FinetuneConfig(
        train_file=str(train), eval_file=str(dev), output_dir=str(tmp_path / "run"), init_from=str(hf_dir), **_fast()
    )
    task = make_task("ner", max_seq_length=16)
    result = finetune(config, task)
    assert isinstance(result.model, ModernBertForTokenClassification)
    assert result.best_metrics["f1"] >= 0.95
    predictions = _exports_and_predicts(tmp_path, task, dev, 6, "ModernBertForTokenClassification", "p.conll")
    assert predictions.read_text().count("\n\n") == 40


def test_feature_based_ner_on_modernbert_learns_and_predict_reloads_it(tmp_path, checkpoint):
    train, dev = write_ner_files(tmp_path)
    args = ["finetune", "--task", "ner", "--feature-based", "last4-concat", "--init-from", checkpoint]
    args += ["--train-file", str(train), "--eval-file", str(dev), "-o", str(tmp_path / "run"), "--lr", "5e-3"]
    args += ["--batch-size", "16", "--num-train-epochs", "15", "--max-seq-length", "16", "--no-progress"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["best_metrics"]["f1"] >= 0.9
    model, task, _ = load_finetuned(str(tmp_path / "run"))
    assert isinstance(model, ModernBertFeatureBasedForTokenClassification) and task.feature_based == "last4-concat"
    # The frozen encoder is the pre-trained one, untouched by fine-tuning.
    source = load_model_source(checkpoint)
    for name, value in model.model.state_dict().items():
        torch.testing.assert_close(value, source.state_dict[f"model.{name}"], rtol=0, atol=0)
    args = ["predict", "-m", str(tmp_path / "run"), "-i", str(dev), "-o", str(tmp_path / "p.conll"), "--no-progress"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output


# ------------------------------------------------------------------------------------- multiple choice


def _choice_files(root: Path) -> tuple[Path, Path]:
    """SWAG's CSV layout; the right ending is the colour the context names, the three others filler words (so
    the ending alone gives it away: a check that the head learns, not a reasoning task; chance = 1/4)."""
    rng = random.Random(0)
    colors = ["red", "blue", "green", "paris"]

    def write(path: Path, n: int) -> None:
        with open(path, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["sent1", "sent2", *[f"ending{i}" for i in range(4)], "label"])
            for _ in range(n):
                color = rng.choice(colors)
                words = rng.sample(FILLER, 3)
                words.insert(rng.randrange(4), color)
                endings = [color, *rng.sample([c for c in FILLER if c not in words], 3)]
                rng.shuffle(endings)
                w.writerow([" ".join(words), "it was", *endings, endings.index(color)])

    write(root / "train.csv", 256)
    write(root / "dev.csv", 48)
    return root / "train.csv", root / "dev.csv"


def test_multiple_choice_on_modernbert_learns_exports_and_predicts(tmp_path, checkpoint):
    train, dev = _choice_files(tmp_path)
    config = FinetuneConfig(
        train_file=str(train),
        eval_file=str(dev),
        output_dir=str(tmp_path / "run"),
        init_from=checkpoint,
        **_fast(batch_size=32, num_train_epochs=3),
    )
    task = make_task("multiple-choice", max_seq_length=16)
    result = finetune(config, task)
    assert isinstance(result.model, ModernBertForMultipleChoice)
    assert result.best_metrics["accuracy"] >= 0.9  # chance is 0.25
    predictions = _exports_and_predicts(tmp_path, task, dev, 4, "ModernBertForMultipleChoice", "p.csv")
    assert len(predictions.read_text().splitlines()) == 1 + 48
