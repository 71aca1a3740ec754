"""Durable writes, written once: files and directories that a reader never sees half of (standard library only).

Every write of bertprep that must be all or nothing goes through this module, in both halls: ``pipeline/``
(the vocab files, the shard store's manifest and staging folders, the publish journal) and ``bert_model/``
(checkpoints, exported models, fine-tuning runs, features, predictions). It imports neither torch nor Beam,
so either side may import it without crossing the boundary.

* **fsync**: :func:`fsync_file`, :func:`write_text_synced`;
* **names**: :func:`temporary_path` (a file written beside its target, ``.<name>.<pid>.<8 hex>.tmp``) and
  :func:`staging_name` (a staging folder, ``.bertprep-<kind>-<host>-<pid>-<8 hex>``: host and process id say
  whether the run that made it is alive; hidden, so globs and directory inputs skip it);
* **replace a file**: :func:`atomic_file`, :func:`write_atomic`, :func:`write_bytes` (one file renamed into
  place), :func:`atomic_files` (several, the last one a commit marker);
* **replace a directory**: :func:`replace_directory` (a complete directory swapped in), :func:`write_directory`
  (text files written into a staging folder, then swapped in), :func:`finish_replace` and :func:`repair_replace`
  (its last step, and the repair of a swap that was killed);
* **replace entries**: :func:`replace_entries` (some entries of a directory replaced by a staging folder's);
* **one writer**: :func:`directory_lock` (the lock a make-shards, train or finetune run holds on its output
  directory);
* **stale staging**: :func:`pid_alive`, :func:`is_stale_staging`, :func:`remove_stale_staging` (the folders
  of runs that were killed).

A write through :func:`write_bytes` or :func:`remove_stale_staging` goes to the local disk by default; for a path
that may be remote the storage layer's ``storage.Files`` is handed in instead (make-shards' driver), or Beam's
``FileSystems`` where a pipeline's worker writes (the staged manifest): on ``gs://`` and ``s3://`` ``os.replace``
does not exist and a rename is a copy (atomic per object, not POSIX). Either is an object with the methods of
:class:`LocalFiles`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO

from bertprep.core import strict_json, urls

log = logging.getLogger("bertprep")

#: First characters of every staging folder's name (hidden: globs and directory inputs skip it).
STAGING_PREFIX = ".bertprep-"


# ------------------------------------------------------------------------------------------------ fsync


def fsync_file(path: str) -> None:
    """Flush a written file's data to the disk (``os.fsync``), e.g. before renaming its directory into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_synced(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, flushed and fsync'ed before returning."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


# ------------------------------------------------------------------------------------------------ names


def host_name() -> str:
    """This host's name as staging folders carry it (letters, digits and ``_``; other characters become ``_``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"


def temporary_path(path: str) -> str:
    """A hidden name beside ``path`` that no other process (on any host) picks:
    ``.<name>.<pid>.<random>.tmp``."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def staging_name(kind: str) -> str:
    """A new staging folder name, ``.bertprep-<kind>-<host>-<pid>-<8 hex>``: ``kind`` says which command's it is
    (``tmp`` for make-shards, ``vocab``, ``run``, ``export``, ``checkpoint``), host and process id whether the
    run that made it is still alive (:func:`is_stale_staging`)."""
    if not re.fullmatch(r"[a-z]+", kind):
        raise ValueError(f"a staging kind is lower-case letters, got {kind!r}")
    return f"{STAGING_PREFIX}{kind}-{host_name()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class StagingGone(FileNotFoundError):
    """A worker was about to write into a staging folder that its run has already removed."""


