"""make-shards on Google Cloud Dataflow, proved offline.

- The Dataflow job is built and validated without submitting it (``bertprep.pipeline.beam.dataflow.dry_run``:
  Beam's ``--dry_run`` path of ``DataflowRunner``): option validation, the Runner API round trip with
  every DoFn pickled, Dataflow's graph checks, the worker environment, and the stager building bertprep's
  sdist from ``--setup_file``. A socket guard fails the test on any network access.
- The packaging path: the sdist the stager built (``workflow.tar.gz``, what Dataflow workers
  ``pip install``) installs offline, declares every third-party module bertprep's pipeline imports, holds
  the demo corpus, and a Python that sees bertprep *only* through that install can unpickle the DoFns of
  the job graph (what a worker does first).
- Bad options fail at once with the option named, before anything is built.

Needs Beam's Google Cloud extras (``apache-beam[gcp]``); skipped with the reason when they are absent.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import json
import pickle
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest

from conftest import need_module

need_module("apache_beam.runners.dataflow.internal.apiclient")

import apache_beam as beam  # noqa: E402
from apache_beam.internal import pickler  # noqa: E402
from apache_beam.portability import common_urns, python_urns  # noqa: E402
from apache_beam.portability.api import beam_runner_api_pb2  # noqa: E402
from apache_beam.runners import pipeline_context  # noqa: E402

from bertprep.pipeline.beam import dataflow  # noqa: E402
from bertprep.pipeline.config import InstanceConfig, ShardsConfig  # noqa: E402
from bertprep.pipeline.masking.config import MaskingConfig  # noqa: E402
from bertprep.pipeline.text.tokenization import load_vocab  # noqa: E402
from conftest import FIXTURES, REPO_ROOT  # noqa: E402

REPO_ROOT = REPO_ROOT
FIXTURES = FIXTURES / "pipeline"
BUCKET = "gs://bertprep-test"
FILES = [f"{BUCKET}/corpus/a.txt", f"{BUCKET}/corpus/b.txt"]


def _options(args: list[str]) -> beam.options.pipeline_options.PipelineOptions:
    """The run's Beam options, as ``run.run_make_shards`` hands them to ``dataflow``."""
    return beam.options.pipeline_options.PipelineOptions(args)


DATAFLOW_ARGS = [
    "--runner=DataflowRunner",
    "--project=bertprep-test",
    "--region=us-central1",
    f"--temp_location={BUCKET}/tmp",
]
#: Imported by bertprep.pipeline only for an optional feature, so not in install_requires:
#: blingfire backs ``--segmenter blingfire`` (see segmentation.py).
# Imported only when asked for (--segmenter blingfire, --word-segmenter jieba / kiwi), with an error naming the
# package to install when it is missing.
# (extras, imported where used: huggingface_hub resolves a Hub id given as --vocab, on the launching machine)
OPTIONAL_IMPORTS = {
    *("blingfire", "jieba", "kiwipiepy", "dask", "distributed", "huggingface_hub", "boto3", "botocore", "fsspec"),
    *("streaming", "megatron"),
}
# (boto3, botocore: only for s3:// paths, from the cloud extra: core/storage.py; fsspec: core/storage.py's client
# for the commands' own reads of a bucket, from the gcp and cloud extras, imported where it is used; streaming,
# megatron: --output-format mds | megatron, the mds and megatron extras, which a worker needs only for those)


def _config(**kw) -> ShardsConfig:
    base = dict(
        inputs=(f"{BUCKET}/corpus/",),
        vocab=f"{BUCKET}/vocab.txt",
        output_dir=f"{BUCKET}/shards",
        input_format="bert",
        instance=InstanceConfig(max_seq_length=64, mlm=MaskingConfig(max_predictions_per_seq=10)),
    )
    base.update(kw)
    return ShardsConfig(**base)


def _refuse_network(*args, **kwargs):
    raise AssertionError(f"network access attempted: {args!r}")


