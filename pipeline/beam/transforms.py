"""``make-shards``' Beam transforms from input files to bucket files: documents -> tokenized documents ->
buckets -> instances.

Composites (each a ``beam.PTransform``, testable alone with ``TestPipeline``):

- :class:`ReadDocuments`: input files -> a ``ReadDocument`` ``(file_index, ordinal, sentences)`` each, via
  ``readers.read_documents``.
- :class:`TokenizeDocuments`: sentences -> compact word-piece id arrays (Hugging Face ``tokenizers``, Rust).
- :class:`CreateTrainingInstances`: seeded stable bucket keys, a ``GroupByKey``, and the reference algorithm
  per bucket (``bucket_files.make_bucket_instances``); each bucket's instances go to a temporary Arrow file.
- :class:`ProcessFilesStreaming`: the ``file`` pairing scope: read, tokenize and make instances per run of
  ``bucket_tokens`` word pieces (or ``bucket_size`` documents) of one file, with no shuffle at all (flat memory on
  any runner).

The DoFns only adapt the plain functions of ``bucket_files.py``; ``write_shards.py`` turns the bucket files
into shards and the manifest, and ``graph.py`` (:func:`~bertprep.pipeline.beam.graph.build_pipeline`) wires them.

Determinism: a document's id is (file index in the sorted input list, ordinal in its file); its bucket is
set by its key ``blake2b(seed, path, ordinal)``: by default the documents in key order are cut into
buckets of about ``bucket_tokens`` word pieces (``buckets.py``), with ``bucket_size`` N the key modulo
``ceil(documents / N)``; a bucket's documents are sorted by id before the algorithm runs.
Nothing depends on bundle order, worker count or runner. With one bucket (``bucket_size=0``, or a corpus
smaller than one bucket) the output is the original generator's.
"""

from __future__ import annotations

import array
import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from bertprep.pipeline import errors, readers
from bertprep.pipeline.beam import decontamination, heldout, mixture, spill
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.errors import MakeShardsError, records_errors
from bertprep.pipeline.instances import buckets
from bertprep.pipeline.instances.bucket_files import (
    ReadDocument,
    SpilledDocument,
    TokenizedDocument,
    bucket_documents,
    document_counts,
    document_tokens,
    encode_document,
    make_bucket_instances,
    stable_bucket,
)
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.text.tokenization import (
    PretrainedSentenceEncoder,
    SentenceEncoder,
    Vocab,
    load_vocab,
    sentence_encoder,
)
from bertprep.pipeline.text.word_segmentation import WordSegmenter, WordSegmenterError, load_word_segmenter

log = logging.getLogger(__name__)


class _VocabResource:
    """Loads the vocab and tokenizer once per DoFn instance (``setup``)."""

    def __init__(
        self, vocab_path: str, do_lower_case: bool, strip_accents: bool | None = None, word_segmenter: str | None = None
    ):
        self.vocab_path = vocab_path
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.word_segmenter = word_segmenter
        self.vocab: Vocab | None = None
        self.encoder: SentenceEncoder | PretrainedSentenceEncoder | None = None
        self.ids: VocabIds | None = None
        self.segmenter: WordSegmenter | None = None

    def load(self) -> None:
        self.vocab = load_vocab(self.vocab_path)
        self.encoder = sentence_encoder(self.vocab, self.do_lower_case, strip_accents=self.strip_accents)
        self.ids = VocabIds(self.vocab)
        if self.word_segmenter:
            try:
                self.segmenter = load_word_segmenter(self.word_segmenter)
            except WordSegmenterError as err:
                raise MakeShardsError(f"bertprep: {err}") from err

    def loaded(self) -> tuple[Vocab, SentenceEncoder | PretrainedSentenceEncoder, VocabIds]:
        """``(vocab, encoder, ids)``, after :meth:`load` (a DoFn's ``setup``)."""
        assert self.vocab is not None and self.encoder is not None and self.ids is not None, "load() first"
        return self.vocab, self.encoder, self.ids

    def encode(self, file_index: int, ordinal: int, sentences: Sequence[str]) -> TokenizedDocument:
        """:func:`encode_document` with this resource's encoder and word segmenter."""
        return encode_document(
            self.loaded()[1], file_index, ordinal, sentences, self.segmenter, f"--word-segmenter {self.word_segmenter}"
        )


