"""make-shards where the corpus lives: two local folders, a GCS bucket, an S3 bucket give the same bytes.

A document's keys (its bucket, its held-out side, its mixture draw) hash its file's path relative to the root
of the input that names it (``readers.input_keys``), so moving or copying a corpus changes no shard. The
buckets are real API servers run by the tests (``gcp-storage-emulator``, ``moto``: ``cloud_factory.py``),
reached through the client libraries Beam uses (google-cloud-storage, boto3).
"""

from __future__ import annotations

import shutil
import socket

import pytest

from bertprep.pipeline.beam.run import run_make_shards
from bertprep.pipeline.config import InstanceConfig, MaskingConfig, ShardsConfig
from cloud_factory import CORPUS_VOCAB, digests_but_paths, emulator, upload_folder, write_corpus
from conftest import need_module

ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]

#: The default options but a small ``bucket_tokens`` (several buckets of this small corpus), and the file
#: pairing scope with a held-out split.
OPTIONS = {
    "default": dict(bucket_tokens=2_000),
    "file-scope-eval": dict(pairing_scope="file", eval_fraction=0.05),
}


def _config(inputs: str, vocab: str, output_dir: str, options: dict) -> ShardsConfig:
    return ShardsConfig(
        inputs=(inputs,),
        vocab=vocab,
        output_dir=output_dir,
        input_format="bert",
        instance=InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10)),
        num_shards=3,
        **options,
    )


def _make(root: str, corpus: str, vocab: str, options: dict) -> dict[str, str]:
    """make-shards of ``root/corpus/`` with ``vocab`` into ``root/out``: the digests of what it wrote, its
    manifests' paths (the corpus folder, the vocab, the output folder) replaced by stand-ins."""
    out = f"{root}/out"
    manifest = run_make_shards(_config(corpus, vocab, out, options), ONE_WORKER)
    assert manifest["statistics"]["instances"] > 0
    folder = corpus.rstrip("/")  # given with or without its "/"
    return digests_but_paths(out, {folder + "/": "<corpus>/", folder: "<corpus>/", vocab: "<vocab>", out: "<out>"})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus")


@pytest.fixture(scope="module")
def local_digests(corpus, tmp_path_factory) -> dict[str, dict[str, str]]:
    """Per option set, the digests of a local run over ``corpus``."""
    out = {}
    for name, options in OPTIONS.items():
        root = tmp_path_factory.mktemp(f"local-{name}")
        out[name] = _make(str(root), str(corpus), str(CORPUS_VOCAB), options)
    return out


@pytest.mark.parametrize("name", list(OPTIONS))
def test_the_same_corpus_in_another_folder_gives_the_same_bytes(corpus, local_digests, tmp_path, name):
    moved = tmp_path / "elsewhere" / "copy-of-corpus"
    shutil.copytree(corpus, moved)
    vocab = tmp_path / "vocab.txt"
    shutil.copy(CORPUS_VOCAB, vocab)
    here = _make(str(tmp_path), str(moved) + "/", str(vocab), OPTIONS[name])
    expected = local_digests[name]
    assert any(n.startswith("shard-") for n in expected)
    if name == "default":  # several buckets: the keys decide which documents pair
        assert sum(n.startswith("shard-") for n in expected) == 3
    else:  # the keys decide the held-out side
        assert any(n.startswith("eval/shard-") for n in expected)
    assert here == expected


#: Beam's S3 file system makes a boto3 client per operation (about 0.7 s each on a loaded 2-core machine: a
#: run takes minutes), and Beam looks for Google credentials for about 20 s once per process: all but the GCS
#: run with the default options are ``slow`` (``make test`` runs them, ``make test-fast`` does not).
STORES = [
    ("gcs", "default"),
    pytest.param("gcs", "file-scope-eval", marks=pytest.mark.slow),
    pytest.param("s3", "default", marks=pytest.mark.slow),
    pytest.param("s3", "file-scope-eval", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("store", "name"), STORES)
def test_make_shards_in_a_bucket_gives_the_bytes_of_a_local_run(corpus, local_digests, request, store, name):
    bucket = request.getfixturevalue(store)  # gs://NAME or s3://NAME on the emulator
    upload_folder(corpus, f"{bucket}/corpus")
    upload_folder(CORPUS_VOCAB.parent, f"{bucket}/vocab")  # (the fixture folder: vocab.txt and two texts)
    got = _make(bucket, f"{bucket}/corpus/", f"{bucket}/vocab/vocab.txt", OPTIONS[name])
    assert got == local_digests[name]


def test_an_emulator_leaves_no_process_behind(tmp_path):
    """What the session fixtures rely on: the server listens while the block runs and is gone after it."""
    need_module("gcp_storage_emulator")
    with emulator("gcs", tmp_path) as server:
        host, port = server.url.removeprefix("http://").split(":")
        socket.create_connection((host, int(port)), timeout=5).close()
    assert server.proc.poll() is not None
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=1).close()
