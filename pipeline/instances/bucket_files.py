"""One bucket's work, with no Beam transform in it: documents tokenized into the compact form that crosses
Beam stages, and a bucket of them made into instances in a temporary Arrow bucket file.

The DoFns of ``transforms.py`` only adapt these plain functions (pure algorithm, thin Beam wrapper), and the tests
of the composites use them as their oracle:

- :class:`ReadDocument`: a document as read, the sentences :func:`encode_document` tokenizes.
- :class:`TokenizedDocument`, :func:`encode_document`: one document's word-piece ids and sentence lengths as
  bytes (no Python lists); :class:`SpilledDocument`: the reference ``beam/spill.py`` hands on instead of a
  document it wrote to disk; :func:`document_tokens`: the word pieces of either.
- :func:`stable_bucket`: which of ``num_buckets`` buckets a document goes to (``buckets.py``).
- :func:`bucket_documents`, :func:`document_counts`: a bucket's documents as one flat ``BucketDocuments``,
  and their tokenizer counters.
- :func:`make_bucket_instances`: the reference algorithm per bucket (``bucket_instances.describe_instances``
  with ``random.Random(bucket_seed(seed, bucket))``, the same draws and instances as the list-based
  reference ``create_training_instances`` of ``tests/reference/instances.py``, on arrays instead of token
  lists); the bucket's instances go to a temporary ``bucket-<key>.arrows`` (in the staging folder's
  ``store.BUCKETS_DIR``), described by a :class:`BucketFile`, which ``shards/write.py`` cuts into shards.

Files are reached through Beam's ``FileSystems`` (so ``gs://`` works), as in ``shards.py``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from bertprep.core import schema
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.errors import MakeShardsError
from bertprep.pipeline.instances import buckets
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments, InstanceDescriptions
from bertprep.pipeline.instances.bucket_instances import describe_instances
from bertprep.pipeline.instances.bucket_rows import assemble_batches
from bertprep.pipeline.instances.common import InstanceStats, VocabIds, bucket_seed
from bertprep.pipeline.masking.fast import mask_table
from bertprep.pipeline.shards import store as shards
from bertprep.pipeline.text.tokenization import PretrainedSentenceEncoder, SentenceEncoder
from bertprep.pipeline.text.word_segmentation import WordSegmenter, WordSegmenterError, word_starts


class ReadDocument(NamedTuple):
    """A document as read (``transforms.ReadDocumentsFn``), before tokenization."""

    file_index: int
    """Index of the document's file in the sorted input list."""
    ordinal: int
    """Index of the document in its file (a byte range's reader: ``transforms.range_ordinal``)."""
    sentences: list[str]
    """Its non-empty, stripped sentences in order (``readers.Document.sentences``)."""


class TokenizedDocument(NamedTuple):
    """One tokenized document in the compact form that crosses Beam stages (bytes, not Python lists).

    A ``NamedTuple``, so it still unpacks and indexes as the plain tuple it replaced. On the wire it is not
    free: Beam's default coder (``FastPrimitivesCoder``) encodes only an exact ``tuple`` itself and pickles a
    subclass, measured at ~90 more bytes (the class's path) and ~10 us more (encode + decode) per document per
    stage boundary; make-shards' CPU time on 2,250 short documents showed no difference beyond the noise (under
    1% expected), so the records cross stages as they are (``benchmarks/bench_records.py``). Should the bytes
    matter (very short documents in the ``global`` scope's shuffle), hand Beam ``tuple(doc)`` and read it back
    with ``TokenizedDocument._make``.
    """

    file_index: int
    """Index of the document's file in the sorted input list."""
    ordinal: int
    """Index of the document in its file (a byte range's reader numbers its own documents,
    ``transforms.NumberDocumentsFn``; a mixture's copies, ``mixture.copy_ordinal``)."""
    input_ids: bytes
    """The word-piece ids of the kept sentences, concatenated: uint32, native byte order, 4 bytes a piece."""
    sentence_lengths: bytes
    """Word pieces of each kept sentence: int32, native byte order."""
    dropped_sentences: int
    """Sentences dropped because they tokenized to nothing."""
    word_starts: bytes | None = None
    """With a word segmenter: each piece's "starts a word" flag, uint8 (``word_segmentation.word_starts``);
    else None."""