def check_staging_alive(path: str) -> None:
    """Refuse to create ``path`` when the staging folder above it (the nearest parent named
    ``.bertprep-<kind>-...``) no longer exists, on a local disk.

    A run that fails or is stopped removes its staging folder at once, but a worker of a cluster that lost its
    scheduler (Dask) goes on with the task in hand; opening a file there would create the folders again
    (Beam's local ``FileSystems.create`` and ``os.makedirs`` make the parents), leaving an output directory
    that holds only a dead run's staging folder. Object stores have no folders: nothing is checked there.

    Raises:
        StagingGone: the staging folder is gone; the message names it.
    """
    if urls.is_remote(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    while parent and os.path.dirname(parent) != parent:
        if os.path.basename(parent).startswith(STAGING_PREFIX):
            if not os.path.isdir(parent):
                raise StagingGone(
                    f"{parent}: this run's staging folder does not exist (the run stopped and removed it, or this "
                    f"worker does not see the launching machine's disk); not writing {path}"
                )
            return
        parent = os.path.dirname(parent)


def _staging_re(kind: str) -> re.Pattern:
    # the host and pid are absent from the staging folders of make-shards before it recorded them
    return re.compile(rf"^{re.escape(STAGING_PREFIX + kind)}-(?:(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-)?[0-9a-f]+$")


# ------------------------------------------------------------------------------------------ replace a file


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[str]:
    """A temporary path beside ``path`` (:func:`temporary_path`) to write to; when the ``with`` block ends
    normally it is renamed to ``path`` (replacing any old file in one step), and when it raises (or is
    interrupted) it is removed and ``path`` is left as it was."""
    with atomic_files([path]) as (tmp,):
        yield tmp


def write_atomic(path: str, write: Callable[[str], object]) -> None:
    """Call ``write(tmp_path)`` and rename the result to ``path`` (see :func:`atomic_file`)."""
    with atomic_file(path) as tmp:
        write(tmp)


@contextlib.contextmanager
def atomic_files(paths: Sequence[str]) -> Iterator[list[str]]:
    """Temporary paths beside each of ``paths`` to write to; when the ``with`` block ends normally they are
    renamed into place in the order given, so the last path appears only once every other one is in place
    (a commit marker). When the block or a rename fails, the temporary files not yet renamed are removed
    (paths already renamed stay: the marker is not among them) and the error is raised again."""
    temps = [temporary_path(p) for p in paths]
    try:
        yield temps
        for tmp, path in zip(temps, paths, strict=True):
            os.replace(tmp, path)
    finally:
        for tmp in temps:
            if os.path.exists(tmp):
                os.remove(tmp)


class LocalFiles:
    """The file operations :func:`write_bytes` and :func:`remove_stale_staging` use, on the local disk. The storage
    layer (``storage.Files``) and the shard store's workers (over Beam's ``FileSystems``) pass objects with the
    same methods."""

    @staticmethod
    def create(path: str) -> IO[bytes]:
        return open(path, "wb")

    @staticmethod
    def rename(src: str, dst: str) -> None:
        os.replace(src, dst)

    @staticmethod
    def delete(path: str) -> None:
        os.remove(path)

    @staticmethod
    def exists(path: str) -> bool:
        return os.path.lexists(path)

    @staticmethod
    def join(directory: str, name: str) -> str:
        return os.path.join(directory, name)

    @staticmethod
    def names(directory: str, prefix: str) -> list[str]:
        """The entries of ``directory`` whose names start with ``prefix`` (empty when it cannot be listed)."""
        try:
            return [n for n in os.listdir(directory) if n.startswith(prefix)]
        except OSError:
            return []

    @staticmethod
    def remove_tree(path: str) -> None:
        shutil.rmtree(path)


def write_bytes(path: str, data: bytes, files=LocalFiles) -> None:
    """Write ``data`` to a temporary name beside ``path`` (:func:`temporary_path`) and rename it to ``path``;
    on failure the temporary file is removed and ``path`` is left as it was. ``files``: the file system
    (:class:`LocalFiles`, ``storage.Files``, or the shard store's workers' over Beam's ``FileSystems``)."""
    tmp = temporary_path(path)
    try:
        with files.create(tmp) as f:
            f.write(data)
        files.rename(tmp, path)
    finally:
        with contextlib.suppress(Exception):  # the error that got here is the one to see
            if files.exists(tmp):
                files.delete(tmp)


# ------------------------------------------------------------------------------------- replace a directory


def replace_directory(
    tmp: str, final: str, *, aside: str | None = None, keep: Callable[[str], bool] | None = None
) -> None:
    """Move the complete directory ``tmp`` to ``final``. An existing ``final`` is first renamed aside (to
    ``aside``, by default ``<tmp>.old``, hidden where ``tmp`` is) and deleted only after ``tmp`` is in place
    (:func:`finish_replace`), so at every moment ``final`` is either the old directory or the new one (a crash
    in between leaves the aside folder, never a mix). Three renames at most, in this order: ``final`` aside,
    ``tmp`` to ``final``, then the kept entries.

    ``keep``: the entries of the old directory for which ``keep(name)`` holds (the user's own files in a
    directory that a command writes some files of) move into the new one before the old one is deleted. A
    caller that names ``aside`` can repair a run killed in between: with ``final`` in place, finish with
    :func:`finish_replace`; without it, rename ``aside`` back.
    """
    if not os.path.exists(final):
        os.replace(tmp, final)
        return
    old = aside or f"{tmp}.old"
    os.replace(final, old)
    os.replace(tmp, final)
    finish_replace(old, final, keep)


def finish_replace(old: str, final: str, keep: Callable[[str], bool] | None = None) -> None:
    """The last step of :func:`replace_directory`: the entries of the old directory ``old`` that ``keep``
    holds for move into ``final`` (sorted by name), then ``old`` is deleted."""
    if keep is not None:
        for name in sorted(os.listdir(old)):
            if keep(name):
                os.replace(os.path.join(old, name), os.path.join(final, name))
    shutil.rmtree(old)


def write_directory(
    contents: Mapping[str, str],
    final: str,
    kind: str,
    *,
    aside: str | None = None,
    keep: Callable[[str], bool] | None = None,
) -> None:
    """Write the text files ``contents`` (name -> text; UTF-8, LF line ends, the umask's permissions) into a new
    staging folder beside ``final`` (:func:`staging_name` of ``kind``, same file system) and swap it into
    ``final``'s place (:func:`replace_directory` with ``aside`` and ``keep``); on any failure the staging folder
    is removed and ``final`` is left as it was. The parent of ``final`` is created if needed."""
    parent = os.path.dirname(os.path.abspath(final))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, staging_name(kind))
    os.mkdir(staging)
    try:
        for name, text in contents.items():
            # open(..., "x") (unlike mkstemp's 0600) gives the umask's permissions
            with open(os.path.join(staging, name), "x", encoding="utf-8", newline="\n") as f:
                f.write(text)
        replace_directory(staging, final, aside=aside, keep=keep)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def repair_replace(aside: str, final: str, keep: Callable[[str], bool] | None = None) -> str | None:
    """Finish or roll back a :func:`replace_directory` (with ``aside``) that was killed: with ``final`` in place
    the new directory is complete and the last step runs (:func:`finish_replace`, returns ``"finished"``);
    without it the old directory goes back (returns ``"restored"``). None: no ``aside`` folder, nothing to do."""
    if not os.path.isdir(aside):
        return None
    if os.path.exists(final):
        finish_replace(aside, final, keep)
        return "finished"
    os.replace(aside, final)
    return "restored"


