"""``pipeline/shards/write.py``: :class:`WriteArrowShards` alone with ``TestPipeline`` and ``assert_that`` (balanced
shards from bucket files, the manifest written last) and the counts combiner it sums the statistics with. (Its
refusals, e.g. more shards than instances, are tested end to end in ``test_faults_pipeline.py``.)"""

from __future__ import annotations

import json

import apache_beam as beam
import pyarrow as pa
from apache_beam.testing.util import assert_that, equal_to

from bertprep.core import schema
from bertprep.pipeline.instances.bucket_files import (
    bucket_documents,
    document_counts,
    make_bucket_instances,
)
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.shards import store as shards
from bertprep.pipeline.shards.store import BUCKETS_DIR
from bertprep.pipeline.shards.write import MergeCountsFn, WriteArrowShards, WriteManifestFn
from bertprep.pipeline.text.tokenization import load_vocab
from pipeline_factory import VOCAB, beam_pipeline, shards_config, tokenized


def test_write_arrow_shards_balances_rows_and_writes_the_manifest_last(tmp_path):
    config = shards_config(num_shards=3)
    vocab = load_vocab(VOCAB)
    ids = VocabIds(vocab)
    bucket_dir = tmp_path / BUCKETS_DIR
    bucket_dir.mkdir()
    docs_in_order = tokenized()
    metas, counts = [], []
    for bucket, start in enumerate(range(0, len(docs_in_order), 10)):
        docs = bucket_documents(docs_in_order[start : start + 10])
        meta, stats = make_bucket_instances(bucket, docs, config, ids, vocab.size, str(bucket_dir))
        metas.append(meta)
        counts.append(
            {
                "tokenizer": document_counts(docs, 0, vocab.token_to_id["[UNK]"]),
                "instances": stats.to_dict(),
                "buckets": 1,
            }
        )
    total = sum(m[2] for m in metas)
    vocab_info = {"file": "vocab.txt", "size": vocab.size, "sha256": vocab.sha256}
    with beam_pipeline() as p:
        written = (p | "Buckets" >> beam.Create(metas), p | "Counts" >> beam.Create(counts)) | WriteArrowShards(
            WriteManifestFn(config, vocab_info, list(vocab.tokens), str(tmp_path))
        )
        assert_that(written, equal_to([str(tmp_path / schema.MANIFEST_NAME)]))
    manifest = json.loads((tmp_path / schema.MANIFEST_NAME).read_text(encoding="utf-8"))
    rows = [entry["rows"] for entry in manifest["shards"]]
    assert len(rows) == 3 and sum(rows) == total and max(rows) - min(rows) <= 1
    for entry in manifest["shards"]:
        with pa.memory_map(str(tmp_path / entry["file"])) as source:
            assert pa.ipc.open_file(source).read_all().num_rows == entry["rows"]
    assert manifest["statistics"]["instances"] == total
    assert not bucket_dir.exists() and (tmp_path / shards.VOCAB_NAME).exists()  # buckets removed, vocab copied


def test_merge_counts_adds_numbers_and_merges_dicts_in_any_grouping():
    parts = [
        {"buckets": 1, "tokenizer": {"documents": 3}},
        {"buckets": 1, "reader": {"files": 1}},
        {"tokenizer": {"documents": 4, "tokens": 9}},
    ]
    expected = {"buckets": 2, "reader": {"files": 1}, "tokenizer": {"documents": 7, "tokens": 9}}
    fn = MergeCountsFn()
    one_by_one = fn.create_accumulator()
    for part in parts:
        one_by_one = fn.add_input(one_by_one, part)
    merged = fn.merge_accumulators(
        [
            fn.add_input(fn.create_accumulator(), parts[0]),
            fn.add_input(fn.add_input(fn.create_accumulator(), parts[1]), parts[2]),
        ]
    )
    assert fn.extract_output(one_by_one) == fn.extract_output(merged) == expected
