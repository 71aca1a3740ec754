"""make-shards on a Dask scheduler: an address that is not one, a scheduler no worker joins and a scheduler
that dies mid-run are each named in one line; relative paths are the launching folder's.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from cli_factory import invoke, one_line
from conftest import FIXTURES, need_module

PIPELINE = FIXTURES / "pipeline"
VOCAB = PIPELINE / "vocab.txt"
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dask_address_that_is_not_one_is_one_line(tmp_path):
    """Before: `--dask_client_address=not-an-address` ended in distributed's 89-line ValueError traceback."""
    need_module("distributed")
    result = CliRunner().invoke(cli, ["make-shards", "--vocab", str(VOCAB), "--dupe-factor", "1", "-q", "-i",
                                      str(PIPELINE / "a.txt"), "-o", str(tmp_path / "out"), "--runner=DaskRunner",
                                      "--dask_client_address=not-an-address", *IN_PROCESS])  # fmt: skip
    assert result.exit_code == 1, result.output
    line = one_line(result.output)
    assert "--dask_client_address not-an-address: not a Dask scheduler address" in line
    assert "tcp://HOST:PORT" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # ~3 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_scheduler_without_workers_is_named_after_the_connection_timeout(tmp_path):
    """Before: a scheduler no worker joined took the tasks and the run waited for ever, without a word (here
    the subprocess's timeout would end it). The scheduler is a `dask scheduler` process, as a user starts one
    (an in-process LocalCluster failed to start its event loop within distributed's own 10 s on a loaded
    machine); make-shards runs in this process (``invoke``: its exit status and stderr as a process's)."""
    need_module("distributed")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    log = open(tmp_path / "scheduler.log", "w")  # noqa: SIM115 (the scheduler's output; closed in the finally)
    scheduler = subprocess.Popen([dask, "scheduler", "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)
    try:
        _wait_for_port(port, scheduler)
        start = time.monotonic()
        done = invoke("make-shards", "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", tmp_path / "out", "-q",
                      "--runner=DaskRunner", f"--dask_client_address={address}", "--dask_connection_timeout=1",
                      timeout=60)  # fmt: skip
        took = time.monotonic() - start
    finally:
        scheduler.kill()
        scheduler.wait()
        log.close()
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert f"no Dask worker joined the scheduler at {address} within 1 s" in line
    assert f"`dask worker {address}`" in line
    assert took < 40
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float = 120) -> None:
    """Return once something accepts connections on localhost ``port`` (the scheduler is up); fail when
    ``process`` ends or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the scheduler exited with status {process.returncode}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"no scheduler listened on port {port} within {timeout} s")


def _kill_when_started(scheduler: subprocess.Popen, started: Path, killed: list, timeout: float = 240) -> None:
    """Kill ``scheduler`` as soon as the file ``started`` exists (a task runs on a worker), or after ``timeout``;
    appends the ``time.monotonic()`` of the kill to ``killed``."""
    deadline = time.monotonic() + timeout
    while not started.exists() and time.monotonic() < deadline and scheduler.poll() is None:
        time.sleep(0.05)
    scheduler.kill()
    killed.append(time.monotonic())


@pytest.mark.slow  # a scheduler and a worker process (about 10 s)
def test_a_scheduler_killed_mid_run_is_named(tmp_path, caplog):
    """Before: the futures ended cancelled, distributed logged a CancelledError traceback, and the run went on
    to read a manifest that was never written ("No such file or directory (.../manifest.json)"). Then: the one
    line came, but below a 35-line traceback that distributed's reconnect task logged as the client closed
    (after the run had taken its filter of lost-connection records off the log handlers)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam import dask_runner as dr

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    log = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 (the cluster's output; closed in the finally)
    scheduler = subprocess.Popen([dask, "scheduler", "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)
    worker = None
    started, killed = tmp_path / "started", []  # a task writes `started` when it runs on the worker
    try:
        worker = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard"], stdout=log,
                                  stderr=log)  # fmt: skip
        # The scheduler dies once the worker has joined and runs the tasks (16 x 0.5 s): the test waits for that
        # state, not for a fixed time (a 6 s timer killed it before the worker had joined on a busy machine).
        killer = threading.Thread(target=_kill_when_started, args=(scheduler, started, killed), daemon=True)
        killer.start()
        pipeline = beam.Pipeline(runner=dr.BertprepDaskRunner(), options=PipelineOptions([
            "--dask_client_address", address, "--dask_connection_timeout", "120"]))  # fmt: skip
        # (a lambda: pickled by value, as the Dask worker cannot import this test module)
        mark = str(started)
        _ = (pipeline | beam.Create(list(range(16)))
             | beam.Map(lambda x: open(mark, "a").close() or time.sleep(0.5) or x) | beam.Map(print))  # fmt: skip
        with pytest.raises(dr.DaskSchedulerLost) as lost:
            pipeline.run().wait_until_finish(duration=90_000)
        named = time.monotonic()
        assert started.exists() and killed, "the scheduler was not killed mid-run"  # the state the test is about
        assert named - killed[0] < 60
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
    tracebacks = [r for r in caplog.records if r.name.startswith("distributed") and r.exc_info]
    assert not tracebacks, [f"{r.name}: {r.exc_info[1]!r}" for r in tracebacks]  # the one line alone


@pytest.mark.slow  # a scheduler and a worker process, and a run on them (about 8 s)
def test_relative_paths_on_dask_are_the_launching_folders(tmp_path):
    """Before: with workers started in another folder, a relative -o was written into the workers' folder (a
    staging folder left there) and a relative -i was "not found" by them; the local runner accepted both.
    (make-shards runs in this process, ``invoke`` with the launching folder as its working directory; the
    scheduler and the worker are processes, the worker in a folder of its own.)"""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    (tmp_path / "workers").mkdir()
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "a.txt").write_bytes((PIPELINE / "a.txt").read_bytes())
    log = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 (the cluster's output; closed in the finally)
    procs = [subprocess.Popen([dask, "scheduler", "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)]
    try:
        _wait_for_port(port, procs[0])
        procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard"], stdout=log,
                                      stderr=log, cwd=tmp_path / "workers"))  # fmt: skip
        done = invoke("make-shards", "-i", "a.txt", "--vocab", VOCAB, "-o", "out", "--dupe-factor", 1, "-q",
                      "--runner=DaskRunner", f"--dask_client_address={address}", cwd=tmp_path / "here",
                      timeout=150)  # fmt: skip
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        log.close()
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "here" / "out" / "manifest.json").exists()
    assert list((tmp_path / "workers").iterdir()) == []
