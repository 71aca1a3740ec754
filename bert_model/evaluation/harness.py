"""Run the sweep of an evaluation, resumably, and write its table: ``evaluate_glue`` and ``evaluate_squad``.

Every (task, setting, seed) is one ``bertprep finetune`` run (``tasks.finetune.finetune``) in
``OUT/runs/<task>/<setting>-seed<N>/`` (``grid.setting_slug``), evaluated on dev after each epoch, its best
checkpoint kept. When a run has finished, the harness writes ``glue_run.json`` / ``squad_run.json`` in its
folder (atomically, last): a run with that record is finished and is skipped by a later invocation; any other
run folder (killed, crashed) is run again from scratch (``finetune``'s ``overwrite``). ``OUT/evaluation.json``
records the model and the settings; an invocation with other ones on a folder where a run has finished is
refused (``plan.check_plan``), so the runs of one table share them. Seeds are ``LoopConfig.seed``, ``+1``, ...
(seed one is ``bertprep finetune``'s run).

MNLI's kept model is also scored on ``dev_mismatched.tsv`` (``tasks.predict.predict``). With
``small_tasks_from_mnli`` (RoBERTa's and ModernBERT's rule) RTE, MRPC and STS-B start from the MNLI model of
the best MNLI setting, same seed. Selection, medians and the table: ``table.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bertprep.bert_model.evaluation import table
from bertprep.bert_model.evaluation.config import EvalConfig, GlueEvalConfig, SquadEvalConfig
from bertprep.bert_model.evaluation.glue_data import (
    TaskFiles,
    check_task_files,
    export_datasets_task,
    find_glue_tasks,
)
from bertprep.bert_model.evaluation.grid import Grid, load_grid, setting_slug
from bertprep.bert_model.evaluation.plan import check_plan, write_json
from bertprep.bert_model.tasks.finetune import FinetuneConfig, finetune
from bertprep.bert_model.tasks.glue import GlueTask
from bertprep.bert_model.tasks.predict import PredictConfig, predict
from bertprep.bert_model.tasks.squad import SquadTask
from bertprep.bert_model.tasks.squad_data import squad_file_version
from bertprep.core.atomic import write_atomic

logger = logging.getLogger("bertprep.evaluate")

#: The small tasks RoBERTa and ModernBERT start from the MNLI model.
SMALL_TASKS = ("rte", "mrpc", "stsb")
PLAN_FILE = "evaluation.json"
#: The record a finished run writes in its folder, last (``plan.finished_runs``).
GLUE_RECORD, SQUAD_RECORD = "glue_run.json", "squad_run.json"
RUN_RECORDS = (GLUE_RECORD, SQUAD_RECORD)


@dataclass(frozen=True)
class RunSpec:
    """One fine-tuning run of the sweep."""

    task: str
    setting: dict[str, Any]
    seed: int
    run_dir: str

    @property
    def description(self) -> str:
        return f"{self.task} {setting_slug(self.setting, self.seed)}"


def _plan(config: EvalConfig, grid: Grid, kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """What ``evaluation.json`` records: every setting the runs' numbers depend on."""
    return {
        "kind": kind,
        "model": os.path.abspath(config.model),
        "random_init": config.random_init,
        "grid": grid.to_json(),
        "seeds": config.seeds,
        "max_train_examples": config.max_train_examples,
        "max_eval_examples": config.max_eval_examples,
        **data,
    }


def _specs(config: EvalConfig, grid: Grid, tasks: list[str]) -> list[RunSpec]:
    runs = os.path.join(config.output_dir, "runs")
    return [
        RunSpec(task, setting, seed, os.path.join(runs, task, setting_slug(setting, seed)))
        for task in tasks
        for setting in grid.points(task)
        for seed in config.seed_list
    ]


