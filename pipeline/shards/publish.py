"""Publish a finished make-shards run in one step, and let the next run finish a publish that was cut short.

A run writes everything into its staging folder (``store.staging_dir_name``). Publishing moves those files
into the output directory (and the held-out set into ``<output>/eval/``), replacing an earlier run's set.
That takes many renames, and a process killed between two of them (``kill -9``, a power cut) would leave
old and new shards mixed. So a publish is journalled:

1. :func:`publish` first writes ``<output>/.bertprep-publish.json`` (one object write: atomic on local
   disks and object stores alike), naming the staging folder and every file of the new sets. From this
   moment the publish is decided: it can only go forward.
2. It then plays the journal (:func:`_play`): the old top-level ``manifest.json`` goes first (the whole
   output is marked incomplete), then per set (the held-out set in ``eval/`` before the training set) the
   new files are renamed in, old shards the new run did not make are deleted, and the set's new
   ``manifest.json`` comes last; the training set's is the last file of all. Every step is idempotent: a
   step whose source is already gone was done.
3. The staging folder is deleted, then the journal.

A run that finds a journal (:func:`repair`, at the start of every make-shards run into that directory)
plays it again to the end. So at rest a directory holds either the old complete set or the new one; while
a publish is under way, or after one was killed and before the next run, it has no ``manifest.json``,
which every reader takes as "incomplete" (the format's commit marker, ``schema.MANIFEST_NAME``).
Files that make-shards does not write are never touched.

All of it runs in make-shards' own process (the driver), after the pipeline: every file operation goes through
``core/storage.py`` (local folders on the standard library, ``gs://`` and ``s3://`` on fsspec), as every
command's own reads and writes do. Only the pipeline's transforms write through Beam's ``FileSystems``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Sequence

from bertprep.core import atomic, schema, storage, strict_json
from bertprep.pipeline.shards import formats, store

log = logging.getLogger("bertprep")

#: The publish journal, in the output directory.
JOURNAL_NAME = ".bertprep-publish.json"
#: The lock a run holds on a local output directory while it writes there (:func:`output_lock`).
LOCK_NAME = atomic.LOCK_NAME

_publishing = False
#: Delete the lock files this process holds (an abort that ends the process at once calls this).
release_locks = atomic.release_locks


def publishing() -> bool:
    """Whether this process is between writing a journal and finishing its publish: an interrupt must then
    wait (the staging folder is the journal's source and must not be deleted)."""
    return _publishing


def _join(base: str, sub: str) -> str:
    return storage.join(base, sub) if sub else base


def _exists(path: str) -> bool:
    return storage.exists(path)


def _write_journal(output_dir: str, journal: dict) -> None:
    """Write the journal whole or not at all: a local file renamed into place, one object upload on a store."""
    storage.write_bytes(storage.join(output_dir, JOURNAL_NAME), strict_json.dumps(journal, indent=1).encode())


def _read_journal(output_dir: str) -> dict | None:
    path = storage.join(output_dir, JOURNAL_NAME)
    if not _exists(path):
        return None
    return json.loads(storage.read_bytes(path).decode())


def _play_set(staging_dir: str, target: str, files: Sequence[str], recorded: Sequence[str] = ()) -> None:
    """Move one set (``files`` and its manifest) from ``staging_dir`` into ``target``; idempotent. ``recorded``:
    the files the set in ``target`` recorded when the journal was written (:func:`_recorded_outputs`)."""
    staged_manifest = storage.join(staging_dir, schema.MANIFEST_NAME)
    if not _exists(staged_manifest):  # the new manifest was moved in: this set is done
        return
    storage.mkdirs(target)
    old = store.existing_outputs(target)  # directly in target, never inside a staging folder
    old += _recorded_outputs(target, recorded, old)
    markers = [p for p in old if os.path.basename(p) in (schema.MANIFEST_NAME, schema.MANIFEST_NAME + ".tmp")]
    if markers:
        storage.delete(markers)
    moves = [(storage.join(staging_dir, f), storage.join(target, f)) for f in files]
    moves = [(src, dst) for src, dst in moves if _exists(src)]  # the others were moved before a kill
    if moves:
        for folder in sorted({os.path.dirname(dst) for _, dst in moves}):  # an MDS shard's files: its sub-folder
            storage.mkdirs(folder)
        storage.rename([src for src, _ in moves], [dst for _, dst in moves])
    new = set(files)
    replaced = [p for p in old if p not in markers and _relative(target, p) not in new]
    if replaced:
        storage.delete(replaced)
        _remove_empty_folders(target, replaced)
    storage.rename([staged_manifest], [storage.join(target, schema.MANIFEST_NAME)])


def _relative(target: str, path: str) -> str:
    """``path`` (as ``storage.list_files`` or ``join`` spell it under ``target``) relative to ``target``."""
    base = target.rstrip("/") + "/"
    return path[len(base) :] if path.startswith(base) else os.path.basename(path)


def _recorded_outputs(target: str, recorded: Sequence[str], listed: Sequence[str]) -> list[str]:
    """The files of ``recorded`` (relative to ``target``: what the manifest of its set recorded when the publish
    was decided, read before that manifest goes) that are still there, besides those ``listed``: an MDS
    shard's files in its sub-folder, the MDS index, the Megatron files, the dataset card."""
    paths = [storage.join(target, f) for f in recorded]
    return [p for p in paths if p not in set(listed) and _exists(p)]


def _remove_empty_folders(target: str, deleted: Sequence[str]) -> None:
    """Remove the local sub-folders of ``target`` that deleting ``deleted`` left empty (an MDS shard's)."""
    if storage.is_remote(target):
        return
    for folder in sorted({os.path.dirname(p) for p in deleted}, reverse=True):
        if os.path.realpath(folder) != os.path.realpath(target) and os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)


