"""Running a fine-tuned model: :func:`run_model` (batched outputs in input order, used by the fine-tuning
loop's evaluation too), :func:`load_finetuned` and :func:`predict` (``bertprep predict``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from bertprep.bert_model.collate import collate_features
from bertprep.bert_model.hf.interop import (
    FINETUNE_FILE,
    ModelSource,
    build_model,
    load_model_source,
    resolve_do_lower_case,
)
from bertprep.bert_model.loop_config import LoopConfig
from bertprep.bert_model.models.heads import load_full_weights
from bertprep.bert_model.precision import autocast_context
from bertprep.bert_model.runtime import resolve_device
from bertprep.bert_model.tasks.config import PredictConfig
from bertprep.bert_model.tasks.glue import GlueTask
from bertprep.bert_model.tasks.multiple_choice import MultipleChoiceTask
from bertprep.bert_model.tasks.ner import NerTask
from bertprep.bert_model.tasks.registry import TASKS, Task, has_label, task_architectures, task_from_json
from bertprep.bert_model.tasks.squad import SquadTask
from bertprep.core.atomic import write_atomic
from bertprep.core.normalization import resolve_strip_accents_setting
from bertprep.core.paths import check_not_run_record, check_writes_apart
from bertprep.core.pretrained_tokenizer import PretrainedTokenizer
from bertprep.core.vocab_files import WordPieceTokenizer


@torch.no_grad()
def run_model(
    model: nn.Module,
    features: Sequence[dict[str, Any]],
    *,
    batch_size: int,
    device: torch.device,
    pad_token_id: int = 0,
    progress: bool = False,
    precision: str = LoopConfig.precision,
) -> list[dict[str, np.ndarray]]:
    """Outputs of ``model`` for every feature (eval mode, no gradients), as float32 numpy arrays.

    Features are batched in order of length (less padding) and the outputs put back in input order; the
    per-token outputs (``model.per_token_outputs``) are cut to each feature's length. The model's training
    mode is restored afterwards.
    """
    was_training = model.training
    model.eval()
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    out: list[dict[str, np.ndarray]] = [None] * len(features)  # type: ignore[list-item]
    per_token = set(getattr(model, "per_token_outputs", ()))
    for k in tqdm(range(0, len(order), batch_size), disable=not progress, desc="eval", leave=False):
        index = order[k : k + batch_size]
        batch = collate_features(
            [{"input_ids": features[i]["input_ids"], "token_type_ids": features[i]["token_type_ids"]} for i in index],
            pad_token_id,
        )
        batch = {key: v.to(device) for key, v in batch.items()}
        with autocast_context(device, precision):
            result = model(**batch)
        fields = {
            f.name: getattr(result, f.name)
            for f in dataclasses.fields(result)
            if f.name != "loss" and getattr(result, f.name) is not None
        }
        arrays = {name: t.float().cpu().numpy() for name, t in fields.items()}
        for row, i in enumerate(index):
            n = len(features[i]["input_ids"])
            out[i] = {name: (a[row, :n] if name in per_token else a[row]) for name, a in arrays.items()}
    model.train(was_training)
    return out


#: The task of a fine-tuned head without ``finetune.json`` (a model fine-tuned elsewhere), BERT's or ModernBERT's.
_TASK_OF_HEAD = {
    name: task
    for task, names in (
        ("squad", ("BertForQuestionAnswering", "ModernBertForQuestionAnswering")),
        ("ner", ("BertForTokenClassification", "ModernBertForTokenClassification")),
        ("multiple-choice", ("BertForMultipleChoice", "ModernBertForMultipleChoice")),
        ("glue", ("BertForSequenceClassification", "ModernBertForSequenceClassification")),
    )
    for name in names
}


@dataclass
class PredictResult:
    output_file: str
    examples: int
    metrics: dict[str, float] | None
    """Metrics against the file's own labels, when every example has them."""


