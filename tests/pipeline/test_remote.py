"""core.storage's probe (and pipeline.beam.filesystems, Beam's side): a gs:// or s3:// path that cannot work
is refused in seconds, at the endpoint the client library will use (the cloud's, or an emulator's)."""

from __future__ import annotations

import time

import pytest

from bertprep.core import storage
from bertprep.pipeline.beam import filesystems
from conftest import need_module


@pytest.fixture(autouse=True)
def fresh_probes():
    storage._reachable.cache_clear()
    storage._bucket_exists.cache_clear()
    yield
    storage._reachable.cache_clear()
    storage._bucket_exists.cache_clear()


@pytest.fixture
def no_network(monkeypatch):
    """Every connection attempt waits out its timeout (as a dropped SYN does); a real unroutable address is no
    good here, since a sandbox's proxy may accept any connection."""

    def silent(address, timeout=None):
        time.sleep(timeout)
        raise storage.socket.timeout("timed out")

    monkeypatch.setattr(storage.socket, "create_connection", silent)


@pytest.fixture
def gcs_installed(monkeypatch):
    from apache_beam.io.filesystems import FileSystems

    monkeypatch.setattr(FileSystems, "get_filesystem", staticmethod(lambda path: object()))


def test_local_paths_are_not_probed(monkeypatch):
    monkeypatch.setattr(storage.socket, "create_connection", lambda *a, **k: pytest.fail("probed a local path"))
    storage.check_remote_path("/data/corpus.txt", "--output-dir")


def test_a_scheme_without_filesystem_names_the_extra(monkeypatch):
    from apache_beam.io.filesystems import FileSystems

    def no_filesystem(path):  # as Beam answers without its gcp extra (installed here by make)
        raise ValueError(
            f"Unable to get filesystem from specified path, please use the correct path or ensure the "
            f"required dependency is installed, e.g., pip install apache-beam[gcp]. Path specified: {path}"
        )

    monkeypatch.setattr(FileSystems, "get_filesystem", staticmethod(no_filesystem))
    with pytest.raises(storage.RemotePathError, match=r"--output-dir gs://b/x: no filesystem for gs://.*apache-beam"):
        storage.check_remote_path("gs://b/x", "--output-dir", clients=("beam",))


def test_inputs_and_vocabs_read_through_beam_are_refused_alike_before_any_read(monkeypatch):
    """make-shards' inputs and its vocab go through Beam's FileSystems: a web URL, or a remote path without its
    Beam file system, is one line naming the option's role, the same check for both."""
    from apache_beam.io.filesystems import FileSystems

    from bertprep.core.errors import VocabError
    from bertprep.pipeline import readers
    from bertprep.pipeline.text.tokenization import load_vocab

    def no_filesystem(path):
        raise ValueError(f"Unable to get filesystem from specified path. Path specified: {path}")

    monkeypatch.setattr(FileSystems, "get_filesystem", staticmethod(no_filesystem))
    url = "https://example.com/corpus.txt"
    assert storage.beam_read_refusal("/data/corpus.txt", "input") is None
    assert storage.beam_read_refusal(url, "input").startswith(f"input {url}: URLs are not supported; download it")
    assert storage.beam_read_refusal("gs://b/x", "vocab").startswith("vocab gs://b/x: no filesystem for gs://")
    with pytest.raises(readers.InputError) as err:
        readers.expand_inputs([url])
    assert str(err.value) == storage.beam_read_refusal(url, "input")
    with pytest.raises(readers.InputError) as err:
        readers.expand_inputs(["gs://b/corpus/*.txt"])
    assert str(err.value) == storage.beam_read_refusal("gs://b/corpus/*.txt", "input")
    with pytest.raises(VocabError) as err:
        load_vocab("gs://b/vocab.txt")
    assert str(err.value) == storage.beam_read_refusal("gs://b/vocab.txt", "vocab")


