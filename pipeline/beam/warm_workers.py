"""Beam SDK worker processes started before the pipeline needs them (the local runner's fixed cost).

Beam's local multi-processing runner (``FnApiRunner``) starts its worker processes only when the pipeline
runs, as ``python -m apache_beam.runners.worker.sdk_worker_main``: each then imports Beam, and unpickling
the first DoFn imports numpy, pyarrow, tokenizers and bertprep. Measured on the 2-core development machine
(``benchmarks/bench_make_shards.py``, ``beam-startup``), that is about 1.9 s of a 3.6 s trivial pipeline,
spent after the main process has done the same imports, so the work is done three times and nothing
overlaps; the workers' interpreter tear-down adds about 1 s at the end.

:class:`WarmWorkerPool` starts the workers first. ``make-shards`` calls :func:`start` at the top of the
command: in a process with one thread it imports Beam's harness and the transforms' modules (which the
main process needs anyway) and forks the workers, so they import nothing; elsewhere (other threads
running, where forking is unsafe) it starts new interpreters that import while the caller goes on. The
runner is then given a worker command (:func:`launcher_command`) that starts no imports at all: a
stdlib-only launcher (``python -S``) connects to the pool's Unix socket, passes its standard input, output
and error (``SCM_RIGHTS``) and its environment (the control and logging addresses and pipeline options Beam
set for it) to a waiting worker, which adopts them and runs Beam's own harness (``sdk_worker_main.main``);
the launcher exits with the worker's exit status. The worker leaves with ``os._exit`` once the harness
returns (its logs went over the logging service; nothing is left to flush), which cuts the interpreter
tear-down from the end of every run.

Nothing changes what the pipeline computes: the same harness runs the same bundles (``tests/test_buckets.py``
checks the bytes against one in-process worker). A launcher that finds no pool (or no worker within
:data:`CLAIM_TIMEOUT_S`) runs ``sdk_worker_main`` itself, as Beam would have. Unclaimed workers exit when
:meth:`WarmWorkerPool.close` is called or when the process that started them is gone (they check every half
second), so a failed run leaves no process behind.

This module imports no Beam at module level.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import NoReturn

if __name__ == "__main__":  # a spawned pool worker: Ctrl-C ends it quietly, as a forked one; make-shards reports
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

log = logging.getLogger(__name__)

#: Seconds a launcher waits for a pool worker to take it before running its own worker instead.
CLAIM_TIMEOUT_S = 120.0

_LAUNCHER = r"""
import json, os, signal, socket, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)  # a Ctrl-C to the process group: end quietly (make-shards reports)
path, timeout = sys.argv[1], float(sys.argv[2])
if path.startswith("@"):
    path = "\0" + path[1:]  # Linux's abstract socket namespace: no file
def own_worker():
    os.execv(sys.executable, [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(path)
    socket.send_fds(s, [b"W"], [0, 1, 2])
    s.settimeout(timeout)
    if s.recv(1) != b"A":
        raise OSError("no worker")
except OSError:
    s.close()
    own_worker()
s.settimeout(None)
s.sendall(json.dumps(dict(os.environ)).encode("utf-8"))
s.shutdown(socket.SHUT_WR)
status = b""
while True:
    chunk = s.recv(64)
    if not chunk:
        break
    status += chunk
sys.exit(int(status or b"1"))
"""


def launcher_command(socket_path: str) -> str:
    """Shell command for Beam's ``SubprocessSDKEnvironment``: hand this worker slot to a pool worker.
    ``socket_path``: a file path, or ``@name`` for ``name`` in Linux's abstract socket namespace."""
    return " ".join(
        shlex.quote(part) for part in (sys.executable, "-S", "-c", _LAUNCHER, socket_path, str(CLAIM_TIMEOUT_S))
    )


class WarmWorkerPool:
    """``size`` Beam SDK worker processes, importing while the caller goes on (see the module docstring).

    Use :func:`start`; pass :attr:`command` to the runner (``run._local_runner``); call :meth:`close` when
    the pipeline is done (or failed). ``size`` should equal the runner's ``direct_num_workers``.
    """

    def __init__(self, size: int, fork: bool = False):
        self.size = size
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if sys.platform.startswith("linux"):  # an abstract socket: nothing on disk, even if this process is killed
            self._dir = None
            name = f"bertprep-pool-{os.getpid()}-{uuid.uuid4().hex}"
            self._listener.bind("\0" + name)
            self.socket_path = "@" + name
        else:
            self._dir = tempfile.mkdtemp(prefix="bertprep-pool-")
            self.socket_path = os.path.join(self._dir, "pool.sock")
            self._listener.bind(self.socket_path)
        self._listener.listen(max(8, size))
        fd = self._listener.fileno()
        self._procs: list[_ForkedWorker | subprocess.Popen[bytes]]
        if fork:
            gc.freeze()  # the workers never collect what was imported: fewer copy-on-write pages, shorter GC passes
            try:
                self._procs = [_fork_worker(fd) for _ in range(size)]
            finally:
                gc.unfreeze()  # this process goes on as before
        else:
            env = dict(os.environ, BERTPREP_WARM_WORKER_FD=str(fd))
            self._procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "bertprep.pipeline.beam.warm_workers"],
                    pass_fds=[fd],
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
                for _ in range(size)
            ]
        self.command = launcher_command(self.socket_path)

    def close(self) -> None:
        """Stop the workers no launcher claimed (claimed ones have exited with the pipeline) and remove the
        socket. Safe to call twice."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []
        self._listener.close()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> WarmWorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ForkedWorker:
    """A forked pool worker, with the part of ``subprocess.Popen``'s interface that ``close`` uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        start = time.monotonic()
        while (returncode := self.poll()) is None:
            if timeout is not None and time.monotonic() - start > timeout:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.01)
        return returncode


