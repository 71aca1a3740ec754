"""A bucket held as arrays: its documents, and its instances described by offsets into them.

:class:`BucketDocuments` is what ``bucket_files.bucket_documents`` builds from a bucket's tokenized documents
and what :func:`~bertprep.pipeline.instances.bucket_instances.describe_instances` reads: one flat ``uint32`` array of
word-piece ids plus each document's sentence lengths, ~4 bytes per token instead of a Python list of lists
(~40 bytes per token), and no decode to Python ints. :class:`InstanceDescriptions` is what ``describe_instances``
writes and :func:`~bertprep.pipeline.instances.bucket_rows.assemble_batches` reads: every instance as
``(a_start, a_len, b_start, b_len, label)`` in flat-array coordinates plus its masked positions and
replacement ids, so no token list is ever built.

numpy only.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class BucketDocuments:
    """A bucket's documents as arrays, in document-id order (empty documents included).

    Attributes:
        ids: (T,) ``uint32`` word-piece ids of every sentence of every document, concatenated.
        sentence_lengths: per document, the lengths of its sentences (Python ints, each >= 1), so that
            document ``d`` occupies ``ids[doc_starts[d] : doc_starts[d] + sum(sentence_lengths[d])]``.
        doc_starts: per document, its first position in ``ids``.
    """

    ids: np.ndarray
    sentence_lengths: list[list[int]]
    doc_starts: list[int]
    word_starts: np.ndarray | None = None
    """(T,) ``uint8``, 1 where a piece starts a word (a word segmenter's boundaries), parallel to ``ids``;
    ``None``: the default boundaries (a piece and its ``##`` pieces)."""

    @classmethod
    def from_arrays(cls, documents: Sequence[tuple[np.ndarray, Sequence[int] | np.ndarray]]) -> BucketDocuments:
        """From ``(ids, sentence_lengths)`` per document (``ids`` 1-D, ``sum(sentence_lengths) == len(ids)``).

        Raises:
            ValueError: a document's lengths do not add up to its ids, or a sentence is empty.
        """
        starts, lengths, pos = [], [], 0
        for ids, lens in documents:
            lens = [int(n) for n in lens]
            if sum(lens) != len(ids) or any(n <= 0 for n in lens):
                raise ValueError("sentence lengths must be positive and add up to the document's ids")
            starts.append(pos)
            lengths.append(lens)
            pos += len(ids)
        flat = (
            np.concatenate([np.asarray(ids, dtype=np.uint32) for ids, _ in documents])
            if documents
            else np.zeros(0, dtype=np.uint32)
        )
        return cls(flat.astype(np.uint32, copy=False), lengths, starts)

    @classmethod
    def from_lists(cls, documents: Sequence[Sequence[Sequence[int]]]) -> BucketDocuments:
        """From documents as lists of sentences of ids (the reference algorithm's input form)."""
        return cls.from_arrays(
            [(np.array([t for s in doc for t in s], dtype=np.uint32), [len(s) for s in doc]) for doc in documents]
        )


class InstanceDescriptions:
    """Instances described by offsets into :attr:`BucketDocuments.ids`, in creation order.

    Per instance: ``a_start``, ``a_len``, ``b_start``, ``b_len`` (the two segments after truncation),
    ``label`` (1 = NotNext) and ``n_masked``; the masked positions (0-based in the row, in draw order) and
    their replacement ids (:data:`~bertprep.pipeline.masking.rule.KEEP` for the kept 10%) are concatenated in
    ``m_pos`` / ``m_rep``. ``order`` is the final row order (the reference's closing ``shuffle(instances)``).
    ``objective`` is the config's; under ``none`` the rows are one segment each (``b_len`` 0) of ``ids`` (the
    documents joined by ``[SEP]``, see ``bucket_instances._describe_stream``) instead of the bucket's ids.
    """

    def __init__(self) -> None:
        self.a_start = array("q")
        self.a_len = array("i")
        self.b_start = array("q")
        self.b_len = array("i")
        self.label = array("B")
        self.n_masked = array("i")
        self.m_pos = array("i")
        self.m_rep = array("q")
        self.order: list[int] = []
        self.objective = "nsp"
        self.ids: np.ndarray | None = None
        #: the bucket's word-start flags as a list (word-level masking with a word segmenter), else None
        self.word_starts: list[int] | None = None
        #: objective ``none``: the word-start flags laid out as ``ids`` (with a word segmenter), else None
        self.stream_word_starts: np.ndarray | None = None
        #: objective ``none``: the bucket's documents (indexes) in the order they are joined in ``ids``
        self.stream_documents: list[int] = []

    def __len__(self) -> int:
        return len(self.a_start)


__all__ = ["BucketDocuments", "InstanceDescriptions"]
