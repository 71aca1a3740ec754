"""make-shards on ``gs://`` paths, offline: the pipeline's bytes go through Beam's ``FileSystems``, its driver's
(staging, publish, clean-up) through the storage layer's fsspec, both on one in-memory store.

The ``gs://`` scheme is served by Beam's real ``GCSFileSystem`` (its path joining, globbing, prefix listing,
``exists``/``delete``/``rename`` semantics), with only the storage client underneath replaced by
:class:`FakeGcsIO`, an in-memory object store that behaves as GCS does where it matters here: a flat
namespace of objects (no directories: ``mkdirs`` does nothing, a "folder" exists only as a name prefix),
an object appears when its writer is closed, and reading a missing object raises Google's ``NotFound``.
The storage layer sees the same objects through :class:`FakeGcsFileSystem`, fsspec's view of that store.
The pipeline runs in-process (``--direct_running_mode=in_memory``) so its workers see the fake; a
socket guard fails the test on any network access.

Needs Beam's Google Cloud extras (``apache-beam[gcp]``); skipped with the reason when they are absent.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import socket
import threading
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import need_module

gcsfilesystem = need_module("apache_beam.io.gcp.gcsfilesystem")
google_exceptions = need_module("google.api_core.exceptions")
fsspec_registry = need_module("fsspec.registry")  # (the module: the package's ``registry`` is a read-only view)

from apache_beam.io.filesystems import FileSystems  # noqa: E402
from apache_beam.io.gcp.gcsio import parse_gcs_path  # noqa: E402
from fsspec.spec import AbstractFileSystem  # noqa: E402

from bertprep.core import schema, storage  # noqa: E402
from bertprep.pipeline import readers  # noqa: E402
from bertprep.pipeline.beam.run import MakeShardsError, run_make_shards  # noqa: E402
from bertprep.pipeline.config import InstanceConfig, ShardsConfig  # noqa: E402
from bertprep.pipeline.masking.config import MaskingConfig  # noqa: E402
from bertprep.pipeline.text.tokenization import VocabError, load_vocab  # noqa: E402
from conftest import FIXTURES  # noqa: E402

FIXTURES = FIXTURES / "pipeline"
ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
BUCKET = "gs://bertprep-test"


class _FakeBlobReader(io.BytesIO):
    mode = "r"  # as gcsio.BeamBlobReader (CompressedFile checks it)


class _FakeBlobWriter(io.BytesIO):
    """Collects the bytes; the object appears (atomically) when the writer is closed, as on GCS."""

    mode = "w"  # as gcsio.BeamBlobWriter

    def __init__(self, store: FakeGcsIO, path: str):
        super().__init__()
        self.store, self.path = store, path

    def close(self) -> None:
        if not self.closed:
            self.store._put(self.path, self.getvalue())
        super().close()


class FakeGcsIO:
    """In-memory stand-in for ``apache_beam.io.gcp.gcsio.GcsIO``: the methods ``GCSFileSystem`` calls."""

    def __init__(self):
        self.blobs: dict[str, tuple[bytes, float]] = {}
        self.lock = threading.Lock()

    def _put(self, path: str, data: bytes) -> None:
        parse_gcs_path(path)
        with self.lock:
            self.blobs[path] = (data, time.time())

    def _get(self, path: str) -> tuple[bytes, float]:
        parse_gcs_path(path)
        with self.lock:
            if path not in self.blobs:
                raise google_exceptions.NotFound(f"GET {path}: No such object")
            return self.blobs[path]

    def open(self, filename, mode="r", read_buffer_size=None, mime_type=None):
        if mode in ("r", "rb"):
            return _FakeBlobReader(self._get(filename)[0])
        if mode in ("w", "wb"):
            parse_gcs_path(filename)
            return _FakeBlobWriter(self, filename)
        raise ValueError(f"Invalid file open mode: {mode}.")

    def exists(self, path):
        parse_gcs_path(path)
        with self.lock:
            return path in self.blobs

    def size(self, path):
        return len(self._get(path)[0])

    def last_updated(self, path):
        return self._get(path)[1]

    def checksum(self, path):
        return format(zlib.crc32(self._get(path)[0]), "08x")

    def _status(self, path):
        data, updated = self._get(path)
        return {"size": len(data), "updated": updated, "checksum": format(zlib.crc32(data), "08x")}

    def list_files(self, path, with_metadata=False):
        parse_gcs_path(path, object_optional=True)
        with self.lock:
            items = sorted((p, v) for p, v in self.blobs.items() if p.startswith(path))
        for p, (data, updated) in items:
            yield (p, (len(data), updated)) if with_metadata else (p, len(data))

    def delete(self, path, recursive=False):
        with self.lock:
            doomed = [p for p in self.blobs if p.startswith(path)] if recursive else [path]
            for p in doomed:
                self.blobs.pop(p, None)

    def delete_batch(self, paths):
        with self.lock:
            for p in paths:
                self.blobs.pop(p, None)  # GCS treats a missing object (404) as deleted
        return [(p, None) for p in paths]

    def copy(self, src, dest):
        self._put(dest, self._get(src)[0])

    def copy_batch(self, src_dest_pairs):
        out = []
        for src, dest in src_dest_pairs:
            try:
                self.copy(src, dest)
                out.append((src, dest, None))
            except google_exceptions.NotFound:
                out.append((src, dest, 404))
        return out

    def copytree(self, src, dest):
        for path, _ in list(self.list_files(src)):
            self.copy(path, dest + path[len(src) :])

    def rename(self, src, dest):
        self.copy(src, dest)
        self.delete(src)


class FakeGcsFileSystem(AbstractFileSystem):
    """fsspec's ``gs://`` over a :class:`FakeGcsIO` (``gcs``, set per test): what the storage layer (make-shards'
    driver: its listing, journal, publish and clean-up) reads and writes, on the objects Beam's file system
    sees. A folder is a name prefix; a bucket always exists."""

    protocol = ("gs", "gcs")
    cachable = False
    root_marker = ""
    gcs: FakeGcsIO

    @classmethod
    def _strip_protocol(cls, path):
        return str(path).removeprefix("gs://").removeprefix("gcs://").rstrip("/")

    def _url(self, path: str) -> str:
        return "gs://" + self._strip_protocol(path)

    def ls(self, path, detail=True, **kwargs):
        prefix, entries = self._url(path) + "/", {}
        for name, size in self.gcs.list_files(prefix):
            first, below, _ = name[len(prefix) :].partition("/")
            full = self._strip_protocol(prefix + first)
            entries[full] = {"name": full, "size": 0 if below else size, "type": "directory" if below else "file"}
        if not entries:
            entries = {self._strip_protocol(path): self.info(path)}  # a file, or FileNotFoundError
        return [entries[k] if detail else k for k in sorted(entries)]

    def info(self, path, **kwargs):
        name, url = self._strip_protocol(path), self._url(path)
        if "/" in name and self.gcs.exists(url):
            return {"name": name, "size": self.gcs.size(url), "type": "file"}
        if "/" not in name or next(self.gcs.list_files(url + "/"), None):
            return {"name": name, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def _open(self, path, mode="rb", **kwargs):
        if "w" in mode:
            return _FakeBlobWriter(self.gcs, self._url(path))
        try:
            return io.BytesIO(self.gcs._get(self._url(path))[0])
        except google_exceptions.NotFound:
            raise FileNotFoundError(path) from None

    def cp_file(self, path1, path2, **kwargs):
        try:
            self.gcs.copy(self._url(path1), self._url(path2))
        except google_exceptions.NotFound:
            raise FileNotFoundError(path1) from None

    def rm_file(self, path):
        self.gcs.delete(self._url(path))


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to resolve a host name or open a connection fails the test at once."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture
def fake_gcs(monkeypatch, no_network) -> FakeGcsIO:
    """``gs://`` served by Beam's GCSFileSystem and, for the storage layer, by fsspec over one in-memory store."""
    store = FakeGcsIO()
    monkeypatch.setattr(gcsfilesystem.GCSFileSystem, "_gcsIO", lambda self: store)
    fsspec_view = type("FakeGcsFileSystemOfTest", (FakeGcsFileSystem,), {"gcs": store})
    monkeypatch.setitem(fsspec_registry._registry, "gs", fsspec_view)
    # the store stands in for the service: it answers, with credentials (bertprep's fast check, core/storage.py)
    monkeypatch.setattr(storage, "_gcs_credentials_found", lambda timeout: True)
    monkeypatch.setattr(storage, "_reachable", lambda address, timeout: None)
    return store


