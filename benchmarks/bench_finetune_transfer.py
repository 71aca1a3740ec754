"""Does pre-training help? Fine-tune a checkpoint and the same model from random init, side by side.

For each task and seed, runs ``bertprep finetune`` twice with the same data, budget, seed and settings: once
from ``--checkpoint`` and once with ``--random-init`` (the checkpoint's config and vocab, the paper's
initialisation instead of its weights). Prints each run's best dev metric (the checkpoint that
``finetune`` keeps), the median over seeds and the difference. Runs whose ``results.json`` already exists in
``--out`` are read, not re-run (delete them or pass ``--rerun``), so an interrupted table can be finished.

The tasks read the data layout of ``../shared/data`` (``--data``, default ``$BERTPREP_DATA``):

    sst2    GLUE SST-2, the first --sst2-examples training sentences, 2 epochs, lr 1e-4, dev accuracy
    mrpc    GLUE MRPC, all 3,668 pairs, 5 epochs, lr 1e-4, dev F1 (and accuracy)
    wnut17  WNUT-17 train -> dev, 10 epochs, lr 5e-4, entity F1 (seqeval)
    squad   SQuAD v1.1 dev articles 0-29 -> articles 30-47 (the train file is not in the data), 128 tokens,
            doc stride 64, 2 epochs, lr 2e-4, official EM / F1

    python benchmarks/bench_finetune_transfer.py --checkpoint runs/mini/checkpoints/step-005000 -o runs/transfer
    python benchmarks/bench_finetune_transfer.py --checkpoint runs/mini -o runs/transfer --tasks sst2 mrpc \\
        --seeds 1 2 3 --sst2-examples 2000 --extra="--num-train-epochs 10"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def task_args(task: str, data: str, sst2_examples: int) -> list[str]:
    """``bertprep finetune`` options of one task (data files, budget, learning rate)."""
    if task == "sst2":
        return ["--task", "glue", "--glue-task", "sst2", "--train-file", f"{data}/glue/SST-2/train.tsv",
                "--eval-file", f"{data}/glue/SST-2/dev.tsv", "--max-train-examples", str(sst2_examples),
                "--num-train-epochs", "2", "--lr", "1e-4"]
    if task == "mrpc":
        return ["--task", "glue", "--glue-task", "mrpc", "--train-file", f"{data}/glue/MRPC/train.tsv",
                "--eval-file", f"{data}/glue/MRPC/dev.tsv", "--num-train-epochs", "5", "--lr", "1e-4"]
    if task == "wnut17":
        return ["--task", "ner", "--train-file", f"{data}/wnut17/wnut17train.conll",
                "--eval-file", f"{data}/wnut17/emerging.dev.conll", "--num-train-epochs", "10", "--lr", "5e-4"]
    if task == "squad":
        return ["--task", "squad", "--train-file", f"{data}/squad/dev-v1.1.json",
                "--eval-file", f"{data}/squad/dev-v1.1.json", "--train-articles", "0:30", "--eval-articles", "30:",
                "--max-seq-length", "128", "--doc-stride", "64", "--max-query-length", "32",
                "--num-train-epochs", "2", "--lr", "2e-4"]
    raise ValueError(f"unknown task {task!r}")


TASKS = ("sst2", "mrpc", "wnut17", "squad")


def run_one(args: argparse.Namespace, task: str, init: str, seed: int) -> dict:
    """Run (or read) one fine-tuning; returns its results.json plus ``wall_s`` when it ran here."""
    out = os.path.join(args.out, f"{task}-{init}-s{seed}")
    results = os.path.join(out, "results.json")
    if os.path.exists(results) and not args.rerun:
        with open(results) as f:
            return json.load(f)
    cmd = [sys.executable, "-m", "bertprep.cli.main", "finetune", "--init-from", args.checkpoint,
           "--seed", str(seed), "--batch-size", "32", "--no-progress", "--overwrite", "-o", out,
           *task_args(task, args.data, args.sst2_examples), *shlex.split(args.extra)]
    if init == "random":
        cmd.append("--random-init")
    print("  $ bertprep", shlex.join(cmd[3:]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    start = time.monotonic()
    with open(out + ".log", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{task} ({init}, seed {seed}) failed with exit code {proc.returncode}; see {out}.log")
    with open(results) as f:
        result = json.load(f)
    result["wall_s"] = time.monotonic() - start
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="bertprep checkpoint (step-* directory or run directory) or Hugging Face directory")
    parser.add_argument("-o", "--out", required=True, help="directory for the fine-tuning runs")
    parser.add_argument("--data", default=os.environ.get("BERTPREP_DATA", os.path.join(REPO, "..", "shared", "data")),
                        help="the shared data folder (default: $BERTPREP_DATA or ../shared/data)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=["sst2", "mrpc"],
                        help="tasks to run (see above); default: sst2 mrpc")
    parser.add_argument("--seeds", type=int, nargs="+", default=[12345],
                        help="fine-tuning seeds; each task runs once per seed and initialisation")
    parser.add_argument("--sst2-examples", type=int, default=20_000, help="SST-2 training sentences (of 67,349)")
    parser.add_argument("--extra", default="", help="more finetune options for every run, e.g. '--precision bf16'")
    parser.add_argument("--rerun", action="store_true", help="run again even where results.json exists")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv))
    if not os.path.isdir(args.data):
        raise SystemExit(f"data folder {args.data} not found: pass --data or set BERTPREP_DATA")

    rows = []
    for task in args.tasks:
        for init in ("pretrained", "random"):
            for seed in args.seeds:
                result = run_one(args, task, init, seed)
                rows.append((task, init, seed, result))

    print(f"\ncheckpoint {args.checkpoint}; best dev metric of each run (medians over seeds {args.seeds})")
    print(f"{'task':8s} {'metric':12s} {'pre-trained':>24s} {'random init':>24s} {'difference':>10s}")
    for task in args.tasks:
        results = {init: [r for t, i, _, r in rows if t == task and i == init] for init in ("pretrained", "random")}
        metric = results["pretrained"][0]["metric_for_best"]
        medians, cells = {}, {}
        for init, rs in results.items():
            values = [r["best_metrics"][metric] for r in rs]
            medians[init] = statistics.median(values)
            spread = f" ({', '.join(f'{v:.3f}' for v in values)})" if len(values) > 1 else ""
            cells[init] = f"{medians[init]:.3f}{spread}"
        print(f"{task:8s} {metric:12s} {cells['pretrained']:>24s} {cells['random']:>24s} "
              f"{medians['pretrained'] - medians['random']:>+10.3f}")
    walls = [r["wall_s"] for *_, r in rows if "wall_s" in r]
    if walls:
        print(f"wall time of the runs made now: {sum(walls) / 60:.1f} min")


if __name__ == "__main__":
    main()
