"""Finding the GLUE tasks in a folder: the standard layout, or a ``datasets`` ``save_to_disk`` of ``glue``.

The standard layout (what GLUE's ``download_glue_data.py`` writes): one folder per task, ``CoLA``, ``SST-2``,
``MRPC``, ``STS-B``, ``QQP``, ``MNLI``, ``QNLI``, ``RTE``, ``WNLI``, each with ``train.tsv`` and ``dev.tsv``
(MNLI: ``dev_matched.tsv`` and ``dev_mismatched.tsv``). Folder names match without case and punctuation
(``sst2`` is ``SST-2``). A task folder holding a ``datasets`` ``DatasetDict`` (``dataset_dict.json``, as
``load_dataset("nyu-mll/glue", "sst2").save_to_disk("glue/sst2")`` writes) is written out once as GLUE TSV
files (``export_datasets_task``) and read like them: labels as GLUE's files spell them, tabs and line breaks
in the text replaced by spaces.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from bertprep.bert_model.tasks.glue import GLUE_TASKS, GlueTask
from bertprep.core.atomic import write_atomic

#: The tasks in BERT's Table 1 order, and their folder names in GLUE's layout.
GLUE_FOLDERS = {
    "mnli": "MNLI",
    "qqp": "QQP",
    "qnli": "QNLI",
    "sst2": "SST-2",
    "cola": "CoLA",
    "stsb": "STS-B",
    "mrpc": "MRPC",
    "rte": "RTE",
    "wnli": "WNLI",
}
_DEV_FILES = {"mnli": ("dev_matched.tsv", "dev_mismatched.tsv")}
_HF_SPLITS = {"train": "train", "dev.tsv": "validation", "dev_matched.tsv": "validation_matched"}
_HF_SPLITS["dev_mismatched.tsv"] = "validation_mismatched"


@dataclass(frozen=True)
class TaskFiles:
    """The files of one GLUE task."""

    task: str
    """The preset name (``glue.GLUE_TASKS``): ``sst2``, ``mnli``..."""
    folder: str
    train: str
    dev: str
    """``dev.tsv`` (MNLI: ``dev_matched.tsv``)."""
    dev_mismatched: str | None = None
    """MNLI's ``dev_mismatched.tsv``."""
    datasets_folder: bool = False
    """``folder`` is a ``datasets`` save; ``train`` / ``dev`` are the TSV files it is exported to."""


def _task_of(name: str) -> str | None:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key if key in GLUE_FOLDERS else None


def find_glue_tasks(data_dir: str, tasks: list[str] | None, export_dir: str) -> list[TaskFiles]:
    """The GLUE tasks in ``data_dir`` (all, or ``tasks``), in BERT's Table 1 order.

    A ``datasets`` save's TSV files will be in ``export_dir/<Folder>/`` (``export_datasets_task`` writes them).

    Raises:
        ValueError: ``data_dir`` holds no known task folder or two folders of one task (``SST-2`` and ``sst2``),
            a chosen task is missing, or a task folder lacks
            ``train.tsv`` or ``dev.tsv`` (MNLI: ``dev_matched.tsv`` / ``dev_mismatched.tsv``); one line each.
    """
    if not os.path.isdir(data_dir):
        raise ValueError(f"--data {data_dir}: no such folder")
    found: dict[str, str] = {}
    for name in sorted(os.listdir(data_dir)):
        task = _task_of(name)
        if task and os.path.isdir(os.path.join(data_dir, name)):
            if task in found and (not tasks or task in tasks):
                raise ValueError(
                    f"--data {data_dir} holds two {GLUE_FOLDERS[task]} folders, {os.path.basename(found[task])} "
                    f"and {name}; keep one of them there"
                )
            found[task] = os.path.join(data_dir, name)
    if not found:
        raise ValueError(
            f"--data {data_dir} holds no GLUE task folder ({', '.join(GLUE_FOLDERS.values())}, each with train.tsv "
            "and dev.tsv, or a datasets save_to_disk named cola, sst2, ...)"
        )
    missing = [t for t in tasks or [] if t not in found]
    if missing:
        raise ValueError(f"--tasks {missing[0]}: {data_dir} has no {GLUE_FOLDERS[missing[0]]} folder")
    out = []
    for task in GLUE_FOLDERS:
        if task not in found or (tasks and task not in tasks):
            continue
        folder = found[task]
        devs = _DEV_FILES.get(task, ("dev.tsv",))
        if os.path.isfile(os.path.join(folder, "dataset_dict.json")):
            base = os.path.join(export_dir, GLUE_FOLDERS[task])
            paths = [os.path.join(base, n) for n in ("train.tsv", *devs)]
            out.append(TaskFiles(task, folder, paths[0], paths[1], paths[2] if len(paths) > 2 else None, True))
            continue
        for name in ("train.tsv", *devs):
            if not os.path.isfile(os.path.join(folder, name)):
                raise ValueError(f"{folder} has no {name} (GLUE's layout: {' and '.join(('train.tsv', *devs))})")
        paths = [os.path.join(folder, n) for n in ("train.tsv", *devs)]
        out.append(TaskFiles(task, folder, paths[0], paths[1], paths[2] if len(paths) > 2 else None))
    return out


