"""``bertprep evaluate retrieval``: score an encoder on a BEIR folder, resumably.

Per run (the model as it is, or one fine-tuning per seed on the folder's train qrels, ModernBERT's DPR setting):
``OUT/runs/<run>/`` holds ``model/`` (the fine-tuned model, ``train.train_bi_encoder``), ``corpus.npy`` (the
corpus vectors, float32 [documents, hidden], written in blocks of ``ENCODE_BLOCK`` documents into
``corpus.partial.npy`` with ``corpus.progress.json`` recording the blocks done, renamed when complete),
``run.trec`` (each query's best 100 documents, a TREC run file) and ``metrics.json`` (written last: a run with
it is finished). Stopped with Ctrl-C, the same command continues from the last finished step: a fine-tuning
that did not finish starts again (same seed, same model), the corpus from its last finished block, so the table
comes out the same. ``OUT/retrieval_plan.json`` records the settings; another command on the same folder with
other settings is refused once a run has finished; before that, the folder takes the new settings and its
unfinished runs are removed (``evaluation.plan.check_plan``, the rule of ``evaluate glue`` and ``squad``).

Search is exact (``encoder.exact_search``, cosine); metrics are ``scoring.mean_metrics`` (``pytrec_eval``).
``OUT/retrieval.json`` is a row of ``bertprep evaluate table`` (nDCG@10 / MRR@10 / Recall@100 in percent, the
median over seeds with their spread), with every run's figures and wall times; ``retrieval.md`` the table.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from bertprep.bert_model.evaluation.plan import check_plan, write_json
from bertprep.bert_model.evaluation.table import render_table
from bertprep.bert_model.hf.interop import load_model_source
from bertprep.bert_model.retrieval.config import RetrievalEvalConfig
from bertprep.bert_model.retrieval.data import BeirData, load_beir, qrels_path
from bertprep.bert_model.retrieval.encoder import RetrievalEncoder, exact_search
from bertprep.bert_model.retrieval.scoring import METRICS, mean_metrics, write_run
from bertprep.bert_model.retrieval.train import TRAIN_RECORD, RetrievalTrainConfig, train_bi_encoder
from bertprep.core import atomic
from bertprep.core.atomic import write_atomic

logger = logging.getLogger("bertprep.evaluate")

PLAN_FILE = "retrieval_plan.json"
RECORD_FILE = "metrics.json"
ENCODE_BLOCK = 2048
TOP_K = 100
#: The fields of :class:`RetrievalEvalConfig` that its fine-tuning takes as they are (``RetrievalTrainConfig``'s).
TRAIN_FIELDS = (
    "random_init",
    "learning_rate",
    "batch_size",
    "num_train_epochs",
    "max_train_examples",
    "progress",
    "device",
)
METRIC_NAMES = {"ndcg@10": "nDCG@10", "mrr@10": "MRR@10", "recall@100": "R@100"}


def _plan(config: RetrievalEvalConfig) -> dict[str, Any]:
    plan = {k: v for k, v in asdict(config).items() if k not in ("output_dir", "name", "progress", "device")}
    plan["model"], plan["data_dir"] = os.path.abspath(config.model), os.path.abspath(config.data_dir)
    return plan


def evaluate_retrieval(config: RetrievalEvalConfig, report: Callable[[str], None] = logger.info) -> dict[str, Any]:
    """Fine-tune (optionally), encode, search and score (module docstring); write ``retrieval.json`` and
    ``retrieval.md`` and return the summary (a row of ``evaluation.table.render_table``, with ``note``).

    The caller holds ``output_dir``'s lock (``bertprep evaluate retrieval`` does). Raises ValueError (bad BEIR
    folder, settings unlike the folder's earlier ones), FileNotFoundError (the model)."""
    data = load_beir(config.data_dir, config.split)
    if load_model_source(config.model).vocab_tokens is None:  # before anything is written
        raise ValueError(f"{config.model} has no vocab.txt or tokenizer.json beside its weights")
    if config.finetune:
        qrels_path(config.data_dir, "train")  # a missing train split fails now, not after encoding
    if config.max_queries:
        data.queries = dict(list(data.queries.items())[: config.max_queries])
        data.qrels = {q: data.qrels[q] for q in data.queries}
    # No lock of its own here: the command (cli/evaluate.py) holds --output-dir's lock around this call, and a
    # second lock in the same process would refuse the command's own run as "another run".
    os.makedirs(config.output_dir, exist_ok=True)
    check_plan(
        config.output_dir,
        _plan(config),
        plan_file=PLAN_FILE,
        record_names=(RECORD_FILE,),
        report=report,
        remove_unfinished=True,
    )
    records = []
    for run_name, seed in config.run_names():
        run_dir = os.path.join(config.output_dir, "runs", run_name)
        record = _finished(run_dir) or _run(config, data, run_dir, seed, report)
        report(f"{run_name}: " + ", ".join(f"{METRIC_NAMES[m]} {100 * record['metrics'][m]:.1f}" for m in METRICS))
        records.append(record)
    summary = _summary(config, data, records)
    _write_outputs(config.output_dir, summary)
    return summary


