"""Export a bertprep model as a Hugging Face ``transformers`` directory (``bertprep export``).

A pre-training checkpoint or run directory of ``bertprep train`` is exported as ``BertForPreTraining`` (or
``ModernBertForMaskedLM``); a ``bertprep finetune`` run or its ``best/`` directory as
``BertForSequenceClassification``, ``BertForQuestionAnswering``, ``BertForTokenClassification`` or
``BertForMultipleChoice`` with its labels, or the ModernBERT class of the same task
(``ModernBertFor...``), which the matching ``transformers`` Auto class loads.

An exported directory (:func:`write_hf_directory`, also how ``finetune`` keeps its best model) is what
``transformers`` ``from_pretrained`` and ``AutoTokenizer`` read: ``config.json`` (``architectures``,
``id2label``/``label2id``, ``problem_type``), ``model.safetensors``, and the tokenizer files of
``core/vocab_files.py`` (``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json``: the same ones ``build-vocab`` writes). It is written without importing
``transformers``, into a temporary directory renamed into place at the end, so a directory that exists is
complete.

A model with a BPE / Unigram tokenizer (RoBERTa's, ModernBERT's: ``ModelSource.tokenizer``) keeps it: its
``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` are copied as they are. A RoBERTa
(``BertConfig.position_offset``) is written back as ``RobertaForMaskedLM`` or the ``RobertaFor...`` class of its
head: ``config.json`` of ``model_type`` ``roberta`` and the weights under RoBERTa's names (``interop.ROBERTA_KEYS``
read backwards), without the pooler and next-sentence head RoBERTa's class does not have.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, cast

import torch
from safetensors.torch import save_file
from torch import nn

from bertprep.bert_model.checkpoint import trainable_state_dict
from bertprep.bert_model.hf.interop import (
    FINETUNE_FILE,
    PRETRAINING_ARCHITECTURE,
    ROBERTA_CLASSIFIER_KEYS,
    ROBERTA_KEYS,
    ModelSource,
    build_model,
    load_model_source,
    resolve_do_lower_case,
)
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.heads import HEADS
from bertprep.bert_model.models.modernbert import MASKED_LM_ARCHITECTURE as MODERNBERT_MLM_ARCHITECTURE
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertForMaskedLM
from bertprep.bert_model.runtime import path_is_within, set_default_permissions
from bertprep.core import strict_json
from bertprep.core.atomic import fsync_file, replace_directory, replace_entries, staging_name, write_text_synced
from bertprep.core.normalization import resolve_strip_accents_setting
from bertprep.core.paths import WriteOverReadError, check_not_run_record, check_writes_apart
from bertprep.core.pretrained_tokenizer import PretrainedTokenizer
from bertprep.core.vocab_files import (
    SPECIAL_TOKENS,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    read_vocab_file,
    tokenizer_files,
)

#: What an export writes in its directory; ``--overwrite`` replaces (or removes) these and keeps any other file.
EXPORT_FILES = (
    "config.json",
    "model.safetensors",
    VOCAB_FILE,
    TOKENIZER_FILE,
    TOKENIZER_CONFIG_FILE,
    SPECIAL_TOKENS_MAP_FILE,
    FINETUNE_FILE,
)


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
    architecture: str
    """The transformers class written in ``config.json``'s ``architectures`` (``RobertaForMaskedLM`` for a
    RoBERTa-based run, whose ``source.architecture`` is bertprep's ``BertForPreTraining``)."""


def export_model(
    model_dir: str,
    output_dir: str,
    *,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    strip_accents: bool | None = None,
    overwrite: bool = False,
) -> ExportResult:
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
        raise ExportError(
            f"{output_dir} is (or holds) the model directory {model_dir}; export to another directory", "--output-dir"
        )
    source = load_model_source(model_dir)
    _check_writes_apart(model_dir, output_dir, source, vocab_file)
    tokens, tokenizer, casing, strip = _tokenizer_settings(model_dir, source, vocab_file, do_lower_case, strip_accents)
    model = build_model(source)
    extra = (
        {FINETUNE_FILE: {**source.finetune, "do_lower_case": casing, "strip_accents": strip}}
        if source.finetune
        else None
    )
    path = write_hf_directory(
        output_dir,
        model,
        vocab_tokens=tokens,
        do_lower_case=casing,
        strip_accents=strip,
        id2label=source.id2label,
        finetuning_task=source.hf_config.get("finetuning_task"),
        extra_json=extra,
        overwrite=overwrite,
        tokenizer=tokenizer,
    )
    return ExportResult(path, source, model, _architecture_of(model))


