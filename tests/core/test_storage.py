"""core.storage: the one rule of what is remote, and the one API (open, exists, list, an object's version, read
and write a manifest) on a local folder and on real buckets (``gcp-storage-emulator``, ``moto``:
``cloud_factory.py``) through the client every command uses (fsspec's gcsfs, s3fs)."""

from __future__ import annotations

import json
import logging
import re
import sys

import pytest

from bertprep.core import schema, storage
from conftest import need_module


@pytest.mark.parametrize(
    ("path", "scheme", "remote"),
    [
        ("gs://bucket/shards", "gs", True),
        ("s3://bucket/shards", "s3", True),
        ("GS://bucket/x", "gs", True),
        ("hdfs://namenode/x", "hdfs", True),
        ("file:///data/shards", "file", False),
        ("local:///data/shards", "local", False),
        ("/data/shards", "", False),
        ("data/gs://not-a-scheme", "", False),
        ("C:\\data\\shards", "", False),
        ("C:/data/shards", "", False),
        ("C://data/shards", "", False),  # a drive letter, not a one-letter scheme
        ("\\\\server\\share\\shards", "", False),
        ("", "", False),
        (None, "", False),
    ],
)
def test_one_rule_of_what_is_remote(path, scheme, remote):
    assert storage.scheme(path) == scheme
    assert storage.is_remote(path) is remote


def test_local_forms_and_joins():
    assert storage.local_path("file:///data/shards") == "/data/shards"
    assert storage.local_path("/data/shards") == "/data/shards"
    assert storage.local_path("C:\\data") == "C:\\data"
    with pytest.raises(ValueError, match="gs://b/x is not a local path"):
        storage.local_path("gs://b/x")
    assert storage.join("gs://b/shards/", "eval", "manifest.json") == "gs://b/shards/eval/manifest.json"
    assert storage.join("s3://b", "x") == "s3://b/x"
    assert storage.bucket_of("gs://b/shards/x") == "b" and storage.bucket_of("/data") == ""


def _manifest() -> dict:
    return {"format_version": schema.FORMAT_VERSION, "shards": [{"file": schema.shard_name(0, 1)}]}


def test_a_local_folder_through_the_api(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / schema.shard_name(0, 1)).write_bytes(b"rows")
    path = storage.write_manifest(str(folder), _manifest())
    assert json.loads((folder / schema.MANIFEST_NAME).read_text()) == _manifest()
    assert storage.read_manifest(str(folder)) == _manifest() == storage.read_manifest(f"file://{folder}")
    assert storage.exists(path) and not storage.exists(str(folder / "nothing"))
    assert storage.listdir(str(folder)) == [schema.MANIFEST_NAME, schema.shard_name(0, 1)]
    assert storage.listdir(str(tmp_path / "missing")) == []
    with storage.open(str(folder / schema.shard_name(0, 1))) as f:
        assert f.read() == b"rows"
    before = storage.object_version(str(folder / schema.shard_name(0, 1)))
    (folder / schema.shard_name(0, 1)).write_bytes(b"other rows")
    assert storage.object_version(str(folder / schema.shard_name(0, 1))) != before
    with pytest.raises(FileNotFoundError, match=re.escape("no manifest.json; this is not a finished shard directory")):
        storage.read_manifest(str(tmp_path))


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_a_bucket_through_the_same_api(request, store):
    """The same calls on a bucket: a manifest written and read back (parsed and checked as a local one), the
    folder listed, and an object's version (GCS generation, S3 ETag) that changes when it is written again."""
    need_module("gcsfs" if store == "gcs" else "s3fs")
    bucket = request.getfixturevalue(store)
    folder = f"{bucket}/layer"
    storage.write_bytes(f"{folder}/{schema.shard_name(0, 1)}", b"rows")
    storage.write_manifest(folder, _manifest())
    assert storage.read_manifest(folder) == _manifest()
    assert storage.exists(f"{folder}/{schema.MANIFEST_NAME}") and not storage.exists(f"{folder}/nothing")
    assert storage.listdir(folder) == [schema.MANIFEST_NAME, schema.shard_name(0, 1)]
    with storage.open(f"{folder}/{schema.shard_name(0, 1)}") as f:
        assert f.read() == b"rows"
    shard = f"{folder}/{schema.shard_name(0, 1)}"
    before = storage.object_version(shard)
    assert before and storage.list_versions(folder)[schema.shard_name(0, 1)] == before
    storage.write_bytes(shard, b"other rows")
    assert storage.object_version(shard) not in (None, before)
    assert storage.list_versions(folder)[schema.shard_name(0, 1)] == storage.object_version(shard)
    with pytest.raises(storage.StorageError, match="^" + re.escape(f"{folder}/nothing/manifest.json does not exist: ")):
        storage.read_manifest(f"{folder}/nothing")


