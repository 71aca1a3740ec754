"""One storage layer for local folders, ``gs://`` and ``s3://``: the rule of what is remote, the operations the
commands do themselves (open, exists, list, an object's version, read and write a manifest; make a folder, list
its files, copy, rename, delete, remove a folder), the shard cache's paths, and a probe that refuses an
unreachable store in seconds.

In: a path (a local path, ``file:///...``, or a ``gs://`` / ``s3://`` URL). Out: bytes, file objects, manifests,
names. Entry points: :func:`is_remote` (the one rule), :func:`open`, :func:`exists`, :func:`listdir`,
:func:`list_files`, :func:`object_version`, :func:`read_manifest`, :func:`write_manifest`, :func:`mkdirs`,
:func:`copy`, :func:`rename`, :func:`delete`, :func:`remove_tree`, :class:`Files` (``atomic``'s file operations
over this layer), :func:`check_remote_path`. The client, its errors and the file operations live in
``core/storage_client.py``, the rule in ``core/urls.py``; this module re-exports every name of both.

Every command (make-shards, train, inspect, evaluate) goes through this module for what its own process reads or
writes, on one client library: ``fsspec`` (``gcsfs`` for ``gs://``, ``s3fs`` for ``s3://``; the ``cloud``
extra), which honours what users set for it: ``STORAGE_EMULATOR_HOST`` and Google's default credentials,
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_PROFILE`` and the rest of botocore's configuration. For
make-shards that is its driver's work: the checks before a run, the staging folder, the publish and its
journal, reading back the manifests its pipeline wrote, the clean-up. What a Beam pipeline reads and writes
inside its transforms, on its workers (the inputs, bucket files, shards, vocab and manifest in the staging
folder), stays on Beam's ``FileSystems``: a worker of Dataflow or Dask has Beam's clients and the run's Beam
options (``--s3_endpoint_url``...), which Beam hands it, not this layer's (its client patches live in
``pipeline/beam/filesystems.py``). Local paths use the standard library.

The probe (:func:`check_reachable`, :func:`check_remote_path`) is standard library and botocore's credential
chain only (no google imports: they are what hangs without network): without it a client retries for a long
time before it fails (gcsfs 35-50 s, Beam's GCS client about 120 s).
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import os
import socket
import threading
import urllib.parse
from typing import IO, Any

from bertprep.core import atomic, strict_json
from bertprep.core.paths import web_url_message
from bertprep.core.storage_client import (
    _S3_ENDPOINT_URL,
    RemotePathError,
    StorageError,
    client_error,
    copy,
    delete,
    filesystem,
    list_files,
    mkdirs,
    remove_tree,
    rename,
    set_s3_endpoint_url,
)
from bertprep.core.urls import LOCAL_SCHEMES, bucket_of, is_remote, join, local_path, scheme


def open(path: str, mode: str = "rb") -> IO[Any]:
    """A file object of ``path`` (local or remote) in ``mode`` (``rb``, ``wb``, ``r``, ``w``).

    Raises:
        FileNotFoundError: reading an object or file that does not exist.
        StorageError: a remote client's error (named, one line).
    """
    if not is_remote(path):
        return builtins.open(local_path(path), mode)
    fs, inner = filesystem(path)
    try:
        return fs.open(inner, mode)
    except FileNotFoundError:
        raise
    except Exception as err:
        raise client_error(path, err, "write" if "w" in mode else "read") from None


def read_bytes(path: str) -> bytes:
    """The bytes of ``path``. Raises ``FileNotFoundError`` or :class:`StorageError` as :func:`open`."""
    if not is_remote(path):
        with builtins.open(local_path(path), "rb") as f:
            return f.read()
    fs, inner = filesystem(path)
    try:
        return fs.cat_file(inner)
    except FileNotFoundError:
        raise
    except Exception as err:
        raise client_error(path, err) from None


def exists(path: str) -> bool:
    """Whether the file, folder or object ``path`` exists (asked afresh, not from the client's listing cache: an
    object that a pipeline's worker wrote or deleted since is seen).

    Raises:
        StorageError: the store cannot be asked (named, one line).
    """
    if not is_remote(path):
        return os.path.exists(local_path(path))
    fs, inner = filesystem(path)
    try:
        fs.invalidate_cache(inner)
        return bool(fs.exists(inner))
    except Exception as err:
        raise client_error(path, err, "ask for") from None


def listdir(path: str) -> list[str]:
    """The names (not paths) of the entries directly under the folder or prefix ``path``, sorted; ``[]`` when it
    does not exist.

    Raises:
        StorageError: the store cannot be asked.
    """
    if not is_remote(path):
        folder = local_path(path)
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    fs, inner = filesystem(path)
    try:
        entries = fs.ls(inner, detail=False, refresh=True)
    except FileNotFoundError:
        return []
    except Exception as err:
        raise client_error(path, err, "list") from None
    return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)


def object_version(path: str) -> str | None:
    """What changes whenever the object ``path`` is written again: a GCS object's generation, an S3 object's
    ETag (and version id where the bucket keeps versions), a local file's size and mtime in ns; None when the
    client reports none.

    Raises:
        FileNotFoundError: no such object.
        StorageError: the store cannot be asked.
    """
    if not is_remote(path):
        stat = os.stat(local_path(path))
        return f"{stat.st_size}:{stat.st_mtime_ns}"
    fs, inner = filesystem(path)
    try:
        fs.invalidate_cache(inner)
        info = fs.info(inner)
    except FileNotFoundError:
        raise
    except Exception as err:
        raise client_error(path, err, "ask for") from None
    return version_of(info)


def version_of(info: dict[str, Any]) -> str | None:
    """The version (:func:`object_version`) in an fsspec ``info`` / ``ls(detail=True)`` entry, or a remote file
    object's ``details``: gcsfs's ``generation``, s3fs's ``ETag`` (and ``VersionId``); None when it has none."""
    parts = [str(info[k]).strip('"') for k in ("generation", "ETag", "VersionId") if info.get(k)]
    return ":".join(parts) or None


def list_versions(folder: str) -> dict[str, str | None]:
    """``name -> version`` (:func:`version_of`) of every object directly under the remote ``folder``, in one
    listing request (asked afresh, not from the client's listing cache); ``{}`` when it holds none.

    Raises:
        StorageError: the store cannot be asked.
    """
    fs, inner = filesystem(folder)
    try:
        entries = fs.ls(inner, detail=True, refresh=True)
    except FileNotFoundError:
        return {}
    except Exception as err:
        raise client_error(folder, err, "list") from None
    return {e["name"].rstrip("/").rsplit("/", 1)[-1]: version_of(e) for e in entries if e.get("type") == "file"}


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` as ``path``: a local file through a temporary name renamed into place (``atomic``), one
    object upload on a store (atomic there).

    Raises:
        StorageError: the store refused the write (named, one line).
    """
    if not is_remote(path):
        atomic.write_bytes(local_path(path), data)
        return
    fs, inner = filesystem(path)
    try:
        fs.pipe_file(inner, data)
    except Exception as err:
        raise client_error(path, err, "write") from None


class Files(atomic.LocalFiles):
    """``atomic``'s file operations (:class:`atomic.LocalFiles`' methods) over this layer, on local folders and
    stores alike: what a durable write (``atomic.write_bytes``) or the removal of dead runs' staging folders
    (``atomic.remove_stale_staging``) is handed for a path that may be remote."""

    @staticmethod
    def create(path: str) -> IO[bytes]:
        return open(path, "wb")

    @staticmethod
    def rename(src: str, dst: str) -> None:
        rename([src], [dst])

    @staticmethod
    def delete(path: str) -> None:
        delete([path])

    @staticmethod
    def exists(path: str) -> bool:
        return exists(path)

    @staticmethod
    def join(directory: str, name: str) -> str:
        return join(directory, name)

    @staticmethod
    def names(directory: str, prefix: str) -> list[str]:
        """The entries (files and folders) directly under ``directory`` whose names start with ``prefix``."""
        return [n for n in listdir(directory) if n.startswith(prefix)]

    @staticmethod
    def remove_tree(path: str) -> None:
        remove_tree(path)


# ------------------------------------------------------------------------------------------ manifests


def read_manifest(shard_dir: str) -> dict[str, Any]:
    """The checked ``manifest.json`` of the shard directory ``shard_dir``, local or in a bucket: valid JSON, a
    manifest, of this format version (``schema.parse_manifest``); in a local directory every shard file it lists
    must also exist (a bucket's are checked as they are fetched).

    Raises:
        FileNotFoundError: a local directory without a manifest.
        StorageError: the bucket or its manifest does not exist or cannot be read (named, with the fix).
        ValueError: not a manifest of this format, or (local) a listed shard file is missing.
    """
    from bertprep.core import schema  # (here: pyarrow, which the rule and the probe do without)

    url = join(shard_dir, schema.MANIFEST_NAME)
    if not is_remote(shard_dir):
        folder = local_path(shard_dir)
        if not os.path.exists(os.path.join(folder, schema.MANIFEST_NAME)):
            raise FileNotFoundError(
                f"{shard_dir}: no {schema.MANIFEST_NAME}; this is not a finished shard directory "
                "(make-shards writes the manifest last; run it again to completion)"
            )
        manifest = schema.parse_manifest(read_bytes(url), url)
        for shard in manifest["shards"]:
            if not os.path.exists(os.path.join(folder, shard["file"])):
                raise ValueError(f"{shard_dir}: manifest lists {shard['file']} but the file is missing")
        return manifest
    check_reachable(shard_dir)  # in seconds, not after the client's retries
    try:
        data = read_bytes(url)
    except FileNotFoundError:
        raise StorageError(
            f"{url} does not exist: {shard_dir} is not a finished shard directory (check the bucket and folder "
            "name; make-shards writes the manifest last)"
        ) from None
    return schema.parse_manifest(data, url)


def write_manifest(shard_dir: str, manifest: dict[str, Any]) -> str:
    """Write ``manifest`` as ``shard_dir/manifest.json`` (sorted keys, indent 2: the bytes every writer of the
    project makes), whole or not at all (:func:`write_bytes`). Returns its path."""
    from bertprep.core import schema  # (here: pyarrow, which the rule and the probe do without)

    path = join(shard_dir, schema.MANIFEST_NAME)
    write_bytes(path, strict_json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    return path


# ------------------------------------------------------------------------------------------ the shard cache's paths

#: The environment variable that moves train's shard cache (``--cache-dir`` does it for one run).
CACHE_ENV = "XDG_CACHE_HOME"


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/bertprep/shards``, or ``~/.cache/bertprep/shards`` without it."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "bertprep", "shards")


def cache_folder(cache_dir: str, url: str) -> str:
    """The folder of ``cache_dir`` that mirrors the shard directory ``url``: ``<16 hex of sha256(url)>``."""
    return os.path.join(cache_dir, hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:16])


def cached_manifest(shard_dir: str, cache_dir: str | None = None) -> str:
    """The path of the copy of the bucket directory ``shard_dir``'s manifest that the last start of a run reading it
    through ``cache_dir`` (default :func:`default_cache_dir`) kept there; it may not exist."""
    from bertprep.core import schema  # (here: pyarrow, which the rule and the probe do without)

    return os.path.join(
        cache_folder(os.path.abspath(cache_dir or default_cache_dir()), shard_dir), schema.MANIFEST_NAME
    )


# ------------------------------------------------------------------------------------------ the probe

#: Seconds each network probe may take.
PROBE_TIMEOUT_S = 3.0

_METADATA_SERVER = ("169.254.169.254", 80)

#: The environment variables that choose which storage server a client library talks to (an emulator, an
#: S3-compatible store): what :func:`storage_endpoint` reads. No credentials among them.
ENDPOINT_VARIABLES = ("STORAGE_EMULATOR_HOST", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


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


def answers(address: tuple[str, int], timeout: float) -> str | None:
    """None when a TCP connection to ``address`` opens within ``timeout`` seconds now (not the process's cached
    answer of :func:`check_reachable`), else why not."""
    return _connect(address, timeout)


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


def storage_endpoint(url_scheme: str) -> tuple[tuple[str, int], bool]:
    """The ``(host, port)`` that the client library of ``url_scheme`` (``gs``, ``s3``) talks to, and whether it is
    an emulator or another store than the cloud's own: ``STORAGE_EMULATOR_HOST`` for ``gs`` (what
    ``google-cloud-storage`` and gcsfs honour), for ``s3`` Beam's ``--s3_endpoint_url`` (:func:`set_s3_endpoint_url`),
    else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, else an ``endpoint_url`` of the AWS config file (what
    boto3 honours, :func:`_configured_s3_endpoint`); else the cloud's endpoint."""
    if url_scheme == "gs":
        url = os.environ.get("STORAGE_EMULATOR_HOST")
        default = ("storage.googleapis.com", 443)
    else:
        url = _S3_ENDPOINT_URL[0] or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        url = url or _configured_s3_endpoint()
        default = ("s3.amazonaws.com", 443)
    if not url:
        return default, False
    parsed = urllib.parse.urlsplit(url if scheme(url) else "http://" + url)
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


def _aws_credentials_found() -> bool:
    """Whether boto3's default chain finds credentials (environment, shared files, instance metadata: at most
    about 2 s there, botocore's own timeout and attempts)."""
    try:
        import botocore.session

        return botocore.session.get_session().get_credentials() is not None
    except Exception:  # a malformed config file (the run itself would fail the same way), or no botocore
        return False


def _credentials_message(path: str, option: str, url_scheme: str) -> str:
    if url_scheme == "gs":
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

    Raises:
        RemotePathError: the endpoint does not answer; the message names ``option`` (when given), the path,
            the endpoint and the fix.
    """
    url_scheme = scheme(path)
    if url_scheme not in ("gs", "s3"):
        return
    endpoint, custom = storage_endpoint(url_scheme)
    why = _reachable(endpoint, timeout)
    if why:
        where = f"{endpoint[0]}:{endpoint[1]}" if custom else endpoint[0]
        named = f"{option} {path}" if option else path
        raise RemotePathError(
            f"{named}: cannot reach {where} ({why}); check the network or proxy"
            + (" and that the storage emulator or endpoint is running" if custom else "")
            + ", or use a local path"
        )


def check_remote_path(
    path: str, option: str, *, clients: tuple[str, ...] = ("fsspec",), timeout: float = PROBE_TIMEOUT_S
) -> None:
    """Refuse, within seconds, a remote ``path`` given as ``option`` that cannot be used: no client installed
    for its scheme (``clients``: ``fsspec``, this layer's, and/or ``beam``, a pipeline's ``FileSystems``), no
    credentials, an endpoint that does not answer (:func:`check_reachable`), or a bucket that does not exist.
    Local paths pass; schemes other than ``gs://`` and ``s3://`` get only the client check. An emulator of GCS
    needs no credentials (the client connects anonymously).

    Raises:
        RemotePathError: no client, no credentials, no answer, or no such bucket (each with the fix).
    """
    if not is_remote(path):
        return
    url_scheme = scheme(path)
    for client in clients:
        _check_client(path, option, url_scheme, client)
    if url_scheme not in ("gs", "s3"):
        return
    _, custom = storage_endpoint(url_scheme)
    found = (custom or _gcs_credentials_found(timeout)) if url_scheme == "gs" else _aws_credentials_found()
    if not found:
        raise RemotePathError(_credentials_message(path, option, url_scheme))
    check_reachable(path, option, timeout=timeout)
    bucket = bucket_of(path)
    if bucket and not _bucket_exists(url_scheme, bucket):
        make = f"gcloud storage buckets create gs://{bucket}" if url_scheme == "gs" else f"aws s3 mb s3://{bucket}"
        raise RemotePathError(
            f"{option} {path}: the bucket {bucket} does not exist; check the name, or create it ({make})"
        )


def beam_read_refusal(path: str, what: str) -> str | None:
    """The one-line message refusing ``path``, read as ``what`` (e.g. ``"input"``) through Beam's
    ``FileSystems``, before anything reads it; None when it may be read. Refused: a web URL
    (:func:`bertprep.core.paths.web_url_message`) and a remote path :func:`check_remote_path` refuses (checked
    within seconds, not the client's minutes of retries without network).
    """
    url = web_url_message(path, what, gs_ok=True)
    if url:
        return url
    try:
        check_remote_path(path, what, clients=("beam",))
    except RemotePathError as err:
        return str(err)
    return None


#: What installs each client of a scheme (the message of a missing one).
_EXTRAS = {
    ("beam", "gs"): "apache-beam[gcp]",
    ("beam", "s3"): "apache-beam[aws]",
    ("fsspec", "gs"): "bertprep[cloud]",
    ("fsspec", "s3"): "bertprep[cloud]",
}


def _check_client(path: str, option: str, url_scheme: str, client: str) -> None:
    """Refuse ``path`` when ``client`` (``beam`` or ``fsspec``) has no file system for its scheme installed."""
    try:
        if client == "beam":
            from apache_beam.io.filesystems import FileSystems

            FileSystems.get_filesystem(path)
        else:
            import fsspec

            fsspec.get_filesystem_class(url_scheme)
    except (ValueError, ImportError):
        extra = _EXTRAS.get((client, url_scheme))
        raise RemotePathError(
            f"{option} {path}: no filesystem for {url_scheme}:// is installed"
            + (f" (pip install '{extra}')" if extra else "")
            + "; install it or use a local path"
        ) from None


@functools.cache
def _bucket_exists(url_scheme: str, bucket: str) -> bool:
    """False only when the store answers that ``bucket`` does not exist (asked once per process); any other
    answer (it exists, access denied, an error, no client installed) is True: the operation itself then
    reports it."""
    try:
        fs, _ = filesystem(f"{url_scheme}://{bucket}")
        return bool(fs.exists(bucket))
    except Exception:  # a client that cannot ask: let the operation speak
        return True


__all__ = [
    "CACHE_ENV",
    "ENDPOINT_VARIABLES",
    "LOCAL_SCHEMES",
    "PROBE_TIMEOUT_S",
    "Files",
    "RemotePathError",
    "StorageError",
    "answers",
    "beam_read_refusal",
    "bucket_of",
    "cache_folder",
    "cached_manifest",
    "check_reachable",
    "check_remote_path",
    "client_error",
    "copy",
    "default_cache_dir",
    "delete",
    "exists",
    "filesystem",
    "is_remote",
    "join",
    "list_files",
    "list_versions",
    "listdir",
    "local_path",
    "mkdirs",
    "object_version",
    "open",
    "read_bytes",
    "read_manifest",
    "remove_tree",
    "rename",
    "scheme",
    "set_s3_endpoint_url",
    "storage_endpoint",
    "version_of",
    "write_bytes",
    "write_manifest",
]
