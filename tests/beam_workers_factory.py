"""Two Beam SDK worker processes for the two-worker make-shards runs of a test process, started in a fraction of
the time Beam's own take.

With ``--direct_num_workers=2 --direct_running_mode=multi_processing`` Beam's local runner starts two new
interpreters per run (``python -m apache_beam.runners.worker.sdk_worker_main``); each imports Beam, numpy,
pyarrow, tokenizers and bertprep before it runs a bundle: about 1.8 s of CPU each, some 4 s a run with their
tear-down, for pipelines whose own work on the test corpora is a fraction of that. make-shards' CLI avoids it
by forking its workers after its imports (``bertprep.pipeline.beam.warm_workers``), but a test process cannot
fork itself once a two-worker run has started gRPC's threads in it (the child hangs).

:func:`two_workers` starts, once per test process, two fork servers: new interpreters (so each has its own
hash seed, as Beam's workers do) that import what a worker needs and never start gRPC. For each worker slot of
a run, the product's own launcher (``warm_workers.launcher_command``: Beam runs it as the worker command)
connects to the server of its slot's parity (``WORKER_ID`` ``worker_<n>``: the two workers of one run are two
consecutive numbers, so one from each server), which forks a child that adopts the launcher's standard streams
and environment and runs Beam's harness (``warm_workers.serve_claimed``), as make-shards' own warm workers do.
So each run still has two worker processes that run the same harness on the same bundles; only the imports are
done once. Pass the returned pool as ``run_make_shards(..., workers=two_workers())``, or
:func:`for_the_cli` for runs through the command line.

The servers stop when the test process exits (``atexit``) or is gone (they check every half second); each
reaps its forked workers, so their CPU time is counted for the test process.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass

from bertprep.pipeline.beam import warm_workers

#: Worker processes per run (``--direct_num_workers``).
SIZE = 2


@dataclass
class ForkServers:
    """What ``run._local_runner`` needs of a ``WarmWorkerPool``: ``size`` and the worker ``command``."""

    size: int
    command: str
    procs: list[subprocess.Popen]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


_servers: ForkServers | None = None


def two_workers() -> ForkServers | None:
    """The test process's two fork servers (started by the first call), as a pool for ``run_make_shards``; None
    off Linux (no abstract sockets, no safe fork on macOS: Beam then starts its own workers)."""
    global _servers
    if not sys.platform.startswith("linux"):
        return None
    if _servers is None or any(p.poll() is not None for p in _servers.procs):
        if _servers is not None:  # one of them gone: start both again
            _servers.close()
        name = f"bertprep-test-workers-{os.getpid()}-{uuid.uuid4().hex}"
        procs = []
        for slot in range(SIZE):
            # Linux's abstract namespace: nothing on disk. Only the server holds the socket: a launcher that finds
            # none (a server gone) runs its own worker, as Beam would have
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
                listener.bind(f"\0{name}-{slot}")
                listener.listen(8)
                fd = listener.fileno()
                procs.append(
                    subprocess.Popen([sys.executable, __file__, str(fd)], pass_fds=[fd], stdin=subprocess.DEVNULL)
                )
        _servers = ForkServers(SIZE, _command(name), procs)
        atexit.register(_servers.close)
    return _servers


def _command(name: str) -> str:
    """The shell command Beam runs per worker slot: the product's launcher, given the socket of the slot's
    parity."""
    launcher = shlex.split(warm_workers.launcher_command("@" + name))
    fixed = " ".join(shlex.quote(part) for part in launcher[:-2])  # python -S -c LAUNCHER
    timeout = launcher[-1]
    return f'n="${{WORKER_ID:-worker_0}}"; exec {fixed} "@{name}-$(( ${{n#worker_}} % {SIZE} ))" {timeout}'


def for_the_cli(monkeypatch) -> ForkServers | None:
    """Make the local runner of the runs in this test (the CLI's included, which start no warm workers when
    given Beam options) use :func:`two_workers` when run with two multi-processing workers."""
    from bertprep.pipeline.beam import run

    servers, real = two_workers(), run._local_runner
    monkeypatch.setattr(run, "_local_runner", lambda options, workers=None: real(options, workers or servers))
    return servers


def _serve_forks(listen_fd: int) -> int:
    """A fork server: import once, then fork a worker for each launcher that connects (until the test process
    is gone or this one is terminated), reaping the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to pytest: the test process stops us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    parent = os.getppid()
    sdk_worker_main = warm_workers._import_worker_modules()
    listener = socket.socket(fileno=listen_fd)
    listener.settimeout(0.5)
    children: set[int] = set()
    try:
        while os.getppid() == parent:
            children -= {pid for pid in list(children) if os.waitpid(pid, os.WNOHANG)[0]}
            try:
                conn, _ = listener.accept()
            except (TimeoutError, BlockingIOError, InterruptedError):
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                warm_workers.serve_claimed(conn, sdk_worker_main)
            conn.close()
            children.add(pid)
    finally:
        for pid in children:  # their CPU time counts for the test process
            os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(_serve_forks(int(sys.argv[1])))
