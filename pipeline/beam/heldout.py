"""Held-out split and exact deduplication of documents for ``make-shards`` (``--eval-fraction``, ``--dedup``).

Held-out split (``eval_fraction`` F > 0). Whole documents go to a second shard set, ``<output>/eval/``, a
complete shard directory of its own (shards, vocab.txt, manifest.json) made with the same options; its
NotNext segments are drawn from eval documents only, and the training set's from training documents only.
A document is held out when

    ``int.from_bytes(blake2b(f"heldout:{eval_seed}:{path}:{ordinal}", digest_size=8), "little") / 2**64 < F``

(:func:`eval_score`), ``path`` being the input file's path relative to the root of its input
(``readers.input_keys``: the same corpus in another folder or a bucket is split the same way) and ``ordinal``
the document's index in it (``readers.Document``): a stable hash of the document's id, never Python's salted
``hash()``. So:

- every document is on exactly one side, whatever the runner, worker count or bundle order;
- the split does not depend on ``random_seed`` (shard sets made with other seeds share their eval
  documents: no document of one set's eval is in another set's training data) but on ``eval_seed``;
- raising F only adds documents to the eval side (the eval sets are nested).
The manifests record the split (``manifest["split"]``): fraction, seed, the rule, and how many documents went
to each side. The share of eval documents is F up to the binomial spread (sd ``sqrt(F (1 - F) / n)``).

Exact deduplication (``dedup="exact"``). Documents whose *normalised* text is equal are kept once: the first
in input order (smallest ``(file index, ordinal)``). Normalised = each sentence through the tokenizer's own
``BertNormalizer`` with the run's casing settings (control characters removed, CJK characters spaced,
lower-cased and accents stripped as ``do_lower_case`` / ``strip_accents`` say), whitespace runs collapsed to
one space, sentences left empty dropped, sentences joined with a newline (:func:`normalized_text`). Two
documents equal in this form give the same word pieces, so nothing the model could tell apart is dropped;
documents that normalise to nothing are never dropped (they are skipped later as empty). Copies meet in a
``GroupByKey`` on the 16-byte ``blake2b`` of the normalised text (:func:`text_digest`), so memory per key is
the number of copies of one text, never the corpus:

- ``global`` pairing scope (:class:`DropDuplicateDocuments`): the documents as read are grouped by that key
  and the first of each group goes on to tokenization. No second read; the shuffle carries the documents'
  text, which Dataflow keeps on disk and the local runner in memory (as it does for the bucket shuffle).
- ``file`` scope, which never shuffles documents (:class:`ExactDedup`): one extra streaming pass over the
  inputs (:class:`HashDocumentsFn`: read and normalise, no tokenization) whose ``GroupByKey`` values are
  document ids only; the ids of the copies are grouped per input file and handed to the main pass with their
  file (:func:`file_element`), whose readers skip them (:func:`select_documents`).
Both keep the same documents. Counts go to the manifest (``manifest["dedup"]``, and
``statistics.documents.skipped.duplicate``) and the log.

Near-duplicates (``dedup="minhash"``) are removed by ``near_dedup.py`` in the shape of :class:`ExactDedup`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from bertprep.core import schema
from bertprep.core.normalization import bert_normalizer
from bertprep.pipeline import readers
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.errors import USER_ERRORS, record_error
from bertprep.pipeline.instances.bucket_files import ReadDocument, SpilledDocument, TokenizedDocument

log = logging.getLogger(__name__)

#: The eval shard set's folder inside the output directory.
EVAL_DIR = schema.EVAL_DIR

#: The split's sides: ``train`` (the output directory) and ``eval`` (its :data:`EVAL_DIR`).
SIDES = ("train", "eval")

#: How the manifest states the rule (see the module docstring).
SPLIT_RULE = (
    "blake2b('heldout:<eval_seed>:<path>:<ordinal>' (document_id), 8 bytes, little-endian) / 2**64 "
    "< eval_fraction -> eval"
)
NORMALIZATION = (
    "the tokenizer's BertNormalizer (casing settings of this run) per sentence, whitespace "
    "collapsed, empty sentences dropped, sentences joined with a newline; blake2b-128"
)


def eval_score(eval_seed: int, path: str, ordinal: int) -> float:
    """The document's place in ``[0, 1)`` for the split: ``blake2b("heldout:seed:path:ordinal") / 2**64``."""
    digest = hashlib.blake2b(f"heldout:{eval_seed}:{path}:{ordinal}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def is_eval_document(eval_seed: int, path: str, ordinal: int, eval_fraction: float) -> bool:
    """Whether document ``ordinal`` of input ``path`` is held out (always False for ``eval_fraction`` 0)."""
    return eval_fraction > 0 and eval_score(eval_seed, path, ordinal) < eval_fraction


def sides(config: ShardsConfig) -> tuple[str, ...]:
    """The shard sets a run makes: ``("train",)``, or ``("train", "eval")`` with a held-out split."""
    return SIDES if config.eval_fraction > 0 else SIDES[:1]


def file_element(element: Sequence[Any]) -> tuple[int, str, frozenset[int]]:
    """``(file_index, path)`` or, after :class:`ExactDedup`, ``(file_index, path, ordinals to skip)`` ->
    ``(file_index, path, frozenset of ordinals to skip)``."""
    file_index, path, *rest = element
    return file_index, path, frozenset(rest[0]) if rest else frozenset()


def select_documents(
    documents: Iterable[readers.Document], skip: frozenset[int] = frozenset()
) -> Iterator[readers.Document]:
    """The documents a reader yields that are not in ``skip`` (the ordinals of duplicates, :class:`ExactDedup`)."""
    for doc in documents:
        if doc.ordinal not in skip:
            yield doc


class SplitSide:
    """``beam.Partition`` function: a :class:`~bertprep.pipeline.instances.bucket_files.TokenizedDocument`
    (or its :class:`~bertprep.pipeline.instances.bucket_files.SpilledDocument`) -> 0 (train) or 1 (eval)."""

    def __init__(self, files: Sequence[str], eval_fraction: float, eval_seed: int):
        self.files = list(files)
        self.eval_fraction = eval_fraction
        self.eval_seed = eval_seed

    def __call__(self, doc: TokenizedDocument | SpilledDocument, num_partitions: int) -> int:
        # a mixture's copies (mixture.copy_ordinal) go where their document goes: its own ordinal decides
        ordinal = doc.ordinal & 0xFFFFFFFF
        return int(is_eval_document(self.eval_seed, self.files[doc.file_index], ordinal, self.eval_fraction))


def normalized_text(sentences: Iterable[str], normalize) -> str:
    """A document as :class:`ExactDedup` compares it (see the module docstring); ``normalize``: str -> str."""
    out = []
    for sentence in sentences:
        collapsed = " ".join(normalize(sentence).split())
        if collapsed:
            out.append(collapsed)
    return "\n".join(out)


def text_digest(text: str) -> bytes:
    """16-byte ``blake2b`` of ``text`` (UTF-8): the key duplicates share."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class HashDocumentsFn(beam.DoFn):
    """``(file_index, path)`` -> ``(digest of the normalised text, (file_index, ordinal))`` per document that
    normalises to something."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        self.config = config
        self.error_dir = error_dir
        self.hashed = Metrics.counter("bertprep", "dedup_documents_hashed")
        self.normalize: Callable[[str], str] | None = None  # (setup)

    def setup(self) -> None:
        self.normalize = bert_normalizer(self.config.do_lower_case, self.config.strip_accents).normalize_str

    def process(self, element: tuple[int, str]) -> Iterator[Any]:
        file_index, path = element[0], element[1]
        try:
            for doc in readers.read_documents(
                path, self.config.input_format, stats=readers.ReaderStats(), **self.config.reader_kwargs()
            ):
                text = normalized_text(doc.sentences, self.normalize)
                if text:
                    self.hashed.inc()
                    yield text_digest(text), (file_index, doc.ordinal)
        except USER_ERRORS as err:
            record_error(self.error_dir, err)
            raise


class FindDuplicatesFn(beam.DoFn):
    """``(digest, document ids)`` -> the ids of every copy but the first (smallest ``(file_index, ordinal)``);
    a tagged ``counts`` output per text that has copies."""

    def __init__(self):
        self.dropped = Metrics.counter("bertprep", "dedup_documents_dropped")

    def process(self, element: tuple[bytes, Iterable[tuple[int, int]]]) -> Iterator[Any]:
        _, ids = element
        ids = sorted(ids)
        if len(ids) < 2:
            return
        self.dropped.inc(len(ids) - 1)
        yield from ids[1:]
        yield beam.pvalue.TaggedOutput("counts", _dropped_counts(len(ids) - 1))


def _dropped_counts(dropped: int) -> dict:
    """Counts of one text that had ``dropped`` copies besides the one kept."""
    return {
        "dedup": {"duplicate_groups": 1, "documents_dropped": dropped},
        "reader": {"skipped_documents": {"duplicate": dropped}},
    }


def _attach_skips(element: tuple[int, dict[str, list]]) -> tuple[int, str, tuple[int, ...]]:
    file_index, joined = element
    (path,) = joined["path"]
    skip = sorted(o for ordinals in joined["skip"] for o in ordinals)
    if skip:
        log.info("%s: %d duplicate documents dropped", path, len(skip))
    return file_index, path, tuple(skip)


class ExactDedup(beam.PTransform):
    """``(file_index, path)`` -> ``{"files": (file_index, path, ordinals to skip), "counts": dedup counts}``
    (a dict of two PCollections); see the module docstring."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        super().__init__()
        self.config = config
        self.error_dir = error_dir

    def expand(self, files):
        hashed = files | "HashDocumentsFn" >> beam.ParDo(HashDocumentsFn(self.config, self.error_dir))
        dropped = (
            hashed
            | "GroupByText" >> beam.GroupByKey()
            | "FindDuplicatesFn" >> beam.ParDo(FindDuplicatesFn()).with_outputs("counts", main="ids")
        )
        skips = dropped.ids | "GroupByFile" >> beam.GroupByKey()
        joined = (
            {"path": files, "skip": skips}
            | "JoinSkipsToFiles" >> beam.CoGroupByKey()
            | "AttachSkips" >> beam.Map(_attach_skips)
        )
        return {"files": joined, "counts": dropped.counts}


class KeyByTextFn(beam.DoFn):
    """A document as read (:class:`~bertprep.pipeline.instances.bucket_files.ReadDocument`) -> ``(key, document)``:
    the key is the digest of its normalised text, or for a document that normalises to nothing its own id
    (never a copy)."""

    def __init__(self, config: ShardsConfig):
        self.config = config
        self.normalize: Callable[[str], str] | None = None  # (setup)

    def setup(self) -> None:
        self.normalize = bert_normalizer(self.config.do_lower_case, self.config.strip_accents).normalize_str

    def process(self, doc: ReadDocument) -> Iterator[tuple[bytes, ReadDocument]]:
        text = normalized_text(doc.sentences, self.normalize)
        yield (text_digest(text) if text else f"id:{doc.file_index}:{doc.ordinal}".encode("ascii")), doc


class KeepFirstCopyFn(beam.DoFn):
    """``(key, documents)`` -> the first document (smallest ``(file_index, ordinal)``); a tagged ``counts``
    output per text that had copies."""

    def __init__(self):
        self.dropped = Metrics.counter("bertprep", "dedup_documents_dropped")

    def process(self, element: tuple[bytes, Iterable[ReadDocument]]) -> Iterator[Any]:
        _, copies = element
        docs = list(copies)
        first = min(docs, key=lambda d: (d.file_index, d.ordinal))
        yield first
        if len(docs) > 1:
            self.dropped.inc(len(docs) - 1)
            yield beam.pvalue.TaggedOutput("counts", _dropped_counts(len(docs) - 1))


class DropDuplicateDocuments(beam.PTransform):
    """Documents as read -> ``{"documents": the first copy of each normalised text, "counts": dedup counts}``
    (the ``global`` scope; see the module docstring)."""

    def __init__(self, config: ShardsConfig):
        super().__init__()
        self.config = config

    def expand(self, documents):
        kept = (
            documents
            | "KeyByTextFn" >> beam.ParDo(KeyByTextFn(self.config))
            | "GroupByText" >> beam.GroupByKey()
            | "KeepFirstCopyFn" >> beam.ParDo(KeepFirstCopyFn()).with_outputs("counts", main="documents")
        )
        return {"documents": kept.documents, "counts": kept.counts}


def split_counts(side: str, merged: dict) -> dict:
    """Counts a side contributes to both manifests: its document count (documents that reached instance
    creation on that side, empty ones included) and, for the other side's statistics, the same number as
    documents skipped there (``held_out_for_eval`` in the training manifest, ``in_training_split`` in the
    eval one)."""
    n = int((merged.get("tokenizer") or {}).get("documents", 0))
    return {"split": {f"{side}_documents": n}}


def skipped_for_other_side(side: str, merged: dict) -> dict:
    """The other side's ``statistics.documents.skipped`` entry for this side's documents."""
    n = int((merged.get("tokenizer") or {}).get("documents", 0))
    reason = "held_out_for_eval" if side == "eval" else "in_training_split"
    return {"reader": {"skipped_documents": {reason: n}}}


#: Fewer held-out documents than this measure little: one document's pairs are a few dozen correlated rows,
#: so the held-out loss and accuracy of such a set move with whichever documents happened to be drawn.
MIN_EVAL_DOCUMENTS = 10


def small_eval_set_warning(manifest: dict) -> str | None:
    """A warning when the held-out set of a published run (its training ``manifest``) holds fewer than
    :data:`MIN_EVAL_DOCUMENTS` documents, naming how many; None otherwise (or without a split)."""
    split = manifest.get("split")
    if not split or split.get("eval_documents", 0) >= MIN_EVAL_DOCUMENTS:
        return None
    held, total = split["eval_documents"], split["eval_documents"] + split.get("train_documents", 0)
    return (
        f"--eval-fraction {split['eval_fraction']} held out {held} of {total} documents, too few to measure "
        f"held-out loss and accuracy (fewer than {MIN_EVAL_DOCUMENTS}); raise --eval-fraction, or make shards of "
        "a held-out file of your own for train --eval-shards"
    )


def manifest_sections(config: ShardsConfig, counts: dict, role: str = "train") -> dict[str, Any]:
    """The manifest entries of the split and of deduplication (empty without either: a default run's
    manifest is unchanged). ``counts``: the merged counts of the side, ``role``: ``train`` or ``eval``."""
    out: dict[str, Any] = {}
    if config.eval_fraction > 0:
        split = counts.get("split") or {}
        train, held_out = int(split.get("train_documents", 0)), int(split.get("eval_documents", 0))
        out["split"] = {
            "role": role,
            "eval_fraction": config.eval_fraction,
            "eval_seed": config.eval_seed,
            "rule": SPLIT_RULE,
            "train_documents": train,
            "eval_documents": held_out,
            "eval_share": round(held_out / (train + held_out), 6) if train + held_out else None,
            ("eval_dir" if role == "train" else "train_dir"): EVAL_DIR if role == "train" else "..",
        }
    if config.dedup != "none":
        dedup = counts.get("dedup") or {}
        out["dedup"] = {
            "method": config.dedup,
            "normalization": NORMALIZATION,
            "kept": "the first copy in input order (file order, then document order)",
            "duplicate_groups": int(dedup.get("duplicate_groups", 0)),
            "documents_dropped": int(dedup.get("documents_dropped", 0)),
        }
    return out
