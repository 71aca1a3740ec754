"""``bertprep fill-mask``: the top-k word pieces a pre-trained model puts at each [MASK]."""

from __future__ import annotations

import logging

import click

# Settings only (torch-free: --help imports no torch); the work is imported in the command's body.
from bertprep.bert_model.inference.config import FillMaskConfig
from bertprep.cli.options import (
    batch_size_option,
    casing_options,
    device_option,
    field_option,
    input_file_option,
    model_option,
)
from bertprep.core import strict_json


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.argument("texts", nargs=-1)
@model_option(
    "model_dir",
    required=True,
    help="A 'bertprep train' checkpoint or run directory (its latest checkpoint), a Hugging Face "
    "BertForPreTraining / BertForMaskedLM / RobertaForMaskedLM / ModernBertForMaskedLM directory (e.g. from "
    "'bertprep export'), or a Hub id (roberta-base; huggingface_hub's cache). A RoBERTa takes <mask> (or [MASK]) "
    "in the text.",
)
@input_file_option(
    "A UTF-8 file of sentences, one per line (blank lines skipped), each with one or more [MASK]; read after the "
    "TEXTS given on the command line.",
    default=None,
)
@field_option(FillMaskConfig, "top_k", type=click.IntRange(min=1))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    default=False,
    help="Print one JSON object per sentence (text, pieces, and per mask its position and "
    "[piece, probability] candidates) instead of the readable lines.",
)
@casing_options(strip_accents=False)
@batch_size_option(FillMaskConfig)
@device_option(FillMaskConfig)
def fill_mask(
    texts: tuple[str, ...],
    model_dir: str,
    input_file: str | None,
    top_k: int,
    as_json: bool,
    do_lower_case: bool | None,
    batch_size: int,
    device: str,
) -> None:
    """Show what a pre-trained model predicts at each [MASK] of TEXTS: the quickest look at what masked-LM
    pre-training taught it (a model still on the unigram plateau answers 'the , . of').

    \b
    Examples:
      bertprep fill-mask --model runs/mini "the capital of france is [MASK] ."
      bertprep fill-mask --model hf/my-bert --input probes.txt --top-k 10 --json
    """
    from bertprep.bert_model.inference.fill_mask import fill_mask_texts

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sentences = list(texts)
    if input_file:
        try:
            with open(input_file, encoding="utf-8") as f:
                sentences += [line.strip() for line in f if line.strip()]
        except UnicodeDecodeError as err:
            raise click.ClickException(f"{input_file}: not UTF-8 text ({err})") from None
    if not sentences:
        raise click.UsageError("give sentences with [MASK] as arguments or with --input FILE")
    config = FillMaskConfig(
        model_dir=model_dir, top_k=top_k, batch_size=batch_size, device=device, do_lower_case=do_lower_case
    )
    try:
        results = fill_mask_texts(config, sentences)
    except (ValueError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    for result in results:
        if as_json:
            click.echo(
                strict_json.dumps(
                    {
                        "text": result.text,
                        "pieces": result.pieces,
                        "masks": [{"position": m.position, "candidates": m.candidates} for m in result.masks],
                    },
                    ensure_ascii=False,
                )
            )
            continue
        click.echo(result.text)
        for i, mask in enumerate(result.masks, 1):
            best = "  ".join(f"{piece} {p:.3f}" for piece, p in mask.candidates)
            click.echo(f"  [MASK] {i}: {best}")
