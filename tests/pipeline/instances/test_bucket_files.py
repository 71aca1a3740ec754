"""``pipeline/instances/bucket_files.py``, the plain functions the DoFns adapt: a document's compact tokenized form, a
bucket's documents and counters, and one bucket's instances in its temporary Arrow file. (The composites'
tests, ``test_transforms.py``, compare the DoFns with these functions; the instances themselves against the
reference algorithm are ``test_bucket_instances.py``'s and ``test_golden.py``'s.)"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from bertprep.pipeline.instances.bucket_files import (
    bucket_documents,
    document_counts,
    document_tokens,
    encode_document,
    make_bucket_instances,
)
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab
from pipeline_factory import VOCAB, shards_config, tokenized


def test_encode_document_keeps_ids_as_bytes_and_counts_the_empty_sentences_it_drops():
    vocab = load_vocab(VOCAB)
    encoder = SentenceEncoder(vocab, True)
    doc = encode_document(encoder, 1, 4, ["The old man.", "", "He went home."])
    expected = encoder.encode(["The old man.", "He went home."])
    assert (doc.file_index, doc.ordinal, doc.dropped_sentences, doc.word_starts) == (1, 4, 1, None)
    assert np.frombuffer(doc.input_ids, dtype=np.uint32).tolist() == [i for ids in expected for i in ids]
    assert np.frombuffer(doc.sentence_lengths, dtype=np.int32).tolist() == [len(ids) for ids in expected]
    assert document_tokens(doc) == sum(map(len, expected))


def test_a_bucket_is_its_documents_concatenated_and_counted():
    vocab = load_vocab(VOCAB)
    docs = tokenized()[:5]
    bucket = bucket_documents(docs)
    assert bucket.ids.tobytes() == b"".join(d[2] for d in docs)
    assert len(bucket.doc_starts) == 5
    counts = document_counts(bucket, 2, vocab.token_to_id["[UNK]"])
    assert counts["documents"] == 5 and counts["empty_sentences"] == 2
    assert counts["tokens"] == sum(document_tokens(d) for d in docs)
    assert counts["sentences"] == sum(len(d[3]) // 4 for d in docs)


@pytest.mark.parametrize("sampling", ["exact", "fast"])
def test_make_bucket_instances_writes_the_same_bucket_file_every_time(tmp_path, sampling):
    config = shards_config(sampling=sampling)
    vocab = load_vocab(VOCAB)
    docs = bucket_documents(tokenized()[:7])
    made = [
        make_bucket_instances(12, docs, config, VocabIds(vocab), vocab.size, str(tmp_path / run))
        for run in ("first", "second")
    ]
    (meta, stats), (again, _) = made
    assert meta[0] == 12 and meta[1].endswith("bucket-0000000000000012.arrows") and meta[2] > 0
    assert stats.to_dict()["instances"] == meta[2]
    with pa.ipc.open_stream(meta[1]) as reader:
        assert reader.read_all().num_rows == meta[2]
    with open(meta[1], "rb") as first, open(again[1], "rb") as second:
        assert first.read() == second.read()


def test_a_bucket_that_makes_no_instance_writes_no_file(tmp_path):
    config = shards_config()
    vocab = load_vocab(VOCAB)
    encoder = SentenceEncoder(vocab, True)
    docs = bucket_documents([encode_document(encoder, 0, 0, [""])])
    (bucket, _path, rows), _ = make_bucket_instances(3, docs, config, VocabIds(vocab), vocab.size, str(tmp_path))
    assert (bucket, rows) == (3, 0) and not list(tmp_path.iterdir())
