"""Buckets sized by word pieces (the default) and the warm worker processes of the local runner.

What users rely on: the default cuts the corpus into buckets of about ``bucket_tokens`` word pieces whatever
the documents' sizes (a book and an article weigh what they cost), never so many that a bucket averages
fewer than ``MIN_DOCUMENTS_PER_BUCKET`` documents; every document is in exactly one bucket; the split is
seeded and deterministic; the ``bucket_size`` modes are unchanged; and the local runner with pre-started
workers writes the same bytes as Beam's own workers.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.instances import buckets
from bertprep.pipeline.masking.config import MaskingConfig
from conftest import FIXTURES

FIXTURES = FIXTURES / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")


def _corpus(n: int, seed: int = 0, books: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = random.Random(seed)
    keys = np.array([buckets.document_key(seed, f"file-{i % 7}", i) for i in range(n)], dtype=np.uint64)
    tokens = np.array([rng.randint(200, 4000) for _ in range(n)], dtype=np.int64)
    tokens[:books] = 300_000  # a few books among articles
    return keys, tokens


def _assign(keys, bounds):
    return np.array([buckets.token_bucket_of(int(k), bounds) for k in keys])


def test_token_buckets_hold_about_bucket_tokens_each():
    keys, tokens = _corpus(2000)
    target = 200_000
    bounds = buckets.plan_token_buckets(keys, tokens, target)
    assigned = _assign(keys, bounds)
    n = int(np.ceil(tokens.sum() / target))
    assert len(bounds) == n - 1 and sorted(bounds) == bounds
    sizes = np.bincount(assigned, weights=tokens, minlength=n)
    # each bucket within one document of the even share
    assert np.all(np.abs(sizes - tokens.sum() / n) <= tokens.max())
    assert set(assigned) == set(range(n))


def test_books_and_articles_balance_by_tokens_not_documents():
    keys, tokens = _corpus(400, books=4)  # 4 books of 300k word pieces, 396 articles of ~2k
    bounds = buckets.plan_token_buckets(keys, tokens, 400_000)
    assigned = _assign(keys, bounds)
    sizes = np.bincount(assigned, weights=tokens)
    assert len(sizes) == int(np.ceil(tokens.sum() / 400_000))
    assert sizes.max() <= tokens.sum() / len(sizes) + 300_000  # a book's length at most over the share
    docs = np.bincount(assigned)
    assert docs.min() < docs.max()  # a bucket with a book holds fewer documents


def test_bucket_count_is_capped_by_documents():
    keys, tokens = _corpus(100)
    bounds = buckets.plan_token_buckets(keys, tokens, 1)  # one word piece per bucket asked for
    assert len(bounds) + 1 == 100 // buckets.MIN_DOCUMENTS_PER_BUCKET
    assert buckets.plan_token_buckets(keys[:20], tokens[:20], 1) == []  # 20 documents: one bucket
    assert buckets.num_token_buckets(10_000, 3_563_553, 500_000) == 8  # the 16 MB bench corpus


def test_every_document_in_one_bucket_independent_of_order():
    keys, tokens = _corpus(500, seed=3)
    order = np.random.default_rng(0).permutation(len(keys))
    assert buckets.plan_token_buckets(keys, tokens, 50_000) == buckets.plan_token_buckets(
        keys[order], tokens[order], 50_000
    )
    assigned = _assign(keys, buckets.plan_token_buckets(keys, tokens, 50_000))
    assert len(assigned) == 500 and assigned.min() == 0


def test_a_document_longer_than_several_buckets_leaves_them_empty_not_wrong():
    keys = np.array([10, 20, 30, 40] + list(range(100, 100 + 60)), dtype=np.uint64)
    tokens = np.array([1, 1, 1_000_000, 1] + [1] * 60, dtype=np.int64)
    bounds = buckets.plan_token_buckets(keys, tokens, 100_000, min_documents=1)
    assigned = _assign(keys, bounds)
    assert len(bounds) == 10 and bounds == sorted(bounds)
    assert len(set(assigned)) < 11  # buckets the long document spans are empty
    assert all(assigned[i] <= assigned[j] for i, j in itertools.pairwise(np.argsort(keys)))


def test_document_mode_keys_are_unchanged():
    # bucket_size N keeps the key-mod-count rule (outputs made with --bucket-size are reproducible)
    import hashlib

    digest = hashlib.blake2b(b"12345:corpus/a.txt:7", digest_size=8).digest()
    assert buckets.stable_bucket(12345, "corpus/a.txt", 7, 5) == int.from_bytes(digest, "little") % 5
    assert buckets.stable_bucket(12345, "corpus/a.txt", 7, 1) == 0


def test_config_defaults_and_errors():
    config = ShardsConfig(inputs=("x",), vocab=VOCAB, output_dir="o")
    assert config.bucket_size is None and config.bucket_tokens == 500_000
    assert config.to_dict()["bucket_tokens"] == 500_000
    with pytest.raises(ValueError, match="--bucket-tokens must be >= 1"):
        ShardsConfig(inputs=("x",), vocab=VOCAB, output_dir="o", bucket_tokens=0)
    with pytest.raises(ValueError, match="--bucket-size must be >= 0"):
        ShardsConfig(inputs=("x",), vocab=VOCAB, output_dir="o", bucket_size=-1)


def _many_documents(tmp_path: Path, copies: int = 3) -> tuple[str, ...]:
    """The two fixture files' 30 documents, ``copies`` times over (so several token buckets of 16+ documents)."""
    paths = []
    tmp_path.mkdir(parents=True, exist_ok=True)
    for c in range(copies):
        for name in ("a.txt", "b.txt"):
            path = tmp_path / f"{c}-{name}"
            path.write_text((FIXTURES / name).read_text(encoding="utf-8"), encoding="utf-8")
            paths.append(str(path))
    return tuple(paths)


@pytest.mark.slow
def test_default_buckets_by_tokens_and_warm_workers_write_the_same_bytes(tmp_path):
    from bertprep.pipeline.beam import warm_workers
    from bertprep.pipeline.beam.run import run_make_shards

    inputs = _many_documents(tmp_path / "in")
    instance = InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10))

    def config(out):
        return ShardsConfig(
            inputs=inputs,
            vocab=VOCAB,
            output_dir=str(tmp_path / out),
            instance=instance,
            input_format="bert",
            bucket_tokens=5_000,
            num_shards=3,
        )

    one = run_make_shards(config("one"), ["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    pool = warm_workers.start(2)
    assert pool is not None
    try:
        two = run_make_shards(
            config("warm"), ["--direct_num_workers=2", "--direct_running_mode=multi_processing"], workers=pool
        )
    finally:
        pool.close()
    assert one["statistics"]["buckets"] == 90 // buckets.MIN_DOCUMENTS_PER_BUCKET  # capped by documents
    assert one["statistics"] == two["statistics"] and one["shards"] == two["shards"]
    for entry in one["shards"]:
        assert (tmp_path / "one" / entry["file"]).read_bytes() == (tmp_path / "warm" / entry["file"]).read_bytes()
    assert all(proc.poll() is not None for proc in pool._procs) or not pool._procs


@pytest.mark.parametrize("fork", [True, False])
def test_unclaimed_warm_workers_end_with_close(fork):
    from bertprep.pipeline.beam import warm_workers

    pool = warm_workers.WarmWorkerPool(2, fork=fork)  # forked (the CLI) or new interpreters (other threads)
    procs = list(pool._procs)
    assert len(procs) == 2 and all(p.poll() is None for p in procs)
    pool.close()
    assert all(p.poll() is not None for p in procs)
    pool.close()  # twice is fine
