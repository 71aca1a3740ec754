"""The storage layer's client and its file operations: part of the storage layer (``core/storage.py``
re-exports every name), in a module of its own so that the layer stays one readable file per concern.

In: a path (a local path, ``file:///...``, or a ``gs://`` / ``s3://`` URL). Out: the fsspec file system of a
remote path (:func:`filesystem`: ``gcsfs`` for ``gs://``, ``s3fs`` for ``s3://``), the layer's one-line errors
(:class:`StorageError`, :class:`RemotePathError`, :func:`client_error`), and what a command's own process does to
a folder: :func:`mkdirs`, :func:`list_files`, :func:`copy`, :func:`rename`, :func:`delete`, :func:`remove_tree`.
Local paths use the standard library; nothing here imports a client library until a remote path needs it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
from collections.abc import Sequence
from typing import Any

from bertprep.core import atomic
from bertprep.core.urls import is_remote, join, local_path, scheme

# ------------------------------------------------------------------------------------------ errors


class StorageError(ValueError):
    """A path that cannot be used or an object that cannot be read or written: the one-line message names the
    object and what to do."""


class RemotePathError(StorageError):
    """A remote path that cannot be used from here (no client, no credentials, no answer, no bucket); the message
    names it, the option and the fix."""


def client_error(url: str, err: BaseException, doing: str = "read") -> StorageError:
    """The one line for a client library's own error (HTTP, credentials, network) on ``url``."""
    first = str(err).splitlines()[0] if str(err) else ""
    return StorageError(
        f"cannot {doing} {url}: {type(err).__name__}: {first}; check the credentials and network "
        "(or STORAGE_EMULATOR_HOST / AWS_ENDPOINT_URL_S3 for an emulator)"
    )


# ------------------------------------------------------------------------------------------ the client


def filesystem(url: str) -> tuple[Any, str]:
    """``(fsspec file system, path in it)`` of the remote ``url``.

    Raises:
        StorageError: the protocol's client is not installed (named, with the extra that brings it).
    """
    try:
        import fsspec

        endpoint = {"endpoint_url": _S3_ENDPOINT_URL[0]} if scheme(url) == "s3" and _S3_ENDPOINT_URL[0] else {}
        fs, path = fsspec.core.url_to_fs(url, **endpoint)
    except ImportError as err:
        raise StorageError(
            f"{url}: reading or writing a bucket needs {err.name or 'its fsspec client'} "
            "(pip install 'bertprep[cloud]': gcsfs for gs://, s3fs for s3://)"
        ) from None
    _quiet_client_logs()
    return fs, path


