"""Retrieval data: BEIR folders, training pairs, and a BEIR folder made from a SQuAD file.

The BEIR layout (Thakur et al. 2021, ``beir.datasets.data_loader.GenericDataLoader``): ``corpus.jsonl`` (one
``{"_id", "title", "text"}`` per line), ``queries.jsonl`` (``{"_id", "text"}``) and ``qrels/{split}.tsv`` (a
``query-id``, ``corpus-id``, ``score`` header, then one judgement per line; a score above 0 is relevant).
A document's text is ``title + " " + text`` as sentence-transformers' ``InformationRetrievalEvaluator`` and
BEIR's dense retrievers join them.

Every reader raises ``ValueError`` with the file and line for bad input: a folder without qrels, an empty
corpus or query file, a judgement naming a query or document that is not there, a line that is not JSON.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

from bertprep.bert_model.json_lines import read_json_lines
from bertprep.core import strict_json
from bertprep.core.atomic import replace_directory, staging_name

SPLITS = ("train", "dev", "test")
QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass
class BeirData:
    """One split of a BEIR folder, as ``GenericDataLoader.load(split)`` returns it."""

    corpus: dict[str, str]
    """Document id -> its text (``title + " " + text``, stripped), in file order."""
    queries: dict[str, str]
    """Query id -> text, only the queries the split judges, in file order."""
    qrels: dict[str, dict[str, int]]
    """Query id -> {document id: relevance score} (scores as in the file, 0 included)."""


def read_corpus(path: str) -> dict[str, str]:
    """``corpus.jsonl`` -> {id: title + " " + text}. ValueError for an empty file or a repeated id."""
    corpus: dict[str, str] = {}
    for number, record in read_json_lines(path, ("_id",)):
        doc_id = str(record["_id"])
        if doc_id in corpus:
            raise ValueError(f"{path}:{number}: document id {doc_id!r} appears twice")
        corpus[doc_id] = (str(record.get("title") or "") + " " + str(record.get("text") or "")).strip()
    if not corpus:
        raise ValueError(f"{path}: no documents")
    return corpus


def read_queries(path: str) -> dict[str, str]:
    """``queries.jsonl`` -> {id: text}. ValueError for an empty file."""
    queries = {str(record["_id"]): str(record.get("text") or "") for _, record in read_json_lines(path, ("_id",))}
    if not queries:
        raise ValueError(f"{path}: no queries")
    return queries


def read_qrels(path: str) -> dict[str, dict[str, int]]:
    """``qrels/{split}.tsv`` -> {query id: {document id: score}}; the header line is optional."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as f:
        for number, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if not row or (number == 1 and tuple(row[:3]) == QRELS_HEADER):
                continue
            if len(row) < 3:
                raise ValueError(f"{path}:{number}: expected query-id, corpus-id and score separated by tabs")
            try:
                score = int(row[2])
            except ValueError:
                raise ValueError(f"{path}:{number}: score {row[2]!r} is not an integer") from None
            qrels.setdefault(row[0], {})[row[1]] = score
    if not qrels:
        raise ValueError(f"{path}: no judgements")
    return qrels


def qrels_path(data_dir: str, split: str) -> str:
    """The path of a split's qrels; ValueError naming what is missing when the folder has none."""
    if not os.path.isdir(os.path.join(data_dir, "qrels")):
        raise ValueError(f"{data_dir} has no qrels/ folder; a BEIR folder holds qrels/{{train,dev,test}}.tsv")
    path = os.path.join(data_dir, "qrels", f"{split}.tsv")
    if not os.path.isfile(path):
        have = sorted(n[:-4] for n in os.listdir(os.path.join(data_dir, "qrels")) if n.endswith(".tsv"))
        raise ValueError(f"{data_dir} has no qrels/{split}.tsv (it has: {', '.join(have) or 'none'})")
    return path


