"""Fault injection, round three, for make-shards and build-vocab ("nothing lost, nothing hangs").

Each test puts the pipeline where it used to hang, print a raw traceback, accept a bad input silently or
write where the user did not ask, and asserts the bound in time, the exit status, the one line naming the
file or option and what to do (with and without ``-q``), and that nothing was written. Subprocess tests run
the real CLI as a user's shell would (the default local runner forks its warm workers only there).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from conftest import FIXTURES

PIPELINE = FIXTURES / "pipeline"
VOCAB = PIPELINE / "vocab.txt"
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def bertprep(*args, timeout: float = 120, cwd=None, prefix=("-m", "bertprep.cli.main")) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, bounded in time (``prefix``: a runner script instead of the module)."""
    return subprocess.run(
        [sys.executable, *prefix, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=ENV
    )


def one_line(output: str, start: str = "Error: ") -> str:
    """The one line starting with ``start`` of a failed run's output (asserting no traceback was printed)."""
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    lines = [line for line in output.splitlines() if line.startswith(start)]
    assert len(lines) == 1, output
    return lines[0]


def make_shards(*args, quiet: bool = True):
    """make-shards in this process (one in-memory worker)."""
    extra = ["-q"] if quiet else []
    return CliRunner().invoke(
        cli, ["make-shards", "--vocab", str(VOCAB), "--dupe-factor", "1", *extra, *map(str, args), *IN_PROCESS]
    )


# ----------------------------------------------------------------- item 5: one line, with and without -q


def _arrow_dataset(path: Path) -> Path:
    """A Hugging Face ``save_to_disk``-style file (Arrow IPC stream) with an int column and no ``text``."""
    import pyarrow as pa

    table = pa.table({"id": [1, 2], "content": ["The river rose.", "The bridge closed."]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return path


@pytest.mark.parametrize("case", ["nul-byte", "hf-no-text-column"])
def test_a_user_error_in_a_worker_is_one_line_without_quiet(tmp_path, case):
    """Before: without -q, the local runner's workers printed Beam's traceback of the failed bundle (83-97
    lines, 2-3 tracebacks) above the one-line error."""
    if case == "nul-byte":
        data = tmp_path / "nul.txt"
        data.write_bytes(b"hello world\x00 this is text\n\nmore text here.\n")
        extra, named = [], f"{data}: looks like a binary file (NUL byte at offset 11)"
    else:
        data = _arrow_dataset(tmp_path / "data-00000-of-00001.arrow")
        extra, named = ["--input-format", "hf"], "the dataset has no column 'text' (its columns: id, content)"
    done = bertprep("make-shards", "-i", data, *extra, "--vocab", VOCAB, "-o", tmp_path / "out", "--dupe-factor", 1)
    assert done.returncode == 1
    assert named in one_line(done.stderr)
    assert not (tmp_path / "out").exists()


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


@pytest.mark.slow  # a real run of several seconds, stopped
def test_ctrl_c_while_the_local_workers_run_prints_no_worker_traceback(tmp_path):
    """Before: without -q a Ctrl-C to the process group printed two `KeyboardInterrupt` tracebacks of the
    workers' launchers (`File "<string>", line 23`) above make-shards' line."""
    status, output, took = _group_sigint(
        ["make-shards", "-i", _corpus(tmp_path), "--vocab", VOCAB, "-o", tmp_path / "out"], "input format", 1.0
    )
    assert status == 130 and took < 10, output
    assert "make-shards stopped by SIGINT" in one_line(output, "make-shards stopped")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


_WITHOUT_BLINGFIRE = ["-c", "import sys; sys.modules['blingfire'] = None; from bertprep.cli.main import main; "
                      "sys.argv = ['bertprep', *sys.argv[1:]]; main()"]  # fmt: skip


@pytest.mark.parametrize("command", ["make-shards", "make-shards -q", "build-vocab"])
def test_a_segmenter_whose_package_is_missing_is_one_line(tmp_path, command):
    """Before: `--segmenter blingfire` without blingfire failed in every worker (373 lines, 12 tracebacks; 169
    with -q; build-vocab 54); the docs promised one line naming the extra."""
    name, *flags = command.split()
    out = tmp_path / "out"
    if name == "make-shards":
        args = [name, *flags, "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", out, "--dupe-factor", 1]
    else:
        args = [name, PIPELINE / "a.txt", "-o", out]
    done = bertprep(*args, "--input-format", "text", "--segmenter", "blingfire", prefix=_WITHOUT_BLINGFIRE)
    assert done.returncode == 1
    line = one_line(done.stdout + done.stderr)
    assert "segmenter 'blingfire' (--segmenter) needs the package 'blingfire'" in line
    assert "pip install 'bertprep[fast]'" in line and "leave --segmenter out" in line
    assert not out.exists()


# ------------------------------------------------------------------------------- items 4, 5: Dask, one line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dask_address_that_is_not_one_is_one_line(tmp_path):
    """Before: `--dask_client_address=not-an-address` ended in distributed's 89-line ValueError traceback."""
    pytest.importorskip("distributed")
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--runner=DaskRunner",
                         "--dask_client_address=not-an-address")  # fmt: skip
    assert result.exit_code == 1, result.output
    line = one_line(result.output)
    assert "--dask_client_address not-an-address: not a Dask scheduler address" in line
    assert "tcp://HOST:PORT" in line
    assert not (tmp_path / "out").exists()


def test_a_scheduler_without_workers_is_named_after_the_connection_timeout(tmp_path):
    """Before: a scheduler no worker joined took the tasks and the run waited for ever, without a word (here
    the subprocess's timeout would end it)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        start = time.monotonic()
        done = bertprep("make-shards", "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", tmp_path / "out", "-q",
                        "--runner=DaskRunner", f"--dask_client_address={address}", "--dask_connection_timeout=2",
                        timeout=60)  # fmt: skip
        took = time.monotonic() - start
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert f"no Dask worker joined the scheduler at {address} within 2 s" in line
    assert f"`dask worker {address}`" in line
    assert took < 40
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _slow(x):
    time.sleep(0.5)
    return x


@pytest.mark.slow  # a scheduler and a worker process (about 10 s)
def test_a_scheduler_killed_mid_run_is_named(tmp_path):
    """Before: the futures ended cancelled, distributed logged a CancelledError traceback, and the run went on
    to read a manifest that was never written ("No such file or directory (.../manifest.json)")."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam import dask_runner as dr

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    log = open(tmp_path / "cluster.log", "w")
    scheduler = subprocess.Popen([dask, "scheduler", "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)
    worker = None
    try:
        time.sleep(2)
        worker = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard"], stdout=log,
                                  stderr=log)  # fmt: skip
        threading.Timer(6, scheduler.kill).start()  # the worker has joined and the tasks run (16 x 0.5 s)
        pipeline = beam.Pipeline(runner=dr.BertprepDaskRunner(), options=PipelineOptions([
            "--dask_client_address", address, "--dask_connection_timeout", "10"]))  # fmt: skip
        _ = pipeline | beam.Create(list(range(16))) | beam.Map(_slow) | beam.Map(print)
        start = time.monotonic()
        with pytest.raises(dr.DaskSchedulerLost) as lost:
            pipeline.run().wait_until_finish(duration=90_000)
        assert time.monotonic() - start < 60
    finally:
        for proc in (scheduler, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait()
        log.close()
    message = str(lost.value)
    assert f"the Dask scheduler at {address} went away during the run" in message
    assert "nothing was published" in message and "\n" not in message


_GC_CALLBACK_SIGINT = r"""
import gc, os, signal, sys, time
from bertprep.pipeline.beam import launch
stop = launch._StopOnSignal()
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
except launch.Interrupted as err:
    print("interrupted:", err, flush=True)
os._exit(0)
"""


def test_a_stop_signal_inside_a_gc_callback_still_stops_the_run():
    """Before: a Ctrl-C that arrived while a garbage-collector callback ran (distributed's, in a local Dask
    cluster's scheduler) raised there; Python printed it as "Exception ignored" and went on, and the run
    ended 10 s later by the watchdog, with 13 tracebacks."""
    done = subprocess.run([sys.executable, "-c", _GC_CALLBACK_SIGINT], capture_output=True, text=True, timeout=60,
                          env=ENV)  # fmt: skip
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("interrupted: make-shards stopped by SIGINT"), done.stdout


_KILL_CHILDREN = r"""
import multiprocessing.resource_tracker as rt, os, subprocess, sys, time
rt.ensure_running()
tracker = rt._resource_tracker._pid
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
from bertprep.pipeline.beam import launch
launch._kill_children()
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


# --------------------------------------------------------------------------------------- item 4: a floor


def test_split_bytes_below_the_floor_is_refused(tmp_path):
    """Before: `--split-bytes 1` on a 400 KB file planned 400,000 ranges and ran on."""
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--split-bytes", "1")
    assert result.exit_code == 2
    line = one_line(result.output)
    assert "Invalid value for '--split-bytes': 1 bytes per range is below the floor of 1,048,576 (1 MiB)" in line
    assert "or 0 to read every file whole" in line
    assert not (tmp_path / "out").exists()
    assert make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "ok", "--split-bytes", "0").exit_code == 0
