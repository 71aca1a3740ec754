"""Weighted source mixing for ``make-shards`` (``--source NAME=GLOBS:WEIGHT``, ``--mixture FILE.json``,
``--mixture-alpha``).

A source's weight is a sampling *rate* r over its documents, applied so that the source's word pieces are
multiplied by r (up to one sentence): every document is written ``floor(r)`` times, and a token budget of
``(r - floor(r)) * T`` (``T``: the source's word pieces) buys one more copy of the documents first in the
order of a stable per-document key,

    ``key = int.from_bytes(blake2b(f"mixture:{random_seed}:{source}:{path}:{ordinal}", 8 bytes), "little")``

(:func:`sampling_key`; ``path`` relative to its input's root, ``readers.input_keys``): documents are taken whole
while the budget lasts, and the document at which it runs out gets a copy of its first sentences, as many as bring
the total nearest the budget (:func:`plan_fraction`, :func:`copies_of`). r = 2 writes every document twice, r = 0.5
keeps the half of the source's word pieces that comes first in key order, r = 1.5 every document once plus that half
again. This is sampling without replacement in a random order (each document is in the extra share with probability
about r - floor(r), as a per-document coin would give), with the total fixed: a coin per document leaves the
realised token count to chance, which for a source of few long documents (books) moves it by whole books. The key is
a stable hash of the document's id, never Python's salted ``hash()`` or a random stream, and the budget's cut is
found by a global combine that sorts the keys (:class:`PlanFractionsFn`, 16 bytes per document of a source with a
fractional rate), so the choice is the same on every runner, worker count and bundle order. With ``--mixture-alpha``
A the rates come from the sources' sizes (XLM-R, Conneau et al. 2020): with ``n_i`` a source's input bytes and
``p_i = n_i / sum n``, the source's share becomes ``q_i = p_i**A / sum p_j**A`` at the same total size, i.e. rate
``r_i = q_i / p_i`` (:func:`alpha_rates`).

Copy c of document (file, ordinal) is the document ``(file, ordinal + c * 2**32)`` (:func:`copy_ordinal`):
a distinct id for bucketing (the copies land in different buckets, pair with other documents and get their
own masks), while the held-out split decides on the original ordinal (:func:`base_ordinal`), so all
copies of a document are on the same side. Sampling runs after reading and deduplication (``--dedup``
compares the documents as read: copies made here are never dropped as duplicates, and a text found in two
sources is kept in the first source, input order) and after tokenization (the counts below are word pieces).

Counts (``manifest["mixture"]``): per source its files, input bytes, documents and word pieces before
sampling, the rate, and the documents and word pieces written; the asked share of word pieces
(``rate * tokens_in / sum``) beside the realised one (both sides of a held-out split together); and the
instances of the shard set (by the source of their first segment) and their word pieces (each segment's
to its document's source), with their shares.
"""

from __future__ import annotations

import array
import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from bertprep.pipeline import readers
from bertprep.pipeline.config import ShardsConfig, Source
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments, InstanceDescriptions
from bertprep.pipeline.instances.bucket_files import TokenizedDocument, document_tokens

#: Copies are numbered in the ordinal's bits from 32 up (a file never holds 2**32 documents).
COPY_SHIFT = 32
#: A cut key above every 64-bit key: the whole source fits the budget.
ALL_KEYS = 1 << 64
SAMPLING_RULE = (
    "copies = floor(rate), plus one for the documents first in the order of blake2b('mixture:<random_seed>:"
    "<source>:<path>:<ordinal>' (document_id), 8 bytes, little-endian) while a budget of (rate - floor(rate)) "
    "x the source's word pieces lasts; the document where it runs out gets a copy of the first sentences that "
    "bring the total nearest the budget"
)

#: Per source index with a fractional rate: ``(cut key, word pieces left for the document of that key)``.
FractionPlan = Mapping[int, tuple[int, int]]


def copy_ordinal(ordinal: int, copy: int) -> int:
    """The ordinal that identifies copy ``copy`` (0 = the document itself) of document ``ordinal``."""
    return ordinal + (copy << COPY_SHIFT)


def base_ordinal(ordinal: int) -> int:
    """The document's own ordinal, whichever copy ``ordinal`` names (the identity without a mixture)."""
    return ordinal & ((1 << COPY_SHIFT) - 1)


