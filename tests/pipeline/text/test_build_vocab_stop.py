"""build-vocab stopped with Ctrl-C or SIGTERM while the trainer reads: exit status 130 within seconds, one
line, and no vocab or staging folder left behind (the trainer pulls the corpus from its own thread, so the
reading stops through ``interrupts.received``)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cli_factory import spawn_bertprep


@pytest.mark.slow
@pytest.mark.parametrize("sig,delay", [(signal.SIGINT, 2.5), (signal.SIGTERM, 2.5)])
def test_a_stopped_build_vocab_ends_fast_with_130_and_writes_nothing(shared_data, tmp_path, sig, delay):
    corpus = shared_data / "wikipedia" / "wikiextractor-featured" / "AA"
    out = tmp_path / "vocab"
    proc = spawn_bertprep("build-vocab", "-i", corpus, "--vocab-size", "8000", "-o", out)
    time.sleep(delay)
    assert proc.poll() is None, "build-vocab ended before it could be stopped"
    os.killpg(proc.pid, sig)
    start = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - start < 10
    assert proc.returncode == 130
    errors = [line for line in stderr.splitlines() if line.strip() and not line.startswith("Reading")]
    assert errors == [f"bertprep: stopped by {sig.name}"], stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".vocab")]
