"""Extractive question answering on SQuAD v1.1 and v2.0 (BERT paper, sections 4.2 and 4.3).

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

EM and F1 are the official v1.1 ``evaluate-v1.1.py`` definitions (``squad_eval.py``).

SQuAD v2.0 (``run_squad.py --version_2_with_negative``; paper 4.3): a question marked ``is_impossible`` trains
every window's targets to ``[CLS]``; at prediction time the null score ``s_null = S.C + E.C`` (start plus end
score at ``[CLS]``, the smallest over the question's windows) is compared with the best non-null span:
no answer when ``s_null - s_best > tau``. ``s_null - s_best`` is written per question as the null odds
(``run_squad.py``'s ``null_odds.json``). The figures are the official ``evaluate-v2.0.py``'s
(``squad_eval.py``): ``exact``, ``f1``, ``HasAns_*``, ``NoAns_*``, ``best_exact``/``best_f1`` and their
thresholds. tau is chosen on
the evaluation set as ``best_f1_thresh`` (what the BERT README has one do by hand) unless given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from bertprep.bert_model.models.heads import ModernBertForQuestionAnswering
from bertprep.bert_model.tasks.base import TaskSettings
from bertprep.bert_model.tasks.squad_data import (
    SQUAD_VERSIONS,
    SquadExample,
    load_squad_json,
    parse_article_range,
    read_squad,
    squad_file_version,
)
from bertprep.bert_model.tasks.squad_eval import (
    find_best_threshold,
    squad_metrics,
    squad_v2_metrics,
    squad_v2_raw_scores,
)
from bertprep.core import strict_json
from bertprep.core.vocab_files import WordPieceTokenizer

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------- predictions


class SquadAnswer(NamedTuple):
    """A SQuAD v2.0 prediction."""

    text: str
    """The answer, "" for no answer."""
    null_odds: float
    """``s_null - s_best`` (higher = more likely unanswerable); ``NO_SPAN_NULL_ODDS`` when no span is valid."""


#: Null odds written when a question has no valid span at all (a large finite number: JSON has no infinity).
NO_SPAN_NULL_ODDS = 1e9


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
    last = next(
        (i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < end_char and offsets[i][1] > offsets[i][0]), None
    )
    if first is None or last is None or last < first:
        return None
    return first, last


def _labelled_answer_span(example: SquadExample, offsets: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """First and last context piece of the example's first answer; ``(-1, -1)`` for a v2.0 no-answer question
    (every window then points at ``[CLS]``, as ``run_squad.py`` does); None when the answer text is not at its
    ``answer_start`` or covers no piece (the question is then skipped)."""
    if example.is_impossible:
        return (-1, -1)
    answer = example.answers[0]
    start_char = answer["answer_start"]
    end_char = start_char + len(answer["text"])
    if " ".join(example.context[start_char:end_char].split()) != " ".join(answer["text"].split()):
        return None
    return _answer_token_span(offsets, start_char, end_char)


def _doc_spans(num_doc_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """``run_squad.py`` windows over a context of ``num_doc_tokens`` pieces: ``(start, length)`` pairs of at
    most ``max_tokens_for_doc`` pieces, each starting ``doc_stride`` pieces (or one window) after the last,
    until the context's end; one empty window for an empty context."""
    doc_spans: list[tuple[int, int]] = []
    start_offset = 0
    while start_offset < num_doc_tokens or not doc_spans:
        length = min(num_doc_tokens - start_offset, max_tokens_for_doc)
        doc_spans.append((start_offset, length))
        if start_offset + length >= num_doc_tokens:
            break
        start_offset += min(length, doc_stride)
    return doc_spans