def load_finetuned(
    model_dir: str,
    *,
    task_overrides: dict[str, Any] | None = None,
    do_lower_case: bool | None = None,
    strip_accents: bool | None = None,
) -> tuple[nn.Module, Task, WordPieceTokenizer | PretrainedTokenizer]:
    """A fine-tuned model, its task and tokenizer, from a ``bertprep finetune`` output (``best/`` or the run
    directory) or a Hugging Face directory of a head.

    Without ``finetune.json`` (a model fine-tuned elsewhere) the task follows from ``architectures``: token
    classification and question answering take their defaults and the labels from ``id2label``; sequence
    classification needs the columns in ``task_overrides`` (``text_a_column``...). ``task_overrides``
    (values not None) replace task settings either way.

    Raises ``FileNotFoundError`` / ``ValueError`` for a directory that is not a fine-tuned head.
    """
    source = load_model_source(model_dir)
    overrides = {k: v for k, v in (task_overrides or {}).items() if v is not None}
    if source.finetune is not None:
        task = _task_from_finetune_json(model_dir, source.finetune, overrides)
        recorded = source.finetune.get("do_lower_case")
        recorded_strip = source.finetune.get("strip_accents", source.strip_accents)
    else:
        task = _task_from_architecture(model_dir, source, overrides)
        recorded = source.do_lower_case
        recorded_strip = source.strip_accents
    if source.architecture not in task_architectures(task):
        raise ValueError(
            f"{model_dir}: {FINETUNE_FILE} says task {task.name} but the weights are a {source.architecture}"
        )
    if source.vocab_tokens is None:
        raise ValueError(f"{model_dir} has no vocab.txt or tokenizer.json")
    model = _build_head(source, task)
    if source.tokenizer is not None:  # a BPE / Unigram tokenizer (RoBERTa's, ModernBERT's) normalises text itself
        return model, task, source.tokenizer
    lower = resolve_do_lower_case(do_lower_case, recorded, source.vocab_tokens)
    tokenizer = WordPieceTokenizer.from_tokens(
        source.vocab_tokens, lower, resolve_strip_accents_setting(strip_accents, recorded_strip, recorded, lower)
    )
    return model, task, tokenizer


def _task_from_finetune_json(model_dir: str, finetune: dict[str, Any], overrides: dict[str, Any]) -> Task:
    """The task recorded in a ``finetune.json`` (its settings, less the training/evaluation article and
    paragraph ranges, which do not apply to another file), with ``overrides`` replacing settings.

    Raises ``ValueError`` naming the directory for a ``finetune.json`` without a known ``task``."""
    if finetune.get("task") not in TASKS:
        raise ValueError(
            f"{model_dir}: {FINETUNE_FILE} names no task bertprep knows ({finetune.get('task')!r}; expected one "
            f"of {', '.join(TASKS)}): pass a directory that 'bertprep finetune' wrote"
        )
    values = {
        **finetune,
        "train_articles": None,
        "eval_articles": None,
        "train_paragraphs": None,
        "eval_paragraphs": None,
        **overrides,
    }
    return task_from_json(
        {k: v for k, v in values.items() if k == "task" or k in TASKS[values.get("task")].__dataclass_fields__}
    )


def _task_from_architecture(model_dir: str, source: ModelSource, overrides: dict[str, Any]) -> Task:
    """The task of a head fine-tuned elsewhere (no ``finetune.json``), from its ``architectures`` and
    ``id2label``; sequence classification needs ``text_a_column`` in ``overrides`` (regression when the
    config's ``problem_type`` says so or there is one label).

    Raises ``ValueError`` for missing columns or an architecture that is not a fine-tuned head."""
    labels = [source.id2label[i] for i in sorted(source.id2label)] if source.id2label else None
    family = _TASK_OF_HEAD.get(source.architecture)
    if family == "squad":
        return SquadTask(**overrides)
    if family == "ner":
        return NerTask(labels=labels, **overrides)
    if family == "multiple-choice":
        return MultipleChoiceTask(**overrides)
    if family == "glue":
        if "text_a_column" not in overrides:
            raise ValueError(f"{model_dir} has no {FINETUNE_FILE}; give the input columns (--text-a-column...)")
        regression = source.hf_config.get("problem_type") == "regression" or len(labels or []) == 1
        return GlueTask(
            labels=None if regression else labels,
            is_regression=regression,
            metrics=["pearson", "spearman"] if regression else ["accuracy"],
            **overrides,
        )
    raise ValueError(
        f"{model_dir}: architecture {source.architecture!r} is not a fine-tuned head; "
        "predict needs a model from 'bertprep finetune'"
    )


