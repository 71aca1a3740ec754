"""Shards in a bucket (``train --shards gs://...`` or ``s3://...``): read through ``fsspec`` into a local cache.

In: the URL of a finished shard directory (any ``fsspec`` protocol; ``gcsfs`` for ``gs://``, ``s3fs`` for
``s3://``, the ``cloud`` extra). Out: a :class:`~bertprep.bert_model.pretrain.shard_info.ShardInfo` whose
``shard_files`` are the objects' URLs and whose ``source`` is a :class:`ShardCache`, so that the loader asks
for each shard when it reads it (``ShardInfo.shard_path``). Entry points: :func:`is_remote`,
:func:`open_shard_info`, :func:`read_any_manifest`, and :func:`open_cache` (the manifest and the cache:
``bertprep inspect`` of a URL).

The cache folder is ``cache_dir/<16 hex of sha256(URL)>/``, a mirror of the bucket folder: the tokenizer files
(fetched again at every start, as the manifest is read again) and the shards a process has read. Every file is
downloaded to a temporary name beside its target, its sha256 checked against the manifest and only then
renamed into place (``core/atomic.py``), so the cache never holds half a file; a cached shard is reused
only while its bytes match the manifest. Each process (DDP rank, loader worker) fetches the shards of its own
stream, when it needs them, and the next one of the stream in a daemon thread while it reads the current one.
Past ``max_bytes`` the least recently used shards are removed (every process of the run, and other runs,
share one bound; the shard a process has just fetched is never the one it removes).

The clients are the libraries' own and honour what users set for them: ``STORAGE_EMULATOR_HOST`` and Google's
default credentials (gcsfs), ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_PROFILE`` and the rest of
botocore's configuration (s3fs).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bertprep.bert_model.pretrain.shard_info import ShardInfo, read_shard_info, shard_info_from_manifest
from bertprep.bert_model.shard_cache import cache_folder, cached_manifest, default_cache_dir, is_remote
from bertprep.core import atomic, schema, strict_json
from bertprep.pipeline import remote

logger = logging.getLogger(__name__)

#: Bytes copied at a time from a bucket into the cache.
CHUNK_BYTES = 8 << 20

#: Bound of a cache in bytes when none is given (train's ``--cache-max-gb`` default).
DEFAULT_MAX_BYTES = 20 * 10**9


class RemoteShardError(ValueError):
    """A shard directory in a bucket that cannot be read: the one-line message names the object and what to do."""


def _filesystem(url: str) -> tuple[Any, str]:
    """``(fsspec file system, path in it)`` of ``url``. Raises ``RemoteShardError`` when the protocol's client
    is not installed."""
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as err:
        raise RemoteShardError(
            f"{url}: reading shards from a bucket needs {err.name or 'its fsspec client'} "
            "(pip install 'bertprep[cloud]': gcsfs for gs://, s3fs for s3://)"
        ) from None
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        # gcsfs asks the storage-control API, which no emulator serves, for each bucket's layout, and logs a
        # warning each time it gets no answer; it then reads the bucket as any other.
        logging.getLogger("gcsfs.extended_gcsfs").setLevel(logging.ERROR)
    return fs, path


def _download(url: str, target: str, expected_sha256: str | None, listed_in: str, stop: threading.Event) -> None:
    """Copy the object ``url`` to the local file ``target`` through a temporary name, renamed into place only
    when its sha256 is ``expected_sha256`` (when given).

    Raises:
        RemoteShardError: the object or its bucket does not exist, cannot be read, or holds other bytes.
    """
    fs, path = _filesystem(url)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    digest = hashlib.sha256()
    try:
        with atomic.atomic_file(target) as tmp, fs.open(path, "rb") as src, open(tmp, "wb") as out:
            while block := src.read(CHUNK_BYTES):
                if stop.is_set():
                    raise _Stopped
                digest.update(block)
                out.write(block)
            out.close()
            if expected_sha256 is not None and digest.hexdigest() != expected_sha256:
                raise RemoteShardError(
                    f"{url}: sha256 differs from the one in {listed_in} (the object changed after make-shards "
                    "wrote it); make the shards again into that folder"
                )
    except FileNotFoundError:
        raise RemoteShardError(
            f"{url} does not exist (listed in {listed_in}): check the bucket and folder name, or make the "
            "shards again there with bertprep make-shards -o <URL>"
        ) from None
    except (RemoteShardError, _Stopped):
        raise
    except Exception as err:  # the clients' own errors (HTTP, credentials, network): one line, with the fix
        raise RemoteShardError(
            f"cannot read {url}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}; check "
            "the credentials and network (or STORAGE_EMULATOR_HOST / AWS_ENDPOINT_URL_S3 for an emulator)"
        ) from None


class _Stopped(Exception):
    """A background download given up because the process is exiting."""


#: Set at exit: background downloads stop at their next block (and leave no temporary file).
_EXITING = threading.Event()
atexit.register(_EXITING.set)


def _touch_verified(path: str) -> None:
    """Mark the checked cache file ``path`` as just used (its mtime: the LRU order of eviction) and keep it
    checked under its new mtime (not hashed again); nothing if another process removed it."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(path)
        _remember_verified(path)


