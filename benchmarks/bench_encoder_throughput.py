"""Encoder training throughput: real (non-padding) tokens/s of BERT vs ModernBERT, padded vs packed batches.

Shards are made with ``bertprep make-shards`` from the shared text (``--corpus``: by default the first file, 1 MB,
of the shared WikiExtractor featured articles; else the bundled demo corpus) and
Google's uncased vocab from the shared data folder (or ``--vocab``), with make-shards' default length
distribution (``--short-seq-prob 0.1``: one pass over a document in ten targets a shorter length; with the
document ends, about 10% of instances are shorter than ``max_seq_length`` on Wikipedia), once with
``--objective nsp`` and once with ``--objective none``, at each ``--seq-lengths``; ``--masking dynamic``, so the
trainer masks BERT at the shards' 15% and ModernBERT at 30% (its recipe). For each shard set, architecture
and layout, steps of ``--batch-size`` = ``--tokens-per-step // seq`` (``ShardDataset``, as ``bertprep train``
builds them: padded, that many instances padded to the batch's longest; packed, ``--packing``'s token budget,
that many rows of ``max_seq_length`` filled first-fit with as many instances as fit) go through
``PretrainingModel`` (the trainer's forward, MLM + NSP for BERT, MLM alone with sparse prediction for
ModernBERT), backward and an AdamW step; after ``--warmup`` steps, ``--steps`` steps are timed and the figure
is the median over ``--repeats`` of real (non-padding) tokens/s: the two layouts hold different numbers of
instances per step, so tokens/s, not steps/s, is what compares. Batches are built before timing (the loader is
not measured); padded and packed alternate within each repeat.

Both architectures use their ``--preset`` (default ``mini``: BERT L4/H256/I1024, ModernBERT L7/H256/I384 GeGLU,
the same width; the parameter counts are printed). ModernBERT runs its exact SDPA path with a dense boolean
mask on the CPU (``attention.py``'s ``sdpa``: local layers do the full T x T work; on a GPU the varlen kernel would
not, see ``gpu_check.sh``).

    python benchmarks/bench_encoder_throughput.py                       # CPU, seq 128 and 512
    python benchmarks/bench_encoder_throughput.py --device cuda --tokens-per-step 32768 --steps 20 --precision bf16
"""

from __future__ import annotations

import argparse
import itertools
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from bertprep.bert_model.optim import create_optimizer
from bertprep.bert_model.precision import PRECISIONS, autocast_context
from bertprep.bert_model.pretrain.architectures import PretrainingModel, build_model, model_config_from_preset
from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.shard_info import read_shard_info
from bertprep.pipeline import demo_corpus_dir

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data")
SHARED_VOCAB = os.path.join(SHARED, "vocab", "bert-base-uncased-vocab.txt")
SHARED_WIKI = os.path.join(SHARED, "wikipedia", "wikiextractor-featured", "AA", "wiki_01")


def make_shards(out: str, corpus: str, vocab: str, seq_length: int, objective: str, short_seq_prob: float) -> str:
    """``bertprep make-shards`` of ``corpus`` (dynamic masking, one pass, ``--short-seq-prob`` as given)."""
    path = os.path.join(out, f"{objective}-{seq_length}-short{short_seq_prob}")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        cmd = [sys.executable, "-m", "bertprep.cli.main", "make-shards", "-i", corpus, "--vocab", vocab]
        cmd += ["-o", path, "--max-seq-length", str(seq_length), "--objective", objective, "--masking", "dynamic"]
        cmd += ["--dupe-factor", "1", "--num-shards", "1", "--short-seq-prob", str(short_seq_prob), "-q"]
        subprocess.run(cmd, check=True)
    return path


def instances_in(batch: dict) -> int:
    """Instances of a padded (one per row) or packed (``sequence_ids`` 0, 1, ... per row) batch."""
    if "sequence_ids" not in batch:
        return int(batch["input_ids"].shape[0])
    return int((batch["sequence_ids"].max(dim=1).values + 1).sum())


def batches(shards: str, batch_size: int, n: int, packing: bool, masked_lm_prob: float | None) -> list[dict]:
    ds = ShardDataset(
        shards, batch_size=batch_size, seed=0, shuffle_buffer_size=1000, packing=packing, masked_lm_prob=masked_lm_prob
    )
    out = []
    for batch, _ in itertools.islice(iter(ds), n):
        out.append({k: torch.from_numpy(v) for k, v in batch.items()})
    return out