def test_make_shards_output_in_a_bucket_needs_the_layers_client_too(gcs_installed, monkeypatch):
    """make-shards' pipeline writes its output through Beam's client, its driver (staging, publish, clean-up)
    through the storage layer's fsspec: without gcsfs the run is refused in one line before any work."""
    import fsspec

    def not_installed(protocol):  # as fsspec answers without gcsfs
        raise ImportError("Install gcsfs to access Google Storage")

    monkeypatch.setattr(fsspec, "get_filesystem_class", not_installed)
    with pytest.raises(
        storage.RemotePathError, match=r"^--output-dir gs://b/x: no filesystem for gs://.*bertprep\[cloud\]"
    ):
        filesystems.check_beam_path("gs://b/x", "--output-dir")


def test_no_credentials_is_refused_at_once(gcs_installed, no_network, monkeypatch, tmp_path):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    start = time.monotonic()
    with pytest.raises(storage.RemotePathError, match=r"no Google Cloud credentials found.*gcloud auth"):
        storage.check_remote_path("gs://b/x", "--output-dir", clients=("beam",), timeout=0.5)
    assert time.monotonic() - start < 3


def test_an_unreachable_endpoint_is_refused_within_the_timeout(gcs_installed, no_network, monkeypatch, tmp_path):
    """Without network the client retried for about 112 s; the probe gives up after its timeout."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    start = time.monotonic()
    with pytest.raises(storage.RemotePathError) as err:
        storage.check_remote_path("gs://b/shards", "--output-dir", clients=("beam",), timeout=0.5)
    assert time.monotonic() - start < 3
    message = str(err.value)
    assert message.startswith(
        "--output-dir gs://b/shards: cannot reach storage.googleapis.com (no answer within 0.5 s)"
    )
    assert "network" in message


def test_an_emulator_is_probed_instead_of_google_and_needs_no_credentials(gcs_installed, monkeypatch, tmp_path):
    """google-cloud-storage talks to STORAGE_EMULATOR_HOST, anonymously: the probe follows it (a stopped
    emulator is named with what to do), and asks for no credentials."""
    from cloud_factory import free_port

    port = free_port()  # nothing listens there
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setattr(storage, "_gcs_credentials_found", lambda timeout: pytest.fail("asked for credentials"))
    assert storage.storage_endpoint("gs") == (("127.0.0.1", port), True)
    with pytest.raises(storage.RemotePathError) as err:
        storage.check_remote_path("gs://b/shards", "--output-dir", clients=("beam",), timeout=0.5)
    assert str(err.value).startswith(f"--output-dir gs://b/shards: cannot reach 127.0.0.1:{port} (")
    assert "emulator or endpoint is running" in str(err.value)


def test_s3_endpoint_and_credentials(monkeypatch, tmp_path):
    need_module("apache_beam.io.aws.s3filesystem")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://minio.example:9000")
    assert storage.storage_endpoint("s3") == (("minio.example", 9000), True)
    storage.set_s3_endpoint_url("http://127.0.0.1:9")  # Beam's --s3_endpoint_url wins
    try:
        assert storage.storage_endpoint("s3") == (("127.0.0.1", 9), True)
    finally:
        storage.set_s3_endpoint_url(None)
    with pytest.raises(storage.RemotePathError, match=r"^-i s3://b/x: no AWS credentials found .*aws configure"):
        storage.check_remote_path("s3://b/x", "-i", clients=("beam",), timeout=0.5)


def test_an_s3_endpoint_of_the_aws_config_file_is_the_one_probed(monkeypatch, tmp_path):
    """An S3-compatible store named only in the AWS config file (``endpoint_url``, which boto3 and s3fs
    honour) is what the probe asks; before, the probe asked s3.amazonaws.com and refused a path the client
    would have reached. AWS's own endpoints stay "not custom"."""
    need_module("botocore")
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config"
    config.write_text("[default]\nendpoint_url = http://minio.internal:9000\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    storage._configured_s3_endpoint.cache_clear()
    try:
        assert storage.storage_endpoint("s3") == (("minio.internal", 9000), True)
        config.write_text("[default]\nregion = eu-west-1\n")
        storage._configured_s3_endpoint.cache_clear()
        assert storage.storage_endpoint("s3") == (("s3.amazonaws.com", 443), False)
    finally:
        storage._configured_s3_endpoint.cache_clear()


def test_with_an_emulator_beam_does_not_search_for_credentials(monkeypatch):
    """Beam searched for Google's default credentials for about 25 s (four retries, a traceback each) before
    connecting anonymously, which the storage client does with an emulator anyway."""
    auth = need_module("apache_beam.internal.gcp.auth")
    from apache_beam.options.pipeline_options import PipelineOptions

    monkeypatch.setattr(auth._Credentials, "_credentials_init", False)
    monkeypatch.setattr(auth._Credentials, "_credentials", None)
    monkeypatch.setattr(
        auth._Credentials, "_get_service_credentials", staticmethod(lambda options: pytest.fail("searched"))
    )
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    filesystems.use_filesystem_options(PipelineOptions([]))
    assert auth.get_service_credentials(PipelineOptions([])) is None


def test_a_worker_takes_each_runs_store_settings_and_gives_back_its_own(monkeypatch):
    """What the Dask adapter sends each task (``worker_settings``) and what a worker does with it
    (``apply_worker_settings``): the command's Beam options but the runner's, and its endpoint variables, never
    its credentials; a later run that sets no endpoint finds the worker's own again, and Beam searches for
    Google's credentials again after an emulator's run."""
    auth = need_module("apache_beam.internal.gcp.auth")
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    monkeypatch.setattr(auth._Credentials, "_credentials_init", False)
    monkeypatch.setattr(auth._Credentials, "_credentials", None)
    monkeypatch.setattr(FileSystems, "_pipeline_options", None)
    monkeypatch.setattr(storage, "_S3_ENDPOINT_URL", [None])
    monkeypatch.setattr(filesystems, "_APPLIED", [None])
    monkeypatch.setattr(filesystems, "_OWN_ENDPOINTS", {})
    for name in storage.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    # the command's side
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9023")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the-secret")
    options = PipelineOptions(["--s3_region_name=eu-west-1", "--dask_client_address=tcp://h:1"])
    emulator_run = filesystems.worker_settings(options, runner_options={"address"})
    assert dict(emulator_run.options) == {"s3_region_name": "eu-west-1"}
    assert dict(emulator_run.environment) == {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9023"}
    assert "the-secret" not in repr(emulator_run)

    # a worker with an S3 endpoint of its own
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://worker-own:9000")
    filesystems.apply_worker_settings(emulator_run)
    assert storage.os.environ["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:9023"
    assert storage.os.environ["AWS_ENDPOINT_URL_S3"] == "http://worker-own:9000"
    assert FileSystems._pipeline_options.view_as(S3Options).s3_region_name == "eu-west-1"
    assert auth._Credentials._credentials_init  # "none found" recorded: no 25 s search against an emulator
    filesystems.apply_worker_settings(filesystems.WorkerSettings((), ()))  # then a run on the cloud's store
    assert "STORAGE_EMULATOR_HOST" not in storage.os.environ
    assert storage.os.environ["AWS_ENDPOINT_URL_S3"] == "http://worker-own:9000"
    assert FileSystems._pipeline_options.view_as(S3Options).s3_region_name is None
    assert not auth._Credentials._credentials_init  # Beam searches for the cloud's credentials again


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_a_bucket_that_does_not_exist_is_one_line(request, store):
    """Against the emulators: the missing bucket is named with the command that creates it (Beam's own error
    was a nested BeamIOError of the listing); an existing bucket passes."""
    bucket = request.getfixturevalue(store)  # gs://NAME or s3://NAME, created
    scheme = bucket.split("://")[0]
    storage.check_remote_path(f"{bucket}/out", "--output-dir")
    with pytest.raises(storage.RemotePathError) as err:
        storage.check_remote_path(f"{scheme}://no-such-bucket-here/out", "--output-dir")
    assert str(err.value).startswith(f"--output-dir {scheme}://no-such-bucket-here/out: the bucket no-such-bucket-here")
    assert ("gcloud storage buckets create" if scheme == "gs" else "aws s3 mb") in str(err.value)
