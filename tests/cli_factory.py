"""The real ``bertprep`` CLI in a subprocess, as the fault tests run it, and what they assert of its output.

done = bertprep("train", "--shards", shards, "-o", out, timeout=300)   # a CompletedProcess, bounded in time
proc = spawn_bertprep("build-vocab", "-i", corpus, "-o", out)   # a Popen in its own session, to be signalled
line = error_line(done)              # the one "Error:" line (exit status 2, no traceback)
line = one_line(done.stderr)         # the same for any output and status
before = snapshot(run)               # {relative path: bytes} of a folder, to assert it is intact afterwards
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: One thread per process (two pytest workers share two cores) and unbuffered output (tests read it live).
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def bertprep(
    *args, timeout: float = 120, cwd=None, env=None, prefix=("-m", "bertprep.cli.main")
) -> subprocess.CompletedProcess:
    """Run ``bertprep ARGS`` in a subprocess that must end within ``timeout`` seconds (else
    ``subprocess.TimeoutExpired``: the test fails); ``prefix``: a runner script instead of the module."""
    return subprocess.run(
        [sys.executable, *prefix, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env or ENV,
    )


def spawn_bertprep(*args) -> subprocess.Popen:
    """Start the ``bertprep`` console script with ``args`` in a session of its own (a signal can go to its whole
    process group, as a terminal's Ctrl-C does), stdout discarded and stderr piped as text; the caller ends it."""
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "bertprep"), *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def error_line(proc: subprocess.CompletedProcess | tuple[int, str], status: int = 2) -> str:
    """The one ``Error:`` line of a failed run (asserting its exit status and that no traceback was printed);
    ``proc``: a completed process or ``(returncode, stderr)``."""
    returncode, stderr = proc if isinstance(proc, tuple) else (proc.returncode, proc.stderr)
    assert returncode == status, (returncode, stderr)
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def one_line(output: str, start: str = "Error: ") -> str:
    """The one line starting with ``start`` of a failed run's output (asserting no traceback was printed)."""
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    lines = [line for line in output.splitlines() if line.startswith(start)]
    assert len(lines) == 1, output
    return lines[0]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory``: ``{relative path: bytes}``."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
