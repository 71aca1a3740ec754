"""make-shards stopped, run twice at once, or killed while it publishes: nothing lost, nothing hangs.

- SIGINT / SIGTERM at several moments of a run (the real CLI in its own session, signalled as a terminal's
  Ctrl-C signals a whole process group, or the parent alone): the run ends within seconds with exit status
  130 and one line, leaves no process behind, and the output directory as it was (an earlier run's shards
  byte for byte, or nothing).
- Two runs into one directory: the second is refused, naming the first's process.
- A kill at every step of the publish (the file moves are made to fail at the k-th call, and the failed
  run's own clean-up is skipped, as a ``kill -9`` would skip it): the directory then holds no manifest
  (incomplete, never a mix that looks complete) and the next run finishes the publish: the new set, whole.
  The runs after the first reuse its pipeline output (``pipeline_factory.PipelineOutputReplayed``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.pipeline.shards import publish
from cli_factory import invoke, spawn_bertprep
from conftest import FIXTURES
from pipeline_factory import PipelineOutputReplayed

PIPELINE = FIXTURES / "pipeline"


def _corpus(tmp_path: Path, copies: int = 40) -> Path:
    """A corpus big enough for a run of several seconds (the fixture texts repeated, as separate files)."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    text = (PIPELINE / "a.txt").read_text() + "\n" + (PIPELINE / "b.txt").read_text()
    for i in range(copies):
        (folder / f"part-{i:03d}.txt").write_text(text)
    return folder


def _args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["make-shards", "-q", "-i", str(corpus), "--vocab", str(PIPELINE / "vocab.txt"), "-o", str(out), *extra]


def _snapshot(folder: Path) -> dict[str, str]:
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _session_processes(sid: int) -> list[str]:
    out = subprocess.run(["ps", "-eo", "sid,stat,args"], capture_output=True, text=True).stdout.splitlines()[1:]
    return [line for line in out if line.split()[0] == str(sid) and not line.split()[1].startswith("Z")]


@pytest.fixture(scope="module")
def earlier_output(tmp_path_factory):
    """A finished run's shards, kept as the directory that interrupted runs write over (made in this process:
    at this size the pipeline runs in the command's process, ``run.in_process_args``)."""
    tmp = tmp_path_factory.mktemp("earlier")
    corpus = _corpus(tmp)
    out = tmp / "shards"
    result = invoke(*_args(corpus, out, "--dupe-factor", "1"))
    assert result.returncode == 0, result.stderr
    return corpus, out


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig,delay,target",
    [
        (signal.SIGINT, 0.3, "group"),
        (signal.SIGINT, 1.5, "group"),
        (signal.SIGINT, 4.0, "group"),
        (signal.SIGINT, 3.0, "parent"),
        (signal.SIGTERM, 2.0, "parent"),
        (signal.SIGTERM, 4.0, "group"),
    ],
)
def test_a_stopped_run_ends_fast_with_130_one_line_and_the_old_output(earlier_output, tmp_path, sig, delay, target):
    corpus, earlier = earlier_output
    out = tmp_path / "shards"
    subprocess.run(["cp", "-a", str(earlier), str(out)], check=True)
    before = _snapshot(out)
    proc = spawn_bertprep(*_args(corpus, out, "--dupe-factor", "200", "--overwrite"))  # (60 ran out in 4 s, idle)
    time.sleep(delay)
    assert proc.poll() is None, "the run ended before it could be stopped: make the corpus bigger"
    (os.killpg if target == "group" else os.kill)(proc.pid, sig)
    start = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"make-shards did not stop within 30 s of {sig.name}")
    assert time.monotonic() - start < 15
    assert proc.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "stopped by " + sig.name in lines[0], stderr
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 5
    while _session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _session_processes(proc.pid)
    assert _snapshot(out) == before  # the earlier shards, byte for byte; no staging folder, no lock