def replace_entries(
    staging: str, directory: str, old: Iterable[str], *, aside: str | None = None, last: str | None = None
) -> None:
    """Replace the entries ``old`` (names) of ``directory`` by every entry of the directory ``staging``.

    The old entries are first moved into the new folder ``aside`` (on the same file system; by default
    ``<staging>.old``) and deleted last; the entry named ``last`` (a completion marker) moves in after the
    others; ``staging`` is removed. Every other entry of ``directory`` (the user's own files) stays.
    """
    aside = aside or f"{staging}.old"
    os.makedirs(aside)
    for name in old:
        os.replace(os.path.join(directory, name), os.path.join(aside, name))
    for name in sorted(os.listdir(staging), key=lambda n: n == last):
        os.replace(os.path.join(staging, name), os.path.join(directory, name))
    os.rmdir(staging)
    shutil.rmtree(aside)


# ------------------------------------------------------------------------------------------ stale staging


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (someone else's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def is_stale_staging(name: str, kind: str) -> bool:
    """Whether the staging folder ``name`` (:func:`staging_name` of ``kind``) belongs to a run that is no longer
    alive: made on this host by a process that no longer exists, or named without a process id (make-shards
    before it recorded one). Folders of live processes and of other hosts are never stale."""
    match = _staging_re(kind).match(name)
    if not match:
        return False
    if match["pid"] is None:
        return True
    return match["host"] == host_name() and not pid_alive(int(match["pid"]))


def remove_stale_staging(directory: str, kind: str, *, keep: str = "", files=LocalFiles) -> list[str]:
    """Delete the staging folders of ``kind`` in ``directory`` whose runs are dead (:func:`is_stale_staging`),
    except ``keep`` (a path or name); returns their paths. Failures are logged, not raised: cleaning up must
    not fail a finished run. ``files``: as for :func:`write_bytes`."""
    removed = []
    for name in sorted(files.names(directory, STAGING_PREFIX + kind)):
        if name == os.path.basename(keep.rstrip("/")) or not is_stale_staging(name, kind):
            continue
        path = files.join(directory, name)
        try:
            files.remove_tree(path)
        except Exception as err:
            log.warning("could not remove %s, left by an earlier run that was stopped: %s", path, err)
            continue
        removed.append(path)
    return removed


#: The lock a run holds on a local output directory while it writes there (:func:`directory_lock`).
LOCK_NAME = ".bertprep-lock"

_held_locks: set[str] = set()


class LockError(ValueError):
    """The output directory cannot be locked: it cannot be written (``str()`` says why and what to do)."""


class OutputBusy(LockError):
    """Another live run holds the output directory; ``str()`` names it."""


def release_locks() -> None:
    """Delete the lock files this process holds (an abort that ends the process at once calls this)."""
    for path in list(_held_locks):
        with contextlib.suppress(OSError):
            os.unlink(path)
        _held_locks.discard(path)


def _lock_owner(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _take_lock(path: str, directory: str, me: dict, option: str) -> None:
    """Create the lock file ``path`` naming ``me``, taking over one left by a dead process of this host."""
    for _ in range(2):
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = _lock_owner(path)
            if owner and owner.get("host") == me["host"] and not pid_alive(int(owner.get("pid", 0))):
                os.unlink(path)  # left by a run that was killed
                continue
            who = (
                f"process {owner.get('pid')} on {owner.get('host')}, started {owner.get('started')}"
                if owner
                else "a process that left no record"
            )
            what = f"another {owner.get('command', 'make-shards')} run" if owner else "another run"
            raise OutputBusy(
                f"{directory} is being written by {what} ({who}); wait for it to finish or choose another "
                f"{option} (if that run is gone, delete {path})"
            ) from None
        except OSError as err:
            raise LockError(
                f"cannot write to {option} {directory} ({err.strerror or err}); choose a writable {option}"
            ) from err
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            strict_json.dump(me, f)
        _held_locks.add(path)
        return


@contextlib.contextmanager
def directory_lock(directory: str, *, command: str, option: str = "--output-dir") -> Iterator[None]:
    """Hold ``<directory>/.bertprep-lock`` while a run of ``command`` writes into a local ``directory``, so that
    two runs never write into one folder at once (make-shards' output, a train or finetune run directory).

    The lock file is created with ``O_EXCL`` and names the command, host, process id and start time. A lock left
    by a process of this host that no longer exists is taken over; one held by a live process (or by another
    host, which cannot be checked from here) is refused. Object stores (``gs://``) have no such primitive:
    there the staging folders of live runs are the only sign, and a second run is not detected.

    Raises:
        OutputBusy: another run is writing into ``directory``; the message names it (command, pid, host) and
            what to do, with ``option`` as the option that chose the directory.
        LockError: ``directory`` cannot be created or written to.
    """
    if urls.is_remote(directory):
        yield
        return
    path = os.path.join(directory, LOCK_NAME)
    me = {
        "command": command,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    _take_lock(path, directory, me, option)
    try:
        yield
    finally:
        _held_locks.discard(path)
        owner = _lock_owner(path)
        if owner and owner.get("pid") == me["pid"] and owner.get("host") == me["host"]:
            with contextlib.suppress(OSError):
                os.unlink(path)


__all__ = [
    "LOCK_NAME",
    "STAGING_PREFIX",
    "LocalFiles",
    "LockError",
    "OutputBusy",
    "StagingGone",
    "atomic_file",
    "atomic_files",
    "check_staging_alive",
    "directory_lock",
    "finish_replace",
    "fsync_file",
    "host_name",
    "is_stale_staging",
    "pid_alive",
    "release_locks",
    "remove_stale_staging",
    "repair_replace",
    "replace_directory",
    "replace_entries",
    "staging_name",
    "temporary_path",
    "write_atomic",
    "write_bytes",
    "write_directory",
    "write_text_synced",
]
