"""Export a bertprep model as a Hugging Face ``transformers`` directory (``bertprep export``).

A pre-training checkpoint or run directory of ``bertprep train`` is exported as ``BertForPreTraining``; a
``bertprep finetune`` run or its ``best/`` directory as ``BertForSequenceClassification``,
``BertForQuestionAnswering`` or ``BertForTokenClassification`` with its labels. The files are
``hf_interop.write_hf_directory``'s: ``config.json``, ``model.safetensors`` and the tokenizer files of
``pipeline/vocab_files.py`` (the same ones ``build-vocab`` writes).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from bertprep.bert_model.hf_interop import (
    FINETUNE_FILE,
    ModelSource,
    build_model,
    load_model_source,
    path_is_within,
    resolve_do_lower_case,
    resolve_strip_accents_setting,
    write_hf_directory,
)
from bertprep.pipeline.vocab_files import read_vocab_file


class ExportError(ValueError):
    """An export that cannot be done as asked; ``option`` names the command-line option at fault."""

    def __init__(self, message: str, option: str):
        super().__init__(message)
        self.option = option


@dataclass
class ExportResult:
    path: str
    """The directory written (absolute)."""
    source: ModelSource
    """What was exported (``source.architecture`` names the transformers class)."""
    model: nn.Module
    """The model as built from the source (weights loaded strictly)."""


def export_model(model_dir: str, output_dir: str, *, vocab_file: str | None = None,
                 do_lower_case: bool | None = None, strip_accents: bool | None = None,
                 overwrite: bool = False) -> ExportResult:
    """Write ``model_dir``'s model as a ``transformers`` directory at ``output_dir``.

    Args:
        vocab_file: the model's ``vocab.txt`` (default: the one saved with it).
        do_lower_case: tokenizer casing to record; default: as recorded with the model (its shards' manifest
            or its fine-tuning settings), else guessed from the vocab.
        strip_accents: accent stripping to record in tokenizer.json and tokenizer_config.json; default: as
            recorded with the model, else the same as the casing (the original).
        overwrite: replace ``output_dir`` (the old one goes only once the new one is complete).

    Raises:
        ExportError: ``output_dir`` is, or holds, the model being exported (replacing it would delete the
            model), or there is no vocab.
        ValueError, FileNotFoundError: the model or vocab cannot be read or exported.
        FileExistsError: ``output_dir`` exists, is not empty and ``overwrite`` is false.
    """
    if path_is_within(model_dir, output_dir):
        raise ExportError(f"{output_dir} is (or holds) the model directory {model_dir}; export to another "
                          "directory", "--output-dir")
    source = load_model_source(model_dir)
    if path_is_within(source.path, output_dir):
        raise ExportError(f"{output_dir} holds the model {source.path}; export to another directory", "--output-dir")
    tokens = read_vocab_file(vocab_file) if vocab_file else source.vocab_tokens
    if tokens is None:
        raise ExportError(f"{model_dir} has no vocab.txt; pass --vocab", "--vocab")
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
    return ExportResult(path, source, model)


__all__ = ["ExportError", "ExportResult", "export_model"]
