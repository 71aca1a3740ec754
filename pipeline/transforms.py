"""``make-shards``' Beam transforms: documents -> tokenized documents -> buckets -> instances -> shards.

Composites (each a ``beam.PTransform``, testable alone with ``TestPipeline``):

- :class:`ReadDocuments`: input files -> ``(file_index, ordinal, sentences)`` via ``readers.read_documents``.
- :class:`TokenizeDocuments`: sentences -> compact word-piece id arrays (Hugging Face ``tokenizers``, Rust).
- :class:`CreateTrainingInstances`: seeded stable bucket keys, a ``GroupByKey``, and the reference algorithm
  per bucket (``bucket_instances.describe_instances`` with ``random.Random(bucket_seed(seed, bucket))``, the
  same draws and instances as the list-based reference ``create_training_instances`` of
  ``tests/reference/instances.py``, on arrays instead of token lists);
  each bucket's instances go to a temporary Arrow file.
- :class:`ProcessFilesStreaming`: the ``file`` pairing scope: read, tokenize and make instances per run of
  ``bucket_tokens`` word pieces (or ``bucket_size`` documents) of one file, with no shuffle at all (flat memory on any runner).
- :class:`WriteArrowShards`: balanced shards from the bucket files, then ``manifest.json`` last. Shards are
  planned from the bucket sizes and written by hand rather than with ``fileio.WriteToFiles``
  (design/STYLE.md): each shard takes an exact, balanced row range across bucket files, and its name and
  sha256 go into the manifest, which ``WriteToFiles``' sharding does not give.

:func:`build_pipeline` adds them to a pipeline; ``run.py`` runs it (runner choice, staging, Dataflow).
Everything is written into the staging folder it is given. Errors a worker raises for the user
(:class:`MakeShardsError`, ``readers.InputError``, ``VocabError``) are also written there as one-line records
(:func:`errors.record_error`), so that their text reaches the user unchanged from any runner and any process.

Determinism: a document's id is (file index in the sorted input list, ordinal in its file); its bucket is
set by its key ``blake2b(seed, path, ordinal)``: by default the documents in key order are cut into
buckets of about ``bucket_tokens`` word pieces (``buckets.py``), with ``bucket_size`` N the key modulo
``ceil(documents / N)``; a bucket's documents are sorted by id before the algorithm runs.
Nothing depends on bundle order, worker count or runner. With one bucket (``bucket_size=0``, or a corpus
smaller than one bucket) the output is the original generator's.

Memory (measured with Beam 2.77, see ARCHITECTURE.md): the local runner keeps a GroupByKey's whole input
in memory, so the ``global`` scope's memory grows with the corpus on the DirectRunner (not on Dataflow,
whose shuffle is disk-backed); the ``file`` scope has no GroupByKey of documents and stays flat.
"""

from __future__ import annotations

import array
import dataclasses
import logging
import random
import time
from typing import Any, Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from bertprep.pipeline import buckets, heldout, readers, schema, shards
from bertprep.pipeline.bucket_instances import BucketDocuments, assemble_batches, describe_instances
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.errors import MakeShardsError, record_error, records_errors
from bertprep.pipeline.instances import InstanceStats, VocabIds, bucket_seed
from bertprep.pipeline.masking import mask_table
from bertprep.pipeline.tokenization import SentenceEncoder, Vocab, load_vocab
from bertprep.pipeline.word_segmentation import WordSegmenter, WordSegmenterError, load_word_segmenter, word_starts

log = logging.getLogger(__name__)

__version__ = "0.1.0"

# (file_index, ordinal, ids as uint32 bytes, sentence lengths as int32 bytes, sentences dropped as empty)
TokenizedDocument = tuple

#: The staging folder's subfolder for the temporary bucket files.
BUCKETS_DIR = "buckets"


def stable_bucket(random_seed: int, path: str, ordinal: int, num_buckets: int) -> int:
    """Bucket of a document: ``blake2b("seed:path:ordinal") mod num_buckets`` (``buckets.stable_bucket``)."""
    return buckets.stable_bucket(random_seed, path, ordinal, num_buckets)


def document_tokens(doc: TokenizedDocument) -> int:
    """Word pieces of a :data:`TokenizedDocument` (its ids are uint32 bytes)."""
    return len(doc[2]) // 4


