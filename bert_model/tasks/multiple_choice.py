"""Multiple choice: a context and N candidate endings, one of them right (BERT paper, section 4.4, SWAG).

Each candidate becomes its own sequence ``[CLS] context [SEP] question ending [SEP]`` (token type 1 for the
second part; the pair cut longest-first to ``max_seq_length`` as ``run_classifier.py`` does), the head
(``heads.BertForMultipleChoice``) scores each candidate with one linear layer on its pooled ``[CLS]`` and a
softmax over the N scores picks one; the metric is accuracy.

Files: SWAG's CSV by default (``sent1`` is the context, a candidate is ``sent2 + " " + endingN`` for
``ending0..ending3``, ``label`` the index of the right one; HF ``run_swag.py`` builds the same pairs). Other
layouts map their columns (``context_column``, ``question_column``, ``ending_columns``, ``label_column``,
``id_column``) in CSV (``.csv``), TSV (``.tsv``) or JSON lines (``.jsonl`` / ``.json``, where
``ending_columns`` may also name one field holding the list of endings, e.g. ``{"context": ..., "endings":
[...], "label": 2}``). Every example of a file must have the same number of candidates.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score

from bertprep.bert_model.json_lines import read_json_lines
from bertprep.bert_model.models.heads import ModernBertForMultipleChoice
from bertprep.bert_model.tasks.base import TaskSettings
from bertprep.bert_model.tasks.glue import truncate_seq_pair
from bertprep.core.vocab_files import WordPieceTokenizer

logger = logging.getLogger(__name__)

SWAG_ENDINGS = ["ending0", "ending1", "ending2", "ending3"]
INPUT_FORMATS = ("auto", "csv", "tsv", "jsonl")


@dataclass
class MultipleChoiceExample:
    example_id: str
    """The ``id_column`` value, else the 0-based row number."""
    context: str
    """First segment (SWAG ``sent1``)."""
    endings: list[str]
    """Second segment of each candidate (SWAG ``sent2 + " " + endingN``)."""
    label: int | None
    """Index of the right candidate; None for an unlabelled file."""
    line: int
    """1-based line number of the row (CSV/TSV: where it starts)."""


def _format_of(path: str, requested: str) -> str:
    if requested != "auto":
        return requested
    ext = os.path.splitext(path[:-3] if path.endswith(".gz") else path)[1].lower()
    return {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}.get(ext, "csv")


def _rows(path: str, input_format: str):
    """(line, row dict) of a CSV/TSV with a header or a JSON-lines file."""
    if input_format == "jsonl":
        yield from read_json_lines(path)
        return
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t" if input_format == "tsv" else ",")
        if not reader.fieldnames:
            raise ValueError(f"{path}: empty file; expected a header line naming the columns")
        line = reader.line_num + 1
        for row in reader:
            yield line, row
            line = reader.line_num + 1


def _column(row: dict[str, Any], column: str, option: str, where: str, required: bool = True) -> Any:
    """The value of ``column`` in a row; None when the row lacks it and it is not ``required``.

    Raises:
        ValueError: a required column missing (or null), naming the row's columns and the option to set
            (``option`` as a flag); the message starts with ``where`` (``path:line``).
    """
    if column not in row or row[column] is None:
        if not required:
            return None
        raise ValueError(
            f"{where}: no column {column!r} (columns: {', '.join(map(str, row))}); set --{option.replace('_', '-')}"
        )
    return row[column]


@dataclass
class MultipleChoiceTask(TaskSettings):
    """Multiple-choice settings (SWAG layout by default) and the task interface ``finetune`` uses."""

    max_seq_length: int = 128
    """Word pieces per candidate sequence, [CLS] and [SEP]s included."""
    context_column: str = "sent1"
    """Column (or JSON field) of the context."""
    question_column: str | None = "sent2"
    """Column put before every ending in the second segment (SWAG ``sent2``, the start of the next sentence);
    None or "" for none."""
    ending_columns: list[str] = field(default_factory=lambda: list(SWAG_ENDINGS))
    """Columns of the N candidates, or one JSON field holding a list of them."""
    label_column: str | None = "label"
    """Column of the right candidate's 0-based index."""
    id_column: str | None = None
    """Column of an example id for the predictions file (default: the row number)."""
    input_format: str = "auto"
    """``csv``, ``tsv``, ``jsonl``, or ``auto`` (from the file extension; CSV otherwise)."""

    name = "multiple-choice"
    architecture = "BertForMultipleChoice"
    modernbert_architecture = ModernBertForMultipleChoice.architecture
    metrics = ("accuracy",)
    metric_for_best = "accuracy"
    labels = None
    num_labels = 1
    id2label = None

    def __post_init__(self) -> None:
        if self.max_seq_length < 4:
            raise ValueError(f"max_seq_length must be at least 4, got {self.max_seq_length}")
        if isinstance(self.ending_columns, str):
            self.ending_columns = [c.strip() for c in self.ending_columns.split(",") if c.strip()]
        if not self.ending_columns:
            raise ValueError("ending_columns must name at least one column")
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(f"input_format must be one of {', '.join(INPUT_FORMATS)}, got {self.input_format!r}")
        self.question_column = self.question_column or None

    def read(
        self, path: str, *, with_labels: bool = True, limit: int | None = None, split: str = "eval"
    ) -> list[MultipleChoiceExample]:
        """Examples of ``path`` (see the module docstring).

        Raises:
            FileNotFoundError: no such file.
            ValueError: a missing column (naming the file's columns and the option to set), a label that is
                not an index of a candidate, a different number of candidates than earlier rows, or no rows;
                with ``path:line``.
        """
        input_format = _format_of(path, self.input_format)
        examples: list[MultipleChoiceExample] = []
        num_choices = None
        for line, row in _rows(path, input_format):
            if input_format != "jsonl" and not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            where = f"{path}:{line}"
            context = str(_column(row, self.context_column, "context_column", where))
            question = str(_column(row, self.question_column, "question_column", where)) if self.question_column else ""
            endings = self._endings(row, where)
            if num_choices is None:
                num_choices = len(endings)
            elif len(endings) != num_choices:
                raise ValueError(f"{where}: {len(endings)} candidates, but earlier rows have {num_choices}")
            raw = (
                _column(row, self.label_column, "label_column", where, required=with_labels)
                if self.label_column
                else None
            )
            label = self._label(raw, len(endings), where, with_labels)
            example_id = str(_column(row, self.id_column, "id_column", where)) if self.id_column else str(len(examples))
            second = [f"{question} {e}".strip() if question else e for e in endings]
            examples.append(MultipleChoiceExample(example_id, context, second, label, line))
            if limit is not None and len(examples) >= limit:
                break
        if not examples:
            raise ValueError(f"{path}: no examples found")
        return examples

    def _endings(self, row: dict[str, Any], where: str) -> list[str]:
        """The candidates of a row: the ``ending_columns``, or the list in the one field they name.

        Raises:
            ValueError: a missing column, or fewer than 2 candidates; the message starts with ``where``.
        """
        if len(self.ending_columns) == 1 and isinstance(row.get(self.ending_columns[0]), list):
            endings = [str(e) for e in row[self.ending_columns[0]]]
        else:
            endings = [str(_column(row, c, "ending_columns", where)) for c in self.ending_columns]
        if len(endings) < 2:
            raise ValueError(
                f"{where}: {len(endings)} candidate(s); multiple choice needs at least 2 (--ending-columns)"
            )
        return endings

    def _label(self, raw: Any, num_choices: int, where: str, with_labels: bool) -> int | None:
        """The 0-based index of the right candidate from the ``label_column`` value ``raw`` (None or blank:
        unlabelled).

        Raises:
            ValueError: a label that is not an integer in ``[0, num_choices)``, or none when ``with_labels``;
                the message starts with ``where``.
        """
        if raw is not None and str(raw).strip() != "":
            try:
                label = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{where}: label {raw!r} is not an integer index of a candidate") from None
            if not 0 <= label < num_choices:
                raise ValueError(f"{where}: label {label} is not an index of the {num_choices} candidates (0-based)")
            return label
        if with_labels:
            raise ValueError(f"{where}: no label in column {self.label_column!r}")
        return None

    def prepare(self, train_examples: Sequence[MultipleChoiceExample]) -> None:
        """Nothing to learn from the training set (the labels are candidate indices)."""

    def featurize(
        self, examples: Sequence[MultipleChoiceExample], tokenizer: WordPieceTokenizer, with_labels: bool = True
    ) -> list[dict[str, Any]]:
        """One feature per example: ``input_ids`` and ``token_type_ids`` as N lists of int (one
        ``[CLS] context [SEP] ending [SEP]`` per candidate), ``example_index``, and with labels ``labels``
        (the right candidate's index). Raises ``ValueError`` for an unlabelled example when labels are needed."""
        budget = self.max_seq_length - tokenizer.num_special_tokens_to_add(pair=True)
        contexts = tokenizer.encode_batch([e.context for e in examples])
        flat_endings = tokenizer.encode_batch([ending for e in examples for ending in e.endings])
        features = []
        k = 0
        truncated = 0
        for i, (e, a) in enumerate(zip(examples, contexts, strict=True)):
            input_ids, token_type_ids = [], []
            for _ in e.endings:
                tokens_a, tokens_b = list(a.ids), list(flat_endings[k].ids)
                k += 1
                if len(tokens_a) + len(tokens_b) > budget:
                    truncated += 1
                truncate_seq_pair(tokens_a, tokens_b, budget)
                input_ids.append(tokenizer.build_inputs_with_special_tokens(tokens_a, tokens_b))
                token_type_ids.append(tokenizer.create_token_type_ids_from_sequences(tokens_a, tokens_b))
            feature: dict[str, Any] = {"input_ids": input_ids, "token_type_ids": token_type_ids, "example_index": i}
            if with_labels:
                if e.label is None:
                    raise ValueError(f"line {e.line}: no label")
                feature["labels"] = e.label
            features.append(feature)
        if truncated:
            logger.info("%d candidate sequences cut to max_seq_length=%d", truncated, self.max_seq_length)
        return features

    def prediction(self, feature: dict[str, Any], output: dict[str, np.ndarray]) -> int:
        """An example's highest-scoring candidate (its index)."""
        return int(np.argmax(output["logits"]))

    def metric_values(self, examples: Sequence[MultipleChoiceExample], predictions: Sequence[int]) -> dict[str, float]:
        """``accuracy`` (fraction 0..1) over the examples."""
        return {"accuracy": float(accuracy_score([e.label for e in examples], list(predictions)))}

    def write_predictions(
        self, path: str, examples: Sequence[MultipleChoiceExample], predictions: Sequence[int]
    ) -> None:
        """CSV with a header: ``id,label`` (the predicted candidate's 0-based index), one row per example."""
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["id", "label"])
            writer.writerows([e.example_id, p] for e, p in zip(examples, predictions, strict=True))
