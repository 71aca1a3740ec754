"""``bertprep evaluate``'s refusals: each one line, before any training, naming the file or option.

What users rely on: a non-finite or non-positive setting is refused (never trained with, never written as
``Infinity``); a second evaluation into a folder that one is writing is refused; a GLUE folder naming one task
twice, a truncated or incomplete ``glue.json`` and a folder left by a refused command get a line naming the
file; a folder with no finished run takes the corrected command's settings.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_glue_harness import FAST, write_glue_folder

from bertprep.bert_model.evaluation.grid import load_grid
from bertprep.bert_model.evaluation.harness import PLAN_FILE
from bertprep.cli.main import cli
from bertprep.core import atomic
from finetune_factory import write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("pretrain"))


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def _one_line_error(code: int, output: str) -> bool:
    """click's error: one ``Error:`` line (under a usage line for a bad option), no traceback."""
    return code in (1, 2) and "Traceback" not in output and output.count("Error") == 1


# ------------------------------------------------------------------------------ non-finite settings


@pytest.mark.parametrize("value", ["1e999", "-1e999", "nan", "inf"])
def test_a_non_finite_grid_value_is_refused_before_any_training(tmp_path, checkpoint, value):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    out = tmp_path / "out"
    code, output = _cli("evaluate", "glue", "-m", checkpoint, "--data", str(data), "-o", str(out), "--device", "cpu",
                        *FAST, "--set", f"learning_rate={value}")  # fmt: skip
    assert _one_line_error(code, output), output
    assert f"'learning_rate={value}': write KEY=VALUE or KEY=V1,V2 with finite numbers" in output
    assert not (out / "runs").exists() and not (out / "glue.json").exists()


@pytest.mark.parametrize("text", ["learning_rate = inf", "learning_rate = [2e-5, nan]", "weight_decay = -inf"])
def test_a_grid_file_with_a_non_finite_value_is_refused_naming_the_file(tmp_path, text):
    grid = tmp_path / "mine.toml"
    grid.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{grid}: \w+ must be a finite number"):
        load_grid(str(grid))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("weight_decay = -0.01", "weight_decay must be in [0, inf)"),
        ("warmup_proportion = 1.0", "warmup_proportion must be in [0, 1)"),
        ("adam_beta2 = [0.999, 1.5]", "adam_beta2 must be in [0, 1)"),
        ("max_grad_norm = -1", "max_grad_norm must be in [0, inf)"),
        ("learning_rate = 0", "learning_rate must be positive"),
    ],
)
def test_a_grid_value_out_of_its_range_is_refused_before_any_run(tmp_path, text, message):
    """(A negative weight decay passed the grid and stopped the sweep at its first run of that setting.)"""
    grid = tmp_path / "mine.toml"
    grid.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{grid}: {message}")):
        load_grid(str(grid))


@pytest.mark.parametrize(
    "option", ["--lr", "--weight-decay", "--adam-epsilon", "--max-grad-norm", "--num-train-epochs"]
)
@pytest.mark.parametrize("value", ["1e999", "nan"])
def test_finetune_refuses_a_non_finite_float_option(tmp_path, checkpoint, option, value):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    code, output = _cli("finetune", "--task", "glue", "--glue-task", "sst2", "--model", checkpoint,
                        "--train-file", str(data / "SST-2" / "train.tsv"), "-o", str(tmp_path / "run"),
                        option, value)  # fmt: skip
    assert code == 2, output
    assert f"Invalid value for '{option}'" in output or "Invalid value for '--learning-rate'" in output
    assert "not a finite number" in output or "not in the range" in output
    assert not (tmp_path / "run").exists()


def test_a_config_made_in_python_refuses_a_non_finite_float():
    from bertprep.bert_model.tasks.finetune import FinetuneConfig

    with pytest.raises(ValueError, match="learning_rate must be a finite number"):
        FinetuneConfig(train_file="t.tsv", output_dir="o", init_from="m", learning_rate=float("inf"))
    with pytest.raises(ValueError, match="adam_epsilon must be a finite number"):
        FinetuneConfig(train_file="t.tsv", output_dir="o", init_from="m", adam_epsilon=float("nan"))


# ------------------------------------------------------------------------------------------ the lock


