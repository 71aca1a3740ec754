"""Run ``make-shards``: options, runner choice, staging and commit, Dataflow checks and dry run, messages.

:func:`run_make_shards` builds the pipeline of ``graph.py`` on the runner the Beam options name (with
none, Beam's in-process ``FnApiRunner`` on every core), or validates a Dataflow job without submitting it
(``dataflow.py``). The Beam arguments become one ``PipelineOptions`` here (:func:`default_pipeline_options`),
which every later step is handed. Nothing imports this module back (``graph.py``, ``dataflow.py`` and
``session.py`` do not), so there is no import cycle.

Nothing is written into the output directory until the pipeline has succeeded: every file goes to a
staging folder ``<output>/.bertprep-tmp-<host>-<pid>-<run>/`` (bucket files under ``buckets/``, then the
shards, vocab.txt and manifest.json), and :func:`run_make_shards` then moves them into place
(``publish.publish``, journalled: a run killed while it moves its files is finished by the next run), so a
failed or killed run leaves an earlier run's output intact. A user error raised in a worker reaches the user
as the worker's one-line message (``errors.recorded_error``).

This module is the driver: what it does to the output folder itself (the checks before a run, the staging
folder, reading back the manifests its pipeline wrote, the publish, the clean-up) goes through
``core/storage.py``, as every command's own reads and writes do. Only the pipeline's transforms, on its
workers, read and write through Beam's ``FileSystems``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, TestOptions

from bertprep.core import schema, storage
from bertprep.pipeline import interrupts, readers
from bertprep.pipeline.beam import dask_runner_name, dataflow, filesystems, heldout, spill, warm_workers
from bertprep.pipeline.beam.decontamination import check_evaluation_files
from bertprep.pipeline.beam.graph import build_pipeline
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.errors import USER_ERRORS, MakeShardsError, recorded_error
from bertprep.pipeline.shards import formats, publish
from bertprep.pipeline.shards import store as shards
from bertprep.pipeline.text.tokenization import Vocab, load_vocab

log = logging.getLogger(__name__)

#: Staging folders of runs under way in this process (added and removed here): what an abort deletes
#: (``session.py`` reads it through ``sys.modules``, without importing this module).
ACTIVE_STAGING: set[str] = set()


#: The work, input bytes x ``--dupe-factor``, up to which a run given no Beam arguments runs in this process
#: (Beam's in-memory ``FnApiRunner``, no worker processes; :func:`in_process_args`). Measured on 2 busy cores
#: (``benchmarks/bench_startup.py``, base install): 20 KB at the default dupe factor took 2.4 s of CPU with
#: the worker processes and 1.7 s in this process; the demo corpus (464 KB) 2.9 s and 2.2 s, so its work is
#: well under the processes' cost. The output is the same bytes either way.
IN_PROCESS_MAX_WORK = 10_000_000


def in_process_args(patterns: Sequence[str], dupe_factor: int) -> list[str]:
    """The Beam arguments for a run given none: ``["--direct_num_workers=1"]`` (the pipeline runs in this
    process) when the local files ``patterns`` name hold at most :data:`IN_PROCESS_MAX_WORK` / ``dupe_factor``
    bytes, else ``[]`` (worker processes on every core, :func:`default_pipeline_options`).

    Starting, feeding and stopping worker processes costs more than a small input's work (a start-up of seconds
    for a file of kilobytes); the shards are the same bytes on any number of workers. A remote pattern, or
    one that cannot be read here, keeps the default (the run then reports it as usual)."""
    limit = IN_PROCESS_MAX_WORK // max(1, dupe_factor)
    total = 0
    try:
        for pattern in patterns:
            if storage.is_remote(pattern):
                return []
            for path in sorted(glob.glob(pattern, recursive=True)) if any(c in pattern for c in "*?[") else [pattern]:
                files = (
                    [os.path.join(d, f) for d, _, names in os.walk(path) for f in names]
                    if os.path.isdir(path)
                    else [path]
                )
                for file in files:
                    total += os.path.getsize(file)
                    if total > limit:
                        return []
    except OSError:
        return []
    return ["--direct_num_workers=1"] if patterns else []


def default_pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """The one ``PipelineOptions`` of a run, from the pass-through arguments: with no ``--runner``, the
    in-process local runner on every core (``FnApiRunner`` in multi-processing mode, no Prism download); on
    Dataflow, ``--setup_file`` defaults to the checkout's setup.py (``dataflow.with_default_setup_file``)."""
    options = PipelineOptions(list(beam_args))
    standard = options.view_as(StandardOptions)
    if dataflow.is_dataflow_runner(options):
        dataflow.with_default_setup_file(options)
    if not standard.runner:
        given = {arg.split("=", 1)[0] for arg in beam_args if arg.startswith("--")}
        direct = options.view_as(DirectOptions)
        # DirectOptions defaults to 1 worker, in memory: use every core unless the user chose otherwise
        if "--direct_num_workers" not in given or not direct.direct_num_workers:
            direct.direct_num_workers = os.cpu_count() or 1
        if "--direct_running_mode" not in given and direct.direct_num_workers > 1:
            direct.direct_running_mode = "multi_processing"
    return options


