"""Fault injection, round three ("nothing lost, nothing hangs"): the real ``bertprep`` CLI in subprocesses.

As round two (tests/test_faults_round2.py): each test puts a command where it used to record a falsehood, die
of a signal, write over a run's record, hang or end in a traceback, and asserts the bound in time, the exit
status, the one ``Error:`` line naming the file or option, and that what the user had is intact. The pipeline's
items are in tests/pipeline/beam/test_faults_round3_pipeline.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import need_module

need_module("torch")

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def bertprep(*args, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess:
    """Run ``bertprep ARGS`` in a subprocess (bounded in time); returns the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "bertprep.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=ENV,
    )


def error_line(proc: subprocess.CompletedProcess | tuple[int, str], status: int = 2) -> str:
    """The one ``Error:`` line of a failed run (asserting its exit status and that no traceback was printed)."""
    returncode, stderr = proc if isinstance(proc, tuple) else (proc.returncode, proc.stderr)
    assert returncode == status, (returncode, stderr)
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def train_args(shards: Path, *extra) -> list:
    """A tiny, quick ``train`` (one thread, no loader worker unless ``extra`` says so)."""
    return ["train", "--shards", shards, "--batch-size", 4, "--warmup-steps", 0, "--num-workers", 0, "--no-progress",
            *extra]  # fmt: skip


def recorded(run: Path, step: int) -> dict:
    state = json.loads((run / "checkpoints" / f"step-{step:06d}" / "state.json").read_text())
    return {"architecture": state["train_config"]["architecture"], "preset": state["train_config"]["preset"],
            "model": state["model_config"]}  # fmt: skip


# ------------------------------------------------------------------------ item 1: resume records the truth


@pytest.fixture(scope="module")
def modernbert_run(tiny_shards, tmp_path_factory) -> Path:
    """A 2-step ModernBERT tiny run, packed (the issue's MB1)."""
    out = tmp_path_factory.mktemp("mb") / "MB1"
    proc = bertprep(*train_args(tiny_shards / "train", "--architecture", "modernbert", "--preset", "tiny",
                                "--packing", "-o", out, "--max-steps", 6, "--stop-after-steps", 2))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow  # three real training runs (5-15 s each on 2 shared cores)
def test_resume_without_model_options_records_the_checkpoints_model(modernbert_run, tiny_shards, tmp_path):
    """Before: `--resume MB1 --no-packing` (no --architecture / --preset) recorded {bert, base} in the new
    checkpoint, and the next resume with the true `--architecture modernbert --preset tiny` was refused."""
    run = tmp_path / "MB1"
    shutil.copytree(modernbert_run, run)
    proc = bertprep(*train_args(tiny_shards / "train", "--resume", run, "-o", run, "--no-packing", "--max-steps", 6,
                                "--stop-after-steps", 1))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first, second = recorded(run, 2), recorded(run, 3)
    assert second == first and second["architecture"] == "modernbert" and second["preset"] == "tiny"
    proc = bertprep(*train_args(tiny_shards / "train", "--resume", run, "-o", run, "--architecture", "modernbert",
                                "--preset", "tiny", "--max-steps", 6, "--stop-after-steps", 1))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert recorded(run, 4) == first


def test_resume_refuses_another_architecture(modernbert_run, tiny_shards):
    """Before: `--resume <a BERT run> --architecture modernbert` exited 0, trained BERT and recorded modernbert
    (here the other way round: the architecture is compared whichever it is)."""
    before = snapshot(modernbert_run)
    start = time.monotonic()
    proc = bertprep(*train_args(tiny_shards / "train", "--resume", modernbert_run, "-o", modernbert_run,
                                "--architecture", "bert", "--max-steps", 6))  # fmt: skip
    line = error_line(proc)
    assert "Invalid value for --architecture: --architecture bert cannot change when resuming" in line
    assert "(the checkpoint's is 'modernbert')" in line and "drop --architecture" in line
    assert time.monotonic() - start < 60  # refused before any model is built
    assert snapshot(modernbert_run) == before


