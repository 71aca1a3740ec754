"""The official SQuAD evaluation figures: v1.1 ``evaluate-v1.1.py`` (EM and F1) and v2.0 ``evaluate-v2.0.py``.

EM and F1 are the official v1.1 definitions: answers normalised by lower-casing, removing punctuation
(``string.punctuation``), the articles a/an/the and extra whitespace; F1 over the bag of normalised words; the
maximum over the ground-truth answers; averaged over all questions (a question without a prediction scores 0),
times 100. The v2.0 figures are implemented from that script's definitions (``normalize_answer``,
``get_raw_scores``, ``apply_no_ans_threshold``, ``find_best_thresh``): ``exact``, ``f1``, ``HasAns_*``,
``NoAns_*``, ``best_exact``/``best_f1`` and their thresholds.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence

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


def squad_metrics(ground_truths: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict[str, float]:
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


# ------------------------------------------------------------------------------ official v2.0 figures


def _v2_exact(gold: str, prediction: str) -> int:
    """``evaluate-v2.0.py`` ``compute_exact``: 1 when the normalised strings are equal."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def _v2_f1(gold: str, prediction: str) -> float:
    """``evaluate-v2.0.py`` ``compute_f1``: as v1.1, except that when either side normalises to no words the
    score is 1 if both do and 0 otherwise (so "" against a no-answer question scores 1)."""
    gold_tokens, prediction_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not gold_tokens or not prediction_tokens:
        return float(gold_tokens == prediction_tokens)
    return f1_score(prediction, gold)


def squad_v2_raw_scores(
    ground_truths: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, float]]:
    """``get_raw_scores``: per question the best exact (0/1) and F1 (0..1) over its gold answers, where the
    gold answers are those that do not normalise to nothing, or ``[""]`` if none is left (no-answer
    questions). Questions without a prediction are left out, as the official script does."""
    exact: dict[str, int] = {}
    f1: dict[str, float] = {}
    for qid, answers in ground_truths.items():
        if qid not in predictions:
            continue
        gold = [a for a in answers if normalize_answer(a)] or [""]
        exact[qid] = max(_v2_exact(a, predictions[qid]) for a in gold)
        f1[qid] = max(_v2_f1(a, predictions[qid]) for a in gold)
    return exact, f1


def apply_no_answer_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_answer: Mapping[str, bool], na_prob_thresh: float
) -> dict[str, float]:
    """``apply_no_ans_threshold``: a question whose no-answer score is above ``na_prob_thresh`` counts as
    predicted unanswerable: 1 when it is unanswerable, else 0; other questions keep their score."""
    return {
        qid: float(not has_answer[qid]) if na_probs[qid] > na_prob_thresh else float(score)
        for qid, score in scores.items()
    }


def find_best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """``find_best_thresh``: the threshold on the no-answer score that maximises the score, and that score.

    Start from "every question predicted unanswerable" (a score equal to the number of no-answer
    questions), then walk the questions in increasing no-answer score, switching each to its predicted
    answer: an answerable one adds its score, an unanswerable one loses 1 when the prediction is non-empty.
    Returns ``(100 * best / len(scores), the no-answer score of the question where the best was reached)``,
    0.0 when no switch improves on all-unanswerable.
    """
    current = best = float(sum(1 for v in has_answer.values() if not v))
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, best_thresh = current, na_probs[qid]
    return 100.0 * best / max(len(scores), 1), float(best_thresh)


def squad_v2_metrics(
    ground_truths: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """The figures ``evaluate-v2.0.py data.json predictions.json [--na-prob-file na_probs.json]`` prints.

    Args:
        ground_truths: question id -> gold answer texts; an empty list marks a no-answer question.
        predictions: question id -> predicted text ("" = no answer).
        na_probs: question id -> no-answer score (the null odds ``s_null - s_best``); None = all 0.
        na_prob_thresh: questions with a no-answer score above it count as predicted unanswerable
            (``--na-prob-thresh``, default 1.0).
    Returns:
        ``exact``, ``f1`` (percent) and ``total``; ``HasAns_exact/f1/total`` and ``NoAns_exact/f1/total`` when
        there are such questions; with ``na_probs`` also ``best_exact``, ``best_exact_thresh``, ``best_f1``,
        ``best_f1_thresh`` (``find_best_thresh``). Totals are counts of questions (as floats).
    """
    has_answer = {qid: bool(answers) for qid, answers in ground_truths.items()}
    probs = na_probs if na_probs is not None else dict.fromkeys(predictions, 0.0)
    exact_raw, f1_raw = squad_v2_raw_scores(ground_truths, predictions)
    exact = apply_no_answer_threshold(exact_raw, probs, has_answer, na_prob_thresh)
    f1 = apply_no_answer_threshold(f1_raw, probs, has_answer, na_prob_thresh)

    def block(qids: Sequence[str]) -> tuple[float, float, float]:
        n = len(qids)
        return 100.0 * sum(exact[q] for q in qids) / n, 100.0 * sum(f1[q] for q in qids) / n, float(n)

    out: dict[str, float] = {}
    out["exact"], out["f1"], out["total"] = block(list(exact)) if exact else (0.0, 0.0, 0.0)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact if has_answer[q] is wanted]
        if qids:
            out[f"{prefix}_exact"], out[f"{prefix}_f1"], out[f"{prefix}_total"] = block(qids)
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = find_best_threshold(predictions, exact_raw, probs, has_answer)
        out["best_f1"], out["best_f1_thresh"] = find_best_threshold(predictions, f1_raw, probs, has_answer)
    return out
