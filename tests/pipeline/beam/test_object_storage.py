"""make-shards where the corpus lives: two local folders, a GCS bucket, an S3 bucket give the same bytes.

A document's keys (its bucket, its held-out side, its mixture draw) hash its file's path relative to the root
of the input that names it (``readers.input_keys``), so moving or copying a corpus changes no shard. The
buckets are real API servers run by the tests (``gcp-storage-emulator``, ``moto``: ``cloud_factory.py``),
reached through the client libraries Beam uses (google-cloud-storage, boto3).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bertprep.pipeline.beam.run import MakeShardsError, run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.masking.config import MaskingConfig
from cloud_factory import CORPUS_VOCAB, digests_but_paths, emulator, object_digests, upload_folder, write_corpus
from conftest import need_module
from pipeline_factory import PipelineOutputReplayed

ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]

#: The default options but a small ``bucket_tokens`` (several buckets of this small corpus), and the file
#: pairing scope with a held-out split.
OPTIONS = {
    "default": dict(bucket_tokens=2_000),
    "file-scope-eval": dict(pairing_scope="file", eval_fraction=0.05),
    # the other trainers' formats (shards/formats.py; their extras): MDS shards, Megatron's documents
    "mds-eval": dict(bucket_tokens=2_000, eval_fraction=0.05, output_format="mds"),
    "megatron-eval": dict(bucket_tokens=2_000, eval_fraction=0.05, output_format="megatron"),
}
#: The module each option set needs besides bertprep's own (an extra).
LIBRARIES = {"mds-eval": "streaming", "megatron-eval": "megatron"}


def _need_library(name: str) -> None:
    if name in LIBRARIES and importlib.util.find_spec(LIBRARIES[name]) is None:
        need_module(LIBRARIES[name])  # skips, or fails under CI=true


def _config(inputs: str, vocab: str, output_dir: str, options: dict) -> ShardsConfig:
    return ShardsConfig(
        inputs=(inputs,),
        vocab=vocab,
        output_dir=output_dir,
        input_format="bert",
        instance=InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10)),
        num_shards=3,
        **options,
    )


def _make(root: str, corpus: str, vocab: str, options: dict, beam_args: list[str] = ONE_WORKER) -> dict[str, str]:
    """make-shards of ``corpus`` with ``vocab`` into ``root/out`` (the local runner on one worker unless
    ``beam_args`` say otherwise): the digests of what it wrote, its manifests' paths (the corpus folder, the
    vocab, the output folder) replaced by stand-ins."""
    out = f"{root}/out"
    manifest = run_make_shards(_config(corpus, vocab, out, options), beam_args)
    assert manifest["statistics"]["instances"] > 0
    folder = corpus.rstrip("/")  # given with or without its "/"
    return digests_but_paths(out, {folder + "/": "<corpus>/", folder: "<corpus>/", vocab: "<vocab>", out: "<out>"})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus")


@pytest.fixture(scope="module")
def local_runs(corpus, tmp_path_factory) -> dict[str, tuple[Path, dict[str, str]]]:
    """Per option set, a local run over ``corpus``: its output folder (read only: copy it to change it) and
    the digests of what it wrote (:func:`_make`)."""
    out = {}
    for name, options in OPTIONS.items():
        if name in LIBRARIES and importlib.util.find_spec(LIBRARIES[name]) is None:
            continue  # its tests skip
        root = tmp_path_factory.mktemp(f"local-{name}")
        out[name] = (root / "out", _make(str(root), str(corpus), str(CORPUS_VOCAB), options))
    return out


@pytest.fixture(scope="module")
def local_digests(local_runs) -> dict[str, dict[str, str]]:
    """Per option set, the digests of a local run over ``corpus``."""
    return {name: digests for name, (_, digests) in local_runs.items()}


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_the_same_corpus_in_another_folder_gives_the_same_bytes(corpus, local_digests, tmp_path, name):
    _need_library(name)
    moved = tmp_path / "elsewhere" / "copy-of-corpus"
    shutil.copytree(corpus, moved)
    vocab = tmp_path / "vocab.txt"
    shutil.copy(CORPUS_VOCAB, vocab)
    here = _make(str(tmp_path), str(moved) + "/", str(vocab), OPTIONS[name])
    expected = local_digests[name]
    assert any(n.startswith("shard-") for n in expected)
    if name == "default":  # several buckets: the keys decide which documents pair
        assert sum(n.startswith("shard-") for n in expected) == 3
    else:  # the keys decide the held-out side
        assert any(n.startswith("eval/shard-") for n in expected)
    assert here == expected


#: The S3 runs take seconds since make-shards shares one boto3 client among Beam's S3 operations
#: (``filesystems._share_s3_clients``; before, 30-50 s each); the second GCS run is ``slow`` (``make test`` runs it,
#: ``make test-fast`` does not).
STORES = [
    ("gcs", "default"),
    pytest.param("gcs", "file-scope-eval", marks=pytest.mark.slow),
    ("s3", "default"),
    ("s3", "file-scope-eval"),
    ("gcs", "mds-eval"),
    ("s3", "megatron-eval"),
]


@pytest.mark.parametrize(("store", "name"), STORES)
@pytest.mark.slow  # ~10 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_make_shards_in_a_bucket_gives_the_bytes_of_a_local_run(corpus, local_digests, request, store, name):
    _need_library(name)
    bucket = request.getfixturevalue(store)  # gs://NAME or s3://NAME on the emulator
    upload_folder(corpus, f"{bucket}/corpus")
    upload_folder(CORPUS_VOCAB.parent, f"{bucket}/vocab")  # (the fixture folder: vocab.txt and two texts)
    got = _make(bucket, f"{bucket}/corpus/", f"{bucket}/vocab/vocab.txt", OPTIONS[name])
    assert got == local_digests[name]


@pytest.mark.slow  # ~15 s on 2 busy cores
def test_streaming_reads_mds_shards_from_the_bucket(corpus, local_runs, s3, tmp_path):
    """StreamingDataset(remote="s3://...") reads an MDS set make-shards wrote into a bucket: the rows of the same
    run written locally, in the same order (boto3, which the library uses, finds the emulator through the
    environment)."""
    _need_library("mds-eval")
    from bertprep.pipeline.shards import formats

    upload_folder(corpus, f"{s3}/corpus")
    _make(s3, f"{s3}/corpus/", str(CORPUS_VOCAB), OPTIONS["mds-eval"])
    local = tmp_path / "local"
    shutil.copytree(local_runs["mds-eval"][0], local)  # the same run written locally (the module's)
    streaming = formats.import_streaming()
    remote = streaming.StreamingDataset(remote=f"{s3}/out", local=str(tmp_path / "cache"), shuffle=False, batch_size=1)
    here = streaming.StreamingDataset(local=str(local), shuffle=False, batch_size=1)
    assert len(remote) == len(here) > 0
    assert all(remote[i]["input_ids"].tolist() == here[i]["input_ids"].tolist() for i in range(len(here)))


def test_an_emulator_leaves_no_process_behind(tmp_path):
    """What the session fixtures rely on: the server listens while the block runs and is gone after it."""
    need_module("gcp_storage_emulator")
    with emulator("gcs", tmp_path) as server:
        host, port = server.url.removeprefix("http://").split(":")
        socket.create_connection((host, int(port)), timeout=5).close()
    assert server.proc.poll() is not None
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=1).close()


class _Killed(BaseException):
    """Stands for a kill -9 at one step of the publish."""


def _visible(root: str) -> dict[str, str]:
    """What a reader sees under ``root``: the objects but the hidden ones (staging folders, journal, lock)."""
    return {k: v for k, v in object_digests(root).items() if not k.startswith(".")}


def _replace_objects(source: str, target: str) -> None:
    """Make the objects under ``target`` those under ``source`` (a whole-folder restore on a bucket)."""
    from apache_beam.io.filesystems import FileSystems

    old = [m.path for m in FileSystems.match([target + "/**"])[0].metadata_list]
    if old:
        FileSystems.delete(old)
    paths = [m.path for m in FileSystems.match([source + "/**"])[0].metadata_list]
    FileSystems.copy(paths, [target + p[len(source) :] for p in paths])


def _reader_verdict(root: str, local: Path) -> tuple[str, dict[str, str]]:
    """Download ``root`` and read it as ``inspect --verify`` does: "refused" (no manifest) or "accepted"
    (every shard's size and sha256 as its manifest lists them, and every row valid), else the errors; and
    what a reader sees there (:func:`_visible`, from the same download)."""
    import hashlib

    from apache_beam.io.filesystems import FileSystems

    from bertprep.core import storage
    from bertprep.pipeline.shards.inspection import verify_shards

    shutil.rmtree(local, ignore_errors=True)
    visible = {}
    for meta in FileSystems.match([root + "/**"])[0].metadata_list:
        name = meta.path[len(root) :].lstrip("/")
        path = local / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileSystems.open(meta.path) as f:
            path.write_bytes(data := f.read())
        if not name.startswith("."):
            visible[name] = hashlib.sha256(data).hexdigest()
    try:
        storage.read_manifest(str(local))
    except FileNotFoundError:
        return "refused", visible
    errors = verify_shards(str(local))["errors"]
    return ("accepted" if not errors else f"errors: {errors[:3]}"), visible


@pytest.mark.slow
def test_a_kill_at_any_publish_step_on_gcs_leaves_a_whole_set_or_one_a_reader_refuses(corpus, gcs, tmp_path):
    """GCS has no rename: the storage layer copies then deletes. make-shards is cut at each rename, copy and
    delete of its publish in turn, the copy and the delete inside a rename included (the failed run's own
    clean-up skipped, as a kill -9 skips it): the folder then holds the old set, the new set, or no manifest
    (``inspect`` refuses it), never a mix; and the next run finishes the publish. The runs after the first
    reuse its pipeline output (``PipelineOutputReplayed``: 38 s -> 11 s)."""
    from bertprep.core import storage, storage_client
    from bertprep.pipeline.beam import run
    from bertprep.pipeline.shards import publish

    upload_folder(corpus, f"{gcs}/corpus")
    upload_folder(CORPUS_VOCAB.parent, f"{gcs}/vocab")
    vocab, out, saved = f"{gcs}/vocab/vocab.txt", f"{gcs}/out", f"{gcs}/saved"
    old_options = dict(eval_fraction=0.3, bucket_tokens=2_000)

    def make(output_dir: str, dupe_factor: int, overwrite: bool = False) -> None:
        config = _config(f"{gcs}/corpus/", vocab, output_dir, dict(old_options, overwrite=overwrite))
        config = dataclasses.replace(config, instance=dataclasses.replace(config.instance, dupe_factor=dupe_factor))
        run_make_shards(config, ONE_WORKER)

    make(out, 1)  # the old set; the new one has another dupe_factor, so every shard differs
    _replace_objects(out, saved)
    old_state = _visible(out)
    make(f"{gcs}/reference", 2)
    expected = {k: v for k, v in object_digests(f"{gcs}/reference").items() if not k.endswith("manifest.json")}
    # what the publish calls (storage's names) and what a rename on a store calls (storage_client's own)
    steps_of = {storage: ("rename", "delete", "remove_tree"), storage_client: ("copy", "delete")}
    real = {(module, name): getattr(module, name) for module, names in steps_of.items() for name in names}
    replayed = PipelineOutputReplayed(f"{gcs}/pipeline-output", _replace_objects)
    steps = 0
    while True:
        calls = {"n": 0}

        def counting(real, kill_at=steps, calls=calls):
            def step(*args, **kwargs):
                if publish.publishing():  # the steps after the journal is written (before it: the old set stays)
                    if calls["n"] == kill_at:
                        raise _Killed()
                    calls["n"] += 1
                return real(*args, **kwargs)

            return step

        with pytest.MonkeyPatch.context() as patch:  # (apart from the fixture's: its environment stays)
            for (module, name), function in real.items():
                patch.setattr(module, name, counting(function))
            patch.setattr(run, "_remove_failed_run", lambda *a, **k: None)  # a kill -9 cleans nothing
            replayed.patch(patch)
            try:
                make(out, 2, overwrite=True)
                killed = False
            except _Killed:
                killed = True
        if not killed:
            break  # every step has been cut once
        steps += 1
        verdict, state = _reader_verdict(out, tmp_path / "download")
        assert verdict in ("refused", "accepted"), f"killed at publish step {steps - 1}: {verdict}"
        if verdict == "accepted":  # a folder a reader accepts is a whole set, the old one or the new one
            new_state = {k: v for k, v in state.items() if not k.endswith("manifest.json")}
            assert state == old_state or new_state == expected, f"a mix after a kill at publish step {steps - 1}"
        with pytest.raises(MakeShardsError, match="already holds shards"):  # the next run, without --overwrite,
            make(out, 2)  # finishes the publish that was asked for, then refuses to write over its result
        now = {k: v for k, v in object_digests(out).items() if not k.endswith("manifest.json")}
        assert now == expected, f"killed at publish step {steps - 1}: the next run left {sorted(now)}"
        _replace_objects(saved, out)  # back to the old set for the next step
    assert steps >= 4


#: What the Dask cluster's workers have that a cloud machine would have of its own: credentials (the dummy
#: keys moto accepts; a GCS emulator needs none). No storage endpoint: that is the command's to send.
WORKER_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _worker_endpoints() -> dict[str, str]:
    """The storage endpoint variables set in a worker process (``client.run`` calls it in each)."""
    import os

    from bertprep.core.storage import ENDPOINT_VARIABLES

    return {name: os.environ[name] for name in ENDPOINT_VARIABLES if name in os.environ}


@pytest.fixture(scope="module")
def dask_cluster():
    """Two single-thread Dask worker processes that know nothing of the emulators (started before any test
    points the environment at one), with bertprep's pipeline modules imported (as a warm cluster has them)."""
    distributed = need_module("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            silence_logs=40,
            env=WORKER_ENVIRONMENT,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(lambda: __import__("bertprep.pipeline.beam.graph") and None)
        assert not any(client.run(_worker_endpoints).values())
        yield cluster, client


@pytest.mark.parametrize(
    ("store", "endpoint"),
    [("gcs", "environment"), ("s3", "environment"), ("s3", "--s3_endpoint_url")],
)
def test_make_shards_in_a_bucket_on_dask_gives_the_bytes_of_a_local_run(
    corpus, local_digests, request, monkeypatch, dask_cluster, store, endpoint
):
    """make-shards of a bucket's corpus into the bucket with ``--runner=DaskRunner`` on worker processes that
    were not started with the emulator's address: the command's setting reaches them (``STORAGE_EMULATOR_HOST``
    or ``AWS_ENDPOINT_URL_S3`` from its environment, or Beam's ``--s3_endpoint_url``), and the shards, vocab and
    manifests are those of the local runner."""
    cluster, client = dask_cluster
    bucket = request.getfixturevalue(store)  # gs://NAME or s3://NAME; this process's environment points at it
    upload_folder(corpus, f"{bucket}/corpus")
    upload_folder(CORPUS_VOCAB.parent, f"{bucket}/vocab")
    beam_args = ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}", "--dask_npartitions=2"]
    with monkeypatch.context() as patch:
        if endpoint != "environment":  # the endpoint as a Beam option only
            patch.delenv("AWS_ENDPOINT_URL_S3")
            beam_args.append(f"--s3_endpoint_url={request.getfixturevalue('s3_server').url}")
        got = _make(bucket, f"{bucket}/corpus/", f"{bucket}/vocab/vocab.txt", OPTIONS["default"], beam_args)
    assert got == local_digests["default"]
    if endpoint != "environment":  # it reached the workers as the option, not through their environment
        assert all("AWS_ENDPOINT_URL_S3" not in env for env in client.run(_worker_endpoints).values())


def test_make_shards_on_gcs_rides_out_an_outage_during_its_publish(corpus, local_digests, gcs_to_restart, monkeypatch):
    """The storage server goes away at the first move of make-shards' publish (the shards staged, the journal
    written) and is back a second later (restarted on its port, objects kept): gcsfs's retries, which the storage
    layer's publish rides on, carry it through, and the folder holds the local run's bytes."""
    import threading
    import time

    from bertprep.core import storage
    from bertprep.pipeline.shards import publish

    server, bucket = gcs_to_restart
    upload_folder(corpus, f"{bucket}/corpus")
    upload_folder(CORPUS_VOCAB.parent, f"{bucket}/vocab")
    real_rename, stopped, outages = storage.rename, threading.Event(), []

    def rename(*args, **kwargs):
        if publish.publishing() and not stopped.is_set():
            server.stop()
            outages.append(args[0])
            stopped.set()
        return real_rename(*args, **kwargs)  # sent while the server is down: only a retry can succeed

    monkeypatch.setattr(storage, "rename", rename)
    restarter = threading.Thread(target=lambda: stopped.wait(120) and not time.sleep(1.0) and server.restart())
    restarter.start()
    try:
        got = _make(bucket, f"{bucket}/corpus/", f"{bucket}/vocab/vocab.txt", OPTIONS["default"])
    finally:
        stopped.set()
        restarter.join()
    assert len(outages) == 1 and server.proc.poll() is None  # the restarted server took the publish
    assert got == local_digests["default"]
    assert not [name for name in object_digests(f"{bucket}/out") if name.startswith(".")]  # no journal, no staging


def _started_make_shards(corpus, out: str, env: dict) -> tuple[subprocess.Popen, list[str], threading.Event]:
    """``bertprep make-shards`` of ``corpus`` into ``out`` in a subprocess, its stderr lines collected; the event
    is set once it logs that its pipeline starts (its inputs found, its output checked)."""
    command = [sys.executable, "-m", "bertprep.cli.main", "make-shards", "-i", str(corpus), "--vocab",
               str(CORPUS_VOCAB), "-o", out, "--input-format", "bert", "--max-seq-length", "64", "--dupe-factor",
               "20", "--num-shards", "3", "--overwrite", *ONE_WORKER]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    lines, started = [], threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if " input files -> " in line:
                started.set()
        started.set()  # (ended before: the test's assertions say why)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines, started


@pytest.mark.slow  # about 20 s on 2 busy cores (two make-shards runs and a subprocess's start)
@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_make_shards_stops_in_one_line_when_its_store_goes_away(corpus, request, store, tmp_path):
    """The store goes away for good while make-shards writes to it: within the stated wait
    (``BERTPREP_STORE_TIMEOUT_S``, 1 s here, and a probe's second) one line names the store and the output folder,
    no traceback, exit status 1 (before: minutes of the clients' retries without a word, then a 260-line
    traceback). The earlier output is untouched, and the next run into the folder finishes and cleans up."""
    from bertprep.pipeline.beam.filesystems import STORE_TIMEOUT_ENV

    server, bucket = request.getfixturevalue("gcs_to_restart" if store == "gcs" else "s3_to_stop")
    out = f"{bucket}/out"
    _make(bucket, str(corpus), str(CORPUS_VOCAB), OPTIONS["default"])
    earlier = object_digests(out)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", STORE_TIMEOUT_ENV: "1"}
    proc, lines, started = _started_make_shards(corpus, out, env)
    try:
        assert started.wait(120) and proc.poll() is None, "\n".join(lines)
        server.stop()
        stopped = time.monotonic()
        assert proc.wait(timeout=60) == 1, "\n".join(lines)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
    after = "\n".join(lines[next(i for i, x in enumerate(lines) if " input files -> " in x) :])
    assert "Traceback" not in after, after
    assert lines[-1].startswith(f"Error: the store of {out} (127.0.0.1:") and "has not answered for 1 s" in lines[-1]
    assert "holds its earlier output" in lines[-1] and STORE_TIMEOUT_ENV in lines[-1]
    assert took < 1 + 10, took
    if store == "gcs":  # (moto keeps its objects in memory: a stopped S3 emulator has none to show)
        server.restart()
        assert {k: v for k, v in object_digests(out).items() if not k.startswith(".")} == earlier
        _make(bucket, str(corpus), str(CORPUS_VOCAB), dict(OPTIONS["default"], overwrite=True))
        assert not [name for name in object_digests(out) if name.startswith(".")]  # no staging, no journal left
