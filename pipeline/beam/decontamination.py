"""Decontamination for ``make-shards`` (``--decontaminate FILES``, ``--decontaminate-ngram``,
``--decontaminate-mode``): training text that overlaps an evaluation set is removed, as GPT-3 (Brown et al.
2020, appendix C) and the Pile do.

Evaluation texts (:func:`evaluation_texts`, detected per file by extension and content):

- ``.json`` with SQuAD's layout (``{"data": [{"paragraphs": [{"context", "qas": [{"question"}]}]}]}``):
  each context and each question;
- ``.tsv`` (GLUE): the columns named like text (``sentence``, ``sentence1/2``, ``question``, ``question1/2``,
  ``#1 String``, ``#2 String``, ``premise``, ``hypothesis``, ``text``; MRPC's BOM and raw quotes allowed);
- ``.csv`` with SWAG's header: the context ``sent1``, ``startphrase`` and each candidate
  ``sent2 + " " + endingN``;
- anything else: plain text, one evaluation text per non-empty line.

Normalisation (:func:`normalized_words`): lower-cased, every punctuation or symbol character (Unicode
categories P* and S*) replaced by a space, split on whitespace. An n-gram is ``decontaminate_ngram``
consecutive words joined by one space; its key the 64-bit ``blake2b`` (:func:`ngram_hashes`). An
evaluation text shorter than n words (a SQuAD question, a short GLUE sentence) is one gram of its own
length k, matched against the document's k-grams, when it has at least :data:`MIN_WORDS` words; shorter
texts are too common to mark a document as contaminated and are only counted (``texts_too_short``).

The evaluation n-grams are made once, by a step of the pipeline (:class:`BuildNgramTableFn`, reading the
files through Beam's filesystems), and reach :class:`DecontaminateFn` as a side input: one sorted
``uint64`` array per evaluation file and gram length. A document's n-grams run over its sentences in order
(across sentence boundaries). ``drop``: a document with any n-gram in the table is dropped. ``cut``: the
sentences that a matching n-gram covers are removed (the rest of the document stays; a document left empty
is dropped).
Counts per evaluation file (texts, n-grams, documents matched) and in total go to ``manifest["decontamination"]``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from bertprep.core import storage
from bertprep.pipeline.config import DECONTAMINATE_MIN_WORDS, ShardsConfig
from bertprep.pipeline.errors import MakeShardsError, record_error
from bertprep.pipeline.instances.bucket_files import ReadDocument

#: Evaluation texts with fewer words are not matched (GPT-3's shortest n-gram, appendix C).
MIN_WORDS = DECONTAMINATE_MIN_WORDS
NORMALIZATION = "lower-cased, Unicode punctuation and symbols (P*, S*) -> space, split on whitespace"
TSV_TEXT_COLUMNS = {
    "sentence",
    "sentence1",
    "sentence2",
    "question",
    "question1",
    "question2",
    "#1 string",
    "#2 string",
    "premise",
    "hypothesis",
    "text",
}

_PUNCT: dict[str, bool] = {}


def normalized_words(text: str) -> list[str]:
    """``text`` lower-cased, punctuation and symbols replaced by spaces, split into words."""
    out = []
    for ch in text.lower():
        cat = _PUNCT.get(ch)
        if cat is None:
            cat = _PUNCT.setdefault(ch, unicodedata.category(ch)[0] in "PS")
        out.append(" " if cat else ch)
    return "".join(out).split()


def ngram_hash(gram: Sequence[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(gram).encode("utf-8"), digest_size=8).digest(), "little")


def ngram_hashes(words: Sequence[str], n: int) -> np.ndarray:
    """uint64 keys of the word ``n``-grams of ``words`` in order (empty when fewer than ``n`` words)."""
    return np.fromiter((ngram_hash(words[i : i + n]) for i in range(len(words) - n + 1)), dtype=np.uint64)


def _read_text(path: str) -> str:
    with FileSystems.open(path) as f:
        return f.read().decode("utf-8-sig", errors="replace")


def evaluation_texts(path: str) -> tuple[str, list[str]]:
    """``(format, texts)`` of an evaluation file (see the module docstring).

    Raises:
        MakeShardsError: a ``.json`` file that is not SQuAD's layout, a ``.csv`` without SWAG's columns.
    """
    data = _read_text(path)
    lower = path.lower()
    if lower.endswith(".json"):
        try:
            squad = json.loads(data)
            texts = []
            for article in squad["data"]:
                for paragraph in article["paragraphs"]:
                    texts.append(paragraph["context"])
                    texts.extend(qa["question"] for qa in paragraph.get("qas", ()))
        except (ValueError, KeyError, TypeError) as err:
            raise MakeShardsError(
                f"bertprep: --decontaminate {path}: a .json file must be SQuAD's layout "
                f"(data/paragraphs/context/qas/question): {err}"
            ) from err
        return "squad", texts
    if lower.endswith(".tsv"):
        rows = list(csv.reader(io.StringIO(data), delimiter="\t", quoting=csv.QUOTE_NONE))
        if not rows:
            return "glue-tsv", []
        header = [h.strip().lower() for h in rows[0]]
        columns = [i for i, h in enumerate(header) if h in TSV_TEXT_COLUMNS]
        if columns:
            rows = rows[1:]
        else:  # no header (CoLA's files): the columns that hold sentences, not ids, labels or marks
            columns = sentence_columns(rows)
        texts = [row[i] for row in rows for i in columns if i < len(row) and row[i].strip()]
        return "glue-tsv", texts
    if lower.endswith(".csv"):
        records = list(csv.DictReader(io.StringIO(data)))
        if records and "sent1" in records[0] and "ending0" in records[0]:
            texts = []
            for row in records:
                texts.append(row["sent1"])
                if row.get("startphrase"):
                    texts.append(row["startphrase"])
                for k in range(4):
                    ending = row.get(f"ending{k}")
                    if ending is not None:
                        texts.append(f"{row.get('sent2', '')} {ending}".strip())
            return "swag-csv", texts
        raise MakeShardsError(
            f"bertprep: --decontaminate {path}: a .csv file must have SWAG's columns (sent1, sent2, ending0..3)"
        )
    return "text", [line for line in data.splitlines() if line.strip()]


def sentence_columns(rows: Sequence[Sequence[str]]) -> list[int]:
    """The columns of a headerless TSV whose values are mostly sentences (two words or more in at least half of
    the rows). A headerless CoLA file (source, label, mark, sentence) counted its source and label columns as
    1,743 "texts" for 527 rows; its sentence column alone is what a model is evaluated on."""
    width = max((len(row) for row in rows), default=0)
    return [
        i
        for i in range(width)
        if 2 * sum(1 for row in rows if i < len(row) and len(normalized_words(row[i])) >= 2) >= len(rows)
    ]


def check_evaluation_files(paths: Sequence[str]) -> None:
    """Check the ``--decontaminate`` files before the pipeline runs: each exists, is a file and is text.

    Raises:
        MakeShardsError: a missing file, a directory, or a binary file (one was taken as "120 texts" of
            replacement characters; a missing one or a directory failed in a worker with a traceback).
    """
    from bertprep.pipeline.readers import InputError
    from bertprep.pipeline.readers.files import _check_not_binary, _read_blocks

    for path in paths:
        if not storage.is_remote(path) and os.path.isdir(path):
            raise MakeShardsError(
                f"--decontaminate {path} is a directory; give the evaluation files themselves, comma-separated "
                f"(e.g. {os.path.join(path, 'dev.tsv')})"
            )
        if not FileSystems.exists(path):
            raise MakeShardsError(f"--decontaminate {path}: no such file; check the path")
        blocks = _read_blocks(path, check_binary=False)
        try:
            _check_not_binary(path, next(blocks, b""))
        except InputError as err:
            reason = str(err).split("(", 1)[1].split(")", 1)[0]
            raise MakeShardsError(
                f"--decontaminate {path}: looks like a binary file ({reason}), not evaluation texts; give GLUE "
                ".tsv, SQuAD .json, SWAG .csv or plain-text files (one text per line)"
            ) from None
        finally:
            blocks.close()


def ngram_table(path: str, n: int) -> tuple[dict[int, np.ndarray], dict]:
    """The evaluation file's gram keys, ``{gram length: sorted distinct uint64 keys}`` (length ``n``, and the
    lengths of whole texts between :data:`MIN_WORDS` and ``n - 1`` words), and its counts for the manifest."""
    fmt, texts = evaluation_texts(path)
    table, short = ngram_table_from_texts(texts, n, with_short=True)
    ngrams = sum(len(v) for v in table.values())
    return table, {"format": fmt, "texts": len(texts), "texts_too_short": short, "ngrams": ngrams}


def ngram_table_from_texts(texts: Sequence[str], n: int, with_short: bool = False):
    """:func:`ngram_table`'s ``{gram length: sorted keys}`` of ``texts`` (and, ``with_short``, how many texts
    were too short to match)."""
    parts: dict[int, list[np.ndarray]] = {}
    short = 0
    for text in texts:
        words = normalized_words(text)
        if len(words) >= n:
            parts.setdefault(n, []).append(ngram_hashes(words, n))
        elif len(words) >= MIN_WORDS:
            parts.setdefault(len(words), []).append(ngram_hashes(words, len(words)))
        else:
            short += 1
    table = {k: np.unique(np.concatenate(v)) for k, v in sorted(parts.items())}
    return (table, short) if with_short else table


class BuildNgramTableFn(beam.DoFn):
    """Evaluation file paths (one element: all of them) -> ``{path: ngram_table(path)}`` (main output, the side
    input of :class:`DecontaminateFn`), and a tagged ``counts`` output with each file's counts."""

    def __init__(self, n: int, error_dir: str | None = None):
        self.n = n
        self.error_dir = error_dir

    def process(self, paths: Sequence[str]) -> Iterator[Any]:
        table, files = {}, {}
        for path in paths:
            try:
                table[path], files[path] = ngram_table(path, self.n)
            except (OSError, MakeShardsError) as err:
                if not isinstance(err, MakeShardsError):
                    err = MakeShardsError(f"bertprep: --decontaminate {path}: {err}")
                record_error(self.error_dir, err)
                raise err
        yield table
        yield beam.pvalue.TaggedOutput("counts", {"decontamination": {"files": files}})