def _build_head(source: ModelSource, task: Task) -> nn.Module:
    """The fine-tuned model with ``source``'s weights: the task's own model for a feature-based task (the
    frozen encoder + BiLSTM, whose shape is in ``finetune.json``), else the head its architecture names."""
    if getattr(task, "feature_based", None):
        model = task.build_model(source.config)
        load_full_weights(model, source.state_dict)
        return model
    return build_model(source)


def predict(config: PredictConfig) -> PredictResult:
    """Run a fine-tuned model on ``input_file`` and write ``output_file``: GLUE ``index<TAB>prediction`` TSV,
    SQuAD ``{id: answer}`` JSON, or CoNLL ``TOKEN<TAB>TAG`` (see each task's ``write_predictions``).

    Labels in the input are optional; when every example has them the metrics are returned too. The output
    is written to a temporary name and renamed, so an existing ``output_file`` is complete.

    Raises:
        ValueError: ``output_file`` is ``input_file``, an existing file of ``model_dir`` or of the run it belongs
            to (checked before anything is read or written), or the model / input is not usable.
    """
    model_dir, input_file, output_file = config.model_dir, config.input_file, config.output_file
    _check_predict_output(model_dir, input_file, output_file)
    model, task, tokenizer = load_finetuned(
        model_dir,
        task_overrides=config.task_overrides,
        do_lower_case=config.do_lower_case,
        strip_accents=config.strip_accents,
    )
    _check_predict_output(model_dir, input_file, output_file, task)
    torch_device = resolve_device(config.device)
    model.to(torch_device)
    examples = _read_input(task, input_file, config.max_examples)
    features = task.featurize(examples, tokenizer, with_labels=False)
    outputs = run_model(
        model,
        features,
        batch_size=config.batch_size,
        device=torch_device,
        pad_token_id=tokenizer.pad_token_id,
        progress=config.progress,
    )
    predictions = task.predictions(examples, features, outputs)
    directory = os.path.dirname(os.path.abspath(output_file))
    os.makedirs(directory, exist_ok=True)
    write_atomic(output_file, lambda p: task.write_predictions(p, examples, predictions))
    write_extra_predictions(task, output_file, examples, predictions)
    labelled = all(has_label(task, e) for e in examples)
    metrics = task.metric_values(examples, predictions) if labelled else None
    return PredictResult(output_file=output_file, examples=len(examples), metrics=metrics)


def _read_input(task: Task, input_file: str, max_examples: int | None) -> Any:
    """``task.read`` of the --input file, every failure named with the file (a binary file gave a bare
    UnicodeDecodeError, a file without examples an empty output)."""
    try:
        examples = task.read(input_file, with_labels=False, limit=max_examples, split="eval")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{input_file}: not UTF-8 text (byte {err.start}: {err.reason}); --input must be the {task.name} "
            "task's text format"
        ) from None
    except ValueError as err:  # JSONDecodeError included
        message = str(err)
        raise ValueError(message if input_file in message else f"{input_file}: {message}") from None
    if not examples:
        raise ValueError(f"{input_file}: no examples to predict; --input must hold the {task.name} task's examples")
    return examples


def _check_predict_output(model_dir: str, input_file: str, output_file: str, task: Task | None = None) -> None:
    """Refuse an ``output_file`` (or, once ``task`` is known, one of its side files such as SQuAD v2.0's
    ``NAME.null_odds.json``) that is, or lies inside, the input or the model directory, or is a file of the run
    the model belongs to (``RUN/results.json`` for ``--model RUN/best``)."""
    side_files = getattr(task, "side_files", None)
    writes = [("--output", output_file), *(("--output", p) for p in (side_files(output_file) if side_files else []))]
    check_writes_apart(writes, [("--input", input_file), ("--model", model_dir)], command="predict")
    check_not_run_record(writes, "--model", model_dir, command="predict")


def write_extra_predictions(task: Task, predictions_path: str, examples: Any, predictions: Any) -> None:
    """Files a task writes beside its predictions (SQuAD v2.0: the null odds), each atomically."""
    extra = getattr(task, "extra_prediction_files", None)
    for path, write in (extra(predictions_path, examples, predictions) if extra else {}).items():
        write_atomic(path, write)
