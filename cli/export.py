"""``bertprep export``: options -> :func:`bertprep.bert_model.hf.export.export_model`."""

from __future__ import annotations

import click

from bertprep.cli.options import (
    ModelPath,
    casing_options,
    model_option,
    model_vocab_option,
    output_dir_option,
    overwrite_option,
)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.argument("model_dir", required=False, metavar="[MODEL_DIR]", type=ModelPath())
@model_option(
    "model_option",
    default=None,
    help="The model to export, named as in the other commands (the same as MODEL_DIR; give one of the two).",
)
@output_dir_option(type=click.Path(file_okay=False))
@model_vocab_option()
@casing_options()
@overwrite_option()
def export(
    model_dir: str | None,
    model_option: str | None,
    output_dir: str,
    vocab: str | None,
    do_lower_case: bool | None,
    strip_accents: bool | None,
    overwrite: bool,
) -> None:
    """Export MODEL_DIR for Hugging Face transformers (from_pretrained / AutoTokenizer).

    MODEL_DIR is a pre-training checkpoint or run directory of 'bertprep train' (exported as
    BertForPreTraining), or a 'bertprep finetune' run or its best/ directory (exported as
    BertForSequenceClassification, BertForQuestionAnswering or BertForTokenClassification with its labels).

    \b
    Example:
      bertprep export -m runs/mini -o hf/mini     (or: bertprep export runs/mini -o hf/mini)
      python -c "from transformers import BertForPreTraining as M; M.from_pretrained('hf/mini')"
    """
    given = [path for path in (model_dir, model_option) if path is not None]
    if len(given) != 1:
        raise click.UsageError("give the model to export once: -m/--model DIR or MODEL_DIR")
    from bertprep.bert_model.hf.export import ExportError, export_model

    try:
        result = export_model(
            given[0],
            output_dir,
            vocab_file=vocab,
            do_lower_case=do_lower_case,
            strip_accents=strip_accents,
            overwrite=overwrite,
        )
    except ExportError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from None
    except (ValueError, OSError) as err:  # OSError: FileNotFoundError, FileExistsError, a full disk...
        raise click.ClickException(str(err)) from None
    config = result.source.config  # (the model's: build_model builds it with this config)
    click.echo(
        f"wrote {result.architecture} ({config.num_hidden_layers} layers, hidden {config.hidden_size}) to {result.path}"
    )
