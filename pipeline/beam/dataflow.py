"""Google Cloud Dataflow support for ``make-shards``: option checks and an offline dry run.

``make-shards`` runs on Dataflow unchanged (``--runner=DataflowRunner``); this module adds what a user needs
before paying for workers:

- :func:`check_dataflow_options`: the mistakes that otherwise surface minutes into a job, or never (a local
  ``--output-dir`` written to a worker's disk and lost, workers without bertprep installed, a
  ``--temp_location`` that is not ``gs://``, for which Beam would try to create a default bucket over the
  network), reported at once with what to do.
- :func:`dry_run`: builds the Dataflow job exactly as a submission would, without submitting it. It uses
  Beam's own ``--dry_run`` path (``apache_beam.options.pipeline_options.TestOptions.dry_run``: in Beam 2.77
  ``DataflowRunner.run_pipeline`` returns right after building the job), which runs everything a submission
  runs locally: Beam's ``PipelineOptionsValidator`` (project, job name, ``gs://`` temp/staging paths), the
  Runner API round trip of the graph (``Pipeline.to_runner_api``/``from_runner_api``; every DoFn pickled),
  Dataflow's graph rewrites and ``validate_pipeline_graph`` (GroupByKey coders: deterministic keys), and
  the stager (``--setup_file`` -> ``python setup.py sdist`` into a temporary folder, the package the
  workers ``pip install``). The job's worker environment (machine type, autoscaling, container image,
  experiments) is then described with Beam's ``apiclient.Environment``, as ``create_job_description``
  does before it uploads. Nothing is uploaded and no Google API is called; with ``files`` and ``vocab``
  given, ``gs://`` inputs are not even listed.

Needs the Google Cloud extras of Beam (``pip install 'bertprep[gcp]'``, i.e. ``apache-beam[gcp]``); the
imports are lazy, so this module imports without them and raises :class:`DataflowUnavailable` when used.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
    WorkerOptions,
)

from bertprep.core import storage
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.text.tokenization import Vocab

log = logging.getLogger(__name__)

#: Runner names (``--runner``) that submit to the Dataflow service.
DATAFLOW_RUNNERS = ("DataflowRunner", "TestDataflowRunner")


class DataflowUnavailable(ImportError):
    """Beam's Dataflow runner cannot be imported (the ``apache-beam[gcp]`` extras are not installed)."""


def is_dataflow_runner(options: PipelineOptions) -> bool:
    """True when ``--runner`` names the Dataflow runner (``DataflowRunner``, ``dataflow``, or its dotted path)."""
    runner = options.view_as(StandardOptions).runner
    if not runner or not isinstance(runner, str):
        return False
    name = runner.rsplit(".", 1)[-1].lower()
    return name in {r.lower() for r in DATAFLOW_RUNNERS} or name + "runner" in {r.lower() for r in DATAFLOW_RUNNERS}


def source_setup_file() -> str | None:
    """The ``setup.py`` of the bertprep source checkout this code runs from, or None.

    ``--setup_file`` must point at it so that Beam builds bertprep's sdist and the workers install it. None
    when bertprep was installed from a wheel or sdist (there is no ``setup.py`` beside the package then):
    use ``--extra_package`` with a bertprep sdist/wheel or a container image with bertprep installed.
    """
    root = Path(__file__).resolve().parent.parent
    setup_py, setup_cfg = root / "setup.py", root / "setup.cfg"
    if setup_py.is_file() and setup_cfg.is_file() and "name = bertprep" in setup_cfg.read_text(encoding="utf-8"):
        return str(setup_py)
    return None


def _ships_bertprep(options: PipelineOptions) -> bool:
    setup = options.view_as(SetupOptions)
    return bool(setup.setup_file or setup.extra_packages or options.view_as(WorkerOptions).sdk_container_image)


