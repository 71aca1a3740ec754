"""Fail fast on a remote path (``gs://...``, ``s3://...``) that cannot work, instead of after the client's retries.

Without network, Google's client libraries look for credentials on the GCE metadata server and retry the
storage API with back-off: a ``-o gs://...`` run ended in a traceback after about 112 s. :func:`check_remote_path`
answers in seconds, before anything is read or written: the scheme needs a Beam filesystem that is
installed (``apache-beam[gcp]`` for ``gs://``, ``apache-beam[aws]`` for ``s3://``), credentials must be findable
without waiting on a metadata server for long, and the storage endpoint the client will use (the cloud's, or an
emulator's: ``STORAGE_EMULATOR_HOST``, ``--s3_endpoint_url``, ``AWS_ENDPOINT_URL_S3``) must accept a TCP
connection within ``timeout``. Standard library, Beam and botocore's credential chain only (no google imports:
they are what hangs).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import socket
import threading
import urllib.parse
from collections.abc import Collection
from typing import Any

#: Seconds each network probe may take.
PROBE_TIMEOUT_S = 3.0

_METADATA_SERVER = ("169.254.169.254", 80)


class RemotePathError(ValueError):
    """A remote path that cannot be used from here; the message names it, the option and the fix."""


@functools.cache
def _reachable(address: tuple[str, int], timeout: float) -> str | None:
    """None when a TCP connection to ``address`` opens within ``timeout``, else why not (asked once per
    process: a pipeline checks its inputs, vocab and output). The name lookup, which has no timeout of its
    own, runs in a daemon thread given the same time."""
    answer: list[str | None] = []
    probe = threading.Thread(target=lambda: answer.append(_connect(address, timeout)), daemon=True)
    probe.start()
    probe.join(timeout + 1.0)
    return answer[0] if answer else f"no answer within {timeout:g} s (looking up {address[0]})"


def _connect(address: tuple[str, int], timeout: float) -> str | None:
    try:
        with socket.create_connection(address, timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as err:
        return err.strerror or str(err)


def _gcs_credentials_found(timeout: float) -> bool:
    """Whether Google's default credentials can be found: the environment variable, gcloud's application
    default credentials file, or a metadata server that answers (on Google Cloud)."""
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    config = os.environ.get("CLOUDSDK_CONFIG") or os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    if os.path.isfile(os.path.join(config, "application_default_credentials.json")):
        return True
    return _reachable(_METADATA_SERVER, min(timeout, 1.0)) is None


def storage_endpoint(scheme: str) -> tuple[tuple[str, int], bool]:
    """The ``(host, port)`` that the client library of ``scheme`` (``gs``, ``s3``) talks to, and whether it is
    an emulator or another store than the cloud's own: ``STORAGE_EMULATOR_HOST`` for ``gs`` (what
    ``google-cloud-storage`` honours), for ``s3`` Beam's ``--s3_endpoint_url`` (:func:`set_s3_endpoint_url`),
    else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, else an ``endpoint_url`` of the AWS config file (what
    boto3 honours, :func:`_configured_s3_endpoint`); else the cloud's endpoint."""
    if scheme == "gs":
        url = os.environ.get("STORAGE_EMULATOR_HOST")
        default = ("storage.googleapis.com", 443)
    else:
        url = _S3_ENDPOINT_URL[0] or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        url = url or _configured_s3_endpoint()
        default = ("s3.amazonaws.com", 443)
    if not url:
        return default, False
    parsed = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    return (parsed.hostname or "localhost", parsed.port or (443 if parsed.scheme == "https" else 80)), True


