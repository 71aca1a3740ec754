"""Stopping make-shards: Ctrl-C while the local workers or a local Dask cluster run ends the run at once with
one line and nothing published; a stop signal that lands inside a garbage-collector callback or an at-fork
hook still stops it; stopping the workers spares multiprocessing's resource tracker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli_factory import ENV, one_line
from conftest import FIXTURES

PIPELINE = FIXTURES / "pipeline"
VOCAB = PIPELINE / "vocab.txt"


def _group_sigint(args, marker: str, delay: float) -> tuple[int, str, float]:
    """Run ``bertprep ARGS`` in its own process group; once ``marker`` is printed (and ``delay`` s later) send
    SIGINT to the group, as a terminal's Ctrl-C does. Returns (status, output, seconds to exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertprep.cli.main", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while not any(marker in line for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        time.sleep(delay)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        status = proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(5)
    return status, "".join(lines), took


def _corpus(tmp_path: Path, copies: int = 15) -> Path:
    big = tmp_path / "big.txt"
    text = (PIPELINE / "a.txt").read_bytes() + b"\n\n" + (PIPELINE / "b.txt").read_bytes() + b"\n\n"
    big.write_bytes(text * copies)
    return big


@pytest.mark.slow  # a real run, stopped within seconds of its start
def test_ctrl_c_while_the_local_workers_run_prints_no_worker_traceback(tmp_path):
    """Before: without -q a Ctrl-C to the process group printed two `KeyboardInterrupt` tracebacks of the
    workers' launchers (`File "<string>", line 23`) above make-shards' line.

    The signal goes out the moment a worker logs that it reads the input ("input format"), and the corpus holds
    about a minute of work, so the run is still going whatever the machine's load. (A signal sent after a run
    has finished finds Python's own handler back and ends the process by SIGINT, status -2, which a shell
    reports as 130 too: right for a Ctrl-C that comes after the output is published, but it would not test
    the workers. A fixed delay after the marker let a 2-second run finish first on a busy machine.)"""
    status, output, took = _group_sigint(
        ["make-shards", "-i", _corpus(tmp_path, copies=200), "--vocab", VOCAB, "-o", tmp_path / "out"],
        "input format",
        0.0,
    )
    assert "Wrote " not in output, "the run finished before the signal: " + output
    assert status == 130 and took < 10, output
    assert "make-shards stopped by SIGINT" in one_line(output, "make-shards stopped")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow  # a local Dask cluster, started and stopped
def test_ctrl_c_on_a_local_dask_cluster_ends_at_once_with_one_line(tmp_path):
    """Before: 12 tracebacks. Once they were gone, a probe stopped 10 s into the run still ended by the watchdog,
    with a second line: distributed's exit hook (``close_clusters``) was closing the cluster the stopped run had
    left open. The stopped run now closes it itself, for at most ``STOP_CLOSE_TIMEOUT_S``."""
    status, output, took = _group_sigint(
        ["make-shards", "-i", _corpus(tmp_path), "--vocab", VOCAB, "-o", tmp_path / "out", "--dupe-factor", 200,
         "--runner=DaskRunner"],
        "Dask runner:",
        4.0,
    )  # fmt: skip
    assert "Wrote " not in output, "the run finished before the signal: " + output  # (40 copies did, idle)
    assert status == 130 and took < 5, (took, output)
    line = one_line(output, "make-shards stopped")
    assert line.startswith("make-shards stopped by SIGINT: nothing was published, the output directory is as it was")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _stopped_in_a_script(script: str) -> None:
    """Run ``script`` (which installs make-shards' stop handling, sends itself SIGINT somewhere awkward and prints
    "interrupted: ..." when the stop reaches its main thread): it must print no traceback and no "Exception
    ignored", and must have been stopped with make-shards' line."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=ENV)
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "RuntimeError" not in done.stderr, done.stderr
    assert done.stdout.startswith("interrupted: make-shards stopped by SIGINT"), done.stdout


_GC_CALLBACK_SIGINT = r"""
import gc, os, signal, sys, time
from bertprep.pipeline.beam import session
stop = session._StopOnSignal()
stop.install()
fired = []
def callback(phase, info):
    if phase == "start" and not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at the next line: inside this callback
        fired.append(True)
