"""Sentence and sentence-pair classification / regression from GLUE-format TSV files (BERT paper, 4.1).

Input: ``[CLS] text_a [SEP]`` or ``[CLS] text_a [SEP] text_b [SEP]`` (token type 1 for the second text and
its ``[SEP]``), truncated to ``max_seq_length`` by removing the last piece of the longer text, as
google-research/bert ``run_classifier.py`` ``_truncate_seq_pair`` does. The classifier reads the pooled
``[CLS]``; one label column with a number and ``is_regression`` gives regression (STS-B).

Files are read as GLUE ships them: tab-separated, UTF-8 (a leading BOM is dropped, MRPC has one), **no
quoting** (``csv.QUOTE_NONE``: MRPC and SST-2 contain raw ``"`` characters), an optional header line.
Columns are named (with a header) or 0-based indices. ``GLUE_TASKS`` holds the column layout, labels and
metrics of each GLUE task; any other TSV works with explicit columns.

Metrics as GLUE defines them per task (Wang et al. 2019, table 1): CoLA Matthews correlation; SST-2, MNLI,
QNLI, RTE, WNLI accuracy; MRPC and QQP F1 (of the positive class) and accuracy; STS-B Pearson and Spearman
correlation. They come from scikit-learn and scipy, reported as fractions (0..1).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bertprep.bert_model.collate import truncate_seq_pair
from bertprep.bert_model.models.heads import ModernBertForSequenceClassification
from bertprep.bert_model.tasks.base import TaskSettings
from bertprep.bert_model.tasks.config import GLUE_TASKS
from bertprep.core.vocab_files import WordPieceTokenizer

logger = logging.getLogger(__name__)

#: Metric names ``glue_metrics`` computes.
METRICS = ("accuracy", "f1", "matthews_corrcoef", "pearson", "spearman")


@dataclass
class GlueExample:
    text_a: str
    text_b: str | None
    label: str | float | None
    """Label string (classification) or float (regression); None when the file has no labels."""
    line: int
    """1-based line number in the file (for messages and prediction output)."""
    index: int
    """Position among the file's examples (the GLUE submission ``index``)."""


def _parse_column(value: str | int) -> str | int:
    if isinstance(value, int):
        return value
    value = str(value)
    return int(value) if value.strip().lstrip("-").isdigit() else value


