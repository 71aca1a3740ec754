"""Weighted source mixing for ``make-shards`` (``--source NAME=GLOBS:WEIGHT``, ``--mixture FILE.json``,
``--mixture-alpha``).

A source's weight is a per-document sampling *rate* r: each of its documents is written
``floor(r) + (u < r - floor(r))`` times, where

    ``u = int.from_bytes(blake2b(f"mixture:{random_seed}:{source}:{path}:{ordinal}", 8 bytes), "little") / 2**64``

(:func:`copies_of`): r = 2 writes every document twice, r = 0.5 keeps each with probability 0.5, r = 1.5
once plus a second copy with probability 0.5. The decision is a stable hash of the document's id, never
Python's salted ``hash()`` or a random stream, so it is the same on every runner, worker count and bundle
order. With ``--mixture-alpha`` A the rates come from the sources' sizes (XLM-R, Conneau et al. 2020): with
``n_i`` a source's input bytes and ``p_i = n_i / sum n``, the source's share becomes
``q_i = p_i**A / sum p_j**A`` at the same total size, i.e. rate ``r_i = q_i / p_i`` (:func:`alpha_rates`).

Copy c of document (file, ordinal) is the document ``(file, ordinal + c * 2**32)`` (:func:`copy_ordinal`):
a distinct id for bucketing (the copies land in different buckets, pair with other documents and get their
own masks), while the held-out split decides on the original ordinal (:func:`base_ordinal`), so all
copies of a document are on the same side. Sampling runs after reading and deduplication (``--dedup``
compares the documents as read: copies made here are never dropped as duplicates, and a text found in two
sources is kept in the first source, input order) and after tokenization (the counts below are word pieces).

Counts (``manifest["mixture"]``): per source its files, input bytes, documents and word pieces before
sampling, the rate, and the documents and word pieces written; the asked share of word pieces
(``rate * tokens_in / sum``) beside the realised one. They cover the whole run (training and held-out sides
together).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Iterator, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from bertprep.pipeline import readers
from bertprep.pipeline.config import ShardsConfig, Source
from bertprep.pipeline.instances.bucket_files import TokenizedDocument, document_tokens

#: Copies are numbered in the ordinal's bits from 32 up (a file never holds 2**32 documents).
COPY_SHIFT = 32
SAMPLING_RULE = (
    "copies = floor(rate) + (blake2b('mixture:<random_seed>:<source>:<input path>:<document ordinal>', 8 bytes, "
    "little-endian) / 2**64 < rate - floor(rate))"
)


def copy_ordinal(ordinal: int, copy: int) -> int:
    """The ordinal that identifies copy ``copy`` (0 = the document itself) of document ``ordinal``."""
    return ordinal + (copy << COPY_SHIFT)


def base_ordinal(ordinal: int) -> int:
    """The document's own ordinal, whichever copy ``ordinal`` names (the identity without a mixture)."""
    return ordinal & ((1 << COPY_SHIFT) - 1)


def sampling_score(random_seed: int, source: str, path: str, ordinal: int) -> float:
    digest = hashlib.blake2b(f"mixture:{random_seed}:{source}:{path}:{ordinal}".encode("utf-8"), digest_size=8)
    return int.from_bytes(digest.digest(), "little") / 2.0**64


def copies_of(rate: float, random_seed: int, source: str, path: str, ordinal: int) -> int:
    """How many times a document is written at sampling ``rate`` (see the module docstring)."""
    whole = math.floor(rate)
    frac = rate - whole
    return whole + int(frac > 0 and sampling_score(random_seed, source, path, ordinal) < frac)


def alpha_rates(sizes: Sequence[int], alpha: float) -> list[float]:
    """Rates that give source i the share ``p_i**alpha / sum p_j**alpha`` of the total (``p_i``: its share of
    ``sizes``) at the same total size. A source of size 0 gets rate 1 (it has nothing to sample)."""
    total = sum(sizes)
    if not total:
        return [1.0] * len(sizes)
    p = [n / total for n in sizes]
    z = sum(x**alpha for x in p if x > 0)
    return [(x**alpha / z) / x if x > 0 else 1.0 for x in p]


def file_size(path: str) -> int:
    return FileSystems.match([path])[0].metadata_list[0].size_in_bytes


class MixturePlan:
    """Which source each input file belongs to and each source's rate (made once, when the graph is built)."""

    def __init__(self, config: ShardsConfig, files: Sequence[str]):
        self.sources: tuple[Source, ...] = config.sources
        self.names = [s.name for s in self.sources]
        self.file_source = source_of_files(self.sources, files)
        self.files = [sum(1 for s in self.file_source if s == i) for i in range(len(self.sources))]
        self.bytes = [0] * len(self.sources)
        for path, i in zip(files, self.file_source):
            self.bytes[i] += file_size(path)
        if config.mixture_alpha is None:
            self.rates = [s.weight for s in self.sources]
        else:
            self.rates = alpha_rates(self.bytes, config.mixture_alpha)

    def static_counts(self) -> dict:
        """The counts known before reading: files and bytes per source."""
        return {"mixture": {name: {"files": f, "bytes": b} for name, f, b in zip(self.names, self.files, self.bytes)}}