def test_a_second_evaluation_into_a_folder_being_written_is_refused_naming_the_first(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    out = tmp_path / "out"
    with atomic.directory_lock(str(out), command="evaluate glue"):  # the first evaluation, still running
        code, output = _cli("evaluate", "glue", "-m", checkpoint, "--data", str(data), "-o", str(out),
                            "--device", "cpu", *FAST)  # fmt: skip
    assert code == 1 and "is being written by another evaluate glue run" in output, output
    assert not (out / "runs").exists() and not (out / PLAN_FILE).exists()


# ------------------------------------------------------------------------------ files and folders


def test_a_glue_folder_with_two_folders_of_one_task_is_refused_naming_both(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    (data / "sst2").mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (data / "sst2" / name).write_bytes((data / "SST-2" / name).read_bytes())
    code, output = _cli("evaluate", "glue", "-m", checkpoint, "--data", str(data), "-o", str(tmp_path / "out"))
    assert _one_line_error(code, output), output
    assert "holds two SST-2 folders, SST-2 and sst2" in output
    assert not (tmp_path / "out").exists()


def _summary_folder(root: Path, text: str) -> Path:
    root.mkdir()
    (root / "glue.json").write_text(text, encoding="utf-8")
    return root


def test_evaluate_table_names_a_truncated_or_incomplete_glue_json(tmp_path):
    whole = {
        "label": "m",
        "kind": "glue",
        "columns": [{"name": "SST-2 Acc", "task": "sst2", "values": [90.0], "spread": [0.0], "in_average": True}],
        "average": 90.0,
        "seeds": [12345],
    }
    good = _summary_folder(tmp_path / "good", json.dumps(whole))
    code, output = _cli("evaluate", "table", str(good))
    assert code == 0 and "| m | 90.0 | 90.0 |" in output, output
    truncated = _summary_folder(tmp_path / "truncated", json.dumps(whole)[:40])
    code, output = _cli("evaluate", "table", str(good), str(truncated))
    assert _one_line_error(code, output), output
    assert f"{truncated / 'glue.json'} is not JSON (Expecting" in output
    incomplete = _summary_folder(
        tmp_path / "incomplete", json.dumps({k: v for k, v in whole.items() if k != "columns"})
    )
    code, output = _cli("evaluate", "table", str(incomplete))
    assert _one_line_error(code, output), output
    assert f"{incomplete / 'glue.json'} is not an evaluate summary (no 'columns')" in output


def test_a_folder_left_by_a_refused_command_takes_the_corrected_settings(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    (data / "SST-2" / "dev.tsv").write_text("text\tlabel\nfine\t1\n", encoding="utf-8")  # refused after the plan
    out = tmp_path / "out"
    args = [
        "evaluate",
        "glue",
        "--data",
        str(data),
        "-o",
        str(out),
        "--device",
        "cpu",
        *FAST,
        "--set",
        "learning_rate=1e-3",
    ]
    wrong_model = tmp_path / "other"
    write_tiny_checkpoint(wrong_model)
    code, output = _cli(*args, "-m", str(wrong_model))
    assert code == 1 and (out / PLAN_FILE).exists(), output  # refused before any run, its settings recorded
    write_glue_folder(tmp_path / "fixed", ("sst2",))
    (data / "SST-2" / "dev.tsv").write_bytes((tmp_path / "fixed" / "SST-2" / "dev.tsv").read_bytes())
    code, output = _cli(*args, "-m", checkpoint)
    assert code == 0, output
    assert f"{out / PLAN_FILE}: no run of the settings it records finished (model); it takes" in output
    plan = json.loads((out / PLAN_FILE).read_text())
    assert plan["model"] == os.path.abspath(checkpoint)
    # once a run has finished, other settings are refused, naming the file
    code, output = _cli(*args, "-m", str(wrong_model))
    assert _one_line_error(code, output), output
    assert f"{out} holds an evaluation made with other settings (model: " in output
    assert f"; {out / PLAN_FILE}, 1 finished run(s))" in output


def test_an_evaluation_record_that_is_not_json_is_named(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    out = tmp_path / "out"
    out.mkdir()
    (out / PLAN_FILE).write_text('{"kind": "gl', encoding="utf-8")
    code, output = _cli("evaluate", "glue", "-m", checkpoint, "--data", str(data), "-o", str(out), *FAST)
    assert _one_line_error(code, output), output
    assert f"{out / PLAN_FILE} is not an evaluation record" in output