def _check_writes_apart(model_dir: str, output_dir: str, source: ModelSource, vocab_file: str | None) -> None:
    """Raise ``ExportError`` (naming the option) when an export to ``output_dir`` would write over the model it
    reads (``source.path``, ``model_dir``), the vocab, or a run's own record (``core.paths``)."""
    if path_is_within(source.path, output_dir):
        raise ExportError(f"{output_dir} holds the model {source.path}; export to another directory", "--output-dir")
    written = [("--output-dir", os.path.join(output_dir, name)) for name in EXPORT_FILES]
    try:
        check_writes_apart(
            written, [("MODEL_DIR", model_dir), ("MODEL_DIR", source.path), ("--vocab", vocab_file)], command="export"
        )
        check_not_run_record(written, "MODEL_DIR", model_dir, command="export")
    except WriteOverReadError as err:
        raise ExportError(str(err), err.option) from None


def _tokenizer_settings(
    model_dir: str,
    source: ModelSource,
    vocab_file: str | None,
    do_lower_case: bool | None,
    strip_accents: bool | None,
) -> tuple[list[str], PretrainedTokenizer | None, bool, bool | None]:
    """``(vocab tokens, tokenizer, do_lower_case, strip_accents)`` the export writes: the vocab of ``vocab_file``
    (then BERT's tokenizer files) or the model's own (and its BPE / Unigram tokenizer, if it has one), and the
    casing and accent settings given, else recorded with the model (its shards' manifest, or its fine-tuning
    settings), else resolved as ``export_model`` says. Raises ``ExportError`` (``--vocab``) without a vocab."""
    tokens = read_vocab_file(vocab_file) if vocab_file else source.vocab_tokens
    if tokens is None:
        raise ExportError(f"{model_dir} has no vocab.txt or tokenizer.json; pass --vocab", "--vocab")
    tokenizer = None if vocab_file else source.tokenizer
    recorded = source.do_lower_case
    if recorded is None and source.finetune is not None:
        recorded = source.finetune.get("do_lower_case")
    casing = resolve_do_lower_case(do_lower_case, recorded, tokens)
    recorded_strip = source.strip_accents
    if recorded_strip is None and source.finetune is not None:
        recorded_strip = source.finetune.get("strip_accents")
    strip = resolve_strip_accents_setting(strip_accents, recorded_strip, recorded, casing)
    return tokens, tokenizer, casing, strip


def _is_roberta(model: nn.Module) -> bool:
    return bool(getattr(model.config, "position_offset", 0))


def _architecture_of(model: nn.Module) -> str:
    if isinstance(model, BertForPreTraining):
        return "RobertaForMaskedLM" if _is_roberta(model) else PRETRAINING_ARCHITECTURE
    if isinstance(model, ModernBertForMaskedLM):
        return MODERNBERT_MLM_ARCHITECTURE
    architecture = getattr(model, "architecture", None)
    if architecture not in HEADS:
        raise ValueError(f"cannot export a {type(model).__name__}; export BertForPreTraining or a head")
    if _is_roberta(model):  # RobertaForSequenceClassification... (their heads are BERT's, renamed)
        return "Roberta" + architecture[len("Bert") :]
    return architecture