@pytest.fixture(scope="module")
def no_network(no_google_credentials):
    """Any attempt to resolve a host name or open a connection fails the test at once (no hang); Beam does
    not search for Google's credentials (``no_google_credentials``: there are none to find offline)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "getaddrinfo", _refuse_network)
        mp.setattr(socket, "create_connection", _refuse_network)
        mp.setattr(socket.socket, "connect", _refuse_network)
        yield


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory) -> Path:
    """The files ``python setup.py sdist`` reads (setup.py, setup.cfg, top-level files, the mapped package
    folders), copied so that building the sdist never writes into the shared checkout."""
    dst = tmp_path_factory.mktemp("project")
    for path in REPO_ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, dst / path.name)
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    for line in cfg["options"]["package_dir"].strip().splitlines():
        folder = line.split("=", 1)[1].strip()
        shutil.copytree(REPO_ROOT / folder, dst / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dst


@pytest.fixture(scope="module")
def job(project_copy, no_network) -> dataflow.DataflowDryRun:
    """The global-scope job, with --setup_file, a worker machine type and an autoscaling cap."""
    result = dataflow.dry_run(
        _config(),
        _options(
            DATAFLOW_ARGS
            + [
                f"--setup_file={project_copy / 'setup.py'}",
                "--machine_type=n2-highmem-8",
                "--max_num_workers=50",
                "--disk_size_gb=100",
            ]
        ),
        files=FILES,
        vocab=load_vocab(str(FIXTURES / "vocab.txt")),
    )
    yield result
    if result.staging_dir:
        shutil.rmtree(result.staging_dir, ignore_errors=True)


def _pickled_dofns(pipeline_proto) -> list[bytes]:
    payloads = []
    for transform in pipeline_proto.components.transforms.values():
        if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
            do_fn = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload).do_fn
            if do_fn.urn == python_urns.PICKLED_DOFN_INFO:
                payloads.append(do_fn.payload)
    return payloads


def _bertprep_dofn_classes(payloads: list[bytes]) -> set[str]:
    names = set()
    for payload in payloads:
        fn = pickler.loads(payload)[0]
        if type(fn).__module__.startswith("bertprep."):
            names.add(type(fn).__name__)
    return names


def test_dry_run_builds_and_validates_the_job_without_submitting(job):
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job.job_name)  # Dataflow's job name rule
    assert job.job["type"] == "JOB_TYPE_BATCH"
    env = job.job["environment"]
    pool = env["workerPools"][0]
    assert pool["machineType"] == "n2-highmem-8"
    assert pool["autoscalingSettings"]["maxNumWorkers"] == 50
    assert pool["diskSizeGb"] == 100
    major, minor = sys.version_info[:2]
    assert pool["workerHarnessContainerImage"].endswith(f"beam_python{major}.{minor}_sdk:{beam.__version__}")
    assert "use_runner_v2" in env["experiments"]  # Beam 2.77 adds it: Runner v2 is the only mode
    names = set(job.transform_names())
    assert {
        "ReadDocuments/ReadDocumentsFn",
        "TokenizeDocuments/TokenizeDocumentFn",
        "CreateTrainingInstances/GroupByBucket",
        "CreateTrainingInstances/CreateInstancesFn",
        "WriteArrowShards/WriteShardFn",
        "WriteArrowShards/WriteManifestFn",
    } <= names
    summary = job.summary()
    assert "NOT submitted" in summary and "n2-highmem-8" in summary and "workflow.tar.gz" in summary


def test_bucket_shuffle_uses_a_deterministic_key_coder(job):
    """Dataflow groups by the encoded key bytes, so the bucket key's coder (as the workers will decode it
    from the job graph) must be deterministic; Beam picks one for the untyped int keys."""
    assert "CreateTrainingInstances/GroupByBucket" in job.group_by_keys()
    components = job.pipeline_proto.components
    (gbk,) = [t for t in components.transforms.values() if t.unique_name == "CreateTrainingInstances/GroupByBucket"]
    assert gbk.spec.urn == common_urns.primitives.GROUP_BY_KEY.urn
    kv_coder = pipeline_context.PipelineContext(components).coders.get_by_id(
        components.pcollections[next(iter(gbk.inputs.values()))].coder_id
    )
    key_coder = kv_coder.key_coder()
    assert key_coder.is_deterministic()
    for bucket in (0, 1, 2**31 - 1, 2**40 + 7):
        assert key_coder.decode(key_coder.encode(bucket)) == bucket


def test_file_pairing_scope_has_no_document_shuffle(no_network):
    result = dataflow.dry_run(
        _config(pairing_scope="file"),
        _options(DATAFLOW_ARGS + ["--sdk_container_image=gcr.io/bertprep-test/bertprep-worker:latest"]),
        files=FILES,
        vocab=load_vocab(str(FIXTURES / "vocab.txt")),
    )
    names = set(result.transform_names())
    assert "ProcessFilesStreaming/ProcessFileStreamingFn" in names
    assert not any(n.startswith("CreateTrainingInstances") for n in names)
    # The only shuffles left move file names and shard plans, never documents.
    assert result.group_by_keys() and all(
        g.startswith(("ListInputFiles/", "WriteArrowShards/")) for g in result.group_by_keys()
    )
    pool = result.job["environment"]["workerPools"][0]
    assert pool["workerHarnessContainerImage"] == "gcr.io/bertprep-test/bertprep-worker:latest"
    assert "workflow.tar.gz" not in result.staged_files  # the image already holds bertprep
    if result.staging_dir:
        shutil.rmtree(result.staging_dir, ignore_errors=True)


@pytest.mark.slow
def test_workers_get_bertprep_from_the_staged_sdist(job, tmp_path):
    """What a worker does with --setup_file: pip install workflow.tar.gz, then unpickle the DoFns."""
    assert "workflow.tar.gz" in job.staged_files
    (sdist,) = Path(job.staging_dir).glob("bertprep-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {Path(*Path(m).parts[1:]).as_posix() for m in tar.getnames()}
    assert {
        "setup.py",
        "setup.cfg",
        "pipeline/beam/transforms.py",
        "pipeline/beam/run.py",
        "pipeline/readers/files.py",
        "pipeline/demo_corpus/README.md",
    } <= members

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(sdist),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )

    # Every third-party module bertprep.pipeline and the ground floor it stands on (bertprep.core) import is a
    # declared (unconditional) dependency.
    (dist_info,) = target.glob("bertprep-*.dist-info")
    declared = {
        re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0].lower().replace("_", "-")
        for r in importlib.metadata.PathDistribution(dist_info).requires or []
        if "extra ==" not in r
    }
    imported = set()
    for source in [*(target / "bertprep" / "pipeline").rglob("*.py"), *(target / "bertprep" / "core").rglob("*.py")]:
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"__future__", "bertprep"} - OPTIONAL_IMPORTS
    dists = importlib.metadata.packages_distributions()
    undeclared = {m for m in third_party if not any(d.lower().replace("_", "-") in declared for d in dists.get(m, [m]))}
    assert "apache_beam" in third_party and not undeclared, f"imported but not in install_requires: {undeclared}"

    # A Python that cannot see the editable checkout (-S: no .pth files; -E: no PYTHONPATH) finds bertprep
    # only in the install.
    payload_file = tmp_path / "dofns.pickle"
    payload_file.write_bytes(pickle.dumps(_pickled_dofns(job.pipeline_proto)))
    purelib = sysconfig.get_paths()["purelib"]
    worker = (
        "import json, os, pickle, sys\n"
        "target, purelib, payload_file = sys.argv[1:]\n"
        "sys.path[:0] = [target] if target else []\n"
        "sys.path.append(purelib)\n"
        "import bertprep.pipeline.beam.graph\n"
        "from bertprep.pipeline import demo_corpus_dir\n"
        "from apache_beam.internal import pickler\n"
        "pickler.set_library('cloudpickle')\n"
        "dofns = {}\n"
        "for payload in pickle.loads(open(payload_file, 'rb').read()):\n"
        "    fn = pickler.loads(payload)[0]\n"
        "    if type(fn).__module__.startswith('bertprep.'):\n"
        "        dofns[type(fn).__name__] = sys.modules[type(fn).__module__].__file__\n"
        "print(json.dumps({'package': bertprep.pipeline.__file__, 'demo': sorted(os.listdir(demo_corpus_dir())),\n"
        "                  'dofns': dofns}))\n"
    )
    control = subprocess.run(
        [sys.executable, "-E", "-S", "-c", worker, "", purelib, str(payload_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert control.returncode != 0 and "No module named 'bertprep'" in control.stderr  # the isolation works
    run = subprocess.run(
        [sys.executable, "-E", "-S", "-c", worker, str(target), purelib, str(payload_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(seen["package"]).is_relative_to(target)
    source_demo = sorted(p.name for p in (REPO_ROOT / "pipeline" / "demo_corpus").iterdir() if p.is_file())
    assert seen["demo"] == source_demo and any(n.endswith(".txt") for n in seen["demo"])
    expected = _bertprep_dofn_classes(_pickled_dofns(job.pipeline_proto))  # unpickled here, from the checkout
    assert {"ReadDocumentsFn", "TokenizeDocumentFn", "CreateInstancesFn", "WriteShardFn", "WriteManifestFn"} <= expected
    assert set(seen["dofns"]) == expected
    assert all(Path(f).is_relative_to(target) for f in seen["dofns"].values())


@pytest.mark.parametrize(
    "args, config, message",
    [
        (["--project=bertprep-test"], {}, r"--region is required"),
        (["--region=us-central1"], {}, r"--project is required"),
        (
            ["--project=bertprep-test", "--region=us-central1", "--temp_location=/tmp/beam"],
            {},
            r"--temp_location must be a gs://bucket/path .*got '/tmp/beam'",
        ),
        (  # Beam's bucket-naming rule (no capitals), with Beam's own reason
            ["--project=bertprep-test", "--region=us-central1", "--temp_location=gs://MY_BUCKET/tmp"],
            {},
            r"got 'gs://MY_BUCKET/tmp'.*Beam: Invalid GCS bucket \(gs://MY_BUCKET/tmp\).*bucketnaming",
        ),
        ([], {"output_dir": "/data/shards"}, r"--output-dir '/data/shards' is a local path"),
        ([], {"vocab": "vocab.txt"}, r"--vocab 'vocab.txt' is a local path"),
        ([], {"inputs": ("corpus/*.txt",)}, r"input 'corpus/\*\.txt' is a local path"),
    ],
)
def test_bad_dataflow_options_are_named_before_anything_runs(no_network, args, config, message):
    base = [] if args else DATAFLOW_ARGS
    with pytest.raises(ValueError, match=message):
        dataflow.dry_run(
            _config(**config),
            _options(["--runner=DataflowRunner"] + base + args + ["--sdk_container_image=gcr.io/bertprep-test/worker"]),
            files=FILES,
            vocab=load_vocab(str(FIXTURES / "vocab.txt")),
        )


def test_every_problem_is_listed_at_once_and_bertprep_must_be_shipped(no_network):
    with pytest.raises(ValueError) as err:
        dataflow.check_dataflow_options(
            beam.options.pipeline_options.PipelineOptions(["--runner=DataflowRunner"]),
            _config(output_dir="out", vocab="vocab.txt"),
        )
    text = str(err.value)
    for expected in (
        "--project",
        "--region",
        "--temp_location",
        "--output-dir 'out'",
        "--vocab 'vocab.txt'",
        "--setup_file=./setup.py",
    ):
        assert expected in text
    assert text.count("\n  - ") == 6


def test_dry_run_needs_the_dataflow_runner():
    with pytest.raises(ValueError, match="--runner=DataflowRunner"):
        dataflow.dry_run(
            _config(), _options(["--runner=FlinkRunner"]), files=FILES, vocab=load_vocab(str(FIXTURES / "vocab.txt"))
        )


def test_default_setup_file_is_the_checkouts():
    from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

    def setup_file_of(args):
        return dataflow.with_default_setup_file(PipelineOptions(args)).view_as(SetupOptions).setup_file

    from_checkout = Path(dataflow.__file__).resolve().parent == REPO_ROOT / "pipeline"
    setup_file = dataflow.source_setup_file()
    assert setup_file == (str(REPO_ROOT / "setup.py") if from_checkout else None)
    assert setup_file_of(DATAFLOW_ARGS) == (setup_file if from_checkout else None)
    shipped = DATAFLOW_ARGS + ["--extra_package=dist/bertprep-0.1.0.tar.gz"]
    assert setup_file_of(shipped) is None
    assert setup_file_of(["--runner=FlinkRunner"]) is None
