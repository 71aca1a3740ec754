"""Reading SQuAD files (v1.1 and v2.0): questions with their context and answers, as :class:`SquadExample`.

The layout is the official one (``data`` -> articles -> ``paragraphs`` -> ``qas``); v2.0 adds
``is_impossible`` per question. A malformed file is refused with a message naming the file and the JSON path.
``squad.py`` turns the examples into features and predictions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

#: Versions of the SQuAD format: v1.1 (every question answerable) and v2.0 (``is_impossible`` questions).
SQUAD_VERSIONS = ("1.1", "2.0")


@dataclass
class SquadExample:
    qas_id: str
    question: str
    context: str
    answers: list[dict[str, Any]]
    """``{"text", "answer_start"}`` dicts (empty for unlabelled files and for no-answer questions)."""
    context_index: int
    """Index of the paragraph in the file (questions on one paragraph share its tokenization)."""
    is_impossible: bool | None = None
    """SQuAD v2.0: the passage holds no answer (None when the file does not say, e.g. v1.1 or unlabelled)."""


def load_squad_json(path: str) -> dict[str, Any]:
    """The parsed JSON of a SQuAD file. Raises ``FileNotFoundError``, or ``ValueError`` with line and column."""
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{err.lineno}:{err.colno}: invalid JSON ({err.msg})") from None


def squad_file_version(dataset: dict[str, Any]) -> str | None:
    """The top-level ``version`` field as ``"1.1"`` or ``"2.0"`` (``"v2.0"`` -> ``"2.0"``); None when absent."""
    version = dataset.get("version") if isinstance(dataset, dict) else None
    if version is None:
        return None
    return str(version).strip().lstrip("vV")


def read_squad(
    path: str,
    *,
    with_labels: bool = True,
    articles: slice | None = None,
    limit: int | None = None,
    version: str | None = None,
    paragraphs: slice | None = None,
    dataset: dict[str, Any] | None = None,
) -> list[SquadExample]:
    """Questions of a SQuAD v1.1 or v2.0 JSON file
    (``{"version", "data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``).

    Args:
        path: the file.
        with_labels: every question must be labelled: v1.1, at least one answer with ``text`` and
            ``answer_start``; v2.0, the same unless ``is_impossible`` is true (then ``answers`` may be empty).
        articles: keep only these articles (``data[articles]``), e.g. ``slice(0, 30)``.
        limit: keep the first ``limit`` questions.
        version: ``"1.1"`` or ``"2.0"``; None = the file's ``version`` field (v1.1 when it has none).
        paragraphs: keep only these paragraphs, numbered over the selected articles in file order (a split
            by passage: no context is shared between ``slice(0, 60)`` and ``slice(60, None)``).
        dataset: the already parsed file (``load_squad_json``), to avoid reading it twice.
    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid JSON (with line and column) or a missing / mistyped field (with its JSON path,
            e.g. ``data[3].paragraphs[0].qas[2].question``).
    """
    if dataset is None:
        dataset = load_squad_json(path)
    if version is None:
        version = "2.0" if squad_file_version(dataset) == "2.0" else "1.1"
    if version not in SQUAD_VERSIONS:
        raise ValueError(f"SQuAD version must be one of {', '.join(SQUAD_VERSIONS)}, got {version!r}")
    fields = _Fields(path, version)
    data = fields.need(dataset, "data", list, "top level")
    selected = range(len(data))[articles] if articles is not None else range(len(data))
    examples: list[SquadExample] = []
    context_index = 0
    paragraph_count = sum(len(fields.need(data[a], "paragraphs", list, f"data[{a}]")) for a in selected)
    kept_paragraphs = set(range(paragraph_count)[paragraphs]) if paragraphs is not None else None
    for a in selected:
        article = data[a]
        for p, paragraph in enumerate(fields.need(article, "paragraphs", list, f"data[{a}]")):
            if kept_paragraphs is not None and context_index not in kept_paragraphs:
                context_index += 1
                continue
            where_p = f"data[{a}].paragraphs[{p}]"
            context = fields.need(paragraph, "context", str, where_p)
            for q, qa in enumerate(fields.need(paragraph, "qas", list, where_p)):
                example = _read_question(fields, qa, f"{where_p}.qas[{q}]", context, context_index, with_labels)
                examples.append(example)
                if limit is not None and len(examples) >= limit:
                    return examples
            context_index += 1
    if not examples:
        where = "".join(f" in {name} {r}" for name, r in (("articles", articles), ("paragraphs", paragraphs)) if r)
        raise ValueError(f"{path}: no questions found{where}")
    return examples


@dataclass(frozen=True)
class _Fields:
    """Typed access to the fields of one SQuAD file, refusing a missing or mistyped field with a message that
    names the file and the field's JSON path."""

    path: str
    version: str

    def need(self, obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
        """``obj[key]``, which must be a ``kind`` (a bool is not an int unless ``kind`` says bool)."""
        if not isinstance(obj, dict) or key not in obj:
            raise ValueError(f"{self.path}: {where}: missing field {key!r} (SQuAD v{self.version} format)")
        if not isinstance(obj[key], kind) or (
            isinstance(obj[key], bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
        ):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise ValueError(f"{self.path}: {where}.{key}: expected {names}, got {type(obj[key]).__name__}")
        return obj[key]


def _read_question(
    fields: _Fields, qa: Any, where_q: str, context: str, context_index: int, with_labels: bool
) -> SquadExample:
    """One entry of a paragraph's ``qas`` (at JSON path ``where_q``); see ``read_squad`` for ``with_labels``."""
    v2 = fields.version == "2.0"
    qas_id = str(fields.need(qa, "id", (str, int), where_q))
    question = fields.need(qa, "question", str, where_q)
    answers = qa.get("answers", []) if isinstance(qa, dict) else []
    is_impossible = None
    if v2 and isinstance(qa, dict) and "is_impossible" in qa:
        is_impossible = fields.need(qa, "is_impossible", bool, where_q)
    if with_labels:
        answers = fields.need(qa, "answers", list, where_q)
        if v2:
            is_impossible = bool(is_impossible)
            if is_impossible:
                answers = []  # the official script scores "" against a no-answer question
        if not answers and not is_impossible:
            raise ValueError(
                f"{fields.path}: {where_q}: no answers (SQuAD v{fields.version} questions have at least "
                "one"
                + (
                    ", unless is_impossible is true)"
                    if v2
                    else "; for v2.0 files with no-answer questions pass --squad-version 2.0)"
                )
            )
        for i, answer in enumerate(answers):
            fields.need(answer, "text", str, f"{where_q}.answers[{i}]")
            start = fields.need(answer, "answer_start", int, f"{where_q}.answers[{i}]")
            if not 0 <= start <= len(context):
                raise ValueError(
                    f"{fields.path}: {where_q}.answers[{i}].answer_start {start} is outside "
                    f"the context ({len(context)} characters)"
                )
    return SquadExample(qas_id, question, context, list(answers), context_index, is_impossible)


def parse_article_range(text: str | None) -> slice | None:
    """``"0:30"`` -> ``slice(0, 30)``, ``"30:"`` -> ``slice(30, None)``; None stays None.

    Raises ``ValueError`` for anything but ``START:END`` with optional non-negative integers.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    if not m:
        raise ValueError(f"article range {text!r} must look like START:END (e.g. 0:30 or 30:)")
    start, end = (int(g) if g else None for g in m.groups())
    return slice(start, end)


__all__ = [
    "SQUAD_VERSIONS",
    "SquadExample",
    "load_squad_json",
    "parse_article_range",
    "read_squad",
    "squad_file_version",
]
