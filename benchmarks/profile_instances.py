"""Where the exact reference algorithm spends its time (cProfile), and the fast mode beside it.

Tokenizes the first N documents of the benchmark corpus (see ``bench_make_shards.py``), then runs
``create_training_instances`` under cProfile in exact mode (``random.Random``, draw for draw the
original) and times exact vs fast (bulk truncation + vectorized masking) on the same documents::

    python benchmarks/profile_instances.py --documents 30 --dupe-factor 5
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_make_shards import build_corpus, data_dir  # noqa: E402

from bertprep.pipeline import readers  # noqa: E402
from bertprep.pipeline.config import InstanceConfig  # noqa: E402
from bertprep.pipeline.fast_masking import mask_table  # noqa: E402
from bertprep.pipeline.instances import InstanceStats, VocabIds, create_training_instances  # noqa: E402
from bertprep.pipeline.shards import instances_to_table  # noqa: E402
from bertprep.pipeline.tokenization import SentenceEncoder, load_vocab  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=30)
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("command: python benchmarks/profile_instances.py " + " ".join(sys.argv[1:]))
    vocab = load_vocab(str(data_dir() / "vocab" / "bert-base-uncased-vocab.txt"))
    encoder = SentenceEncoder(vocab, True)
    corpus = build_corpus(1, 4)
    docs = []
    for path in sorted(corpus.glob("*.txt")):
        docs += [d.sentences for d in readers.read_documents(str(path), "bert")]
    docs = encoder.encode_documents(docs[: args.documents])
    ids = VocabIds(vocab)
    config = InstanceConfig(dupe_factor=args.dupe_factor)

    profiler = cProfile.Profile()
    profiler.enable()
    instances = create_training_instances(docs, config, ids, random.Random(12345))
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(8)
    print(f"exact mode under cProfile, {len(instances):,} instances:")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:3000])

    def exact() -> int:
        return len(create_training_instances(docs, config, ids, random.Random(12345)))

    def fast() -> int:
        stats = InstanceStats()
        made = create_training_instances(docs, config, ids, random.Random(12345), stats, mask=False,
                                         fast_truncation=True)
        table = instances_to_table(made, vocab.size)
        mask_table(table, config, ids.mask_id, np.asarray(ids.random_ids), np.random.default_rng(0))
        return len(made)

    for name, fn in (("exact (instances only)", exact), ("fast (instances + Arrow + vectorized masking)", fast)):
        times = []
        for _ in range(args.repeats):
            start = time.process_time()
            n = fn()
            times.append(time.process_time() - start)
        best = sorted(times)[len(times) // 2]
        print(f"{name:<48} median {best:.2f} s CPU, {best / n * 1e6:.1f} us per instance ({n:,} instances)")


if __name__ == "__main__":
    main()
