"""A ModernBERT run after pre-training: `export` (loaded by transformers), `fill-mask`, `extract-features` and
`finetune` (GLUE here; the other tasks in tests/bert_model/tasks/test_finetune_modernbert.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.hf.export import export_model
from bertprep.bert_model.hf.interop import build_model, load_model_source
from bertprep.bert_model.inference.features import FeatureConfig, extract_features, read_features
from bertprep.bert_model.inference.fill_mask import fill_mask, load_mlm_model
from bertprep.bert_model.models.heads import ModernBertForSequenceClassification
from bertprep.bert_model.models.modernbert import ModernBertForMaskedLM
from bertprep.bert_model.pretrain.trainer import train
from bertprep.bert_model.tasks.finetune import FinetuneConfig, finetune
from bertprep.bert_model.tasks.registry import make_task
from bertprep.cli.main import cli
from conftest import need_module
from model_factory import tiny_train_config
from shard_factory import write_shard_dir

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 4-step ModernBERT run (tiny preset, narrowed), packed, 30% dynamic masking."""
    root = tmp_path_factory.mktemp("modernbert")
    write_shard_dir(
        root / "shards", num_shards=2, rows_per_shard=24, vocab_size=64, max_seq_length=32, masking="dynamic"
    )
    settings = dict(architecture="modernbert", max_steps=4, warmup_steps=1, packing=True, masked_lm_prob=0.3)
    train(tiny_train_config(root / "shards", root / "run", **settings))
    return root


def test_export_loads_in_transformers_with_equal_logits(run, tmp_path):
    result = export_model(str(run / "run"), str(tmp_path / "hf"))
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
    assert {"vocab.txt", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in (tmp_path / "hf").iterdir()}
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(hf).__name__ == "ModernBertForMaskedLM"
    ours = result.model.eval()
    assert isinstance(ours, ModernBertForMaskedLM)
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 64, (3, 20), generator=g)
    attention_mask = (torch.arange(20)[None] < torch.tensor([[20], [13], [7]])).long()
    with torch.no_grad():
        a = ours(input_ids, attention_mask=attention_mask).logits
        b = hf(input_ids=input_ids, attention_mask=attention_mask).logits
    real = attention_mask.bool()
    assert (a[real] - b[real]).abs().max() < 1e-4
    # And the tokenizer files load as transformers' tokenizer, ids as ours.
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tok.convert_tokens_to_ids(["[CLS]", "w7", "[MASK]"]) == [2, 7, 4]


def test_fill_mask_on_the_run_and_on_its_export(run, tmp_path):
    export_model(str(run / "run"), str(tmp_path / "hf"))
    texts = ["w5 w6 [MASK] w8 w9", "w20 [MASK] w22"]
    results = []
    for path in (run / "run", tmp_path / "hf"):
        model, tokenizer = load_mlm_model(str(path))
        assert isinstance(model, ModernBertForMaskedLM)
        results.append(fill_mask(model, tokenizer, texts, top_k=3))
    for a, b in zip(*results, strict=True):
        assert a.pieces == b.pieces and len(a.masks) == 1
        assert [c for c, _ in a.masks[0].candidates] == [c for c, _ in b.masks[0].candidates]
        np.testing.assert_allclose([p for _, p in a.masks[0].candidates], [p for _, p in b.masks[0].candidates])
    # The probabilities are the softmax of the model's own MLM logits at the mask.
    model, tokenizer = load_mlm_model(str(run / "run"))
    ids = torch.tensor([[2, 5, 6, 4, 8, 9, 3]])
    with torch.no_grad():
        probs = model(ids).logits[0, 3].softmax(-1)
    top = results[0][0].masks[0].candidates[0]
    assert top[1] == pytest.approx(float(probs.max()), rel=1e-5)


