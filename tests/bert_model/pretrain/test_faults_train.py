"""Fault tests of `bertprep train` and its checkpoints (issue 12: nothing lost, nothing hangs).

Each test runs a bad input or a fault and asserts the exit status, that the message names the file, and that
no user data was lost (checkpoints intact, no process left behind). Training runs are tiny (L2/H32 on
synthetic shards from ``shard_factory``) and run in a subprocess where the fault needs a real process tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from conftest import REPO_ROOT
from model_factory import tiny_train_args
from shard_factory import write_shard_dir

REPO_ROOT = REPO_ROOT

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Runs `bertprep ARGS...` after applying the fault named by argv[1] (in the child process only).
_RUNNER = r"""
import sys
fault, args = sys.argv[1], sys.argv[2:]
if fault == "no-matplotlib":
    sys.modules["matplotlib"] = None  # import matplotlib -> ModuleNotFoundError, as when it is not installed
elif fault.startswith("raise-at-batch-"):
    import os, time
    import bertprep.bert_model.pretrain.trainer as trainer
    limit, calls, move = int(fault.rsplit("-", 1)[1]), [0], trainer._move
    def failing_move(batch, device):
        calls[0] += 1
        if calls[0] >= limit:
            with open(os.environ["FAULT_TIME_FILE"], "w") as f:  # when the exception was raised
                f.write(repr(time.time()))
            raise RuntimeError("injected fault in the training loop")
        return move(batch, device)
    trainer._move = failing_move
elif fault == "no-pdeathsig":
    import bertprep.bert_model.pretrain.loader as loader
    loader._PR_SET_PDEATHSIG = 0  # an invalid prctl option: only the getppid() watchdog is left
elif fault != "none":
    raise SystemExit(f"unknown fault {fault}")
