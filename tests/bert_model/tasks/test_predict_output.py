"""Where ``bertprep finetune`` and ``predict`` write: the log names the folder the model lands in, ``predict``
never writes over the record of the model's run, and it loads a run fine-tuned without an eval file. The real
CLI, run in this process (``cli_factory.invoke``: click's runner, each run bounded in time): what is asserted is
the exit status, the ``Error:`` line (no traceback: ``invoke`` puts an uncaught exception's on stderr as the
interpreter would), the log's last line (each command's ``logging.basicConfig`` writes to the run's stderr, as
in a fresh process) and the files on disk; a subprocess would only add ~3 s of CPU a run to import torch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bertprep.core import atomic
from cli_factory import error_line, invoke, snapshot
from conftest import need_module

need_module("torch")


def bertprep(*args, timeout: float = 300, **kw):
    """``cli_factory.invoke`` with a bound for a fine-tuning run on a busy machine."""
    return invoke(*args, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def run(tiny_checkpoint_run) -> Path:
    """The session's tiny pre-training run (read only)."""
    return tiny_checkpoint_run


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory) -> Path:
    """A real fine-tuning run FT1 (SST-2 format, 4 rows, from a tiny random checkpoint): FT1/best, results.json,
    metrics.jsonl, eval_predictions.tsv."""
    from finetune_factory import write_tiny_checkpoint

    root = tmp_path_factory.mktemp("ft")
    write_tiny_checkpoint(root / "pretrained")
    data = root / "t.tsv"
    data.write_text("sentence\tlabel\nthe city is good\t1\nthe river was bad\t0\nthe a good\t1\nbad the\t0\n")
    proc = bertprep("finetune", "--task", "glue", "--glue-task", "sst2", "--init-from", root / "pretrained",
                    "--train-file", data, "--eval-file", data, "-o", root / "FT1", "--max-seq-length", 16,
                    "--num-train-epochs", 1, "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return root / "FT1"


@pytest.mark.slow  # ~27 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_predict_refuses_to_write_over_the_record_of_the_models_run(finetuned):
    """Before: `predict -m FT1/best -o FT1/results.json` replaced the fine-tuning run's record with predictions
    (the guard covered files inside --model only). extract-features and train --model are held alike."""
    data = finetuned.parent / "t.tsv"
    before = snapshot(finetuned)
    for target in ("results.json", "metrics.jsonl", "eval_predictions.tsv"):
        line = error_line(bertprep("predict", "-m", finetuned / "best", "-i", data, "-o", finetuned / target,
                                   "--no-progress"), status=1)  # fmt: skip
        assert f"predict would write {finetuned / target}, part of the record of the run {finetuned}" in line
        assert f"--model {finetuned / 'best'} comes from" in line and "choose a --output" in line
    line = error_line(bertprep("extract-features", "-m", finetuned / "best", "--input", data, "--output",
                               finetuned / "results.json"))  # fmt: skip
    assert "extract-features would write" in line and "part of the record of the run" in line
    assert snapshot(finetuned) == before


@pytest.mark.slow  # a real prediction (5-15 s on 2 shared cores)
def test_predict_writes_a_new_file_beside_the_runs_record(finetuned, tmp_path):
    """A new file in the run directory is not the run's record: accepted (and the record untouched)."""
    run = tmp_path / "FT1"
    shutil.copytree(finetuned, run)
    before = snapshot(run)
    proc = bertprep("predict", "-m", run / "best", "-i", finetuned.parent / "t.tsv", "-o", run / "test_preds.tsv",
                    "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    after = snapshot(run)
    assert after.pop("test_preds.tsv").decode().splitlines()[0] == "index\tprediction"
    assert after == before


@pytest.mark.slow  # shares the module's fine-tuning run
@pytest.mark.parametrize("recorded", [{}, {"task": "summarization"}], ids=["no task", "unknown task"])
def test_a_finetune_json_without_a_known_task_is_one_line_naming_the_model(finetuned, tmp_path, recorded):
    """Before: a finetune.json without "task" (edited by hand, written by another tool) ended predict in a bare
    ``KeyError: None`` traceback."""
    import json

    model = tmp_path / "best"
    shutil.copytree(finetuned / "best", model)
    settings = json.loads((model / "finetune.json").read_text(encoding="utf-8"))
    settings.pop("task")
    (model / "finetune.json").write_text(json.dumps({**settings, **recorded}), encoding="utf-8")
    line = error_line(bertprep("predict", "-m", model, "-i", finetuned.parent / "t.tsv", "-o", tmp_path / "p.tsv",
                               "--no-progress"), status=1)  # fmt: skip
    assert f"{model}: finetune.json names no task bertprep knows ({recorded.get('task')!r}" in line
    assert "'bertprep finetune' wrote" in line and not (tmp_path / "p.tsv").exists()


def test_run_directory_of_a_model(tmp_path):
    """RUN/best (finetune), RUN/checkpoints/step-N and RUN/checkpoints (train) belong to RUN when RUN holds a
    run's record; a directory that is no run's (an export) belongs to none."""
    from bertprep.core.paths import run_directory_of

    root = tmp_path.resolve()
    for d in ("FT/best", "PT/checkpoints/step-000002", "HF"):
        (root / d).mkdir(parents=True)
    (root / "FT" / "results.json").write_text("{}")
    assert run_directory_of(str(root / "FT" / "best")) == str(root / "FT")
    assert run_directory_of(str(root / "PT" / "checkpoints" / "step-000002")) == str(root / "PT")
    assert run_directory_of(str(root / "PT" / "checkpoints")) == str(root / "PT")
    assert run_directory_of(str(root / "HF")) is None


@pytest.mark.slow  # a real fine-tuning / training / inference run (10-35 s on 2 shared cores)
def test_finetune_names_where_the_model_lands_and_predict_loads_a_run_without_eval(run, tmp_path):
    """Before: with --overwrite the log's last line named the temporary .tmp-run-* folder as where the model is;
    and a run without --eval-file recorded "metrics": null over the task's metric names, so predict ended in a
    TypeError traceback."""
    data = tmp_path / "t.tsv"
    data.write_text("sentence\tlabel\nthe city is good\t1\nthe river was bad\t0\nthe a good\t1\nbad the\t0\n")
    out = tmp_path / "ft"
    args = ["finetune", "--task", "glue", "--glue-task", "sst2", "--init-from", run, "--train-file", data, "-o", out,
            "--max-seq-length", 16, "--num-train-epochs", 1, "--no-progress"]  # fmt: skip
    assert bertprep(*args).returncode == 0
    (out / "notes.md").write_text("mine")
    proc = bertprep(*args, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    done = [line for line in proc.stderr.splitlines() if " done: " in line]
    assert done and done[-1].endswith(f"model {out / 'best'}") and atomic.STAGING_PREFIX not in done[-1]
    assert (out / "notes.md").read_text() == "mine"
    proc = bertprep("predict", "--model", out, "--input", data, "--output", tmp_path / "p.tsv", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == 5  # header + 4 predictions
