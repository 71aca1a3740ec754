"""bert_model/evaluation: `bertprep evaluate glue` on a tiny model and tiny tasks written here as GLUE TSV files.

What users rely on: each task's figure is the GLUE metric of the kept model's dev predictions (checked with
scikit-learn / scipy on the predictions files), MNLI gets both dev sets, a killed evaluation continued gives the
table of an uninterrupted one, and bad input is refused in one line before any training.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertprep.bert_model.evaluation import harness
from bertprep.bert_model.evaluation.harness import GlueEvalConfig, evaluate_glue
from bertprep.cli.main import cli
from cli_factory import invoke
from finetune_factory import FILLER, write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Quick settings: a tiny model learns the keyword tasks below in a few steps.
FAST = ["--set", "batch_size=16", "--set", "num_train_epochs=2", "--set", "max_seq_length=32"]


def _sentences(rng: random.Random, label: int, words=("good", "great"), other=("bad", "awful")) -> str:
    chosen = rng.sample(FILLER, 4)
    chosen.insert(rng.randrange(5), rng.choice(words if label else other))
    return " ".join(chosen)


def write_glue_folder(root: Path, tasks=("sst2", "mrpc"), n_train: int = 48, n_dev: int = 24) -> Path:
    """Tiny keyword tasks in GLUE's layout: SST-2 (sentence, label), MRPC (BOM header, pairs), STS-B (scores),
    CoLA (no header, 4 columns), MNLI (3 labels, dev_matched / dev_mismatched)."""
    rng = random.Random(7)

    def rows(n: int, task: str) -> list[str]:
        out = []
        for i in range(n):
            label = rng.randrange(3 if task == "mnli" else 2)
            a = _sentences(rng, label % 2)
            if task == "sst2":
                out.append(f"{a}\t{label}")
            elif task == "mrpc":
                out.append(f"{label}\t{i}\t{i + 1000}\t{a}\t{_sentences(rng, label)}")
            elif task == "stsb":
                out.append(f"{a}\t{_sentences(rng, label)}\t{label * 4 + rng.random():.3f}")
            elif task == "cola":
                out.append(f"src\t{label}\t\t{a}")
            else:
                gold = ["contradiction", "entailment", "neutral"][label]
                out.append(f"{a}\t{'the cat' if label == 2 else 'one dog'}\t{gold}")
        return out

    headers = {
        "sst2": "sentence\tlabel",
        "mrpc": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        "stsb": "sentence1\tsentence2\tscore",
        "cola": None,
        "mnli": "sentence1\tsentence2\tgold_label",
    }
    folders = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "cola": "CoLA", "mnli": "MNLI"}
    for task in tasks:
        folder = root / folders[task]
        folder.mkdir(parents=True)
        devs = ("dev_matched.tsv", "dev_mismatched.tsv") if task == "mnli" else ("dev.tsv",)
        for name, n in (("train.tsv", n_train), *((d, n_dev) for d in devs)):
            lines = ([headers[task]] if headers[task] else []) + rows(n, task)
            (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("pretrain"))


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["evaluate", *args])
    return result.exit_code, result.output


def _dev_labels(path: Path, task: str) -> list[str]:
    lines = path.read_text(encoding="utf-8").lstrip("\ufeff").splitlines()
    if task == "cola":
        return [line.split("\t")[1] for line in lines]
    column = {"sst2": 1, "mrpc": 0, "stsb": 2, "mnli": 2}[task]
    return [line.split("\t")[column] for line in lines[1:]]


def _predictions(path: Path) -> list[str]:
    return [line.split("\t")[1] for line in path.read_text(encoding="utf-8").splitlines()[1:]]


def _sklearn(task: str, labels: list[str], predictions: list[str]) -> dict[str, float]:
    if task == "stsb":
        y, p = np.array(labels, dtype=float), np.array(predictions, dtype=float)
        return {"pearson": pearsonr(p, y)[0], "spearman": spearmanr(p, y)[0]}
    if task == "cola":
        return {
            "matthews_corrcoef": matthews_corrcoef(labels, predictions),
            "accuracy": accuracy_score(labels, predictions),
        }
    out = {"accuracy": accuracy_score(labels, predictions)}
    if task == "mrpc":
        out["f1"] = f1_score(labels, predictions, pos_label="1")
    return out


def test_each_figure_is_the_glue_metric_of_the_kept_models_dev_predictions(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("mnli", "sst2", "cola", "stsb", "mrpc"))
    out = tmp_path / "out"
    code, output = _cli("glue", "-m", checkpoint, "--data", str(data), "-o", str(out), "--device", "cpu", *FAST,
                        "--set", "learning_rate=5e-3,1e-3", "--name", "tiny")  # fmt: skip
    assert code == 0, output
    summary = json.loads((out / "glue.json").read_text())
    assert len(summary["runs"]) == 10 and output.count("] ") >= 10  # 5 tasks x 2 learning rates, a line each
    figures = {c["task"]: c["values"] for c in summary["columns"]}
    assert list(figures) == ["mnli", "sst2", "cola", "stsb", "mrpc"]  # BERT's Table 1 order
    for task, selected in summary["selected"].items():
        run = next(r for r in summary["runs"] if r["task"] == task and r["setting"] == selected["setting"])
        # the selected setting is the best of the task's runs on its table metric
        metric = harness.glue_metric(task)
        assert run["metrics"][metric] == max(r["metrics"][metric] for r in summary["runs"] if r["task"] == task)
        folder = {"mnli": "MNLI", "sst2": "SST-2", "cola": "CoLA", "stsb": "STS-B", "mrpc": "MRPC"}[task]
        dev = data / folder / ("dev_matched.tsv" if task == "mnli" else "dev.tsv")
        expected = _sklearn(task, _dev_labels(dev, task), _predictions(Path(run["run_dir"]) / "eval_predictions.tsv"))
        assert selected["metrics"] == pytest.approx(expected, abs=1e-5)  # STS-B predictions are saved to 6 digits
        assert figures[task][0] == pytest.approx(100 * expected[metric])
    # MNLI: the kept model scored on the mismatched dev set too, shown as m/mm
    mnli = next(
        r for r in summary["runs"] if r["task"] == "mnli" and r["setting"] == summary["selected"]["mnli"]["setting"]
    )
    mm = _predictions(Path(mnli["run_dir"]) / "dev_mismatched_predictions.tsv")
    mm_accuracy = accuracy_score(_dev_labels(data / "MNLI" / "dev_mismatched.tsv", "mnli"), mm)
    assert figures["mnli"] == pytest.approx(
        [100 * summary["selected"]["mnli"]["metrics"]["accuracy"], 100 * mm_accuracy]
    )
    # BERT's average: every figure but WNLI's, MNLI's two counting as two
    flat = [v for values in figures.values() for v in values]
    assert summary["average"] == pytest.approx(sum(flat) / len(flat))
    md = (out / "glue.md").read_text()
    assert "| Model | MNLI-(m/mm) Acc | SST-2 Acc | CoLA MCC | STS-B Spearman | MRPC F1 | Average |" in md
    assert f"| tiny | {figures['mnli'][0]:.1f}/{figures['mnli'][1]:.1f} |" in md


def _run_cli_process(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    code = "from bertprep.cli.main import main; main()"
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.slow  # ~21 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_killed_at_a_random_moment_and_run_again_gives_the_uninterrupted_table(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue")
    common = ["evaluate", "glue", "-m", checkpoint, "--data", str(data), "--device", "cpu", "--name", "tiny", *FAST,
              "--set", "learning_rate=5e-3,1e-3"]  # fmt: skip
    t0 = time.monotonic()
    whole = _run_cli_process([*common, "-o", str(tmp_path / "whole")])
    assert whole.wait(timeout=300) == 0, whole.stderr.read()
    duration = time.monotonic() - t0
    moment = random.Random().uniform(0.5, duration)
    killed = _run_cli_process([*common, "-o", str(tmp_path / "killed")])
    try:
        killed.wait(timeout=moment)
    except subprocess.TimeoutExpired:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    again = invoke(*common, "-o", str(tmp_path / "killed"), timeout=300)  # (in this process: what counts is the files)
    assert again.returncode == 0, f"killed after {moment:.1f} s: {again.stderr}"
    expected = (tmp_path / "whole" / "glue.md").read_text()
    assert (tmp_path / "killed" / "glue.md").read_text() == expected, f"killed after {moment:.1f} s"
    runs = json.loads((tmp_path / "killed" / "glue.json").read_text())["runs"]
    assert len(runs) == 4 and not list((tmp_path / "killed" / "runs").glob("*/*/.bertprep-run-*"))


def test_a_stop_during_a_run_keeps_the_finished_runs_and_the_next_invocation_only_does_the_rest(
    tmp_path, checkpoint, monkeypatch
):
    data = write_glue_folder(tmp_path / "glue")
    fast = {"batch_size": [16], "num_train_epochs": [2], "max_seq_length": [32], "learning_rate": [5e-3, 1e-3]}
    config = dict(model=checkpoint, data_dir=str(data), output_dir=str(tmp_path / "out"), device="cpu", overrides=fast)
    real = harness._run_finetune
    calls = []

    def stop_in_third(ft_config, task):
        calls.append(ft_config.output_dir)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third run
        return real(ft_config, task)

    monkeypatch.setattr(harness, "_run_finetune", stop_in_third)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        evaluate_glue(GlueEvalConfig(**config), report=lines.append)
    assert lines[-1].startswith("[3/4] mrpc lr0.005-bs16-ep2-len32-seed12345: stopped; 2 of 4 runs are finished")
    assert not (tmp_path / "out" / "glue.md").exists()
    lines.clear()
    calls.clear()
    monkeypatch.setattr(harness, "_run_finetune", real)
    resumed = evaluate_glue(GlueEvalConfig(**config), report=lines.append)
    assert [line.endswith("finished earlier)") for line in lines] == [True, True, False, False]
    monkeypatch.setattr(harness, "_run_finetune", stop_in_third)  # a third invocation trains nothing
    again = evaluate_glue(GlueEvalConfig(**config), report=lambda line: None)
    assert calls == [] and again["columns"] == resumed["columns"]


def test_small_tasks_start_from_the_mnli_model_of_the_best_mnli_setting(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("mnli", "mrpc"))
    code, output = _cli("glue", "-m", checkpoint, "--data", str(data), "-o", str(tmp_path / "out"), *FAST,
                        "--set", "learning_rate=5e-3,1e-3", "--small-tasks-from-mnli", "--device", "cpu")  # fmt: skip
    assert code == 0, output
    summary = json.loads((tmp_path / "out" / "glue.json").read_text())
    mnli_setting = summary["selected"]["mnli"]["setting"]
    mnli_best = next(r for r in summary["runs"] if r["task"] == "mnli" and r["setting"] == mnli_setting)
    for run in (r for r in summary["runs"] if r["task"] == "mrpc"):
        assert run["init_from"] == os.path.join(mnli_best["run_dir"], "best")
    assert "RTE, MRPC and STS-B start from the MNLI model." in (tmp_path / "out" / "glue.md").read_text()


# ------------------------------------------------------------------------------------------- bad input


def _no_training(out: Path) -> bool:
    return not (out / "runs").exists()


def test_a_folder_without_a_known_task_is_refused_in_one_line(tmp_path, checkpoint):
    (tmp_path / "glue" / "IMDB").mkdir(parents=True)
    code, output = _cli("glue", "-m", checkpoint, "--data", str(tmp_path / "glue"), "-o", str(tmp_path / "out"))
    assert code == 1 and output.count("\n") == 1 and "holds no GLUE task folder" in output
    assert _no_training(tmp_path / "out")


def test_a_task_folder_without_dev_tsv_is_refused_before_any_training(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue")
    (data / "MRPC" / "dev.tsv").unlink()
    code, output = _cli("glue", "-m", checkpoint, "--data", str(data), "-o", str(tmp_path / "out"))
    assert code == 1 and output.count("\n") == 1
    assert f"{data / 'MRPC'} has no dev.tsv" in output
    assert _no_training(tmp_path / "out")


def test_a_grid_with_an_unknown_key_is_refused_naming_key_and_file(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue")
    grid = tmp_path / "mine.toml"
    grid.write_text("learning_rate = [2e-5]\nlearnig_rate_decay = 0.9\n", encoding="utf-8")
    code, output = _cli("glue", "-m", checkpoint, "--data", str(data), "-o", str(tmp_path / "out"), "--grid", str(grid))
    assert code == 1 and output.count("\n") == 1
    assert f"{grid}: unknown key 'learnig_rate_decay'" in output
    grid.write_text("[tasks.sst2]\nepochs = 3\n", encoding="utf-8")
    code, output = _cli("glue", "-m", checkpoint, "--data", str(data), "-o", str(tmp_path / "out"), "--grid", str(grid))
    assert code == 1 and f"{grid} [tasks.sst2]: unknown key 'epochs'" in output
    assert _no_training(tmp_path / "out")


def test_a_file_of_the_wrong_layout_and_other_settings_on_the_same_folder_are_refused(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue")
    (data / "SST-2" / "dev.tsv").write_text("text\tlabel\nfine\t1\n", encoding="utf-8")
    code, output = _cli("glue", "-m", checkpoint, "--data", str(data), "-o", str(tmp_path / "out"))
    assert code == 1 and "no column 'sentence' in the header (text, label)" in output
    assert _no_training(tmp_path / "out")
    out = tmp_path / "out2"
    good = write_glue_folder(tmp_path / "glue2")
    args = ["glue", "-m", checkpoint, "--data", str(good), "-o", str(out), "--tasks", "sst2", *FAST]
    assert _cli(*args, "--set", "learning_rate=1e-3", "--device", "cpu")[0] == 0
    code, output = _cli(*args, "--set", "learning_rate=2e-3", "--device", "cpu")
    assert code == 1 and "holds an evaluation made with other settings (grid:" in output


@pytest.mark.slow  # ~21 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_ctrl_c_stops_with_one_line_and_the_same_command_continues(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    args = ["evaluate", "glue", "-m", checkpoint, "--data", str(data), "--device", "cpu", "-o", str(tmp_path / "out"),
            *FAST, "--set", "learning_rate=5e-3,1e-3"]  # fmt: skip
    proc = _run_cli_process(args)
    lines = []
    for line in proc.stderr:  # Ctrl-C once the first run has finished, during the second
        lines.append(line)
        if line.startswith("[1/2]"):
            proc.send_signal(signal.SIGINT)
            break
    lines += proc.stderr.readlines()
    assert proc.wait(timeout=60) == 130, "".join(lines)
    # "[2/2] sst2 lr0.001-...: stopped; ..." (or without the run's name when Ctrl-C came between two runs)
    assert lines[-2].endswith("stopped; 1 of 2 runs are finished, the same command continues from there\n")
    assert lines[-2].startswith(("[2/2] sst2 lr0.001-bs16-ep2-len32-seed12345: stopped", "stopped"))
    assert lines[-1] == "bertprep: stopped by SIGINT\n"
    assert not (tmp_path / "out" / "glue.md").exists()
    again = invoke(*args, timeout=120)  # (in this process: the Ctrl-C was the process's; the rest is the files')
    rest = again.stderr
    assert again.returncode == 0, rest
    assert "[1/2] sst2 lr0.005-bs16-ep2-len32-seed12345: dev accuracy" in rest and "finished earlier" in rest
    assert (tmp_path / "out" / "glue.md").exists()


def test_seeds_give_the_median_and_the_spread_of_their_runs(tmp_path, checkpoint):
    data = write_glue_folder(tmp_path / "glue", ("sst2",))
    out = tmp_path / "out"
    code, output = _cli("glue", "-m", checkpoint, "--data", str(data), "-o", str(out), "--device", "cpu", *FAST,
                        "--set", "learning_rate=1e-3", "--seeds", "3", "--name", "tiny")  # fmt: skip
    assert code == 0, output
    summary = json.loads((out / "glue.json").read_text())
    assert [r["seed"] for r in summary["runs"]] == [12345, 12346, 12347]  # the first is finetune's default seed
    accuracies = [r["metrics"]["accuracy"] for r in summary["runs"]]
    (column,) = summary["columns"]
    assert column["values"] == [pytest.approx(100 * float(np.median(accuracies)))]
    assert column["spread"] == [pytest.approx(100 * float(np.std(accuracies)))]
    assert f"| tiny | {column['values'][0]:.1f} ±{column['spread'][0]:.1f} |" in (out / "glue.md").read_text()