def time_steps(model: torch.nn.Module, optimizer, data: list[dict], device, autocast, warmup: int) -> tuple[float, int]:
    """Seconds and real tokens of the steps after the first ``warmup`` ones."""
    tokens, start = 0, None
    for i, batch in enumerate(data):
        if i == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with autocast:
            out = model(**batch)
        out.training_loss(1.0).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup:
            tokens += int(batch["attention_mask"].sum())
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, tokens


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", default=SHARED_VOCAB, help="vocab.txt (default: the shared bert-base-uncased)")
    parser.add_argument(
        "--corpus",
        default=SHARED_WIKI if os.path.exists(SHARED_WIKI) else demo_corpus_dir(),
        help="make-shards input (default: the first file of the shared WikiExtractor featured articles, else the "
        "demo corpus)",
    )
    parser.add_argument("--short-seq-prob", type=float, default=0.1, help="make-shards' (default: its own, 0.1)")
    parser.add_argument("--work-dir", default=None, help="where the shards go (default: a temporary directory)")
    parser.add_argument("--seq-lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--objectives", nargs="+", default=["nsp", "none"])
    parser.add_argument("--preset", default="mini")
    parser.add_argument(
        "--tokens-per-step",
        type=int,
        default=2048,
        help="padded: instances per step = this / seq length (16 at 128); packed: rows of seq length per step",
    )
    parser.add_argument("--steps", type=int, default=2, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv))
    device = torch.device(args.device)
    autocast = autocast_context(device, args.precision)
    work = args.work_dir or tempfile.mkdtemp(prefix="bench-encoder-")
    print(f"device {device}, torch threads {torch.get_num_threads()}, {args.tokens_per_step} // seq instances/step, "
          f"{args.steps} timed steps x {args.repeats} repeats (median)")  # fmt: skip
    header = (
        "| objective | seq | model | params | layout | instances/step | rows/step | real tokens/step | fill "
        "| real tokens/s | packed/padded |"
    )
    rows = [header, "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for objective, seq_length in itertools.product(args.objectives, args.seq_lengths):
        shards = make_shards(work, args.corpus, args.vocab, seq_length, objective, args.short_seq_prob)
        batch_size = max(1, args.tokens_per_step // seq_length)
        info = read_shard_info(shards)
        for architecture in ("bert", "modernbert"):
            config = model_config_from_preset(
                architecture, args.preset, vocab_size=info.vocab_size, special_token_ids=info.special_token_ids,
                overrides={},
            )  # fmt: skip
            rate = 0.3 if architecture == "modernbert" else None
            n = args.warmup + args.steps
            data = {packing: batches(shards, batch_size, n, packing, rate) for packing in (False, True)}
            speeds: dict[bool, list[float]] = {False: [], True: []}
            for r in range(args.repeats):  # padded and packed alternate, first one then the other, so that
                for packing in (False, True) if r % 2 == 0 else (True, False):  # load drift hits both alike
                    torch.manual_seed(0)
                    inner = build_model(config).to(device)
                    model = PretrainingModel(inner).train()
                    optimizer = create_optimizer(inner, learning_rate=1e-4)
                    seconds, tokens = time_steps(model, optimizer, data[packing], device, autocast, args.warmup)
                    speeds[packing].append(tokens / seconds)
            padded_speed = statistics.median(speeds[False])
            for packing in (False, True):
                speed = statistics.median(speeds[packing])
                timed = data[packing][args.warmup :]
                real = statistics.mean(int(b["attention_mask"].sum()) for b in timed)
                rows_per_step = statistics.mean(b["input_ids"].shape[0] for b in timed)
                instances = statistics.mean(instances_in(b) for b in timed)
                fill = sum(int(b["attention_mask"].sum()) for b in timed) / sum(b["input_ids"].numel() for b in timed)
                ratio = f"{speed / padded_speed:.2f}x" if packing else ""
                layout = "packed" if packing else "padded"
                rows.append(
                    f"| {objective} | {seq_length} | {architecture} {args.preset} | "
                    f"{inner.num_parameters() / 1e6:.1f}M | {layout} | {instances:.1f} | {rows_per_step:.1f} | "
                    f"{real:.0f} | {fill:.2f} | {speed:,.0f} | {ratio} |"
                )
                print(rows[-1], flush=True)
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