def evict(folder: str, max_bytes: int, keep: str, cache_dir: str) -> list[str]:
    """Remove the least recently used shard files of every folder of ``cache_dir`` until they hold at most
    ``max_bytes`` (``folder`` is where ``keep``, the file never removed, lies). Manifests, tokenizer files and
    other processes' temporary files stay. Returns the paths removed."""
    entries = []
    for sub in os.scandir(cache_dir) if os.path.isdir(cache_dir) else ():
        if not sub.is_dir():
            continue
        for entry in os.scandir(sub.path):
            if entry.name.endswith(".arrow") and not entry.name.startswith(".") and entry.is_file():
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                entries.append((stat.st_mtime_ns, stat.st_size, entry.path))
    total, removed = sum(size for _, size, _ in entries), []
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        if os.path.abspath(path) == os.path.abspath(keep):
            continue
        with contextlib.suppress(FileNotFoundError):  # (another process removed it first)
            os.remove(path)
        total -= size
        removed.append(path)
    if removed:
        logger.debug("shard cache over %d bytes: removed %s", max_bytes, ", ".join(removed))
    return removed


@dataclass(frozen=True)
class ShardCache:
    """The local cache of the shards of one shard directory in a bucket (a ``ShardSource`` of ``ShardInfo``).

    Plain values only, so that it travels to DataLoader worker processes; each process opens its own client.
    """

    url: str
    """The shard directory's URL (``gs://bucket/shards``), without a trailing ``/``."""
    cache_dir: str
    """The cache's root (shared by every shard directory it mirrors)."""
    max_bytes: int
    """Bound of the shards kept under ``cache_dir``, in bytes."""
    files: tuple[str, ...]
    """The shard files' names in the manifest, in shard order."""
    sha256: tuple[str | None, ...]
    """Their sha256 as the manifest records them (None: not recorded; the file is then not checked)."""

    @property
    def folder(self) -> str:
        return cache_folder(self.cache_dir, self.url)

    @property
    def manifest_url(self) -> str:
        return f"{self.url}/{schema.MANIFEST_NAME}"

    def local_path(self, index: int) -> str:
        return os.path.join(self.folder, self.files[index])

    def fetch(self, index: int) -> str:
        """The local path of shard ``index``, its bytes those of the manifest: the cached file when it matches,
        else downloaded now (waiting for a background download of it already under way in this process).

        Raises:
            RemoteShardError: the object cannot be fetched (missing, unreadable, other bytes than the manifest's).
        """
        return self._fetch(index, _EXITING if threading.current_thread() is not threading.main_thread() else None)

    def _fetch(self, index: int, stop: threading.Event | None) -> str:
        path = self.local_path(index)
        with _path_lock(path):
            if _cached_matches(path, self.sha256[index]):
                _touch_verified(path)
                return path
            _download(f"{self.url}/{self.files[index]}", path, self.sha256[index], self.manifest_url, stop or _NEVER)
            _remember_verified(path)
        evict(self.folder, self.max_bytes, keep=path, cache_dir=self.cache_dir)
        return path

    def prefetch(self, index: int) -> None:
        """Fetch shard ``index`` in a daemon thread (nothing when it is cached or already being fetched). Errors
        are left to the read that needs the shard (:meth:`fetch` raises them then); at exit the download stops."""
        path = self.local_path(index)
        if _cached_matches(path, self.sha256[index]) or path in _PREFETCHING:
            return
        _PREFETCHING.add(path)

        def run() -> None:
            try:
                self._fetch(index, _EXITING)
            except BaseException as err:  # (the read that needs the shard fetches it again and reports)
                logger.debug("prefetch of %s/%s failed: %s", self.url, self.files[index], err)
            finally:
                _PREFETCHING.discard(path)

        threading.Thread(target=run, name=f"bertprep-prefetch-{index}", daemon=True).start()