def _upload(local: Path, remote: str, compress: bool = False) -> None:
    data = local.read_bytes()
    with FileSystems.create(remote, compression_type="uncompressed") as f:
        f.write(gzip.compress(data, mtime=0) if compress else data)


def _read(path: str) -> bytes:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return f.read()


def _config(inputs, vocab, output_dir, **kw) -> ShardsConfig:
    base = dict(
        inputs=tuple(inputs),
        vocab=vocab,
        output_dir=output_dir,
        input_format="bert",
        num_shards=3,
        instance=InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10)),
    )
    base.update(kw)
    return ShardsConfig(**base)


@pytest.fixture
def gs_corpus(fake_gcs) -> dict[str, str]:
    """The fixture corpus on gs://: a.txt plain, b.txt gzip-compressed (decompressed by extension), and the vocab."""
    _upload(FIXTURES / "a.txt", f"{BUCKET}/corpus/a.txt")
    _upload(FIXTURES / "b.txt", f"{BUCKET}/corpus/b.txt.gz", compress=True)
    _upload(FIXTURES / "vocab.txt", f"{BUCKET}/vocab/vocab.txt")
    return {"inputs": f"{BUCKET}/corpus/", "vocab": f"{BUCKET}/vocab/vocab.txt"}


def _objects_under(store: FakeGcsIO, prefix: str) -> list[str]:
    return sorted(p[len(prefix) :] for p in store.blobs if p.startswith(prefix))