class _TracebacksAsDebug(logging.Filter):
    """Log a client's own error records (``logger.exception``: gcsfs's "out of retries on exception", with the
    aiohttp traceback, once per request that gave up: ten of them above the one line of a train whose store went
    away) at DEBUG, without the traceback: the layer raises the error itself, in one line that names the object.
    Other records pass as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.exc_info:
            first = str(record.exc_info[1]).splitlines()[0] if record.exc_info[1] is not None else ""
            record.msg, record.args = f"{record.getMessage()} ({type(record.exc_info[1]).__name__}: {first})", ()
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


@functools.cache
def _quiet_client_logs() -> None:
    """gcsfs asks the storage-control API, which no emulator serves, for each bucket's layout and warns each time
    it gets no answer (it then reads the bucket as any other): those warnings only at ERROR. Its tracebacks of a
    request that gave up are DEBUG lines (:class:`_TracebacksAsDebug`)."""
    logging.getLogger("gcsfs.extended_gcsfs").setLevel(logging.ERROR)
    logging.getLogger("gcsfs").addFilter(_TracebacksAsDebug())


#: Beam's ``--s3_endpoint_url`` of the running command (None: boto3's own choice).
_S3_ENDPOINT_URL: list[str | None] = [None]


def set_s3_endpoint_url(url: str | None) -> None:
    """Use ``url`` (Beam's ``--s3_endpoint_url``) for ``s3://`` paths instead of the environment's endpoint: the
    probe asks it, and this layer's S3 client (s3fs) talks to it."""
    _S3_ENDPOINT_URL[0] = url or None


# ------------------------------------------------------------------------------------------ files and folders
#
# What a command's own process does to an output folder: make it, list it, move, copy and delete files in it
# (make-shards' staging folder, its publish and clean-up). Local: the standard library; a store: fsspec, where
# a folder is only a name prefix and a rename is a copy and a delete.


def mkdirs(path: str) -> None:
    """Create the local folder ``path`` and its parents (one that exists is fine); nothing on an object store,
    where a folder is a name prefix that exists once an object is written under it (as in Beam's GCS and S3
    file systems).

    Raises:
        OSError: the local folder cannot be made (a file in the way, no permission, a read-only disk).
    """
    if not is_remote(path):
        os.makedirs(local_path(path), exist_ok=True)


def list_files(folder: str, *, recursive: bool = False) -> list[str]:
    """The paths (``join(folder, name)``) of the files or objects directly under ``folder`` (at any depth with
    ``recursive``; then ``name`` has ``/`` between its parts), sorted; sub-folders themselves are not listed.
    ``[]`` when ``folder`` does not exist. Asked afresh, not from the client's listing cache.

    Raises:
        StorageError: the store cannot be asked (named, one line).
    """
    if not is_remote(folder):
        root = local_path(folder)
        if not os.path.isdir(root):
            return []
        if recursive:
            names = [os.path.relpath(os.path.join(d, n), root) for d, _, files in os.walk(root) for n in files]
        else:
            names = [n for n in os.listdir(root) if os.path.isfile(os.path.join(root, n))]
        return sorted(join(folder, *name.split(os.sep)) for name in names)
    fs, inner = filesystem(folder)
    base = inner.rstrip("/") + "/"
    try:
        fs.invalidate_cache(inner)
        found = fs.find(base, maxdepth=None if recursive else 1, withdirs=False)
    except FileNotFoundError:
        return []
    except Exception as err:
        raise client_error(folder, err, "list") from None
    return sorted(join(folder, p[len(base) :]) for p in found if p.startswith(base))


def copy(sources: Sequence[str], destinations: Sequence[str]) -> None:
    """Copy each file of ``sources`` to the path at the same place in ``destinations``, replacing what is there
    (both local, or both in one store: there a copy on the server, no bytes through this process).

    Raises:
        FileNotFoundError: a source does not exist.
        ValueError: the lists differ in length, or mix local and remote paths.
        StorageError: the store refused (named, one line).
    """
    pairs = _pairs(sources, destinations)
    if not pairs or not is_remote(pairs[0][0]):
        for src, dst in pairs:
            shutil.copyfile(local_path(src), local_path(dst))
        return
    fs, _ = filesystem(pairs[0][0])
    try:
        fs.copy([filesystem(s)[1] for s, _ in pairs], [filesystem(d)[1] for _, d in pairs])
    except FileNotFoundError:
        raise
    except Exception as err:
        raise client_error(pairs[0][0], err, "copy") from None


def rename(sources: Sequence[str], destinations: Sequence[str]) -> None:
    """Move each file of ``sources`` to the path at the same place in ``destinations``, replacing what is there.

    Locally ``os.replace`` (``atomic.LocalFiles.rename``: atomic per file, POSIX). An object store has no rename:
    every object is copied on the server (:func:`copy`), then the sources are deleted (as Beam's
    ``FileSystems.rename`` does on GCS and S3), atomic per object, not for the list: a caller that may be killed
    in between keeps a journal (make-shards' publish does).

    Raises:
        FileNotFoundError: a source does not exist.
        ValueError: the lists differ in length, or mix local and remote paths.
        OSError: a local move failed (no permission, a folder missing).
        StorageError: the store refused (named, one line).
    """
    pairs = _pairs(sources, destinations)
    if not pairs or not is_remote(pairs[0][0]):
        for src, dst in pairs:
            atomic.LocalFiles.rename(local_path(src), local_path(dst))  # os.replace: atomic's, the one place
        return
    copy([s for s, _ in pairs], [d for _, d in pairs])
    delete([s for s, _ in pairs])


def _pairs(sources: Sequence[str], destinations: Sequence[str]) -> list[tuple[str, str]]:
    if len(sources) != len(destinations):
        raise ValueError(f"{len(sources)} sources but {len(destinations)} destinations")
    pairs = list(zip(sources, destinations, strict=True))
    where = {(is_remote(s), scheme(s)) for s, _ in pairs} | {(is_remote(d), scheme(d)) for _, d in pairs}
    if len({remote for remote, _ in where}) > 1 or len({s for remote, s in where if remote}) > 1:
        raise ValueError(f"cannot move or copy between local paths and stores, or two stores: {pairs[0]}")
    return pairs


def delete(paths: Sequence[str]) -> None:
    """Delete the files or objects ``paths``; one that is already gone is no error (a step done before a kill,
    done again). A folder and what it holds: :func:`remove_tree`.

    Raises:
        OSError: a local file cannot be deleted (no permission; a folder).
        StorageError: the store refused (named, one line).
    """
    remote = [p for p in paths if is_remote(p)]
    for path in (p for p in paths if not is_remote(p)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(local_path(path))
    if not remote:
        return
    fs, _ = filesystem(remote[0])
    try:
        fs.rm([filesystem(p)[1] for p in remote])
    except FileNotFoundError:
        pass
    except Exception as err:
        raise client_error(remote[0], err, "delete") from None
    fs.invalidate_cache()


def remove_tree(path: str) -> None:
    """Delete the folder ``path`` and everything under it (on a store: every object whose name starts with
    ``path/``); nothing when it does not exist. A bucket itself is never deleted.

    Raises:
        ValueError: ``path`` names a whole bucket.
        OSError: a local file or folder cannot be deleted.
        StorageError: the store refused (named, one line).
    """
    if not is_remote(path):
        folder = local_path(path)
        if os.path.isdir(folder) and not os.path.islink(folder):
            shutil.rmtree(folder)
        elif os.path.lexists(folder):
            os.remove(folder)
        return
    fs, inner = filesystem(path)
    if "/" not in inner.strip("/"):
        raise ValueError(f"{path} is a whole bucket: not deleting it")
    try:
        fs.rm(inner.rstrip("/") + "/", recursive=True)
    except FileNotFoundError:
        pass
    except Exception as err:
        raise client_error(path, err, "delete") from None
    fs.invalidate_cache()


__all__ = [
    "RemotePathError",
    "StorageError",
    "client_error",
    "copy",
    "delete",
    "filesystem",
    "list_files",
    "mkdirs",
    "remove_tree",
    "rename",
    "set_s3_endpoint_url",
]