from bertprep.cli.main import main
sys.argv = ["bertprep", *args]
main()
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Batches of 64 x 128 tokens are bigger than a pipe's buffer: a worker whose parent is gone blocks on a
    full queue (the futex of the issue) rather than exiting by chance."""
    root = tmp_path_factory.mktemp("faults")
    write_shard_dir(root / "train", num_shards=4, rows_per_shard=160, vocab_size=64, max_seq_length=128, seed=1)
    return root


def _train_args(shards: Path, out: Path, *extra: str) -> list[str]:
    options = ["--warmup-steps", "1", "--log-every", "1", "--no-progress", "--device", "cpu", *extra]
    return tiny_train_args(shards / "train", out, *options, batch_size=64)


def _spawn(fault: str, args: list[str], log: Path) -> subprocess.Popen:
    """Start the run with stdout and stderr in ``log`` (a file, not a pipe: orphaned workers would hold a pipe
    open and make reading it wait for them); an injected exception writes its time.time() to ``log.time``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FAULT_TIME_FILE": f"{log}.time"}
    with open(log, "w") as sink:
        return subprocess.Popen(
            [sys.executable, "-c", _RUNNER, fault, *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(REPO_ROOT),
            env=env,
        )


def _alive(pids: set[int]) -> set[int]:
    """The pids still running (a zombie waiting for a reaper counts as gone)."""
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _kill_all(proc: subprocess.Popen, pids: set[int]) -> None:
    """Clean-up after a failed assertion: the test's own processes, by pid."""
    for pid in _alive(pids | {proc.pid}):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def _end_time(proc: subprocess.Popen, workers: set[int], case: str) -> float:
    """The ``time.time()`` at which the run ``proc`` ended, within 60 s; else it is killed with its ``workers``
    and the test fails: "bertprep train hung ``case``"."""
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        _kill_all(proc, workers)
        raise AssertionError(f"bertprep train hung {case}") from None
    return time.time()


def _wait_for_workers(proc: subprocess.Popen, count: int, timeout: float = 60) -> set[int]:
    """Pids of the loader workers (children) of ``proc`` once ``count`` of them run and training has started."""
    deadline = time.monotonic() + timeout
    parent = psutil.Process(proc.pid)
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        children = {c.pid for c in parent.children(recursive=True)}
        if len(children) >= count:
            return children
        time.sleep(0.1)
    _kill_all(proc, set())
    raise AssertionError(f"no {count} loader workers within {timeout} s")


# ------------------------------------------------------------------------------------ item 4: no hang on error


@pytest.mark.slow
def test_exception_in_the_training_loop_exits_nonzero_within_seconds_leaving_no_process(shards, tmp_path):
    """Any exception (here one injected into the loop at the 6th batch) ends the process with a non-zero
    status within 10 s, its loader workers stopped first; before the fix the process waited for them for ever."""
    log = tmp_path / "log"
    proc = _spawn(
        "raise-at-batch-6", _train_args(shards, tmp_path / "run", "--max-steps", "1000", "--num-workers", "2"), log
    )
    workers = _wait_for_workers(proc, 2)
    exited = _end_time(proc, workers, "after an exception in the training loop")
    stderr = log.read_text()
    assert proc.returncode not in (0, None)
    assert "injected fault in the training loop" in stderr
    raised = float(Path(f"{log}.time").read_text())
    assert exited - raised < 10, f"exited {exited - raised:.1f} s after the exception"
    deadline = time.monotonic() + 5
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(workers), "loader workers outlived the failed run"


@pytest.mark.slow
def test_missing_matplotlib_is_found_before_training_and_the_run_ends_cleanly(shards, tmp_path):
    """The issue's case: matplotlib missing made the final plot raise ModuleNotFoundError after training and
    the process then hung. Now it is reported before the first step, the run completes (checkpoint and
    metrics.jsonl; no metrics.png) and exits 0 well within 10 s of the end of training, with no process left."""
    out = tmp_path / "run"
    log = tmp_path / "log"
    proc = _spawn("no-matplotlib", _train_args(shards, out, "--max-steps", "3", "--num-workers", "2"), log)
    workers = _wait_for_workers(proc, 2)
    exited = _end_time(proc, workers, "without matplotlib")
    stderr = log.read_text()
    assert proc.returncode == 0, stderr
    trained = (out / "checkpoints" / "step-000003" / "state.json").stat().st_mtime  # the end of training
    assert exited - trained < 10, f"exited {exited - trained:.1f} s after the last checkpoint"
    warning = [line for line in stderr.splitlines() if "matplotlib" in line]
    assert warning and "pip install" in warning[0] and "metrics.png" in warning[0], stderr
    # said before training, not after: the warning comes before the first metrics line is logged
    assert stderr.index(warning[0]) < stderr.index("model tiny")
    assert (out / "checkpoints" / "step-000003" / "model.safetensors").exists()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    assert not (out / "metrics.png").exists()
    deadline = time.monotonic() + 0.5  # (as long as the fixed wait before: gone within 0.5 s, checked as they go)
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(workers)


# ---------------------------------------------------------------------- item 5: workers die with their parent


@pytest.mark.parametrize("fault", ["none", "no-pdeathsig"])
@pytest.mark.slow
def test_loader_workers_die_with_a_sigkilled_trainer(shards, tmp_path, fault):
    """kill -9 of the training process mid-training: its loader workers (which ignore SIGTERM on purpose) are
    gone within a few seconds, by the kernel's parent-death signal or, without it, the getppid() watchdog.
    Before the fix they stayed, re-parented to init and blocked in a futex, for ever."""
    out = tmp_path / "run"
    proc = _spawn(fault, _train_args(shards, out, "--max-steps", "100000", "--num-workers", "2"), tmp_path / "log")
    workers = _wait_for_workers(proc, 2)
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):  # workers have sent batches
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive(workers)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"loader workers {sorted(left)} outlived the SIGKILLed trainer"


# ------------------------------------------------------------- items 6, 7, 10: checkpoints, shards, permissions