def sampling_key(random_seed: int, source: str, path: str, ordinal: int) -> int:
    """The document's place in its source's sampling order: a 64-bit ``blake2b`` of its id (module docstring)."""
    digest = hashlib.blake2b(f"mixture:{random_seed}:{source}:{path}:{ordinal}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little")


def plan_fraction(keys: Sequence[int], tokens: Sequence[int], fraction: float) -> tuple[int, int]:
    """Where a budget of ``round(fraction * sum(tokens))`` word pieces runs out in the order of ``keys``.

    Args:
        keys: the documents' :func:`sampling_key` (uint64), one per document of the source.
        tokens: their word pieces (int), in the same order.
        fraction: the fractional part of the source's rate, in [0, 1).

    Returns:
        ``(cut key, left)``: documents with a key below the cut key get the extra copy whole; the document
        whose key equals it gets its first sentences nearest ``left`` word pieces (:func:`sentences_for`);
        ``(ALL_KEYS, 0)`` when every document fits.
    """
    key_array = np.asarray(keys, dtype=np.uint64)
    token_array = np.asarray(tokens, dtype=np.int64)
    budget = int(round(fraction * int(token_array.sum())))
    order = np.argsort(key_array, kind="stable")
    before = np.cumsum(token_array[order]) - token_array[order]  # word pieces of the documents before each (key order)
    fits = int(np.searchsorted(before + token_array[order], budget, side="right"))  # whole documents in the budget
    if fits == len(order):
        return ALL_KEYS, 0
    return int(key_array[order[fits]]), budget - int(before[fits])


def sentences_for(sentence_lengths: Sequence[int] | np.ndarray, left: int) -> int:
    """How many first sentences (of these word-piece lengths) bring a copy nearest ``left`` word pieces (ties:
    fewer)."""
    best, best_gap, total = 0, left, 0
    for k, n in enumerate(sentence_lengths, start=1):
        total += int(n)
        if abs(left - total) < best_gap:
            best, best_gap = k, abs(left - total)
        if total >= left:
            break
    return best


def copies_of(
    rate: float, key: int, cut: tuple[int, int] | None, sentence_lengths: Sequence[int] | np.ndarray
) -> list[int]:
    """The sentences each copy of a document keeps: ``len(result)`` copies, copy c its first ``result[c]``
    sentences.

    Args:
        rate: the source's rate.
        key: the document's :func:`sampling_key`.
        cut: the source's :func:`plan_fraction` result (``None``: an integer rate).
        sentence_lengths: the document's sentences' word pieces.
    """
    whole = math.floor(rate)
    n = len(sentence_lengths)
    kept = [n] * whole
    if cut is not None and rate > whole:
        cut_key, left = cut
        if key < cut_key:
            kept.append(n)
        elif key == cut_key:
            k = sentences_for(sentence_lengths, left)
            if k:
                kept.append(k)
    return kept


def first_sentences(doc: TokenizedDocument, k: int) -> TokenizedDocument:
    """The document with its first ``k`` sentences (ids, lengths and word starts cut to them)."""
    lengths = np.frombuffer(doc.sentence_lengths, dtype=np.int32)
    if k >= len(lengths):
        return doc
    n = int(lengths[:k].sum())
    return doc._replace(
        input_ids=doc.input_ids[: 4 * n],
        sentence_lengths=lengths[:k].tobytes(),
        word_starts=None if doc.word_starts is None else doc.word_starts[:n],
    )


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
        for path, i in zip(files, self.file_source, strict=True):
            self.bytes[i] += file_size(path)
        if config.mixture_alpha is None:
            self.rates = [s.weight for s in self.sources]
        else:
            self.rates = alpha_rates(self.bytes, config.mixture_alpha)

    @property
    def fractional(self) -> list[int]:
        """The sources whose rate has a fractional part (they need :class:`PlanFractionsFn`)."""
        return [i for i, rate in enumerate(self.rates) if rate != math.floor(rate)]

    def static_counts(self) -> dict:
        """The counts known before reading: files and bytes per source."""
        return {
            "mixture": {
                name: {"files": f, "bytes": b} for name, f, b in zip(self.names, self.files, self.bytes, strict=True)
            }
        }


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


