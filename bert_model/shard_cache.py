"""Where ``train`` keeps the shards it reads from a bucket, as paths only: the cache folder of a shard directory's
URL and the copy of its manifest kept there (``pretrain/remote_shards.py`` fetches and checks the files). Standard
library and the shard contract only, so that the model hall's lower floors (``hf/interop.py``'s casing checks)
can find a bucket's manifest copy without the fetching code.
"""

from __future__ import annotations

import hashlib
import os

from bertprep.core import schema


def is_remote(path: str | None) -> bool:
    """Whether ``path`` is a URL of another file system than the local one (``gs://b/x``, ``s3://b/x``)."""
    if not path or "://" not in path:
        return False
    return path.split("://", 1)[0].lower() not in ("", "file", "local")


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/bertprep/shards``, or ``~/.cache/bertprep/shards`` without it."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "bertprep", "shards")


def cache_folder(cache_dir: str, url: str) -> str:
    """The folder of ``cache_dir`` that mirrors the shard directory ``url``."""
    return os.path.join(cache_dir, hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:16])


def cached_manifest(shard_dir: str, cache_dir: str | None = None) -> str:
    """The path of the copy of the bucket directory ``shard_dir``'s manifest that the last start of a run reading it
    through ``cache_dir`` (default :func:`default_cache_dir`) kept there; it may not exist."""
    return os.path.join(
        cache_folder(os.path.abspath(cache_dir or default_cache_dir()), shard_dir), schema.MANIFEST_NAME
    )