def _finished(run_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, RECORD_FILE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _run(
    config: RetrievalEvalConfig, data: BeirData, run_dir: str, seed: int | None, report: Callable[[str], None]
) -> dict[str, Any]:
    """One run: fine-tune (seed given), encode the corpus and queries, search, score; ``metrics.json`` last."""
    os.makedirs(run_dir, exist_ok=True)
    model_dir, train_seconds = config.model, None
    if seed is not None:
        model_dir = os.path.join(run_dir, "model")
        train_seconds = _train(config, model_dir, seed, report)
    encoder = RetrievalEncoder(
        model_dir, pooling=config.pooling, max_seq_length=config.max_seq_length, device=config.device
    )
    start = time.perf_counter()
    doc_vectors = _encode_corpus(encoder, list(data.corpus.values()), run_dir, config)
    query_vectors = encoder.encode(list(data.queries.values()), batch_size=config.encode_batch_size)
    indices, scores = exact_search(query_vectors, doc_vectors, TOP_K)
    encode_seconds = time.perf_counter() - start
    doc_ids = list(data.corpus)
    run = {
        q: {doc_ids[i]: float(s) for i, s in zip(indices[n], scores[n], strict=True)}
        for n, q in enumerate(data.queries)
    }
    write_atomic(os.path.join(run_dir, "run.trec"), lambda p: write_run(p, run))
    record = {
        "seed": seed,
        "metrics": mean_metrics(data.qrels, run),
        "queries": len(data.queries),
        "documents": len(doc_ids),
        "pooling": encoder.pooling,
        "max_seq_length": encoder.max_seq_length,
        "train_seconds": train_seconds,
        "encode_search_seconds": encode_seconds,
    }
    write_json(os.path.join(run_dir, RECORD_FILE), record)
    return record


def _train(config: RetrievalEvalConfig, model_dir: str, seed: int, report: Callable[[str], None]) -> float:
    """Fine-tune into ``model_dir`` unless a finished model is there; the training's wall seconds."""
    record = os.path.join(model_dir, TRAIN_RECORD)
    if not os.path.isfile(record):
        report(f"fine-tuning {config.model} on {config.data_dir} qrels/train.tsv, seed {seed}")
        train_bi_encoder(
            RetrievalTrainConfig(
                train_file=config.data_dir,
                output_dir=model_dir,
                init_from=config.model,
                seed=seed,
                pooling=config.pooling or RetrievalTrainConfig.pooling,
                max_seq_length=config.max_seq_length or RetrievalTrainConfig.max_seq_length,
                **{name: getattr(config, name) for name in TRAIN_FIELDS},
            )
        )
    with open(record, encoding="utf-8") as f:
        return float(json.load(f)["train_seconds"])


def _encode_corpus(
    encoder: RetrievalEncoder, texts: list[str], run_dir: str, config: RetrievalEvalConfig
) -> np.ndarray:
    """``corpus.npy`` (memory-mapped), encoded in blocks of ``ENCODE_BLOCK`` documents, continuing a stopped
    encoding from its last finished block (module docstring)."""
    final = os.path.join(run_dir, "corpus.npy")
    if os.path.isfile(final):
        return np.load(final, mmap_mode="r")
    partial, progress = os.path.join(run_dir, "corpus.partial.npy"), os.path.join(run_dir, "corpus.progress.json")
    done = 0
    if os.path.isfile(partial) and os.path.isfile(progress):
        with open(progress, encoding="utf-8") as f:
            done = int(json.load(f)["rows"])
        out = np.lib.format.open_memmap(partial, mode="r+")
    else:
        out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(len(texts), encoder.hidden_size))
    bar = tqdm(total=len(texts), initial=done, unit="doc", desc="encode corpus", disable=not config.progress)
    try:
        for start in range(done, len(texts), ENCODE_BLOCK):
            block = texts[start : start + ENCODE_BLOCK]
            out[start : start + len(block)] = encoder.encode(
                block, batch_size=config.encode_batch_size, on_batch=bar.update
            )
            out.flush()
            write_json(progress, {"rows": start + len(block)})
    finally:
        bar.close()
    del out
    atomic.fsync_file(partial)
    atomic.LocalFiles.rename(partial, final)  # (the finished matrix under its name: durable writes are atomic's)
    os.remove(progress)
    return np.load(final, mmap_mode="r")