@functools.cache
def _configured_s3_endpoint() -> str | None:
    """The S3 endpoint an AWS config file names (``endpoint_url`` of the profile or of its ``services`` section:
    a MinIO or other S3-compatible store), as a client botocore makes resolves it; None for AWS's own endpoints,
    or without botocore. Without it, a store configured there was probed at s3.amazonaws.com, which a private
    network may not reach, and refused although the client would have used it."""
    try:
        import botocore.session

        client = botocore.session.get_session().create_client("s3", region_name="us-east-1")
        url = client.meta.endpoint_url
    except Exception:  # no botocore (no s3 client installed), or a config it cannot read: the cloud's endpoint
        return None
    host = urllib.parse.urlsplit(url).hostname or ""
    return None if host.endswith("amazonaws.com") else url


#: Beam's ``--s3_endpoint_url`` of the running command (None: boto3's own choice).
_S3_ENDPOINT_URL: list[str | None] = [None]


def set_s3_endpoint_url(url: str | None) -> None:
    """Probe ``url`` (Beam's ``--s3_endpoint_url``) for ``s3://`` paths instead of the environment's endpoint."""
    _S3_ENDPOINT_URL[0] = url or None


def use_filesystem_options(options) -> None:
    """Hand a command's Beam ``PipelineOptions`` (``--s3_endpoint_url``, ``--s3_region_name``, ``--project``...)
    to Beam's file systems before anything is listed or read: ``FileSystems`` gets them only when a pipeline is
    built, and Beam's S3 file system refuses to start without them. The probe uses the same S3 endpoint."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import S3Options

    FileSystems.set_options(options)
    set_s3_endpoint_url(options.view_as(S3Options).s3_endpoint_url)
    _share_s3_clients()
    _share_gcs_clients()
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        _no_credentials_search()


#: The environment variables that choose which storage server a client library talks to (an emulator, an
#: S3-compatible store): what :func:`storage_endpoint` reads. No credentials among them.
ENDPOINT_VARIABLES = ("STORAGE_EMULATOR_HOST", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """What a worker process on another runner's machine (Dask's) needs to reach the same store as the
    command: the run's Beam options as Beam ships them to its own SDK workers (``get_all_options``, rebuilt
    with ``PipelineOptions.from_dictionary``: ``--s3_endpoint_url``, ``--s3_region_name``, ``--project``...)
    and the command's :data:`ENDPOINT_VARIABLES` that are set. Credentials are not shipped (they would cross
    the scheduler's connection): a worker finds its own, as on Dataflow, or Beam's ``--s3_access_key_id`` /
    ``--s3_secret_access_key`` options carry them."""

    options: tuple[tuple[str, Any], ...]
    environment: tuple[tuple[str, str], ...]


def worker_settings(options, runner_options: Collection[str] = ()) -> WorkerSettings:
    """The :class:`WorkerSettings` of a command run with Beam ``options``, from this process, but the names
    in ``runner_options`` (the runner's own settings, such as the scheduler's address: a worker needs none)."""
    given = {k: v for k, v in options.get_all_options(drop_default=True).items() if k not in runner_options}
    environment = tuple((name, os.environ[name]) for name in ENDPOINT_VARIABLES if os.environ.get(name))
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
            _OWN_ENDPOINTS.update((name, os.environ.get(name)) for name in ENDPOINT_VARIABLES)
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


def _aws_credentials_found() -> bool:
    """Whether boto3's default chain finds credentials (environment, shared files, instance metadata: at most
    about 2 s there, botocore's own timeout and attempts)."""
    import botocore.session

    try:
        return botocore.session.get_session().get_credentials() is not None
    except Exception:  # a malformed config file: the run itself would fail the same way
        return False


def _credentials_message(path: str, option: str, scheme: str) -> str:
    if scheme == "gs":
        return (
            f"{option} {path}: no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS unset, no "
            "gcloud application-default credentials, no metadata server); run `gcloud auth application-default "
            "login` or set GOOGLE_APPLICATION_CREDENTIALS, or use a local path"
        )
    return (
        f"{option} {path}: no AWS credentials found (AWS_ACCESS_KEY_ID unset, no ~/.aws/credentials profile, no "
        "instance role); run `aws configure` or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use a local path"
    )