def load_beir(data_dir: str, split: str) -> BeirData:
    """One split of a BEIR folder, checked: every judged query is in ``queries.jsonl`` and every judged document
    in ``corpus.jsonl``; at least one query has a relevant document (score > 0).

    Raises ValueError (one line: the file, the id, what to do) for a missing file or a bad one."""
    path = qrels_path(data_dir, split)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not os.path.isfile(os.path.join(data_dir, name)):
            raise ValueError(f"{data_dir} has no {name}; a BEIR folder holds corpus.jsonl and queries.jsonl")
    corpus = read_corpus(os.path.join(data_dir, "corpus.jsonl"))
    all_queries = read_queries(os.path.join(data_dir, "queries.jsonl"))
    qrels = read_qrels(path)
    for query_id, judged in qrels.items():
        if query_id not in all_queries:
            raise ValueError(f"{path}: query-id {query_id!r} is not in queries.jsonl")
        missing = next((d for d in judged if d not in corpus), None)
        if missing is not None:
            raise ValueError(f"{path}: corpus-id {missing!r} (query {query_id!r}) is not in corpus.jsonl")
    if not any(score > 0 for judged in qrels.values() for score in judged.values()):
        raise ValueError(f"{path}: no judgement has a score above 0, so no query has a relevant document")
    queries = {q: t for q, t in all_queries.items() if q in qrels}
    return BeirData(corpus, queries, qrels)


# ------------------------------------------------------------------------------------------ training pairs


@dataclass(frozen=True)
class Pair:
    """One training example: a query, a relevant text, and optionally a hard negative."""

    query: str
    positive: str
    negative: str | None = None


def read_pairs(path: str) -> list[Pair]:
    """Training pairs from a TSV file with a ``query``, ``positive`` [, ``negative``] header, a JSONL file of
    objects with those keys, or a BEIR folder (its ``qrels/train.tsv``: every judged pair with score > 0).

    Raises ValueError (file and line) for a missing column or key, or a file without pairs."""
    if os.path.isdir(path):
        data = load_beir(path, "train")
        pairs = [
            Pair(data.queries[q], data.corpus[d])
            for q, judged in data.qrels.items()
            for d, score in judged.items()
            if score > 0
        ]
    elif path.endswith((".jsonl", ".json")):
        pairs = list(_jsonl_pairs(path))
    else:
        pairs = list(_tsv_pairs(path))
    if not pairs:
        raise ValueError(f"{path}: no training pairs")
    negatives = sum(p.negative is not None for p in pairs)
    if 0 < negatives < len(pairs):
        raise ValueError(f"{path}: {negatives} of {len(pairs)} pairs have a negative; give one to all or none")
    return pairs


def _jsonl_pairs(path: str) -> Iterator[Pair]:
    for _, record in read_json_lines(path, ("query", "positive")):
        negative = record.get("negative")
        yield Pair(str(record["query"]), str(record["positive"]), None if negative is None else str(negative))


def _tsv_pairs(path: str) -> Iterator[Pair]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None or header[:2] != ["query", "positive"]:
            raise ValueError(f"{path}:1: expected the header query<TAB>positive[<TAB>negative]")
        has_negative = len(header) > 2 and header[2] == "negative"
        for number, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) < (3 if has_negative else 2):
                raise ValueError(f"{path}:{number}: expected {len(header)} tab-separated columns")
            yield Pair(row[0], row[1], row[2] if has_negative else None)


# ------------------------------------------------------------------------------------------ SQuAD -> BEIR


def _article_order(title: str) -> str:
    """A stable pseudo-random order of articles (blake2b of the title, never the salted ``hash``)."""
    return hashlib.blake2b(title.encode("utf-8"), digest_size=8).hexdigest()