def _summary(config: RetrievalEvalConfig, data: BeirData, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The table row (``render_table``'s keys) with every run's record."""
    dataset = os.path.basename(os.path.abspath(config.data_dir))
    values = [100 * statistics.median(r["metrics"][m] for r in records) for m in METRICS]
    spread = [100 * statistics.pstdev(r["metrics"][m] for r in records) for m in METRICS]
    column = {
        "name": f"{dataset} nDCG@10/MRR@10/R@100",
        "task": f"retrieval:{dataset}",
        "values": values,
        "spread": spread,
        "in_average": False,
    }
    seeds = [r["seed"] for r in records]
    how = f"the median over {len(records)} fine-tuning seeds (± the spread)" if len(records) > 1 else "one run"
    ft = "fine-tuned on its train qrels with in-batch negatives, " if config.finetune else ""
    note = (
        f"Retrieval on {dataset} ({config.split}: {len(data.queries)} queries, {len(data.corpus)} documents), "
        f"{ft}exact cosine search; nDCG@10, MRR@10 and Recall@100 in percent (pytrec_eval), {how}."
    )
    return {"label": config.label(), "columns": [column], "average": None, "seeds": seeds, "note": note,
            "model": os.path.abspath(config.model), "runs": records}  # fmt: skip


def _write_outputs(output_dir: str, summary: dict[str, Any]) -> None:
    write_json(os.path.join(output_dir, "retrieval.json"), summary)
    lines = [
        render_table([summary]),
        summary["note"],
        "",
        "| Run | nDCG@10 | MRR@10 | R@100 | train s | encode+search s |",
    ]
    lines.append("|---|---:|---:|---:|---:|---:|")
    for r in summary["runs"]:
        train = "-" if r["train_seconds"] is None else f"{r['train_seconds']:.0f}"
        figures = " | ".join(f"{100 * r['metrics'][m]:.1f}" for m in METRICS)
        lines.append(f"| {r['seed'] or 'as is'} | {figures} | {train} | {r['encode_search_seconds']:.0f} |")

    def write_md(p: str) -> None:
        with open(p, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    write_atomic(os.path.join(output_dir, "retrieval.md"), write_md)
