"""make-shards where the corpus lives: two local folders, a GCS bucket, an S3 bucket give the same bytes.

A document's keys (its bucket, its held-out side, its mixture draw) hash its file's path relative to the root
of the input that names it (``readers.input_keys``), so moving or copying a corpus changes no shard. The
buckets are real API servers run by the tests (``gcp-storage-emulator``, ``moto``: ``cloud_factory.py``),
reached through the client libraries Beam uses (google-cloud-storage, boto3).
"""

from __future__ import annotations

import shutil

import pytest

from bertprep.pipeline.beam.run import run_make_shards
from bertprep.pipeline.config import InstanceConfig, MaskingConfig, ShardsConfig
from cloud_factory import CORPUS_VOCAB, digests_but_paths, upload_folder, write_corpus

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