class SpilledDocument(NamedTuple):
    """The reference to a :class:`TokenizedDocument` that ``beam/spill.py`` wrote to its spill file; its
    ``spill.load`` reads the document back."""

    file_index: int
    """As the document's."""
    ordinal: int
    """As the document's."""
    num_tokens: int
    """The document's word pieces (the token-sized buckets' plan needs them, not the ids)."""
    spill_file: str
    """The local spill file the document was appended to."""
    offset: int
    """Byte offset of its pickled ``input_ids, sentence_lengths, dropped_sentences, word_starts`` there."""
    length: int
    """Bytes of that pickle."""


class BucketFile(NamedTuple):
    """A bucket's temporary Arrow file of instances (:func:`make_bucket_instances`); ``shards/write.py``
    orders buckets by ``bucket`` and cuts their rows into shards."""

    bucket: int
    """The bucket's key (its place in the shards' order)."""
    path: str
    """The ``bucket-<key>.arrows`` file (``FileSystems`` path)."""
    rows: int
    """Instances in it (0: no file was written)."""


def stable_bucket(random_seed: int, path: str, ordinal: int, num_buckets: int) -> int:
    """Bucket of a document: ``blake2b("seed:path:ordinal") mod num_buckets`` (``buckets.stable_bucket``)."""
    return buckets.stable_bucket(random_seed, path, ordinal, num_buckets)


def document_tokens(doc: TokenizedDocument | SpilledDocument) -> int:
    """Word pieces of a :class:`TokenizedDocument` (its ids are uint32 bytes), or of a
    :class:`SpilledDocument` (``beam/spill.py``)."""
    return doc.num_tokens if isinstance(doc, SpilledDocument) else len(doc.input_ids) // 4


def encode_document(
    encoder: SentenceEncoder | PretrainedSentenceEncoder,
    file_index: int,
    ordinal: int,
    sentences: Sequence[str],
    segmenter: WordSegmenter | None = None,
    segmenter_name: str = "the word segmenter",
) -> TokenizedDocument:
    """Tokenize one document into the compact form that crosses Beam stages (bytes, not lists); sentences
    that tokenize to nothing are dropped and counted. With a word ``segmenter`` ``word_starts`` holds each
    piece's "starts a word" flag (uint8 bytes, ``word_segmentation.word_starts``).

    Raises:
        MakeShardsError: the segmenter returned words that are not in the sentence.
    """
    ids, lengths = encoder.encode_flat(sentences)
    kept = lengths[lengths > 0].astype(np.int32)
    doc = TokenizedDocument(file_index, ordinal, ids.tobytes(), kept.tobytes(), len(lengths) - len(kept))
    if segmenter is None:
        return doc
    assert isinstance(encoder, SentenceEncoder)  # (--word-segmenter with a tokenizer.json is refused up front)
    try:
        flags = word_starts(encoder.tokenizer, sentences, segmenter, lengths, segmenter_name)
    except WordSegmenterError as err:
        raise MakeShardsError(f"bertprep: {err}") from err
    return doc._replace(word_starts=flags.tobytes())


def bucket_documents(docs: Sequence[TokenizedDocument]) -> BucketDocuments:
    """A bucket's tokenized documents (already in id order) as one flat id array (no Python lists); with the
    documents' word-start flags when they carry them (a word segmenter)."""
    bucket = BucketDocuments.from_arrays(
        [(np.frombuffer(d.input_ids, dtype=np.uint32), np.frombuffer(d.sentence_lengths, dtype=np.int32)) for d in docs]
    )
    if docs and docs[0].word_starts is not None:
        bucket.word_starts = np.frombuffer(b"".join(d.word_starts or b"" for d in docs), dtype=np.uint8)
    return bucket


def document_counts(docs: BucketDocuments, dropped_sentences: int, unk_id: int) -> dict[str, int]:
    """Tokenizer-level counters for a group of documents."""
    lengths = docs.sentence_lengths
    return {
        "documents": len(lengths),
        "empty_documents": sum(1 for d in lengths if not d),
        "one_sentence_documents": sum(1 for d in lengths if len(d) == 1),
        "sentences": sum(len(d) for d in lengths),
        "empty_sentences": dropped_sentences,
        "tokens": len(docs.ids),
        "unk_tokens": int(np.count_nonzero(docs.ids == unk_id)),
    }