@pytest.mark.slow
def test_a_second_run_into_the_same_directory_is_refused_naming_the_first(earlier_output, tmp_path):
    corpus, _ = earlier_output
    out = tmp_path / "shards"
    # (a small run, in one process: it is paused while it holds the lock, so its length does not matter)
    first = spawn_bertprep(*_args(corpus, out, "--dupe-factor", "3"))
    try:
        deadline = time.monotonic() + 20
        while not (out / publish.LOCK_NAME).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        # The first run is paused while it holds the lock (its whole process group: a fast machine, or a run in
        # one process, would otherwise finish before the second run starts), and resumed after it.
        os.killpg(first.pid, signal.SIGSTOP)
        assert first.poll() is None, "the first run ended too soon: make it longer"
        try:
            # in this process (another process than the first's), with the small-run settings: refused before work
            second = invoke(*_args(corpus, out, "--dupe-factor", "3", "--overwrite"), timeout=120)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        assert second.returncode != 0
        assert f"process {first.pid}" in second.stderr and "another make-shards run" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.wait(timeout=300) == 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert (out / "manifest.json").exists() and not (out / publish.LOCK_NAME).exists()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    out = tmp_path / "shards"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import json
    import socket

    (out / publish.LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    with publish.output_lock(str(out)):
        assert json.loads((out / publish.LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (out / publish.LOCK_NAME).exists()


def _visible(folder: Path) -> dict[str, str]:
    """The snapshot without the hidden files (staging folder, journal, lock), as a reader sees the folder."""
    return {k: v for k, v in _snapshot(folder).items() if not k.startswith(".")}


class _Killed(BaseException):
    """Stands for a kill -9 at one step of the publish."""


#: One in-memory worker: the publish tests' runs, in this process.
IN_MEMORY = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


@pytest.fixture(scope="module")
def old_set(tmp_path_factory) -> tuple[Path, Path]:
    """A small corpus and the set a first run made of it (a held-out side included), which the publish tests
    overwrite: ``(corpus, folder)``, the folder read only (a test copies it)."""
    tmp = tmp_path_factory.mktemp("old-set")
    corpus, saved = _corpus(tmp, copies=3), tmp / "saved"
    old = CliRunner().invoke(cli, [*_args(corpus, saved, "--dupe-factor", "1", "--eval-fraction", "0.3"), *IN_MEMORY])
    assert old.exit_code == 0, old.output
    return corpus, saved


@pytest.mark.slow
@pytest.mark.parametrize("eval_fraction", ["0", "0.3"])
def test_a_kill_at_any_publish_step_is_finished_by_the_next_run(tmp_path, monkeypatch, old_set, eval_fraction):
    from bertprep.core import storage
    from bertprep.pipeline.beam import run

    corpus, saved = old_set
    out = tmp_path / "shards"
    beam = IN_MEMORY
    shutil.copytree(saved, out)
    new_args = [*_args(corpus, out, "--dupe-factor", "2", "--eval-fraction", eval_fraction, "--overwrite"), *beam]
    reference = tmp_path / "reference"
    ref_args = [*_args(corpus, reference, "--dupe-factor", "2", "--eval-fraction", eval_fraction), *beam]
    assert CliRunner().invoke(cli, ref_args).exit_code == 0
    expected = {k: v for k, v in _snapshot(reference).items() if not k.endswith("manifest.json")}

    calls = {"n": 0}
    real = {name: getattr(storage, name) for name in ("rename", "delete", "remove_tree")}  # the publish's moves
    replayed = PipelineOutputReplayed(
        str(tmp_path / "pipeline-output"), lambda a, b: shutil.copytree(a, b, dirs_exist_ok=True)
    )
    steps = 0
    while True:
        kill_at = steps
        calls["n"] = 0

        def counting(real):
            def step(*args, **kwargs):
                if publish.publishing():  # the steps after the journal is written (before it: the old set stays)
                    if calls["n"] == kill_at:  # noqa: B023 (each iteration patches in new closures)
                        raise _Killed()
                    calls["n"] += 1
                return real(*args, **kwargs)

            return step

        for name, function in real.items():
            monkeypatch.setattr(storage, name, counting(function))
        monkeypatch.setattr(run, "_remove_failed_run", lambda *a, **k: None)  # a kill -9 cleans nothing
        replayed.patch(monkeypatch)
        killed = False
        old_state = _visible(out)
        try:
            CliRunner().invoke(cli, new_args, catch_exceptions=False)
        except _Killed:
            killed = True
        finally:
            monkeypatch.undo()
        if not killed:
            break  # every step has been cut once
        steps += 1
        state = _visible(out)
        if "manifest.json" in state:  # a directory with a manifest is a whole set, the old one or the new one
            new_state = {k: v for k, v in state.items() if not k.endswith("manifest.json")}
            assert state == old_state or new_state == expected, f"a mix after a kill at publish step {kill_at}"
        # the next run (without --overwrite: the publish it finishes is the one that was asked for)
        again = CliRunner().invoke(cli, [*_args(corpus, out, "--dupe-factor", "2"), *beam])
        assert "Traceback" not in again.output
        now = {k: v for k, v in _snapshot(out).items() if not k.endswith("manifest.json")}
        if (out / "manifest.json").exists() and now == expected:
            pass  # the publish was finished: the new set, whole
        else:
            pytest.fail(f"killed at publish step {kill_at}: the next run left {sorted(now)}")
        assert not any(name.startswith(".bertprep") for name in os.listdir(out))
        # back to the old set for the next step
        shutil.rmtree(out)
        shutil.copytree(saved, out)
    assert steps >= 4
