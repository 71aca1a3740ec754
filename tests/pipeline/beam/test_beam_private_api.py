"""Beam's private API that bertprep uses, named in one place: an upgrade of Beam that renames or changes any
of it fails here, by name, before a Dask run fails somewhere inside the adapter. setup.cfg admits only the
Beam versions these passed with (its bound); raise it together with this file."""

from __future__ import annotations

import configparser
from importlib.metadata import version
from pathlib import Path

from packaging.specifiers import SpecifierSet

from conftest import need_module

ROOT = Path(__file__).resolve().parents[3]

#: (module, private name) for every private Beam symbol ``pipeline/beam/dask_runner.py`` imports.
PRIVATE_IMPORTS = [
    ("apache_beam.runners.common", "_OutputHandler"),
    ("apache_beam.runners.dask.overrides", "_Create"),
    ("apache_beam.runners.dask.overrides", "_Flatten"),
    ("apache_beam.runners.dask.overrides", "_GroupByKeyOnly"),
    ("apache_beam.runners.dask.overrides", "_Reshuffle"),
]


def test_every_private_beam_class_the_dask_adapter_imports_is_there():
    need_module("dask")
    import importlib

    for module, name in PRIVATE_IMPORTS:
        assert hasattr(importlib.import_module(module), name), f"Beam {version('apache-beam')}: {module}.{name}"
    source = (ROOT / "pipeline" / "beam" / "dask_runner.py").read_text()
    for _, name in PRIVATE_IMPORTS:
        assert name in source  # the list is the adapter's, not a stale one


def test_the_credentials_cache_the_emulator_path_sets_is_there():
    """``filesystems._no_credentials_search`` records "no credentials" in Beam's private credentials cache when a GCS
    emulator is set (else Beam searches for Google's credentials for ~25 s first); it is guarded (a Beam without
    the cache searches as before), and this names the names it needs."""
    need_module("google.cloud.storage")
    from apache_beam.internal.gcp import auth

    cache = auth._Credentials
    for name in ("_credentials_lock", "_credentials_init", "_credentials"):
        assert hasattr(cache, name), f"Beam {version('apache-beam')}: auth._Credentials.{name}"
    assert "_Credentials" in (ROOT / "pipeline" / "beam" / "filesystems.py").read_text()


