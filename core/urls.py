"""The one rule of what is remote, and paths by it: part of the storage layer (``core/storage.py`` re-exports
every name), in a module of its own so that the durable writes (``atomic``), which the layer writes through,
can ask it too.

In: a path (``/data/x``, ``file:///data/x``, ``gs://bucket/x``, ``C:\\data``). Out: its scheme, whether it is
remote, its local form, a path joined onto it. Standard library only.
"""

from __future__ import annotations

import os
import re

#: Schemes that name the local file system.
LOCAL_SCHEMES = ("", "file", "local")

#: A URL scheme as RFC 3986 spells it, two characters at least (``C://x`` is a Windows drive, not a scheme).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+)://")


def scheme(path: str | os.PathLike | None) -> str:
    """The lower-case URL scheme of ``path`` (``gs``, ``s3``, ``file``), or ``""`` for a plain local path
    (``/data``, ``data/x``, ``C:\\data``, ``C://data``: a one-letter "scheme" is a Windows drive letter)."""
    match = _SCHEME.match(os.fspath(path)) if path else None
    return match.group(1).lower() if match else ""


def is_remote(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` lies on another file system than the local one: a URL whose scheme is not ``file`` or
    ``local`` (``gs://b/x``, ``s3://b/x``, ``hdfs://...``). The one rule of the project; ``file:///x`` is local."""
    return scheme(path) not in LOCAL_SCHEMES


def local_path(path: str | os.PathLike) -> str:
    """``path`` as the standard library takes it: ``file:///data/x`` -> ``/data/x``; other paths unchanged.

    Raises:
        ValueError: ``path`` is remote (:func:`is_remote`).
    """
    text = os.fspath(path)
    if is_remote(text):
        raise ValueError(f"{text} is not a local path")
    return text.split("://", 1)[1] if scheme(text) else text


def join(base: str, *names: str) -> str:
    """``base`` and ``names`` joined with ``/`` for a URL, with ``os.path.join`` for a local path."""
    if is_remote(base):
        return "/".join([base.rstrip("/"), *(n.strip("/") for n in names)])
    return os.path.join(base, *names)


def bucket_of(url: str) -> str:
    """The bucket of ``gs://bucket/x`` (``""`` for a local path)."""
    return url.split("://", 1)[1].split("/", 1)[0] if is_remote(url) else ""


__all__ = ["LOCAL_SCHEMES", "bucket_of", "is_remote", "join", "local_path", "scheme"]