def _local_runner(options: PipelineOptions, workers: warm_workers.WarmWorkerPool | None = None):
    """The runner for ``options``: None (Beam picks the runner they name), else the in-process
    ``FnApiRunner``; with ``workers`` (as many as ``direct_num_workers``, multi-processing), one whose worker
    processes are those already started (``warm_workers.py``)."""
    if options.view_as(StandardOptions).runner:
        return _named_runner(options)
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    direct = options.view_as(DirectOptions)
    if workers is None or direct.direct_running_mode != "multi_processing" or direct.direct_num_workers != workers.size:
        return FnApiRunner()
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    class WarmWorkersRunner(FnApiRunner):
        """``FnApiRunner`` whose worker command hands each slot to a pool worker. FnApiRunner replaces the
        environment by its own ``sdk_worker_main`` command in multi-processing mode, so the options say
        ``in_memory`` while it runs (the worker count still comes from ``direct_num_workers``)."""

        def run_pipeline(self, pipeline, run_options):
            view = run_options.view_as(DirectOptions)
            view.direct_running_mode = "in_memory"
            runner_log = logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner")
            quiet = _DropMessage("direct_running_mode should be")  # that is what the options say, not what runs
            runner_log.addFilter(quiet)
            try:
                return super().run_pipeline(pipeline, run_options)
            finally:
                runner_log.removeFilter(quiet)
                view.direct_running_mode = "multi_processing"

    return WarmWorkersRunner(default_environment=SubprocessSDKEnvironment.from_command_string(workers.command))


def absolute_paths(config: ShardsConfig) -> ShardsConfig:
    """``config`` with its local paths (inputs, sources, vocab, output, --decontaminate files) made absolute.

    For runners whose workers are other processes started elsewhere (Dask's ``dask worker``): a relative
    ``-o`` was written into the workers' working folder (with a staging folder left there) and a relative
    ``-i`` was "not found" by them, while the local runner (whose workers share this process's folder)
    accepted both. The local runner keeps the paths as given (its manifest records them so)."""

    def absolute(path: str) -> str:
        return path if storage.is_remote(path) else os.path.abspath(path)

    return dataclasses.replace(
        config,
        inputs=tuple(map(absolute, config.inputs)),
        sources=tuple(dataclasses.replace(s, inputs=tuple(map(absolute, s.inputs))) for s in config.sources),
        vocab=absolute(config.vocab),
        output_dir=absolute(config.output_dir),
        decontaminate=tuple(map(absolute, config.decontaminate)),
    )


