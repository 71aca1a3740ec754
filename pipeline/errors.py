"""The user-facing errors of ``pipeline`` and how make-shards' workers hand them back to the launching process.

The errors are defined here, at the top, so that every stage raises them and this module imports none of the
stages: :class:`MakeShardsError`, :class:`InputError` (``readers`` raise it: bad input files) and
:class:`VocabError` (``core.errors`` defines it, ``core.vocab_files`` raises it: a vocab that cannot be used;
both halls).
Standard library and ``core`` only at import. A worker records its error through Beam's ``FileSystems`` (Beam
imported there: a worker of Dataflow or Dask has Beam's clients and the run's Beam options, no others); the
launching process reads it back through ``core/storage.py``, as it does all its own reading.

A worker's exception reaches the launching process as text only on some runners (other processes, remote
workers); so a DoFn that raises one of :data:`USER_ERRORS` first leaves its message as a small file in the run's
staging folder (:func:`record_error`, via the :func:`records_errors` decorator), and ``run.py`` reads it back
(:func:`recorded_error`) to print that one line instead of a Beam traceback. Kept apart from ``transforms.py`` so
that every module holding DoFns (``transforms``, ``write_shards``, ``heldout``) can import it without an import
cycle.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid

from bertprep.core import atomic, storage
from bertprep.core.errors import VocabError  # (core/: raised by the vocab code of both halls)

log = logging.getLogger(__name__)


class MakeShardsError(RuntimeError):
    """make-shards could not produce shards; the message says why and what to do."""


class InputError(ValueError):
    """Bad input; the message names the file (and line) and says what to do."""


#: Errors whose message is for the user (one line naming the file or option and what to do).
USER_ERRORS = (MakeShardsError, InputError, VocabError)

#: Name prefix of the error records workers leave in the staging folder.
ERROR_RECORD_PREFIX = "error-"


def record_error(folder: str | None, err: BaseException) -> None:
    """Leave ``err``'s message as ``<folder>/error-<id>.txt`` for :func:`recorded_error` (best effort)."""
    if not folder:
        return
    from apache_beam.io.filesystems import FileSystems

    try:
        path = FileSystems.join(folder, f"{ERROR_RECORD_PREFIX}{uuid.uuid4().hex}.txt")
        atomic.check_staging_alive(path)  # a run that already ended: no folder made again for its record
        with FileSystems.create(path) as f:
            f.write(str(err).encode("utf-8"))
    except Exception:  # e.g. the disk is full: the message is then taken from the exception text
        log.debug("could not record the error in %s", folder, exc_info=True)


def records_errors(folder_attribute: str):
    """Decorate a DoFn's ``process``: a user error it raises is recorded (:func:`record_error`) in the
    folder named by the DoFn's attribute ``folder_attribute``, then re-raised."""

    def decorate(process):
        @functools.wraps(process)
        def wrapper(self, *args, **kwargs):
            try:
                yield from process(self, *args, **kwargs)
            except USER_ERRORS as err:
                record_error(getattr(self, folder_attribute, None), err)
                raise

        return wrapper

    return decorate


def recorded_error(staging_dir: str) -> str | None:
    """The message of an error record left under ``staging_dir`` (at any depth) by a worker, if any: the first
    by path. Read by the launching process (through ``core/storage.py``); None also when it cannot be read."""
    try:
        matched = storage.list_files(staging_dir, recursive=True)
        records = sorted(p for p in matched if os.path.basename(p).startswith(ERROR_RECORD_PREFIX))
        if not records:
            return None
        return storage.read_bytes(records[0]).decode("utf-8", "replace").strip() or None
    except Exception:
        return None