def test_the_output_handler_takes_the_arguments_the_adapter_passes():
    from apache_beam.runners.common import Receiver, _OutputHandler
    from apache_beam.transforms.window import GlobalWindows

    class Collect(Receiver):
        def __init__(self):
            self.values = []

        def receive(self, windowed_value):
            self.values.append(windowed_value.value)

    main = Collect()
    handler = _OutputHandler(  # the keyword arguments dask_runner._run_dofn passes (compiled: no signature)
        window_fn=GlobalWindows(),
        main_receivers=main,
        tagged_receivers={},
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    assert handler is not None and hasattr(handler, "handle_process_outputs")


def test_a_side_input_has_the_private_members_the_adapter_reads():
    import apache_beam as beam

    with beam.Pipeline() as pipeline:
        side = beam.pvalue.AsSingleton(pipeline | beam.Create([1]))
        assert callable(side._view_options) and isinstance(side._view_options(), dict)
        assert callable(side._window_mapping_fn)


def test_the_dask_options_kept_from_the_workers_are_found_by_their_names():
    """The Dask adapter sends the workers the run's Beam options but its own (``_dask_option_names``, read from
    ``DaskOptions._add_argparse_args``): ``PipelineOptions.from_dictionary`` makes ``--address`` of
    ``--dask_client_address``, a flag no parser knows (a warning per task)."""
    need_module("dask")
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam.dask_runner import _dask_option_names
    from bertprep.pipeline.beam.filesystems import worker_settings

    names = _dask_option_names()
    assert {"address", "timeout", "scheduler_file", "npartitions", "partition_size"} <= names
    options = PipelineOptions(["--dask_client_address=tcp://h:1", "--dask_npartitions=2", "--s3_region_name=r"])
    assert dict(worker_settings(options, runner_options=names).options) == {"s3_region_name": "r"}


def test_the_installed_beam_is_within_setup_cfgs_bounds():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    (requirement,) = [line.strip() for line in lines if line.strip().startswith("apache-beam")]
    bounds = SpecifierSet(requirement.removeprefix("apache-beam"))
    assert any(spec.operator == "<" for spec in bounds)  # an upper bound: the private API may change
    assert version("apache-beam") in bounds


def test_beams_s3_operations_share_one_boto3_client_per_process_and_settings(monkeypatch):
    """``filesystems._share_s3_clients``: every operation of Beam's S3 file system makes an ``S3IO`` and so a
    ``boto3_client.Client``, which made a new boto3 session and client each time (0.2-0.7 s: most of an s3://
    run). After ``use_filesystem_options`` they share the first one's boto3 client, and other settings (the
    ``--s3_*`` options, the ``AWS_*`` environment) get their own. Fails when Beam renames the class or stops
    making its client in ``__init__`` (the guard then leaves Beam as it was)."""
    need_module("boto3")
    from apache_beam.io.aws import s3io
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam import filesystems

    for name, value in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "x"}.items():
        monkeypatch.setenv(name, value)
    filesystems.use_filesystem_options(PipelineOptions([]))  # (as make-shards does; it installs the sharing)
    options = PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:9"])
    first, second = (
        s3io.S3IO(options=options),
        s3io.S3IO(options=PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:9"])),
    )
    assert first.client is not second.client  # each its own wrapper (its own download state) ...
    assert first.client.client is second.client.client  # ... around one boto3 client
    assert first.client.client.meta.endpoint_url == "http://127.0.0.1:9"
    other_endpoint = s3io.S3IO(options=PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:10"]))
    assert other_endpoint.client.client.meta.endpoint_url == "http://127.0.0.1:10"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "other")
    other_keys = s3io.S3IO(options=options)
    assert other_keys.client.client is not first.client.client
    assert other_keys.client.client._request_signer._credentials.access_key == "other"


def test_beams_gcs_operations_share_one_client_per_thread_options_and_environment(gcs, monkeypatch):
    """``filesystems._share_gcs_clients``: Beam's GCS file system made a ``GcsIO`` (a new storage client, HTTP
    session and options parse) for every operation: 2,060 in the GCS publish-kill test. After
    ``use_filesystem_options`` (the ``gcs`` fixture calls it, as make-shards does) one thread's operations
    share one, against the real emulator; another thread, another options object or another
    ``STORAGE_EMULATOR_HOST`` gets its own (batches are a client's state; a fork gets its own by pid). Fails
    when Beam renames ``GCSFileSystem._gcsIO`` (the guard then leaves Beam as it was)."""
    import threading

    from apache_beam.io.filesystems import FileSystems
    from apache_beam.io.gcp import gcsfilesystem, gcsio

    made = []
    real_init = gcsio.GcsIO.__init__

    def counted(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(gcsio.GcsIO, "__init__", counted)
    with FileSystems.create(f"{gcs}/a.txt") as out:
        out.write(b"x")
    for _ in range(5):
        assert FileSystems.exists(f"{gcs}/a.txt") and not FileSystems.exists(f"{gcs}/b.txt")
    assert len(made) == 1 and getattr(gcsfilesystem.GCSFileSystem._gcsIO, "_bertprep_shared", False)
    other_thread = threading.Thread(target=lambda: FileSystems.exists(f"{gcs}/a.txt"))
    other_thread.start()
    other_thread.join()
    assert len(made) == 2
    fs = gcsfilesystem.GCSFileSystem(pipeline_options=FileSystems._pipeline_options)
    assert fs._gcsIO() is made[0]
    from apache_beam.options.pipeline_options import PipelineOptions

    assert gcsfilesystem.GCSFileSystem(pipeline_options=PipelineOptions([]))._gcsIO() is not made[0]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    assert fs._gcsIO() is not made[0] and len(made) == 4