def with_default_setup_file(options: PipelineOptions) -> PipelineOptions:
    """``options`` (changed in place, and returned) with ``--setup_file=<checkout>/setup.py`` for a Dataflow run
    that ships no bertprep.

    Set only when the runner is Dataflow, none of ``--setup_file``, ``--extra_package(s)``,
    ``--sdk_container_image`` is given, and bertprep runs from a source checkout
    (:func:`source_setup_file`); otherwise ``options`` is left as it is.
    """
    if is_dataflow_runner(options) and not _ships_bertprep(options):
        setup_file = source_setup_file()
        if setup_file:
            log.info("Dataflow: shipping bertprep to the workers with --setup_file=%s", setup_file)
            options.view_as(SetupOptions).setup_file = setup_file
    return options


def check_dataflow_options(options: PipelineOptions, config: ShardsConfig) -> None:
    """Check that a make-shards run can work on Dataflow, before anything is built or submitted.

    Checks (all of them; the error lists every problem found):
      - ``--project`` and ``--region`` are set;
      - ``--temp_location`` (or ``--staging_location``) is a valid ``gs://bucket/path`` (Beam's own
        ``PipelineOptionsValidator.validate_gcs_path``; with neither valid, Beam would try to create a
        default bucket over the network);
      - the inputs, the vocab and ``--output-dir`` are remote paths (``gs://...``): the workers read the
        inputs and the vocab and write the shards, and cannot see the launching machine's disk (this
        includes the bundled demo corpus used when no ``--input`` is given);
      - the workers get bertprep: one of ``--setup_file``, ``--extra_package``/``--extra_packages`` or
        ``--sdk_container_image`` is given.

    Raises:
        ValueError: listing each problem with the option to fix.
    """
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

    problems = []
    cloud = options.view_as(GoogleCloudOptions)
    if not cloud.project:
        problems.append("--project is required with --runner=DataflowRunner (the Google Cloud project ID)")
    if not cloud.region:
        problems.append("--region is required with --runner=DataflowRunner (e.g. --region=us-central1)")
    validator = PipelineOptionsValidator(options, None)
    temp_errors = validator.validate_gcs_path(cloud, "temp_location")
    staging_errors = validator.validate_gcs_path(cloud, "staging_location")
    if temp_errors and staging_errors:
        shown = f" (got {cloud.temp_location!r})" if cloud.temp_location else ""
        beam_says = f"; Beam: {temp_errors[0]}" if cloud.temp_location else ""  # e.g. its bucket-naming rule
        problems.append(
            f"--temp_location must be a gs://bucket/path where Dataflow stages code and writes temporary "
            f"files{shown}, e.g. --temp_location=gs://my-bucket/tmp{beam_says}"
        )
    local_inputs = [p for p in config.inputs if not storage.is_remote(p)]
    if local_inputs:
        problems.append(
            f"input {local_inputs[0]!r} is a local path; Dataflow workers cannot read it: copy the corpus to "
            "gs:// (gcloud storage cp -r DIR gs://BUCKET/corpus/) and pass --input gs://BUCKET/corpus/"
        )
    if not storage.is_remote(config.vocab):
        problems.append(
            f"--vocab {config.vocab!r} is a local path; the workers load the vocab themselves: copy it to gs:// "
            "and pass --vocab gs://BUCKET/vocab.txt"
        )
    if not storage.is_remote(config.output_dir):
        problems.append(
            f"--output-dir {config.output_dir!r} is a local path; the workers would write the shards to their own "
            "disks, which are deleted with them: pass --output-dir gs://BUCKET/shards"
        )
    if not _ships_bertprep(options):
        hint = f" ({source_setup_file()})" if source_setup_file() else ""
        problems.append(
            "the workers need bertprep installed: pass --setup_file=./setup.py from the bertprep checkout"
            f"{hint}, or --extra_package with a bertprep sdist/wheel, or --sdk_container_image with bertprep "
            "installed"
        )
    if problems:
        raise ValueError("cannot run make-shards on Dataflow:\n  - " + "\n  - ".join(problems))