def test_a_client_traceback_is_one_debug_line(caplog):
    """gcsfs logs each request that ran out of retries with ``logger.exception`` (the aiohttp traceback: ten of
    them above the one line of a train whose store went away); through the layer it is one DEBUG line. The
    record is gcsfs's own (its retry wrapper, given one try)."""
    need_module("gcsfs")
    import asyncio

    import aiohttp
    from gcsfs.retry import retry_request

    @retry_request(retries=1)
    async def _call():
        raise aiohttp.ClientConnectionError("Cannot connect to host 127.0.0.1:9023")

    storage.filesystem("gs://bucket/x")  # (the layer's client set up)
    caplog.set_level(logging.DEBUG, logger="gcsfs")
    with pytest.raises(aiohttp.ClientConnectionError):
        asyncio.run(_call())
    (record,) = [r for r in caplog.records if r.name == "gcsfs"]
    assert record.levelno == logging.DEBUG and record.exc_info is None and "Traceback" not in caplog.text
    assert "out of retries" in record.getMessage() and "ClientConnectionError: Cannot connect" in record.getMessage()


def test_the_layer_imports_no_client_until_a_bucket_is_used():
    """A local run pays for no cloud client: importing the layer imports neither fsspec nor Beam."""
    import subprocess

    code = "import sys, bertprep.core.storage; print(sorted(m for m in ('fsspec', 'apache_beam') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_local_folder_made_listed_copied_moved_and_deleted(tmp_path):
    """What make-shards' driver does to its output folder, on a local disk: a folder made with its parents, the
    files (not the folders) directly under it or at any depth, copies and moves that replace their targets, a
    delete that a step repeated after a kill survives, a folder removed with what it holds."""
    out = str(tmp_path / "out")
    storage.mkdirs(storage.join(out, ".staging", "eval"))
    storage.mkdirs(storage.join(out, ".staging"))  # (one that exists is fine)
    for name, data in (("a.arrow", b"a"), (".staging/b.arrow", b"b"), (".staging/eval/c.arrow", b"c")):
        storage.write_bytes(storage.join(out, name), data)
    assert storage.list_files(out) == [storage.join(out, "a.arrow")]  # not the folder .staging
    assert storage.list_files(out, recursive=True) == [
        storage.join(out, n) for n in (".staging/b.arrow", ".staging/eval/c.arrow", "a.arrow")
    ]
    assert storage.list_files(str(tmp_path / "missing"), recursive=True) == []
    storage.copy([storage.join(out, "a.arrow")], [storage.join(out, "copy.arrow")])
    storage.rename([storage.join(out, ".staging/b.arrow")], [storage.join(out, "a.arrow")])  # replaces it
    assert (tmp_path / "out" / "a.arrow").read_bytes() == b"b"
    assert (tmp_path / "out" / "copy.arrow").read_bytes() == b"a"
    assert not (tmp_path / "out" / ".staging" / "b.arrow").exists()
    storage.delete([storage.join(out, "copy.arrow"), storage.join(out, "never-there.arrow")])
    storage.delete([storage.join(out, "copy.arrow")])  # again: already gone, no error
    storage.remove_tree(storage.join(out, ".staging"))
    storage.remove_tree(storage.join(out, ".staging"))  # nothing left to remove
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.arrow"]
    with pytest.raises(FileNotFoundError):
        storage.rename([storage.join(out, "gone.arrow")], [storage.join(out, "x.arrow")])
    with pytest.raises(ValueError, match="between local paths and stores"):
        storage.copy([storage.join(out, "a.arrow")], ["gs://b/a.arrow"])
    with pytest.raises(ValueError, match="1 sources but 0 destinations"):
        storage.rename([storage.join(out, "a.arrow")], [])


