"""Multiple choice (SWAG, paper section 4.4): reading layouts, the head, learning, export to transformers."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.collate import collate_features
from bertprep.bert_model.hf.export import write_hf_directory
from bertprep.bert_model.models.heads import BertForMultipleChoice
from bertprep.bert_model.tasks.finetune import FinetuneConfig, finetune
from bertprep.bert_model.tasks.multiple_choice import MultipleChoiceTask
from bertprep.bert_model.tasks.registry import make_task
from bertprep.cli.main import cli
from bertprep.core.vocab_files import WordPieceTokenizer, read_vocab_file
from conftest import FIXTURES, need_module
from finetune_factory import tiny_config, write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = FIXTURES / "finetune" / "vocab.txt"
FILLER = "the a is was in of and to it this that he she they said city river year one two three".split()
COLORS = ["red", "blue", "green", "paris"]


# ------------------------------------------------------------------------------------------------ reading


def test_reads_the_swag_sample(shared_data):
    path = shared_data / "swag" / "val.head11.csv"
    examples = MultipleChoiceTask().read(str(path))
    assert len(examples) == 11 and all(len(e.endings) == 4 for e in examples)
    with open(path, newline="", encoding="utf-8") as f:
        first = next(csv.DictReader(f))
    assert examples[0].context == first["sent1"]
    assert examples[0].endings[2] == first["sent2"] + " " + first["ending2"]
    assert examples[0].label == int(first["label"]) and examples[0].line == 2


def test_column_mapping_for_jsonl_and_tsv(tmp_path):
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text(
        '{"qid": "x1", "premise": "it rained", "choices": ["wet", "dry", "hot"], "answer": 0}\n\n'
        '{"qid": "x2", "premise": "it was sunny", "choices": ["wet", "dry", "cold"], "answer": 1}\n'
    )
    task = MultipleChoiceTask(
        context_column="premise", question_column="", ending_columns=["choices"], label_column="answer", id_column="qid"
    )
    examples = task.read(str(jsonl))
    assert [(e.example_id, e.context, e.endings, e.label, e.line) for e in examples] == [
        ("x1", "it rained", ["wet", "dry", "hot"], 0, 1),
        ("x2", "it was sunny", ["wet", "dry", "cold"], 1, 3),
    ]
    tsv = tmp_path / "q.tsv"
    tsv.write_text("ctx\tq\ta\tb\ty\nhe ran\the\tfast\tslow\t1\n")
    task = MultipleChoiceTask(context_column="ctx", question_column="q", ending_columns="a,b", label_column="y")
    (e,) = task.read(str(tsv))
    assert e.endings == ["he fast", "he slow"] and e.label == 1


def test_bad_rows_name_the_file_line_and_option(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("sent1,sent2,ending0,ending1,label\nctx,he,a,b,1\nctx,he,a,b,7\n")
    with pytest.raises(ValueError, match=r"bad\.csv:3: label 7 is not an index of the 2 candidates"):
        MultipleChoiceTask(ending_columns=["ending0", "ending1"]).read(str(f))
    with pytest.raises(ValueError, match=r"bad\.csv:2: no column 'ending2' .*--ending-columns"):
        MultipleChoiceTask().read(str(f))
    f.write_text("sent1,sent2,ending0,ending1\nctx,he,a,b\n")  # no label: fine for prediction only
    task = MultipleChoiceTask(ending_columns=["ending0", "ending1"])
    assert task.read(str(f), with_labels=False)[0].label is None
    with pytest.raises(ValueError, match=r"no column 'label'.*--label-column"):
        task.read(str(f))


def test_features_are_one_pair_per_candidate_and_collate_to_b_n_t():
    tokenizer = WordPieceTokenizer.from_vocab_file(str(VOCAB), do_lower_case=True)
    task = MultipleChoiceTask(max_seq_length=12, question_column=None, ending_columns=["a", "b", "c"])
    from bertprep.bert_model.tasks.multiple_choice import MultipleChoiceExample

    examples = [
        MultipleChoiceExample("0", "the city", ["red", "blue", "green river"], 2, 2),
        MultipleChoiceExample("1", "one two three the a is was in of and to", ["red", "blue", "x"], 0, 3),
    ]
    features = task.featurize(examples, tokenizer)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert features[0]["input_ids"][2] == [
        cls_id,
        *tokenizer.encode_batch(["the city"])[0].ids,
        sep_id,
        *tokenizer.encode_batch(["green river"])[0].ids,
        sep_id,
    ]
    assert features[0]["token_type_ids"][2] == [0, 0, 0, 0, 1, 1, 1]
    assert all(len(seq) <= 12 for f in features for seq in f["input_ids"])  # long context cut longest-first
    batch = collate_features(features, tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, 3, 16) and batch["labels"].tolist() == [2, 0]
    assert batch["attention_mask"][0, 0].sum() == 6


def test_head_scores_each_candidate_and_loss_is_softmax_cross_entropy():
    torch.manual_seed(0)
    model = BertForMultipleChoice(tiny_config()).eval()
    ids = torch.randint(5, 100, (2, 3, 8))
    out = model(ids, labels=torch.tensor([1, 2]))
    assert out.logits.shape == (2, 3)
    # Each candidate's score does not depend on the other candidates.
    alone = model(ids[:, 1:2]).logits
    assert torch.allclose(alone[:, 0], out.logits[:, 1], atol=1e-6)
    expected = torch.nn.functional.cross_entropy(out.logits, torch.tensor([1, 2]))
    assert torch.allclose(out.loss, expected)
    assert {k for k in model.state_dict() if not k.startswith("bert.")} == {"classifier.weight", "classifier.bias"}


def test_export_loads_in_transformers_with_equal_logits(tmp_path):
    transformers = need_module("transformers")
    torch.manual_seed(1)
    model = BertForMultipleChoice(tiny_config()).eval()
    out = write_hf_directory(str(tmp_path / "hf"), model, vocab_tokens=read_vocab_file(str(VOCAB)), do_lower_case=True)
    hf = transformers.BertForMultipleChoice.from_pretrained(out).eval()
    ids = torch.randint(5, 100, (2, 4, 10))
    types = torch.zeros_like(ids)
    types[..., 5:] = 1
    mask = torch.ones_like(ids)
    mask[0, :, 8:] = 0
    with torch.no_grad():
        ours = model(ids, types, mask).logits
        theirs = hf(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
    assert theirs.shape == (2, 4)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertForMultipleChoice"]


# ------------------------------------------------------------------------------------------------ learning


def _color_files(root: Path) -> tuple[Path, Path]:
    """Context names a colour; the candidates are the same colours in a random order; only the context says
    which one is right (chance = 1/4)."""
    rng = random.Random(0)

    def write(path: Path, n: int) -> None:
        with open(path, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["sent1", "sent2", *[f"ending{i}" for i in range(4)], "label"])
            for _ in range(n):
                color = rng.choice(COLORS)
                words = rng.sample(FILLER, 3)
                words.insert(rng.randrange(4), color)
                endings = rng.sample(COLORS, 4)
                w.writerow([" ".join(words), "it was", *endings, endings.index(color)])

    write(root / "train.csv", 512)
    write(root / "dev.csv", 64)
    return root / "train.csv", root / "dev.csv"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    run = tmp_path_factory.mktemp("pretrain")
    return write_tiny_checkpoint(run, tiny_config())


@pytest.mark.slow
def test_learns_a_task_only_the_context_can_solve(tmp_path, checkpoint):
    train, dev = _color_files(tmp_path)
    config = FinetuneConfig(
        train_file=str(train),
        eval_file=str(dev),
        output_dir=str(tmp_path / "run"),
        init_from=checkpoint,
        learning_rate=1e-3,
        batch_size=32,
        num_train_epochs=20,
        warmup_proportion=0.0,
        progress=False,
        seed=3,
    )
    result = finetune(config, make_task("multiple-choice", max_seq_length=16))
    assert result.best_metrics["accuracy"] >= 0.6  # chance is 0.25 (measured: 0.80 after 320 steps)
    with open(tmp_path / "run" / "eval_predictions.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["id", "label"] and len(rows) == 65


@pytest.mark.slow
def test_swag_sample_end_to_end_from_minilm(tmp_path, shared_data, minilm_dir):
    transformers = need_module("transformers")
    swag = shared_data / "swag" / "val.head11.csv"
    runner = CliRunner()
    run = tmp_path / "run"
    out = runner.invoke(
        cli,
        [
            "finetune",
            "--task",
            "multiple-choice",
            "--init-from",
            str(minilm_dir),
            "--train-file",
            str(swag),
            "--eval-file",
            str(swag),
            "-o",
            str(run),
            "--max-seq-length",
            "64",
            "--batch-size",
            "4",
            "--num-train-epochs",
            "1",
            "--no-progress",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "accuracy" in out.output
    out = runner.invoke(
        cli,
        ["predict", "--model", str(run), "--input", str(swag), "--output", str(tmp_path / "p.csv"), "--no-progress"],
    )
    assert out.exit_code == 0, out.output
    assert "11 predictions" in out.output and "accuracy" in out.output
    with open(tmp_path / "p.csv", encoding="utf-8") as f:
        predicted = [int(r["label"]) for r in csv.DictReader(f)]
    assert len(predicted) == 11 and set(predicted) <= {0, 1, 2, 3}
    # Export: transformers' BertForMultipleChoice gives the same choices from the same text.
    out = runner.invoke(cli, ["export", str(run), "-o", str(tmp_path / "hf")])
    assert out.exit_code == 0, out.output
    hf = transformers.BertForMultipleChoice.from_pretrained(tmp_path / "hf").eval()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    with open(swag, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    firsts = [r["sent1"] for r in rows for _ in range(4)]
    seconds = [f"{r['sent2']} {r[f'ending{i}']}" for r in rows for i in range(4)]
    batch = tok(firsts, seconds, truncation="longest_first", max_length=64, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = hf(**{k: v.view(11, 4, -1) for k, v in batch.items()}).logits
    assert logits.argmax(-1).tolist() == predicted
