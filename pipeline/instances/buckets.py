"""Which bucket a document goes to: the NotNext pool and the unit of work of ``make-shards`` (no Beam).

A bucket is the set of documents the reference algorithm runs on together: NotNext segments are drawn from
the other documents of the same bucket, and one worker makes a bucket's instances. Three ways to cut the
corpus (``ShardsConfig.bucket_size`` / ``bucket_tokens``):

- ``bucket_size=0``: one bucket holding every document, the original generator exactly;
- ``bucket_size=N > 0``: ``ceil(documents / N)`` buckets, a document's bucket its key modulo that count;
- the default, ``bucket_size=None``: buckets sized by **word pieces**, about ``bucket_tokens`` each
  (:func:`plan_token_buckets`), so that a book and a short article weigh what they cost, a small corpus
  still gives every worker work, and memory per bucket is bounded whatever the documents' sizes. Never
  fewer than :data:`MIN_DOCUMENTS_PER_BUCKET` documents per bucket on average, so the NotNext pool stays
  a sample of the whole corpus rather than of a few documents.

A document's key is ``blake2b("random_seed:path:ordinal")`` (64 bits), stable across processes and
machines (never Python's salted ``hash()``), ``path`` being the file's path relative to the root of its input
(``readers.input_keys``; the manifest's ``document_id``): membership is random and seeded, and depends only on
the input, the seed and the bucket settings, not on where the corpus lies (a folder, a copy, a bucket), the
runner, the worker count or bundle order.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Lower bound on the average documents per token-sized bucket (the NotNext pool must hold many documents).
MIN_DOCUMENTS_PER_BUCKET = 16


def document_key(random_seed: int, path: str, ordinal: int) -> int:
    """64-bit seeded stable key of a document: ``blake2b(f"{random_seed}:{path}:{ordinal}")``, little endian."""
    digest = hashlib.blake2b(f"{random_seed}:{path}:{ordinal}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def stable_bucket(random_seed: int, path: str, ordinal: int, num_buckets: int) -> int:
    """Bucket of a document among ``num_buckets`` (the ``bucket_size=N`` mode): its key mod ``num_buckets``."""
    if num_buckets <= 1:
        return 0
    return document_key(random_seed, path, ordinal) % num_buckets


def num_token_buckets(
    num_documents: int, num_tokens: int, bucket_tokens: int, min_documents: int = MIN_DOCUMENTS_PER_BUCKET
) -> int:
    """Number of token-sized buckets: ``ceil(num_tokens / bucket_tokens)``, at most
    ``num_documents // min_documents``, at least 1."""
    if bucket_tokens < 1:
        raise ValueError(f"bucket_tokens must be >= 1, got {bucket_tokens}")
    by_tokens = math.ceil(num_tokens / bucket_tokens) if num_tokens > 0 else 1
    return max(1, min(by_tokens, num_documents // max(1, min_documents)))


def plan_token_buckets(
    keys: Sequence[int] | np.ndarray,
    tokens: Sequence[int] | np.ndarray,
    bucket_tokens: int,
    min_documents: int = MIN_DOCUMENTS_PER_BUCKET,
) -> list[int]:
    """Cut the documents, ordered by key, into runs of about ``bucket_tokens`` word pieces.

    Args:
        keys: :func:`document_key` of every document (any order; uint64 values, a sequence or numpy array).
        tokens: word pieces of each document, aligned with ``keys``.
        bucket_tokens: target word pieces per bucket.
        min_documents: at least this many documents per bucket on average (caps the bucket count).

    Returns:
        The sorted lower key bounds of buckets ``1 .. n-1`` (empty for one bucket); the bucket of a key is
        :func:`token_bucket_of`. Bucket ``b`` holds the documents whose token midpoint in key order falls in
        ``[b, b + 1) * total / n``: buckets differ from the target by at most one document's length, and are
        a random (seeded) sample of the corpus, since the key order is.
    """
    import numpy as np  # here, so that the CLI can read MIN_DOCUMENTS_PER_BUCKET without numpy

    key_array = np.asarray(keys, dtype=np.uint64)
    token_array = np.asarray(tokens, dtype=np.int64)
    total = int(token_array.sum())
    n = num_token_buckets(len(key_array), total, bucket_tokens, min_documents)
    if n <= 1:
        return []
    order = np.argsort(key_array, kind="stable")
    sorted_keys, sorted_tokens = key_array[order], token_array[order]
    midpoints = np.cumsum(sorted_tokens) - sorted_tokens / 2.0
    bucket = np.minimum((midpoints * n / total).astype(np.int64), n - 1)  # non-decreasing along the key order
    firsts = np.searchsorted(bucket, np.arange(1, n), side="left")
    # a bucket no document falls in (one long document spanning it) repeats the next bound and stays empty
    return [int(sorted_keys[i]) if i < len(sorted_keys) else 2**64 for i in firsts]


def token_bucket_of(key: int, bounds: Sequence[int]) -> int:
    """Bucket of a document key given :func:`plan_token_buckets`' bounds."""
    return bisect.bisect_right(bounds, key)