def source_of_files(sources: Sequence[Source], files: Sequence[str]) -> list[int]:
    """The index of the source of each of ``files`` (the inputs expanded, in order).

    Raises:
        readers.InputError: a source whose inputs match no file, or a file matched by two sources.
    """
    owner: dict[str, int] = {}
    for i, source in enumerate(sources):
        try:
            matched = readers.expand_inputs(list(source.inputs))
        except readers.InputError as err:
            raise readers.InputError(f"source {source.name!r}: {err}") from err
        for path in matched:
            if path in owner and owner[path] != i:
                raise readers.InputError(
                    f"{path} is in two sources, {sources[owner[path]].name!r} and {source.name!r}: a file must "
                    "belong to one source (narrow the globs)"
                )
            owner.setdefault(path, i)
    missing = [f for f in files if f not in owner]
    assert not missing, f"files of no source: {missing[:3]}"  # inputs are the sources' inputs together
    return [owner[f] for f in files]


class SampleSourcesFn(beam.DoFn):
    """A :data:`TokenizedDocument` -> its copies (0, 1 or more; copy c with ordinal ``copy_ordinal(o, c)``);
    a tagged ``counts`` output per document with its source's documents and word pieces in and out."""

    def __init__(self, files: Sequence[str], plan: MixturePlan, random_seed: int):
        self.files = list(files)
        self.file_source = list(plan.file_source)
        self.names = list(plan.names)
        self.rates = list(plan.rates)
        self.random_seed = random_seed
        self.copies = Metrics.counter("bertprep", "mixture_documents_written")

    def process(self, doc: TokenizedDocument) -> Iterator[Any]:
        i = self.file_source[doc[0]]
        name = self.names[i]
        n = copies_of(self.rates[i], self.random_seed, name, self.files[doc[0]], doc[1])
        for c in range(n):
            yield (doc[0], copy_ordinal(doc[1], c)) + tuple(doc[2:])
        tokens = document_tokens(doc)
        self.copies.inc(n)
        yield beam.pvalue.TaggedOutput(
            "counts",
            {
                "mixture": {
                    name: {"documents_in": 1, "tokens_in": tokens, "documents": n, "tokens": n * tokens},
                }
            },
        )


class SampleSources(beam.PTransform):
    """Tokenized documents -> ``{"documents": the sampled copies, "counts": per-source counts}``."""

    def __init__(self, files: Sequence[str], plan: MixturePlan, random_seed: int):
        super().__init__()
        self.files = files
        self.plan = plan
        self.random_seed = random_seed

    def expand(self, tokenized):
        sampled = tokenized | "SampleSourcesFn" >> beam.ParDo(
            SampleSourcesFn(self.files, self.plan, self.random_seed)
        ).with_outputs("counts", main="documents")
        static = tokenized.pipeline | "SourceSizes" >> beam.Create([self.plan.static_counts()])
        counts = (sampled.counts, static) | "FlattenSourceCounts" >> beam.Flatten()
        return {"documents": sampled.documents, "counts": counts}


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole else None


def manifest_section(config: ShardsConfig, counts: dict) -> dict[str, Any]:
    """``{"mixture": ...}`` for the manifest (empty without sources): per source its size, weight, rate, and
    the asked and realised shares of documents and word pieces."""
    if not config.sources:
        return {}
    per = counts.get("mixture") or {}
    sizes = [int((per.get(s.name) or {}).get("bytes", 0)) for s in config.sources]
    alpha = config.mixture_alpha
    rates = [s.weight for s in config.sources] if alpha is None else alpha_rates(sizes, alpha)
    rows = []
    for source, rate in zip(config.sources, rates):
        c = per.get(source.name) or {}
        rows.append(
            {
                "name": source.name,
                "inputs": list(source.inputs),
                "files": int(c.get("files", 0)),
                "bytes": int(c.get("bytes", 0)),
                "weight": source.weight,
                "rate": round(rate, 6),
                "documents_in": int(c.get("documents_in", 0)),
                "tokens_in": int(c.get("tokens_in", 0)),
                "documents": int(c.get("documents", 0)),
                "tokens": int(c.get("tokens", 0)),
            }
        )
    asked_total = sum(r["rate"] * r["tokens_in"] for r in rows)
    tokens_total = sum(r["tokens"] for r in rows)
    docs_total = sum(r["documents"] for r in rows)
    bytes_total = sum(r["bytes"] for r in rows)
    for r in rows:
        r["byte_share_in"] = _share(r["bytes"], bytes_total)
        r["asked_token_share"] = _share(r["rate"] * r["tokens_in"], asked_total)
        r["token_share"] = _share(r["tokens"], tokens_total)
        r["document_share"] = _share(r["documents"], docs_total)
    return {
        "mixture": {
            "temperature_alpha": config.mixture_alpha,
            "rule": SAMPLING_RULE,
            "seed": config.instance.random_seed,
            "counted": "before the held-out split (both sides together)",
            "sources": rows,
        }
    }
