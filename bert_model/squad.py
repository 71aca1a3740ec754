"""Extractive question answering on SQuAD v1.1 (BERT paper, section 4.2).

Features follow google-research/bert ``run_squad.py``: ``[CLS] question [SEP] context window [SEP]`` (token
type 1 for the context), the question cut to ``max_query_length`` pieces, the context split into windows of
up to ``max_seq_length - len(question) - 3`` pieces that start ``doc_stride`` pieces apart. A training window
that does not contain the whole answer points both targets at ``[CLS]`` (index 0). At prediction time the
``n_best_size`` highest start and end scores of every window are paired; a pair is valid when both lie in
the context, ``start <= end``, the span is at most ``max_answer_length`` pieces, and the start token has its
*maximum context* in that window (``_check_is_max_context``); the best ``start + end`` score wins.

Word pieces are aligned to the context through the tokenizer's character offsets (``tokenizers`` maps them
through normalisation), so an answer is the exact substring of the original context, and the answer
character span of a training example maps to the pieces that overlap it.

EM and F1 are the official v1.1 ``evaluate-v1.1.py`` definitions: answers normalised by lower-casing,
removing punctuation (``string.punctuation``), the articles a/an/the and extra whitespace; F1 over the
bag of normalised words; the maximum over the ground-truth answers; averaged over all questions (a question
without a prediction scores 0), times 100.
"""

from __future__ import annotations

import collections
import json
import logging
import re
import string
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from bertprep.bert_model.heads import BertForQuestionAnswering
from bertprep.bert_model.model import BertConfig
from bertprep.bert_model.wordpiece import WordPieceTokenizer

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ official EM and F1


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (``evaluate-v1.1.py``)."""
    s = s.lower()
    exclude = set(string.punctuation)
    s = "".join(ch for ch in s if ch not in exclude)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    """Word-overlap F1 of the normalised answers (0 when they share no word)."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(ground_truths: dict[str, Sequence[str]], predictions: dict[str, str]) -> dict[str, float]:
    """``exact_match`` and ``f1`` in percent, as ``evaluate-v1.1.py``: per question the maximum over its
    ground truths, averaged over every question of ``ground_truths`` (missing predictions count 0)."""
    exact, f1 = 0.0, 0.0
    for qid, answers in ground_truths.items():
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        exact += max(float(exact_match_score(prediction, a)) for a in answers)
        f1 += max(f1_score(prediction, a) for a in answers)
    total = max(len(ground_truths), 1)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# ------------------------------------------------------------------------------------------------ reading


@dataclass
class SquadExample:
    qas_id: str
    question: str
    context: str
    answers: list[dict[str, Any]]
    """``{"text", "answer_start"}`` dicts (empty for unlabelled files)."""
    context_index: int
    """Index of the paragraph in the file (questions on one paragraph share its tokenization)."""