@dataclass
class SquadTask(TaskSettings):
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
    train_paragraphs: str | None = None
    """``START:END`` paragraphs (passages, counted over the selected articles) of the training file."""
    eval_paragraphs: str | None = None
    """``START:END`` paragraphs of the evaluation file (with ``train_paragraphs``: a split by passage)."""
    version: str | None = None
    """``"1.1"`` or ``"2.0"``; None = the training (or input) file's ``version`` field, v1.1 when absent."""
    null_score_diff_threshold: float | None = None
    """SQuAD v2.0 tau: predict no answer when ``s_null - s_best > tau``. None = choose it on the evaluation
    set (the official script's ``best_f1_thresh``) and keep it with the model; 0.0 where nothing is labelled."""

    name = "squad"
    architecture = "BertForQuestionAnswering"
    modernbert_architecture = ModernBertForQuestionAnswering.architecture
    metrics = ("f1", "exact_match")
    metric_for_best = "f1"
    labels = None
    num_labels = 2
    id2label: ClassVar[dict[int, str]] = {0: "start", 1: "end"}

    def __post_init__(self) -> None:
        for name in ("max_seq_length", "doc_stride", "max_query_length", "max_answer_length", "n_best_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_query_length + 3 >= self.max_seq_length:
            raise ValueError(
                f"max_query_length ({self.max_query_length}) + 3 must be below max_seq_length "
                f"({self.max_seq_length}) to leave room for the context"
            )
        for name in ("train_articles", "eval_articles", "train_paragraphs", "eval_paragraphs"):
            parse_article_range(getattr(self, name))
        if self.version is not None:
            self.version = self.version.lstrip("vV")
            if self.version not in SQUAD_VERSIONS:
                raise ValueError(f"version must be one of {', '.join(SQUAD_VERSIONS)}, got {self.version!r}")
        self._detected_version: str | None = None
        self._detected_from = ""
        self._detected_field: str | None = None
        """The first file's ``version`` field (None: absent)."""
        self._chosen_threshold: float | None = None

    @property
    def is_v2(self) -> bool:
        """Whether questions may be unanswerable: the ``version`` setting, else the first file read."""
        return (self.version or self._detected_version) == "2.0"

    @property
    def threshold(self) -> float | None:
        """The tau in use: the setting, else the one last chosen on labelled data (None before that)."""
        return self.null_score_diff_threshold if self.null_score_diff_threshold is not None else self._chosen_threshold

    def to_json(self) -> dict[str, Any]:
        """Settings for ``finetune.json``: the version in effect and, for v2.0, the tau in effect."""
        values = super().to_json() | {"version": "2.0" if self.is_v2 else "1.1"}
        values["null_score_diff_threshold"] = self.threshold if self.is_v2 else None
        return values

    def read(
        self, path: str, *, with_labels: bool = True, limit: int | None = None, split: str = "eval"
    ) -> list[SquadExample]:
        """``read_squad`` with this task's article and paragraph ranges for ``split`` (``"train"`` or
        ``"eval"``). Without a ``version`` setting, the first file read fixes the version (its ``version``
        field), and later files are read as that version; a later file whose ``version`` field names the other
        version is refused (``check_same_version``)."""
        articles = self.train_articles if split == "train" else self.eval_articles
        paragraphs = self.train_paragraphs if split == "train" else self.eval_paragraphs
        dataset = load_squad_json(path)
        if self.version is None and self._detected_version is None:
            self._detected_version = "2.0" if squad_file_version(dataset) == "2.0" else "1.1"
            self._detected_from, self._detected_field = path, squad_file_version(dataset)
            logger.info(
                "%s: SQuAD v%s (from its version field; --squad-version overrides)", path, self._detected_version
            )
        elif self.version is None:
            check_same_version(self._detected_from, self._detected_field, path, squad_file_version(dataset))
        return read_squad(
            path,
            with_labels=with_labels,
            articles=parse_article_range(articles),
            limit=limit,
            version="2.0" if self.is_v2 else "1.1",
            paragraphs=parse_article_range(paragraphs),
            dataset=dataset,
        )

    def prepare(self, train_examples: Sequence[SquadExample]) -> None:
        """Nothing to learn from the training set (no label vocabulary)."""

    def featurize(
        self, examples: Sequence[SquadExample], tokenizer: WordPieceTokenizer, with_labels: bool = True
    ) -> list[dict[str, Any]]:
        """Windows of every question (see the module docstring).

        Each feature: ``input_ids``, ``token_type_ids``, ``example_index``; ``offsets`` (per piece a
        ``(start, end)`` character span in the context, None outside it) and ``max_context`` (per piece
        whether this window is its maximum-context window); with labels ``start_positions`` and
        ``end_positions`` (both 0, the ``[CLS]`` token, for a v2.0 no-answer question and in windows that do
        not contain the whole answer). Training examples whose answer text is not at ``answer_start`` are
        skipped (as ``run_squad.py`` does), with a count in the log.
        """
        questions = tokenizer.encode_batch([e.question for e in examples])
        contexts: dict[int, Any] = {}
        unique = {e.context_index: e.context for e in examples}
        for index, encoding in zip(unique, tokenizer.encode_batch(list(unique.values())), strict=True):
            contexts[index] = encoding
        features: list[dict[str, Any]] = []
        skipped = 0
        for i, (e, q) in enumerate(zip(examples, questions, strict=True)):
            query_ids = list(q.ids)[: self.max_query_length]
            context = contexts[e.context_index]
            doc_ids, doc_offsets = list(context.ids), list(context.offsets)
            answer_span = _labelled_answer_span(e, doc_offsets) if with_labels else None
            if with_labels and answer_span is None:
                skipped += 1
                continue
            features += self._question_windows(tokenizer, i, query_ids, doc_ids, doc_offsets, answer_span)
        if skipped:
            logger.warning(
                "skipped %d of %d questions whose answer text is not at its answer_start", skipped, len(examples)
            )
        return features

    def _question_windows(
        self,
        tokenizer: WordPieceTokenizer,
        example_index: int,
        query_ids: list[int],
        doc_ids: list[int],
        doc_offsets: Sequence[Any],
        answer_span: tuple[int, int] | None,
    ) -> list[dict[str, Any]]:
        """The features of one question (``featurize``): its context cut into windows of at most
        ``max_seq_length`` pieces with the question, ``doc_stride`` pieces apart (``run_squad.py``
        ``doc_spans``). ``doc_offsets`` are the context pieces' ``(start, end)`` character spans; ``answer_span``
        is the answer's first and last context piece, ``(-1, -1)`` for no answer, None without labels."""
        max_tokens_for_doc = self.max_seq_length - len(query_ids) - tokenizer.num_special_tokens_to_add(pair=True)
        doc_spans = _doc_spans(len(doc_ids), max_tokens_for_doc, self.doc_stride)
        # the tokenizer's layout: [CLS] Q [SEP] D [SEP] (BERT), <s> Q </s></s> D </s> (RoBERTa)
        prefix = len(tokenizer.build_inputs_with_special_tokens(query_ids, [])) - 1  # (D starts there)
        features: list[dict[str, Any]] = []
        for span_index, (span_start, span_length) in enumerate(doc_spans):
            window = doc_ids[span_start : span_start + span_length]
            offsets: list[tuple[int, int] | None] = [None] * prefix
            offsets += [tuple(o) for o in doc_offsets[span_start : span_start + span_length]]
            offsets.append(None)
            max_context = (
                [False] * prefix
                + [_is_max_context(doc_spans, span_index, span_start + j) for j in range(span_length)]
                + [False]
            )
            feature: dict[str, Any] = {
                "input_ids": tokenizer.build_inputs_with_special_tokens(query_ids, window),
                "token_type_ids": tokenizer.create_token_type_ids_from_sequences(query_ids, window),
                "example_index": example_index,
                "offsets": offsets,
                "max_context": max_context,
            }
            if answer_span is not None:
                s, t = answer_span
                if s >= 0 and span_start <= s and t < span_start + span_length:
                    feature["start_positions"] = s - span_start + prefix
                    feature["end_positions"] = t - span_start + prefix
                else:
                    feature["start_positions"] = feature["end_positions"] = 0  # [CLS]: not in this window
            features.append(feature)
        return features

    def predictions(
        self,
        examples: Sequence[SquadExample],
        features: Sequence[dict[str, Any]],
        outputs: Sequence[dict[str, np.ndarray]],
    ) -> list[str] | list[SquadAnswer]:
        """Per example the best answer.

        v1.1: the text of the best valid span (empty when no window yields one). v2.0 (``run_squad.py`` with
        ``version_2_with_negative``, paper section 4.3): a ``SquadAnswer`` whose ``null_odds`` is
        ``s_null - s_best``, where ``s_null = S.C + E.C`` is the start plus end score at ``[CLS]`` (the
        smallest over the question's windows) and ``s_best`` the best valid span's score; the text is ""
        when ``null_odds > tau`` (``threshold``). Without a tau setting and with every example labelled,
        tau is chosen here as the official ``best_f1_thresh`` of the non-null answers and these odds.
        """
        best: list[tuple[float, str]] = [(-np.inf, "")] * len(examples)
        null = [np.inf] * len(examples)
        for feature, output in zip(features, outputs, strict=True):
            start_logits, end_logits = output["start_logits"], output["end_logits"]
            offsets, max_context = feature["offsets"], feature["max_context"]
            n = len(offsets)
            starts = np.argsort(start_logits[:n])[::-1][: self.n_best_size]
            ends = np.argsort(end_logits[:n])[::-1][: self.n_best_size]
            i = feature["example_index"]
            null[i] = min(null[i], float(start_logits[0] + end_logits[0]))
            context = examples[i].context
            for s in starts:
                if offsets[s] is None or not max_context[s]:
                    continue
                for t in ends:
                    if offsets[t] is None or t < s or t - s + 1 > self.max_answer_length:
                        continue
                    score = float(start_logits[s] + end_logits[t])
                    if score > best[i][0]:
                        best[i] = (score, context[offsets[s][0] : offsets[t][1]])
        if not self.is_v2:
            return [text for _, text in best]
        odds = [NO_SPAN_NULL_ODDS if not np.isfinite(b) else float(z - b) for (b, _), z in zip(best, null, strict=True)]
        if self.null_score_diff_threshold is None:
            if all(e.is_impossible is not None for e in examples):
                _, self._chosen_threshold = find_best_threshold(
                    {e.qas_id: text for e, (_, text) in zip(examples, best, strict=True)},
                    squad_v2_raw_scores(
                        _truths(examples), {e.qas_id: t for e, (_, t) in zip(examples, best, strict=True)}
                    )[1],
                    {e.qas_id: o for e, o in zip(examples, odds, strict=True)},
                    {e.qas_id: not e.is_impossible for e in examples},
                )
            elif self._chosen_threshold is None:
                self._chosen_threshold = 0.0
        tau = self.threshold
        assert tau is not None  # (chosen above when not set)
        return [SquadAnswer("" if o > tau else text, o) for (_, text), o in zip(best, odds, strict=True)]

    def metric_values(
        self, examples: Sequence[SquadExample], predictions: Sequence[str] | Sequence[SquadAnswer]
    ) -> dict[str, float]:
        """v1.1: ``exact_match`` and ``f1`` (``evaluate-v1.1.py``). v2.0: the figures of ``evaluate-v2.0.py``
        (``squad_v2_metrics``): ``exact``, ``f1``, ``HasAns_*`` and ``NoAns_*`` of the predictions as written
        (they already apply tau; the official ``--na-prob-thresh`` 1.0 is meant for probabilities and is not
        applied to the odds again), ``best_exact``/``best_f1`` and their thresholds from the null odds (as
        with ``--na-prob-file null_odds.json``), plus ``null_score_diff_threshold`` (the tau used)."""
        answers = [p for p in predictions if isinstance(p, SquadAnswer)]
        if answers:
            values = squad_v2_metrics(
                _truths(examples),
                {e.qas_id: p.text for e, p in zip(examples, answers, strict=True)},
                {e.qas_id: p.null_odds for e, p in zip(examples, answers, strict=True)},
                na_prob_thresh=float("inf"),
            )
            values["null_score_diff_threshold"] = float(self.threshold or 0.0)
            return values
        truths = {e.qas_id: [a["text"] for a in e.answers] for e in examples}
        texts = [p for p in predictions if isinstance(p, str)]
        return squad_metrics(truths, {e.qas_id: p for e, p in zip(examples, texts, strict=True)})

    def write_predictions(self, path: str, examples: Sequence[SquadExample], predictions: Sequence[str]) -> None:
        """``predictions.json`` as ``run_squad.py`` writes it: ``{question id: answer text}``."""
        texts = [p.text if isinstance(p, SquadAnswer) else p for p in predictions]
        with open(path, "w", encoding="utf-8") as f:
            strict_json.dump(
                {e.qas_id: p for e, p in zip(examples, texts, strict=True)}, f, indent=1, ensure_ascii=False
            )
            f.write("\n")

    def side_files(self, path: str) -> list[str]:
        """Paths written beside the predictions ``path`` (v2.0's null odds; listed for any version, so that
        ``predict`` refuses them before it knows the input's version)."""
        return [null_odds_path(path)]

    def extra_prediction_files(
        self, path: str, examples: Sequence[SquadExample], predictions: Sequence[str] | Sequence[SquadAnswer]
    ) -> dict[str, Any]:
        """Files written beside the predictions ``path``: for v2.0 the null odds ``{id: s_null - s_best}``
        (``run_squad.py``'s ``null_odds.json``, ``evaluate-v2.0.py --na-prob-file``) at ``null_odds_path(path)``.
        Returns ``{path: writer(tmp_path)}``; empty for v1.1."""
        answers = [p for p in predictions if isinstance(p, SquadAnswer)]
        if not answers:
            return {}

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                strict_json.dump({e.qas_id: p.null_odds for e, p in zip(examples, answers, strict=True)}, f, indent=1)
                f.write("\n")

        return {null_odds_path(path): write}


def null_odds_path(predictions_path: str) -> str:
    """``preds.json`` -> ``preds.null_odds.json``: where the v2.0 null odds go beside a predictions file."""
    root, ext = os.path.splitext(predictions_path)
    return f"{root}.null_odds{ext or '.json'}"


def _truths(examples: Sequence[SquadExample]) -> dict[str, list[str]]:
    """Gold answer texts per question id (empty for no-answer questions)."""
    return {e.qas_id: [] if e.is_impossible else [a["text"] for a in e.answers] for e in examples}


def check_same_version(first: str, first_version: str | None, path: str, version: str | None) -> None:
    """Refuse SQuAD files of two versions in one run: a v1.1 training file with a v2.0 dev file trains a model
    that never predicts "no answer" and is scored on unanswerable questions (and the reverse trains on
    questions the dev file's scoring ignores). A file without a ``version`` field passes.

    Raises:
        ValueError: both versions are known and differ; the message names both files.
    """
    if first_version is None or version is None or first_version == version:
        return
    raise ValueError(
        f"{path} is SQuAD v{version} but {first} is v{first_version} (their version fields); give a training and a "
        "dev file of one version (or --squad-version to read both as one)"
    )