def check_task_files(files: TaskFiles) -> None:
    """Read the first example of each file with the task's preset: a file of the wrong task or layout fails
    here, before any training. Raises ``ValueError`` naming the file and line."""
    task = GlueTask.from_preset(files.task)
    for path in (files.train, files.dev, files.dev_mismatched):
        if path is not None:
            task.read(path, limit=1)


def export_datasets_task(files: TaskFiles) -> None:
    """Write a ``datasets`` save of one GLUE task as GLUE TSV files (``files.train``, ``files.dev``...), each
    atomically; files already written are kept.

    Raises:
        ValueError: the ``datasets`` package is missing, or the save lacks a split or a column.
    """
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"{files.folder} is a datasets save_to_disk folder: reading it needs the datasets package "
            "(pip install datasets)"
        ) from None
    saved = datasets.load_from_disk(files.folder)
    for path in (files.train, files.dev, files.dev_mismatched):
        if path is None or os.path.isfile(path):
            continue
        split = _HF_SPLITS.get(os.path.basename(path), "train")
        if split not in saved:
            raise ValueError(f"{files.folder} has no {split!r} split (it has {', '.join(saved)})")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, functools.partial(_write_tsv, task=files.task, split=saved[split], folder=files.folder))


def _write_tsv(path: str, task: str, split, folder: str) -> None:
    """One split as the task's GLUE TSV: the preset's columns, labels spelled as GLUE's files spell them."""
    preset = GLUE_TASKS[task]
    text_columns = [c for c in split.column_names if c not in ("label", "idx")]
    if len(text_columns) != (2 if preset.text_b_column is not None else 1) or "label" not in split.column_names:
        raise ValueError(f"{folder}: columns {split.column_names} are not GLUE {task}'s")
    names = getattr(split.features["label"], "names", None)
    by_name = preset.labels is not None and names is not None and set(names) <= set(preset.labels)
    columns = [preset.text_a_column, preset.text_b_column, preset.label_column]
    width = max(c for c in columns if isinstance(c, int)) + 1 if not preset.header else len(columns)
    with open(path, "w", encoding="utf-8", newline="") as f:
        if preset.header:
            f.write("\t".join(str(c) for c in columns if c is not None) + "\n")
        for row in split:
            texts = [re.sub(r"[\t\r\n]+", " ", row[c]) for c in text_columns]
            label = row["label"]
            label = f"{label:g}" if preset.labels is None else (names[label] if names and by_name else str(label))
            values = dict(zip([preset.text_a_column, preset.text_b_column], texts, strict=False))
            values[preset.label_column] = label
            keys = [c for c in columns if c is not None] if preset.header else range(width)
            f.write("\t".join(values.get(k, "") for k in keys) + "\n")
