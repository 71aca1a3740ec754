"""Local files and directories written so that a reader never sees half of them (standard library only).

Both halls use this module: ``pipeline/`` (``text/vocab.py``: the vocab files) and ``bert_model/`` (features,
predictions, fine-tuning runs, checkpoints, exported models). It imports neither torch nor Beam, so either
side may import it without crossing the boundary.

* :func:`atomic_file` / :func:`write_atomic`: one file written under a temporary name and renamed into place
  (``os.replace`` is atomic on POSIX), removed again if writing fails;
* :func:`atomic_files`: several files written first, then renamed into place in order, the last one being
  the commit marker;
* :func:`replace_directory`: a complete temporary directory swapped in for an existing one (optionally
  keeping the old one's other entries), :func:`finish_replace` its last step;
* :func:`replace_entries`: some entries of a directory replaced by those of a staging directory.

The shard store (``pipeline/shards/store.py``) writes through Beam's ``FileSystems`` instead (``gs://``, where
``os.replace`` does not exist); that is why it has its own commit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence


def temporary_path(path: str) -> str:
    """A hidden name beside ``path`` that no other process (on any host) picks:
    ``.<name>.<pid>.<random>.tmp``."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


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
        for tmp, path in zip(temps, paths):
            os.replace(tmp, path)
    finally:
        for tmp in temps:
            if os.path.exists(tmp):
                os.remove(tmp)


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


def replace_entries(staging: str, directory: str, old: Iterable[str], *, aside: str, last: str | None = None) -> None:
    """Replace the entries ``old`` (names) of ``directory`` by every entry of the directory ``staging``.

    The old entries are first moved into the new folder ``aside`` (on the same file system) and deleted last;
    the entry named ``last`` (a completion marker) moves in after the others; ``staging`` is removed.
    """
    os.makedirs(aside)
    for name in old:
        os.replace(os.path.join(directory, name), os.path.join(aside, name))
    for name in sorted(os.listdir(staging), key=lambda n: n == last):
        os.replace(os.path.join(staging, name), os.path.join(directory, name))
    os.rmdir(staging)
    shutil.rmtree(aside)


__all__ = [
    "atomic_file",
    "atomic_files",
    "finish_replace",
    "replace_directory",
    "replace_entries",
    "temporary_path",
    "write_atomic",
]