def _named_runner(options: PipelineOptions):
    """The runner ``--runner`` names: bertprep's Dask adapter for ``DaskRunner`` (``dask_runner.py``, which
    Beam's own table of short names lacks), else None: Beam creates the runner itself."""
    from bertprep.pipeline.beam import dask_runner_name

    if not dask_runner_name(options.view_as(StandardOptions).runner):
        return None
    try:
        from bertprep.pipeline.beam.dask_runner import runner_from_options
    except ImportError as err:
        raise MakeShardsError(
            f"--runner=DaskRunner needs Dask ({err}): pip install 'bertprep[dask]' "
            "(apache-beam[dask], dask, distributed)"
        ) from err
    return runner_from_options(options)


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _checked_inputs(config: ShardsConfig, beam_args: Sequence[str]) -> tuple[ShardsConfig, list[str]]:
    """``config`` (its paths absolute for Dask's workers) and its input files, after the reading options and the
    ``--decontaminate`` files are checked; raises as :func:`run_make_shards` does for them."""
    readers.check_options(
        config.input_format,
        encoding=config.encoding,
        max_line_chars=config.max_line_chars,
        **({"segmenter": config.segmenter} if config.segmenter else {}),
    )
    options = PipelineOptions(list(beam_args))
    if dask_runner_name(options.view_as(StandardOptions).runner):
        config = absolute_paths(config)  # the workers run in folders (and on machines) of their own
    filesystems.use_filesystem_options(options)
    files = readers.expand_inputs(list(config.inputs))
    check_evaluation_files(config.decontaminate)
    return config, files


def run_make_shards(
    config: ShardsConfig,
    beam_args: Sequence[str] = (),
    vocab: Vocab | None = None,
    workers: warm_workers.WarmWorkerPool | None = None,
) -> dict:
    """Run make-shards end to end and return the manifest.

    Raises:
        readers.InputError: inputs missing, matching nothing, or unreadable.
        VocabError: the vocab cannot be used.
        MakeShardsError: the output directory already holds shards (without ``overwrite``), is a file or
            cannot be written; an input is one of the files make-shards writes there; no instance was made;
            a write failed (e.g. disk full: the message names the file); or (``--runner=DataflowRunner``)
            the options or paths cannot work on Dataflow (``dataflow.check_dataflow_options``).

    Everything is written into a staging folder in the output directory and moved into place only when the
    pipeline has succeeded (``publish.publish``, journalled): a failed, interrupted or killed run leaves an
    earlier output exactly as it was, and one killed while it moves its files is finished by the next run.
    After a successful run, staging folders of dead runs are removed
    (``shards.remove_stale_staging``). Beam options are not checked here (the command line's are, by
    ``cli/shards_options.check_beam_args``).
    With ``config.eval_fraction`` the held-out set is moved into ``<output_dir>/eval/`` first, then the training
    set (its manifest last); without it, an ``eval/`` set an earlier run left there is deleted
    (``heldout.py``, :func:`_publish`). The output directory is locked for the run (``publish.output_lock``):
    a second run into it is refused, naming the first.

    With ``--runner=DataflowRunner --dry_run=True`` nothing is written or submitted: the job is built and
    validated locally (``dataflow.dry_run``) and ``{"dry_run": summary, "job": job description}`` is returned.
    On Dataflow, ``--setup_file`` defaults to the checkout's setup.py (``dataflow.with_default_setup_file``).
    ``vocab``: ``config.vocab`` already loaded (the CLI loads it first to settle the casing), else loaded here.
    ``workers``: Beam worker processes already started (``warm_workers.start``, by the CLI before it imports
    Beam), used when the local runner runs multi-processing with as many workers; the caller closes them.
    """
    config, files = _checked_inputs(config, beam_args)
    vocab = vocab if vocab is not None else load_vocab(config.vocab)
    options = default_pipeline_options(beam_args)
    if dataflow.is_dataflow_runner(options):
        dry_run = _dataflow_dry_run_or_checks(config, options, files, vocab)
        if dry_run is not None:
            return dry_run
    output_dir = config.output_dir
    _check_output_dir(output_dir, files)
    created = not storage.is_remote(output_dir) and not os.path.exists(output_dir)
    try:
        with publish.output_lock(output_dir):
            manifest = _make_and_publish(config, options, vocab, workers, files)
    except publish.LockError as err:
        raise MakeShardsError(str(err)) from err
    finally:
        if created and os.path.isdir(output_dir) and not os.listdir(output_dir):
            os.rmdir(output_dir)  # a failed run leaves no empty folder it made
    _log_outcome(config, manifest)
    return manifest


