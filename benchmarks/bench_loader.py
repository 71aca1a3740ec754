"""Loader throughput: collated, padded training batches per second from a shard directory.

For each ``--workers`` value, iterates ``--batches`` batches of a ``ShardLoader`` (shuffle buffer on, as in
training) after the first one (worker start-up is reported apart) and prints instances/s in total and per
worker (the main process counts as one worker with ``--workers 0``); medians over ``--repeats``. Without
``--shards`` it writes a synthetic directory first (tests/shard_factory.py, BERT-sized vocab and lengths).

    python benchmarks/bench_loader.py --workers 0 1 2
    python benchmarks/bench_loader.py --shards shards/ --batch-size 256 --workers 0 2 4 8
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time

from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.pretrain.shard_info import read_shard_info

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default=None, help="shard directory (default: a synthetic one)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=200, help="timed batches per run")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shuffle-buffer-size", type=int, default=10_000)
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv))

    tmp = None
    shards = args.shards
    if shards is None:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
        from shard_factory import write_shard_dir

        tmp = tempfile.TemporaryDirectory()
        shards = os.path.join(tmp.name, "shards")
        t0 = time.perf_counter()
        write_shard_dir(
            shards,
            num_shards=8,
            rows_per_shard=2500,
            vocab_size=30522,
            max_seq_length=128,
            max_predictions_per_seq=20,
            seed=0,
        )
        print(f"wrote synthetic shards (8 x 2,500 instances, seq 128) in {time.perf_counter() - t0:.1f} s")
    info = read_shard_info(shards)
    print(
        f"shards {shards}: {info.num_shards} files, {info.num_rows} instances, max_seq_length "
        f"{info.max_seq_length}; batch size {args.batch_size}, {args.batches} batches per run"
    )
    for workers in args.workers:
        rates, starts = [], []
        for repeat in range(args.repeats):
            ds = ShardDataset(
                shards,
                batch_size=args.batch_size,
                seed=repeat,
                num_workers=workers,
                shuffle_buffer_size=args.shuffle_buffer_size,
            )
            it = iter(ShardLoader(ds, num_workers=workers))
            t0 = time.perf_counter()
            next(it)
            t1 = time.perf_counter()
            for _ in range(args.batches):
                next(it)
            t2 = time.perf_counter()
            del it
            starts.append(t1 - t0)
            rates.append(args.batches * args.batch_size / (t2 - t1))
        rate = statistics.median(rates)
        print(
            f"  workers {workers}: {rate:9.0f} instances/s, {rate / max(1, workers):9.0f} per worker; "
            f"first batch after {statistics.median(starts) * 1000:.0f} ms"
        )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
