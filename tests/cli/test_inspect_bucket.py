"""``bertprep inspect gs://... | s3://...``: a shard directory in a bucket is inspected as its local copy is.

The buckets are real API servers (``gcp-storage-emulator``, ``moto``: ``cloud_factory.py``) reached through the
clients ``train`` reads them with (gcsfs, s3fs). inspect reads the manifest from the bucket and fetches the
shards it reads into train's shard cache (``remote_shards.open_cache``), each checked against the manifest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.inspect_cmd import inspect_shards
from bertprep.core import storage
from cloud_factory import upload_folder
from conftest import need_module

need_module("gcsfs")
need_module("s3fs")


def _inspect(*args: str) -> tuple[int, str]:
    """``bertprep inspect ARGS`` in this process: its exit status and output (an unexpected exception fails)."""
    result = CliRunner().invoke(inspect_shards, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """make-shards of the fixture corpus (2 shards, ``pipeline_factory``), once for the module."""
    from pipeline_factory import make_shards

    out = tmp_path_factory.mktemp("inspect-bucket") / "shards"
    assert make_shards(out).exit_code == 0
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The shard cache's default folder ($XDG_CACHE_HOME/bertprep/shards), under the test's folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "bertprep" / "shards"


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_inspect_of_a_bucket_prints_what_inspect_of_the_local_copy_prints(request, shards, cache, store):
    """Statistics, decoded rows and ``--verify``'s verdict are the local copy's, word for word; without
    ``--verify`` only the shard that holds the decoded rows is fetched."""
    bucket = request.getfixturevalue(store)
    upload_folder(shards, f"{bucket}/shards")
    local = _inspect(str(shards), "-n", "2", "--verify")
    assert local[0] == 0 and "verified:" in local[1]
    assert _inspect(f"{bucket}/shards", "-n", "2", "--verify") == local
    assert _cached(cache) == ["shard-00000-of-00002.arrow", "shard-00001-of-00002.arrow"]
    for path in cache.rglob("*.arrow"):
        path.unlink()
    assert _inspect(f"{bucket}/shards", "-n", "2", "--no-stats") == _inspect(str(shards), "-n", "2", "--no-stats")
    assert _cached(cache) == ["shard-00000-of-00002.arrow"]


def _cached(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*.arrow"))


def test_verify_of_a_bucket_names_a_changed_shard_and_checks_the_others(gcs, shards, cache):
    """A shard overwritten in the bucket after make-shards: ``--verify`` fails naming its URL (and the manifest
    it differs from), still checks the other shard, and leaves nothing of the changed one in the cache."""
    from apache_beam.io.filesystems import FileSystems

    upload_folder(shards, f"{gcs}/shards")
    with FileSystems.create(f"{gcs}/shards/shard-00001-of-00002.arrow") as out:
        out.write((shards / "shard-00000-of-00002.arrow").read_bytes())
    status, output = _inspect(f"{gcs}/shards", "-n", "0", "--no-stats", "--verify")
    assert status == 1
    assert output.startswith("Error: verification failed:\n")
    (problem,) = output.splitlines()[1:]
    assert problem.strip().startswith(f"{gcs}/shards/shard-00001-of-00002.arrow: sha256 differs from the one in ")
    assert _cached(cache) == ["shard-00000-of-00002.arrow"]


@pytest.mark.parametrize("store", ["gcs", "s3"])
def test_verify_asks_the_bucket_not_the_warm_cache(request, shards, cache, store):
    """A shard overwritten in the bucket while the cache holds the copy fetched before: ``--verify`` compares
    the object's version (GCS generation, S3 ETag) with the cached copy's, fetches it again and fails as with a
    cold cache (before: "verified: ... match", from the stale copy)."""
    bucket = request.getfixturevalue(store)
    upload_folder(shards, f"{bucket}/shards")
    status, output = _inspect(f"{bucket}/shards", "-n", "0", "--no-stats", "--verify")
    assert status == 0 and "verified:" in output
    assert _cached(cache) == ["shard-00000-of-00002.arrow", "shard-00001-of-00002.arrow"]  # the cache is warm
    with (
        open(shards / "shard-00000-of-00002.arrow", "rb") as f,
        storage.open(f"{bucket}/shards/shard-00001-of-00002.arrow", "wb") as out,
    ):
        out.write(f.read())
    status, output = _inspect(f"{bucket}/shards", "-n", "0", "--no-stats", "--verify")
    assert status == 1, output
    (problem,) = output.splitlines()[1:]
    assert problem.strip().startswith(f"{bucket}/shards/shard-00001-of-00002.arrow: sha256 differs from the one in ")
    assert _cached(cache) == ["shard-00000-of-00002.arrow"]


@pytest.mark.parametrize("folder", ["missing", "unfinished"])
def test_a_bucket_folder_without_a_manifest_is_refused_in_one_line(gcs, shards, cache, folder):
    """No such folder, or one whose run has not written its manifest yet (make-shards writes it last)."""
    from apache_beam.io.filesystems import FileSystems

    if folder == "unfinished":
        upload_folder(shards, f"{gcs}/{folder}")
        FileSystems.delete([f"{gcs}/{folder}/manifest.json"])
    status, output = _inspect(f"{gcs}/{folder}", "--verify")
    assert status == 1
    assert output.splitlines() == [
        f"Error: {gcs}/{folder}/manifest.json does not exist: {gcs}/{folder} is not a finished shard directory "
        "(check the bucket and folder name; make-shards writes the manifest last)"
    ]
