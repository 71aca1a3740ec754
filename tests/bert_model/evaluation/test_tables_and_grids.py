"""bert_model/evaluation: grids, table rendering and selection, `evaluate table` and `evaluate squad`, datasets
input (pure functions, and one tiny SQuAD run)."""

from __future__ import annotations

import json
import statistics

import pytest
from click.testing import CliRunner

from bertprep.bert_model.evaluation.glue_data import export_datasets_task, find_glue_tasks
from bertprep.bert_model.evaluation.grid import SHIPPED_GRIDS, load_grid, setting_slug
from bertprep.bert_model.evaluation.table import glue_columns, render_table, select_setting
from bertprep.bert_model.tasks.glue import GlueTask
from bertprep.cli.main import cli
from conftest import FIXTURES, need_module
from finetune_factory import tiny_config, write_tiny_checkpoint


def test_the_default_grid_is_berts_sweep_and_the_shipped_grids_load():
    grid = load_grid("bert")
    points = grid.points("sst2")
    assert [p["learning_rate"] for p in points] == [5e-5, 4e-5, 3e-5, 2e-5]
    assert {(p["batch_size"], p["num_train_epochs"]) for p in points} == {(32, 3)}
    assert grid.points("squad-v2.0") == [{"learning_rate": 5e-5, "batch_size": 48, "num_train_epochs": 2}]
    roberta = load_grid("roberta")
    assert len(roberta.points("rte")) == 6 and roberta.points("rte")[0]["warmup_proportion"] == 0.06
    modernbert = load_grid("modernbert")
    assert {p["num_train_epochs"] for p in modernbert.points("rte")} == {2, 5, 10}
    assert {p["num_train_epochs"] for p in modernbert.points("mnli")} == {1, 2, 3}
    assert set(SHIPPED_GRIDS) == {"bert", "roberta", "modernbert"}
    # --set replaces a key for every task, per-task tables included
    one = load_grid("modernbert", {"num_train_epochs": [1], "learning_rate": [3e-5]})
    assert one.points("rte") == one.points("sst2") == [{"learning_rate": 3e-5, "batch_size": 32, "num_train_epochs": 1}]
    assert setting_slug(one.points("rte")[0], 7) == "lr3e-05-bs32-ep1-seed7"


@pytest.mark.parametrize(
    "text, message",
    [
        ("learning_rate = 'fast'\n", "learning_rate must be a number or a list of numbers"),
        ("batch_size = 16.5\n", "batch_size must be whole numbers"),
        ("[tasks.imdb]\nlearning_rate = 1e-5\n", "unknown task [tasks.imdb]"),
        ("learning_rate = [\n", "not a TOML file"),
    ],
)
def test_bad_grid_values_name_the_file(tmp_path, text, message):
    path = tmp_path / "g.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"g\.toml") as err:
        load_grid(str(path))
    assert message in str(err.value)


def _record(task, lr, seed, value, mm=None):
    return {"task": task, "setting": {"learning_rate": lr}, "seed": seed, "metrics": {"accuracy": value},
            "mismatched": None if mm is None else {"accuracy": mm}}  # fmt: skip


def test_selection_takes_the_best_median_over_seeds_and_reports_the_spread():
    records = [_record("rte", 1e-5, s, v) for s, v in enumerate([0.60, 0.70, 0.71])]
    records += [_record("rte", 2e-5, s, v) for s, v in enumerate([0.50, 0.69, 0.90])]
    chosen = select_setting(records, "accuracy")
    assert chosen["setting"] == {"learning_rate": 1e-5}  # median 0.70 beats 0.69 (the mean would pick 2e-5)
    assert chosen["metrics"]["accuracy"] == 0.70
    assert chosen["spread"]["accuracy"] == pytest.approx(statistics.pstdev([0.60, 0.70, 0.71]))


def test_berts_average_counts_mnli_twice_and_leaves_wnli_out():
    # BERT-base's Table 1 figures (GLUE test sets) give its reported average, 79.6
    figures = {"mnli": 0.846, "qqp": 0.712, "qnli": 0.905, "sst2": 0.935, "cola": 0.521, "stsb": 0.858, "mrpc": 0.889,
               "rte": 0.664, "wnli": 0.10}  # fmt: skip
    metric = {"qqp": "f1", "mrpc": "f1", "cola": "matthews_corrcoef", "stsb": "spearman"}
    selected = {}
    for task, value in figures.items():
        name = metric.get(task, "accuracy")
        selected[task] = {"metrics": {name: value}, "spread": {name: 0.0}, "mismatched": None}
    selected["mnli"].update(mismatched={"accuracy": 0.834}, mismatched_spread={"accuracy": 0.0})
    columns, average = glue_columns(selected)
    assert round(average, 1) == 79.6
    assert [c["name"] for c in columns][:2] == ["MNLI-(m/mm) Acc", "QQP F1"] and not columns[-1]["in_average"]


