"""Near-duplicate removal for ``make-shards`` (``--dedup minhash``, ``--dedup-threshold``, ``--dedup-ngram``).

A document is dropped when an *earlier* document (input order: smaller ``(file index, ordinal)``) is a
near-copy of it: the estimated Jaccard similarity of their sets of word ``dedup_ngram``-grams is at least
``dedup_threshold``. The first of a group of near-copies is kept, as ``--dedup exact`` keeps the first copy.
The rule needs no transitive closure: each document is judged against the earlier ones alone, so the
dropped set does not depend on the order in which pairs are found (a chain A~B~C with A and C apart drops B
and C, as B has A before it and C has B).

Steps (:class:`NearDedup`), in the shape of ``heldout.ExactDedup``: a first streaming pass over the inputs
(:class:`MinHashDocumentsFn`) normalises each document as exact dedup does (``heldout.normalized_text``),
takes its word n-grams (a document shorter than n words is one shingle) and its MinHash signature
(``datasketch.MinHash``, :data:`NUM_PERM` permutations, fixed :data:`MINHASH_SEED`: the same signature in
every process), and emits it once per LSH band under the key ``(band, blake2b of the band's values)``;
the bands and rows are datasketch's optimum for the threshold with a missed pair weighing 9 times a
spurious candidate (``MinHashLSH(threshold, num_perm, weights=LSH_WEIGHTS).b/.r``: 14 bands of 9 rows at
0.8, which make a pair of Jaccard 0.8 a candidate with probability 0.87 and one of 0.85 with 0.97, where the
balanced weights' 9 bands of 13 rows gave 0.40 and 0.69). A spurious candidate costs one comparison of
signatures, which rejects it, so recall is what the bands must buy. A ``GroupByKey`` per band key gathers
the candidates (memory per key: the
documents that share that band, i.e. the near-copies and rare chance collisions); :class:`FindNearDuplicatesFn`
checks each candidate pair by estimated Jaccard (the share of equal signature values) and emits each
document that has an earlier near-copy, with that earlier document. A second ``GroupByKey`` on the dropped
ids unites what the bands found (one entry per dropped document, whichever bands found it), and the ids go
to their files (``heldout.file_element``) whose readers skip them: in both pairing scopes.

The shuffle carries ids and signatures (``4 * NUM_PERM`` bytes) once per band, never the text.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from bertprep.core.normalization import bert_normalizer
from bertprep.pipeline import readers
from bertprep.pipeline.beam import heldout
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.errors import USER_ERRORS, record_error

log = logging.getLogger(__name__)

#: MinHash permutations per signature and their seed (fixed: signatures must agree across processes). 256
#: permutations found no more of the planted near-copies than 128 (benchmarks/dedup.md) at twice the shuffle.
NUM_PERM = 128
MINHASH_SEED = 1
#: datasketch's weights of (false positive, false negative) area when it chooses bands and rows: candidates are
#: checked by their estimated Jaccard, so a false positive costs a comparison and a false negative a missed copy.
LSH_WEIGHTS = (0.1, 0.9)


def lsh_bands(threshold: float, num_perm: int = NUM_PERM) -> tuple[int, int]:
    """``(bands, rows)`` of the LSH index for ``threshold``: datasketch's optimum (``MinHashLSH``'s
    ``_optimal_param``) with a false negative weighing 9 times a false positive (:data:`LSH_WEIGHTS`)."""
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=LSH_WEIGHTS)
    return lsh.b, lsh.r


def shingles(text: str, ngram: int) -> list[bytes]:
    """The distinct word ``ngram``-grams of ``text`` (UTF-8, words joined by one space), sorted; a text shorter
    than ``ngram`` words is one shingle; an empty text none."""
    words = text.split()
    if not words:
        return []
    if len(words) <= ngram:
        return [" ".join(words).encode("utf-8")]
    return sorted({" ".join(words[i : i + ngram]).encode("utf-8") for i in range(len(words) - ngram + 1)})


class _Hasher:
    """A datasketch ``MinHash`` template, made once: each signature copies its permutations."""

    def __init__(self, num_perm: int = NUM_PERM, seed: int = MINHASH_SEED):
        from datasketch import MinHash

        self.template = MinHash(num_perm=num_perm, seed=seed)

    def signature(self, grams: Sequence[bytes]) -> np.ndarray:
        """uint32 signature of the shingle set ``grams`` (datasketch's ``MinHash.update_batch``)."""
        m = self.template.copy()
        m.update_batch(grams)
        return m.hashvalues.astype(np.uint32)


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Share of equal MinHash values: the estimate of the Jaccard similarity (``MinHash.jaccard``)."""
    return float(np.count_nonzero(a == b)) / len(a)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[bytes]:
    """One shuffle key per band: the band's index and a 12-byte ``blake2b`` of its values."""
    return [
        b.to_bytes(2, "little")
        + hashlib.blake2b(signature[b * rows : (b + 1) * rows].tobytes(), digest_size=12).digest()
        for b in range(bands)
    ]


def near_duplicates(members: Iterable[tuple[int, int, bytes]], threshold: float) -> Iterator[tuple[tuple, tuple]]:
    """``(dropped id, earliest earlier near-copy id)`` for each member with an earlier member (by id) whose
    estimated Jaccard with it is >= ``threshold``. ``members``: ``(file_index, ordinal, signature bytes)``."""
    ordered = sorted(members, key=lambda m: (m[0], m[1]))
    sigs = [np.frombuffer(m[2], dtype=np.uint32) for m in ordered]
    for j in range(1, len(ordered)):
        for i in range(j):
            if estimated_jaccard(sigs[i], sigs[j]) >= threshold:
                yield (ordered[j][0], ordered[j][1]), (ordered[i][0], ordered[i][1])
                break


class MinHashDocumentsFn(beam.DoFn):
    """``(file_index, path)`` -> ``(band key, (file_index, ordinal, signature bytes))`` per LSH band of each
    document that normalises to something."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        self.config = config
        self.error_dir = error_dir
        self.hashed = Metrics.counter("bertprep", "dedup_documents_hashed")
        self.normalize: Callable[[str], str] | None = None  # (setup)
        self.hasher: _Hasher | None = None  # (setup)
        self.bands = lsh_bands(config.dedup_threshold)

    def setup(self) -> None:
        self.normalize = bert_normalizer(self.config.do_lower_case, self.config.strip_accents).normalize_str
        self.hasher = _Hasher()

    def process(self, element: Sequence[Any]) -> Iterator[Any]:
        file_index, path = element[0], element[1]
        try:
            for doc in readers.read_documents(
                path, self.config.input_format, stats=readers.ReaderStats(), **self.config.reader_kwargs()
            ):
                grams = shingles(heldout.normalized_text(doc.sentences, self.normalize), self.config.dedup_ngram)
                if not grams:
                    continue
                self.hashed.inc()
                assert self.hasher is not None  # (setup)
                signature = self.hasher.signature(grams)
                member = (file_index, doc.ordinal, signature.tobytes())
                for key in band_keys(signature, *self.bands):
                    yield key, member
        except USER_ERRORS as err:
            record_error(self.error_dir, err)
            raise


class FindNearDuplicatesFn(beam.DoFn):
    """``(band key, members)`` -> ``(dropped id, earlier near-copy id)`` per member with an earlier near-copy."""

    def __init__(self, threshold: float):
        self.threshold = threshold
        self.candidates = Metrics.counter("bertprep", "dedup_candidate_buckets")

    def process(self, element: tuple[bytes, Iterable[tuple[int, int, bytes]]]) -> Iterator[Any]:
        _, members = element
        members = list(members)
        if len(members) < 2:
            return
        self.candidates.inc()
        yield from near_duplicates(members, self.threshold)


class UniteDroppedFn(beam.DoFn):
    """``(dropped id, [earlier near-copies found by each band])`` -> ``(file_index, ordinal)`` once, and a tagged
    ``counts`` output (one dropped document; the earliest near-copy found, for the group count)."""

    def __init__(self):
        self.dropped = Metrics.counter("bertprep", "dedup_documents_dropped")

    def process(self, element: tuple[tuple[int, int], Iterable[tuple[int, int]]]) -> Iterator[Any]:
        dropped, earlier = element
        self.dropped.inc()
        yield dropped
        yield beam.pvalue.TaggedOutput("kept_by", (min(earlier), 1))


def _group_counts(element: tuple[tuple[int, int], Iterable[int]]) -> dict:
    """One earlier document and the later near-copies it (first) stood for -> dedup counts."""
    dropped = sum(element[1])
    return {
        "dedup": {"duplicate_groups": 1, "documents_dropped": dropped},
        "reader": {"skipped_documents": {"duplicate": dropped}},
    }


class NearDedup(beam.PTransform):
    """``(file_index, path)`` -> ``{"files": (file_index, path, ordinals to skip), "counts": dedup counts}``,
    as ``heldout.ExactDedup``; see the module docstring."""

    def __init__(self, config: ShardsConfig, error_dir: str | None = None):
        super().__init__()
        self.config = config
        self.error_dir = error_dir

    def expand(self, files):
        united = (
            files
            | "MinHashDocumentsFn" >> beam.ParDo(MinHashDocumentsFn(self.config, self.error_dir))
            | "GroupByBand" >> beam.GroupByKey()
            | "FindNearDuplicatesFn" >> beam.ParDo(FindNearDuplicatesFn(self.config.dedup_threshold))
            | "GroupByDropped" >> beam.GroupByKey()
            | "UniteDroppedFn" >> beam.ParDo(UniteDroppedFn()).with_outputs("kept_by", main="ids")
        )
        counts = (
            united.kept_by | "GroupByKeptDocument" >> beam.GroupByKey() | "CountNearCopies" >> beam.Map(_group_counts)
        )
        skips = united.ids | "GroupByFile" >> beam.GroupByKey()
        joined = (
            {"path": files, "skip": skips}
            | "JoinSkipsToFiles" >> beam.CoGroupByKey()
            | "AttachSkips" >> beam.Map(heldout._attach_skips)
        )
        return {"files": joined, "counts": counts}


def manifest_details(config: ShardsConfig) -> dict[str, Any]:
    """What the manifest's ``dedup`` section says under ``--dedup minhash`` besides exact dedup's
    (``heldout.manifest_sections``): the normalisation and the kept copy restated, the threshold, the n-gram
    size, the MinHash permutations and seed, and the LSH bands and rows."""
    bands, rows = lsh_bands(config.dedup_threshold)
    return {
        "normalization": heldout.NORMALIZATION.replace("; blake2b-128", "")
        + f"; word {config.dedup_ngram}-grams (shorter documents: one shingle)",
        "kept": "a document is dropped when an earlier one in input order (file order, then document "
        "order) is a near-copy; duplicate_groups counts the earliest near-copies found",
        "threshold": config.dedup_threshold,
        "ngram": config.dedup_ngram,
        "num_perm": NUM_PERM,
        "minhash_seed": MINHASH_SEED,
        "lsh_bands": bands,
        "lsh_rows": rows,
    }
