"""Beam's local file system without Beam: listing and opening the input files of the local disk with the standard
library, as Beam's ``FileSystems`` would, so that a command that is no Beam pipeline (build-vocab) does not pay
Beam's import (about 0.9 s of CPU) for reading a local corpus.

In: a path or glob with no URL scheme (:func:`is_beam_local`: the paths Beam's ``FileSystems`` gives its
``LocalFileSystem``). Out: ``(path, size)`` pairs (:func:`match`, what ``LocalFileSystem.match`` finds), a binary
file (:func:`open_uncompressed`). Every path with a scheme (``gs://``, ``s3://``, ``hdfs://``, and ``file://``,
which Beam refuses) stays on Beam's ``FileSystems`` (``files._match``, ``files._open``): the readers also run
inside make-shards' transforms on its workers, with the run's Beam options.

The rules are Beam's (``apache_beam/io/filesystem.py``, ``FileSystem.match`` and ``translate_pattern``;
``localfilesystem.py``, ``LocalFileSystem._list``, checked against Beam in ``tests/pipeline/readers``):

- a pattern ending in ``/`` gets ``*`` appended;
- a pattern without ``*``, ``?`` or ``[`` names one file (or folder) if it exists, with its size;
- otherwise every file under the folder of the pattern's fixed part (the part before its first ``*?[``, up to its
  last ``/``; none for a pattern whose fixed part has no ``/``, such as ``*.txt``) is listed recursively
  (``os.walk``: symbolic links to folders are not followed; a file that vanishes or a broken link is left out)
  and kept if its whole path matches, where ``*`` is any run of characters but ``/`` and ``\\``, ``**`` any run at
  all, ``?`` any one character (``/`` included), ``[...]`` / ``[!...]`` a character class (which may hold
  ``/``), and every other character itself (no escapes).
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import BinaryIO

from bertprep.core import storage


def is_beam_local(path: str) -> bool:
    """Whether Beam's ``FileSystems`` reads ``path`` with its ``LocalFileSystem`` (the path has no URL scheme, by
    the storage layer's one rule of schemes, ``core.urls.scheme``), so that :func:`match` and
    :func:`open_uncompressed` read it as Beam would. ``file://`` paths have one: Beam refuses them, as before."""
    return storage.scheme(path) == ""


def translate_pattern(pattern: str) -> str:
    """The regular expression of a glob ``pattern`` (matched with ``re.match`` against a whole path): Beam's
    ``FileSystem.translate_pattern`` (itself Python 2.7's ``fnmatch.translate`` with ``*`` -> ``[^/\\\\]*`` and
    ``**`` -> ``.*``), rule for rule."""
    i, n = 0, len(pattern)
    out = []
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                out.append(".*")
                i += 1
            else:
                out.append(r"[^/\\]*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(r"\[")
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                out.append(f"[{stuff}]")
        else:
            out.append(re.escape(c))
    return r"(?ms)" + "".join(out) + r"\Z"


def match(pattern: str) -> list[tuple[str, int]]:
    """``(path, size in bytes)`` of the files ``pattern`` matches, in listing order (unsorted), as Beam's
    ``LocalFileSystem.match([pattern])`` gives them (the rules: the module's docstring).

    Raises:
        OSError: an existing path named without a glob cannot be asked for its size.
    """
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    fixed = re.match(r"[^[*?]*", pattern).group(0)  # type: ignore[union-attr]  # (matches every string)
    if fixed == pattern:  # no glob: the path itself, when it exists (a folder too, as Beam's metadata gives it)
        return [(pattern, os.path.getsize(pattern))] if os.path.exists(pattern) else []
    wanted = re.compile(translate_pattern(pattern)).match
    root = os.path.dirname(fixed)
    if not os.path.exists(root):  # ("" for a pattern like *.txt: Beam lists nothing)
        return []
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if wanted(path):
                with contextlib.suppress(OSError):  # vanished since listed, or a broken link: Beam leaves it out too
                    found.append((path, os.path.getsize(path)))
    return found


def open_uncompressed(path: str) -> BinaryIO:
    """``path``'s bytes as stored, what Beam's ``LocalFileSystem.open(path, compression_type=UNCOMPRESSED)`` gives.

    Raises:
        FileNotFoundError, OSError: as ``open``.
    """
    return open(path, "rb")  # (the caller closes it)