def hf_config_dict(
    model: nn.Module, *, id2label: dict[int, str] | None = None, finetuning_task: str | None = None
) -> dict[str, Any]:
    """``config.json`` contents for ``model``: the encoder config, ``architectures``, and for heads
    ``id2label``/``label2id`` (string keys, as Hugging Face writes them) and ``problem_type``."""
    architecture = _architecture_of(model)
    config = cast(BertConfig, model.config)
    out = config.to_hf_dict()
    out["architectures"] = [architecture]
    if architecture in (PRETRAINING_ARCHITECTURE, MODERNBERT_MLM_ARCHITECTURE, "RobertaForMaskedLM"):
        return out
    out["tie_word_embeddings"] = True  # harmless for heads (no decoder); keeps transformers' default
    if not isinstance(model.config, ModernBertConfig):  # (ModernBERT's is a float its heads use: kept)
        out["classifier_dropout"] = None
    num_labels = cast(int, model.num_labels)
    if id2label is None:
        id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
    if len(id2label) != num_labels:
        raise ValueError(f"id2label has {len(id2label)} entries but the model has {num_labels} outputs")
    out["id2label"] = {str(i): label for i, label in sorted(id2label.items())}
    out["label2id"] = {label: i for i, label in sorted(id2label.items())}
    if architecture in (
        "BertForSequenceClassification",
        "ModernBertForSequenceClassification",
        "RobertaForSequenceClassification",
    ):
        out["problem_type"] = "regression" if num_labels == 1 else "single_label_classification"
    if finetuning_task:
        out["finetuning_task"] = finetuning_task
    return out


def write_hf_directory(
    output_dir: str,
    model: nn.Module,
    *,
    vocab_tokens: list[str],
    do_lower_case: bool,
    strip_accents: bool | None = None,
    id2label: dict[int, str] | None = None,
    finetuning_task: str | None = None,
    extra_json: dict[str, dict[str, Any]] | None = None,
    overwrite: bool = False,
    tokenizer: PretrainedTokenizer | None = None,
) -> str:
    """Write ``model`` as a Hugging Face directory (see the module docstring) and return its path.

    Args:
        output_dir: target directory; it must not exist (or be empty) unless ``overwrite``.
        model: ``BertForPreTraining`` or one of the heads in ``heads.HEADS``.
        vocab_tokens: the vocab in id order; its length must equal ``model.config.vocab_size``.
        do_lower_case: tokenizer casing recorded in the tokenizer files.
        strip_accents: accent stripping recorded in them (None: the same as ``do_lower_case``); both files say
            it explicitly, so ``transformers`` tokenizes as bertprep did.
        id2label: label names of a classification head (default ``LABEL_i``).
        finetuning_task: written to ``config.json`` as Hugging Face does (e.g. ``"sst2"``).
        extra_json: more JSON files to write beside (name -> content), e.g. ``finetune.json``.
        tokenizer: a BPE / Unigram tokenizer whose files are written instead of BERT's (``vocab_tokens`` is then
            its tokens; ``do_lower_case`` / ``strip_accents`` are not used).
        overwrite: replace what an earlier export wrote there (:data:`EXPORT_FILES`); the user's other files
            stay. A directory holding only export files is swapped whole (the old one is removed only after the
            new one is complete); one with other files gets the new files moved in, the old ones moved aside
            first and removed last, ``config.json`` last in.
    Raises:
        FileExistsError: ``output_dir`` exists, is not empty and ``overwrite`` is False.
        ValueError: the vocab does not match the model, or the model is not exportable.
    """
    _check_exportable(model, vocab_tokens, tokenizer)
    output_dir = os.path.abspath(output_dir)
    if os.path.exists(output_dir) and os.listdir(output_dir) and not overwrite:
        raise FileExistsError(f"{output_dir} exists and is not empty; choose another directory or overwrite it")
    hf_config = hf_config_dict(model, id2label=id2label, finetuning_task=finetuning_task)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, staging_name("export"))
    os.makedirs(tmp)
    try:
        _write_weights(os.path.join(tmp, "model.safetensors"), model, hf_config["architectures"][0])
        write_text_synced(os.path.join(tmp, "config.json"), strict_json.dumps(hf_config, indent=2) + "\n")
        _write_tokenizer_files(tmp, model, vocab_tokens, do_lower_case, strip_accents, tokenizer)
        for name, content in (extra_json or {}).items():
            write_text_synced(os.path.join(tmp, name), strict_json.dumps(content, indent=2) + "\n")
        _move_into_place(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir


def _check_exportable(model: nn.Module, vocab_tokens: list[str], tokenizer: PretrainedTokenizer | None) -> None:
    """Raise ``ValueError`` when ``vocab_tokens`` has more entries than ``model``'s ``vocab_size`` (fewer is a
    padded embedding matrix, kept as the model has it) or, for BERT's tokenizer files, lacks a special token."""
    config = cast(BertConfig, model.config)
    if len(vocab_tokens) > config.vocab_size:  # fewer is a padded embedding matrix, kept as the model has it
        raise ValueError(
            f"the vocab has {len(vocab_tokens)} entries but the model's vocab_size is only "
            f"{config.vocab_size}; pass the vocab the model was trained with"
        )
    missing = [t for t in SPECIAL_TOKENS if t not in vocab_tokens]
    if missing and tokenizer is None:
        raise ValueError(f"the vocab lacks {', '.join(missing)}")


def _write_tokenizer_files(
    directory: str,
    model: nn.Module,
    vocab_tokens: list[str],
    do_lower_case: bool,
    strip_accents: bool | None,
    tokenizer: PretrainedTokenizer | None,
) -> None:
    """Write, synced, into ``directory`` the tokenizer files build-vocab writes (``vocab.txt``, ``tokenizer.json``,
    ``tokenizer_config.json``, ``special_tokens_map.json``; ``model_max_length`` the model's
    ``max_position_embeddings``), or ``tokenizer``'s own files as they are."""
    config = cast(BertConfig, model.config)
    files = (
        tokenizer.files
        if tokenizer is not None
        else tokenizer_files(
            vocab_tokens,
            do_lower_case,
            strip_accents=strip_accents,
            model_max_length=config.max_position_embeddings,
        )
    )
    for name, text in files.items():
        write_text_synced(os.path.join(directory, name), text)


def _move_into_place(staging: str, output_dir: str) -> None:
    """Move the complete export in ``staging`` to ``output_dir``: swapped whole when ``output_dir`` holds only
    :data:`EXPORT_FILES` (or is absent); else the export files are replaced and the others kept, ``config.json``
    moved in last (``core.atomic.replace_entries``)."""
    others = [n for n in os.listdir(output_dir) if n not in EXPORT_FILES] if os.path.isdir(output_dir) else []
    if others:  # the export files are replaced, the others kept; config.json moves in last
        old = [name for name in EXPORT_FILES if os.path.lexists(os.path.join(output_dir, name))]
        replace_entries(staging, output_dir, old, last="config.json")
    else:
        replace_directory(staging, output_dir)


def _write_weights(path: str, model: nn.Module, architecture: str) -> None:
    """``model.safetensors`` of ``model`` (float32; a RoBERTa under ``architecture``'s names), synced."""
    weights = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in trainable_state_dict(model).items()}
    if _is_roberta(model):
        weights = roberta_state_dict(weights, architecture)
    save_file(weights, path, metadata={"format": "pt"})
    fsync_file(path)
    set_default_permissions(path)  # safetensors writes 0600