def test_atomic_writes_and_stale_staging_through_the_layer(tmp_path):
    """``storage.Files`` is what ``atomic`` is handed for a path that may be remote: the write-then-rename and the
    removal of a dead run's staging folder work through it as through the local default."""
    from bertprep.core import atomic

    atomic.write_bytes(str(tmp_path / "journal.json"), b"{}", storage.Files)
    assert (tmp_path / "journal.json").read_bytes() == b"{}" and sorted(p.name for p in tmp_path.iterdir()) == [
        "journal.json"
    ]
    dead = tmp_path / f"{atomic.STAGING_PREFIX}tmp-{atomic.host_name()}-999999999-0123abcd"
    (dead / "buckets").mkdir(parents=True)
    (dead / "buckets" / "bucket-0.arrows").write_bytes(b"rows")
    assert atomic.remove_stale_staging(str(tmp_path), "tmp", files=storage.Files) == [str(dead)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.json"]


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_a_bucket_folder_made_listed_copied_moved_and_deleted(request, store):
    """The same operations on a bucket, where a folder is a name prefix and a rename a copy and a delete; an
    object another client wrote after the layer listed the folder (a Beam worker's shard) is seen at once,
    not hidden by fsspec's listing cache."""
    need_module("gcsfs" if store == "gcs" else "s3fs")
    from apache_beam.io.filesystems import FileSystems

    out = f"{request.getfixturevalue(store)}/out"
    storage.mkdirs(f"{out}/.staging")  # nothing to make on a store
    for name, data in (("a.arrow", b"a"), (".staging/b.arrow", b"b"), (".staging/eval/c.arrow", b"c")):
        storage.write_bytes(f"{out}/{name}", data)
    assert storage.list_files(out) == [f"{out}/a.arrow"]
    assert storage.listdir(out) == [".staging", "a.arrow"]  # (the listing the client may keep)
    with FileSystems.create(f"{out}/.staging/d.arrow") as f:  # as a worker writes, through Beam's client
        f.write(b"d")
    assert storage.exists(f"{out}/.staging/d.arrow")
    assert storage.list_files(out, recursive=True) == [
        f"{out}/{n}" for n in (".staging/b.arrow", ".staging/d.arrow", ".staging/eval/c.arrow", "a.arrow")
    ]
    storage.copy([f"{out}/a.arrow"], [f"{out}/copy.arrow"])
    storage.rename([f"{out}/.staging/b.arrow", f"{out}/.staging/d.arrow"], [f"{out}/a.arrow", f"{out}/d.arrow"])
    assert storage.read_bytes(f"{out}/a.arrow") == b"b" and storage.read_bytes(f"{out}/copy.arrow") == b"a"
    assert not storage.exists(f"{out}/.staging/b.arrow") and storage.read_bytes(f"{out}/d.arrow") == b"d"
    storage.delete([f"{out}/copy.arrow", f"{out}/never-there.arrow"])
    storage.delete([f"{out}/copy.arrow"])  # again: already gone, no error
    storage.remove_tree(f"{out}/.staging")
    storage.remove_tree(f"{out}/.staging")  # nothing left to remove
    assert storage.list_files(out, recursive=True) == [f"{out}/a.arrow", f"{out}/d.arrow"]
    assert not storage.exists(f"{out}/copy.arrow")
    with pytest.raises(ValueError, match="is a whole bucket: not deleting it"):
        storage.remove_tree(out.rsplit("/", 1)[0])
