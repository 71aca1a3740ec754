"""``bertprep export``: write a Hugging Face ``transformers`` directory for a bertprep model."""

from __future__ import annotations

import click


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--output-dir", "-o", required=True, type=click.Path(file_okay=False),
              help="Directory to write (config.json, model.safetensors, vocab.txt, tokenizer.json, "
                   "tokenizer_config.json, special_tokens_map.json).")
@click.option("--vocab", type=click.Path(exists=True, dir_okay=False), default=None,
              help="vocab.txt of the model (default: the one saved with it).")
@click.option("--do-lower-case/--no-do-lower-case", default=None,
              help="Tokenizer casing to record. Default: as recorded with the model, else guessed from the vocab.")
@click.option("--strip-accents/--no-strip-accents", default=None,
              help="Accent stripping to record in tokenizer.json and tokenizer_config.json (transformers reads "
                   "it back). Default: as recorded with the model (its shards' manifest or tokenizer files), "
                   "else the same as the casing (the original).")
@click.option("--overwrite", is_flag=True, default=False, help="Replace --output-dir if it exists.")
def export(model_dir: str, output_dir: str, vocab: str | None, do_lower_case: bool | None,
           strip_accents: bool | None, overwrite: bool) -> None:
    """Export MODEL_DIR for Hugging Face transformers (from_pretrained / AutoTokenizer).

    MODEL_DIR is a pre-training checkpoint or run directory of 'bertprep train' (exported as
    BertForPreTraining), or a 'bertprep finetune' run or its best/ directory (exported as
    BertForSequenceClassification, BertForQuestionAnswering or BertForTokenClassification with its labels).

    \b
    Example:
      bertprep export runs/mini -o hf/mini
      python -c "from transformers import BertForPreTraining as M; M.from_pretrained('hf/mini')"
    """
    from bertprep.bert_model.hf_interop import (
        FINETUNE_FILE,
        build_model,
        load_model_source,
        path_is_within,
        resolve_do_lower_case,
        resolve_strip_accents_setting,
        write_hf_directory,
    )
    from bertprep.pipeline.vocab_files import read_vocab_file

    if path_is_within(model_dir, output_dir):  # replacing --output-dir would delete the model being exported
        raise click.BadParameter(f"{output_dir} is (or holds) the model directory {model_dir}; export to another "
                                 "directory", param_hint="--output-dir")
    try:
        source = load_model_source(model_dir)
        if path_is_within(source.path, output_dir):
            raise click.BadParameter(f"{output_dir} holds the model {source.path}; export to another directory",
                                     param_hint="--output-dir")
        tokens = read_vocab_file(vocab) if vocab else source.vocab_tokens
        if tokens is None:
            raise click.BadParameter(f"{model_dir} has no vocab.txt; pass --vocab", param_hint="--vocab")
        recorded = source.do_lower_case
        if recorded is None and source.finetune is not None:
            recorded = source.finetune.get("do_lower_case")
        casing = resolve_do_lower_case(do_lower_case, recorded, tokens)
        recorded_strip = source.strip_accents
        if recorded_strip is None and source.finetune is not None:
            recorded_strip = source.finetune.get("strip_accents")
        strip = resolve_strip_accents_setting(strip_accents, recorded_strip, recorded, casing)
        model = build_model(source)
        extra = ({FINETUNE_FILE: {**source.finetune, "do_lower_case": casing, "strip_accents": strip}}
                 if source.finetune else None)
        path = write_hf_directory(output_dir, model, vocab_tokens=tokens, do_lower_case=casing, strip_accents=strip,
                                  id2label=source.id2label, finetuning_task=source.hf_config.get("finetuning_task"),
                                  extra_json=extra, overwrite=overwrite)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"wrote {source.architecture} ({model.config.num_hidden_layers} layers, hidden "
               f"{model.config.hidden_size}) to {path}")
