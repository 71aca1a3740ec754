"""The ``bertprep`` CLI as the fault tests run it (in this process, or in a subprocess where the process is what
is tested), and what they assert of its output.

done = invoke("train", "--shards", shards, "-o", out, timeout=300)     # in this process: a CompletedProcess
done = bertprep("train", "--shards", shards, "-o", out, timeout=300)   # the same from a subprocess
proc = spawn_bertprep("build-vocab", "-i", corpus, "-o", out)   # a Popen in its own session, to be signalled
line = error_line(done)              # the one "Error:" line (exit status 2, no traceback)
line = one_line(done.stderr)         # the same for any output and status
before = snapshot(run)               # {relative path: bytes} of a folder, to assert it is intact afterwards
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
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


class _TimedOut(BaseException):
    """:func:`invoke`'s bound passed (a BaseException, so that no command's ``except Exception`` swallows it)."""


def invoke(*args, timeout: float = 120, cwd=None, env=None) -> subprocess.CompletedProcess:
    """Run ``bertprep ARGS`` in this process (click's ``CliRunner``), as :func:`bertprep` runs it in a subprocess
    but without the ~3 s of CPU a fresh interpreter spends importing torch and Beam: a ``CompletedProcess`` with
    stdout and stderr apart, ``returncode`` the exit status (1 for an uncaught exception, whose traceback is
    written to stderr as the interpreter writes it, so a "no Traceback" assertion means what it does of a
    process). ``timeout``: seconds, else ``subprocess.TimeoutExpired`` (SIGALRM: the test fails, and the
    command's ``finally`` blocks run). ``env``: variables set for the run (on top of this process's
    environment, as ``{**ENV, ...}`` is for a subprocess); ``cwd``: the working directory during the run.

    What a process would have kept to itself is put back afterwards: environment, working directory, the SIGINT,
    SIGTERM and SIGALRM handlers (``train`` installs its own), the root logger's handlers and level (each
    command's ``logging.basicConfig`` writes to this run's stderr, as in a fresh process, and no handler is left
    holding the run's closed stream), the levels of existing loggers, ``logging.disable``, the torch thread count
    (one thread during the run, as ``OMP_NUM_THREADS=1`` gives a subprocess), the random generators (the
    command seeds them) and ``gc``. Not isolated: what modules cache (imports, fsspec file systems) and warnings,
    which pytest records instead of letting them reach stderr.
    """
    from click.testing import CliRunner

    from bertprep.cli.main import cli

    argv = [str(a) for a in args]
    try:
        with _process_state(cwd), _bounded(timeout, argv):
            result = CliRunner().invoke(cli, argv, prog_name="bertprep", env={**_THREADS, **(env or {})})
    except _TimedOut:
        raise subprocess.TimeoutExpired(["bertprep", *argv], timeout) from None
    stderr, returncode = result.stderr, result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))  # as the interpreter prints it
        returncode = 1
    return subprocess.CompletedProcess(["bertprep", *argv], returncode, result.stdout, stderr)


#: What ENV gives a subprocess, set during an in-process run too (read by code that starts workers).
_THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def _bounded(timeout: float, argv: list[str]) -> Iterator[None]:
    """Raise :class:`_TimedOut` in the main thread after ``timeout`` seconds (no bound off the main thread,
    where signals cannot be handled)."""

    def expire(signum, frame):
        raise _TimedOut(f"bertprep {' '.join(argv)}: still running after {timeout} s")

    if sys.platform == "win32" or not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _process_state(cwd) -> Iterator[None]:
    """Put back, after the block, the global state a run in a process of its own would not have touched."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if _in_main_thread() else {}
    root = logging.getLogger()
    root_handlers, root_level, disabled = root.handlers[:], root.level, logging.root.manager.disable
    levels = {n: lg.level for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    gc_enabled, rng, old_cwd = gc.isenabled(), _rng_state(), os.getcwd()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    root.handlers = []  # so that the command's logging.basicConfig writes to its stderr, as in a fresh process
    try:
        if cwd is not None:
            os.chdir(cwd)
        if torch:
            torch.set_num_threads(1)
        yield
    finally:
        os.chdir(old_cwd)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = root_handlers, root_level
        logging.disable(disabled)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        _unhook_closed_streams()
        if threads is not None:
            torch.set_num_threads(threads)
        _set_rng_state(rng)
        (gc.enable if gc_enabled else gc.disable)()


def _unhook_closed_streams() -> None:
    """A handler a library added during the run (on first use) writes to the run's stderr, closed now: point it
    at this process's stderr, where it would have written had the library been set up before the run."""
    for logger in [logging.getLogger(), *logging.root.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", []):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and type(stream).__module__ == "click.testing":
                handler.setStream(sys.stderr)


def _rng_state() -> dict:
    """The state of Python's, NumPy's and torch's global random generators (those imported)."""
    state = {"random": random.getstate()}
    if "numpy" in sys.modules:
        state["numpy"] = sys.modules["numpy"].random.get_state()
    if "torch" in sys.modules:
        state["torch"] = sys.modules["torch"].random.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["random"])
    if "numpy" in state:
        sys.modules["numpy"].random.set_state(state["numpy"])
    if "torch" in state:
        sys.modules["torch"].random.set_rng_state(state["torch"])


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
