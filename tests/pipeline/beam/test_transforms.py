"""Each Beam composite of ``pipeline/beam/transforms.py`` alone, with ``TestPipeline`` and ``assert_that``: what it
emits equals what the plain functions it adapts (``pipeline/instances/bucket_files.py``) give (apache/beam
``custom_ptransform_test.py`` style)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from bertprep.pipeline import readers
from bertprep.pipeline.beam.transforms import (
    CreateTrainingInstances,
    ProcessFilesStreaming,
    ReadDocuments,
    TokenizeDocuments,
)
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.instances.bucket_files import bucket_documents, make_bucket_instances, stable_bucket
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.text.tokenization import load_vocab
from pipeline_factory import FILES, VOCAB, beam_pipeline, documents, shards_config, tokenized


def test_read_documents_emits_every_document_and_the_reader_counts():
    config = shards_config()
    with beam_pipeline() as p:
        out = p | beam.Create(list(enumerate(FILES))) | ReadDocuments(config)
        assert_that(out.documents, equal_to(documents()), label="documents")
        assert_that(out.counts | beam.Map(lambda c: sorted(c)), equal_to([["reader"], ["reader"]]), label="counts")


def test_tokenize_documents_equals_the_sentence_encoder():
    with beam_pipeline() as p:
        out = p | beam.Create(documents()) | TokenizeDocuments(shards_config())
        assert_that(out, equal_to(tokenized()))


def _expected_buckets(config: ShardsConfig, tmp_path: Path) -> dict[int, int]:
    """bucket -> rows, from the plain functions (stable_bucket, make_bucket_instances) on the same documents."""
    vocab = load_vocab(VOCAB)
    docs_in_order = tokenized()
    num_buckets = -(-len(docs_in_order) // config.bucket_size)
    groups = defaultdict(list)
    for doc in docs_in_order:
        groups[stable_bucket(config.instance.random_seed, FILES[doc[0]], doc[1], num_buckets)].append(doc)
    rows = {}
    for bucket, docs in groups.items():
        meta, _ = make_bucket_instances(
            bucket,
            bucket_documents(sorted(docs, key=lambda d: d[:2])),
            config,
            VocabIds(vocab),
            vocab.size,
            str(tmp_path),
        )
        rows[bucket] = meta[2]
    return rows


@pytest.mark.parametrize("sampling", ["exact", "fast"])
def test_create_training_instances_buckets_as_the_plain_functions(tmp_path, sampling):
    config = shards_config(sampling=sampling)
    expected = _expected_buckets(config, tmp_path / "direct")
    assert len(expected) == 5 and sum(expected.values()) > 0  # 30 documents / bucket size 7
    out_dir = tmp_path / "beam"
    with beam_pipeline() as p:
        out = p | beam.Create(tokenized()) | CreateTrainingInstances(config, FILES, str(out_dir))
        assert_that(
            out.buckets | beam.Map(lambda meta: (meta[0], meta[2])), equal_to(sorted(expected.items())), label="buckets"
        )
        assert_that(out.counts | beam.Map(lambda c: c["buckets"]), equal_to([1] * 5), label="counts")
    for bucket in expected:  # the bucket files are byte for byte the plain function's
        name = f"bucket-{bucket:016d}.arrows"
        assert (out_dir / name).read_bytes() == (tmp_path / "direct" / name).read_bytes()


def test_process_files_streaming_makes_runs_of_consecutive_documents(tmp_path):
    config = shards_config(pairing_scope="file")
    per_file = [sum(1 for _ in readers.read_documents(path, "bert")) for path in FILES]
    expected_keys = sorted((i << 24) | run for i, n in enumerate(per_file) for run in range(-(-n // 7)))
    with beam_pipeline() as p:
        out = p | beam.Create(list(enumerate(FILES))) | ProcessFilesStreaming(config, str(tmp_path))
        assert_that(out.buckets | beam.Map(lambda meta: meta[0]), equal_to(expected_keys), label="buckets")
        assert_that(
            out.counts | beam.Filter(lambda c: "reader" in c) | beam.Map(lambda c: c["reader"]["files"]),
            equal_to([1, 1]),
            label="reader",
        )
