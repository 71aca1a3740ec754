"""``make demo``: from the bundled demo books to a fine-tuned, exported model, one ``bertprep`` command at a time.

    python demo/demo.py [--out demo-out] [--steps 300] [--vocab-size 2000] ...

Each step runs the CLI in a subprocess (as a user would type it; its output goes to OUT/logs/STEP.log), prints
one line with its wall time and headline figure, and the run ends with a summary table. The steps:

1. ``build-vocab`` a small WordPiece vocab on the three books (copied into OUT/corpus: the held-out split
   hashes each input's path, so the copy's path and ``--eval-seed 5`` fix which book is held out);
2. ``make-shards`` with one book held out (``--eval-fraction 0.1 --eval-seed 5``, as docs/pretraining.md);
3. ``train`` a tiny model for ``--steps`` steps, evaluated on the held-out book (``--eval-shards``);
4. ``fill-mask`` on a few sentences;
5. ``make_book_task.py``: a sentence-classification task (which book is a sentence from?) as GLUE TSVs;
6. ``finetune --task glue`` the pre-trained model on it, against the majority-class baseline;
7. ``export`` to a Hugging Face directory, and ``check_export.py``: transformers gives the same logits.

Everything is local: no network, no ../shared data. The commands run with OMP_NUM_THREADS=1 unless it is set: a
tiny model gains little from more threads, and on a CPU shared with other work it loses.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEMO_DIR = Path(__file__).resolve().parent
MARKER = ".bertprep-demo"  # written in OUT, so that a rerun may clear it and nothing else
FILL_MASK_SENTENCES = [
    "the night was [MASK] and cold .",
    "he opened the [MASK] and went in .",
    "i will not [MASK] the king .",
]


@dataclass
class Step:
    name: str
    run: Callable[[argparse.Namespace], str]
    """Runs the step; returns its headline figure."""


class StepFailed(Exception):
    pass


def _run(args: argparse.Namespace, log_name: str, command: list[str]) -> str:
    """Run ``command`` in OUT (the paths it names are relative to OUT: the held-out split hashes the input
    paths as given, so ``corpus/...`` holds out the same book wherever OUT is); its stdout + stderr go to
    OUT/logs/LOG_NAME.log and stdout is returned."""
    command = [str(c) for c in command]
    env = {"OMP_NUM_THREADS": "1", **os.environ}  # one thread unless set: faster for a tiny model on a shared CPU
    result = subprocess.run(command, capture_output=True, text=True, cwd=args.out, env=env)
    log = args.out / "logs" / f"{log_name}.log"
    log.write_text(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}", encoding="utf-8")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise StepFailed(f"exit status {result.returncode} (log: {log})\n{tail}")
    return result.stdout


def _bertprep(args: argparse.Namespace, log_name: str, *cli_args: object) -> str:
    return _run(args, log_name, [sys.executable, "-m", "bertprep.cli.main", *map(str, cli_args)])


def build_vocab(args: argparse.Namespace) -> str:
    from bertprep.pipeline import demo_corpus_dir

    corpus = args.out / "corpus"
    corpus.mkdir()
    for book in sorted(Path(demo_corpus_dir()).glob("*.txt")):
        shutil.copy(book, corpus / book.name)
    _bertprep(args, "build-vocab", "build-vocab", "corpus", "-o", "vocab", "--vocab-size", args.vocab_size, "-q")
    size = sum(1 for _ in (args.out / "vocab" / "vocab.txt").open(encoding="utf-8"))
    return f"vocab of {size:,} word pieces from {len(list(corpus.glob('*.txt')))} books"


def make_shards(args: argparse.Namespace) -> str:
    _bertprep(
        args, "make-shards", "make-shards", "-i", "corpus", "--vocab", "vocab/vocab.txt",
        "-o", "shards", "--max-seq-length", args.max_seq_length, "--max-predictions-per-seq", 10,
        "--masking", "dynamic", "--eval-fraction", 0.1, "--eval-seed", 5, "-q",
    )  # fmt: skip
    train, held_out = (_instances(args.out / "shards"), _instances(args.out / "shards" / "eval"))
    return f"{train:,} training instances, {held_out:,} held-out (one book)"


def _instances(shard_dir: Path) -> int:
    manifest = json.loads((shard_dir / "manifest.json").read_text(encoding="utf-8"))
    return int(manifest["statistics"]["instances"])


def train(args: argparse.Namespace) -> str:
    eval_every = max(1, args.steps // 3)
    _bertprep(
        args, "train", "train", "--shards", "shards", "--eval-shards", "shards/eval",
        "-o", "pretrain", "--preset", "tiny", "--batch-size", 32, "--lr", 2e-3,
        "--max-steps", args.steps, "--warmup-steps", max(1, args.steps // 10), "--eval-every", eval_every,
        "--eval-batches", 8, "--hidden-dropout-prob", 0, "--attention-probs-dropout-prob", 0,
        "--nsp-loss-weight", 0, "--no-progress",
    )  # fmt: skip
    rows = [json.loads(line) for line in (args.out / "pretrain" / "metrics.jsonl").open(encoding="utf-8")]
    curve = [(r["step"], r["mlm_accuracy_at_mask"]) for r in rows if r.get("split") == "eval"]
    shown = " -> ".join(f"{acc:.3f}" for _, acc in curve)
    return f"held-out MLM accuracy at [MASK] {curve[-1][1]:.3f} (steps {', '.join(str(s) for s, _ in curve)}: {shown})"


def fill_mask(args: argparse.Namespace) -> str:
    out = _bertprep(args, "fill-mask", "fill-mask", "-m", "pretrain", "--json", "--top-k", 3, *FILL_MASK_SENTENCES)
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    best = [r["masks"][0]["candidates"][0][0] for r in results]
    return "; ".join(f"{s.replace('[MASK]', f'[{b}]')}" for s, b in zip(FILL_MASK_SENTENCES, best))


def book_task(args: argparse.Namespace) -> str:
    out = _run(
        args,
        "book-task",
        [sys.executable, DEMO_DIR / "make_book_task.py", "-o", "task", "--corpus", "corpus",
         "--sentences-per-book", str(args.sentences_per_book)],
    )  # fmt: skip
    return out.strip()


def finetune(args: argparse.Namespace) -> str:
    _bertprep(
        args, "finetune", "finetune", "--task", "glue", "-m", "pretrain",
        "--train-file", "task/train.tsv", "--eval-file", "task/dev.tsv",
        "--text-a-column", "sentence", "--label-column", "label", "--header", "-o", "finetune",
        "--max-seq-length", args.max_seq_length, "--batch-size", 32, "--learning-rate", args.finetune_lr,
        "--num-train-epochs", args.finetune_epochs, "--no-progress",
    )  # fmt: skip
    from make_book_task import majority_baseline, read_tsv

    train_rows, dev_rows = (read_tsv(args.out / "task" / f"{split}.tsv") for split in ("train", "dev"))
    _, baseline = majority_baseline(train_rows, dev_rows)
    results = json.loads((args.out / "finetune" / "results.json").read_text(encoding="utf-8"))
    accuracy = results["best_metrics"]["accuracy"]
    return f"dev accuracy {accuracy:.3f} (majority-class baseline {baseline:.3f}, {len(dev_rows)} sentences)"


def export(args: argparse.Namespace) -> str:
    _bertprep(args, "export", "export", "-m", "finetune/best", "-o", "hf")
    out = _run(
        args,
        "check-export",
        [sys.executable, DEMO_DIR / "check_export.py", "--model", "finetune/best",
         "--export", "hf", "--input", "task/dev.tsv"],
    )  # fmt: skip
    return out.strip()


STEPS = [
    Step("build-vocab", build_vocab),
    Step("make-shards", make_shards),
    Step("train", train),
    Step("fill-mask", fill_mask),
    Step("book task", book_task),
    Step("finetune", finetune),
    Step("export", export),
]


def _prepare(out: Path) -> None:
    """Start from an empty OUT; clear a previous demo's (the marker says it was one), never anything else."""
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():
            sys.exit(f"demo: {out} exists and is not a previous demo's output; choose another --out")
        shutil.rmtree(out)
    (out / "logs").mkdir(parents=True)
    (out / MARKER).write_text("written by demo/demo.py; the next run deletes this folder\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="Output folder (replaced if a demo's).")
    parser.add_argument("--vocab-size", type=int, default=2000, help="WordPiece vocab size.")
    parser.add_argument("--max-seq-length", type=int, default=64, help="Tokens per sequence (shards, finetune).")
    parser.add_argument("--steps", type=int, default=300, help="Pre-training steps (batch 32).")
    parser.add_argument("--sentences-per-book", type=int, default=1000, help="Book task: sentences per book.")
    parser.add_argument("--finetune-epochs", type=int, default=3, help="Fine-tuning epochs.")
    parser.add_argument("--finetune-lr", type=float, default=5e-4, help="Fine-tuning learning rate.")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(DEMO_DIR))  # make_book_task's helpers
    args.out = args.out.resolve()
    _prepare(args.out)
    done: list[tuple[str, float, str]] = []
    start = time.monotonic()
    for i, step in enumerate(STEPS, 1):
        t0 = time.monotonic()
        try:
            headline = step.run(args)
        except StepFailed as err:
            print(f"[{i}/{len(STEPS)}] {step.name}: FAILED, {err}", flush=True)
            return 1
        seconds = time.monotonic() - t0
        done.append((step.name, seconds, headline))
        print(f"[{i}/{len(STEPS)}] {step.name:<11} {seconds:6.1f} s  {headline}", flush=True)
    _print_summary(args, done, time.monotonic() - start)
    return 0


def _print_summary(args: argparse.Namespace, done: list[tuple[str, float, str]], total: float) -> None:
    print(f"\nSummary (all outputs in {args.out}/, each command's output in {args.out}/logs/):")
    for name, seconds, headline in done:
        print(f"  {name:<11} {seconds:6.1f} s  {headline}")
    print(f"  {'total':<11} {total:6.1f} s")
    print(
        "\nEvery step works end to end, but a tiny model trained for a few hundred steps on three books learns "
        "little:\nits fill-mask guesses are mostly common words, and the book task is learned mostly from "
        "spelling and\nrhythm. docs/pretraining.md ('Pre-training on a laptop') has the recipe that learns "
        "more (about an\nhour of one CPU core on a larger corpus)."
    )


if __name__ == "__main__":
    sys.exit(main())