class ReadDocumentsFn(beam.DoFn):
    """``(file_index, path)`` -> a :class:`~bertprep.pipeline.instances.bucket_files.ReadDocument` per document;
    reader counts as a tagged ``counts`` output."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        self.config = config
        self.error_dir = error_dir
        self.documents = Metrics.counter("bertprep", "documents_read")

    @records_errors("error_dir")
    def process(self, element: tuple) -> Iterator[Any]:
        if len(element) == 5:  # a byte range of a file (readers.ranges.plan_ranges)
            file_index, path, range_index, start, end = element
            byte_range, skip = (range_index, start, end), frozenset[int]()
        else:
            file_index, path, skip = heldout.file_element(element)  # skip: duplicates (--dedup)
            byte_range, range_index = None, 0
        stats = readers.ReaderStats()
        documents = readers.read_documents(
            path,
            self.config.input_format,
            stats=stats,
            byte_range=byte_range,
            line_numbers=False,
            **self.config.reader_kwargs(),
        )
        count = 0
        for doc in heldout.select_documents(documents, skip):
            self.documents.inc()
            count += 1
            yield ReadDocument(file_index, range_ordinal(range_index, doc.ordinal), list(doc.sentences))
        yield beam.pvalue.TaggedOutput("counts", {"reader": stats.to_dict()})
        yield beam.pvalue.TaggedOutput("ranges", (file_index, range_index, count))


#: A document of a byte range after the first carries ``range_index << RANGE_SHIFT | ordinal in the range`` as
#: its ordinal until :class:`NumberDocumentsFn` gives it its ordinal in the file (the first range's are final).
RANGE_SHIFT = 40


def range_ordinal(range_index: int, ordinal: int) -> int:
    """The ordinal a document of range ``range_index`` carries before :class:`NumberDocumentsFn`; ordered as
    the file's ordinals are (range first), so the first copy of a text (``--dedup``) is the same one."""
    return (range_index << RANGE_SHIFT) | ordinal


class RangeOffsetsFn(beam.CombineFn):
    """``(file_index, range_index, documents)`` per range -> ``{(file_index, range_index): documents of the
    file's ranges before it}`` (a prefix sum per file)."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, acc, element):
        acc.append(tuple(element))
        return acc

    def merge_accumulators(self, accs):
        return [x for acc in accs for x in acc]

    def extract_output(self, acc) -> dict[tuple[int, int], int]:
        offsets, before, current = {}, 0, None
        for file_index, range_index, count in sorted(acc):
            if file_index != current:
                current, before = file_index, 0
            offsets[(file_index, range_index)] = before
            before += count
        return offsets


class NumberDocumentsFn(beam.DoFn):
    """A tokenized document of a byte range -> the same with its ordinal in its file (side input: the
    documents before each range, :class:`RangeOffsetsFn`): the id a whole-file read gives it."""

    def process(self, doc: TokenizedDocument, offsets: dict) -> Iterator[TokenizedDocument]:
        range_index = doc.ordinal >> RANGE_SHIFT
        if range_index:
            ordinal = offsets[(doc.file_index, range_index)] + (doc.ordinal & ((1 << RANGE_SHIFT) - 1))
            doc = doc._replace(ordinal=ordinal)
        yield doc


class TokenizeDocumentFn(beam.DoFn):
    """A :class:`~bertprep.pipeline.instances.bucket_files.ReadDocument` -> :class:`TokenizedDocument` (ids as
    bytes). With ``spill_to`` (``(folder, bytes)``: the spill folder and this process's share of the memory
    budget, ``spill.py``) the documents beyond the budget are written there and handed on as references
    (:class:`SpilledDocument`); a failed write is recorded in ``error_dir``."""

    def __init__(
        self,
        vocab_path: str,
        do_lower_case: bool,
        strip_accents: bool | None = None,
        word_segmenter: str | None = None,
        spill_to: tuple[str, int] | None = None,
        error_dir: str | None = None,
    ):
        self.resource = _VocabResource(vocab_path, do_lower_case, strip_accents, word_segmenter)
        self.spill_to = spill_to
        self.error_dir = error_dir
        self.spiller: spill.Spiller | None = None

    def setup(self) -> None:
        self.resource.load()
        if self.spill_to is not None:
            self.spiller = spill.Spiller(*self.spill_to)

    @records_errors("error_dir")
    def process(self, element: ReadDocument) -> Iterator[TokenizedDocument | SpilledDocument]:
        doc = self.resource.encode(element.file_index, element.ordinal, element.sentences)
        yield doc if self.spiller is None else self.spiller.keep(doc)

    def finish_bundle(self) -> None:
        if self.spiller is not None:
            try:
                self.spiller.flush()
            except MakeShardsError as err:
                errors.record_error(self.error_dir, err)
                raise

    def teardown(self) -> None:
        if self.spiller is not None:
            self.spiller.close()


class AssignBucketFn(beam.DoFn):
    """Keys a tokenized document by its seeded stable bucket (``buckets.py``). The side input is the
    document count (``bucket_size`` N >= 0) or the token-sized buckets' key bounds (``bucket_size`` None)."""

    def __init__(self, files: Sequence[str], random_seed: int, bucket_size: int | None):
        self.files = list(files)
        self.random_seed = random_seed
        self.bucket_size = bucket_size

    def process(
        self, doc: TokenizedDocument | SpilledDocument, plan: Any
    ) -> Iterator[tuple[int, TokenizedDocument | SpilledDocument]]:
        path, ordinal = self.files[doc.file_index], doc.ordinal
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

    def add_input(self, acc, doc: TokenizedDocument | SpilledDocument):
        keys, tokens = acc
        keys.append(buckets.document_key(self.random_seed, self.files[doc.file_index], doc.ordinal))
        tokens.append(document_tokens(doc))
        return acc

    def merge_accumulators(self, accs):
        keys, tokens = self.create_accumulator()
        for k, t in accs:
            keys.extend(k)
            tokens.extend(t)
        return keys, tokens

    def extract_output(self, acc) -> list[int]:
        keys, tokens = acc
        return buckets.plan_token_buckets(
            np.frombuffer(keys, dtype=np.uint64) if len(keys) else [],
            np.frombuffer(tokens, dtype=np.int64) if len(tokens) else [],
            self.bucket_tokens,
        )


