"""``bertprep evaluate``: options -> ``GlueEvalConfig`` / ``SquadEvalConfig`` -> ``bert_model.evaluation.harness``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

# Imported here, not in the command bodies, so that a missing dependency (torch, scikit-learn, scipy) is
# reported by the command group's "needs the package ..." message.
from bertprep.bert_model.evaluation.glue_data import GLUE_FOLDERS
from bertprep.bert_model.evaluation.harness import (
    GlueEvalConfig,
    SquadEvalConfig,
    evaluate_glue,
    evaluate_squad,
    load_rows,
)
from bertprep.bert_model.evaluation.table import render_table
from bertprep.cli.options import evaluation_options, output_file_option
from bertprep.cli.run_lock import run_directory_lock
from bertprep.core.atomic import write_atomic

_ERRORS = (ValueError, FileNotFoundError, FileExistsError, FloatingPointError)


def _task_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    tasks = [t.strip().lower().replace("-", "") for t in value.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in GLUE_FOLDERS]
    if unknown or not tasks:
        raise click.BadParameter(f"{unknown[0] if unknown else value!r}: choose from {', '.join(GLUE_FOLDERS)}")
    return tasks


def _echo(line: str) -> None:
    click.echo(line, err=True)


def _run_evaluation(config_type: Callable[..., Any], run: Callable[..., dict], options: dict[str, Any]) -> None:
    """One evaluation command: ``config_type(**options)`` (a ValueError is a bad option), ``run(config)`` with
    progress lines on stderr (its errors end the command with their message) holding ``--output-dir``'s lock
    (``run_lock``: a second evaluation into the same folder is refused naming the first), then the summary's
    table and note."""
    try:
        config = config_type(**options)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    command = f"evaluate {click.get_current_context().info_name}"
    try:
        with run_directory_lock(config.output_dir, command):  # one evaluation at a time writes a folder
            summary = run(config, report=_echo)
    except _ERRORS as err:
        raise click.ClickException(str(err)) from None
    click.echo(render_table([summary]) + "\n" + summary["note"])


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
def evaluate() -> None:
    """Score a pre-trained encoder as the papers do: fine-tune it on GLUE or SQuAD over a grid of settings and
    seeds, and write the paper's table (glue.md / squad.md) and every run's numbers (glue.json / squad.json).

    \b
    Examples:
      bertprep evaluate glue -m runs/mini --data glue/ -o eval/mini
      bertprep evaluate glue -m runs/mini --data glue/ --random-init -o eval/mini-random
      bertprep evaluate table eval/mini eval/mini-random
      bertprep evaluate squad -m runs/mini --train-file train-v1.1.json --dev-file dev-v1.1.json -o eval/mini
    """


@evaluate.command(
    context_settings={"show_default": True}, short_help="Fine-tune and score a model on the GLUE dev sets (glue.md)."
)
@evaluation_options
@click.option(
    "--data",
    "data_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="GLUE folder: task folders (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI) with train.tsv and "
    "dev.tsv (MNLI: dev_matched.tsv, dev_mismatched.tsv), or datasets save_to_disk folders named cola, sst2, ...",
)
@click.option(
    "--tasks", callback=_task_list, default=None, help="Comma-separated tasks to run (default: all in --data)."
)
@click.option(
    "--small-tasks-from-mnli",
    is_flag=True,
    default=False,
    help="Start RTE, MRPC and STS-B from the fine-tuned MNLI model (RoBERTa's and ModernBERT's rule).",
)
def glue(**options) -> None:
    """Fine-tune and score a model on the GLUE dev sets (BERT's Table 1: batch 32, 3 epochs, best learning rate
    of 5e-5, 4e-5, 3e-5, 2e-5 on dev, by default). One progress line per run; Ctrl-C stops, and the same command
    continues."""
    _run_evaluation(GlueEvalConfig, evaluate_glue, options)


@evaluate.command(
    context_settings={"show_default": True}, short_help="Fine-tune and score a model on SQuAD v1.1 or v2.0 dev."
)
@evaluation_options
@click.option(
    "--train-file",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="SQuAD train JSON, of the dev file's version (a version field naming the other one is refused).",
)
@click.option(
    "--dev-file",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="SQuAD dev JSON (v1.1 or v2.0: its version field).",
)
def squad(**options) -> None:
    """Fine-tune and score a model on SQuAD v1.1 or v2.0 dev: exact match and F1 as the official scripts compute
    them (BERT: 3 epochs at 5e-5, batch 32 for v1.1; 2 epochs, batch 48 for v2.0)."""
    _run_evaluation(SquadEvalConfig, evaluate_squad, options)


@evaluate.command(short_help="Several evaluations side by side, the best per column in bold.")
@click.argument("output_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@output_file_option("Also write the table to this file.", "output", default=None)
def table(output_dirs: tuple[str, ...], output: str | None) -> None:
    """Put several evaluations side by side (their glue.json / squad.json), the best figure of each column in
    bold."""
    try:
        rows = load_rows(list(output_dirs))
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    text = render_table(rows) + (
        "\nFigures in percent (each folder's glue.md / squad.md says how they were chosen); bold: the best of "
        "each column; † an average over fewer tasks than another row's.\n"
    )
    if output:

        def write(p: str) -> None:
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)

        write_atomic(output, write)
    click.echo(text, nl=False)