def make_bucket_instances(
    bucket: int,
    docs: BucketDocuments,
    config: ShardsConfig,
    ids: VocabIds,
    vocab_size: int,
    tmp_dir: str,
    on_described: Callable[[BucketDocuments, InstanceDescriptions], None] | None = None,
) -> tuple[BucketFile, InstanceStats]:
    """Run the reference algorithm on one bucket and write its rows to a temporary Arrow file.

    Sampling ``exact`` (``config.effective_sampling``: ``--sampling`` with ``auto`` resolved) draws everything
    from ``random.Random(bucket_seed(seed, bucket))`` exactly as the original
    (:func:`~bertprep.pipeline.instances.bucket_instances.describe_instances`, equal to the reference
    ``create_training_instances``); ``fast`` keeps that generator for pairing but truncates as
    :func:`~bertprep.pipeline.instances.common.truncation_bounds_fast` and masks the whole bucket with
    :func:`~bertprep.pipeline.masking.fast.mask_table` (numpy, seeded from (seed, bucket)).

    ``on_described``, when given, is called with the documents and the instances' descriptions (offsets of
    their segments) before the rows are assembled (``mixture.InstanceSourcesFn`` counts them per source).

    Returns:
        ``(BucketFile(bucket, path, rows), stats)``.
    """
    stats = InstanceStats()
    instance_config = config.instance
    rng = random.Random(bucket_seed(instance_config.random_seed, bucket))
    if config.masking == "dynamic":
        instance_config = dataclasses.replace(instance_config, dupe_factor=1)
    fast = config.effective_sampling == "fast"  # --sampling auto: fast unless --bucket-size 0
    vectorized_masking = fast and config.masking == "static" and instance_config.mlm.effective_masking_scheme == "token"
    python_masking = config.masking == "static" and not vectorized_masking
    described = describe_instances(docs, instance_config, ids, rng, stats, mask=python_masking, fast_truncation=fast)
    if on_described is not None:
        on_described(docs, described)
    path = FileSystems.join(tmp_dir, f"bucket-{bucket:016d}.arrows")
    if not len(described):
        return BucketFile(bucket, path, 0), stats
    word_ids = config.writes_word_ids
    batches: Iterable[pa.RecordBatch] = assemble_batches(docs, described, ids, vocab_size, word_ids=word_ids)
    objective = instance_config.objective
    if vectorized_masking:
        del described  # (the batches' generator holds it until it has made them)
        batches = _mask_batches_fast(batches, instance_config, ids, vocab_size, word_ids, bucket, stats)
    try:
        rows = shards.write_bucket_file(path, batches, vocab_size, objective, word_ids)
    except OSError as err:
        raise MakeShardsError(shards.os_error_message(err, f"writing the temporary bucket file {path}")) from err
    return BucketFile(bucket, path, rows), stats


def _mask_batches_fast(
    batches: Iterable[pa.RecordBatch],
    instance_config: InstanceConfig,
    ids: VocabIds,
    vocab_size: int,
    word_ids: bool,
    bucket: int,
    stats: InstanceStats,
) -> list[pa.RecordBatch]:
    """``--sampling fast`` with static token masking: the bucket's unmasked rows (``batches``, schema
    :func:`schema.shard_schema`) masked all at once by :func:`~bertprep.pipeline.masking.fast.mask_table`
    (numpy, ``np.random.default_rng([random_seed, bucket])``); what it masked is added to ``stats``. Without
    the ``next_sentence_label`` column (objective ``none``) a [SEP] is never masked.

    Returns:
        The masked rows, as record batches of the same schema.
    """
    objective = instance_config.objective
    table = pa.Table.from_batches(list(batches), schema=schema.shard_schema(vocab_size, objective, word_ids))
    np_rng = np.random.default_rng([instance_config.random_seed, bucket])
    table, counts = mask_table(
        table,
        instance_config.mlm,
        ids.mask_id,
        np.asarray(ids.random_ids, dtype=np.int64),
        np_rng,
        sep_id=ids.sep_id if objective == "none" else None,
    )
    for name, value in counts.items():
        setattr(stats, name, getattr(stats, name) + value)
    return table.to_batches()