def test_recorded_train_config_is_the_trained_model():
    """The checkpoint's train_config takes the architecture from the model, and on resume the preset and model
    options from the checkpoint resumed, whatever the TrainConfig says (a library caller's defaults)."""
    from bertprep.bert_model.models.modernbert_config import ModernBertConfig
    from bertprep.bert_model.pretrain.build import Start, recorded_train_config
    from bertprep.bert_model.pretrain.train_config import TrainConfig

    model_config = ModernBertConfig.from_preset("tiny", vocab_size=64, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                                                bos_token_id=2, eos_token_id=3)  # fmt: skip
    saved = {"train_config": {"architecture": "modernbert", "preset": "tiny", "hidden_size": None,
                              "hidden_dropout_prob": 0.0}}  # fmt: skip
    config = TrainConfig(shards="s", output_dir="o", resume="o")  # defaults: bert, base
    got = recorded_train_config(config, Start(checkpoint="o/checkpoints/step-000002", saved=saved), model_config)
    assert (got["architecture"], got["preset"], got["hidden_dropout_prob"]) == ("modernbert", "tiny", 0.0)
    config = TrainConfig(shards="s", output_dir="o", init_from="hf", num_hidden_layers=9, hidden_dropout_prob=0.0)
    got = recorded_train_config(config, Start(), model_config)
    assert (got["architecture"], got["num_hidden_layers"], got["hidden_dropout_prob"]) == ("modernbert", None, 0.0)


# -------------------------------------------------------------- item 2: a shard truncated while train reads it


_READ_THEN_TRUNCATE = r"""
import os, sys
from bertprep.bert_model.pretrain.data import _ShardReader
path = sys.argv[1]
reader = _ShardReader(path, 64)
os.truncate(path, 100)  # (a mapped file: the next access to a page past the end is SIGBUS)
print(sum(int(reader.row(i)["input_ids"].sum()) for i in range(reader.num_rows)))
"""


def test_a_shard_read_survives_its_file_being_truncated(tiny_shards, tmp_path):
    """Before: the shard was memory-mapped; truncated under the reader, the next row access killed the process
    with SIGBUS (exit -7 here; 135 from a shell), without a word."""
    import pyarrow as pa

    shard = tmp_path / "shard.arrow"
    shutil.copy(tiny_shards / "train" / "shard-00000-of-00004.arrow", shard)
    with pa.ipc.open_file(pa.py_buffer(shard.read_bytes())) as reader:
        expected = sum(sum(ids) for ids in reader.read_all().column("input_ids").to_pylist())
    proc = subprocess.run([sys.executable, "-c", _READ_THEN_TRUNCATE, shard], capture_output=True, text=True,
                          timeout=60, env=ENV)  # fmt: skip
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert int(proc.stdout) == expected


#: A tiny model without dropout, 2 micro-batches a step, a long schedule (see _train_until_truncated).
_EXACT = ["--preset", "tiny", "--hidden-size", 32, "--num-attention-heads", 2, "--hidden-dropout-prob", 0,
          "--attention-probs-dropout-prob", 0, "--gradient-accumulation-steps", 2, "--max-steps", 100_000,
          "--shuffle-buffer-size", 8]  # fmt: skip


def _train_until_truncated(shards: Path, run: Path, num_workers: int) -> tuple[int, str, int]:
    """Start a long `train` on ``shards``, truncate every shard once 3 steps are logged, and wait for the end;
    returns (exit status, stderr, the last step logged). Gradient accumulation 2 and no dropout, so that a
    checkpoint at a step boundary resumes exactly (see test below)."""
    args = train_args(shards, "-o", run, *_EXACT, "--log-every", 1, "--save-every", 0)
    args[args.index("--num-workers") + 1] = num_workers
    log = run.parent / "stderr.txt"
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "bertprep.cli.main", *map(str, args)], stderr=sink,
                                stdout=subprocess.DEVNULL, env=ENV)  # fmt: skip
    try:
        metrics, deadline = run / "metrics.jsonl", time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        for shard in shards.glob("*.arrow"):
            os.truncate(shard, 100)
        returncode = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    last_step = json.loads(metrics.read_text().splitlines()[-1])["step"]
    return returncode, log.read_text(), last_step


