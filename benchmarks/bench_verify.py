"""What checking bytes against their recorded sha256 costs: shards before training, checkpoints on resume.

* Shards: ``bertprep train`` reads every shard once to compare it with the manifest's sha256
  (``shard_info.verify_shard_files``; ``--no-verify`` skips it). Timed on ``--shards`` (e.g. the output of
  ``benchmarks/bench_make_shards.py`` or ``bertprep make-shards`` on ``../shared/data``), repeated, so the
  figure is for shards in the page cache; from disk it is one read of the shards at disk speed.
* Checkpoints: ``save_checkpoint`` hashes every file it wrote and ``load_intact_checkpoint`` hashes them again
  on ``--resume``. Timed for a randomly initialised model of ``--preset`` (with an AdamW state).

    python benchmarks/bench_verify.py --shards /tmp/shards --preset mini
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time

import torch

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.models.bert import PRESETS, BertConfig, BertForPreTraining
from bertprep.bert_model.optim import create_optimizer
from bertprep.bert_model.pretrain.shard_info import read_shard_info, verify_shard_files


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default=None, help="a finished shard directory (skipped when not given)")
    parser.add_argument("--preset", choices=list(PRESETS), default="mini", help="model size of the checkpoint")
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv))

    if args.shards:
        info = read_shard_info(args.shards)
        size = sum(os.path.getsize(f) for f in info.shard_files)
        verify_shard_files(info)  # warm the page cache
        seconds = _median_time(lambda: verify_shard_files(info), args.repeats)
        print(
            f"shards: {info.num_shards} files, {size / 1e6:.1f} MB, {info.num_rows:,} instances: verify "
            f"{seconds:.3f} s (median of {args.repeats}, page cache), {size / 1e9 / seconds:.2f} GB/s"
        )

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset(args.preset, vocab_size=args.vocab_size))
    optimizer = create_optimizer(model)
    for p in model.parameters():  # an optimizer state of the real size
        p.grad = torch.zeros_like(p)
    optimizer.step()
    with tempfile.TemporaryDirectory() as run:
        saved = []

        def save() -> None:
            saved.append(
                ckpt.save_checkpoint(run, len(saved) + 1, model=model, optimizer=optimizer, state={}, keep_last=1)
            )

        save_s = _median_time(save, args.repeats)
        path = saved[-1]
        size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
        hash_s = _median_time(lambda: [ckpt.file_digest(os.path.join(path, n)) for n in os.listdir(path)], args.repeats)
        verify_s = _median_time(lambda: ckpt.load_intact_checkpoint(run), args.repeats)
    print(
        f"checkpoint ({args.preset}, {model.num_parameters() / 1e6:.1f}M parameters, {size / 1e6:.0f} MB with "
        f"the optimizer state): save {save_s:.3f} s of which hashing {hash_s:.3f} s; verify on resume "
        f"{verify_s:.3f} s (medians of {args.repeats}, page cache)"
    )


if __name__ == "__main__":
    main()