#: Never set: a download in the reading thread itself runs to its end.
_NEVER = threading.Event()

#: Local paths being fetched by a background thread of this process.
_PREFETCHING: set[str] = set()

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _forget_threads() -> None:
    """In a forked child (a loader worker): no background download of the parent runs here, and a lock one of
    them held would never be released."""
    global _LOCKS_LOCK
    _LOCKS_LOCK = threading.Lock()
    _LOCKS.clear()
    _PREFETCHING.clear()


os.register_at_fork(after_in_child=_forget_threads)


def _path_lock(path: str) -> threading.Lock:
    """This process's lock of one cache file (a read waits for the prefetch of the same shard, not a second
    download). Processes do not share it: two of them may download one file at once, each to its own temporary
    name, and the second rename replaces the first with the same bytes."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(path, threading.Lock())


#: ``path -> (size, mtime_ns)`` of the cache files this process has checked: not hashed again while unchanged.
_VERIFIED: dict[str, tuple[int, int]] = {}


def _stat_key(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _remember_verified(path: str) -> None:
    key = _stat_key(path)
    if key is not None:
        _VERIFIED[path] = key


def _cached_matches(path: str, expected_sha256: str | None) -> bool:
    """Whether the cache file ``path`` exists with the bytes of the manifest (a mismatch is removed, so that it is
    fetched again: a file damaged on the local disk, or a directory made again in the bucket)."""
    key = _stat_key(path)
    if key is None:
        return False
    if _VERIFIED.get(path) == key or expected_sha256 is None:
        return True
    try:
        matches = schema.sha256_file(path) == expected_sha256
    except FileNotFoundError:  # evicted by another process meanwhile
        return False
    if matches:
        _remember_verified(path)
        return True
    logger.warning("%s differs from its manifest's sha256; fetching it again", path)
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
    return False


def read_any_manifest(shard_dir: str) -> dict[str, Any]:
    """The checked manifest of a local shard directory (``schema.read_manifest``) or of one in a bucket.

    Raises:
        FileNotFoundError: a local directory without a manifest.
        RemoteShardError: the bucket or its manifest does not exist or cannot be read.
        ValueError: not a manifest of this format.
    """
    if not is_remote(shard_dir):
        return schema.read_manifest(shard_dir)
    url = f"{shard_dir.rstrip('/')}/{schema.MANIFEST_NAME}"
    try:
        remote.check_reachable(shard_dir)  # in seconds, not after the client's retries (35-50 s for gcsfs)
    except remote.RemotePathError as err:
        raise RemoteShardError(str(err)) from None
    fs, path = _filesystem(url)
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        raise RemoteShardError(
            f"{url} does not exist: {shard_dir} is not a finished shard directory (check the bucket and folder "
            "name; make-shards writes the manifest last)"
        ) from None
    except Exception as err:  # the clients' own errors (HTTP, credentials, network)
        raise RemoteShardError(
            f"cannot read {url}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}; check "
            "the credentials and network (or STORAGE_EMULATOR_HOST / AWS_ENDPOINT_URL_S3 for an emulator)"
        ) from None
    return schema.parse_manifest(data, url)


def open_cache(
    shard_dir: str, cache_dir: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[dict[str, Any], ShardCache]:
    """The manifest of the shard directory URL ``shard_dir``, read from the bucket, and the :class:`ShardCache`
    of its shards (``max_bytes`` in ``cache_dir``, default :func:`default_cache_dir`), its tokenizer files fetched
    into the cache folder now (where ``inspection.load_vocab_tokens`` and the trainer read them).

    Raises:
        RemoteShardError: the bucket, the manifest or a tokenizer file cannot be read (named, with the fix).
        ValueError: not a manifest of this format.
    """
    url = shard_dir.rstrip("/")
    manifest = read_any_manifest(url)
    cache = ShardCache(
        url=url,
        cache_dir=os.path.abspath(cache_dir or default_cache_dir()),
        max_bytes=int(max_bytes),
        files=tuple(str(s["file"]) for s in manifest["shards"]),
        sha256=tuple(s.get("sha256") for s in manifest["shards"]),
    )
    _fetch_vocab_files(cache, schema.vocab_file_names(manifest) if manifest.get("vocab") else [])
    _keep_manifest(cache, manifest)
    return manifest, cache


def _keep_manifest(cache: ShardCache, manifest: dict[str, Any]) -> None:
    """A copy of the manifest read at this start in the cache folder (:func:`cached_manifest`), written through a
    temporary name: what later reads of the run's settings use without asking the bucket again (the casing
    check of ``train --init-from``; ``export`` of a checkpoint trained from the bucket, perhaps offline)."""
    path = os.path.join(cache.folder, schema.MANIFEST_NAME)
    os.makedirs(cache.folder, exist_ok=True)
    with atomic.atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        strict_json.dump(manifest, out, indent=2, sort_keys=True)


def has_manifest(shard_dir: str) -> bool:
    """Whether the bucket directory ``shard_dir`` holds a manifest (a finished shard directory); False also when
    the bucket cannot be asked (a hint depends on it, nothing else)."""
    try:
        fs, path = _filesystem(f"{shard_dir.rstrip('/')}/{schema.MANIFEST_NAME}")
        return bool(fs.exists(path))
    except Exception:  # (no client, no network, no credentials: no hint)
        return False


def open_shard_info(shard_dir: str, cache_dir: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> ShardInfo:
    """The :class:`ShardInfo` of ``shard_dir``: ``read_shard_info`` for a local directory; for a URL, its
    manifest and tokenizer files through :func:`open_cache` (the tokenizer checked against the manifest's
    ``vocab.sha256`` by the trainer, as a local vocab is) and its shards read through the :class:`ShardCache`.

    Raises:
        RemoteShardError: the bucket, the manifest or a tokenizer file cannot be read (named, with the fix).
        FileNotFoundError, ValueError: as ``read_shard_info``.
    """
    if not is_remote(shard_dir):
        return read_shard_info(shard_dir)
    manifest, cache = open_cache(shard_dir, cache_dir, max_bytes)
    return shard_info_from_manifest(manifest, cache.url, vocab_dir=cache.folder, source=cache)


def _fetch_vocab_files(cache: ShardCache, names: Sequence[str]) -> None:
    """Fetch the tokenizer files ``names`` into the cache folder (again at every start: they are small, and the
    bucket's may have been made again)."""
    t0 = time.monotonic()
    for name in names:
        _download(f"{cache.url}/{name}", os.path.join(cache.folder, name), None, cache.manifest_url, _NEVER)
    logger.info(
        "shards %s: %d shard files, read through the cache %s (tokenizer files fetched in %.1f s)",
        cache.url,
        len(cache.files),
        cache.folder,
        time.monotonic() - t0,
    )


__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_MAX_BYTES",
    "RemoteShardError",
    "ShardCache",
    "cache_folder",
    "cached_manifest",
    "default_cache_dir",
    "evict",
    "has_manifest",
    "is_remote",
    "open_cache",
    "open_shard_info",
    "read_any_manifest",
]