@pytest.mark.slow  # three real training runs (10-30 s on 2 shared cores)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_shard_truncated_while_train_reads_it(tiny_shards, tmp_path, num_workers):
    """Before: with --num-workers 0 the process died of SIGBUS (exit 135, no message, no checkpoint); with 1,
    82 lines ending "Bus error ... out of shared memory". Now: one line naming the shard, a checkpoint of the
    last finished step (which resumes exactly once the shards are whole again), exit 1."""
    from bertprep.bert_model import checkpoint as ckpt

    shards = tmp_path / "shards"
    shutil.copytree(tiny_shards / "train", shards)
    returncode, stderr, last_step = _train_until_truncated(shards, tmp_path / "run", num_workers)
    line = error_line((returncode, stderr), status=1)
    assert f"{shards}/shard-0000" in line and "not a readable Arrow shard" in line
    checkpoint = tmp_path / "run" / "checkpoints" / f"step-{last_step:06d}"
    assert f"step {last_step}, the last finished, is checkpointed in {checkpoint}" in line
    assert f"--resume {tmp_path / 'run'}" in line
    path, state = ckpt.load_intact_checkpoint(str(tmp_path / "run"))
    assert path == str(checkpoint) and state["step"] == last_step
    # Whole again, the shards resume from it to the weights an uninterrupted run has at that step + 2.
    shutil.rmtree(shards)
    shutil.copytree(tiny_shards / "train", shards)
    common = train_args(shards, *_EXACT)
    common[common.index("--num-workers") + 1] = num_workers
    proc = bertprep(*common, "--resume", tmp_path / "run", "-o", tmp_path / "run", "--stop-after-steps", 2)
    assert proc.returncode == 0, proc.stderr
    proc = bertprep(*common, "-o", tmp_path / "whole", "--stop-after-steps", last_step + 2)
    assert proc.returncode == 0, proc.stderr
    name = f"checkpoints/step-{last_step + 2:06d}/model.safetensors"
    assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


# ------------------------------------------------------------- item 3: predict over the record of the run


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


def test_run_directory_of_a_model(tmp_path):
    """RUN/best (finetune), RUN/checkpoints/step-N and RUN/checkpoints (train) belong to RUN when RUN holds a
    run's record; a directory that is no run's (an export) belongs to none."""
    from bertprep.pipeline.paths import run_directory_of

    root = tmp_path.resolve()
    for d in ("FT/best", "PT/checkpoints/step-000002", "HF"):
        (root / d).mkdir(parents=True)
    (root / "FT" / "results.json").write_text("{}")
    assert run_directory_of(str(root / "FT" / "best")) == str(root / "FT")
    assert run_directory_of(str(root / "PT" / "checkpoints" / "step-000002")) == str(root / "PT")
    assert run_directory_of(str(root / "PT" / "checkpoints")) == str(root / "PT")
    assert run_directory_of(str(root / "HF")) is None


# ---------------------------------------------------------------------- item 8 (train): Ctrl-C at the edges

#: Runs `bertprep ARGS...` with a SIGINT sent by the process to itself at a fixed point (argv[1]): "start-up"
#: while the model is being built, "twice" two SIGINTs at the 3rd batch (a user pressing Ctrl-C twice).
_SIGINT_RUNNER = r"""
import os, signal, sys
fault, args = sys.argv[1], sys.argv[2:]
import bertprep.bert_model.pretrain.build as build
import bertprep.bert_model.pretrain.trainer as trainer
if fault == "start-up":
    build_model = build.build_model
    def interrupted_build(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)
        return build_model(*a, **k)
    build.build_model = interrupted_build
elif fault == "twice":
    calls, move = [0], trainer._move
    def interrupted_move(batch, device):
        calls[0] += 1
        if calls[0] == 3:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return move(batch, device)
    trainer._move = interrupted_move
from bertprep.cli.main import main
sys.argv = ["bertprep", *args]
main()
"""


def _interrupted_train(fault: str, shards: Path, out: Path) -> subprocess.CompletedProcess:
    args = train_args(shards, "-o", out, "--preset", "tiny", "--hidden-size", 32, "--num-attention-heads", 2,
                      "--max-steps", 50, "--log-every", 1, "--save-every", 0)  # fmt: skip
    return subprocess.run([sys.executable, "-c", _SIGINT_RUNNER, fault, *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=ENV)  # fmt: skip


def test_ctrl_c_during_start_up_stops_before_the_first_step(tiny_shards, tmp_path):
    """Before: a Ctrl-C while the model was being built went on to build the loader, train a step and write a
    checkpoint of it. Now the run stops before the first step: nothing trained, nothing saved, exit 130."""
    proc = _interrupted_train("start-up", tiny_shards / "train", tmp_path / "run")
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "stopped by SIGINT before the first step" in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_second_ctrl_c_exits_130_with_one_line(tiny_shards, tmp_path):
    """Before: the second Ctrl-C (abort without a checkpoint) printed click's "Aborted!" and exited 1, as a
    failed command does. Now one line says what is left, and the status is 130 as for any command ended by
    Ctrl-C."""
    proc = _interrupted_train("twice", tiny_shards / "train", tmp_path / "run")
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "Aborted!" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("bertprep: ")]
    assert lines == ["bertprep: aborted by a second SIGINT without a checkpoint of the step under way; no checkpoint "
                     "was written"]  # fmt: skip
    assert not (tmp_path / "run" / "checkpoints").exists()