@dataclass
class DataflowDryRun:
    """The Dataflow job a submission would create, built and validated locally (not submitted).

    Attributes:
        job_name: the job name (``--job_name``, else Beam's ``beamapp-USER-TIME-RANDOM``).
        job: the job description as the Dataflow REST API would receive it (``dataflow.Job`` as JSON:
            ``name``, ``type``, ``environment`` with ``workerPools``, ``experiments``,
            ``sdkPipelineOptions``), except ``environment.packages``, which lists uploaded files and is
            empty here (the staged files are in ``staged_files``).
        pipeline_proto: the portable pipeline (``beam_runner_api_pb2.Pipeline``) that would be staged as
            ``pipeline.pb``.
        staged_files: names of the files the workers would get (``workflow.tar.gz`` is bertprep's sdist
            built from ``--setup_file``).
        staging_dir: local folder holding those files (the sdist among them), for inspection; the caller
            may delete it.
        options: the pipeline options after Beam's runner filled them in (job name, experiments).
        temp_location: ``--temp_location`` as given (Beam appends the job name to it for the submission).
    """

    job_name: str
    job: dict[str, Any]
    pipeline_proto: Any
    staged_files: list[str]
    staging_dir: str | None
    options: PipelineOptions = field(repr=False)
    temp_location: str | None = None

    def transform_names(self) -> list[str]:
        """Unique names of every transform in the graph (composites and primitives), sorted."""
        return sorted(t.unique_name for t in self.pipeline_proto.components.transforms.values())

    def group_by_keys(self) -> list[str]:
        """Unique names of the GroupByKey transforms (each one is a Dataflow shuffle)."""
        from apache_beam.portability import common_urns

        urn = common_urns.primitives.GROUP_BY_KEY.urn
        return sorted(t.unique_name for t in self.pipeline_proto.components.transforms.values() if t.spec.urn == urn)

    def summary(self) -> str:
        """Human-readable description of the job (what ``make-shards --dry_run=True`` prints)."""
        env = self.job.get("environment", {})
        pool = (env.get("workerPools") or [{}])[0]
        cloud = self.options.view_as(GoogleCloudOptions)
        machine = pool.get("machineType") or "Dataflow's default machine type"
        autoscaling = pool.get("autoscalingSettings", {})
        workers = (
            f"up to {autoscaling['maxNumWorkers']} workers"
            if autoscaling.get("maxNumWorkers")
            else "workers chosen by autoscaling"
        )
        return "\n".join(
            [
                f"Dataflow dry run: job {self.job_name} built and validated locally; NOT submitted.",
                f"  project {cloud.project}, region {cloud.region}, temp {self.temp_location or cloud.temp_location}",
                f"  workers: {machine}, {workers}, image {pool.get('workerHarnessContainerImage', '?')}",
                f"  experiments: {', '.join(env.get('experiments', []))}",
                f"  staged for the workers: {', '.join(self.staged_files) or 'nothing'}"
                + (f" (built in {self.staging_dir})" if self.staging_dir else ""),
                f"  graph: {len(self.pipeline_proto.components.transforms)} transforms, "
                f"{len(self.group_by_keys())} GroupByKeys (shuffles)",
                "Submit: run the same command without --dry_run=True.",
            ]
        )


def _staged_files(pipeline_proto) -> list[str]:
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    names = []
    role = common_urns.artifact_roles.STAGING_TO.urn
    for env in pipeline_proto.components.environments.values():
        for dep in env.dependencies:
            if dep.role_urn == role:
                names.append(beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload).staged_name)
    return sorted(set(names))


def _local_staging_dir(pipeline_proto) -> str | None:
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    for env in pipeline_proto.components.environments.values():
        for dep in env.dependencies:
            if dep.type_urn == common_urns.artifact_types.FILE.urn:
                path = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path
                return str(Path(path).parent)
    return None


