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