gc.callbacks.append(callback)
try:
    gc.collect()
    time.sleep(2)
    print("not interrupted", flush=True)
except session.Interrupted as err:
    print("interrupted:", err, flush=True)
os._exit(0)
"""


def test_a_stop_signal_inside_a_gc_callback_still_stops_the_run():
    """Before: a Ctrl-C that arrived while a garbage-collector callback ran (distributed's, in a local Dask
    cluster's scheduler) raised there; Python printed it as "Exception ignored" and went on, and the run
    ended 10 s later by the watchdog, with 13 tracebacks."""
    _stopped_in_a_script(_GC_CALLBACK_SIGINT)


_AT_FORK_SIGINT = r"""
import os, signal, sys, time
from bertprep.pipeline.beam import session
stop = session._StopOnSignal()
stop.install()
fired = []
def after_fork():
    if not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at the next line: inside this at-fork hook
        fired.append(True)
os.register_at_fork(after_in_parent=after_fork)
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(2)
    print("not interrupted", flush=True)
except session.Interrupted as err:
    print("interrupted:", err, flush=True)
os._exit(0)
"""


def test_a_stop_signal_inside_an_at_fork_hook_still_stops_the_run():
    """Before: a Ctrl-C that arrived while logging's at-fork hook ran in the parent (``_releaseLock``, as Beam
    forks its workers) was printed as "Exception ignored in: <function _releaseLock>" with its traceback,
    above the one line."""
    _stopped_in_a_script(_AT_FORK_SIGINT)


_WORKER_THREAD_SIGINT = r"""
import os, signal, sys, threading, time
from bertprep.pipeline.beam import session
sys.setswitchinterval(30)  # the raising thread keeps the interpreter until it waits: the listener comes after
stop = session._StopOnSignal()
stop.install()
stop.listen()
def beams_worker_thread():  # Beam's run_worker thread, whose worker process the same Ctrl-C has killed
    os.kill(os.getpid(), signal.SIGINT)
    raise RuntimeError("Worker subprocess exited with return code -2")
thread = threading.Thread(target=beams_worker_thread)
try:
    thread.start()
    time.sleep(5)
    print("not interrupted", flush=True)
except session.Interrupted as err:
    print("interrupted:", err, flush=True)
thread.join()
os._exit(0)
"""


def test_a_worker_thread_that_fails_of_the_stop_signal_prints_nothing():
    """Before: a Ctrl-C to the process group killed a local worker and Beam's thread that waits on it raised
    "RuntimeError: Worker subprocess exited with return code -2" before the listening thread had read the
    signal and silenced Beam, so its traceback was printed above make-shards' line (a CI run of the test
    above, on a busy machine). Here the thread keeps the interpreter until it waits, as it did there."""
    _stopped_in_a_script(_WORKER_THREAD_SIGINT)


_KILL_CHILDREN = r"""
import multiprocessing.resource_tracker as rt, os, subprocess, sys, time
rt.ensure_running()
tracker = rt._resource_tracker._pid
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
from bertprep.pipeline.beam import session
session._kill_children()
child.wait(timeout=10)
time.sleep(0.5)
print("spared" if os.waitpid(tracker, os.WNOHANG) == (0, 0) else "killed", child.returncode)  # (0, 0): running
"""


def test_stopping_the_workers_spares_the_resource_tracker():
    """Before: a stop killed every descendant, multiprocessing's resource tracker too; the next shared-memory
    release started a new one, which printed a KeyError traceback per name (12 in a stopped Dask run)."""
    done = subprocess.run([sys.executable, "-c", _KILL_CHILDREN], capture_output=True, text=True, timeout=60, env=ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"spared {-signal.SIGKILL}"
