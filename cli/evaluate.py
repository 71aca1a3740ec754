"""``bertprep evaluate``: options -> ``GlueEvalConfig`` / ``SquadEvalConfig`` -> ``bert_model.evaluation.harness``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

# Settings and choices only (torch-free: --help imports no torch); the work is imported in the commands' bodies.
from bertprep.bert_model.evaluation.config import GlueEvalConfig, SquadEvalConfig
from bertprep.bert_model.evaluation.table import render_table
from bertprep.bert_model.retrieval.config import POOLINGS, RetrievalEvalConfig
from bertprep.bert_model.retrieval.data import squad_to_beir
from bertprep.cli.options import apply, evaluation_options, field_option, output_file_option
from bertprep.cli.run_lock import run_directory_lock
from bertprep.core.atomic import write_atomic

_ERRORS = (ValueError, FileNotFoundError, FileExistsError, FloatingPointError)


def _task_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    from bertprep.bert_model.evaluation.glue_data import GLUE_FOLDERS

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
      bertprep evaluate squad-to-beir -i dev-v1.1.json -o squad-beir
      bertprep evaluate retrieval -m runs/mini --data squad-beir --finetune -o eval/mini
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
    from bertprep.bert_model.evaluation.harness import evaluate_glue

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
    from bertprep.bert_model.evaluation.harness import evaluate_squad

    _run_evaluation(SquadEvalConfig, evaluate_squad, options)


def retrieval_options():
    """The options of ``evaluate retrieval``, one per :class:`RetrievalEvalConfig` field (its default; its docstring
    the help): what is scored, the fine-tuning (``--finetune`` and what it takes), and the encoding."""
    config = RetrievalEvalConfig
    scored = apply(
        field_option(config, "model", "-m", "--model", required=True, type=click.Path(exists=True)),
        field_option(
            config, "data_dir", "--data", "data_dir", required=True, type=click.Path(exists=True, file_okay=False)
        ),
        field_option(config, "output_dir", "-o", "--output-dir", required=True, type=click.Path(file_okay=False)),
        field_option(config, "split"),
        field_option(config, "max_queries", type=click.IntRange(min=1)),
        field_option(config, "name"),
    )
    fine_tuning = apply(
        field_option(config, "finetune", is_flag=True),
        field_option(config, "random_init", is_flag=True),
        field_option(config, "seeds", type=click.IntRange(min=1)),
        field_option(config, "seed", type=int),
        field_option(
            config,
            "learning_rate",
            "--lr",
            "--learning-rate",
            "learning_rate",
            type=click.FloatRange(min=0, min_open=True),
        ),
        field_option(config, "batch_size", type=click.IntRange(min=2)),
        field_option(config, "num_train_epochs", type=click.FloatRange(min=0, min_open=True)),
        field_option(config, "max_train_examples", type=click.IntRange(min=1)),
    )
    encoding = apply(
        field_option(config, "pooling", "--embedding-pooling", "pooling", type=click.Choice(list(POOLINGS))),
        field_option(config, "max_seq_length", type=click.IntRange(min=3)),
        field_option(config, "encode_batch_size", type=click.IntRange(min=1)),
        field_option(config, "device", help="'auto' (CUDA if available), 'cpu', 'cuda'."),
        field_option(config, "progress", "--progress/--no-progress"),
    )
    return apply(scored, fine_tuning, encoding)


@evaluate.command(
    context_settings={"show_default": True},
    short_help="Encode a BEIR folder's corpus and queries; nDCG@10, MRR@10, Recall@100 (retrieval.md).",
)
@retrieval_options()
def retrieval(**options) -> None:
    """Score an encoder on a BEIR folder: optionally fine-tune it on the train qrels, encode the corpus (batched,
    to a file on disk), search every query exactly (cosine) and report nDCG@10, MRR@10 and Recall@100 as
    pytrec_eval computes them. Ctrl-C stops; the same command continues."""  # fmt: skip
    from bertprep.bert_model.retrieval.evaluate import evaluate_retrieval

    _run_evaluation(RetrievalEvalConfig, evaluate_retrieval, options)


@evaluate.command("squad-to-beir", short_help="Make a BEIR retrieval folder from a SQuAD file.")
@click.option("-i", "--input", "squad_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="SQuAD v1.1 or v2.0 JSON file (v2.0's unanswerable questions are left out).")  # fmt: skip
@click.option("-o", "--output-dir", required=True, type=click.Path(file_okay=False), help="The BEIR folder to write.")
@click.option(
    "--test-fraction",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.5,
    help="Share of the articles whose questions are the test queries.",
)
@click.option(
    "--dev-fraction",
    type=click.FloatRange(0, 1, max_open=True),
    default=0.0,
    help="Share of the articles whose questions are the dev queries (qrels/dev.tsv).",
)
@click.option("--max-articles", type=click.IntRange(min=2), default=None, help="Use the file's first N articles.")
@click.option("--overwrite", is_flag=True, default=False, help="Replace an existing folder.")
def squad_to_beir_command(squad_file: str, output_dir: str, **options) -> None:
    """Turn a SQuAD file into a BEIR folder: every paragraph a document, every answerable question a query whose
    one relevant document is its paragraph. Articles (not questions) are split into train / dev / test, so no
    paragraph is judged in two splits; the split is a fixed function of the titles (blake2b)."""
    try:
        counts = squad_to_beir(squad_file, output_dir, **options)
    except (ValueError, FileExistsError) as err:
        raise click.ClickException(str(err)) from None
    splits = ", ".join(f"{s} {counts[s + '_queries']} queries ({counts[s + '_articles']} articles)"
                       for s in ("train", "dev", "test") if counts[s + "_articles"])  # fmt: skip
    click.echo(f"{output_dir}: {counts['documents']} documents; {splits}")


@evaluate.command(short_help="Several evaluations side by side, the best per column in bold.")
@click.argument("output_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@output_file_option("Also write the table to this file.", "output", default=None)
def table(output_dirs: tuple[str, ...], output: str | None) -> None:
    """Put several evaluations side by side (their glue.json / squad.json), the best figure of each column in
    bold."""
    from bertprep.bert_model.evaluation.harness import load_rows

    try:
        rows = load_rows(list(output_dirs))
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    text = render_table(rows) + (
        "\nFigures in percent (each folder's glue.md / squad.md / retrieval.md says how they were chosen); bold: "
        "the best of "
        "each column; † an average over fewer tasks than another row's.\n"
    )
    if output:

        def write(p: str) -> None:
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)

        write_atomic(output, write)
    click.echo(text, nl=False)