@dataclass
class GlueTask(TaskSettings):
    """A classification / regression task on TSV columns; what ``finetune`` and ``predict`` need.

    Build from a GLUE name with ``GlueTask.from_preset("mrpc", max_seq_length=128)`` or from explicit columns.
    """

    text_a_column: str | int
    """Column of the (first) sentence: a header name, or a 0-based index."""
    text_b_column: str | int | None = None
    """Column of the second sentence of a pair; None for single-sentence tasks."""
    label_column: str | int = "label"
    """Column of the label."""
    header: bool = True
    """The first line names the columns (and is skipped)."""
    labels: list[str] | None = None
    """Class names in index order; None = collect them from the training file (sorted), or regression."""
    is_regression: bool = False
    """One real-valued output trained with MSE (STS-B)."""
    metrics: list[str] = field(default_factory=lambda: ["accuracy"])
    """Metrics to report (``METRICS``); the first selects the best checkpoint."""
    max_seq_length: int = 128
    """Maximum word pieces per input, [CLS] and [SEP]s included (run_classifier.py default 128)."""
    glue_task: str | None = None
    """The GLUE preset name, when one was used (recorded in exports as ``finetuning_task``)."""

    name = "glue"
    architecture = "BertForSequenceClassification"
    modernbert_architecture = ModernBertForSequenceClassification.architecture

    def __post_init__(self) -> None:
        self.text_a_column = _parse_column(self.text_a_column)
        if self.text_b_column is not None:
            self.text_b_column = _parse_column(self.text_b_column)
        self.label_column = _parse_column(self.label_column)
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown or not self.metrics:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {', '.join(METRICS)}")
        if self.is_regression and any(m in ("accuracy", "f1", "matthews_corrcoef") for m in self.metrics):
            raise ValueError("a regression task reports pearson / spearman, not classification metrics")
        if not self.is_regression and any(m in ("pearson", "spearman") for m in self.metrics):
            raise ValueError("pearson / spearman are regression metrics; set is_regression (one numeric label)")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be distinct, got {self.labels}")
        if self.max_seq_length < 3 + (self.text_b_column is not None):
            raise ValueError(f"max_seq_length {self.max_seq_length} is too small")

    @classmethod
    def from_preset(cls, glue_task: str, **overrides: Any) -> GlueTask:
        """The GLUE task's layout (``GLUE_TASKS``); ``overrides`` (not None) replace fields.

        Raises ``ValueError`` for an unknown task name.
        """
        if glue_task not in GLUE_TASKS:
            raise ValueError(f"unknown GLUE task {glue_task!r}; choose one of {', '.join(GLUE_TASKS)}")
        p = GLUE_TASKS[glue_task]
        values: dict[str, Any] = dict(
            text_a_column=p.text_a_column,
            text_b_column=p.text_b_column,
            label_column=p.label_column,
            header=p.header,
            labels=list(p.labels) if p.labels else None,
            is_regression=p.labels is None,
            metrics=list(p.metrics),
            glue_task=glue_task,
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def metric_for_best(self) -> str:
        return self.metrics[0]

    @property
    def num_labels(self) -> int:
        if self.is_regression:
            return 1
        if self.labels is None:
            raise ValueError("the label set is not known yet (call prepare with the training examples)")
        return len(self.labels)

    @property
    def id2label(self) -> dict[int, str]:
        return {0: "score"} if self.is_regression else dict(enumerate(self.labels or []))

    # ------------------------------------------------------------------------------------------- reading

    def read(
        self, path: str, *, with_labels: bool = True, limit: int | None = None, split: str = "eval"
    ) -> list[GlueExample]:
        """Examples of a TSV file (see the module docstring for the format).

        Args:
            path: the file.
            with_labels: require the label column (training / evaluation); False for unlabelled test files
                (the label is read when the column exists, else None).
            limit: keep the first ``limit`` examples.
            split: ``"train"`` or ``"eval"`` (the same reading for TSV files).
        Raises:
            FileNotFoundError: no such file.
            ValueError: a named column is not in the header, a line has too few fields, a label is unknown
                or (regression) not a number; the message gives ``path:line``.
        """
        examples: list[GlueExample] = []
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE, strict=False)
            columns: dict[str, int] = {}
            if self.header:
                try:
                    header = next(reader)
                except StopIteration:
                    raise ValueError(f"{path}: the file is empty (expected a header line)") from None
                columns = {name.strip(): i for i, name in enumerate(header)}
            a = self._index(self.text_a_column, columns, path, "text_a_column")
            b = None if self.text_b_column is None else self._index(self.text_b_column, columns, path, "text_b_column")
            label_required = with_labels
            try:
                y = self._index(self.label_column, columns, path, "label_column")
            except ValueError:
                if label_required:
                    raise
                y = None
            needed = max(i for i in (a, b, y if label_required else None) if i is not None) + 1
            for row in reader:
                line = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # blank line
                if len(row) < needed:
                    raise ValueError(
                        f"{path}:{line}: expected at least {needed} tab-separated fields, found {len(row)}; "
                        "check the column options (--text-a-column, --text-b-column, --label-column, --header)"
                    )
                label: str | float | None = None
                if y is not None and y < len(row):
                    label = self._parse_label(row[y].strip(), path, line)
                examples.append(GlueExample(row[a], row[b] if b is not None else None, label, line, len(examples)))
                if limit is not None and len(examples) >= limit:
                    break
        if not examples:
            raise ValueError(f"{path}: no examples found")
        return examples

    @staticmethod
    def _index(column: str | int, columns: dict[str, int], path: str, option: str) -> int:
        if isinstance(column, int):
            if column < 0:
                raise ValueError(f"{option} must be >= 0, got {column}")
            return column
        if not columns:
            raise ValueError(
                f"{path}: {option} {column!r} is a name but the file has no header; "
                "give a 0-based column index or --header"
            )
        if column not in columns:
            raise ValueError(
                f"{path}: no column {column!r} in the header ({', '.join(columns)}); "
                f"set {option} to one of these names or a 0-based index"
            )
        return columns[column]

    def _parse_label(self, text: str, path: str, line: int) -> str | float:
        if self.is_regression:
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"{path}:{line}: label {text!r} is not a number (regression task)") from None
        if self.labels is not None and text not in self.labels:
            raise ValueError(
                f"{path}:{line}: label {text!r} is not one of {self.labels}; check --label-column or pass --labels"
            )
        return text

    def prepare(self, train_examples: Sequence[GlueExample]) -> None:
        """Fix the label set from the training examples when none was given (sorted label strings)."""
        if self.is_regression or self.labels is not None:
            return
        found = sorted({str(e.label) for e in train_examples if e.label is not None})
        if len(found) < 2:
            raise ValueError(
                f"the training file has {len(found)} distinct label(s) {found}; classification "
                "needs at least 2 (or set is_regression for a numeric label)"
            )
        self.labels = found
        logger.info("labels from the training file: %s", found)

    # --------------------------------------------------------------------------------------- features

    def featurize(
        self, examples: Sequence[GlueExample], tokenizer: WordPieceTokenizer, with_labels: bool = True
    ) -> list[dict[str, Any]]:
        """One feature per example: ``input_ids``, ``token_type_ids`` (lists of int), ``example_index``, and
        with labels ``labels`` (class index, or float for regression)."""
        enc_a = tokenizer.encode_batch([e.text_a for e in examples])
        enc_b = (
            tokenizer.encode_batch([e.text_b or "" for e in examples])
            if self.text_b_column is not None
            else [None] * len(examples)
        )
        # the tokenizer's layout: BERT's [CLS] A [SEP] B [SEP] (types 0/1), RoBERTa's <s> A </s></s> B </s>
        label_index = {label: i for i, label in enumerate(self.labels or [])}
        features = []
        for i, (e, a, b) in enumerate(zip(examples, enc_a, enc_b, strict=True)):
            tokens_a = list(a.ids)
            tokens_b = list(b.ids) if b is not None else None
            if tokens_b is None:
                tokens_a = tokens_a[: self.max_seq_length - tokenizer.num_special_tokens_to_add()]
            else:
                truncate_seq_pair(
                    tokens_a, tokens_b, self.max_seq_length - tokenizer.num_special_tokens_to_add(pair=True)
                )
            input_ids = tokenizer.build_inputs_with_special_tokens(tokens_a, tokens_b)
            token_type_ids = tokenizer.create_token_type_ids_from_sequences(tokens_a, tokens_b)
            feature: dict[str, Any] = {"input_ids": input_ids, "token_type_ids": token_type_ids, "example_index": i}
            if with_labels:
                if e.label is None:
                    raise ValueError(f"line {e.line}: no label")
                feature["labels"] = float(e.label) if self.is_regression else label_index[str(e.label)]
            features.append(feature)
        return features

    # ------------------------------------------------------------------------------- predictions, metrics

    def prediction(self, feature: dict[str, Any], output: dict[str, np.ndarray]) -> str | float:
        """An example's predicted label string (argmax) or value (regression)."""
        logits = output["logits"]
        return float(logits[0]) if self.is_regression else (self.labels or [])[int(np.argmax(logits))]

    def metric_values(self, examples: Sequence[GlueExample], predictions: Sequence[str | float]) -> dict[str, float]:
        """The task's ``metrics`` of ``predictions`` against the examples' labels (fractions 0..1)."""
        labels: list[str | float] = []
        for e in examples:
            assert e.label is not None, f"line {e.line}: metrics are of labelled examples (registry.has_label)"
            labels.append(e.label)
        if self.is_regression:
            return glue_metrics(
                self.metrics,
                np.array(predictions, dtype=np.float64),
                np.array([float(label) for label in labels], dtype=np.float64),
            )
        index = {label: i for i, label in enumerate(self.labels or [])}
        return glue_metrics(
            self.metrics,
            np.array([index[str(p)] for p in predictions]),  # label strings (``prediction``)
            np.array([index[str(label)] for label in labels]),
        )

    def write_predictions(self, path: str, examples: Sequence[GlueExample], predictions: Sequence[str | float]) -> None:
        """GLUE submission format: a header ``index<TAB>prediction`` then one line per example."""
        with open(path, "w", encoding="utf-8") as f:
            f.write("index\tprediction\n")
            for e, p in zip(examples, predictions, strict=True):
                # 9 significant digits: a float32 output reads back exactly (metrics recomputed from the file agree)
                f.write(f"{e.index}\t{p:.9g}\n" if self.is_regression else f"{e.index}\t{p}\n")


