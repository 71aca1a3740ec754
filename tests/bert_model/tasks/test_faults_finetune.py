"""Fault tests of `bertprep finetune`, `predict` and `export` (issue 12, item 3: nothing of a user's is lost).

Each test runs a command whose output would replace its own input (or a failing run with --overwrite) and
asserts the exit status, that the message names the path, and that every input and earlier output is
byte-for-byte as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core import atomic
from conftest import FIXTURES
from finetune_factory import predict_args, sst2_finetune_args, write_sentiment_files, write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = FIXTURES / "finetune" / "vocab.txt"


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _error_line(result) -> str:
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), f"traceback instead of a message: {result.exception!r}"
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.fixture(scope="module")
def pretrain_run(tmp_path_factory) -> Path:
    """A tiny bertprep pre-training run directory (random weights, fixture vocab) with a metrics file."""
    run = tmp_path_factory.mktemp("pretrain")
    write_tiny_checkpoint(run)
    (run / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 7.0}\n')
    return run


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("glue")
    write_sentiment_files(root, train=48, dev=16)
    return root


def _finetune_args(init_from: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return sst2_finetune_args(init_from, data / "train.tsv", data / "dev.tsv", out, *extra, epochs=1)


@pytest.fixture(scope="module")
def finetune_run(pretrain_run, data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ft") / "run"
    result = CliRunner().invoke(cli, _finetune_args(pretrain_run, data, out))
    assert result.exit_code == 0, result.output
    return out


def test_predict_refuses_output_equal_to_input(finetune_run, data, tmp_path):
    """Before the fix --output = --input replaced the input file with the predictions."""
    input_file = tmp_path / "test.tsv"
    input_file.write_bytes((data / "dev.tsv").read_bytes())
    before = input_file.read_bytes()
    for output in (input_file, tmp_path / "." / "test.tsv"):
        result = CliRunner().invoke(
            cli,
            predict_args(finetune_run, input_file, output),
        )
        line = _error_line(result)
        assert "which is --input" in line and str(output) in line
        assert input_file.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.tsv"]  # no temporary file left


def test_predict_refuses_to_overwrite_a_file_of_the_model(finetune_run, data):
    before = _snapshot(finetune_run)
    for target in (finetune_run / "best" / "config.json", finetune_run / "results.json"):
        result = CliRunner().invoke(
            cli,
            predict_args(finetune_run, data / "dev.tsv", target),
        )
        line = _error_line(result)
        assert str(target) in line and "lies inside --model" in line
    assert _snapshot(finetune_run) == before


def test_export_into_the_model_directory_is_refused(finetune_run, pretrain_run, tmp_path):
    """Before the fix `export DIR -o DIR --overwrite` replaced the run (checkpoints, metrics) by the export."""
    for model_dir, output in (
        (finetune_run, finetune_run),
        (pretrain_run, pretrain_run),
        (finetune_run / "best", finetune_run),
        (pretrain_run / "checkpoints", pretrain_run),
    ):
        before = _snapshot(model_dir)
        result = CliRunner().invoke(cli, ["export", str(model_dir), "-o", str(output), "--overwrite"])
        line = _error_line(result)
        assert str(output) in line and "model" in line
        assert _snapshot(model_dir) == before
    # below it is refused too (round two: nothing a command writes may lie inside what it reads); beside it works
    before = _snapshot(pretrain_run)
    line = _error_line(CliRunner().invoke(cli, ["export", str(pretrain_run), "-o", str(pretrain_run / "hf")]))
    assert line.startswith("Error: Invalid value for --output-dir") and "lies inside MODEL_DIR" in line
    assert "choose a --output-dir outside" in line
    assert _snapshot(pretrain_run) == before
    result = CliRunner().invoke(cli, ["export", str(pretrain_run), "-o", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output


def test_finetune_into_the_run_it_starts_from_is_refused_before_anything_is_deleted(pretrain_run, finetune_run, data):
    """Before the fix `finetune -o RUN --init-from RUN` deleted RUN's metrics (and best/, results.json of a
    fine-tuning run) before training."""
    for init_from, out in (
        (pretrain_run, pretrain_run),
        (pretrain_run / "checkpoints" / "step-000001", pretrain_run),
        (finetune_run / "best", finetune_run),
        (finetune_run, finetune_run),
    ):
        before = _snapshot(out)
        result = CliRunner().invoke(cli, _finetune_args(init_from, data, out, "--overwrite"))
        line = _error_line(result)
        assert str(init_from) in line and "--output-dir" in line
        assert _snapshot(out) == before


def test_overwrite_keeps_the_previous_run_until_the_new_one_completes(pretrain_run, finetune_run, data, tmp_path):
    """Before the fix --overwrite deleted the previous run first: a failing rerun left nothing. Now a rerun
    that fails (here: its eval file is malformed) leaves the previous run byte-for-byte, and one that
    succeeds replaces it whole, leaving no staging directory behind (and removing those of killed runs)."""
    run = tmp_path / "run"
    result = CliRunner().invoke(cli, _finetune_args(pretrain_run, data, run))
    assert result.exit_code == 0, result.output
    before = _snapshot(run)
    bad_eval = tmp_path / "bad-dev.tsv"
    bad_eval.write_text("sentence\tlabel\nno label column here\n", encoding="utf-8")
    args = _finetune_args(pretrain_run, data, run, "--overwrite")
    failing = list(args)
    failing[failing.index("--eval-file") + 1] = str(bad_eval)
    result = CliRunner().invoke(cli, failing)
    line = _error_line(result)
    assert str(bad_eval) in line
    assert _snapshot(run) == before
    assert not [p for p in run.iterdir() if p.name.startswith(".")]  # no staging directory left

    # A killed run's staging folder (dead pid on this host) is removed by the next complete run; a live
    # process's is kept.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = run / f"{atomic.STAGING_PREFIX}run-{atomic.host_name()}-{dead.pid}-0123abcd"
    live = run / f"{atomic.STAGING_PREFIX}run-{atomic.host_name()}-{os.getppid()}-0123abcd"  # alive: pytest's parent
    for folder in (stale, live):
        (folder / "best").mkdir(parents=True)

    result = CliRunner().invoke(cli, args + ["--seed", "7"])
    assert result.exit_code == 0, result.output
    after = _snapshot(run)
    assert {k for k in after if not k.startswith(".")} == set(before)
    assert after["results.json"] != before["results.json"]
    assert [p.name for p in run.iterdir() if p.name.startswith(".")] == [live.name]
