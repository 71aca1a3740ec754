"""``bertprep extract-features``: options -> ``FeatureConfig`` ->
``bertprep.bert_model.inference.features.extract_features``."""

from __future__ import annotations

import logging

import click

# Settings and choices only (torch-free: --help imports no torch); the work is imported in the command's body.
from bertprep.bert_model.inference.config import DTYPES, POOLINGS, FeatureConfig
from bertprep.cli.options import (
    batch_size_option,
    casing_options,
    device_option,
    field_option,
    input_file_option,
    max_seq_length_option,
    model_option,
    output_file_option,
    overwrite_option,
    progress_option,
)
from bertprep.core.paths import WriteOverReadError, check_not_run_record, check_writes_apart


def _layers(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None  # the last min(4, L) layers (FeatureConfig)
    try:
        layers = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: give comma-separated integers, e.g. -1,-2,-3,-4", ctx, param) from None
    if not layers:
        raise click.BadParameter("give at least one layer", ctx, param)
    return layers


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@model_option(
    "model",
    required=True,
    help="A bertprep checkpoint or run directory, a 'bertprep finetune' output, or a Hugging Face BERT "
    "directory (its encoder is used; heads are ignored).",
)
@input_file_option(
    "UTF-8 text, one sequence per line; 'text_a ||| text_b' for a sentence pair. Blank lines are skipped (the "
    "'line' column keeps the 0-based line number).",
    required=True,
)
@output_file_option(
    "Arrow IPC file to write (read it with pyarrow.ipc.open_file); written under a temporary name and renamed "
    "when complete.",
    required=True,
)
@click.option(
    "--layers",
    default=None,
    callback=_layers,
    help="Comma-separated hidden states to write, one column layer_<i> each: 0 = embedding output, "
    "1..L = encoder layers, -1 = the last (Hugging Face output_hidden_states numbering). "
    "Default: the last min(4, L) layers (-1,-2,-3,-4 for a model of 4 or more layers).",
)
@field_option(FeatureConfig, "pooling", type=click.Choice(POOLINGS))
@max_seq_length_option()
@batch_size_option(FeatureConfig)
@field_option(FeatureConfig, "dtype", type=click.Choice(DTYPES))
@casing_options(strip_accents=False)
@device_option(FeatureConfig)
@overwrite_option()
@progress_option()
def extract_features_cmd(**options) -> None:
    """Write frozen BERT activations (the feature-based approach, paper section 5.3) for every line of a file.

    The counterpart of google-research/bert's extract_features.py: per word piece its text, its character
    offsets and the hidden states of the chosen layers, streamed to Arrow batch by batch (memory does not grow
    with the input).

    \b
    Example:
      bertprep extract-features --model hf/bert-base-uncased --input sentences.txt \\
          --output features.arrow --layers -1,-2,-3,-4 --pooling first-piece
    """
    from bertprep.bert_model.inference.features import extract_features

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = FeatureConfig(**options)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    try:
        check_writes_apart(
            [("--output", config.output_file)],
            [("--model", config.model), ("--input", config.input_file)],
            command="extract-features",
        )
        check_not_run_record([("--output", config.output_file)], "--model", config.model, command="extract-features")
    except WriteOverReadError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from None
    try:
        result = extract_features(config)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(
        f"{result.lines} lines ({result.pieces} word pieces, {result.truncated} cut) written to {result.output_file}"
    )