class PlanFractionsFn(beam.CombineFn):
    """Tokenized documents -> :data:`FractionPlan`: per source with a fractional rate, where its budget runs
    out (:func:`plan_fraction`).

    The accumulator holds 16 bytes per document of those sources (its 64-bit key and its word pieces, in
    ``array``s), never the documents; the result does not depend on the order documents arrive in."""

    def __init__(self, files: Sequence[str], plan: MixturePlan, random_seed: int):
        self.files = list(files)
        self.file_source = list(plan.file_source)
        self.names = list(plan.names)
        self.rates = list(plan.rates)
        self.fractional = set(plan.fractional)
        self.random_seed = random_seed

    def create_accumulator(self) -> dict[int, tuple[array.array, array.array]]:
        return {}

    def add_input(self, acc, doc: TokenizedDocument):
        i = self.file_source[doc.file_index]
        if i in self.fractional:
            keys, tokens = acc.setdefault(i, (array.array("Q"), array.array("q")))
            keys.append(sampling_key(self.random_seed, self.names[i], self.files[doc.file_index], doc.ordinal))
            tokens.append(document_tokens(doc))
        return acc

    def merge_accumulators(self, accs):
        out: dict[int, tuple[array.array, array.array]] = {}
        for acc in accs:
            for i, (keys, tokens) in acc.items():
                all_keys, all_tokens = out.setdefault(i, (array.array("Q"), array.array("q")))
                all_keys.extend(keys)
                all_tokens.extend(tokens)
        return out

    def extract_output(self, acc) -> dict[int, tuple[int, int]]:
        return {
            i: plan_fraction(keys, tokens, self.rates[i] - math.floor(self.rates[i]))
            for i, (keys, tokens) in sorted(acc.items())
        }