def encode_document(encoder: SentenceEncoder, file_index: int, ordinal: int,
                    sentences: Sequence[str], segmenter: WordSegmenter | None = None,
                    segmenter_name: str = "the word segmenter") -> TokenizedDocument:
    """Tokenize one document into the compact form that crosses Beam stages (bytes, not lists); sentences
    that tokenize to nothing are dropped and counted. With a word ``segmenter`` a sixth element holds each
    piece's "starts a word" flag (uint8 bytes, ``word_segmentation.word_starts``).

    Raises:
        MakeShardsError: the segmenter returned words that are not in the sentence.
    """
    ids, lengths = encoder.encode_flat(sentences)
    kept = lengths[lengths > 0].astype(np.int32)
    doc = (file_index, ordinal, ids.tobytes(), kept.tobytes(), len(lengths) - len(kept))
    if segmenter is None:
        return doc
    try:
        flags = word_starts(encoder.tokenizer, sentences, segmenter, lengths, segmenter_name)
    except WordSegmenterError as err:
        raise MakeShardsError(f"bertprep: {err}") from err
    return doc + (flags.tobytes(),)


def bucket_documents(docs: Sequence[TokenizedDocument]) -> BucketDocuments:
    """A bucket's tokenized documents (already in id order) as one flat id array (no Python lists); with the
    documents' word-start flags when they carry them (a word segmenter)."""
    bucket = BucketDocuments.from_arrays([(np.frombuffer(d[2], dtype=np.uint32), np.frombuffer(d[3], dtype=np.int32))
                                          for d in docs])
    if docs and len(docs[0]) > 5:
        bucket.word_starts = np.frombuffer(b"".join(d[5] for d in docs), dtype=np.uint8)
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
        "tokens": int(len(docs.ids)),
        "unk_tokens": int(np.count_nonzero(docs.ids == unk_id)),
    }


class _VocabResource:
    """Loads the vocab and tokenizer once per DoFn instance (``setup``)."""

    def __init__(self, vocab_path: str, do_lower_case: bool, strip_accents: bool | None = None,
                 word_segmenter: str | None = None):
        self.vocab_path = vocab_path
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.word_segmenter = word_segmenter
        self.vocab: Vocab | None = None
        self.encoder: SentenceEncoder | None = None
        self.ids: VocabIds | None = None
        self.segmenter: WordSegmenter | None = None

    def load(self) -> None:
        self.vocab = load_vocab(self.vocab_path)
        self.encoder = SentenceEncoder(self.vocab, self.do_lower_case, strip_accents=self.strip_accents)
        self.ids = VocabIds(self.vocab)
        if self.word_segmenter:
            try:
                self.segmenter = load_word_segmenter(self.word_segmenter)
            except WordSegmenterError as err:
                raise MakeShardsError(f"bertprep: {err}") from err

    def encode(self, file_index: int, ordinal: int, sentences: Sequence[str]) -> TokenizedDocument:
        """:func:`encode_document` with this resource's encoder and word segmenter."""
        return encode_document(self.encoder, file_index, ordinal, sentences, self.segmenter,
                               f"--word-segmenter {self.word_segmenter}")


