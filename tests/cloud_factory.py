"""Object-storage emulators as test servers, and a small many-file corpus to put in them.

The emulators are real API servers run as child processes on a free localhost port: ``gcp-storage-emulator``
(the Google Cloud Storage JSON API; ``google-cloud-storage``, hence Beam's ``gs://`` file system, talks to it
through ``STORAGE_EMULATOR_HOST``) and ``moto`` in server mode (the S3 API; boto3, hence Beam's ``s3://`` file
system, talks to it through ``AWS_ENDPOINT_URL_S3``). No client is replaced: the tests run the client libraries
users run. :func:`emulator` starts one and stops it (the whole process group) when the block ends; the session
fixtures in ``conftest.py`` (``gcs_server``, ``s3_server``) hold one each for the session, and the function
fixtures (``gcs``, ``s3``) point the environment at it for one test and give it a fresh bucket.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertprep.core import storage
from conftest import FIXTURES

#: Seconds an emulator may take to accept connections (moto imports much of boto on start).
START_TIMEOUT_S = 60.0

CORPUS_VOCAB = FIXTURES / "pipeline" / "vocab.txt"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_listening(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the emulator exited with status {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the emulator did not listen on port {port} within {START_TIMEOUT_S:g} s")


@dataclass
class Emulator:
    """A running emulator: its process, its endpoint ``url`` (``http://127.0.0.1:PORT``), its command and the
    environment it was started with (None: this process's)."""

    proc: subprocess.Popen
    url: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def restart(self) -> None:
        """Stop the server if it runs, then start the same command on the same port, waiting until it listens
        (an outage and its end, as clients see a restarted service). Only an emulator that keeps its objects on
        disk (``emulator("gcs", ..., on_disk=True)``) still holds them afterwards."""
        self.stop()
        self.proc = _start(self.argv, self.port, self.log, self.env).proc

    def stop(self) -> None:
        """Stop the server (its whole process group: werkzeug's may have a child), waiting for it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _pdeathsig():
    """``prctl`` from the C library, looked up here, in the parent: a child between fork and exec should not import
    (another thread may hold the import lock). None off Linux or without it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _pdeathsig()


def _die_with_parent() -> None:
    """In the emulator's process, before it runs: the kernel sends it SIGTERM when the pytest worker that started
    it ends (``PR_SET_PDEATHSIG``, 1), so a worker killed before its fixtures' teardown (a CI timeout, ``kill``)
    leaves no server behind. Without ``prctl`` nothing: :meth:`Emulator.stop` is then the only stop."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGTERM), 0, 0, 0)


def _death_signal():
    """The ``preexec_fn`` for a server started from this thread: :func:`_die_with_parent` from the main thread
    only. The kernel sends the signal when the *thread* that forked ends, not the process (prctl(2)), so a server
    restarted from a helper thread (an outage's end, :meth:`Emulator.restart`) would be stopped as that thread
    returns; such a server is stopped by its block's :meth:`Emulator.stop`."""
    import threading

    return _die_with_parent if threading.current_thread() is threading.main_thread() else None


def _start(argv: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> Emulator:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            preexec_fn=_death_signal(),
        )
    emulator = Emulator(proc, f"http://127.0.0.1:{port}", argv, log, env)
    try:
        _wait_until_listening(proc, port, log)
    except BaseException:
        emulator.stop()
        raise
    return emulator


def gcs_argv(port: int, in_memory: bool = True) -> list[str]:
    """``gcp-storage-emulator start`` on 127.0.0.1:``port``, objects in memory (else on disk, under the folder
    its ``STORAGE_BASE`` environment variable names)."""
    exe = Path(sys.executable).with_name("gcp-storage-emulator")
    return [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--quiet"] + ["--in-memory"] * in_memory


def s3_argv(port: int) -> list[str]:
    """``moto_server`` on 127.0.0.1:``port`` (every AWS API moto has, S3 among them)."""
    return [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)]


@contextlib.contextmanager
def emulator(kind: str, log_dir: Path, on_disk: bool = False) -> Iterator[Emulator]:
    """Run the ``gcs`` or ``s3`` emulator on a free port for the block; stopped at its end whatever happens.
    ``on_disk`` (``gcs`` only; moto keeps objects in memory): its objects under ``log_dir``, so that they
    survive :meth:`Emulator.restart`."""
    port = free_port()
    log = log_dir / f"{kind}-emulator.log"
    if on_disk:
        if kind != "gcs":
            raise ValueError("only the GCS emulator keeps its objects on disk")
        server = _start(gcs_argv(port, in_memory=False), port, log, {**os.environ, "STORAGE_BASE": str(log_dir)})
    else:
        server = _start((gcs_argv if kind == "gcs" else s3_argv)(port), port, log)
    try:
        yield server
    finally:
        server.stop()


def gcs_environment(url: str) -> dict[str, str]:
    """The environment that points google-cloud-storage (and Beam's GCS file system) at the emulator
    ``url``: no credentials are needed, and google-auth does not wait for a metadata server."""
    return {"STORAGE_EMULATOR_HOST": url, "NO_GCE_CHECK": "true"}


def s3_environment(url: str, config_dir: Path) -> dict[str, str]:
    """The environment that points boto3 (and Beam's S3 file system) at the emulator ``url``, with the
    dummy keys moto accepts and no shared config of the user's."""
    return {
        "AWS_ENDPOINT_URL_S3": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(config_dir / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(config_dir / "aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def new_bucket(scheme: str) -> str:
    """Create a bucket with a fresh name through the client library (the environment already set) and return
    ``gs://NAME`` or ``s3://NAME``."""
    name = f"bertprep-{uuid.uuid4().hex[:12]}"
    if scheme == "gs":
        from google.cloud import storage

        storage.Client.create_anonymous_client().create_bucket(name)
    else:
        import boto3

        boto3.client("s3").create_bucket(Bucket=name)
    return f"{scheme}://{name}"


def upload_folder(local: Path, remote: str) -> None:
    """Copy every file under ``local`` to ``remote/<relative path>`` through Beam's file systems."""
    from apache_beam.io.filesystems import FileSystems

    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        with FileSystems.create(remote.rstrip("/") + "/" + path.relative_to(local).as_posix()) as out:
            out.write(path.read_bytes())


def object_digests(root: str) -> dict[str, str]:
    """``relative path -> sha256`` of every object (or file) under ``root``, read through Beam's file systems."""
    from apache_beam.io.filesystems import FileSystems

    base = root.rstrip("/")
    pattern = storage.join(base, "**")
    out = {}
    for meta in FileSystems.match([pattern])[0].metadata_list:
        with FileSystems.open(meta.path) as f:
            out[meta.path[len(base) :].lstrip("/")] = hashlib.sha256(f.read()).hexdigest()
    return out


def digests_but_paths(root: str, paths: dict[str, str]) -> dict[str, str]:
    """:func:`object_digests` of a shard folder, with each manifest's paths (each key of ``paths``, e.g. the
    input root and the output folder as this run named them) replaced by their value first: the shards, vocab
    and manifests of two runs of one corpus in two places compare equal iff only those paths differ."""
    from apache_beam.io.filesystems import FileSystems

    digests = object_digests(root)
    for name in [n for n in digests if n.endswith("manifest.json")]:
        with FileSystems.open(root.rstrip("/") + "/" + name) as f:
            text = f.read().decode("utf-8")
        for path, stand_in in sorted(paths.items(), key=lambda kv: -len(kv[0])):  # longest first
            text = text.replace(json.dumps(path)[1:-1], stand_in)
        digests[name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return digests


def write_corpus(root: Path, num_files: int = 12, docs_per_file: int = 8) -> Path:
    """A corpus in the BERT format (a sentence a line, blank lines between documents) of ``num_files`` files in
    three sub-folders (``part-K/doc-NN.txt``), made of the fixture poems' lines in a fixed order; returns
    ``root``. 96 documents: enough for several token-sized buckets at a small ``bucket_tokens``."""
    lines = [
        line.strip()
        for name in ("a.txt", "b.txt")
        for line in (FIXTURES / "pipeline" / name).read_text().splitlines()
        if line.strip()
    ]
    at = 0
    for f in range(num_files):
        docs = []
        for d in range(docs_per_file):
            n = 3 + (f * docs_per_file + d) % 5
            docs.append("\n".join(lines[(at + i) % len(lines)] for i in range(n)))
            at += n
        path = root / f"part-{f % 3}" / f"doc-{f:02d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n\n".join(docs) + "\n")
    return root