def _found(eval_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Which of ``keys`` are in the sorted ``eval_keys``."""
    if not len(eval_keys) or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(eval_keys, keys), len(eval_keys) - 1)
    return eval_keys[pos] == keys


def contaminated_sentences(
    sentences: Sequence[str], table: dict[str, dict[int, np.ndarray]]
) -> tuple[dict[str, int], set[int]]:
    """``({eval path: matching grams}, indices of the sentences a matching gram covers)`` of a document;
    ``table``: :func:`ngram_table`'s per evaluation file."""
    words, owner = [], []
    for s, sentence in enumerate(sentences):
        w = normalized_words(sentence)
        words.extend(w)
        owner.extend([s] * len(w))
    lengths = sorted({k for per_file in table.values() for k in per_file})
    keys = {k: ngram_hashes(words, k) for k in lengths}
    hits: dict[str, int] = {}
    cut: set[int] = set()
    for path, per_file in table.items():
        for k, eval_keys in per_file.items():
            found = _found(eval_keys, keys[k])
            if found.any():
                hits[path] = hits.get(path, 0) + int(found.sum())
                for i in np.flatnonzero(found):
                    cut.update(owner[i : i + k])
    return hits, cut


def decontaminate_document(
    sentences: Sequence[str], table: dict[str, dict[int, np.ndarray]], mode: str
) -> tuple[list[str] | None, list[dict]]:
    """One document's sentences against the evaluation n-grams (``table``: :class:`BuildNgramTableFn`'s).

    Returns:
        ``(sentences kept, counts)``: the sentences unchanged when nothing matches, without those a match
        covers (``mode`` ``cut``), or ``None`` when the document is dropped (``drop``, or nothing left);
        ``counts`` the count dicts to add to the manifest's (none for a clean document).
    """
    hits, cut = contaminated_sentences(sentences, table)
    if not hits:
        return list(sentences), []
    kept = [s for i, s in enumerate(sentences) if i not in cut] if mode == "cut" else []
    counts: dict = {"files": {path: {"documents_matched": 1, "ngrams_matched": k} for path, k in hits.items()}}
    counts["documents_matched"] = 1
    if kept:
        counts["sentences_cut"] = len(cut)
        return kept, [{"decontamination": counts}]
    counts["documents_dropped"] = 1
    return None, [{"reader": {"skipped_documents": {"contaminated": 1}}}, {"decontamination": counts}]


class DecontaminateFn(beam.DoFn):
    """A document as read (``bucket_files.ReadDocument``) -> the document (unchanged, cut, or nothing);
    tagged ``counts`` per contaminated document (:func:`decontaminate_document`). Side input:
    :class:`BuildNgramTableFn`'s table."""

    def __init__(self, n: int, mode: str):
        self.n = n
        self.mode = mode
        self.dropped = Metrics.counter("bertprep", "decontaminate_documents_dropped")

    def process(self, doc: ReadDocument, table: dict) -> Iterator[Any]:
        kept, counts = decontaminate_document(doc.sentences, table, self.mode)
        if kept is None:
            self.dropped.inc()
        elif counts:
            yield doc._replace(sentences=kept)
        else:
            yield doc
        for c in counts:
            yield beam.pvalue.TaggedOutput("counts", c)


class BuildNgramTable(beam.PTransform):
    """The pipeline's root -> ``{"table": the evaluation n-grams (one element), "counts": per-file counts}``."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        super().__init__()
        self.config = config
        self.error_dir = error_dir

    def expand(self, pipeline):
        built = (
            pipeline
            | "EvaluationFiles" >> beam.Create([list(self.config.decontaminate)])
            | "BuildNgramTableFn"
            >> beam.ParDo(BuildNgramTableFn(self.config.decontaminate_ngram, self.error_dir)).with_outputs(
                "counts", main="table"
            )
        )
        return {"table": built.table, "counts": built.counts}


class Decontaminate(beam.PTransform):
    """Documents as read -> ``{"documents": decontaminated documents, "counts": counts}``."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        super().__init__()
        self.config = config
        self.error_dir = error_dir

    def expand(self, documents):
        built = documents.pipeline | BuildNgramTable(self.config, self.error_dir)
        cleaned = documents | "DecontaminateFn" >> beam.ParDo(
            DecontaminateFn(self.config.decontaminate_ngram, self.config.decontaminate_mode),
            table=beam.pvalue.AsSingleton(built["table"]),
        ).with_outputs("counts", main="documents")
        counts = (built["counts"], cleaned.counts) | "FlattenDecontaminationCounts" >> beam.Flatten()
        return {"documents": cleaned.documents, "counts": counts}


def manifest_section(config: ShardsConfig, counts: dict) -> dict[str, Any]:
    """``{"decontamination": ...}`` (empty without ``--decontaminate``)."""
    if not config.decontaminate:
        return {}
    c = counts.get("decontamination") or {}
    per = c.get("files") or {}
    files = []
    for path in config.decontaminate:
        f = per.get(path) or {}
        files.append(
            {
                "path": path,
                "format": f.get("format"),
                "texts": int(f.get("texts", 0)),
                "texts_too_short": int(f.get("texts_too_short", 0)),
                "ngrams": int(f.get("ngrams", 0)),
                "documents_matched": int(f.get("documents_matched", 0)),
                "ngrams_matched": int(f.get("ngrams_matched", 0)),
            }
        )
    return {
        "decontamination": {
            "ngram": config.decontaminate_ngram,
            "mode": config.decontaminate_mode,
            "normalization": NORMALIZATION,
            "documents_matched": int(c.get("documents_matched", 0)),
            "documents_dropped": int(c.get("documents_dropped", 0)),
            "sentences_cut": int(c.get("sentences_cut", 0)),
            "files": files,
        }
    }