class CreateInstancesFn(beam.DoFn):
    """``(bucket, documents)`` -> its :class:`~bertprep.pipeline.instances.bucket_files.BucketFile`; counts as
    tagged output. With ``sources`` (a mixture: the source index of each input file, and the sources' names)
    the counts hold the instances per source (``mixture.instance_source_counts``)."""

    def __init__(self, config: ShardsConfig, tmp_dir: str, sources: tuple[Sequence[int], Sequence[str]] | None = None):
        self.config = config
        self.tmp_dir = tmp_dir
        self.sources = None if sources is None else (list(sources[0]), list(sources[1]))
        self.resource = _VocabResource(config.vocab, config.do_lower_case, config.strip_accents, config.word_segmenter)
        self.instances = Metrics.counter("bertprep", "instances")

    def setup(self) -> None:
        self.resource.load()

    @records_errors("tmp_dir")
    def process(self, element: tuple[int, Iterable[TokenizedDocument | SpilledDocument]]) -> Iterator[Any]:
        bucket, received = element
        tokenized = sorted(spill.load(received), key=lambda d: (d.file_index, d.ordinal))  # spilled ones read back
        docs = bucket_documents(tokenized)
        vocab, encoder, ids = self.resource.loaded()
        counts = document_counts(docs, sum(d.dropped_sentences for d in tokenized), encoder.unk_id)
        per_source: dict = {}  # a mixture's instances per source
        on_described = None
        if self.sources is not None:
            file_source, names = self.sources
            doc_sources = [file_source[d.file_index] for d in tokenized]

            def on_described(docs, described):
                per_source.update(mixture.instance_source_counts(docs, described, doc_sources, names))

        del tokenized
        start = time.time()
        bucket_file, stats = make_bucket_instances(
            bucket, docs, self.config, ids, vocab.size, self.tmp_dir, on_described
        )
        log.info(
            "bucket %d: %d documents -> %d instances in %.1f s",
            bucket,
            len(docs.doc_starts),
            bucket_file.rows,
            time.time() - start,
        )
        self.instances.inc(bucket_file.rows)
        yield bucket_file
        yield beam.pvalue.TaggedOutput(
            "counts", {"tokenizer": counts, "instances": stats.to_dict(), "buckets": 1, **per_source}
        )


@dataclasses.dataclass
class _Run:
    """One side's current run of :class:`ProcessFileStreamingFn`: its documents, the run's index in the file,
    the documents seen so far and the run's word pieces."""

    documents: list[TokenizedDocument] = dataclasses.field(default_factory=list)
    index: int = 0
    seen: int = 0
    tokens: int = 0