@pytest.mark.slow  # ~21 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_gs_inputs_are_listed_and_read_through_filesystems(gs_corpus):
    files = readers.expand_inputs([gs_corpus["inputs"]])  # an object-store "folder" is a prefix
    assert files == [f"{BUCKET}/corpus/a.txt", f"{BUCKET}/corpus/b.txt.gz"]
    docs = list(readers.read_documents(files[1], "bert"))
    local_docs = list(readers.read_documents(str(FIXTURES / "b.txt"), "bert"))
    assert [d.sentences for d in docs] == [d.sentences for d in local_docs] and len(docs) > 1
    assert load_vocab(gs_corpus["vocab"]).sha256 == load_vocab(str(FIXTURES / "vocab.txt")).sha256


@pytest.mark.slow  # ~21 s, as the test above (2 s of CPU: the rest is waiting inside Beam's GCS file system)
def test_gs_csv_is_read_as_the_local_file(fake_gcs, tmp_path):
    """A gzip-compressed CSV on gs:// (found by a glob): the documents of the local file, quoted line breaks kept."""
    local = tmp_path / "rows.csv"
    local.write_text(
        'id,body\n1,"First paragraph. Second sentence.\nSecond paragraph."\n2,Row two.\n', encoding="utf-8"
    )
    _upload(local, f"{BUCKET}/csv/rows.csv.gz", compress=True)
    files = readers.expand_inputs([f"{BUCKET}/csv/*.csv.gz"])
    assert files == [f"{BUCKET}/csv/rows.csv.gz"]
    docs = list(readers.read_documents(files[0], "auto", text_field="body"))
    local_docs = list(readers.read_documents(str(local), "csv", text_field="body"))
    assert [(d.line, d.sentences) for d in docs] == [(d.line, d.sentences) for d in local_docs]
    assert docs[0].sentences == ["First paragraph.", "Second sentence.", "Second paragraph."]