class SampleSourcesFn(beam.DoFn):
    """A :class:`TokenizedDocument` -> its copies (0, 1 or more; copy c with ordinal ``copy_ordinal(o, c)``,
    the last one perhaps cut to its first sentences); a tagged ``counts`` output per document with its source's
    documents and word pieces in and out. Side input: the :data:`FractionPlan`."""

    def __init__(self, files: Sequence[str], plan: MixturePlan, random_seed: int):
        self.files = list(files)
        self.file_source = list(plan.file_source)
        self.names = list(plan.names)
        self.rates = list(plan.rates)
        self.random_seed = random_seed
        self.copies = Metrics.counter("bertprep", "mixture_documents_written")

    def process(self, doc: TokenizedDocument, fractions: FractionPlan) -> Iterator[Any]:
        i = self.file_source[doc.file_index]
        name = self.names[i]
        cut = fractions.get(i)
        key = sampling_key(self.random_seed, name, self.files[doc.file_index], doc.ordinal) if cut is not None else 0
        lengths = np.frombuffer(doc.sentence_lengths, dtype=np.int32)
        kept = copies_of(self.rates[i], key, cut, lengths)
        tokens_out = 0
        for c, k in enumerate(kept):
            copy = first_sentences(doc, k)
            tokens_out += document_tokens(copy)
            yield copy._replace(ordinal=copy_ordinal(copy.ordinal, c))
        self.copies.inc(len(kept))
        yield beam.pvalue.TaggedOutput(
            "counts",
            {
                "mixture": {
                    name: {
                        "documents_in": 1,
                        "tokens_in": document_tokens(doc),
                        "documents": len(kept),
                        "tokens": tokens_out,
                    },
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
        if self.plan.fractional:  # where each fractional budget runs out
            fractions = beam.pvalue.AsSingleton(
                tokenized
                | "PlanFractions" >> beam.CombineGlobally(PlanFractionsFn(self.files, self.plan, self.random_seed))
            )
        else:
            fractions = beam.pvalue.AsSingleton(tokenized.pipeline | "NoFractions" >> beam.Create([{}]))
        sampled = tokenized | "SampleSourcesFn" >> beam.ParDo(
            SampleSourcesFn(self.files, self.plan, self.random_seed), fractions
        ).with_outputs("counts", main="documents")
        static = tokenized.pipeline | "SourceSizes" >> beam.Create([self.plan.static_counts()])
        counts = (sampled.counts, static) | "FlattenSourceCounts" >> beam.Flatten()
        return {"documents": sampled.documents, "counts": counts}


def instance_source_counts(
    docs: BucketDocuments, described: InstanceDescriptions, doc_sources: Sequence[int], names: Sequence[str]
) -> dict:
    """A bucket's instances counted per source: ``{"mixture": {name: {"instances", "instance_tokens"}}}``.

    An instance counts for the source of the document of its first segment (a NotNext segment B may come from
    another source); its word pieces (without ``[CLS]``/``[SEP]``) count for the source of the document each
    came from. Objective ``none`` rows run across documents: a row counts for the source of its first word
    piece. ``doc_sources``: the source index of each of the bucket's documents (in ``docs``' order)."""
    sources = np.asarray(doc_sources, dtype=np.int64)
    instances = np.zeros(len(names), dtype=np.int64)
    tokens = np.zeros(len(names), dtype=np.int64)
    if not len(described):
        return {}
    a_start = np.frombuffer(described.a_start, dtype=np.int64)
    a_len = np.frombuffer(described.a_len, dtype=np.int32).astype(np.int64)
    if described.objective == "none":  # rows cut from the documents joined by [SEP] (source -1 at a [SEP])
        order = described.stream_documents
        pieces = []
        for n, d in enumerate(order):
            if n:
                pieces.append(np.full(1, -1, dtype=np.int64))
            pieces.append(np.full(int(sum(docs.sentence_lengths[d])), sources[d], dtype=np.int64))
        position_source = np.concatenate(pieces)
        np.add.at(instances, position_source[a_start], 1)
        covered = np.zeros(len(position_source) + 1, dtype=np.int64)  # how many rows cover each position
        np.add.at(covered, a_start, 1)
        np.add.at(covered, a_start + a_len, -1)
        weight = np.cumsum(covered)[:-1]
        real = position_source >= 0
        tokens += np.bincount(position_source[real], weights=weight[real], minlength=len(names)).astype(np.int64)
    else:  # offsets into the bucket's ids: the document of each segment by its start
        starts = np.asarray(docs.doc_starts, dtype=np.int64)
        b_start = np.frombuffer(described.b_start, dtype=np.int64)
        b_len = np.frombuffer(described.b_len, dtype=np.int32).astype(np.int64)
        a_source = sources[np.searchsorted(starts, a_start, side="right") - 1]
        b_source = sources[np.searchsorted(starts, b_start, side="right") - 1]
        instances += np.bincount(a_source, minlength=len(names))
        tokens += np.bincount(a_source, weights=a_len, minlength=len(names)).astype(np.int64)
        tokens += np.bincount(b_source, weights=b_len, minlength=len(names)).astype(np.int64)
    return {
        "mixture": {
            name: {"instances": int(instances[i]), "instance_tokens": int(tokens[i])}
            for i, name in enumerate(names)
            if instances[i] or tokens[i]
        }
    }


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole else None


def manifest_section(config: ShardsConfig, counts: dict) -> dict[str, Any]:
    """``{"mixture": ...}`` for the manifest (empty without sources): per source its size, weight, rate, the
    asked share of word pieces and the realised shares of documents and word pieces (sampled, both sides of a
    held-out split together) and of this shard set's instances and their word pieces."""
    if not config.sources:
        return {}
    per = counts.get("mixture") or {}
    sizes = [int((per.get(s.name) or {}).get("bytes", 0)) for s in config.sources]
    alpha = config.mixture_alpha
    rates = [s.weight for s in config.sources] if alpha is None else alpha_rates(sizes, alpha)
    rows: list[dict[str, Any]] = []
    for source, rate in zip(config.sources, rates, strict=True):
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
                "instances": int(c.get("instances", 0)),
                "instance_tokens": int(c.get("instance_tokens", 0)),
            }
        )
    asked_total = sum(r["rate"] * r["tokens_in"] for r in rows)
    tokens_total = sum(r["tokens"] for r in rows)
    docs_total = sum(r["documents"] for r in rows)
    bytes_total = sum(r["bytes"] for r in rows)
    instances_total = sum(r["instances"] for r in rows)
    instance_tokens_total = sum(r["instance_tokens"] for r in rows)
    for r in rows:
        r["byte_share_in"] = _share(r["bytes"], bytes_total)
        r["asked_token_share"] = _share(r["rate"] * r["tokens_in"], asked_total)
        r["token_share"] = _share(r["tokens"], tokens_total)
        r["document_share"] = _share(r["documents"], docs_total)
        r["instance_share"] = _share(r["instances"], instances_total)
        r["instance_token_share"] = _share(r["instance_tokens"], instance_tokens_total)
    return {
        "mixture": {
            "temperature_alpha": config.mixture_alpha,
            "rule": SAMPLING_RULE,
            "seed": config.instance.random_seed,
            "counted": "documents and tokens before the held-out split (both sides together); instances and "
            "instance_tokens in this shard set (an instance by the source of its first segment)",
            "sources": rows,
        }
    }
