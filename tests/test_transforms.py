"""Each Beam composite of ``pipeline/transforms.py`` alone, with ``TestPipeline`` and ``assert_that``: what it
emits equals what the plain functions it adapts give (apache/beam ``custom_ptransform_test.py`` style)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # (not collected by pytest)
from apache_beam.testing.util import assert_that, equal_to

from bertprep.pipeline import readers, schema, shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.instances import VocabIds
from bertprep.pipeline.tokenization import SentenceEncoder, load_vocab
from bertprep.pipeline.transforms import (
    BUCKETS_DIR,
    CreateTrainingInstances,
    ProcessFilesStreaming,
    ReadDocuments,
    TokenizeDocuments,
    WriteArrowShards,
    bucket_documents,
    document_counts,
    encode_document,
    make_bucket_instances,
    stable_bucket,
)

FIXTURES = Path(__file__).parent / "fixtures" / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")
FILES = [str(FIXTURES / "a.txt"), str(FIXTURES / "b.txt")]


def _pipeline() -> BeamTestPipeline:
    # the in-process runner, as make-shards' local default (no Prism download, one process)
    return BeamTestPipeline(runner=FnApiRunner(), options=PipelineOptions(["--direct_num_workers=1"]))


def _config(**kw) -> ShardsConfig:
    base = dict(inputs=tuple(FILES), vocab=VOCAB, output_dir="unused", input_format="bert", bucket_size=7,
                instance=InstanceConfig(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2), num_shards=3)
    base.update(kw)
    return ShardsConfig(**base)


def _documents() -> list[tuple[int, int, list[str]]]:
    return [(i, d.ordinal, list(d.sentences))
            for i, path in enumerate(FILES) for d in readers.read_documents(path, "bert")]


def _tokenized() -> list[tuple]:
    encoder = SentenceEncoder(load_vocab(VOCAB), True)
    return [encode_document(encoder, i, ordinal, sentences) for i, ordinal, sentences in _documents()]


def test_read_documents_emits_every_document_and_the_reader_counts():
    config = _config()
    with _pipeline() as p:
        out = p | beam.Create(list(enumerate(FILES))) | ReadDocuments(config)
        assert_that(out.documents, equal_to(_documents()), label="documents")
        assert_that(out.counts | beam.Map(lambda c: sorted(c)), equal_to([["reader"], ["reader"]]), label="counts")


def test_tokenize_documents_equals_the_sentence_encoder():
    with _pipeline() as p:
        out = p | beam.Create(_documents()) | TokenizeDocuments(_config())
        assert_that(out, equal_to(_tokenized()))


def _expected_buckets(config: ShardsConfig, tmp_path: Path) -> dict[int, int]:
    """bucket -> rows, from the plain functions (stable_bucket, make_bucket_instances) on the same documents."""
    vocab = load_vocab(VOCAB)
    tokenized = _tokenized()
    num_buckets = -(-len(tokenized) // config.bucket_size)
    groups = defaultdict(list)
    for doc in tokenized:
        groups[stable_bucket(config.instance.random_seed, FILES[doc[0]], doc[1], num_buckets)].append(doc)
    rows = {}
    for bucket, docs in groups.items():
        meta, _ = make_bucket_instances(bucket, bucket_documents(sorted(docs, key=lambda d: d[:2])), config,
                                        VocabIds(vocab), vocab.size, str(tmp_path))
        rows[bucket] = meta[2]
    return rows


@pytest.mark.parametrize("sampling", ["exact", "fast"])
def test_create_training_instances_buckets_as_the_plain_functions(tmp_path, sampling):
    config = _config(sampling=sampling)
    expected = _expected_buckets(config, tmp_path / "direct")
    assert len(expected) == 5 and sum(expected.values()) > 0  # 30 documents / bucket size 7
    out_dir = tmp_path / "beam"
    with _pipeline() as p:
        out = p | beam.Create(_tokenized()) | CreateTrainingInstances(config, FILES, str(out_dir))
        assert_that(out.buckets | beam.Map(lambda meta: (meta[0], meta[2])), equal_to(sorted(expected.items())),
                    label="buckets")
        assert_that(out.counts | beam.Map(lambda c: c["buckets"]), equal_to([1] * 5), label="counts")
    for bucket in expected:  # the bucket files are byte for byte the plain function's
        name = f"bucket-{bucket:016d}.arrows"
        assert (out_dir / name).read_bytes() == (tmp_path / "direct" / name).read_bytes()


def test_process_files_streaming_makes_runs_of_consecutive_documents(tmp_path):
    config = _config(pairing_scope="file")
    per_file = [sum(1 for _ in readers.read_documents(path, "bert")) for path in FILES]
    expected_keys = sorted((i << 24) | run for i, n in enumerate(per_file) for run in range(-(-n // 7)))
    with _pipeline() as p:
        out = p | beam.Create(list(enumerate(FILES))) | ProcessFilesStreaming(config, str(tmp_path))
        assert_that(out.buckets | beam.Map(lambda meta: meta[0]), equal_to(expected_keys), label="buckets")
        assert_that(out.counts | beam.Filter(lambda c: "reader" in c) | beam.Map(lambda c: c["reader"]["files"]),
                    equal_to([1, 1]), label="reader")


def test_write_arrow_shards_balances_rows_and_writes_the_manifest_last(tmp_path):
    config = _config(num_shards=3)
    vocab = load_vocab(VOCAB)
    ids = VocabIds(vocab)
    bucket_dir = tmp_path / BUCKETS_DIR
    bucket_dir.mkdir()
    tokenized = _tokenized()
    metas, counts = [], []
    for bucket, start in enumerate(range(0, len(tokenized), 10)):
        docs = bucket_documents(tokenized[start:start + 10])
        meta, stats = make_bucket_instances(bucket, docs, config, ids, vocab.size, str(bucket_dir))
        metas.append(meta)
        counts.append({"tokenizer": document_counts(docs, 0, vocab.token_to_id["[UNK]"]),
                       "instances": stats.to_dict(), "buckets": 1})
    total = sum(m[2] for m in metas)
    vocab_info = {"file": "vocab.txt", "size": vocab.size, "sha256": vocab.sha256}
    with _pipeline() as p:
        written = ((p | "Buckets" >> beam.Create(metas), p | "Counts" >> beam.Create(counts))
                   | WriteArrowShards(config, vocab_info, list(vocab.tokens), str(tmp_path)))
        assert_that(written, equal_to([str(tmp_path / schema.MANIFEST_NAME)]))
    manifest = json.loads((tmp_path / schema.MANIFEST_NAME).read_text(encoding="utf-8"))
    rows = [entry["rows"] for entry in manifest["shards"]]
    assert len(rows) == 3 and sum(rows) == total and max(rows) - min(rows) <= 1
    for entry in manifest["shards"]:
        with pa.memory_map(str(tmp_path / entry["file"])) as source:
            assert pa.ipc.open_file(source).read_all().num_rows == entry["rows"]
    assert manifest["statistics"]["instances"] == total
    assert not bucket_dir.exists() and (tmp_path / shards.VOCAB_NAME).exists()  # buckets removed, vocab copied