def glue_metrics(names: Sequence[str], predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """GLUE metrics by name (``METRICS``), with scikit-learn and scipy.

    Args:
        names: which metrics.
        predictions, labels: 1-D arrays of class indices (classification; F1 is of class 1, GLUE's positive
            class for MRPC and QQP) or of floats (``pearson``, ``spearman``).
    Returns:
        name -> value (fractions 0..1; correlations -1..1). A correlation of a constant prediction is 0.
    """
    out: dict[str, float] = {}
    for name in names:
        if name == "accuracy":
            out[name] = float(accuracy_score(labels, predictions))
        elif name == "f1":
            out[name] = float(f1_score(labels, predictions, pos_label=1, average="binary", zero_division=0))
        elif name == "matthews_corrcoef":
            out[name] = float(matthews_corrcoef(labels, predictions))
        elif name in ("pearson", "spearman"):
            if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
                out[name] = 0.0  # undefined for a constant input; scipy would warn and return nan
            else:
                fn = pearsonr if name == "pearson" else spearmanr
                out[name] = float(fn(predictions, labels)[0])
        else:
            raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")
    return out


def default_metrics(is_regression: bool, num_labels: int | None = None) -> list[str]:
    """Metrics for a TSV task without a GLUE preset: Pearson/Spearman, or accuracy (+ F1 for two classes)."""
    if is_regression:
        return ["pearson", "spearman"]
    return ["accuracy", "f1"] if num_labels == 2 else ["accuracy"]
