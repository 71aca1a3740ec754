"""``bertprep predict``: run a fine-tuned model on a file and write its predictions."""

from __future__ import annotations

import logging

import click

# Settings only (torch-free: --help imports no torch); the work is imported in the command's body.
from bertprep.bert_model.tasks.config import PredictConfig
from bertprep.cli.options import (
    batch_size_option,
    casing_options,
    column_options,
    device_option,
    input_file_option,
    max_seq_length_option,
    model_option,
    output_file_option,
    progress_option,
    squad_options,
)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@model_option(
    "model_dir",
    required=True,
    help="A 'bertprep finetune' run directory or its best/ directory (or an exported / Hugging Face "
    "fine-tuned BERT directory).",
)
@input_file_option(
    "File to predict, in the task's format (labels optional: with them, metrics are printed).", required=True
)
@output_file_option(
    "Where to write: GLUE 'index<TAB>prediction' TSV, SQuAD {id: answer} JSON (v2.0: plus NAME.null_odds.json), "
    "CoNLL TOKEN<TAB>TAG, or multiple-choice 'id,label' CSV.",
    required=True,
)
@column_options()
@max_seq_length_option()
@squad_options()
@click.option("--max-examples", type=click.IntRange(min=1), default=None, help="Predict only the first N examples.")
@batch_size_option(PredictConfig)
@casing_options()
@device_option(PredictConfig)
@progress_option(PredictConfig)
def predict(
    model_dir: str,
    input_file: str,
    output_file: str,
    max_examples: int | None,
    batch_size: int,
    do_lower_case: bool | None,
    strip_accents: bool | None,
    device: str,
    progress: bool,
    **task_overrides,
) -> None:
    """Predict labels (glue), answer spans (squad), tags (ner) or choices (multiple-choice) for INPUT with a
    fine-tuned model.

    \b
    Example:
      bertprep predict --model runs/sst2 --input glue/SST-2/test.tsv --output sst2-test.tsv
    """
    from bertprep.bert_model.tasks.predict import predict as run_predict

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = run_predict(
            PredictConfig(
                model_dir=model_dir,
                input_file=input_file,
                output_file=output_file,
                task_overrides=task_overrides,
                batch_size=batch_size,
                device=device,
                max_examples=max_examples,
                do_lower_case=do_lower_case,
                strip_accents=strip_accents,
                progress=progress,
            )
        )
    except (ValueError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    metrics = "" if result.metrics is None else "; " + ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
    click.echo(f"{result.examples} predictions written to {result.output_file}{metrics}")