def _small_args(small: Path, out: Path, *extra: str, shards: str = "train") -> list[str]:
    options = ["--warmup-steps", "1", "--log-every", "1", "--no-progress", "--device", "cpu", "--num-workers", "0"]
    return tiny_train_args(small / shards, out, *options, *extra)


def _error_line(result) -> str:
    """The one-line error of a refused command (exit 1, no traceback)."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), f"traceback instead of a message: {result.exception!r}"
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output
    return errors[0]


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def _trained_run(tiny_shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trained") / "run"
    result = CliRunner().invoke(cli, _small_args(tiny_shards, out, "--max-steps", "4", "--save-every", "2"))
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(out / "checkpoints")) == ["step-000002", "step-000004"]
    return out


@pytest.fixture
def run_with_two_checkpoints(_trained_run, tmp_path):
    """A run directory with checkpoints at steps 2 and 4 (a copy for each test to damage)."""
    out = tmp_path / "run"
    shutil.copytree(_trained_run, out)
    return out


def test_checkpoint_files_follow_the_umask(run_with_two_checkpoints):
    """safetensors creates its files 0600; a checkpoint's files are now as readable as any file the user
    writes (0644 under umask 022), as are the other files beside them."""
    old = os.umask(0o022)
    os.umask(old)
    assert old == 0o022, "the test expects the usual umask 022"
    checkpoint = run_with_two_checkpoints / "checkpoints" / "step-000004"
    modes = {p.name: p.stat().st_mode & 0o777 for p in checkpoint.iterdir()}
    assert modes == dict.fromkeys(modes, 0o644), modes
    assert {"model.safetensors", "optimizer.safetensors", "state.json"} <= set(modes)


def test_resume_refuses_a_bit_flipped_model_file_and_falls_back_from_the_run_directory(
    tiny_shards, run_with_two_checkpoints, caplog
):
    """One flipped bit in the weights leaves a loadable file: before the fix --resume trained on it without a
    word. Now the sha256 recorded in state.json catches it: naming the checkpoint directory is refused with
    the file named; naming the run directory resumes from the previous intact checkpoint, saying so."""
    out = run_with_two_checkpoints
    damaged = out / "checkpoints" / "step-000004" / "model.safetensors"
    data = bytearray(damaged.read_bytes())
    data[-100] ^= 0x01  # inside the tensor data: the header and every length stay valid
    damaged.write_bytes(bytes(data))
    before = _snapshot(out / "checkpoints")

    result = CliRunner().invoke(
        cli,
        _small_args(
            tiny_shards,
            out,
            "--max-steps",
            "6",
            "--allow-resume-changes",
            "--resume",
            str(out / "checkpoints" / "step-000004"),
        ),
    )
    line = _error_line(result)
    assert str(damaged) in line and "sha256" in line and "earlier" in line
    assert _snapshot(out / "checkpoints") == before  # nothing written, nothing removed

    with caplog.at_level("WARNING"):
        result = CliRunner().invoke(
            cli, _small_args(tiny_shards, out, "--max-steps", "6", "--allow-resume-changes", "--resume", str(out))
        )
    assert result.exit_code == 0, result.output
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert str(damaged) in warnings and f"falling back to {out / 'checkpoints' / 'step-000002'}" in warnings
    assert "step 6 (max_steps)" in result.output
    assert (out / "checkpoints" / "step-000002" / "model.safetensors").read_bytes() == before[
        "step-000002/model.safetensors"
    ]  # the checkpoint resumed from is untouched


def test_truncated_checkpoint_falls_back_to_the_previous_one(tiny_shards, run_with_two_checkpoints, caplog):
    """Before the fix a truncated model.safetensors gave a SafetensorError traceback; now the run resumes from
    the previous complete checkpoint with a one-line warning naming the file, and re-writes step 4."""
    out = run_with_two_checkpoints
    damaged = out / "checkpoints" / "step-000004" / "model.safetensors"
    os.truncate(damaged, damaged.stat().st_size // 2)
    with caplog.at_level("WARNING"):
        result = CliRunner().invoke(cli, _small_args(tiny_shards, out, "--max-steps", "4", "--resume", str(out)))
    assert result.exit_code == 0, result.output
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(str(damaged) in w and "truncated" in w and "\n" not in w for w in warnings), warnings
    assert any("falling back to" in w and "step-000002" in w for w in warnings), warnings
    state = json.loads((out / "checkpoints" / "step-000004" / "state.json").read_text())
    assert state["files"]["model.safetensors"]["bytes"] == damaged.stat().st_size  # complete again


def test_corrupt_state_json_is_named(tiny_shards, run_with_two_checkpoints, caplog):
    """A state.json cut short: the message names that file (before: a bare JSONDecodeError traceback); from
    the run directory the previous checkpoint is used."""
    out = run_with_two_checkpoints
    state_file = out / "checkpoints" / "step-000004" / "state.json"
    state_file.write_text(state_file.read_text()[:500])
    result = CliRunner().invoke(
        cli,
        _small_args(tiny_shards, out, "--max-steps", "6", "--allow-resume-changes", "--resume", str(state_file.parent)),
    )
    line = _error_line(result)
    assert str(state_file) in line and "not valid JSON" in line
    with caplog.at_level("WARNING"):
        result = CliRunner().invoke(
            cli, _small_args(tiny_shards, out, "--max-steps", "5", "--allow-resume-changes", "--resume", str(out))
        )
    assert result.exit_code == 0, result.output
    assert any(str(state_file) in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(tiny_shards, tmp_path, monkeypatch):
    """ENOSPC while writing the step-4 checkpoint (safetensors reports it as a SafetensorError after writing
    part of the file, as on a real full disk): a one-line error naming the checkpoint, no half checkpoint
    left (no step-000004, no temporary directory), step 2 intact and loadable."""
    from safetensors import SafetensorError

    from bertprep.bert_model import checkpoint as ckpt

    real_save_file, real_save_checkpoint, saving = ckpt.save_file, ckpt.save_checkpoint, []

    def save_checkpoint(run_dir, step, **kwargs):  # which step is being written (its folder is a staging one)
        saving.append(step)
        return real_save_checkpoint(run_dir, step, **kwargs)

    def save_file_on_a_full_disk(tensors, filename, metadata=None):
        if saving[-1] == 4:
            real_save_file(tensors, filename, metadata=metadata)
            os.truncate(filename, os.path.getsize(filename) // 3)
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(ckpt, "save_checkpoint", save_checkpoint)
    monkeypatch.setattr(ckpt, "save_file", save_file_on_a_full_disk)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, _small_args(tiny_shards, out, "--max-steps", "6", "--save-every", "2"))
    line = _error_line(result)
    assert f"checkpoint {out / 'checkpoints' / 'step-000004'} not written" in line
    assert "No space left on device" in line and "step-000002 is intact" in line and f"--resume {out}" in line
    assert sorted(os.listdir(out / "checkpoints")) == ["step-000002"]
    path, state = ckpt.load_intact_checkpoint(str(out))
    assert path.endswith("step-000002") and state["step"] == 2


def _flip_shard_byte(shard: Path) -> None:
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))


def test_train_refuses_a_shard_whose_bytes_changed(tiny_shards, tmp_path):
    """A flipped byte in a shard: before the fix train used it without a word. Now the manifest's sha256 is
    checked before training and the file named; the shard is not modified."""
    shards = tmp_path / "shards"
    shutil.copytree(tiny_shards / "train", shards)
    shard = shards / "shard-00002-of-00004.arrow"
    _flip_shard_byte(shard)
    before = shard.read_bytes()
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, _small_args(tmp_path, out, "--max-steps", "2", shards="shards"))
    line = _error_line(result)
    assert str(shard) in line and "sha256" in line and "--no-verify" in line
    assert shard.read_bytes() == before
    assert not (out / "checkpoints").exists()


@pytest.mark.parametrize("num_workers", ["0", "1"])
def test_train_names_a_truncated_shard(tmp_path, num_workers):
    """With --no-verify a truncated shard still gets a one-line message naming it, from a loader worker too
    (before: "Not an Arrow file" without the file, inside a worker traceback)."""
    shards = tmp_path / "shards"
    write_shard_dir(shards, num_shards=2, rows_per_shard=40, vocab_size=64, max_seq_length=32, seed=1)
    for shard in shards.glob("*.arrow"):
        os.truncate(shard, shard.stat().st_size // 2)
    args = _small_args(tmp_path, tmp_path / "run", "--max-steps", "2", "--no-verify", shards="shards")
    args[args.index("--num-workers") + 1] = num_workers
    line = _error_line(CliRunner().invoke(cli, args))
    assert "shard-0000" in line and "not a readable Arrow shard" in line and "make-shards" in line


def _shards_with_ids_outside_the_vocab(path: Path) -> Path:
    """Shards whose rows use ids up to 63 while the manifest says the vocab has 40 entries (sha256 intact)."""
    write_shard_dir(path, num_shards=2, rows_per_shard=40, vocab_size=64, max_seq_length=32, seed=1)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["vocab"]["size"] = 40
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_ids_outside_the_vocab_are_named_by_train_and_inspect_verify(tmp_path):
    """Before the fix train raised IndexError in the embedding and inspect --verify passed."""
    shards = _shards_with_ids_outside_the_vocab(tmp_path / "shards")
    line = _error_line(
        CliRunner().invoke(cli, _small_args(tmp_path, tmp_path / "run", "--max-steps", "2", shards="shards"))
    )
    assert "shard-0000" in line and "outside the vocab of 40 entries" in line
    result = CliRunner().invoke(cli, ["inspect", str(shards), "--no-stats", "-n", "0", "--verify"])
    assert result.exit_code == 1 and "verification failed" in result.output, result.output
    assert "shard-00000-of-00002.arrow" in result.output and "vocab" in result.output


def test_inspect_verify_names_a_truncated_or_corrupt_shard(tmp_path):
    """Before the fix: a raw ArrowInvalid traceback. Now every damaged shard is listed, the others checked."""
    shards = tmp_path / "shards"
    write_shard_dir(shards, num_shards=3, rows_per_shard=20, vocab_size=64, max_seq_length=32, seed=1)
    truncated, corrupt = shards / "shard-00000-of-00003.arrow", shards / "shard-00002-of-00003.arrow"
    os.truncate(truncated, 3000)
    corrupt.write_bytes(b"\x00" * 64 + corrupt.read_bytes()[64:])  # the magic and schema overwritten
    for n in ("0", "2"):  # verification alone, and decoding examples first
        result = CliRunner().invoke(cli, ["inspect", str(shards), "--no-stats", "-n", n, "--verify"])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit), repr(result.exception)  # a message, not a traceback
        assert "shard-00000-of-00003.arrow" in result.output, result.output
        if n == "0":
            assert "shard-00002-of-00003.arrow" in result.output and "not a readable Arrow file" in result.output


def test_ranks_share_the_shard_verification(tmp_path):
    """Under DDP each rank checks every world_size-th shard from its rank on: together they read each shard
    once, and the rank holding the damaged shard names it."""
    from bertprep.bert_model.pretrain.shard_info import read_shard_info, verify_shard_files

    shards = tmp_path / "shards"
    write_shard_dir(shards, num_shards=4, rows_per_shard=10, vocab_size=64, max_seq_length=32, seed=1)
    _flip_shard_byte(shards / "shard-00002-of-00004.arrow")
    info = read_shard_info(str(shards))
    verify_shard_files(info, rank=1, world_size=2)  # shards 1 and 3: intact
    with pytest.raises(ValueError, match=re.escape("shard-00002-of-00004.arrow: sha256 differs")):
        verify_shard_files(info, rank=0, world_size=2)
    with pytest.raises(ValueError, match=re.escape("shard-00002-of-00004.arrow")):
        verify_shard_files(info)
