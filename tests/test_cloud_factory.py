"""The test emulators end with the process that started them, even when it is killed before any teardown runs (a
CI timeout, ``kill -9`` of a pytest worker): a server left behind holds a port and memory for the next run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import need_module

TESTS = Path(__file__).resolve().parent

CHILD = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from cloud_factory import emulator
with emulator("gcs", Path({log_dir!r})) as server:
    print(server.proc.pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no teardown: the context manager never ends
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie (ended, not yet reaped by init) counts as ended
        return stat.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_an_emulator_ends_when_the_process_that_started_it_is_killed(tmp_path):
    need_module("gcp_storage_emulator")
    child = subprocess.run(
        [sys.executable, "-c", CHILD.format(tests=str(TESTS), log_dir=str(tmp_path))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    pid = int(child.stdout.split()[0])
    deadline = time.monotonic() + 30  # a bound for a hang; the kernel signals at once
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"the emulator (pid {pid}) outlived the process that started it"