def _remove_set(target: str, recorded: Sequence[str] = ()) -> None:
    """Delete an earlier run's set in ``target`` (its manifest first; ``recorded``: the files it recorded); the
    folder too when it is then empty."""
    old = store.existing_outputs(target)
    old += _recorded_outputs(target, recorded, old)
    markers = [p for p in old if os.path.basename(p).startswith(schema.MANIFEST_NAME)]
    for group in (markers, [p for p in old if p not in markers]):
        if group:
            storage.delete(group)
    _remove_empty_folders(target, old)
    if not storage.is_remote(target) and os.path.isdir(target) and not os.listdir(target):
        os.rmdir(target)


def _play(output_dir: str, journal: dict) -> None:
    staging_dir = storage.join(output_dir, journal["staging"])
    top_manifest = storage.join(output_dir, schema.MANIFEST_NAME)
    if _exists(storage.join(staging_dir, schema.MANIFEST_NAME)) and _exists(top_manifest):
        storage.delete([top_manifest])  # first: the whole output is marked incomplete until the last step
    recorded = journal.get("recorded", {})  # sub-folder -> the files its earlier set recorded
    for sub in journal.get("remove", []):  # the training set's manifest is the last file written
        _remove_set(_join(output_dir, sub), recorded.get(sub, ()))
    for entry in journal["sets"]:
        target = _join(output_dir, entry["to"])
        _play_set(_join(staging_dir, entry["from"]), target, entry["files"], recorded.get(entry["to"], ()))
    storage.remove_tree(staging_dir)  # before the journal: a run killed in between finds the journal, ends here
    storage.delete([storage.join(output_dir, JOURNAL_NAME)])


def publish(output_dir: str, staging_dir: str, sets: Sequence[tuple[str, str, Sequence[str]]], remove=()) -> None:
    """Publish the sets of ``staging_dir`` into ``output_dir`` in one decided step (see the module docstring).

    ``sets``: ``(sub-folder in staging, sub-folder in output, files)`` per shard set, ``""`` for the folder
    itself; the manifest of each set is implied. Sets are moved in order: put the training set last, so its
    manifest is the last file written. ``remove``: sub-folders of ``output_dir`` whose earlier sets go
    (an ``eval/`` set that the new run does not have).
    """
    journal = {
        "staging": os.path.basename(staging_dir.rstrip("/")),
        "sets": [{"from": src, "to": dst, "files": list(files)} for src, dst, files in sets],
        "remove": list(remove),
        # the files each earlier set's manifest records (an MDS shard's sub-folder files, the dataset card...):
        # read now, as the manifests go first when the journal is played
        "recorded": {
            sub: formats.recorded_files(formats.read_manifest_if_any(_join(output_dir, sub)))
            for sub in [*remove, *(dst for _, dst, _ in sets)]
        },
    }
    global _publishing
    _publishing = True
    try:
        _write_journal(output_dir, journal)
        _play(output_dir, journal)
    finally:
        _publishing = False


def repair(output_dir: str) -> bool:
    """Finish a publish that a killed run left in ``output_dir``; True when there was one.

    Raises:
        ValueError: the journal is unreadable, or names a staging folder that is gone while its sets are
            not all in place (the directory was changed by hand): the message says what to delete.
    """
    try:
        journal = _read_journal(output_dir)
    except (ValueError, OSError) as err:
        raise ValueError(
            f"{storage.join(output_dir, JOURNAL_NAME)} is unreadable ({err}): a publish was cut short and "
            "its record is damaged; delete that file and the shard files of --output-dir, then run again"
        ) from err
    if journal is None:
        return False
    staging_dir = storage.join(output_dir, journal["staging"])
    log.warning("finishing the publish of an earlier run that was stopped while it moved its files (%s)", staging_dir)
    _play(output_dir, journal)
    return True


#: The lock's error types, re-exported: where make-shards and its tests name them.
LockError = atomic.LockError
OutputBusy = atomic.OutputBusy


def output_lock(output_dir: str) -> contextlib.AbstractContextManager[None]:
    """Hold ``<output_dir>/.bertprep-lock`` while a make-shards run writes into a local ``output_dir``
    (:func:`atomic.directory_lock`, which ``train`` and ``finetune`` take on their run directories too).

    Raises:
        OutputBusy: another run is writing into ``output_dir``; the message names it and what to do.
        LockError: ``output_dir`` cannot be created or written to.
    """
    return atomic.directory_lock(output_dir, command="make-shards", option="--output-dir")
