"""make-shards on a real Dask cluster gives the local runner's bytes.

A scheduler and two worker processes (one thread each: ``LocalCluster(processes=True)``), one for the module;
make-shards connects to the scheduler with ``--runner=DaskRunner --dask_client_address=...``, as a user's run
would. It runs in this process (``cli_factory.invoke``: the process itself is not what these tests are about;
the work runs in the worker processes, which unpickle the pipeline as they would from a separate client process,
and a fresh interpreter cost ~2-3 s of CPU per run importing torch, Beam and the writers). For each variant
the sha256 of every shard and of vocab.txt equals the default local runner's; the manifests are equal apart
from ``output_dir``. Each run must also have run tasks in both worker processes, and have read each input file
once (twice with ``--pairing-scope file --dedup exact``, whose first pass reads the inputs once more by
design): the workers count every full pass of the line readers (``readers.context._iter_lines``) through a
worker plugin.

The local runs only give the bytes to compare against: each runs once per module, in this process (click's
``CliRunner``; the default local runner runs a corpus this small in one process), shared by the tests that
compare against it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from cli_factory import invoke
from conftest import FIXTURES, need_module

distributed = need_module("distributed")

PIPELINE = FIXTURES / "pipeline"
INPUTS = [PIPELINE / "a.txt", PIPELINE / "b.txt"]
VARIANTS = {
    "defaults": [],
    "bucket-size-0": ["--bucket-size", "0"],
    "file-scope-eval-dedup": ["--pairing-scope", "file", "--eval-fraction", "0.3", "--dedup", "exact"],
    "dynamic": ["--masking", "dynamic"],
    "sop": ["--objective", "sop"],
    "minhash-eval": ["--eval-fraction", "0.3", "--dedup", "minhash", "--dedup-threshold", "0.5"],
    "file-scope-minhash": ["--pairing-scope", "file", "--dedup", "minhash"],
    "mixture-decontaminate": [
        "--source",
        f"a={INPUTS[0]}:1.5",
        "--source",
        f"b={INPUTS[1]}:0.5",
        "--decontaminate",
        "EVAL_FILE",  # a line of a.txt (written by the test)
        "--decontaminate-ngram",
        "8",
        "--decontaminate-mode",
        "cut",
    ],
    "file-scope-decontaminate-eval": [
        "--pairing-scope",
        "file",
        "--eval-fraction",
        "0.3",
        "--decontaminate",
        "EVAL_FILE",
        "--decontaminate-ngram",
        "8",
    ],
    # the other trainers' formats (shards/formats.py): MDS shards, Megatron's documents beside the Arrow shards
    "mds-eval": ["--output-format", "mds", "--eval-fraction", "0.3"],
    "megatron-eval": ["--output-format", "megatron", "--eval-fraction", "0.3"],
}
#: Variants whose first pass (dedup) reads every input once more.
TWO_READS = {"file-scope-eval-dedup", "minhash-eval", "file-scope-minhash"}
pytestmark = pytest.mark.slow


class CountReads(distributed.WorkerPlugin):
    """Worker plugin: every full pass of a line-based reader appends ``pid path`` to ``log``."""

    def __init__(self, log: str):
        self.log = log

    def setup(self, worker):
        from bertprep.pipeline.readers import context

        original, log = context._iter_lines, self.log

        def counted(path, *args, **kwargs):
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {path}\n")
            return original(path, *args, **kwargs)

        context._iter_lines = counted


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    log = tmp_path_factory.mktemp("reads") / "reads.log"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.register_plugin(CountReads(str(log)), name="count-reads")
        yield cluster, client, log


def _args(out: Path, extra: list[str], *beam_args: str) -> list[str]:
    """The arguments of ``bertprep make-shards`` of the fixture corpus (or ``extra``'s sources) into ``out``."""
    args = ["make-shards", "-q", "--vocab", str(PIPELINE / "vocab.txt")]
    if "--source" not in extra:  # sources name their own inputs
        for path in INPUTS:
            args += ["-i", str(path)]
    return [*args, "-o", str(out), "--dupe-factor", "3", *extra, *beam_args]


def _make_shards(out: Path, extra: list[str], *beam_args: str) -> subprocess.CompletedProcess:
    """``bertprep make-shards`` (:func:`_args`) in this process, as a process would run it
    (``cli_factory.invoke``: exit status, stdout and stderr apart, an uncaught traceback on stderr)."""
    return invoke(*_args(out, extra, *beam_args), timeout=300)


def _make_shards_here(out: Path, extra: list[str], *beam_args: str):
    """``bertprep make-shards`` (:func:`_args`) in this process; click's ``Result``."""
    from click.testing import CliRunner

    from bertprep.cli.main import cli

    return CliRunner().invoke(cli, _args(out, extra, *beam_args))


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory) -> Path:
    """The ``--decontaminate`` file of the variants that name ``EVAL_FILE``: a line of a.txt."""
    path = tmp_path_factory.mktemp("eval") / "eval.txt"
    path.write_text(next(line for line in INPUTS[0].read_text().splitlines() if len(line.split()) >= 8) + "\n")
    return path


def _extra(variant: str, eval_file: Path) -> list[str]:
    return [str(eval_file) if arg == "EVAL_FILE" else arg for arg in VARIANTS[variant]]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, eval_file):
    """``local_run(variant)``: the output folder of the default local runner's make-shards of ``variant``, run
    in this process the first time a test asks for it (the reference bytes; read only)."""
    root, done = tmp_path_factory.mktemp("local"), {}

    def get(variant: str) -> Path:
        if variant not in done:
            result = _make_shards_here(root / variant, _extra(variant, eval_file))
            assert result.exit_code == 0, (result.output, result.exception)
            done[variant] = root / variant
        return done[variant]

    return get