def make_bucket_instances(bucket: int, docs: BucketDocuments, config: ShardsConfig, ids: VocabIds,
                          vocab_size: int, tmp_dir: str) -> tuple[tuple, InstanceStats]:
    """Run the reference algorithm on one bucket and write its rows to a temporary Arrow file.

    Sampling ``exact`` (``config.effective_sampling``: ``--sampling`` with ``auto`` resolved) draws everything
    from ``random.Random(bucket_seed(seed, bucket))`` exactly as the original
    (:func:`~bertprep.pipeline.bucket_instances.describe_instances`, equal to the reference
    ``create_training_instances``); ``fast`` keeps that generator for pairing but truncates as
    :func:`~bertprep.pipeline.instances.truncation_bounds_fast` and masks the whole bucket with
    :func:`~bertprep.pipeline.masking.mask_table` (numpy, seeded from (seed, bucket)).

    Returns:
        ``((bucket, path, rows), stats)``.
    """
    stats = InstanceStats()
    instance_config = config.instance
    rng = random.Random(bucket_seed(instance_config.random_seed, bucket))
    if config.masking == "dynamic":
        instance_config = dataclasses.replace(instance_config, dupe_factor=1)
    fast = config.effective_sampling == "fast"  # --sampling auto: fast unless --bucket-size 0
    vectorized_masking = fast and config.masking == "static" and instance_config.effective_masking_scheme == "token"
    python_masking = config.masking == "static" and not vectorized_masking
    described = describe_instances(docs, instance_config, ids, rng, stats, mask=python_masking,
                                   fast_truncation=fast)
    path = FileSystems.join(tmp_dir, f"bucket-{bucket:016d}.arrows")
    if not len(described):
        return (bucket, path, 0), stats
    word_ids = config.writes_word_ids
    batches = assemble_batches(docs, described, ids, vocab_size, word_ids=word_ids)
    objective = instance_config.objective
    if vectorized_masking:
        table = pa.Table.from_batches(list(batches), schema=schema.shard_schema(vocab_size, objective, word_ids))
        del described
        np_rng = np.random.default_rng([instance_config.random_seed, bucket])
        table, counts = mask_table(table, instance_config, ids.mask_id, np.asarray(ids.random_ids, dtype=np.int64),
                                   np_rng, sep_id=ids.sep_id if objective == "none" else None)
        for name, value in counts.items():
            setattr(stats, name, getattr(stats, name) + value)
        batches = table.to_batches()
    try:
        rows = shards.write_bucket_file(path, batches, vocab_size, objective, word_ids)
    except OSError as err:
        raise MakeShardsError(shards.os_error_message(err, f"writing the temporary bucket file {path}")) from err
    return (bucket, path, rows), stats


