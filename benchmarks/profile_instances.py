"""Where instance creation spends its time: the pipeline's array path vs the list-based reference.

Tokenizes the first N documents of the benchmark corpus (see ``bench_make_shards.py``) and, on the same
documents, times (CPU seconds, median of ``--repeats``):

- ``reference``: ``create_training_instances`` + ``instances_to_table`` of ``tests/reference/instances.py``
  (token lists, the readable restatement of the original generator);
- ``exact``: what make-shards runs by default, ``bucket_instances.describe_instances`` (the same random
  draws on sentence lengths) + ``assemble_batches`` (numpy); its output equals the reference's;
- ``fast``: ``--sampling fast``: describe without masking draws, bulk truncation, then
  ``fast_masking.mask_table``;
- ``shuffle only``: the exact mode's candidate shuffle alone (one per instance, same sizes): the part
  that exactness with the original's random stream costs.

Then the exact path under cProfile. Reproduce with::

    python benchmarks/profile_instances.py --documents 60 --dupe-factor 5
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_make_shards import build_corpus, data_dir  # noqa: E402
from bertprep.pipeline import readers  # noqa: E402
from bertprep.pipeline.config import InstanceConfig  # noqa: E402
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments  # noqa: E402
from bertprep.pipeline.instances.bucket_instances import describe_instances  # noqa: E402
from bertprep.pipeline.instances.bucket_rows import assemble_batches  # noqa: E402
from bertprep.pipeline.instances.common import InstanceStats, VocabIds  # noqa: E402
from bertprep.pipeline.masking.exact_draws import shuffle_first  # noqa: E402
from bertprep.pipeline.masking.fast import mask_table  # noqa: E402
from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests"))  # the list-based reference algorithm: tests/reference/
from reference.instances import create_training_instances, instances_to_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=60)
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
    bucket = BucketDocuments.from_lists(docs)
    ids = VocabIds(vocab)
    config = InstanceConfig(dupe_factor=args.dupe_factor)

    def reference() -> int:
        table = instances_to_table(create_training_instances(docs, config, ids, random.Random(12345)), vocab.size)
        return table.num_rows

    def exact() -> int:
        described = describe_instances(bucket, config, ids, random.Random(12345))
        return sum(b.num_rows for b in assemble_batches(bucket, described, ids, vocab.size))

    def fast() -> int:
        described = describe_instances(
            bucket, config, ids, random.Random(12345), InstanceStats(), mask=False, fast_truncation=True
        )
        table = pa.Table.from_batches(list(assemble_batches(bucket, described, ids, vocab.size)))
        mask_table(table, config.mlm, ids.mask_id, np.asarray(ids.random_ids), np.random.default_rng(0))
        return table.num_rows

    described = describe_instances(bucket, config, ids, random.Random(12345))
    sizes = (np.frombuffer(described.a_len, dtype=np.int32) + np.frombuffer(described.b_len, dtype=np.int32)).tolist()
    predictions = np.frombuffer(described.n_masked, dtype=np.int32).tolist()

    def shuffle_only() -> int:
        rng = random.Random(12345)
        for n, k in zip(sizes, predictions, strict=True):
            shuffle_first(n, k, rng)
        return len(sizes)

    n_instances = len(described)
    print(
        f"{args.documents} documents, dupe_factor {args.dupe_factor}: {n_instances:,} instances "
        f"(CPU time per instance, median of {args.repeats})"
    )
    results = {}
    for name, fn in (
        ("reference (lists + Arrow)", reference),
        ("exact (describe + assemble)", exact),
        ("fast (describe + assemble + mask_table)", fast),
        ("shuffle only", shuffle_only),
    ):
        times = []
        for _ in range(args.repeats):
            start = time.process_time()
            n = fn()
            times.append(time.process_time() - start)
        results[name] = statistics.median(times) / n * 1e6
        print(f"  {name:<42} {results[name]:6.1f} us per instance")
    base = results["reference (lists + Arrow)"]
    print(
        f"  exact: {base / results['exact (describe + assemble)']:.2f}x the reference; fast: "
        f"{base / results['fast (describe + assemble + mask_table)']:.2f}x; the shuffle is "
        f"{results['shuffle only'] / results['exact (describe + assemble)']:.0%} of exact"
    )

    profiler = cProfile.Profile()
    profiler.enable()
    exact()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(6)
    print("exact path under cProfile:")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:2500])


if __name__ == "__main__":
    main()