def roberta_state_dict(weights: dict[str, torch.Tensor], architecture: str) -> dict[str, torch.Tensor]:
    """A RoBERTa's state dict under the names of ``architecture`` (``RobertaForMaskedLM``,
    ``RobertaForSequenceClassification``...): ``roberta.*``, ``lm_head.*`` (the decoder weight stays tied to the
    word embeddings); the sequence classifier's pooler and classifier as ``classifier.dense`` /
    ``classifier.out_proj``; without the pooler where RoBERTa's class has none (all but multiple choice) and
    without the next-sentence head."""
    back = {bert: roberta for roberta, bert in ROBERTA_KEYS.items()}
    if architecture == "RobertaForSequenceClassification":
        back = {bert: roberta for roberta, bert in ROBERTA_CLASSIFIER_KEYS.items()} | back
    keep_pooler = architecture in ("RobertaForMultipleChoice", "RobertaForSequenceClassification")
    out = {}
    for key, value in weights.items():
        if key.startswith("cls.seq_relationship.") or (key.startswith("bert.pooler.") and not keep_pooler):
            continue
        for prefix, roberta in back.items():
            if key.startswith(prefix):
                key = roberta + key[len(prefix) :]
                break
        out[key] = value
    return out


__all__ = ["EXPORT_FILES", "ExportError", "ExportResult", "export_model", "hf_config_dict", "write_hf_directory"]