class ReadDocumentsFn(beam.DoFn):
    """``(file_index, path)`` -> ``(file_index, ordinal, sentences)`` per document; reader counts as a
    tagged ``counts`` output."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        self.config = config
        self.error_dir = error_dir
        self.documents = Metrics.counter("bertprep", "documents_read")

    @records_errors("error_dir")
    def process(self, element: tuple[int, str]) -> Iterator[Any]:
        file_index, path, skip = heldout.file_element(element)  # skip: duplicates (--dedup)
        stats = readers.ReaderStats()
        documents = readers.read_documents(path, self.config.input_format, stats=stats, **self.config.reader_kwargs())
        for doc in heldout.select_documents(documents, skip):
            self.documents.inc()
            yield (file_index, doc.ordinal, list(doc.sentences))
        yield beam.pvalue.TaggedOutput("counts", {"reader": stats.to_dict()})


class TokenizeDocumentFn(beam.DoFn):
    """``(file_index, ordinal, sentences)`` -> :data:`TokenizedDocument` (ids as bytes)."""

    def __init__(self, vocab_path: str, do_lower_case: bool, strip_accents: bool | None = None,
                 word_segmenter: str | None = None):
        self.resource = _VocabResource(vocab_path, do_lower_case, strip_accents, word_segmenter)

    def setup(self) -> None:
        self.resource.load()

    def process(self, element: tuple[int, int, list[str]]) -> Iterator[TokenizedDocument]:
        file_index, ordinal, sentences = element
        yield self.resource.encode(file_index, ordinal, sentences)


class AssignBucketFn(beam.DoFn):
    """Keys a tokenized document by its seeded stable bucket (``buckets.py``). The side input is the
    document count (``bucket_size`` N >= 0) or the token-sized buckets' key bounds (``bucket_size`` None)."""

    def __init__(self, files: Sequence[str], random_seed: int, bucket_size: int | None):
        self.files = list(files)
        self.random_seed = random_seed
        self.bucket_size = bucket_size

    def process(self, doc: TokenizedDocument, plan: Any) -> Iterator[tuple[int, TokenizedDocument]]:
        path, ordinal = self.files[doc[0]], doc[1]
        if self.bucket_size is None:
            yield buckets.token_bucket_of(buckets.document_key(self.random_seed, path, ordinal), plan), doc
            return
        num_buckets = 1 if self.bucket_size <= 0 else max(1, -(-plan // self.bucket_size))
        yield stable_bucket(self.random_seed, path, ordinal, num_buckets), doc


class PlanTokenBucketsFn(beam.CombineFn):
    """Tokenized documents -> the key bounds of token-sized buckets (``buckets.plan_token_buckets``).

    The accumulator holds 16 bytes per document (its 64-bit key and its word-piece count, in ``array``s),
    never the documents themselves."""

    def __init__(self, files: Sequence[str], random_seed: int, bucket_tokens: int):
        self.files = list(files)
        self.random_seed = random_seed
        self.bucket_tokens = bucket_tokens

    def create_accumulator(self) -> tuple[array.array, array.array]:
        return array.array("Q"), array.array("q")

    def add_input(self, acc, doc: TokenizedDocument):
        acc[0].append(buckets.document_key(self.random_seed, self.files[doc[0]], doc[1]))
        acc[1].append(document_tokens(doc))
        return acc

    def merge_accumulators(self, accs):
        keys, tokens = self.create_accumulator()
        for k, t in accs:
            keys.extend(k)
            tokens.extend(t)
        return keys, tokens

    def extract_output(self, acc) -> list[int]:
        return buckets.plan_token_buckets(np.frombuffer(acc[0], dtype=np.uint64) if len(acc[0]) else [],
                                          np.frombuffer(acc[1], dtype=np.int64) if len(acc[1]) else [],
                                          self.bucket_tokens)


class CreateInstancesFn(beam.DoFn):
    """``(bucket, documents)`` -> bucket file meta ``(bucket, path, rows)``; counts as tagged output."""

    def __init__(self, config: ShardsConfig, tmp_dir: str):
        self.config = config
        self.tmp_dir = tmp_dir
        self.resource = _VocabResource(config.vocab, config.do_lower_case, config.strip_accents, config.word_segmenter)
        self.instances = Metrics.counter("bertprep", "instances")

    def setup(self) -> None:
        self.resource.load()

    @records_errors("tmp_dir")
    def process(self, element: tuple[int, Iterable[TokenizedDocument]]) -> Iterator[Any]:
        bucket, tokenized = element
        tokenized = sorted(tokenized, key=lambda d: (d[0], d[1]))
        docs = bucket_documents(tokenized)
        counts = document_counts(docs, sum(d[4] for d in tokenized), self.resource.vocab.token_to_id["[UNK]"])
        del tokenized
        start = time.time()
        meta, stats = make_bucket_instances(bucket, docs, self.config, self.resource.ids,
                                            self.resource.vocab.size, self.tmp_dir)
        log.info("bucket %d: %d documents -> %d instances in %.1f s", bucket, len(docs.doc_starts), meta[2],
                 time.time() - start)
        self.instances.inc(meta[2])
        yield meta
        yield beam.pvalue.TaggedOutput("counts", {"tokenizer": counts, "instances": stats.to_dict(), "buckets": 1})


class ProcessFileStreamingFn(beam.DoFn):
    """The ``file`` pairing scope: one input file -> runs of ``bucket_size`` consecutive documents, each
    run a bucket, processed as soon as it is complete (nothing waits for other files). With a held-out
    split (``config.eval_fraction``) the eval documents make runs of their own, whose bucket files go to
    ``eval_tmp_dir`` and whose metas and counts to the tagged outputs ``eval_buckets`` and ``eval_counts``
    (the reader's counts go to both ``counts`` and ``eval_counts``)."""

    def __init__(self, config: ShardsConfig, tmp_dir: str, eval_tmp_dir: str | None = None):
        self.config = config
        self.tmp_dir = tmp_dir
        self.eval_tmp_dir = eval_tmp_dir
        self.resource = _VocabResource(config.vocab, config.do_lower_case, config.strip_accents, config.word_segmenter)

    def setup(self) -> None:
        self.resource.load()

    @records_errors("tmp_dir")
    def process(self, element: tuple[int, str]) -> Iterator[Any]:
        file_index, path, skip = heldout.file_element(element)  # skip: duplicates (--dedup)
        reader_stats = readers.ReaderStats()
        size = self.config.bucket_size  # documents per run; None: runs of bucket_tokens word pieces
        split = self.config.eval_fraction > 0
        # per side of the held-out split (one side without a split): the current run, its index, the
        # documents seen and the run's word pieces
        runs = {side: {"run": [], "index": 0, "seen": 0, "tokens": 0} for side in heldout.sides(self.config)}

        def flush(side: str) -> Iterator[Any]:
            state = runs[side]
            run = state["run"]
            docs = bucket_documents(run)
            counts = document_counts(docs, sum(d[4] for d in run), self.resource.vocab.token_to_id["[UNK]"])
            bucket = (file_index << 24) | state["index"]
            meta, stats = make_bucket_instances(bucket, docs, self.config, self.resource.ids, self.resource.vocab.size,
                                                self.tmp_dir if side == "train" else self.eval_tmp_dir)
            log.info("%s, %sdocuments %d-%d: %d instances", path, "eval " if side == "eval" else "",
                     state["seen"] - len(run), state["seen"] - 1, meta[2])
            state.update(run=[], index=state["index"] + 1, tokens=0)
            counted = {"tokenizer": counts, "instances": stats.to_dict(), "buckets": 1}
            if side == "train":
                yield meta
                yield beam.pvalue.TaggedOutput("counts", counted)
            else:
                yield beam.pvalue.TaggedOutput("eval_buckets", meta)
                yield beam.pvalue.TaggedOutput("eval_counts", counted)

        documents = readers.read_documents(path, self.config.input_format, stats=reader_stats,
                                           **self.config.reader_kwargs())
        for doc in heldout.select_documents(documents, skip):
            side = "eval" if split and heldout.is_eval_document(self.config.eval_seed, path, doc.ordinal,
                                                                self.config.eval_fraction) else "train"
            state = runs[side]
            state["run"].append(self.resource.encode(file_index, doc.ordinal, doc.sentences))
            state["seen"] += 1
            state["tokens"] += document_tokens(state["run"][-1])
            if (size is None and state["tokens"] >= self.config.bucket_tokens) or (size and len(state["run"]) >= size):
                yield from flush(side)
        for side, state in runs.items():
            if state["run"]:
                yield from flush(side)
        yield beam.pvalue.TaggedOutput("counts", {"reader": reader_stats.to_dict()})
        if split:
            yield beam.pvalue.TaggedOutput("eval_counts", {"reader": reader_stats.to_dict()})


class MergeCountsFn(beam.CombineFn):
    """Sums count dicts (numbers add, dicts merge) into one."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, acc: dict, element: dict) -> dict:
        return shards.merge_counts(acc, element)

    def merge_accumulators(self, accs: Iterable[dict]) -> dict:
        out: dict = {}
        for acc in accs:
            out = shards.merge_counts(out, acc)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


class ReadDocuments(beam.PTransform):
    """Input files -> documents; outputs ``documents`` and ``counts``."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        super().__init__()
        self.config = config
        self.error_dir = error_dir

    def expand(self, files):
        return files | "ReadDocumentsFn" >> beam.ParDo(ReadDocumentsFn(self.config, self.error_dir)).with_outputs(
            "counts", main="documents")


class TokenizeDocuments(beam.PTransform):
    def __init__(self, config: ShardsConfig):
        super().__init__()
        self.config = config

    def expand(self, documents):
        return documents | "TokenizeDocumentFn" >> beam.ParDo(
            TokenizeDocumentFn(self.config.vocab, self.config.do_lower_case, self.config.strip_accents,
                               self.config.word_segmenter))


class CreateTrainingInstances(beam.PTransform):
    """Tokenized documents -> seeded buckets -> reference algorithm -> bucket file metas (+ ``counts``)."""

    def __init__(self, config: ShardsConfig, files: Sequence[str], tmp_dir: str):
        super().__init__()
        self.config = config
        self.files = files
        self.tmp_dir = tmp_dir

    def expand(self, tokenized):
        seed = self.config.instance.random_seed
        if self.config.bucket_size is None:  # buckets sized by word pieces: their key bounds
            plan = tokenized | "PlanTokenBuckets" >> beam.CombineGlobally(
                PlanTokenBucketsFn(self.files, seed, self.config.bucket_tokens))
        else:
            plan = tokenized | "CountDocuments" >> beam.combiners.Count.Globally()
        return (
            tokenized
            | "AssignBucket" >> beam.ParDo(AssignBucketFn(self.files, seed, self.config.bucket_size),
                                           plan=beam.pvalue.AsSingleton(plan))
            | "GroupByBucket" >> beam.GroupByKey()
            | "CreateInstancesFn" >> beam.ParDo(CreateInstancesFn(self.config, self.tmp_dir)).with_outputs(
                "counts", main="buckets")
        )


class ProcessFilesStreaming(beam.PTransform):
    """Input files -> bucket file metas (``buckets``) and ``counts``; with a held-out split also
    ``eval_buckets`` and ``eval_counts`` (bucket files in ``eval_tmp_dir``)."""

    def __init__(self, config: ShardsConfig, tmp_dir: str, eval_tmp_dir: str | None = None):
        super().__init__()
        self.config = config
        self.tmp_dir = tmp_dir
        self.eval_tmp_dir = eval_tmp_dir

    def expand(self, files):
        return files | "ProcessFileStreamingFn" >> beam.ParDo(
            ProcessFileStreamingFn(self.config, self.tmp_dir, self.eval_tmp_dir)).with_outputs(
                "counts", "eval_buckets", "eval_counts", main="buckets")


def _plan(bucket_metas: list[tuple[int, str, int]], num_shards: int,
          error_dir: str | None = None, eval_fraction: float | None = None) -> list[shards.ShardPlan]:
    try:
        if eval_fraction is not None and not sum(rows for _, _, rows in bucket_metas):
            raise MakeShardsError(
                f"bertprep: --eval-fraction {eval_fraction} held out no document that makes an instance, so "
                f"{heldout.EVAL_DIR}/ would be empty; raise --eval-fraction (or add input)")
        return _plan_shards(bucket_metas, num_shards)
    except MakeShardsError as err:
        record_error(error_dir, err)
        raise


def _plan_shards(bucket_metas: list[tuple[int, str, int]], num_shards: int) -> list[shards.ShardPlan]:
    total = sum(rows for _, _, rows in bucket_metas)
    if total == 0:
        raise MakeShardsError(
            "bertprep: no instances were made: every document was empty or skipped (see the counts "
            "logged above); check --input-format and that the input has documents separated by blank lines"
        )
    n = shards.choose_num_shards(total, num_shards)
    if n > total:
        raise MakeShardsError(f"bertprep: --num-shards {n} is more than the {total} instances made; use fewer shards")
    return shards.plan_shards(bucket_metas, n)


class WriteShardFn(beam.DoFn):
    """A :class:`shards.ShardPlan` -> the shard file in ``output_dir`` (the staging folder) -> its manifest entry."""

    def __init__(self, output_dir: str, vocab_size: int, objective: str = "nsp", word_ids: bool = False):
        self.output_dir = output_dir
        self.vocab_size = vocab_size
        self.objective = objective
        self.word_ids = word_ids

    @records_errors("output_dir")
    def process(self, plan: shards.ShardPlan) -> Iterator[dict]:
        name = schema.shard_name(plan.index, plan.count)
        try:
            entry = shards.write_shard(self.output_dir, plan, self.vocab_size, self.objective, self.word_ids)
        except OSError as err:
            raise MakeShardsError(shards.os_error_message(err, f"writing shard {name} (in {self.output_dir})")) from err
        log.info("wrote %s: %d rows", entry["file"], entry["rows"])
        yield entry


class WriteManifestFn(beam.DoFn):
    """Last step: delete the temporary bucket files, write vocab.txt and then manifest.json into the
    staging folder ``tmp_dir`` (:func:`run_make_shards` moves them into the output directory). ``role``:
    ``train``, or ``eval`` for the held-out set (``heldout.manifest_sections``)."""

    def __init__(self, config: ShardsConfig, vocab_info: dict, vocab_tokens: list[str], tmp_dir: str,
                 role: str = "train"):
        self.config = config
        self.vocab_info = vocab_info
        self.vocab_tokens = vocab_tokens
        self.tmp_dir = tmp_dir
        self.role = role

    @records_errors("tmp_dir")
    def process(self, shard_entries: list[dict], counts: dict) -> Iterator[str]:
        log.info("writing %s (%d shards)", schema.MANIFEST_NAME, len(shard_entries))
        entries = sorted(shard_entries, key=lambda e: e["file"])
        counts = dict(counts)
        counts["max_seq_length"] = self.config.instance.max_seq_length
        counts["objective"] = self.config.instance.objective
        statistics = shards.summarize_statistics(counts)
        rows = sum(e["rows"] for e in entries)
        if rows != statistics["instances"]:
            raise MakeShardsError(f"bertprep: internal error: shards hold {rows} rows, buckets made "
                                  f"{statistics['instances']}")
        try:
            shards.copy_vocab(self.tmp_dir, self.vocab_tokens)
        except OSError as err:
            raise MakeShardsError(shards.os_error_message(err, f"writing vocab.txt (in {self.tmp_dir})")) from err
        shards.remove_tree(FileSystems.join(self.tmp_dir, BUCKETS_DIR))
        vocab_size = len(self.vocab_tokens)
        manifest = {
            "format_version": schema.FORMAT_VERSION,
            "created_by": f"bertprep {__version__}",
            "config": self.config.to_dict() | {"masking": self.config.masking},
            "vocab": self.vocab_info,
            "schema": schema.manifest_schema(vocab_size, self.config.instance.objective, self.config.writes_word_ids),
            "shards": entries,
            "statistics": statistics,
        }
        manifest.update(heldout.manifest_sections(self.config, counts, self.role))  # {} without split or dedup
        try:
            yield shards.write_manifest(self.tmp_dir, manifest)
        except OSError as err:
            raise MakeShardsError(shards.os_error_message(err, f"writing manifest.json (in {self.tmp_dir})")) from err


class WriteArrowShards(beam.PTransform):
    """Bucket file metas -> balanced Arrow shards -> manifest.json (written last), all in the staging
    folder ``tmp_dir``. ``role``: ``train``, or ``eval`` for the held-out set."""

    def __init__(self, config: ShardsConfig, vocab_info: dict, vocab_tokens: list[str], tmp_dir: str,
                 role: str = "train"):
        super().__init__()
        self.config = config
        self.vocab_info = vocab_info
        self.vocab_tokens = vocab_tokens
        self.tmp_dir = tmp_dir
        self.role = role

    def expand(self, pcolls):
        bucket_metas, counts = pcolls
        merged_counts = counts | "MergeCounts" >> beam.CombineGlobally(MergeCountsFn())
        plans = (
            bucket_metas
            | "CollectBuckets" >> beam.combiners.ToList()
            | "PlanShards" >> beam.FlatMap(_plan, self.config.num_shards, self.tmp_dir,
                                           self.config.eval_fraction if self.role == "eval" else None)
            | "SpreadShards" >> beam.Reshuffle()
        )
        entries = (
            plans
            | "WriteShardFn" >> beam.ParDo(WriteShardFn(self.tmp_dir, len(self.vocab_tokens),
                                                       self.config.instance.objective, self.config.writes_word_ids))
            | "CollectShards" >> beam.combiners.ToList()
        )
        return entries | "WriteManifestFn" >> beam.ParDo(
            WriteManifestFn(self.config, self.vocab_info, self.vocab_tokens, self.tmp_dir, self.role),
            counts=beam.pvalue.AsSingleton(merged_counts))


def build_pipeline(pipeline: beam.Pipeline, config: ShardsConfig, files: Sequence[str], vocab: Vocab,
                   tmp_dir: str) -> None:
    """Add the make-shards transforms to ``pipeline``; everything is written under the staging folder
    ``tmp_dir`` (bucket files in its ``buckets/``; shards, vocab.txt and manifest.json in it).

    With ``config.dedup`` copies are dropped: in the ``global`` scope by a ``GroupByKey`` of the documents on
    their normalised text (``heldout.DropDuplicateDocuments``), in the ``file`` scope by a first pass
    (``heldout.ExactDedup``) that gives each input file the ordinals of its copies, which the readers skip.
    With ``config.eval_fraction`` the held-out documents (``heldout.is_eval_document``) go through their own
    instance creation (their own buckets: NotNext from eval documents only) to a second shard set in
    ``tmp_dir/eval/`` with its own manifest; in the ``global`` scope the tokenized documents are partitioned,
    in the ``file`` scope the streaming pass keeps one run per side.
    Without either option the pipeline is the one made before they existed."""
    bucket_dir = FileSystems.join(tmp_dir, BUCKETS_DIR)
    vocab_info = {
        "file": "vocab.txt",
        "source": config.vocab,
        "size": vocab.size,
        "sha256": vocab.sha256,
        "do_lower_case": config.do_lower_case,
        "special_token_ids": vocab.special_token_ids(),
    }
    if config.effective_strip_accents != config.do_lower_case:  # absent: the same as do_lower_case
        vocab_info["strip_accents"] = config.effective_strip_accents
    # Create reshuffles its elements itself when there are several, so the files spread over the workers
    file_list = pipeline | "ListInputFiles" >> beam.Create(list(enumerate(files)))
    shared_counts = []  # counts that both shard sets record (readers, dedup)
    dedup = config.dedup != "none"
    if dedup and config.pairing_scope == "file":  # a first pass: (file_index, path) -> (..., ordinals to skip)
        deduped = file_list | "ExactDedup" >> heldout.ExactDedup(config, tmp_dir)
        file_list = deduped["files"]
        shared_counts.append(deduped["counts"])
    split = config.eval_fraction > 0
    eval_dir = FileSystems.join(tmp_dir, heldout.EVAL_DIR)
    folders = {"train": bucket_dir, "eval": FileSystems.join(eval_dir, BUCKETS_DIR)}
    made = {}  # side -> (bucket metas, [counts of that side's instances])
    if config.pairing_scope == "file":  # no shuffle: one streaming pass makes both sides' runs
        result = file_list | "ProcessFilesStreaming" >> ProcessFilesStreaming(config, folders["train"], folders["eval"])
        made["train"] = (result.buckets, [result.counts])
        if split:
            made["eval"] = (result.eval_buckets, [result.eval_counts])
    else:
        read = file_list | "ReadDocuments" >> ReadDocuments(config, tmp_dir)
        documents = read.documents
        if dedup:  # the first copy of each normalised text goes on
            deduped = documents | "DropDuplicateDocuments" >> heldout.DropDuplicateDocuments(config)
            documents = deduped["documents"]
            shared_counts.append(deduped["counts"])
        tokenized = documents | "TokenizeDocuments" >> TokenizeDocuments(config)
        shared_counts.append(read.counts)
        parts = {"train": tokenized}
        if split:
            parts["train"], parts["eval"] = tokenized | "SplitHeldOut" >> beam.Partition(
                heldout.SplitSide(files, config.eval_fraction, config.eval_seed), 2)
        for side, docs in parts.items():
            label = "CreateTrainingInstances" if side == "train" else "CreateEvalInstances"
            result = docs | label >> CreateTrainingInstances(config, files, folders[side])
            made[side] = (result.buckets, [result.counts])
    if split:  # each manifest records both sides' document counts
        per_side = {}
        for side in heldout.SIDES:
            name = side.capitalize()
            merged = (tuple(made[side][1]) | f"Flatten{name}OnlyCounts" >> beam.Flatten()
                      | f"Merge{name}OnlyCounts" >> beam.CombineGlobally(MergeCountsFn()))
            per_side[side] = (merged | f"Count{name}Documents" >> beam.Map(lambda c, s=side: heldout.split_counts(s, c)),
                              merged | f"Skip{name}Documents" >> beam.Map(
                                  lambda c, s=side: heldout.skipped_for_other_side(s, c)))
        made["train"][1].extend([per_side["train"][0], per_side["eval"][0], per_side["eval"][1]])
        made["eval"][1].extend([per_side["eval"][0], per_side["train"][0], per_side["train"][1]])
    for side, (side_buckets, side_counts) in made.items():
        train = side == "train"
        counts = tuple(shared_counts + side_counts) | ("FlattenCounts" if train else "FlattenEvalCounts") >> beam.Flatten()
        (side_buckets, counts) | ("WriteArrowShards" if train else "WriteEvalShards") >> WriteArrowShards(
            config if train else dataclasses.replace(config, num_shards=0),  # eval: one shard per ~50,000 rows
            vocab_info, list(vocab.tokens), tmp_dir if train else eval_dir, role=side)