def dry_run(
    config: ShardsConfig, options: PipelineOptions, *, files: Sequence[str] | None = None, vocab: Vocab | None = None
) -> DataflowDryRun:
    """Build the make-shards Dataflow job for ``config`` and ``options`` without submitting it.

    Args:
        config: the make-shards settings; inputs, vocab and output must be ``gs://`` (see
            :func:`check_dataflow_options`).
        options: the run's Beam options (from ``--runner=DataflowRunner --project=... --region=...
            --temp_location=gs://... --setup_file=./setup.py ...``); ``dry_run`` is set on them.
        files: the input files in reading order; default: ``readers.expand_inputs(config.inputs)``, which
            lists ``gs://`` inputs (needs read access). Give them to build the job with no access at all.
        vocab: the loaded vocab; default: ``load_vocab(config.vocab)`` (reads it from ``gs://``).

    Returns:
        A :class:`DataflowDryRun` (job description, portable pipeline proto, staged files).

    Raises:
        ValueError: bad options or paths (:func:`check_dataflow_options`), or a graph Beam rejects.
        DataflowUnavailable: ``apache-beam[gcp]`` is not installed.
        RuntimeError: the stager could not build the sdist from ``--setup_file`` (Beam's message).
    """
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems

    from bertprep.pipeline import readers
    from bertprep.pipeline.beam.graph import build_pipeline
    from bertprep.pipeline.shards import store as shards
    from bertprep.pipeline.text.tokenization import load_vocab

    if not is_dataflow_runner(options):
        raise ValueError(
            f"a Dataflow dry run needs --runner=DataflowRunner (got --runner={options.view_as(StandardOptions).runner})"
        )
    apiclient, shared_names = _dataflow_api_client()
    check_dataflow_options(options, config)
    options.view_as(TestOptions).dry_run = True
    temp_location = options.view_as(GoogleCloudOptions).temp_location
    if files is None:
        files = readers.expand_inputs(list(config.inputs))
    if vocab is None:
        vocab = load_vocab(config.vocab)

    tmp_dir = FileSystems.join(config.output_dir, shards.staging_dir_name())  # what a real run would use
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config, list(files), vocab, tmp_dir)
    result = pipeline.run()  # DataflowRunner with dry_run: builds and validates the job, returns before submitting
    job = result.job  # type: ignore[attr-defined]  # DataflowPipelineResult's (a dry run's too)
    _describe_environment(job, apiclient, shared_names)
    return DataflowDryRun(
        job_name=job.proto.name,
        job=json.loads(job.json()),
        pipeline_proto=job.proto_pipeline,
        staged_files=_staged_files(job.proto_pipeline),
        staging_dir=_local_staging_dir(job.proto_pipeline),
        options=job.options,
        temp_location=temp_location,
    )


def _dataflow_api_client() -> tuple[Any, Any]:
    """Beam's Dataflow API client module and its shared names (``apache_beam.runners.internal.names``), imported
    lazily. Raises :class:`DataflowUnavailable` (saying what to install) without ``apache-beam[gcp]``."""
    try:
        from apache_beam.runners.dataflow.internal import apiclient
        from apache_beam.runners.internal import names as shared_names
    except ImportError as err:
        raise DataflowUnavailable(
            f"the Dataflow runner needs Beam's Google Cloud extras ({err}): pip install 'bertprep[gcp]' "
            "(or 'apache-beam[gcp]')"
        ) from err
    return apiclient, shared_names


def _describe_environment(job: Any, apiclient: Any, shared_names: Any) -> None:
    """Set the dry-run ``job``'s worker environment (machine type, autoscaling, container image, experiments) on
    its proto with Beam's ``apiclient.Environment``, as ``create_job_description`` does before it uploads
    (nothing is uploaded: the staged pipeline's URL is only named)."""
    from apache_beam.io.filesystems import FileSystems

    cloud = job.options.view_as(GoogleCloudOptions)
    environment = apiclient.Environment(
        packages=[],
        options=job.options,
        environment_version=apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION,
        proto_pipeline_staged_url=FileSystems.join(cloud.staging_location, shared_names.STAGED_PIPELINE_FILENAME),
        proto_pipeline=job.proto_pipeline,
    )
    job.proto.environment = environment.proto
