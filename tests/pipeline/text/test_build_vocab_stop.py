"""build-vocab stopped with Ctrl-C or SIGTERM while the trainer reads: exit status 130 within seconds, one
line, and no vocab or staging folder left behind (the trainer pulls the corpus from its own thread, so the
reading stops through ``interrupts.received``)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from cli_factory import spawn_bertprep


def _wait_until_reading(proc, corpus: Path, timeout: float = 60.0) -> None:
    """Until ``proc`` has a file of ``corpus`` open (``/proc/PID/fd``): the corpus's files are only opened by the
    readers that feed the trainer, after ``interrupts.listen``, so from then on the trainer is reading. (It was a
    fixed 2.5 s sleep, into which every second of start-up saved went as more reading.)"""
    fds, where = Path(f"/proc/{proc.pid}/fd"), os.path.realpath(corpus) + os.sep
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):  # (a descriptor closed between the listing and its readlink)
            if any(os.readlink(fd).startswith(where) for fd in fds.iterdir()):
                return
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc/PID/fd to see the reading start")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_build_vocab_ends_fast_with_130_and_writes_nothing(shared_data, tmp_path, sig):
    corpus = shared_data / "wikipedia" / "wikiextractor-featured" / "AA"
    out = tmp_path / "vocab"
    proc = spawn_bertprep("build-vocab", "-i", corpus, "--vocab-size", "8000", "-o", out)
    _wait_until_reading(proc, corpus)
    assert proc.poll() is None, "build-vocab ended before it could be stopped"
    os.killpg(proc.pid, sig)
    start = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - start < 10
    assert proc.returncode == 130
    errors = [line for line in stderr.splitlines() if line.strip() and not line.startswith("Reading")]
    assert errors == [f"bertprep: stopped by {sig.name}"], stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".vocab")]
