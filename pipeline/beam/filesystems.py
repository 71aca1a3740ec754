"""Beam's file systems as make-shards uses them: the command's Beam options handed to them before anything is
read, the settings a Dask worker needs to reach the same store, and the patches of Beam's GCS and S3 clients
(one client per process and settings instead of one per operation; no credentials search against an emulator).

The one module that touches Beam's client internals: each patch is guarded (a Beam without the private name
works as before) and ``tests/pipeline/beam/test_beam_private_api.py`` names what each needs. What the commands
read and write themselves (make-shards' driver included: its checks, staging folder, publish and clean-up) goes
through ``core/storage.py``; the pipeline's own I/O inside its transforms, on its workers, stays on Beam's
``FileSystems``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from bertprep.core import storage


def use_filesystem_options(options) -> None:
    """Hand a command's Beam ``PipelineOptions`` (``--s3_endpoint_url``, ``--s3_region_name``, ``--project``...)
    to Beam's file systems before anything is listed or read: ``FileSystems`` gets them only when a pipeline is
    built, and Beam's S3 file system refuses to start without them. The probe uses the same S3 endpoint."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import S3Options

    FileSystems.set_options(options)
    storage.set_s3_endpoint_url(options.view_as(S3Options).s3_endpoint_url)
    _share_s3_clients()
    _share_gcs_clients()
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        _no_credentials_search()


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """What a worker process on another runner's machine (Dask's) needs to reach the same store as the
    command: the run's Beam options as Beam ships them to its own SDK workers (``get_all_options``, rebuilt
    with ``PipelineOptions.from_dictionary``: ``--s3_endpoint_url``, ``--s3_region_name``, ``--project``...)
    and the command's :data:`storage.ENDPOINT_VARIABLES` that are set. Credentials are not shipped (they would cross
    the scheduler's connection): a worker finds its own, as on Dataflow, or Beam's ``--s3_access_key_id`` /
    ``--s3_secret_access_key`` options carry them."""

    options: tuple[tuple[str, Any], ...]
    environment: tuple[tuple[str, str], ...]


def worker_settings(options, runner_options: Collection[str] = ()) -> WorkerSettings:
    """The :class:`WorkerSettings` of a command run with Beam ``options``, from this process, but the names
    in ``runner_options`` (the runner's own settings, such as the scheduler's address: a worker needs none)."""
    given = {k: v for k, v in options.get_all_options(drop_default=True).items() if k not in runner_options}
    environment = tuple((name, os.environ[name]) for name in storage.ENDPOINT_VARIABLES if os.environ.get(name))
    return WorkerSettings(tuple(sorted(given.items())), environment)


#: The settings this process last applied (:func:`apply_worker_settings`), the process's own endpoint variables
#: before the first (restored where a later command leaves one unset), and the lock its worker threads take.
_APPLIED: list[WorkerSettings | None] = [None]
_OWN_ENDPOINTS: dict[str, str | None] = {}
_APPLYING = threading.Lock()


def apply_worker_settings(settings: WorkerSettings) -> None:
    """Make this (worker) process's file systems those of the command that sent ``settings``: its endpoint
    variables set (the command's choice of store wins over the worker's own; one the command leaves unset is
    the worker's own again, whatever an earlier command set), then :func:`use_filesystem_options` with its
    options, as Beam's ``sdk_worker_main`` hands its workers' file systems the pipeline options. Done once per
    process and settings: each task calls it."""
    if _APPLIED[0] == settings:
        return
    from apache_beam.options.pipeline_options import PipelineOptions

    with _APPLYING:
        if _APPLIED[0] == settings:
            return
        if not _OWN_ENDPOINTS:
            _OWN_ENDPOINTS.update((name, os.environ.get(name)) for name in storage.ENDPOINT_VARIABLES)
        wanted = dict(_OWN_ENDPOINTS, **dict(settings.environment))
        had_emulator = bool(os.environ.get("STORAGE_EMULATOR_HOST"))
        for name, value in wanted.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if had_emulator and not os.environ.get("STORAGE_EMULATOR_HOST"):
            _search_credentials_again()  # (the "no credentials" recorded for the emulator is not for the cloud)
        use_filesystem_options(PipelineOptions.from_dictionary(dict(settings.options)))
        _APPLIED[0] = settings


def _s3_client_key(options) -> tuple:
    """What a boto3 S3 client of Beam's is made from: the process (a client's connection pool does not survive
    a fork), Beam's ``--s3_*`` options and the ``AWS_*`` environment (endpoint, keys, region, profile)."""
    settings = options.get_all_options() if hasattr(options, "get_all_options") else dict(options or {})
    s3 = sorted((name, repr(value)) for name, value in settings.items() if name.startswith("s3_"))
    aws = sorted((name, value) for name, value in os.environ.items() if name.startswith("AWS_"))
    return os.getpid(), tuple(s3), tuple(aws)


