"""The fine-tuning task registry: ``--task`` names, the task objects behind them, and their prediction files.

A *task* object (``glue.GlueTask``, ``squad.SquadTask``, ``ner.NerTask``, ``multiple_choice.MultipleChoiceTask``)
reads its files, turns examples into features, builds its head (BERT's or ModernBERT's, after the model
config: ``architecture`` and ``modernbert_architecture`` name the two), and turns model outputs into
predictions and metrics; ``finetune.py`` (the loop) and ``predict.py`` only talk to it through that interface.
"""

from __future__ import annotations

from typing import Any

from bertprep.bert_model.hf.interop import FINETUNE_FILE
from bertprep.bert_model.tasks.glue import GlueTask, default_metrics
from bertprep.bert_model.tasks.multiple_choice import MultipleChoiceTask
from bertprep.bert_model.tasks.ner import NerTask
from bertprep.bert_model.tasks.squad import SquadTask

Task = GlueTask | SquadTask | NerTask | MultipleChoiceTask
TASKS: dict[str, type[Task]] = {
    "glue": GlueTask,
    "squad": SquadTask,
    "ner": NerTask,
    "multiple-choice": MultipleChoiceTask,
}
#: File name of the evaluation / prediction output per task (GLUE submission TSV, SQuAD JSON, CoNLL, CSV).
PREDICTION_SUFFIX = {"glue": "tsv", "squad": "json", "ner": "conll", "multiple-choice": "csv"}


def make_task(name: str, *, glue_task: str | None = None, max_seq_length: int | None = None, **options: Any) -> Task:
    """The task object for ``bertprep finetune --task NAME`` and its options (None = default).

    ``glue``: ``glue_task`` (a ``glue.GLUE_TASKS`` preset) and/or ``text_a_column``, ``text_b_column``,
    ``label_column``, ``header``, ``labels``, ``is_regression``, ``metrics``; ``squad``: ``doc_stride``,
    ``max_query_length``, ``max_answer_length``, ``n_best_size``, ``train_articles``, ``eval_articles``;
    ``ner``: ``labels``; ``multiple-choice``: ``context_column``, ``question_column``, ``ending_columns``,
    ``label_column``, ``id_column``, ``input_format``. Raises ``ValueError`` for an unknown task, an option of
    another task, or a GLUE task without ``glue_task`` or ``text_a_column``.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    given = {k: v for k, v in options.items() if v is not None}
    if max_seq_length is not None:
        given["max_seq_length"] = max_seq_length
    allowed = set(TASKS[name].__dataclass_fields__) - {"glue_task"}
    foreign = sorted(set(given) - allowed)
    if foreign or (glue_task is not None and name != "glue"):
        flags = {"version": "squad-version"}  # CLI spellings that differ from the field name
        names = ", ".join(
            "--" + flags.get(k, k.replace("_", "-")) for k in foreign + (["glue_task"] if glue_task else [])
        )
        raise ValueError(f"option(s) {names} do not apply to --task {name}")
    if name != "glue":
        return TASKS[name](**given)
    if glue_task is not None:
        return GlueTask.from_preset(glue_task, **given)
    if "text_a_column" not in given:
        raise ValueError(
            "--task glue needs --glue-task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli) or "
            "the columns of your TSV (--text-a-column, --label-column, ...)"
        )
    if "metrics" not in given:
        labels = given.get("labels")
        given["metrics"] = default_metrics(bool(given.get("is_regression")), len(labels) if labels else None)
    return GlueTask(**given)


def task_architectures(task: Task) -> set[str]:
    """The head classes (``architectures`` names) that serve ``task``: BERT's (``task.architecture``) and
    ModernBERT's (``task.modernbert_architecture``); every task has both."""
    return {task.architecture, task.modernbert_architecture}


def task_from_json(values: dict[str, Any]) -> Task:
    """Rebuild a task from its ``to_json()`` (``finetune.json``). Raises ``ValueError`` for an unknown task."""
    name = values.get("task")
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r} in {FINETUNE_FILE}; expected one of {', '.join(TASKS)}")
    return TASKS[name].from_json(values)


def has_label(task: Task, example: Any) -> bool:
    """Whether ``example`` carries the target its task scores (a label, answers, tags)."""
    if task.name == "glue":
        return example.label is not None
    if task.name == "squad":
        return bool(example.answers) or example.is_impossible is not None
    if task.name == "multiple-choice":
        return example.label is not None
    return example.tags is not None