def _digests(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def _manifests(directory: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(directory.rglob("manifest.json")):
        manifest = json.loads(p.read_text())
        manifest.pop("output_dir", None)
        manifest.get("config", {}).pop("output_dir", None)
        out[str(p.relative_to(directory))] = manifest
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_dask_cluster_gives_the_local_runners_bytes(cluster, local_run, eval_file, tmp_path, variant):
    cluster_, client, log = cluster
    library = {"mds-eval": "streaming", "megatron-eval": "megatron"}.get(variant)
    if library is not None and importlib.util.find_spec(library) is None:
        need_module(library)  # skips, or fails under CI=true
    extra = _extra(variant, eval_file)
    local = local_run(variant)
    log.write_text("")
    before = client.run(lambda dask_worker: dask_worker.state.executed_count)
    on_dask = _make_shards(
        tmp_path / "dask",
        extra,
        "--runner=DaskRunner",
        f"--dask_client_address={cluster_.scheduler_address}",
    )
    assert on_dask.returncode == 0, on_dask.stderr
    after = client.run(lambda dask_worker: dask_worker.state.executed_count)

    local_digests = _digests(local)
    assert any(name.endswith((".arrow", ".mds")) for name in local_digests)
    assert _digests(tmp_path / "dask") == local_digests
    assert _manifests(tmp_path / "dask") == _manifests(local)

    ran = {worker: after[worker] - before.get(worker, 0) for worker in after}
    assert len(ran) == 2 and all(n > 0 for n in ran.values()), f"tasks per worker process: {ran}"
    reads = Counter(line.split(" ", 1)[1] for line in log.read_text().splitlines())
    expected = 2 if variant in TWO_READS else 1
    assert sorted(reads.values()) == [expected] * len(INPUTS), reads


def test_unreachable_scheduler_is_one_line_naming_the_address(tmp_path):
    result = _make_shards(
        tmp_path / "out",
        [],
        "--runner=DaskRunner",
        "--dask_client_address=tcp://127.0.0.1:9",
        "--dask_connection_timeout=1",
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "tcp://127.0.0.1:9" in result.stderr and "dask scheduler" in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_runner_beam_cannot_create_shows_beams_reason(tmp_path):
    result = _make_shards_here(tmp_path / "out", [], "--runner=NoSuchRunner", "--some_option_of_it=1")
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit), result.exception  # click's error exit, no traceback
    assert "no such option" not in result.stderr
    assert "--runner=NoSuchRunner" in result.stderr and "Traceback" not in result.stderr


class HoldFirstRead(distributed.WorkerPlugin):
    """Worker plugin: each line-reader pass appends ``pid path`` to ``log``, then, until the file ``released``
    exists (at most ``bound`` seconds), waits: a ``kill -9`` aimed at the first reading worker lands inside its
    task, and the test writes ``released`` once it has killed it (the others, and the rerun, then go on).
    ``teardown`` puts the reader back (the module's cluster goes on without the hold)."""

    def __init__(self, log: str, released: str, bound: float = 60.0):
        self.log, self.released, self.bound = log, released, bound

    def setup(self, worker):
        import time

        from bertprep.pipeline.readers import context

        original, log, released, bound = context._iter_lines, self.log, self.released, self.bound
        self.original = original

        def held(path, *args, **kwargs):
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {path}\n")
            deadline = time.monotonic() + bound
            while not os.path.exists(released) and time.monotonic() < deadline:
                time.sleep(0.02)
            return original(path, *args, **kwargs)

        context._iter_lines = held

    def teardown(self, worker):
        from bertprep.pipeline.readers import context

        context._iter_lines = self.original


def test_a_worker_killed_mid_run_still_gives_the_local_runners_bytes(cluster, local_run, tmp_path):
    """``kill -9`` of the worker process that is reading an input file, during make-shards on a 2-worker
    cluster: Dask's nanny restarts the worker and the scheduler reruns its lost tasks, so the run ends with
    status 0 and the same shards and manifest as the local runner (never a manifest beside half the shards),
    in bounded time. (On the module's cluster: the test waits for its two workers again afterwards.)"""
    import signal
    import threading
    import time

    cluster_, client, _ = cluster
    log, released = tmp_path / "reads.log", tmp_path / "released"
    log.write_text("")
    local = local_run("defaults")
    killed: list[int] = []
    client.register_plugin(HoldFirstRead(str(log), str(released)), name="hold-first-read")
    try:
        workers = set(client.run(os.getpid).values())

        def kill_the_first_reader():
            deadline = time.monotonic() + 120
            try:
                while time.monotonic() < deadline and not killed:
                    for line in log.read_text().splitlines():
                        pid = int(line.split(" ", 1)[0])
                        if pid in workers:
                            os.kill(pid, signal.SIGKILL)
                            killed.append(pid)
                            return
                    time.sleep(0.02)
            finally:
                released.touch()

        killer = threading.Thread(target=kill_the_first_reader, daemon=True)
        killer.start()
        start = time.monotonic()
        on_dask = _make_shards(
            tmp_path / "dask", [], "--runner=DaskRunner", f"--dask_client_address={cluster_.scheduler_address}"
        )
        elapsed = time.monotonic() - start
        killer.join(5)
        restarted = set(client.run(os.getpid).values())
    finally:
        released.touch()
        client.unregister_worker_plugin("hold-first-read")
        client.wait_for_workers(2, timeout=120)

    assert killed, "no worker started reading"
    assert killed[0] not in restarted  # the killed process is gone; its nanny started a new one
    assert on_dask.returncode == 0, on_dask.stderr
    assert elapsed < 240
    assert _digests(tmp_path / "dask") == _digests(local)
    assert _manifests(tmp_path / "dask") == _manifests(local)
