"""``cli_factory.invoke``, the in-process twin of a ``bertprep`` subprocess the fault tests use: what it returns
means what a process's would (exit status, stderr apart from stdout, an uncaught exception's traceback on
stderr, a bound in time), and what a process would have kept to itself is put back after the run."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time

import click
import pytest

import bertprep.cli.main as cli_main
from cli_factory import error_line, invoke


@pytest.fixture
def command(monkeypatch):
    """Make ``bertprep run`` the click command given (``command(f)``)."""

    def install(body):
        monkeypatch.setitem(cli_main._COMMANDS, "run", "unused:unused")
        monkeypatch.setattr(cli_main.LazyGroup, "get_command", lambda self, ctx, name: click.command()(body))

    return install


def test_a_refusal_is_its_status_and_its_one_error_line_on_stderr(tmp_path):
    done = invoke("inspect", tmp_path / "absent")
    assert (
        error_line(done).startswith("Error: Invalid value for 'SHARD_DIR'") and str(tmp_path / "absent") in done.stderr
    )
    assert done.stdout == "" and done.args[:2] == ["bertprep", "inspect"]
    version = invoke("--version")
    assert version.returncode == 0 and version.stdout.startswith("bertprep, version") and version.stderr == ""


def test_an_uncaught_exception_is_status_1_with_its_traceback_on_stderr(command):
    def run():
        raise RuntimeError("the bug")

    command(run)
    done = invoke("run")
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr and "RuntimeError: the bug" in done.stderr
    with pytest.raises(AssertionError):
        error_line(done, status=1)  # so a "no Traceback" assertion fails as it does of a process


def test_a_run_past_its_bound_fails_the_test_even_if_the_command_catches_exceptions(command):
    def run():
        with contextlib.suppress(Exception):  # (what a command's broad handler would do to a TimeoutError)
            time.sleep(60)

    command(run)
    previous, start = signal.getsignal(signal.SIGALRM), time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        invoke("run", timeout=0.5)
    assert time.monotonic() - start < 10
    assert signal.getsignal(signal.SIGALRM) == previous and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_what_a_process_keeps_to_itself_is_put_back(command, tmp_path):
    """Environment, working directory, signal handlers, the root logger (the command's basicConfig writes to the
    run's stderr, and no handler keeps the run's stream) and logging.disable."""
    seen = {}

    def run():
        seen.update(cwd=os.getcwd(), var=os.environ.get("BERTPREP_TEST_VAR"), omp=os.environ.get("OMP_NUM_THREADS"))
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        logging.getLogger("bertprep.test").info("to the run's stderr")
        logging.getLogger("bertprep.test.own").addHandler(logging.StreamHandler())  # a library's, on first use
        logging.getLogger("apache_beam").setLevel(logging.ERROR)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        logging.disable(logging.CRITICAL)

    command(run)
    root, cwd = logging.getLogger(), os.getcwd()
    handlers, level = root.handlers[:], root.level
    sigint, sigterm = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    beam_level = logging.getLogger("apache_beam").level
    done = invoke("run", cwd=tmp_path, env={"BERTPREP_TEST_VAR": "set"})
    assert done.returncode == 0 and done.stderr == "INFO to the run's stderr\n"
    assert seen == {"cwd": str(tmp_path), "var": "set", "omp": "1"}
    assert os.getcwd() == cwd and "BERTPREP_TEST_VAR" not in os.environ
    assert root.handlers == handlers and root.level == level and logging.root.manager.disable == logging.NOTSET
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == (sigint, sigterm)
    assert logging.getLogger("apache_beam").level == beam_level
    own = logging.getLogger("bertprep.test.own")
    try:
        assert [h.stream for h in own.handlers] == [sys.stderr]
    finally:
        own.handlers.clear()
