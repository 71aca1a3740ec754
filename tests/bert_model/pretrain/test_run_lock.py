"""One writer per run directory: ``train`` holds the run folder's lock (``atomic.directory_lock``, make-shards'),
so a second run into the same ``-o`` is refused naming the first, and a lock a killed run left is taken over.

Before, two ``train`` runs into one ``-o`` both exited 0: the second's checkpoints replaced the first's and
``metrics.jsonl`` held both runs' lines."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core import atomic
from model_factory import tiny_train_args


def _args(tiny_shards, out) -> list[str]:
    options = ["--warmup-steps", "1", "--max-steps", "2", "--no-progress", "--device", "cpu", "--num-workers", "0"]
    return tiny_train_args(tiny_shards / "train", out, *options)


def _lock(out, pid: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"command": "train", "host": socket.gethostname(), "pid": pid, "started": "2026-01-01 00:00:00"}
    (out / atomic.LOCK_NAME).write_text(json.dumps(record))


def test_a_second_train_into_a_busy_run_folder_is_refused_naming_the_first(tiny_shards, tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock(out, first.pid)
        result = CliRunner().invoke(cli, _args(tiny_shards, out))
    finally:
        first.kill()
        first.wait()
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and f"process {first.pid}" in errors[0] and "another train run" in errors[0], errors
    assert sorted(p.name for p in out.iterdir()) == [atomic.LOCK_NAME]  # nothing of the second run written


def test_a_lock_left_by_a_killed_run_is_taken_over_and_released(tiny_shards, tmp_path):
    out = tmp_path / "run"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _lock(out, int(dead.stdout))
    result = CliRunner().invoke(cli, _args(tiny_shards, out))
    assert result.exit_code == 0, result.output
    assert (out / "checkpoints" / "step-000002").is_dir()
    assert not (out / atomic.LOCK_NAME).exists()