def read_squad(path: str, *, with_labels: bool = True, articles: slice | None = None,
               limit: int | None = None) -> list[SquadExample]:
    """Questions of a SQuAD v1.1 JSON file (``{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``).

    Args:
        path: the file.
        with_labels: every question must have at least one answer with ``text`` and ``answer_start``.
        articles: keep only these articles (``data[articles]``), e.g. ``slice(0, 30)``.
        limit: keep the first ``limit`` questions.
    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid JSON (with line and column) or a missing / mistyped field (with its JSON path,
            e.g. ``data[3].paragraphs[0].qas[2].question``).
    """
    with open(path, encoding="utf-8") as f:
        try:
            dataset = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{err.lineno}:{err.colno}: invalid JSON ({err.msg})") from None

    def need(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise ValueError(f"{path}: {where}: missing field {key!r} (SQuAD v1.1 format)")
        if not isinstance(obj[key], kind) or isinstance(obj[key], bool):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise ValueError(f"{path}: {where}.{key}: expected {names}, got {type(obj[key]).__name__}")
        return obj[key]

    data = need(dataset, "data", list, "top level")
    selected = range(len(data))[articles] if articles is not None else range(len(data))
    examples: list[SquadExample] = []
    context_index = 0
    for a in selected:
        article = data[a]
        for p, paragraph in enumerate(need(article, "paragraphs", list, f"data[{a}]")):
            where_p = f"data[{a}].paragraphs[{p}]"
            context = need(paragraph, "context", str, where_p)
            for q, qa in enumerate(need(paragraph, "qas", list, where_p)):
                where_q = f"{where_p}.qas[{q}]"
                qas_id = str(need(qa, "id", (str, int), where_q))
                question = need(qa, "question", str, where_q)
                answers = qa.get("answers", []) if isinstance(qa, dict) else []
                if with_labels:
                    answers = need(qa, "answers", list, where_q)
                    if not answers:
                        raise ValueError(f"{path}: {where_q}: no answers (SQuAD v1.1 questions have at least one)")
                    for i, answer in enumerate(answers):
                        need(answer, "text", str, f"{where_q}.answers[{i}]")
                        start = need(answer, "answer_start", int, f"{where_q}.answers[{i}]")
                        if not 0 <= start <= len(context):
                            raise ValueError(f"{path}: {where_q}.answers[{i}].answer_start {start} is outside "
                                             f"the context ({len(context)} characters)")
                examples.append(SquadExample(qas_id, question, context, list(answers), context_index))
                if limit is not None and len(examples) >= limit:
                    return examples
            context_index += 1
    if not examples:
        raise ValueError(f"{path}: no questions found" + (f" in articles {articles}" if articles else ""))
    return examples


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


# ------------------------------------------------------------------------------------------------- task


def _is_max_context(doc_spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
    """``run_squad.py`` ``_check_is_max_context``: does window ``span_index`` give the token at ``position``
    (an index into the whole context) the most context on its shorter side (ties: the longer window, then the
    first)?"""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == span_index


def _answer_token_span(offsets: Sequence[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int] | None:
    """First and last piece overlapping ``[start_char, end_char)``; None when no piece does."""
    first = next((i for i, (s, e) in enumerate(offsets) if e > start_char and e > s), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < end_char
                 and offsets[i][1] > offsets[i][0]), None)
    if first is None or last is None or last < first:
        return None
    return first, last


@dataclass
class SquadTask:
    """SQuAD v1.1 settings (``run_squad.py`` defaults) and the task interface ``finetune`` uses."""

    max_seq_length: int = 384
    """Word pieces per window, [CLS] and [SEP]s included."""
    doc_stride: int = 128
    """Pieces between the starts of consecutive context windows."""
    max_query_length: int = 64
    """Question pieces kept (the rest are cut)."""
    max_answer_length: int = 30
    """Longest answer, in pieces, that prediction considers."""
    n_best_size: int = 20
    """Start and end candidates per window."""
    train_articles: str | None = None
    """``START:END`` articles of the training file to use (None = all)."""
    eval_articles: str | None = None
    """``START:END`` articles of the evaluation file to use (None = all)."""

    name = "squad"
    architecture = "BertForQuestionAnswering"
    metrics = ("f1", "exact_match")
    metric_for_best = "f1"
    labels = None
    num_labels = 2
    id2label = {0: "start", 1: "end"}

    def __post_init__(self) -> None:
        for name in ("max_seq_length", "doc_stride", "max_query_length", "max_answer_length", "n_best_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_query_length + 3 >= self.max_seq_length:
            raise ValueError(f"max_query_length ({self.max_query_length}) + 3 must be below max_seq_length "
                             f"({self.max_seq_length}) to leave room for the context")
        parse_article_range(self.train_articles)
        parse_article_range(self.eval_articles)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.name, **asdict(self)}

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> SquadTask:
        return cls(**{k: v for k, v in values.items() if k != "task"})

    def read(self, path: str, *, with_labels: bool = True, limit: int | None = None, split: str = "eval"
             ) -> list[SquadExample]:
        """``read_squad`` with this task's article range for ``split`` (``"train"`` or ``"eval"``)."""
        articles = self.train_articles if split == "train" else self.eval_articles
        return read_squad(path, with_labels=with_labels, articles=parse_article_range(articles), limit=limit)

    def prepare(self, train_examples: Sequence[SquadExample]) -> None:
        """Nothing to learn from the training set (no label vocabulary)."""

    def build_model(self, config: BertConfig) -> BertForQuestionAnswering:
        return BertForQuestionAnswering(config)

    def featurize(self, examples: Sequence[SquadExample], tokenizer: WordPieceTokenizer,
                  with_labels: bool = True) -> list[dict[str, Any]]:
        """Windows of every question (see the module docstring).

        Each feature: ``input_ids``, ``token_type_ids``, ``example_index``; ``offsets`` (per piece a
        ``(start, end)`` character span in the context, None outside it) and ``max_context`` (per piece
        whether this window is its maximum-context window); with labels ``start_positions`` and
        ``end_positions``. Training examples whose answer text is not at ``answer_start`` are skipped (as
        ``run_squad.py`` does), with a count in the log.
        """
        cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        questions = tokenizer.encode_batch([e.question for e in examples])
        contexts: dict[int, Any] = {}
        unique = {e.context_index: e.context for e in examples}
        for index, encoding in zip(unique, tokenizer.encode_batch(list(unique.values()))):
            contexts[index] = encoding
        features: list[dict[str, Any]] = []
        skipped = 0
        for i, (e, q) in enumerate(zip(examples, questions)):
            query_ids = list(q.ids)[: self.max_query_length]
            context = contexts[e.context_index]
            doc_ids, doc_offsets = list(context.ids), list(context.offsets)
            answer_span = None
            if with_labels:
                answer = e.answers[0]
                start_char = answer["answer_start"]
                end_char = start_char + len(answer["text"])
                if " ".join(e.context[start_char:end_char].split()) != " ".join(answer["text"].split()):
                    skipped += 1
                    continue
                answer_span = _answer_token_span(doc_offsets, start_char, end_char)
                if answer_span is None:
                    skipped += 1
                    continue
            max_tokens_for_doc = self.max_seq_length - len(query_ids) - 3
            doc_spans: list[tuple[int, int]] = []
            start_offset = 0
            while start_offset < len(doc_ids) or not doc_spans:
                length = min(len(doc_ids) - start_offset, max_tokens_for_doc)
                doc_spans.append((start_offset, length))
                if start_offset + length >= len(doc_ids):
                    break
                start_offset += min(length, self.doc_stride)
            prefix = len(query_ids) + 2
            for span_index, (span_start, span_length) in enumerate(doc_spans):
                input_ids = [cls_id, *query_ids, sep_id, *doc_ids[span_start: span_start + span_length], sep_id]
                token_type_ids = [0] * prefix + [1] * (span_length + 1)
                offsets: list[tuple[int, int] | None] = [None] * prefix
                offsets += [tuple(o) for o in doc_offsets[span_start: span_start + span_length]]
                offsets.append(None)
                max_context = [False] * prefix + [
                    _is_max_context(doc_spans, span_index, span_start + j) for j in range(span_length)] + [False]
                feature: dict[str, Any] = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                                           "example_index": i, "offsets": offsets, "max_context": max_context}
                if answer_span is not None:
                    s, t = answer_span
                    if span_start <= s and t < span_start + span_length:
                        feature["start_positions"] = s - span_start + prefix
                        feature["end_positions"] = t - span_start + prefix
                    else:
                        feature["start_positions"] = feature["end_positions"] = 0  # [CLS]: not in this window
                features.append(feature)
        if skipped:
            logger.warning("skipped %d of %d questions whose answer text is not at its answer_start",
                           skipped, len(examples))
        return features

    def predictions(self, examples: Sequence[SquadExample], features: Sequence[dict[str, Any]],
                    outputs: Sequence[dict[str, np.ndarray]]) -> list[str]:
        """Per example the best answer text (empty when no window yields a valid span)."""
        best: list[tuple[float, str]] = [(-np.inf, "")] * len(examples)
        for feature, output in zip(features, outputs):
            start_logits, end_logits = output["start_logits"], output["end_logits"]
            offsets, max_context = feature["offsets"], feature["max_context"]
            n = len(offsets)
            starts = np.argsort(start_logits[:n])[::-1][: self.n_best_size]
            ends = np.argsort(end_logits[:n])[::-1][: self.n_best_size]
            i = feature["example_index"]
            context = examples[i].context
            for s in starts:
                if offsets[s] is None or not max_context[s]:
                    continue
                for t in ends:
                    if offsets[t] is None or t < s or t - s + 1 > self.max_answer_length:
                        continue
                    score = float(start_logits[s] + end_logits[t])
                    if score > best[i][0]:
                        best[i] = (score, context[offsets[s][0]: offsets[t][1]])
        return [text for _, text in best]

    def metric_values(self, examples: Sequence[SquadExample], predictions: Sequence[str]) -> dict[str, float]:
        truths = {e.qas_id: [a["text"] for a in e.answers] for e in examples}
        return squad_metrics(truths, {e.qas_id: p for e, p in zip(examples, predictions)})

    def write_predictions(self, path: str, examples: Sequence[SquadExample], predictions: Sequence[str]) -> None:
        """``predictions.json`` as ``run_squad.py`` writes it: ``{question id: answer text}``."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({e.qas_id: p for e, p in zip(examples, predictions)}, f, indent=1, ensure_ascii=False)
            f.write("\n")