class ProcessFileStreamingFn(beam.DoFn):
    """The ``file`` pairing scope: one input file -> runs of ``bucket_size`` consecutive documents, each
    run a bucket, processed as soon as it is complete (nothing waits for other files). With a held-out
    split (``config.eval_fraction``) the eval documents make runs of their own, whose bucket files go to
    ``eval_tmp_dir`` and whose metas and counts to the tagged outputs ``eval_buckets`` and ``eval_counts``
    (the reader's counts go to both ``counts`` and ``eval_counts``)."""

    def __init__(
        self, config: ShardsConfig, tmp_dir: str, eval_tmp_dir: str | None = None, keys: Sequence[str] | None = None
    ):
        self.config = config
        self.tmp_dir = tmp_dir
        self.eval_tmp_dir = eval_tmp_dir
        self.keys = None if keys is None else list(keys)  # the files' paths as the held-out split hashes them
        self.resource = _VocabResource(config.vocab, config.do_lower_case, config.strip_accents, config.word_segmenter)

    def setup(self) -> None:
        self.resource.load()

    @records_errors("tmp_dir")
    def process(self, element: tuple[int, str], table: dict | None = None) -> Iterator[Any]:
        file_index, path, skip = heldout.file_element(element)  # skip: duplicates (--dedup)
        key_path = path if self.keys is None else self.keys[file_index]
        reader_stats = readers.ReaderStats()
        size = self.config.bucket_size  # documents per run; None: runs of bucket_tokens word pieces
        split = self.config.eval_fraction > 0
        runs = {side: _Run() for side in heldout.sides(self.config)}  # one side without a held-out split
        documents = readers.read_documents(
            path, self.config.input_format, stats=reader_stats, **self.config.reader_kwargs()
        )
        for doc in heldout.select_documents(documents, skip):
            sentences = doc.sentences
            if table is not None:  # --decontaminate: dropped or cut as read; counted in both sides' manifests
                kept, found = decontamination.decontaminate_document(sentences, table, self.config.decontaminate_mode)
                for counted in found:
                    yield beam.pvalue.TaggedOutput("counts", counted)
                    if split:
                        yield beam.pvalue.TaggedOutput("eval_counts", counted)
                if kept is None:
                    continue
                sentences = kept
            side = (
                "eval"
                if split
                and heldout.is_eval_document(self.config.eval_seed, key_path, doc.ordinal, self.config.eval_fraction)
                else "train"
            )
            state = runs[side]
            state.documents.append(self.resource.encode(file_index, doc.ordinal, sentences))
            state.seen += 1
            state.tokens += document_tokens(state.documents[-1])
            if (size is None and state.tokens >= self.config.bucket_tokens) or (size and len(state.documents) >= size):
                yield from self._flush(side, state, file_index, path)
        for side, state in runs.items():
            if state.documents:
                yield from self._flush(side, state, file_index, path)
        yield beam.pvalue.TaggedOutput("counts", {"reader": reader_stats.to_dict()})
        if split:
            yield beam.pvalue.TaggedOutput("eval_counts", {"reader": reader_stats.to_dict()})

    def _flush(self, side: str, state: _Run, file_index: int, path: str) -> Iterator[Any]:
        """Make ``state``'s run (one side's complete run of the file ``path``) into a bucket: its instances in a
        bucket file of that side's folder, numbered ``(file_index << 24) | run index``; then empty the run for
        the next one. Yields the bucket file's meta and the run's counts (tokenizer, instances, one bucket): the
        main output and ``counts`` for ``train``, ``eval_buckets`` and ``eval_counts`` for ``eval``."""
        vocab, encoder, ids = self.resource.loaded()
        run = state.documents
        docs = bucket_documents(run)
        counts = document_counts(docs, sum(d.dropped_sentences for d in run), encoder.unk_id)
        bucket = (file_index << 24) | state.index
        tmp_dir = self.tmp_dir if side == "train" else self.eval_tmp_dir
        assert tmp_dir is not None  # (an eval side exists only with eval_tmp_dir)
        bucket_file, stats = make_bucket_instances(bucket, docs, self.config, ids, vocab.size, tmp_dir)
        log.info(
            "%s, %sdocuments %d-%d: %d instances",
            path,
            "eval " if side == "eval" else "",
            state.seen - len(run),
            state.seen - 1,
            bucket_file.rows,
        )
        state.documents, state.index, state.tokens = [], state.index + 1, 0
        counted = {"tokenizer": counts, "instances": stats.to_dict(), "buckets": 1}
        if side == "train":
            yield bucket_file
            yield beam.pvalue.TaggedOutput("counts", counted)
        else:
            yield beam.pvalue.TaggedOutput("eval_buckets", bucket_file)
            yield beam.pvalue.TaggedOutput("eval_counts", counted)


