"""Training throughput: bertprep's BertForPreTraining vs transformers.BertForPreTraining, in one run.

Both models get the same config, the same weights (ours copied into transformers' by name), the same
batches, the same AdamW parameter groups and the same device; dropout is on (training mode). Each repeat
times ``--steps`` optimizer steps of each model (the order rotates between repeats); the figures are the
medians over ``--repeats``. Tokens are real (non-padding) tokens. transformers scores the MLM head on every
position (its ``labels`` are [batch, seq]); ours only on ``masked_lm_positions``, as the original BERT. A
third row, ``bertprep-all``, runs our model scoring every position too, to show how much of the difference
is that saving and how much the rest of the code. ``--bf16-row`` adds our model under bf16 autocast (on the
CPU too: ``--precision bf16`` of ``bertprep train``).

    python benchmarks/bench_train.py --preset mini --batch-size 32 --seq-length 128 --bf16-row
    python benchmarks/bench_train.py --shards shards/ --preset base --device cuda   # real batches, bf16

``transformers`` is needed here only (pip install transformers).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time

import numpy as np
import torch

from bertprep.bert_model.collate import collate
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.optim import create_optimizer
from bertprep.bert_model.precision import PRECISIONS, autocast_context
from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.loader import ShardLoader


def synthetic_batches(n: int, *, batch_size: int, seq_length: int, vocab_size: int, seed: int = 0):
    """Batches shaped like real ones: lengths seq_length/2..seq_length, 15% predictions (max 20 at 128)."""
    rng = np.random.default_rng(seed)
    max_predictions = max(1, round(seq_length * 0.15))
    batches = []
    for _ in range(n):
        rows = []
        for _ in range(batch_size):
            length = int(rng.integers(seq_length // 2, seq_length + 1))
            ids = rng.integers(5, vocab_size, length)
            a = int(rng.integers(1, length - 2))
            num = min(max_predictions, max(1, round(length * 0.15)))
            positions = np.sort(rng.choice(np.arange(1, length - 1), num, replace=False))
            rows.append(
                {
                    "input_ids": ids,
                    "token_type_ids": (np.arange(length) > a).astype(np.int64),
                    "masked_lm_positions": positions,
                    "masked_lm_ids": rng.integers(5, vocab_size, num),
                    "next_sentence_label": int(rng.integers(0, 2)),
                }
            )
        batches.append(collate(rows))
    return batches


def hf_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same batch in transformers' form: MLM labels [B, T] with -100 except at the masked positions."""
    labels = torch.full_like(batch["input_ids"], -100)
    real = batch["masked_lm_ids"] != -100
    rows = torch.arange(labels.size(0), device=labels.device)[:, None].expand_as(real)
    labels[rows[real], batch["masked_lm_positions"][real]] = batch["masked_lm_ids"][real]
    return {
        "input_ids": batch["input_ids"],
        "token_type_ids": batch["token_type_ids"],
        "attention_mask": batch["attention_mask"],
        "labels": labels,
        "next_sentence_label": batch["next_sentence_label"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="mini", help="model size (bert_model.model.PRESETS)")
    parser.add_argument("--vocab-size", type=int, default=30522, help="vocab size for synthetic batches")
    parser.add_argument("--shards", default=None, help="take batches from this shard directory instead")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-length", type=int, default=128, help="max length of synthetic instances")
    parser.add_argument("--steps", type=int, default=5, help="timed optimizer steps per model and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="autocast of the three rows (auto: bf16 on CUDA, fp32 on CPU)",
    )
    parser.add_argument(
        "--bf16-row",
        action="store_true",
        help="add a row 'bertprep-bf16': our model, same batches, bf16 autocast (on a CPU too)",
    )
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv))

    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.shards:
        ds = ShardDataset(args.shards, batch_size=args.batch_size, shuffle=False)
        it = iter(ShardLoader(ds))
        batches = [next(it) for _ in range(args.steps)]
        vocab_size = ds.info.vocab_size
    else:
        vocab_size = args.vocab_size
        batches = synthetic_batches(
            args.steps, batch_size=args.batch_size, seq_length=args.seq_length, vocab_size=vocab_size
        )
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    hf_batches = [hf_inputs(b) for b in batches]
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)

    torch.manual_seed(0)
    config = BertConfig.from_preset(args.preset, vocab_size=vocab_size)
    ours = BertForPreTraining(config).to(device).train()
    hf = (
        transformers.BertForPreTraining(transformers.BertConfig(**config.to_dict(), attn_implementation="sdpa"))
        .to(device)
        .train()
    )
    hf.load_state_dict(ours.state_dict())  # identical names: a one-to-one copy
    # Ours again, scoring every position like transformers: separates the model code from the MLM-head saving.
    ours_all = BertForPreTraining(config).to(device).train()
    ours_all.load_state_dict(ours.state_dict())
    all_batches = [
        {
            "input_ids": b["input_ids"],
            "token_type_ids": b["token_type_ids"],
            "attention_mask": b["attention_mask"],
            "masked_lm_ids": b["labels"],
            "next_sentence_label": b["next_sentence_label"],
        }
        for b in hf_batches
    ]
    models = {
        "bertprep": (ours, batches, create_optimizer(ours, learning_rate=1e-4)),
        "transformers": (hf, hf_batches, create_optimizer(hf, learning_rate=1e-4)),
        "bertprep-all": (ours_all, all_batches, create_optimizer(ours_all, learning_rate=1e-4)),
    }
    precision = dict.fromkeys(models, args.precision)
    if args.bf16_row:
        ours_bf16 = BertForPreTraining(config).to(device).train()
        ours_bf16.load_state_dict(ours.state_dict())
        models["bertprep-bf16"] = (ours_bf16, batches, create_optimizer(ours_bf16, learning_rate=1e-4))
        precision["bertprep-bf16"] = "bf16"

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run(name: str, n: int) -> float:
        model, inputs, optimizer = models[name]
        sync()
        t0 = time.perf_counter()
        for batch in inputs[:n]:
            with autocast_context(device, precision[name]):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - t0

    for name in models:  # warm-up: allocator, kernels, optimizer state
        run(name, 2)
    results: dict[str, list[float]] = {name: [] for name in models}
    for repeat in range(args.repeats):
        order = list(models)[repeat % len(models) :] + list(models)[: repeat % len(models)]  # rotate
        for name in order:
            results[name].append(tokens / run(name, args.steps))
    med = {name: statistics.median(v) for name, v in results.items()}
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, "
        f"{torch.get_num_threads()} threads), torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(
        f"model {args.preset}: {ours.num_parameters() / 1e6:.1f}M parameters; {args.steps} steps x "
        f"{args.batch_size} sequences, {tokens} real tokens per repeat, {args.repeats} repeats"
    )
    for name, values in results.items():
        print(f"  {name:13s} median {med[name]:10.0f} tokens/s  (repeats: {', '.join(f'{v:.0f}' for v in values)})")
    print(
        f"  ratio bertprep / transformers: {med['bertprep'] / med['transformers']:.2f}x "
        f"(MLM head on all positions, bertprep-all / transformers: "
        f"{med['bertprep-all'] / med['transformers']:.2f}x)"
    )
    if "bertprep-bf16" in med:
        print(f"  ratio bertprep-bf16 / bertprep ({args.precision}): {med['bertprep-bf16'] / med['bertprep']:.2f}x")


if __name__ == "__main__":
    main()
