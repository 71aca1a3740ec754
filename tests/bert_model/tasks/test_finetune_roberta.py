"""finetune, predict, extract-features and export with a RoBERTa and its own BPE tokenizer (a small random
``RobertaForMaskedLM`` saved by transformers beside a tokenizer trained in the test): pairs laid out as RoBERTa's
``<s> A </s></s> B </s>`` with one token type, and the fine-tuned model exported as
``RobertaForSequenceClassification`` giving transformers the same logits as bertprep."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.tasks.predict import load_finetuned, run_model
from bertprep.cli.main import cli
from conftest import FIXTURES, need_module
from model_factory import write_tiny_roberta

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.usefixtures("one_torch_thread")

MRPC = FIXTURES / "finetune" / "mrpc_like.tsv"


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory):
    return write_tiny_roberta(tmp_path_factory.mktemp("roberta") / "model")


def test_finetune_predict_export_a_roberta_pair_task(roberta_dir, tmp_path):
    run = tmp_path / "run"
    args = ["finetune", "--task", "glue", "--glue-task", "mrpc", "--init-from", roberta_dir, "--train-file", MRPC]
    args += ["--eval-file", MRPC, "-o", run, "--max-seq-length", "32", "--batch-size", "2", "--no-progress"]
    result = CliRunner().invoke(cli, [str(a) for a in args + ["--num-train-epochs", "2"]])
    assert result.exit_code == 0, result.output
    best = run / "best"
    assert (best / "tokenizer.json").read_bytes() == (roberta_dir / "tokenizer.json").read_bytes()
    saved = json.loads((best / "config.json").read_text())
    assert saved["model_type"] == "roberta" and saved["architectures"] == ["RobertaForSequenceClassification"]

    model, task, tokenizer = load_finetuned(str(best))
    examples = task.read(str(MRPC))
    features = task.featurize(examples, tokenizer)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(best))
    pairs = dict(truncation="longest_first", max_length=32)  # (truncate_seq_pair is transformers' longest_first)
    for e, f in zip(examples, features, strict=True):  # RoBERTa's pair layout, as transformers encodes it
        assert f["input_ids"] == hf_tokenizer(e.text_a, e.text_b, **pairs)["input_ids"]
        assert set(f["token_type_ids"]) == {0}
    ours = np.stack([o["logits"] for o in run_model(model, features, batch_size=4, device=torch.device("cpu"))])
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(best)).eval()
    batch = hf_tokenizer(
        [e.text_a for e in examples], [e.text_b for e in examples], padding=True, return_tensors="pt", **pairs
    )
    with torch.no_grad():
        reference = hf(**batch).logits.numpy()
    assert np.abs(ours - reference).max() < 1e-4

    predicted = CliRunner().invoke(
        cli,
        ["predict", "--model", str(run), "--input", str(MRPC), "--output", str(tmp_path / "p.tsv"), "--no-progress"],
    )
    assert predicted.exit_code == 0, predicted.output
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == len(examples) + 1


def test_extract_features_of_a_roberta_reads_its_tokenizer(roberta_dir, tmp_path):
    lines = tmp_path / "in.txt"
    lines.write_text("The man said nothing.\nHe went out ||| and came back.\n", encoding="utf-8")
    out = tmp_path / "features.arrow"
    result = CliRunner().invoke(
        cli,
        ["extract-features", "--model", str(roberta_dir), "--input", str(lines), "--output", str(out), "--no-progress"],
    )
    assert result.exit_code == 0, result.output
    import pyarrow as pa

    with pa.memory_map(str(out)) as source:
        table = pa.ipc.open_file(source).read_all()
    tokens = table.column("tokens").to_pylist()
    assert tokens[0][0] == "<s>" and tokens[0][-1] == "</s>"
    assert {t for row in table.column("token_type_ids").to_pylist() for t in row} == {0}  # one token type