class ReadDocuments(beam.PTransform):
    """Input files -> documents; outputs ``documents`` and ``counts``."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        super().__init__()
        self.config = config
        self.error_dir = error_dir

    def expand(self, files):
        return files | "ReadDocumentsFn" >> beam.ParDo(ReadDocumentsFn(self.config, self.error_dir)).with_outputs(
            "counts", "ranges", main="documents"
        )


class TokenizeDocuments(beam.PTransform):
    """Documents -> tokenized documents; with ``ranges`` (the ``ranges`` output of :class:`ReadDocuments`,
    where files were read in byte ranges) the documents of ranges after the first get their ordinals in
    their files, once tokenized (the side input waits for every range's count). With ``spill_to``
    (``(folder, bytes per process)``) documents beyond the memory budget are handed on as spilled references
    (``spill.py``), which only :class:`CreateTrainingInstances` reads; ``error_dir``: where a failed spill
    write is recorded."""

    def __init__(self, config: ShardsConfig, ranges=None, spill_to: tuple[str, int] | None = None, error_dir=None):
        super().__init__()
        self.config = config
        self.ranges = ranges
        self.spill_to = spill_to
        self.error_dir = error_dir

    def expand(self, documents):
        config = self.config
        tokenized = documents | "TokenizeDocumentFn" >> beam.ParDo(
            TokenizeDocumentFn(
                config.vocab,
                config.do_lower_case,
                config.strip_accents,
                config.word_segmenter,
                self.spill_to,
                self.error_dir,
            )
        )
        if self.ranges is None:
            return tokenized
        offsets = self.ranges | "RangeOffsets" >> beam.CombineGlobally(RangeOffsetsFn())
        return tokenized | "NumberDocumentsFn" >> beam.ParDo(NumberDocumentsFn(), beam.pvalue.AsSingleton(offsets))


class CreateTrainingInstances(beam.PTransform):
    """Tokenized documents -> seeded buckets -> reference algorithm -> bucket file metas (+ ``counts``)."""

    def __init__(
        self,
        config: ShardsConfig,
        files: Sequence[str],
        tmp_dir: str,
        sources: tuple[Sequence[int], Sequence[str]] | None = None,
    ):
        super().__init__()
        self.config = config
        self.files = files
        self.tmp_dir = tmp_dir
        self.sources = sources

    def expand(self, tokenized):
        seed = self.config.instance.random_seed
        if self.config.bucket_size is None:  # buckets sized by word pieces: their key bounds
            plan = tokenized | "PlanTokenBuckets" >> beam.CombineGlobally(
                PlanTokenBucketsFn(self.files, seed, self.config.bucket_tokens)
            )
        else:
            plan = tokenized | "CountDocuments" >> beam.combiners.Count.Globally()
        return (
            tokenized
            | "AssignBucket"
            >> beam.ParDo(AssignBucketFn(self.files, seed, self.config.bucket_size), plan=beam.pvalue.AsSingleton(plan))
            | "GroupByBucket" >> beam.GroupByKey()
            | "CreateInstancesFn"
            >> beam.ParDo(CreateInstancesFn(self.config, self.tmp_dir, self.sources)).with_outputs(
                "counts", main="buckets"
            )
        )


class ProcessFilesStreaming(beam.PTransform):
    """Input files -> bucket file metas (``buckets``) and ``counts``; with a held-out split also
    ``eval_buckets`` and ``eval_counts`` (bucket files in ``eval_tmp_dir``). With ``table`` (the evaluation
    n-grams of ``--decontaminate``, one element) each document is decontaminated as it is read."""

    def __init__(
        self,
        config: ShardsConfig,
        tmp_dir: str,
        eval_tmp_dir: str | None = None,
        table=None,
        keys: Sequence[str] | None = None,
    ):
        super().__init__()
        self.config = config
        self.tmp_dir = tmp_dir
        self.eval_tmp_dir = eval_tmp_dir
        self.table = table
        self.keys = keys

    def expand(self, files):
        side_inputs = {} if self.table is None else {"table": beam.pvalue.AsSingleton(self.table)}
        return files | "ProcessFileStreamingFn" >> beam.ParDo(
            ProcessFileStreamingFn(self.config, self.tmp_dir, self.eval_tmp_dir, self.keys), **side_inputs
        ).with_outputs("counts", "eval_buckets", "eval_counts", main="buckets")