def _dataflow_dry_run_or_checks(
    config: ShardsConfig, options: PipelineOptions, files: Sequence[str], vocab: Vocab
) -> dict | None:
    """On Dataflow: with ``--dry_run=True`` the job built and validated locally, nothing written or submitted
    (``{"dry_run": summary, "job": job description}``); else None once the options and paths are checked."""
    try:
        if options.view_as(TestOptions).dry_run:
            report = dataflow.dry_run(config, options, files=files, vocab=vocab)
            return {"dry_run": report.summary(), "job": report.job}
        dataflow.check_dataflow_options(options, config)
    except (ValueError, ImportError) as err:
        raise MakeShardsError(str(err)) from err
    return None


def _check_output_dir(output_dir: str, files: Sequence[str]) -> None:
    """Refuse, before any work, an ``--output-dir`` whose store cannot be used (one line at once, without the
    clients' retries), one that is a file, or inputs that are files make-shards writes there."""
    try:
        filesystems.check_beam_path(output_dir, "--output-dir")
    except storage.RemotePathError as err:
        raise MakeShardsError(str(err)) from err
    _check_inputs_outside_outputs(files, output_dir)
    _check_inputs_outside_outputs(files, storage.join(output_dir, heldout.EVAL_DIR))
    if not storage.is_remote(output_dir) and os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise MakeShardsError(f"--output-dir {output_dir} is a file, not a directory; choose another --output-dir")


def _log_outcome(config: ShardsConfig, manifest: dict) -> None:
    """Log what a finished run's manifest says a user should see: the copies ``--dedup`` dropped, a small
    held-out set."""
    if "dedup" in manifest:
        log.info(
            "--dedup %s: %d of %d documents dropped as copies (%d texts had copies)",
            config.dedup,
            manifest["dedup"]["documents_dropped"],
            manifest["statistics"]["documents"]["read"],
            manifest["dedup"]["duplicate_groups"],
        )
    small = heldout.small_eval_set_warning(manifest)
    if small:
        log.warning("%s", small)


def _make_and_publish(
    config: ShardsConfig, options: PipelineOptions, vocab: Vocab, workers, files: Sequence[str]
) -> dict:
    """With the output directory locked: finish an earlier run's cut-short publish, refuse existing shards
    without ``overwrite``, run the pipeline into a staging folder and publish it (``publish.py``)."""
    output_dir = config.output_dir
    eval_output_dir = storage.join(output_dir, heldout.EVAL_DIR)
    try:
        publish.repair(output_dir)
    except ValueError as err:
        raise MakeShardsError(str(err)) from err
    _refuse_foreign_files(config)
    existing = shards.existing_outputs(output_dir) + shards.existing_outputs(eval_output_dir)
    if existing and not config.overwrite:
        raise MakeShardsError(
            f"{output_dir} already holds shards or a manifest ({len(existing)} files, e.g. "
            f"{os.path.basename(existing[0])}); choose another --output-dir or pass --overwrite"
        )
    try:
        store_timeout = filesystems.store_timeout_s()
    except ValueError as err:
        raise MakeShardsError(str(err)) from None
    staging_dir, _ = _make_staging_dir(output_dir)
    ACTIVE_STAGING.add(staging_dir)
    try:
        watched = output_dir if not dataflow.is_dataflow_runner(options) else ""  # (Dataflow's workers write)
        with filesystems.watch_store(watched, _store_lost, store_timeout):
            return _run_and_publish(config, options, vocab, workers, files, staging_dir)
    finally:
        ACTIVE_STAGING.discard(staging_dir)


def _store_lost(message: str) -> None:
    """End a run whose store stopped answering (``filesystems.watch_store``): the one line ``message`` and exit
    status 1 at once, the workers killed and Beam silenced (its clients would retry, and log each retry, for
    minutes), the output directory's lock released. The staging folder and a publish's journal stay: removing
    them needs the store, and the next run cleans up (``publish.repair``, ``remove_stale_staging``)."""
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None
    session = sys.modules.get("bertprep.pipeline.beam.session")  # (it imports this module: no import back)
    getattr(session, "_kill_children", lambda: None)()
    publish.release_locks()
    interrupts.exit_now(message, 1)