def _fork_worker(listen_fd: int) -> _ForkedWorker:
    pid = os.fork()
    if pid:
        return _ForkedWorker(pid)
    status = 1  # the child: never return into the caller's code
    try:
        # the parent's handlers (make-shards' stop on SIGINT/SIGTERM) are not the worker's: it just ends
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        status = _serve(os.dup(listen_fd))
    finally:
        os._exit(status)


def start(size: int) -> WarmWorkerPool | None:
    """Start a pool of ``size`` workers, or None where that cannot work (no Unix sockets, fewer than 2
    workers: Beam then runs in-process or starts its own).

    On Linux, in a process with one thread (the CLI, before it has done anything) the workers are forked
    after this process has imported Beam's harness and the transforms' modules, so no worker imports
    anything; elsewhere, or with other threads running (forking those is unsafe), they are started as new
    interpreters that import in parallel with the caller."""
    if size < 2 or not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"):
        return None
    # fork only on Linux (macOS system libraries are not fork-safe once loaded, the reason Python spawns there)
    fork = sys.platform.startswith("linux") and threading.active_count() == 1
    if fork:
        _import_worker_modules()
    try:
        return WarmWorkerPool(size, fork=fork)
    except OSError as err:  # e.g. no writable temporary directory: Beam starts its own workers
        log.debug("no warm workers: %s", err)
        return None


def _import_worker_modules():
    """Import Beam's SDK harness and what the DoFns need (numpy, pyarrow, tokenizers, bertprep)."""
    from apache_beam.runners.worker import sdk_worker_main

    import bertprep.pipeline.beam.graph  # noqa: F401  (the DoFns' modules: transforms, write_shards, heldout)

    return sdk_worker_main


class _WithoutUserErrorTracebacks:
    """A pool worker's ``sys.stderr`` without the tracebacks of make-shards' user errors.

    Beam's harness prints the traceback of every failed bundle to its stderr (``sdk_worker.SdkHarness._execute``:
    ``print(traceback_string, file=sys.stderr)``, about 70 lines), which without ``-q`` reaches the terminal
    before make-shards' one-line error about the same thing (a binary input, a missing text column...). A
    traceback that ends in one of the user errors make-shards reports itself (``output.USER_ERRORS``) is
    dropped here, with the newline ``print`` writes after it; everything else passes unchanged.
    """

    def __init__(self, stream):
        self._stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        from bertprep.pipeline.beam.output import is_user_error_traceback

        dropped, self._dropped = self._dropped, False
        if is_user_error_traceback(text):
            self._dropped = True
            return len(text)
        if dropped and text == "\n":
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _serve(listen_fd: int) -> int:
    """A pool worker: import, wait for a launcher, adopt its stdio and environment, run Beam's harness."""
    listener = socket.socket(fileno=listen_fd)
    parent = os.getppid()
    sdk_worker_main = _import_worker_modules()
    listener.settimeout(0.5)
    while True:
        try:
            conn, _ = listener.accept()
            break
        except (TimeoutError, BlockingIOError, InterruptedError):
            if os.getppid() != parent:
                return 0  # the run that started us is gone
        except OSError:
            return 0
    listener.close()
    return serve_claimed(conn, sdk_worker_main)


def serve_claimed(conn: socket.socket, sdk_worker_main) -> NoReturn:
    """A pool worker claimed by the launcher at the other end of ``conn``: adopt the launcher's stdio and
    environment, run Beam's harness (``sdk_worker_main``, as :func:`_import_worker_modules` returns it), send
    the launcher the exit status and leave with ``os._exit`` (never returns)."""
    conn.settimeout(None)
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    conn.sendall(b"A")
    payload = b""
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        payload += chunk
    for fd, target in zip(fds, (0, 1, 2), strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(json.loads(payload.decode("utf-8")))
    sys.stderr = _WithoutUserErrorTracebacks(sys.stderr)
    status = 1
    try:
        sdk_worker_main.main([])
        status = 0
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(str(status).encode("ascii"))
            conn.close()
        finally:
            os._exit(status)


if __name__ == "__main__":
    sys.exit(_serve(int(os.environ.pop("BERTPREP_WARM_WORKER_FD"))))
