"""interrupts.exit_now: the one line of a stopped command reaches the terminal, even while make-shards points
fd 2 at a temporary file to capture its local workers' output (``beam.output.worker_stderr_captured``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_exit_now_writes_one_line_and_ends_with_the_status():
    result = _run(
        """
        from bertprep.pipeline import interrupts
        interrupts.exit_now("bertprep: stopped by SIGINT")
        print("not reached")
        """
    )
    assert result.returncode == 130
    assert result.stderr == "bertprep: stopped by SIGINT\n" and result.stdout == ""


def test_exit_now_reaches_the_terminal_while_worker_stderr_is_captured():
    """A signal that ends the run at once (a second Ctrl-C, the watchdog, or one during an import) while the
    workers' stderr is captured: the line still reaches the user, and what the workers printed does not."""
    result = _run(
        """
        import os
        from bertprep.pipeline import interrupts
        from bertprep.pipeline.beam.output import worker_stderr_captured
        with worker_stderr_captured(True):
            os.write(2, b"a worker's traceback\\n")
            interrupts.exit_now("make-shards stopped by SIGTERM: nothing was published", 130)
        """
    )
    assert result.returncode == 130
    assert result.stderr == "make-shards stopped by SIGTERM: nothing was published\n"