def _run_and_publish(config, options: PipelineOptions, vocab, workers, files, staging_dir: str) -> dict:
    output_dir = config.output_dir
    start = time.time()
    metadata = sum(1 for f in files if readers.is_hf_metadata(f)) if config.input_format in ("hf", "auto") else 0
    log.info("make-shards: %d input files -> %s", len(files) - metadata, output_dir)
    try:
        with beam.Pipeline(runner=_local_runner(options, workers), options=options) as pipeline:
            build_pipeline(pipeline, config, files, vocab, staging_dir, _spill_to(config, options, staging_dir))
        spill.report(staging_dir, config.memory_budget)
        manifest = _staged_manifest(staging_dir)
    except BaseException as err:  # Ctrl-C included: the staging folder goes, an earlier output stays
        message = _bertprep_message(err, staging_dir) if isinstance(err, Exception) else None
        dask_runner = sys.modules.get("bertprep.pipeline.beam.dask_runner")
        if dask_runner is not None and isinstance(err, dask_runner.DaskSchedulerUnreachable):
            message = str(err)  # one line: the address and how to start a scheduler
        _remove_failed_run(staging_dir, None)
        if message:
            raise MakeShardsError(message) from err
        if isinstance(err, OSError):
            raise MakeShardsError(shards.os_error_message(err, f"making shards in {output_dir}")) from err
        raise
    try:
        _publish(config, staging_dir, manifest)
    except OSError as err:  # the journal stays: the next run finishes the publish
        raise MakeShardsError(shards.os_error_message(err, f"publishing the shards in {output_dir}")) from err
    shards.remove_stale_staging(output_dir)
    log.info("make-shards finished in %.1f s", time.time() - start)
    return manifest


def _spill_to(config: ShardsConfig, options: PipelineOptions, staging_dir: str) -> tuple[str, int] | None:
    """The local runner's ``(spill folder, memory budget per worker process in bytes)`` (``spill.py``); None
    with a named runner (Dask and Dataflow shuffle out of memory themselves) or a remote output folder."""
    if options.view_as(StandardOptions).runner or storage.is_remote(staging_dir):
        return None
    direct = options.view_as(DirectOptions)
    processes = direct.direct_num_workers if direct.direct_running_mode == "multi_processing" else 1
    return spill.spill_folder(staging_dir), config.memory_budget * 1_000_000 // max(1, processes)


def _publish(config: ShardsConfig, staging_dir: str, manifest: dict) -> None:
    """Publish the training set (and the held-out set in ``eval/``, or remove an earlier run's) in one
    journalled step; the training set's manifest is the last file written."""
    output_dir = config.output_dir
    sets, remove = [], []
    if config.eval_fraction > 0:
        eval_manifest = _staged_manifest(storage.join(staging_dir, heldout.EVAL_DIR))
        eval_files = formats.recorded_files(eval_manifest)
        sets.append((heldout.EVAL_DIR, heldout.EVAL_DIR, eval_files))
        log.info(
            "held-out set: %d instances from %d documents in %s",
            eval_manifest["statistics"]["instances"],
            eval_manifest["split"]["eval_documents"],
            storage.join(output_dir, heldout.EVAL_DIR),
        )
    elif shards.existing_outputs(storage.join(output_dir, heldout.EVAL_DIR)):
        remove.append(heldout.EVAL_DIR)
        log.info("removing the held-out set of an earlier run (this run has no --eval-fraction)")
    sets.append(("", "", formats.recorded_files(manifest)))
    publish.publish(output_dir, staging_dir, sets, remove)


def _staged_manifest(directory: str) -> dict:
    """The manifest the pipeline wrote in its staging folder ``directory``, read back through ``core/storage.py``
    (as the publish moves it: ``publish.py``), and checked as every manifest is (``schema.parse_manifest``)."""
    path = storage.join(directory, schema.MANIFEST_NAME)
    return schema.parse_manifest(storage.read_bytes(path), path)


def _refuse_foreign_files(config: ShardsConfig) -> None:
    """Refuse, before any work, an output directory (or its ``eval/``) holding a file this run would write
    besides its shards (an MDS ``index.json``, Megatron's ``text_sentence.bin``, a ``README.md``) that the
    directory's manifest does not record: another tool's, which the publish would replace, even with
    ``--overwrite``."""
    names = {
        "arrow": (formats.DATASET_CARD,),
        "mds": (formats.MDS_INDEX,),
        "megatron": formats.MEGATRON_FILES,
    }[config.output_format]
    eval_names = tuple(n for n in names if n != formats.DATASET_CARD)  # the card is the training set's
    for folder, folder_names in (
        (config.output_dir, names),
        (storage.join(config.output_dir, heldout.EVAL_DIR), eval_names),
    ):
        found = formats.foreign_files(folder, folder_names)
        if found:
            raise MakeShardsError(
                f"{storage.join(folder, found[0])} is not make-shards' (no manifest there records it) and "
                f"--output-format {config.output_format} writes a file of that name; move it away or choose "
                "another --output-dir"
            )


