"""What the masking schemes and a word segmenter cost (``--masking-scheme``, ``--word-segmenter``).

Three figures, in-process (no Beam), one core:

1. static masking in make-shards: instances/s of the per-bucket algorithm (``describe_instances`` +
   ``assemble_batches``) for each scheme, on one bucket of English Wikipedia (WikiExtractor sample);
2. dynamic masking in the trainer's loader: rows/s of ``mask_instance`` for each scheme on those rows;
3. a word segmenter in tokenization: sentences/s of ``SentenceEncoder.encode_flat`` alone and with the word
   starts of jieba (Chinese sample), i.e. what ``--word-segmenter jieba`` adds to make-shards' tokenize step.

Run from the repository root::

    python benchmarks/bench_masking_schemes.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bertprep.pipeline import readers
from bertprep.pipeline.config import InstanceConfig
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments
from bertprep.pipeline.instances.bucket_instances import describe_instances
from bertprep.pipeline.instances.bucket_rows import assemble_batches
from bertprep.pipeline.instances.common import VocabIds
from bertprep.pipeline.masking.config import MASKING_SCHEMES, MaskingConfig
from bertprep.pipeline.masking.rule import MaskingVocab, mask_instance
from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab
from bertprep.pipeline.text.word_segmentation import load_word_segmenter, word_starts


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data", help="The shared data directory.")
    parser.add_argument("--documents", type=int, default=60, help="Wikipedia articles in the bucket.")
    parser.add_argument("--dupe-factor", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = Path(args.data)
    print("command: python benchmarks/bench_masking_schemes.py " + " ".join(sys.argv[1:]))

    vocab = load_vocab(str(data / "vocab" / "bert-base-uncased-vocab.txt"))
    encoder = SentenceEncoder(vocab, True)
    ids = VocabIds(vocab)
    documents = []
    for doc in readers.read_documents(
        str(data / "wikipedia" / "wikiextractor-featured" / "AA" / "wiki_01"), "wikiextractor"
    ):
        flat, lengths = encoder.encode_flat(list(doc.sentences))
        documents.append((flat, lengths[lengths > 0]))
        if len(documents) >= args.documents:
            break
    bucket = BucketDocuments.from_arrays(documents)
    print(
        f"bucket: {len(documents)} articles, {len(bucket.ids):,} word pieces; max_seq_length 128, "
        f"dupe_factor {args.dupe_factor}, {args.repeats} repeats, medians"
    )

    print("\n1. static masking (make-shards, per bucket):")
    rows_by_scheme = {}
    for scheme in MASKING_SCHEMES:
        config = InstanceConfig(dupe_factor=args.dupe_factor, mlm=MaskingConfig(masking_scheme=scheme))

        def run():
            described = describe_instances(bucket, config, ids, random.Random(1))  # noqa: B023 (run() is timed and called in this same iteration)
            return list(assemble_batches(bucket, described, ids, vocab.size)), len(described)

        seconds = median_time(run, args.repeats)
        batches, n = run()
        rows_by_scheme[scheme] = [r for b in batches for r in b.column("input_ids").to_numpy(zero_copy_only=False)]
        print(f"  {scheme:10s} {n / seconds:9,.0f} instances/s  ({n:,} instances in {seconds:.2f} s)")

    print("\n2. dynamic masking (the trainer's loader, per row):")
    is_subword = np.array([t.startswith("##") for t in vocab.tokens])
    unmasked = [np.asarray(r, dtype=np.int64) for r in rows_by_scheme["token"][:3000]]
    for scheme in MASKING_SCHEMES:
        config = MaskingConfig(masking_scheme=scheme)
        masking_vocab = MaskingVocab(
            vocab_size=vocab.size,
            cls_token_id=ids.cls_id,
            sep_token_id=ids.sep_id,
            mask_token_id=ids.mask_id,
            is_subword=None if scheme == "token" else is_subword,
        )

        def run():
            rng = np.random.default_rng(0)
            for row in unmasked:
                mask_instance(row, config, masking_vocab, rng)  # noqa: B023 (run() is timed in this same iteration)

        seconds = median_time(run, args.repeats)
        print(
            f"  {scheme:10s} {len(unmasked) / seconds:9,.0f} rows/s  ({seconds / len(unmasked) * 1e6:.0f} us per row)"
        )

    print("\n3. tokenizing with a word segmenter (Chinese, jieba):")
    try:
        segmenter = load_word_segmenter("jieba")
    except ValueError as err:
        print(f"  skipped: {err}")
        return
    text = (data / "cjk" / "zh" / "us-constitution-zh-hans.txt").read_text(encoding="utf-8")
    sentences = [s for line in text.splitlines() for s in line.split("。") if s.strip()]
    zh = SentenceEncoder(vocab, True, strip_accents=False)
    plain = median_time(lambda: zh.encode_flat(sentences), args.repeats)

    def with_words():
        _flat, lengths = zh.encode_flat(sentences)
        word_starts(zh.tokenizer, sentences, segmenter, lengths)

    segmented = median_time(with_words, args.repeats)
    print(
        f"  {len(sentences):,} sentences: encode_flat {len(sentences) / plain:,.0f} sentences/s, with jieba "
        f"word starts {len(sentences) / segmented:,.0f} sentences/s ({segmented / plain:.1f}x the time)"
    )


if __name__ == "__main__":
    main()
