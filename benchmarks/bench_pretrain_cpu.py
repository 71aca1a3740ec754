#!/usr/bin/env python
"""From-scratch pre-training on a CPU: which settings leave the unigram plateau soonest.

Each setting is one ``bertprep train`` run from random initialisation with a budget in tokens (``--tokens``
millions: the schedule's warm-up and linear decay end there; ``--minutes`` can cap the wall time too),
evaluated on held-out shards ``--evaluations`` times. The judge is the held-out
``mlm_accuracy_at_mask``: the share of positions that were replaced by ``[MASK]`` whose original token is the
model's top guess (the frequency baseline, always guessing the commonest token, gets ~0.05 on this text).

Data (made once, under ``--data-dir``, when missing): WordPiece vocabs of 8k and 16k entries trained with
``bertprep build-vocab`` on the shared Wikipedia ``wiki_0*`` + Gutenberg text, Google's uncased 30,522 vocab,
and shards of that text (``--masking dynamic``: the trainer masks afresh at every epoch) at 128 and 64 tokens.
Held out: ``wiki_10`` (static masking, dupe 1), never trained on.

Prints a markdown table (best held-out accuracy at ``[MASK]``, the minute it was reached, tokens seen,
tokens/s) and writes the curves (held-out ``mlm_accuracy_at_mask`` against minutes) as a PNG and a JSON file.

    OMP_NUM_THREADS=1 python benchmarks/bench_pretrain_cpu.py -o runs/scratch-long --tokens 24 --minutes 62 \\
        --evaluations 24 --settings fast-v8k-seq64

(``benchmarks/pretraining_cpu_study.md`` has the results and the other commands.)

Set ``OMP_NUM_THREADS`` to the cores you give each run (runs are sequential). Wall time is only comparable
between runs made in turn on the same quiet machine: the page states the load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(os.environ.get("BERTPREP_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
TRAIN_INPUTS = [str(SHARED / "wikipedia/wikiextractor-featured/AA/wiki_0*"), str(SHARED / "gutenberg")]
HELDOUT_INPUT = str(SHARED / "wikipedia/wikiextractor-featured/AA/wiki_10")
GOOGLE_VOCAB = str(SHARED / "vocab/bert-base-uncased-vocab.txt")

NO_DROPOUT = ["--hidden-dropout-prob", "0", "--attention-probs-dropout-prob", "0"]

# name -> (vocab, max_seq_length, warm-up as a share of the run's steps, train options). Every run also gets
# --max-steps (from --tokens), --warmup-steps and the eval options. "fast" = the changes that help on a CPU:
# lr 1e-3, no dropout, no NSP loss, bf16 autocast.
FAST = ["--lr", "1e-3", "--nsp-loss-weight", "0", "--precision", "bf16", *NO_DROPOUT]
SETTINGS: dict[str, tuple[str, int, float, list[str]]] = {
    # The paper's recipe at the mini size: lr 1e-4, warm-up 1% of the steps, dropout 0.1, NSP on, fp32.
    "paper-like": ("30k", 128, 0.01, ["--preset", "mini", "--precision", "fp32"]),
    # The earlier CPU run (benchmarks/pretraining_from_scratch_cpu.md): lr 5e-4, bf16, otherwise the paper's.
    "lr5e-4": ("30k", 128, 0.1, ["--preset", "mini", "--lr", "5e-4", "--precision", "bf16"]),
    "fast-v30k": ("30k", 128, 0.1, ["--preset", "mini", *FAST]),
    "fast-v16k": ("16k", 128, 0.1, ["--preset", "mini", *FAST]),
    "fast-v8k": ("8k", 128, 0.1, ["--preset", "mini", *FAST]),
    "fast-v8k-seq64": ("8k", 64, 0.1, ["--preset", "mini", *FAST]),
    "fast-v8k-seq64-tiny": ("8k", 64, 0.1, ["--preset", "tiny", *FAST[2:], "--lr", "2e-3"]),
    # The same recipe on token-budget batches (--packing: 32 rows of 64 tokens filled first-fit).
    "fast-v8k-seq64-packed": ("8k", 64, 0.1, ["--preset", "mini", *FAST, "--packing"]),
    # ModernBERT mini (L7/H256/I384 GeGLU, pre-LayerNorm, rotary), packed, 30% dynamic masking (ModernBERT's
    # rate; held-out evaluation stays at the shards' 15%).
    "modern-v8k-seq64-packed": (
        "8k",
        64,
        0.1,
        ["--architecture", "modernbert", "--preset", "mini", *FAST, "--packing", "--masked-lm-prob", "0.3"],
    ),
    "modern-v8k-seq64-packed-lr2e-3": (
        "8k",
        64,
        0.1,
        [
            "--architecture",
            "modernbert",
            "--preset",
            "mini",
            *FAST[2:],
            "--lr",
            "2e-3",
            "--packing",
            "--masked-lm-prob",
            "0.3",
        ],
    ),
    # The same ModernBERT trained as ModernBERT was (Warner et al. 2024): StableAdamW (beta2 0.98), the warm-up /
    # stable / 1-sqrt decay schedule (decay over the last 20% of the steps), and a batch-size warm-up from 16 to
    # 32 sequences (2 micro-batches of 16) over the first 50k tokens.
    "modern-v8k-seq64-packed-wsd-stableadamw": (
        "8k",
        64,
        0.1,
        [
            "--architecture",
            "modernbert",
            "--preset",
            "mini",
            *FAST,
            "--packing",
            "--masked-lm-prob",
            "0.3",
            "--optimizer",
            "stable-adamw",
            "--adam-beta2",
            "0.98",
            "--lr-schedule",
            "wsd",
            "--decay-shape",
            "1-sqrt",
            "--decay-fraction",
            "0.2",
            "--batch-size",
            "16",
            "--gradient-accumulation-steps",
            "2",
            "--batch-size-start",
            "16",
            "--batch-size-warmup-tokens",
            "50000",
        ],
    ),
    "fast-v8k-seq64-batch128": (
        "8k",
        64,
        0.1,
        ["--preset", "mini", *FAST[2:], "--lr", "2e-3", "--gradient-accumulation-steps", "4"],
    ),
    "fast-v8k-seq64-nsp": ("8k", 64, 0.1, ["--preset", "mini", "--lr", "1e-3", "--precision", "bf16", *NO_DROPOUT]),
    "fast-v8k-seq64-dropout": (
        "8k",
        64,
        0.1,
        ["--preset", "mini", "--lr", "1e-3", "--nsp-loss-weight", "0", "--precision", "bf16"],
    ),
    "fast-v8k-seq64-fp32": (
        "8k",
        64,
        0.1,
        ["--preset", "mini", "--lr", "1e-3", "--nsp-loss-weight", "0", "--precision", "fp32", *NO_DROPOUT],
    ),
}


def _bertprep(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertprep.cli.main", *args]


def _run(cmd: list[str], log: Path) -> None:
    print("+", shlex.join(cmd), flush=True)
    with open(log, "a") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _train(cmd: list[str], log: Path, cpu_minutes: float | None) -> None:
    """Run a ``bertprep train`` command; with ``cpu_minutes``, stop it (SIGINT: it ends after the step, with a
    checkpoint) once its process has used that much CPU time."""
    if cpu_minutes is None:
        return _run(cmd, log)
    print("+", shlex.join(cmd), f"(stopped at {cpu_minutes:g} CPU minutes)", flush=True)
    with open(log, "a") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        stopped = False
        while proc.poll() is None:
            time.sleep(2)
            try:
                over = _cpu_seconds(proc.pid) >= cpu_minutes * 60
            except (OSError, IndexError, ValueError):  # ended meanwhile
                over = False
            if over and not stopped:
                proc.send_signal(signal.SIGINT)
                stopped = True
        if proc.returncode not in (0, 130) or (proc.returncode == 130 and not stopped):
            raise subprocess.CalledProcessError(proc.returncode, cmd)


def prepare_data(data_dir: Path, vocab: str, seq: int) -> tuple[Path, Path]:
    """Build (once) the vocab and the train / held-out shards a setting needs; returns their directories."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "prepare.log"
    if vocab == "30k":
        vocab_file = GOOGLE_VOCAB
    else:
        vocab_dir = data_dir / f"vocab{vocab}"
        if not (vocab_dir / "vocab.txt").exists():
            _run(
                _bertprep(
                    "build-vocab", *TRAIN_INPUTS, "-o", str(vocab_dir), "--vocab-size", str(int(vocab[:-1]) * 1000)
                ),
                log,
            )
        vocab_file = str(vocab_dir / "vocab.txt")
    predictions = str(seq * 20 // 128)
    train_dir, heldout_dir = data_dir / f"v{vocab}-s{seq}", data_dir / f"v{vocab}-s{seq}-heldout"
    common = [
        "--vocab",
        vocab_file,
        "--max-seq-length",
        str(seq),
        "--max-predictions-per-seq",
        predictions,
        "--overwrite",
    ]
    if not (train_dir / "manifest.json").exists():
        inputs = [a for path in TRAIN_INPUTS for a in ("-i", path)]
        _run(_bertprep("make-shards", *inputs, "-o", str(train_dir), "--masking", "dynamic", *common), log)
    if not (heldout_dir / "manifest.json").exists():
        _run(_bertprep("make-shards", "-i", HELDOUT_INPUT, "-o", str(heldout_dir), "--dupe-factor", "1", *common), log)
    return train_dir, heldout_dir


def _train_records(run_dir: Path) -> list[dict]:
    """The run's training lines, with ``elapsed_s`` and ``process_cpu_s`` summed over resumed processes (each
    process counts from its own start)."""
    records, offsets, last = [], {}, {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["split"] != "train":
            continue
        for key in ("elapsed_s", "process_cpu_s"):
            if key in record:
                if record[key] < last.get(key, 0.0):  # a resumed process: continue from the last one's total
                    offsets[key] = offsets.get(key, 0.0) + last[key]
                last[key] = record[key]
                record[key] += offsets.get(key, 0.0)
        records.append(record)
    return records


def cpu_seconds_used(run_dir: Path) -> float:
    """CPU seconds the run's training processes used up to their last logged step (0 when none)."""
    if not (run_dir / "metrics.jsonl").exists():
        return 0.0
    records = [r for r in _train_records(run_dir) if "process_cpu_s" in r]
    return records[-1]["process_cpu_s"] if records else 0.0


def curve(run_dir: Path) -> list[dict[str, float]]:
    """Held-out points of a run: step, minutes (of training, at the nearest logged train step; wall clock),
    cpu_minutes (CPU time of the training process there, when logged), tokens seen, mlm_accuracy_at_mask and
    mlm_loss. Times add up over resumed processes."""
    train = _train_records(run_dir)
    points = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    points = [p for p in points if p["split"] == "eval"]
    out = []
    for p in points:
        before = [t for t in train if t["step"] <= p["step"]] or train[:1]
        t = before[-1]
        out.append(
            {
                "step": p["step"],
                "minutes": t["elapsed_s"] / 60,
                "cpu_minutes": t["process_cpu_s"] / 60 if "process_cpu_s" in t else None,
                "tokens_seen": t["tokens_seen"],
                "mlm_accuracy_at_mask": p["mlm_accuracy_at_mask"],
                "mlm_loss": p["mlm_loss"],
            }
        )
    return out


def cpu_note(point: dict) -> str:
    """ ", CPU min N" when the point has the CPU time of the training process."""
    return f", CPU min {point['cpu_minutes']:.0f}" if point.get("cpu_minutes") is not None else ""


def curve_table(curves: dict[str, list[dict]], marks: list[float], x_axis: str) -> str:
    """Markdown: each run's held-out acc@[MASK] and tokens seen at its last evaluation at or before each mark
    (minutes, CPU minutes or millions of tokens, as ``x_axis``)."""

    def x(p):
        return p["tokens_seen"] / 1e6 if x_axis == "tokens" else p[x_axis]

    lines = [f"| {x_axis} | " + " | ".join(f"{m:g}" for m in marks) + " |", "|---|" + "---:|" * len(marks)]
    for name, points in curves.items():
        at = [[p for p in points if x(p) is not None and x(p) <= m][-1:] for m in marks]
        # A mark past the run's last evaluation (by more than a tenth) stays empty.
        acc = [
            f"{a[0]['mlm_accuracy_at_mask']:.3f}" if a and x(points[-1]) >= 0.9 * m else ""
            for a, m in zip(at, marks, strict=True)
        ]
        seen = [
            f"{a[0]['tokens_seen'] / 1e6:.1f}M" if a and x(points[-1]) >= 0.9 * m else ""
            for a, m in zip(at, marks, strict=True)
        ]
        lines.append(f"| `{name}` acc@[MASK] | " + " | ".join(acc) + " |")
        lines.append(f"| `{name}` tokens seen | " + " | ".join(seen) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output-dir", required=True, type=Path, help="Run directories go here.")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="Vocabs and shards (made when missing). Default: OUTPUT_DIR/data."
    )
    parser.add_argument(
        "--settings",
        nargs="+",
        default=list(SETTINGS),
        choices=list(SETTINGS),
        help="Settings to run, in this order (default: all).",
    )
    parser.add_argument(
        "--tokens",
        type=float,
        default=6.0,
        help="Training budget of each run in millions of tokens, counted as batch x max_seq_length "
        "per step: the schedule (warm-up, then linear decay to 0) ends there. "
        "Tokens, unlike minutes, do not depend on the machine's load.",
    )
    parser.add_argument("--minutes", type=float, default=None, help="Also stop a run after this many minutes.")
    parser.add_argument(
        "--cpu-minutes",
        type=float,
        default=None,
        help="Also stop a run once its training process has used this many minutes of CPU time (on a shared "
        "machine, what a run used; with OMP_NUM_THREADS=1, minutes of one core).",
    )
    parser.add_argument(
        "--x-axis",
        choices=["minutes", "cpu_minutes", "tokens"],
        default="minutes",
        help="What the curves plot the held-out accuracy against.",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="Micro-batch of every run.")
    parser.add_argument("--evaluations", type=int, default=12, help="Held-out evaluations per run.")
    parser.add_argument("--eval-batches", type=int, default=20, help="Held-out batches per evaluation.")
    parser.add_argument(
        "--only-finished", action="store_true", help="Do not train; table the runs (unfinished ones marked)."
    )
    parser.add_argument(
        "--at",
        type=float,
        nargs="*",
        default=[5, 10, 15, 20, 25, 30, 40, 50, 60],
        help="Also print the curves at these marks of --x-axis (the last evaluation at or before each).",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="Continue a stopped run from its checkpoint (bertprep train --resume: the same batches, bitwise) "
        "instead of starting it over; --cpu-minutes then counts the CPU time already used.",
    )
    parser.add_argument(
        "--markdown", type=Path, default=None, help="Also write the table (and the command) to this file."
    )
    args = parser.parse_args()
    data_dir = args.data_dir or args.output_dir / "data"
    args.output_dir.mkdir(parents=True, exist_ok=True)

    for name in args.settings:
        run_dir = args.output_dir / name
        if args.only_finished or (run_dir / "done").exists():
            continue
        vocab, seq, warmup, options = SETTINGS[name]
        train_dir, heldout_dir = prepare_data(data_dir, vocab, seq)
        accumulation = (
            int(options[options.index("--gradient-accumulation-steps") + 1])
            if "--gradient-accumulation-steps" in options
            else 1
        )
        # Rows are nearly full (short_seq_prob 0.1): budget steps from max_seq_length, stop on the real count.
        batch = int(options[options.index("--batch-size") + 1]) if "--batch-size" in options else args.batch_size
        steps = max(1, int(args.tokens * 1e6 / (batch * accumulation * seq)))
        evals = max(1, steps // args.evaluations)
        cmd = _bertprep(
            "train",
            "--shards",
            str(train_dir),
            "--eval-shards",
            str(heldout_dir),
            "-o",
            str(run_dir),
            "--batch-size",
            str(args.batch_size),
            "--max-steps",
            str(steps),
            "--warmup-steps",
            str(max(1, round(warmup * steps))),
            "--eval-every",
            str(evals),
            "--log-every",
            str(max(1, min(50, evals // 2))),
            "--eval-batches",
            str(args.eval_batches),
            "--save-every",
            "0",
            "--keep-last",
            "1",
            "--no-progress",
            *options,
        )
        if args.minutes:
            cmd += ["--max-time-minutes", str(args.minutes)]
        cpu_minutes = args.cpu_minutes
        if args.resume and (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir()):
            cmd += ["--resume", str(run_dir)]
            if cpu_minutes is not None:
                cpu_minutes -= cpu_seconds_used(run_dir) / 60
        else:
            if run_dir.exists():
                shutil.rmtree(run_dir)
            run_dir.mkdir(parents=True)
        with open(run_dir / "command.txt", "a") as f:
            f.write(shlex.join(cmd) + "\n")
        started = time.monotonic()
        if cpu_minutes is None or cpu_minutes > 0:
            _train(cmd, run_dir / "train.log", cpu_minutes)
        (run_dir / "done").write_text(f"{time.monotonic() - started:.1f}\n")

    rows, curves = [], {}
    for name in args.settings:
        run_dir = args.output_dir / name
        if not (run_dir / "metrics.jsonl").exists():
            continue
        points = curve(run_dir)
        if not points:
            continue
        curves[name] = points
        train = _train_records(run_dir)
        best = max(points, key=lambda p: p["mlm_accuracy_at_mask"])
        tok_s = sorted(r["tokens_per_s"] for r in train)[len(train) // 2]
        vocab, seq, warmup, options = SETTINGS[name]
        label = name if (run_dir / "done").exists() else f"{name} (unfinished)"
        rows.append(
            f"| {label} | {vocab} | {seq} | `{' '.join(options)}` | {points[-1]['step']:,} | "
            f"{points[-1]['tokens_seen'] / 1e6:.1f}M | {tok_s:,.0f} | {best['mlm_accuracy_at_mask']:.3f} "
            f"(min {best['minutes']:.0f}{cpu_note(best)}) | {points[-1]['mlm_accuracy_at_mask']:.3f} | "
            f"{points[-1]['mlm_loss']:.2f} |"
        )
    header = (
        "| setting | vocab | seq | options | steps | tokens | tokens/s (median) | best held-out acc@[MASK] "
        "(minute) | last acc@[MASK] | last held-out MLM loss |\n|---|---|---:|---|---:|---:|---:|---:|---:|---:|"
    )
    table = header + "\n" + "\n".join(rows)
    print(table)
    if args.at:
        print()
        print(curve_table(curves, args.at, args.x_axis))
    (args.output_dir / "curves.json").write_text(json.dumps(curves, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 5))
        for name, points in curves.items():
            xs = [p["tokens_seen"] / 1e6 if args.x_axis == "tokens" else p[args.x_axis] for p in points]
            ax.plot(xs, [p["mlm_accuracy_at_mask"] for p in points], marker=".", label=name)
        ax.axhline(0.15, color="grey", ls="--", lw=0.8)
        ax.set_xlabel(
            {
                "minutes": "minutes of training (wall clock)",
                "cpu_minutes": "CPU minutes of the training process (one torch thread)",
                "tokens": "tokens seen (millions)",
            }[args.x_axis]
        )
        ax.set_ylabel("held-out mlm_accuracy_at_mask")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.output_dir / "curves.png", dpi=100)
        print(f"curves: {args.output_dir / 'curves.png'}")
    except ImportError:
        print("matplotlib not installed: no curves.png (curves.json has the points)")
    if args.markdown:
        cmd = "python " + " ".join(shlex.quote(a) for a in sys.argv)
        args.markdown.write_text(
            f"<!-- generated by: {cmd} -->\n"
            f"Machine: {platform.processor() or platform.machine()}, "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