def _finished(spec: RunSpec, record_name: str) -> dict[str, Any] | None:
    """The run's record when it finished with these settings, else None (absent, unreadable or another run's)."""
    try:
        with open(os.path.join(spec.run_dir, record_name), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    same = (record.get("task"), record.get("setting"), record.get("seed")) == (spec.task, spec.setting, spec.seed)
    return record if same else None


def _finetune_config(config: EvalConfig, spec: RunSpec, train: str, dev: str, init_from: str) -> FinetuneConfig:
    values = {k: v for k, v in spec.setting.items() if k != "max_seq_length"}
    return FinetuneConfig(
        train_file=train,
        eval_file=dev,
        output_dir=spec.run_dir,
        init_from=init_from,
        random_init=config.random_init and init_from == config.model,
        seed=spec.seed,
        progress=False,
        overwrite=True,  # a broken run of this folder is replaced
        device=config.device,
        max_train_examples=config.max_train_examples,
        max_eval_examples=config.max_eval_examples,
        **values,
    )


def _run_finetune(ft_config: FinetuneConfig, task: Any) -> Any:
    """``finetune`` with its per-step and per-evaluation lines kept off the terminal (they are in the run's
    metrics.jsonl): the sweep prints one line per run."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return finetune(ft_config, task)


def _record(spec: RunSpec, result: Any, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "task": spec.task,
        "setting": spec.setting,
        "seed": spec.seed,
        "run_dir": spec.run_dir,
        "metrics": result.best_metrics,
        "best_step": result.best_step,
        "steps": result.steps,
        "train_seconds": round(result.train_seconds, 1),
        **extra,
    }


def _run_sweep(
    specs: list[RunSpec],
    record_name: str,
    run_one: Callable[[RunSpec], dict[str, Any]],
    metric_of: Callable[[str], str],
    report: Callable[[str], None],
    done_before: int = 0,
    total: int | None = None,
) -> list[dict[str, Any]]:
    """Run (or skip, when finished) every spec in order, one progress line each (numbered after
    ``done_before`` runs, out of ``total``); returns the records.

    An exception or a signal (Ctrl-C) stops the sweep with a line saying how far it got, then propagates: the
    run under way has no record and is redone by the next invocation."""
    records: list[dict[str, Any]] = []
    best: dict[str, float] = {}
    total = total or len(specs)
    under_way = ""  # "[i/total] task setting: " while a run is checked or trained
    try:
        for i, spec in enumerate(specs, done_before + 1):
            under_way = f"[{i}/{total}] {spec.description}: "
            record = _finished(spec, record_name)
            earlier = record is not None
            if record is None:
                t0 = time.monotonic()
                record = run_one(spec)
                record["seconds"] = round(time.monotonic() - t0, 1)
                write_json(os.path.join(spec.run_dir, record_name), record)
            records.append(record)
            under_way = ""
            metric = metric_of(spec.task)
            value = record["metrics"][metric]
            best[spec.task] = max(best.get(spec.task, value), value)
            how = "finished earlier" if earlier else f"{record['seconds']:.0f} s"
            report(
                f"[{i}/{total}] {spec.description}: dev {metric} {value:.4f} (best so far {best[spec.task]:.4f}; {how})"
            )
    except BaseException as err:
        report(
            f"{under_way}{'failed' if isinstance(err, Exception) else 'stopped'}; {done_before + len(records)} of "
            f"{total} runs are finished, the same command continues from there"
        )
        raise
    return records


def glue_metric(task: str) -> str:
    """The metric a GLUE task is selected and shown by (BERT's Table 1)."""
    return table.GLUE_COLUMNS[task][1]


def _glue_task(name: str, setting: dict[str, Any]) -> GlueTask:
    preset = GlueTask.from_preset(name)
    first = glue_metric(name)
    metrics = [first, *(m for m in preset.metrics if m != first)]
    return GlueTask.from_preset(name, metrics=metrics, max_seq_length=setting.get("max_seq_length"))


def evaluate_glue(config: GlueEvalConfig, report: Callable[[str], None] = logger.info) -> dict[str, Any]:
    """Fine-tune and score ``config.model`` on every GLUE task of ``config.data_dir`` over the grid and seeds;
    write ``glue.md`` and ``glue.json`` in ``config.output_dir`` (atomically) and return the summary.

    Raises (before any training, one line each):
        ValueError: no known task in the folder, a task folder without ``dev.tsv`` / ``train.tsv``, a file of
            the wrong layout, an unknown grid key, ``small_tasks_from_mnli`` without MNLI, or an output folder
            holding an evaluation with other settings.
        FileNotFoundError: the grid file does not exist.
    Whatever ``finetune`` raises during a run propagates (the finished runs stay).
    """
    grid = load_grid(config.grid, config.overrides)
    files = find_glue_tasks(config.data_dir, config.tasks, os.path.join(config.output_dir, "data"))
    by_task = {f.task: f for f in files}
    if config.small_tasks_from_mnli and "mnli" not in by_task and any(t in by_task for t in SMALL_TASKS):
        raise ValueError("--small-tasks-from-mnli needs MNLI among the tasks (RTE, MRPC, STS-B start from it)")
    plan = _plan(config, grid, "glue", {"data": os.path.abspath(config.data_dir)})
    plan["small_tasks_from_mnli"] = config.small_tasks_from_mnli
    check_plan(config.output_dir, plan, plan_file=PLAN_FILE, record_names=RUN_RECORDS, report=report)
    for f in files:
        if f.datasets_folder:
            export_datasets_task(f)
        check_task_files(f)
    specs = _specs(config, grid, list(by_task))
    mnli_best: dict[str, Any] = {}

    def run_one(spec: RunSpec) -> dict[str, Any]:
        return _glue_run(config, spec, by_task[spec.task], mnli_best)

    records: list[dict] = []
    for task in by_task:
        task_specs = [s for s in specs if s.task == task]
        done = _run_sweep(task_specs, GLUE_RECORD, run_one, glue_metric, report, len(records), len(specs))
        records += done
        if task == "mnli":
            mnli_best.update(table.select_setting(done, "accuracy"))
    return _write_glue_summary(config, grid, records)


def _glue_run(config: GlueEvalConfig, spec: RunSpec, files: TaskFiles, mnli_best: dict[str, Any]) -> dict[str, Any]:
    """One GLUE run: fine-tune, score MNLI's kept model on the mismatched dev set; the run's record."""
    init_from = config.model
    if config.small_tasks_from_mnli and spec.task in SMALL_TASKS:
        init_from = os.path.join(config.output_dir, "runs", "mnli", setting_slug(mnli_best["setting"], spec.seed))
        init_from = os.path.join(init_from, "best")
    ft_config = _finetune_config(config, spec, files.train, files.dev, init_from)
    result = _run_finetune(ft_config, _glue_task(spec.task, spec.setting))
    mismatched = None
    if files.dev_mismatched is not None:
        scored = predict(
            PredictConfig(
                model_dir=result.best_dir,
                input_file=files.dev_mismatched,
                output_file=os.path.join(spec.run_dir, "dev_mismatched_predictions.tsv"),
                max_examples=config.max_eval_examples,
                progress=False,
                device=config.device,
            )
        )
        mismatched = scored.metrics
    return _record(spec, result, {"mismatched": mismatched, "init_from": os.path.abspath(init_from)})


def _write_glue_summary(config: GlueEvalConfig, grid: Grid, records: list[dict[str, Any]]) -> dict[str, Any]:
    """``glue.json`` (every run, the selected settings, the row) and ``glue.md`` (the table and its note)."""
    selected = {}
    for task in table.GLUE_COLUMNS:
        task_records = [r for r in records if r["task"] == task]
        if task_records:
            selected[task] = table.select_setting(task_records, glue_metric(task))
    columns, average = table.glue_columns(selected)
    note = table.glue_note(config.seeds, os.path.basename(grid.source), config.small_tasks_from_mnli)
    summary = {
        "label": config.label(),
        "kind": "glue",
        "model": os.path.abspath(config.model),
        "random_init": config.random_init,
        "columns": columns,
        "average": average,
        "seeds": config.seed_list,
        "note": note,
        "selected": selected,
        "runs": records,
    }
    _write_outputs(config.output_dir, "glue", summary)
    return summary


def _write_outputs(output_dir: str, kind: str, summary: dict[str, Any]) -> None:
    text = f"# {'GLUE' if kind == 'glue' else 'SQuAD'} dev\n\n{table.render_table([summary])}\n{summary['note']}\n"
    write_json(os.path.join(output_dir, f"{kind}.json"), summary)

    def write_md(p: str) -> None:
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)

    write_atomic(os.path.join(output_dir, f"{kind}.md"), write_md)


def _squad_version(config: SquadEvalConfig) -> str:
    """The version of the dev file (its ``version`` field, v1.1 when absent).

    Raises:
        ValueError: a file is missing or not SQuAD JSON, or the training file's ``version`` field names the
            other version (a v1.1 model never answers "no answer", and would be scored on v2.0's questions).
    """
    versions = []
    for path in (config.train_file, config.dev_file):
        if not os.path.isfile(path):
            raise ValueError(f"{path}: no such file")
        with open(path, encoding="utf-8") as f:
            try:
                versions.append(squad_file_version(json.load(f)))
            except ValueError:
                raise ValueError(f"{path}: not a SQuAD JSON file") from None
    train_version, version = versions[0], versions[1] or "1.1"
    if train_version is not None and train_version != version:
        raise ValueError(
            f"{config.train_file} is SQuAD v{train_version} but {config.dev_file} is v{version} (their version "
            "fields); give a training and a dev file of one version"
        )
    return version


def evaluate_squad(config: SquadEvalConfig, report: Callable[[str], None] = logger.info) -> dict[str, Any]:
    """Fine-tune and score ``config.model`` on SQuAD (the dev file's version) over the grid (its
    ``[tasks."squad-v1.1"]`` / ``"squad-v2.0"`` table) and seeds; EM and F1 as the official scripts compute
    them (``tasks.squad_eval``); write ``squad.md`` and ``squad.json``. Raises as ``evaluate_glue`` does, and
    ``ValueError`` for a file that is not SQuAD JSON or a training file of the other version."""
    grid = load_grid(config.grid, config.overrides)
    version = _squad_version(config)
    key = f"squad-v{version}"
    if key not in table.SQUAD_COLUMNS:
        raise ValueError(f"{config.dev_file}: SQuAD version {version!r}; expected 1.1 or 2.0")
    data = {"train_file": os.path.abspath(config.train_file), "dev_file": os.path.abspath(config.dev_file)}
    plan = _plan(config, grid, "squad", data)
    check_plan(config.output_dir, plan, plan_file=PLAN_FILE, record_names=RUN_RECORDS, report=report)
    specs = _specs(config, grid, [key])

    def run_one(spec: RunSpec) -> dict[str, Any]:
        task = SquadTask(version=version, max_seq_length=spec.setting.get("max_seq_length", SquadTask.max_seq_length))
        ft_config = _finetune_config(config, spec, config.train_file, config.dev_file, config.model)
        return _record(spec, _run_finetune(ft_config, task), {"mismatched": None})

    records = _run_sweep(specs, SQUAD_RECORD, run_one, lambda _: "f1", report)
    selected = {key: table.select_setting(records, "f1")}
    spread = f"median over {config.seeds} seeds" if config.seeds > 1 else "one seed"
    summary = {
        "label": config.label(),
        "kind": "squad",
        "model": os.path.abspath(config.model),
        "random_init": config.random_init,
        "columns": table.squad_columns(selected),
        "average": None,
        "seeds": config.seed_list,
        "note": f"SQuAD dev, exact match / F1 as the official scripts compute them; the best setting of the grid "
        f"({os.path.basename(grid.source)}) by F1, {spread}.",
        "selected": selected,
        "runs": records,
    }
    _write_outputs(config.output_dir, "squad", summary)
    return summary


def load_rows(output_dirs: list[str]) -> list[dict[str, Any]]:
    """One table row per evaluation folder: its ``glue.json``, ``squad.json`` and ``retrieval.json`` (``bertprep
    evaluate retrieval``'s; any of them) merged.

    Raises ``ValueError`` for a folder with neither, or a file that is not such a summary (``read_summary``)."""
    rows = []
    for d in output_dirs:
        parts = []
        for kind in ("glue", "squad", "retrieval"):
            path = os.path.join(d, f"{kind}.json")
            if os.path.isfile(path):
                parts.append(read_summary(path))
        if not parts:
            raise ValueError(
                f"{d} has no glue.json or squad.json (nor retrieval.json): not an output folder of bertprep evaluate"
            )
        row = dict(parts[0])
        row["columns"] = [c for p in parts for c in p["columns"]]
        row["average"] = next((p["average"] for p in parts if p.get("average") is not None), None)
        rows.append(row)
    return rows


#: What a table row needs of a summary (``glue.json``, ``squad.json``), and of each of its columns.
_SUMMARY_KEYS = ("label", "columns")
_COLUMN_KEYS = ("name", "values", "spread", "in_average")


def read_summary(path: str) -> dict[str, Any]:
    """A ``glue.json`` / ``squad.json`` written by ``evaluate``, checked for what a table row needs.

    Raises:
        ValueError: the file is not JSON (truncated, say), or lacks ``label`` / ``columns`` or a column's
            ``name`` / ``values``; one line naming the file and what to do.
    """
    redo = "run its evaluate command again (finished runs are kept) or leave the folder out"
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not JSON ({err}); {redo}") from None
    missing = [k for k in _SUMMARY_KEYS if not isinstance(summary, dict) or k not in summary]
    if not missing and not isinstance(summary["columns"], list):
        missing = ["columns (a list)"]
    for c in summary.get("columns", []) if not missing else []:
        missing += [f"columns[].{k}" for k in _COLUMN_KEYS if not isinstance(c, dict) or k not in c][:1]
    if missing:
        raise ValueError(f"{path} is not an evaluate summary (no {missing[0]!r}); {redo}")
    return summary