def _same_dir(a: str, b: str) -> bool:
    if storage.is_remote(a) or storage.is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def _check_inputs_outside_outputs(files: Sequence[str], output_dir: str) -> None:
    """Refuse inputs that are files make-shards writes in ``output_dir`` (shards, manifest.json,
    vocab.txt): the run would read them while replacing them. ``--vocab <output_dir>/vocab.txt`` is fine
    (it is read before anything is replaced, and replaced by the same tokens)."""
    for path in files:
        folder, name = os.path.split(path.rstrip("/"))
        if shards.is_output_name(name) and _same_dir(folder or ".", output_dir):
            raise MakeShardsError(
                f"input {path} is inside --output-dir {output_dir} and is one of the files make-shards writes "
                f"there ({name}); move the input out of the output directory or choose another --output-dir"
            )


def _make_staging_dir(output_dir: str) -> tuple[str, bool]:
    """Create ``output_dir`` if needed and a new staging folder in it; ``(staging path, output_dir created)``.

    Raises:
        MakeShardsError: ``output_dir`` is a file, or cannot be created or written to.
    """
    local = not storage.is_remote(output_dir)
    if local and os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise MakeShardsError(f"--output-dir {output_dir} is a file, not a directory; choose another --output-dir")
    created = local and not os.path.exists(output_dir)  # (a store has no folders: nothing is made there)
    staging_dir = storage.join(output_dir, shards.staging_dir_name())
    try:
        storage.mkdirs(staging_dir)  # and the output folder above it
    except OSError as err:  # permission, a read-only disk, a file in the way
        reason = err.strerror or str(err)
        if created:
            _remove_failed_run(None, output_dir)
        raise MakeShardsError(
            f"cannot write to --output-dir {output_dir} ({reason}); choose a writable --output-dir"
        ) from err
    return staging_dir, created


def _remove_failed_run(staging_dir: str | None, created_output_dir: str | None) -> None:
    """Delete a failed run's staging folder, and the output directory if this run created it and it is
    empty; failures are logged, never raised (they must not hide the run's own error)."""
    if staging_dir:
        try:
            storage.remove_tree(staging_dir)
        except Exception:
            log.warning("could not remove %s", staging_dir)
    if created_output_dir and not storage.is_remote(created_output_dir):
        with contextlib.suppress(OSError):
            os.rmdir(created_output_dir)


_EXCEPTION_LINE = re.compile(
    r"^bertprep\.pipeline\.[\w.]+\.(?:MakeShardsError|InputError|VocabError): (.+?)(?: \[while running '[^']*'\])?$",
    re.M,
)


def _bertprep_message(err: BaseException, staging_dir: str | None = None) -> str | None:
    """Our own error text from inside a Beam failure, or None when the failure is not one of ours.

    In order: one of our exceptions in ``err``'s cause/context chain (in-process runners); the record a
    worker left in the staging folder (:func:`errors.record_error`; worker processes and remote runners, where
    only text comes back); the exception line of a worker traceback carried in ``err``'s text.
    """
    seen = set()
    stack = [err]
    while stack:
        e = stack.pop()
        if id(e) in seen or e is None:
            continue
        seen.add(id(e))
        if isinstance(e, USER_ERRORS):
            return _clean_message(str(e))
        stack.extend([e.__cause__, e.__context__])
    recorded = recorded_error(staging_dir) if staging_dir else None
    if recorded:
        return _clean_message(recorded)
    found = _EXCEPTION_LINE.findall(str(err))
    return _clean_message(found[-1]) if found else None


def _clean_message(text: str) -> str:
    return re.sub(r" \[while running '[^']*'\]$", "", text.strip()).removeprefix("bertprep: ")