def test_gs_input_errors_name_the_pattern(gs_corpus):
    with pytest.raises(readers.InputError, match=r"gs://bertprep-test/nothing/\*\.txt.*matches no file"):
        readers.expand_inputs([f"{BUCKET}/nothing/*.txt"])
    with pytest.raises(readers.InputError, match=r"gs://bertprep-test/corpus/missing\.txt.*not found"):
        readers.expand_inputs([f"{BUCKET}/corpus/missing.txt"])


@pytest.mark.slow
def test_make_shards_end_to_end_on_gs(gs_corpus, fake_gcs, tmp_path):
    """Inputs, vocab and output all on gs://: the shards and manifest appear there, every shard's sha256
    matches the manifest, and the shards are byte-identical to a local run of the same corpus."""
    out = f"{BUCKET}/shards"
    run_make_shards(_config([gs_corpus["inputs"]], gs_corpus["vocab"], out, bucket_size=0), ONE_WORKER)

    manifest = json.loads(_read(f"{out}/manifest.json"))
    assert manifest["format_version"] == schema.FORMAT_VERSION
    assert manifest["statistics"]["files"] == 2 and manifest["statistics"]["instances"] > 0
    assert _read(f"{out}/vocab.txt").decode("utf-8").split("\n")[:-1] == load_vocab(str(FIXTURES / "vocab.txt")).tokens
    names = [e["file"] for e in manifest["shards"]]
    assert names == [schema.shard_name(i, 3) for i in range(3)]
    vocab_size = manifest["vocab"]["size"]
    for entry in manifest["shards"]:
        data = _read(f"{out}/{entry['file']}")
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        assert table.schema.equals(schema.shard_schema(vocab_size)) and table.num_rows == entry["rows"]
    assert sum(e["rows"] for e in manifest["shards"]) == manifest["statistics"]["instances"]

    local_in = tmp_path / "corpus"
    local_in.mkdir()
    (local_in / "a.txt").write_bytes((FIXTURES / "a.txt").read_bytes())
    (local_in / "b.txt.gz").write_bytes(gzip.compress((FIXTURES / "b.txt").read_bytes(), mtime=0))
    local = run_make_shards(
        _config([str(local_in)], str(FIXTURES / "vocab.txt"), str(tmp_path / "out"), bucket_size=0), ONE_WORKER
    )
    assert [(e["file"], e["rows"], e["sha256"]) for e in local["shards"]] == [
        (e["file"], e["rows"], e["sha256"]) for e in manifest["shards"]
    ]
    assert local["statistics"] == manifest["statistics"]


def test_file_pairing_scope_on_gs(gs_corpus, fake_gcs):
    out = f"{BUCKET}/shards-file-scope"
    run_make_shards(
        _config([gs_corpus["inputs"]], gs_corpus["vocab"], out, pairing_scope="file", bucket_size=7), ONE_WORKER
    )
    manifest = json.loads(_read(f"{out}/manifest.json"))
    assert manifest["config"]["pairing_scope"] == "file"
    assert sum(e["rows"] for e in manifest["shards"]) == manifest["statistics"]["instances"] > 0


def test_no_temporary_files_left_on_gs(gs_corpus, fake_gcs):
    out = f"{BUCKET}/shards"
    run_make_shards(_config([gs_corpus["inputs"]], gs_corpus["vocab"], out), ONE_WORKER)
    left = _objects_under(fake_gcs, out + "/")
    assert left == sorted(["manifest.json", "vocab.txt", "README.md"] + [schema.shard_name(i, 3) for i in range(3)])


def test_existing_gs_output_is_refused(gs_corpus, fake_gcs):
    out = f"{BUCKET}/shards"
    config = _config([gs_corpus["inputs"]], gs_corpus["vocab"], out)
    run_make_shards(config, ONE_WORKER)
    with pytest.raises(MakeShardsError, match="already holds shards"):
        run_make_shards(config, ONE_WORKER)


def test_missing_gs_vocab_is_a_clear_error(fake_gcs):
    with pytest.raises(VocabError, match=r"gs://bertprep-test/missing/vocab\.txt"):
        load_vocab(f"{BUCKET}/missing/vocab.txt")