def _row(label, columns, average=None, seeds=(1,)):
    return {"label": label, "columns": columns, "average": average, "seeds": list(seeds)}


def _col(name, *values, spread=None, in_average=True):
    return {"name": name, "values": list(values), "spread": spread or [0.0] * len(values), "in_average": in_average}


def test_table_marks_the_best_per_column_and_shows_missing_columns():
    a = _row("pre-trained", [_col("MNLI-(m/mm) Acc", 84.6, 83.4), _col("SST-2 Acc", 93.5)], 87.2)
    b = _row("random", [_col("MNLI-(m/mm) Acc", 61.0, 84.0), _col("SST-2 Acc", 80.1), _col("RTE Acc", 55.0)], 70.0)
    text = render_table([a, b])
    lines = text.splitlines()
    assert lines[0] == "| Model | MNLI-(m/mm) Acc | SST-2 Acc | RTE Acc | Average |"
    assert lines[2] == "| pre-trained | **84.6**/83.4 | **93.5** | - | **87.2**† |"
    assert lines[3] == "| random | 61.0/**84.0** | 80.1 | **55.0** | 70.0 |"
    # one model: nothing bold; several seeds: the spread
    single = render_table([_row("x", [_col("RTE Acc", 66.4, spread=[1.25])], 66.4, seeds=(1, 2, 3))])
    assert single.splitlines()[2] == "| x | 66.4 ±1.2 | 66.4 |"


def test_evaluate_table_and_squad_on_a_tiny_run(tmp_path):
    config = tiny_config()
    config.max_position_embeddings = 384  # SQuAD's max_seq_length
    model = write_tiny_checkpoint(tmp_path / "pretrain", config)
    squad = str(FIXTURES / "finetune" / "squad_tiny.json")
    args = ["evaluate", "squad", "-m", model, "--train-file", squad, "--dev-file", squad, "--device", "cpu",
            "--set", "num_train_epochs=1", "--set", "batch_size=4"]  # fmt: skip
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "a"), "--name", "a"])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "a" / "squad.json").read_text())
    run = json.loads(
        (tmp_path / "a" / "runs" / "squad-v1.1" / "lr5e-05-bs4-ep1-seed12345" / "results.json").read_text()
    )
    assert summary["columns"][0]["name"] == "SQuAD v1.1 EM/F1"
    assert summary["columns"][0]["values"] == [run["best_metrics"]["exact_match"], run["best_metrics"]["f1"]]
    assert "| Model | SQuAD v1.1 EM/F1 |" in (tmp_path / "a" / "squad.md").read_text()
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "b"), "--name", "b", "--random-init"])
    assert result.exit_code == 0, result.output
    table = CliRunner().invoke(
        cli, ["evaluate", "table", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "t.md")]
    )
    assert table.exit_code == 0, table.output
    assert table.output.splitlines()[:2] == ["| Model | SQuAD v1.1 EM/F1 |", "|---|:---:|"]
    assert [line.split(" | ")[0] for line in table.output.splitlines()[2:4]] == ["| a", "| b (random init)"]
    assert (tmp_path / "t.md").read_text() == table.output
    missing = CliRunner().invoke(cli, ["evaluate", "table", str(tmp_path / "pretrain")])
    assert missing.exit_code == 1 and "has no glue.json or squad.json" in missing.output


def test_a_datasets_save_of_glue_reads_as_glues_tsv_files(tmp_path):
    datasets = need_module("datasets")
    features = datasets.Features(
        {
            "premise": datasets.Value("string"),
            "hypothesis": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
            "idx": datasets.Value("int32"),
        }
    )
    rows = {
        "premise": ["a cat\tsat", "dogs run"],
        "hypothesis": ["a cat sat", "cats\nsleep"],
        "label": [0, 2],
        "idx": [0, 1],
    }
    splits = {name: datasets.Dataset.from_dict(rows, features=features)
              for name in ("train", "validation_matched", "validation_mismatched")}  # fmt: skip
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "glue" / "mnli"))
    (files,) = find_glue_tasks(str(tmp_path / "glue"), None, str(tmp_path / "export"))
    assert files.task == "mnli" and files.dev_mismatched == str(tmp_path / "export" / "MNLI" / "dev_mismatched.tsv")
    export_datasets_task(files)
    examples = GlueTask.from_preset("mnli").read(files.dev)
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ("a cat sat", "a cat sat", "entailment"),
        ("dogs run", "cats sleep", "contradiction"),
    ]