def _share_s3_clients() -> None:
    """Make Beam's S3 file system reuse one boto3 client per process and settings. Beam's ``S3FileSystem``
    makes a new ``S3IO`` for every operation (each match, open, exists, size, rename, delete), and each makes a
    new boto3 session and client (``apache_beam.io.aws.clients.s3.boto3_client.Client``), which loads botocore's
    service model again: about 0.2-0.7 s an operation, most of an ``s3://`` make-shards run on a small corpus
    (124 clients in one test run). boto3's clients are thread-safe, so each new ``Client`` takes the first one's
    boto3 client and its initial (empty) download state instead; a change of the ``--s3_*`` options or of the
    ``AWS_*`` environment gets a client of its own. Guarded: a Beam without that class makes its clients as
    before (tests/pipeline/beam/test_beam_private_api.py names what this needs)."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:  # no apache-beam[aws]: no s3:// file system
        return
    client_class = getattr(boto3_client, "Client", None)
    if client_class is None or getattr(client_class, "_bertprep_shared", False):
        return
    make_client = client_class.__init__
    first_states: dict[tuple, dict] = {}

    def __init__(self, options) -> None:
        key = _s3_client_key(options)
        state = first_states.get(key)
        if state is None:
            make_client(self, options)
            state = first_states.setdefault(key, dict(vars(self)))
        vars(self).update(state)

    client_class.__init__ = functools.wraps(make_client)(__init__)
    client_class._bertprep_shared = True


#: How many ``GcsIO`` clients :func:`_share_gcs_clients` keeps (one per process, thread, options and environment).
_GCS_CLIENTS_KEPT = 32


def _share_gcs_clients() -> None:
    """Make Beam's GCS file system reuse one ``GcsIO`` per process, thread, pipeline options and environment.
    ``GCSFileSystem._gcsIO`` makes a new ``GcsIO`` for every operation (each match, open, exists, size, copy,
    delete: 2,060 in one test's runs), and each builds a ``google.cloud.storage.Client`` with a new HTTP session
    (so a new connection, TLS included, to the real service) and parses the pipeline options again (about
    2.6 ms an operation against the emulator). A client per thread, not one per process: google-cloud-storage's
    batches (Beam's ``copy_batch`` / ``delete_batch``) are state of the client, which another thread's request
    would join. A new process (fork), thread, options object or ``STORAGE_EMULATOR_HOST`` /
    ``GOOGLE_APPLICATION_CREDENTIALS`` gets a client of its own; the newest :data:`_GCS_CLIENTS_KEPT` are kept.
    Guarded: a Beam without that method makes its clients as before (tests/pipeline/beam/test_beam_private_api.py
    names what this needs)."""
    try:
        from apache_beam.io.gcp import gcsfilesystem
    except ImportError:  # no apache-beam[gcp]: no gs:// file system
        return
    filesystem: Any = getattr(gcsfilesystem, "GCSFileSystem", None)
    make_io = getattr(filesystem, "_gcsIO", None)
    if make_io is None or getattr(make_io, "_bertprep_shared", False):
        return
    kept: collections.OrderedDict[tuple, tuple[object, object]] = collections.OrderedDict()
    lock = threading.Lock()

    def _gcsIO(self):
        options = self._pipeline_options
        env = (os.environ.get("STORAGE_EMULATOR_HOST"), os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"))
        key = (os.getpid(), threading.get_ident(), id(options), env)
        with lock:
            entry = kept.get(key)
            if entry is not None and entry[0] is options:
                kept.move_to_end(key)
                return entry[1]
        made = make_io(self)  # (outside the lock: it may read credentials)
        with lock:
            kept[key] = (options, made)  # the options kept alive: their id is not reused while the entry lives
            while len(kept) > _GCS_CLIENTS_KEPT:
                kept.popitem(last=False)
        return made

    shared = functools.wraps(make_io)(_gcsIO)
    shared._bertprep_shared = True  # type: ignore[attr-defined]
    filesystem._gcsIO = shared


def _beam_credentials_cache() -> Any:
    """Beam's private cache of Google's default credentials (``apache_beam.internal.gcp.auth._Credentials``), or
    None for a Beam without it (tests/pipeline/beam/test_beam_private_api.py names what this needs)."""
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:
        return None
    cache: Any = getattr(auth, "_Credentials", None)
    if getattr(cache, "_credentials_lock", None) is None or not hasattr(cache, "_credentials_init"):
        return None
    return cache


def _no_credentials_search() -> None:
    """With a GCS emulator (``STORAGE_EMULATOR_HOST``) google-cloud-storage connects anonymously whatever
    credentials it is given, but Beam first searches for Google's default credentials with four retries
    (``apache_beam.internal.gcp.auth._Credentials``: about 25 s and a logged traceback per retry, once per
    process) before it hands the client none. Record "no credentials" in Beam's cache instead, as its search
    ends without any. Beam's private names, hence the guard: a Beam without them searches as before."""
    cache = _beam_credentials_cache()
    if cache is None:
        return
    with cache._credentials_lock:
        if not cache._credentials_init:
            cache._credentials, cache._credentials_init = None, True


def _search_credentials_again() -> None:
    """Undo :func:`_no_credentials_search` (a Dask worker that served an emulator's run, now given a run on the
    real store): Beam searches for Google's credentials at its next operation. A cache that holds credentials
    (found by Beam's own search) stays."""
    cache = _beam_credentials_cache()
    if cache is None:
        return
    with cache._credentials_lock:
        if cache._credentials is None:
            cache._credentials_init = False


def check_beam_path(path: str, option: str) -> None:
    """:func:`storage.check_remote_path` of make-shards' output folder: its pipeline writes there through Beam's
    file systems and its driver (staging, publish, clean-up) through ``core/storage.py``'s fsspec, so both
    clients for its scheme must be installed.

    Raises:
        storage.RemotePathError: as ``check_remote_path``.
    """
    storage.check_remote_path(path, option, clients=("beam", "fsspec"))


#: How long a run's store may leave every connection unanswered before make-shards stops, in seconds (the
#: environment variable :data:`STORE_TIMEOUT_ENV` sets it). The clients retry within it: Beam's GCS client
#: (google-cloud-storage) for up to 120 s an operation, then the next operation again; botocore's attempts
#: (``AWS_MAX_ATTEMPTS``) each with back-off and a traceback logged by Beam. Without this bound a run whose store
#: went away went on for minutes without a word.
STORE_TIMEOUT_S = 60.0
STORE_TIMEOUT_ENV = "BERTPREP_STORE_TIMEOUT_S"

#: Seconds between two probes of the store's endpoint while a run writes to it.
STORE_PROBE_EVERY_S = 1.0


def store_timeout_s() -> float:
    """:data:`STORE_TIMEOUT_S`, or the positive number of seconds :data:`STORE_TIMEOUT_ENV` gives.

    Raises:
        ValueError: the variable is set to something else (named, with what to give).
    """
    value = os.environ.get(STORE_TIMEOUT_ENV)
    if not value:
        return STORE_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(
            f"{STORE_TIMEOUT_ENV}={value}: give a positive number of seconds (default {STORE_TIMEOUT_S:g})"
        )
    return seconds


def _store_lost_message(path: str, where: str, why: str, timeout: float, custom: bool) -> str:
    check = "the storage emulator or endpoint" if custom else "the network"
    return (
        f"Error: the store of {path} ({where}) has not answered for {timeout:g} s ({why}); make-shards stopped. "
        f"{path} holds its earlier output (a publish under way is finished by the next run, from its journal) and "
        f"the next run into it removes this run's staging folder; check {check}, then run make-shards again "
        f"({STORE_TIMEOUT_ENV} sets the wait)"
    )


@contextlib.contextmanager
def watch_store(path: str, on_lost: Callable[[str], None], timeout_s: float | None = None) -> Iterator[None]:
    """Within the block, probe the endpoint of the store that holds ``path`` (``gs://`` or ``s3://``:
    ``storage.storage_endpoint``) every :data:`STORE_PROBE_EVERY_S`; once it has left every connection
    unanswered for ``timeout_s`` (default :func:`store_timeout_s`) in a row, call ``on_lost`` with the one line
    that names the store, ``path``, how long and what to do (it is expected to end the process). Local paths and
    other schemes are not watched. An outage shorter than ``timeout_s`` is the clients' to ride out.

    Raises:
        ValueError: as :func:`store_timeout_s`.
    """
    url_scheme = storage.scheme(path)
    if url_scheme not in ("gs", "s3"):
        yield
        return
    timeout = store_timeout_s() if timeout_s is None else timeout_s
    endpoint, custom = storage.storage_endpoint(url_scheme)
    where = f"{endpoint[0]}:{endpoint[1]}"
    done = threading.Event()

    def watch() -> None:
        answered = time.monotonic()
        while not done.wait(STORE_PROBE_EVERY_S):
            try:
                why = storage.answers(endpoint, min(STORE_PROBE_EVERY_S, timeout))
            except Exception:  # a probe that cannot run here (a test's socket guard): no verdict
                why = None
            if why is None:
                answered = time.monotonic()
            elif time.monotonic() - answered >= timeout and not done.is_set():
                on_lost(_store_lost_message(path, where, why, timeout, custom))
                return

    threading.Thread(target=watch, name="bertprep-store-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()


__all__ = [
    "STORE_TIMEOUT_ENV",
    "STORE_TIMEOUT_S",
    "WorkerSettings",
    "apply_worker_settings",
    "check_beam_path",
    "store_timeout_s",
    "use_filesystem_options",
    "watch_store",
    "worker_settings",
]
