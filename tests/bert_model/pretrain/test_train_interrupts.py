"""``bertprep train`` disturbed mid-run: a shard truncated while it is read ends the run with one line naming
it; Ctrl-C during start-up stops before the first step, and a second Ctrl-C exits 130 with one line. The real
CLI, each run bounded in time. In subprocesses where the process is what is tested: a SIGBUS that would kill it,
shards truncated under a run going on in another process, SIGINTs the process sends itself (click's runner would
turn them into "Aborted!") and any run with a loader worker (forked from the training process, which should not
be pytest's). The resume of a truncated run without workers, and the uninterrupted run it must equal, run in
this process (``cli_factory.invoke``): their equality is of the files they write, and a process of its own
would only add ~3 s of CPU a run to import torch.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_factory import ENV, error_line, invoke
from cli_factory import bertprep as _bertprep
from conftest import need_module

need_module("torch")


def bertprep(*args, timeout: float = 300, **kw):
    """``cli_factory.bertprep`` with a bound for a training run on a busy machine."""
    return _bertprep(*args, timeout=timeout, **kw)


def train_args(shards: Path, *extra) -> list:
    """A tiny, quick ``train`` (one thread, no loader worker unless ``extra`` says so)."""
    return ["train", "--shards", shards, "--batch-size", 4, "--warmup-steps", 0, "--num-workers", 0, "--no-progress",
            *extra]  # fmt: skip


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
    run = bertprep if num_workers else functools.partial(invoke, timeout=300)  # (a worker: forked by a process)
    proc = run(*common, "--resume", tmp_path / "run", "-o", tmp_path / "run", "--stop-after-steps", 2)
    assert proc.returncode == 0, proc.stderr
    proc = run(*common, "-o", tmp_path / "whole", "--stop-after-steps", last_step + 2)
    assert proc.returncode == 0, proc.stderr
    name = f"checkpoints/step-{last_step + 2:06d}/model.safetensors"
    assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


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


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_ctrl_c_during_start_up_stops_before_the_first_step(tiny_shards, tmp_path):
    """Before: a Ctrl-C while the model was being built went on to build the loader, train a step and write a
    checkpoint of it. Now the run stops before the first step: nothing trained, nothing saved, exit 130."""
    proc = _interrupted_train("start-up", tiny_shards / "train", tmp_path / "run")
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "stopped by SIGINT before the first step" in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow  # ~3 s on 2 busy cores (make test runs it; make test-fast leaves it out)
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