def check_reachable(path: str, option: str = "", *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, within ``timeout`` seconds, a ``gs://`` or ``s3://`` ``path`` whose storage endpoint (the one the
    client library will use: :func:`storage_endpoint`) does not accept a TCP connection; other paths pass.
    Without it a client retries for a long time first: gcsfs 35-50 s, Beam's GCS client about 120 s.
    Standard library only (``train`` calls it before fsspec reads a bucket).

    Raises:
        RemotePathError: the endpoint does not answer; the message names ``option`` (when given), the path,
            the endpoint and the fix.
    """
    scheme = path.split("://")[0] if "://" in path else ""
    if scheme not in ("gs", "s3"):
        return
    endpoint, custom = storage_endpoint(scheme)
    why = _reachable(endpoint, timeout)
    if why:
        where = f"{endpoint[0]}:{endpoint[1]}" if custom else endpoint[0]
        named = f"{option} {path}" if option else path
        raise RemotePathError(
            f"{named}: cannot reach {where} ({why}); check the network or proxy"
            + (" and that the storage emulator or endpoint is running" if custom else "")
            + ", or use a local path"
        )


def check_remote_path(path: str, option: str, *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, within seconds, a remote ``path`` given as ``option`` that cannot be reached. Local paths and
    schemes other than ``gs://`` and ``s3://`` only get the "filesystem installed" check. The endpoint probed
    is the one the client library will use (:func:`storage_endpoint`: an emulator or an S3-compatible store
    where one is set); an emulator of GCS needs no credentials (the client connects anonymously).

    Raises:
        RemotePathError: no Beam filesystem for the scheme, no credentials, or the storage endpoint does not
            answer (each with the fix).
    """
    if "://" not in path:
        return
    from apache_beam.io.filesystems import FileSystems

    scheme = path.split("://")[0]
    try:
        FileSystems.get_filesystem(path)
    except ValueError:
        extra = {"gs": " (pip install 'apache-beam[gcp]')", "s3": " (pip install 'apache-beam[aws]')"}.get(scheme, "")
        raise RemotePathError(
            f"{option} {path}: no filesystem for {scheme}:// is installed{extra}; install it or use a local path"
        ) from None
    if scheme not in ("gs", "s3"):
        return
    _, custom = storage_endpoint(scheme)
    found = (custom or _gcs_credentials_found(timeout)) if scheme == "gs" else _aws_credentials_found()
    if not found:
        raise RemotePathError(_credentials_message(path, option, scheme))
    check_reachable(path, option, timeout=timeout)
    bucket = path.split("://", 1)[1].split("/", 1)[0]
    if bucket and not _bucket_exists(scheme, bucket):
        make = f"gcloud storage buckets create gs://{bucket}" if scheme == "gs" else f"aws s3 mb s3://{bucket}"
        raise RemotePathError(
            f"{option} {path}: the bucket {bucket} does not exist; check the name, or create it ({make})"
        )


@functools.cache
def _bucket_exists(scheme: str, bucket: str) -> bool:
    """False only when the store answers that ``bucket`` does not exist (asked once per process); any other
    answer (it exists, access denied, an error) is True: the operation itself then reports it."""
    try:
        if scheme == "gs":
            from apache_beam.io.gcp import gcsio

            return gcsio.GcsIO().get_bucket(bucket) is not None  # Beam's client: None for NotFound
        import boto3
        import botocore.exceptions

        try:
            boto3.client("s3", endpoint_url=_S3_ENDPOINT_URL[0]).head_bucket(Bucket=bucket)
        except botocore.exceptions.ClientError as err:
            return err.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket")
        return True
    except Exception:  # a client that cannot ask (an old Beam, a stand-in): let the operation speak
        return True


__all__ = [
    "ENDPOINT_VARIABLES",
    "PROBE_TIMEOUT_S",
    "RemotePathError",
    "WorkerSettings",
    "apply_worker_settings",
    "check_remote_path",
    "set_s3_endpoint_url",
    "storage_endpoint",
    "use_filesystem_options",
    "worker_settings",
]