def split_articles(titles: list[str], dev_fraction: float, test_fraction: float) -> dict[str, str]:
    """Title -> split: articles in blake2b order, the first ``ceil(test_fraction * n)`` to test, the next
    ``ceil(dev_fraction * n)`` to dev, the rest to train (so every paragraph, and every question about it, is in
    exactly one split). ValueError when a split would be empty."""
    order = sorted(titles, key=_article_order)
    n_test = math.ceil(test_fraction * len(order))
    n_dev = math.ceil(dev_fraction * len(order))
    if n_test < 1 or len(order) - n_test - n_dev < 1:
        raise ValueError(
            f"{len(order)} articles cannot give a test split of {test_fraction} and a train split: "
            "use a file with more articles or other fractions"
        )
    return {t: ("test" if i < n_test else "dev" if i < n_test + n_dev else "train") for i, t in enumerate(order)}


def squad_to_beir(
    squad_file: str,
    output_dir: str,
    *,
    dev_fraction: float = 0.0,
    test_fraction: float = 0.5,
    max_articles: int | None = None,
    overwrite: bool = False,
) -> dict[str, int]:
    """Write a BEIR folder from a SQuAD file: each paragraph a document (``title`` = the article's, ids
    ``ARTICLE-PARAGRAPH`` numbers), each answerable question a query judged relevant (score 1) to its own
    paragraph only, the articles split into train / dev / test by ``split_articles``. The folder is written
    beside its final name and renamed into place, so one that exists is complete.

    Returns the counts (``documents``, ``<split>_queries``, ``<split>_articles``). Raises ValueError for a file
    that is not SQuAD JSON, FileExistsError for an existing ``output_dir`` without ``overwrite``."""
    if os.path.exists(output_dir) and not overwrite:
        raise FileExistsError(f"{output_dir} exists; choose another --output-dir or pass --overwrite")
    try:
        with open(squad_file, encoding="utf-8") as f:
            articles = json.load(f)["data"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{squad_file}: not a SQuAD JSON file (an object with a 'data' list of articles)") from None
    articles = articles[:max_articles] if max_articles else articles
    titles = [str(a.get("title", i)) for i, a in enumerate(articles)]
    if len(set(titles)) != len(titles):
        raise ValueError(f"{squad_file}: two articles share a title; the split is made by title")
    split_of = split_articles(titles, dev_fraction, test_fraction)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, staging_name("beir"))
    try:
        os.makedirs(os.path.join(staging, "qrels"))
        counts = _write_beir(articles, titles, split_of, staging)
        replace_directory(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return counts


def _write_beir(articles: list[dict], titles: list[str], split_of: dict[str, str], folder: str) -> dict[str, int]:
    """Write corpus.jsonl, queries.jsonl and the qrels of each split that has queries into ``folder``."""
    counts = {"documents": 0, **{f"{s}_queries": 0 for s in SPLITS}, **{f"{s}_articles": 0 for s in SPLITS}}
    qrels: dict[str, list[tuple[str, str]]] = {s: [] for s in SPLITS}
    with (
        open(os.path.join(folder, "corpus.jsonl"), "w", encoding="utf-8") as corpus,
        open(os.path.join(folder, "queries.jsonl"), "w", encoding="utf-8") as queries,
    ):
        for a, (article, title) in enumerate(zip(articles, titles, strict=True)):
            split = split_of[title]
            counts[f"{split}_articles"] += 1
            for p, paragraph in enumerate(article.get("paragraphs", [])):
                doc_id = f"{a}-{p}"
                corpus.write(strict_json.dumps({"_id": doc_id, "title": title, "text": paragraph["context"]}) + "\n")
                counts["documents"] += 1
                for qa in paragraph.get("qas", []):
                    if qa.get("is_impossible") or not qa.get("answers"):
                        continue  # SQuAD 2.0's unanswerable questions have no relevant paragraph
                    queries.write(strict_json.dumps({"_id": str(qa["id"]), "text": qa["question"]}) + "\n")
                    qrels[split].append((str(qa["id"]), doc_id))
                    counts[f"{split}_queries"] += 1
    for split, rows in qrels.items():
        if rows:
            with open(os.path.join(folder, "qrels", f"{split}.tsv"), "w", encoding="utf-8") as f:
                f.write("\t".join(QRELS_HEADER) + "\n")
                f.writelines(f"{q}\t{d}\t1\n" for q, d in rows)
    return counts