def test_extract_features_last_layer_is_transformers_last_hidden_state(run, tmp_path):
    export_model(str(run / "run"), str(tmp_path / "hf"))
    (tmp_path / "in.txt").write_text("w5 w6 w7\nw9 w10 ||| w11\n", encoding="utf-8")
    for name, path in (("run", run / "run"), ("hf", tmp_path / "hf")):
        extract_features(
            FeatureConfig(
                model=str(path),
                input_file=str(tmp_path / "in.txt"),
                output_file=str(tmp_path / f"{name}.arrow"),
                layers=(-1, 0),
                progress=False,
                device="cpu",
            )
        )
    ours, from_export = read_features(str(tmp_path / "run.arrow")), read_features(str(tmp_path / "hf.arrow"))
    assert ours.column("tokens").to_pylist()[0] == ["[CLS]", "w5", "w6", "w7", "[SEP]"]
    last = np.array(ours.column("layer_-1").to_pylist()[0])  # (T, H)
    assert last.shape == (5, 32)
    np.testing.assert_allclose(last, np.array(from_export.column("layer_-1").to_pylist()[0]))
    hf = transformers.AutoModel.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([[2, 5, 6, 7, 3]]), output_hidden_states=True)
    np.testing.assert_allclose(last, out.last_hidden_state[0].numpy(), atol=1e-4)
    np.testing.assert_allclose(
        np.array(ours.column("layer_0").to_pylist()[0]), out.hidden_states[0][0].numpy(), atol=1e-5
    )


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_finetune_glue_on_modernbert_and_load_the_result_in_transformers(run, tmp_path, pooling):
    rng = np.random.default_rng(0)
    lines = ["sentence\tlabel"]
    for _ in range(48):
        label = int(rng.integers(0, 2))
        words = [f"w{int(w)}" for w in rng.integers(5 + 20 * label, 25 + 20 * label, size=6)]
        lines.append(" ".join(words) + f"\t{label}")
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    init = str(run / "run")
    if pooling == "mean":  # classifier_pooling comes from the model's config: export one that says mean
        export_model(init, str(tmp_path / "mb"))
        path = tmp_path / "mb" / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "classifier_pooling": "mean"}))
        init = str(tmp_path / "mb")
    config = FinetuneConfig(
        train_file=str(tmp_path / "train.tsv"),
        eval_file=str(tmp_path / "train.tsv"),
        output_dir=str(tmp_path / "ft"),
        init_from=init,
        learning_rate=3e-3,
        batch_size=8,
        max_steps=60,
        eval_every=30,
        device="cpu",
        progress=False,
    )
    result = finetune(config, make_task("glue", glue_task="sst2", max_seq_length=16))
    assert isinstance(result.model, ModernBertForSequenceClassification)
    assert result.best_metrics["accuracy"] > 0.6  # two separable word ranges
    hf_config = json.loads((tmp_path / "ft" / "best" / "config.json").read_text())
    assert hf_config["architectures"] == ["ModernBertForSequenceClassification"]
    assert hf_config["classifier_pooling"] == pooling
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "ft" / "best")).eval()
    ours = build_model(load_model_source(str(tmp_path / "ft" / "best"))).eval()
    input_ids = torch.tensor([[2, 7, 8, 9, 3, 0, 0], [2, 30, 31, 32, 33, 34, 3]])
    attention_mask = (input_ids != 0).long()
    with torch.no_grad():
        a = ours(input_ids, attention_mask=attention_mask).logits
        b = hf(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    # predict reloads it (finetune.json + the ModernBERT head) and writes one prediction per example.
    args = ["predict", "--model", str(tmp_path / "ft"), "--input", str(tmp_path / "train.tsv")]
    result = CliRunner().invoke(cli, [*args, "--output", str(tmp_path / "p.tsv")])
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == 1 + 48  # header + one line per example


def test_cli_finetune_of_another_task_builds_its_modernbert_head(run, tmp_path):
    """Every task has a ModernBERT head (tests/bert_model/tasks/test_finetune_modernbert.py trains each)."""
    (tmp_path / "ner.txt").write_text("w5 O\nw6 B-PER\n\n", encoding="utf-8")
    args = ["finetune", "--task", "ner", "--train-file", str(tmp_path / "ner.txt"), "--init-from", str(run / "run")]
    result = CliRunner().invoke(
        cli, [*args, "--output-dir", str(tmp_path / "out"), "--max-steps", "1", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    hf_config = json.loads((tmp_path / "out" / "best" / "config.json").read_text())
    assert hf_config["architectures"] == ["ModernBertForTokenClassification"]
    assert hf_config["id2label"] == {"0": "O", "1": "B-PER"}
