"""SQuAD v2.0: no-answer questions, the null score at [CLS], tau, and the official evaluate-v2.0.py figures.

Every expected figure below is computed by hand in the comments from the definitions of the official
script (normalize_answer, get_raw_scores, apply_no_ans_threshold, make_eval_dict, find_best_thresh).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bertprep.bert_model.tasks.finetune import FinetuneConfig, finetune
from bertprep.bert_model.tasks.registry import make_task
from bertprep.bert_model.tasks.squad import SquadAnswer, SquadTask, null_odds_path
from bertprep.bert_model.tasks.squad_data import SquadExample, read_squad
from bertprep.bert_model.tasks.squad_eval import find_best_threshold, squad_v2_metrics, squad_v2_raw_scores
from bertprep.cli.main import cli
from bertprep.core.vocab_files import WordPieceTokenizer
from conftest import FIXTURES
from finetune_factory import predict_args, write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FIXTURES = FIXTURES / "finetune"
VOCAB = FIXTURES / "vocab.txt"

# Gold answers ([] = no answer), predictions and null odds of a 5-question synthetic set.
TRUTHS = {"a1": ["Denver Broncos", "The Denver Broncos"], "a2": ["1895"], "a3": ["Paris"], "n1": [], "n2": []}
PREDS = {"a1": "Broncos", "a2": "1895", "a3": "", "n1": "", "n2": "Paris"}
ODDS = {"a2": -2.0, "a1": -1.0, "n2": 0.5, "a3": 2.0, "n1": 3.0}


def test_raw_scores_follow_the_official_definitions():
    exact, f1 = squad_v2_raw_scores(TRUTHS, PREDS)
    # a1: "broncos" vs "denver broncos": P 1, R 1/2 -> F1 2/3; not exact. a2: exact. a3: "" vs "paris": 0.
    # n1: "" vs [""]: exact 1 and F1 1 (both sides empty). n2: "paris" vs [""]: 0 and 0.
    assert exact == {"a1": 0, "a2": 1, "a3": 0, "n1": 1, "n2": 0}
    assert f1 == pytest.approx({"a1": 2 / 3, "a2": 1.0, "a3": 0.0, "n1": 1.0, "n2": 0.0})
    # A gold answer that normalises to nothing ("the") is dropped; with none left the gold is [""].
    exact, f1 = squad_v2_raw_scores({"q": ["The", "a"]}, {"q": ""})
    assert exact == {"q": 1} and f1 == {"q": 1.0}
    # Missing predictions are left out, as in the official script.
    assert set(squad_v2_raw_scores(TRUTHS, {"a1": "x"})[0]) == {"a1"}


def test_every_official_figure_matches_a_hand_computation():
    m = squad_v2_metrics(TRUTHS, PREDS, ODDS)
    # na_prob_thresh 1.0: a3 (2.0) and n1 (3.0) count as "no answer": a3 -> 0, n1 -> 1; the rest keep their raw
    # scores. exact: a1 0 + a2 1 + a3 0 + n1 1 + n2 0 = 2 of 5; F1: 2/3 + 1 + 0 + 1 + 0 = 8/3 of 5.
    assert m["exact"] == pytest.approx(40.0)
    assert m["f1"] == pytest.approx(100 * (8 / 3) / 5)
    assert m["total"] == 5
    # HasAns = a1, a2, a3: exact 1/3, F1 (2/3 + 1) / 3. NoAns = n1, n2: exact 1/2, F1 1/2.
    assert m["HasAns_exact"] == pytest.approx(100 / 3)
    assert m["HasAns_f1"] == pytest.approx(100 * (5 / 3) / 3)
    assert m["HasAns_total"] == 3
    assert m["NoAns_exact"] == pytest.approx(50.0) and m["NoAns_f1"] == pytest.approx(50.0)
    assert m["NoAns_total"] == 2
    # find_best_thresh: start at 2 (two no-answer questions), walk by odds a2 (-2), a1 (-1), n2 (0.5), a3 (2),
    # n1 (3). exact: a2 +1 -> 3 (best, thresh -2); a1 +0; n2 -1 (non-empty prediction); a3 +0; n1 +0.
    # F1: a2 +1 -> 3 (best at -2); a1 +2/3 -> 11/3 (best at -1); n2 -1; a3 +0; n1 +0.
    assert m["best_exact"] == pytest.approx(60.0) and m["best_exact_thresh"] == -2.0
    assert m["best_f1"] == pytest.approx(100 * (11 / 3) / 5) and m["best_f1_thresh"] == -1.0
    # Without a null-odds file: no best_* figures, and nothing is thresholded (all odds 0 <= 1.0).
    plain = squad_v2_metrics(TRUTHS, PREDS)
    assert "best_f1" not in plain
    assert plain["exact"] == pytest.approx(40.0)  # n1 was "" anyway and a3 scores 0 either way
    # A lower --na-prob-thresh turns n2 (0.5) into a correct no-answer: exact 3 of 5.
    assert squad_v2_metrics(TRUTHS, PREDS, ODDS, na_prob_thresh=0.0)["exact"] == pytest.approx(60.0)


def test_best_threshold_is_zero_when_answering_nothing_is_best():
    truths = {"n1": [], "n2": [], "a1": ["x"]}
    preds = {"n1": "y", "n2": "z", "a1": "w"}
    assert find_best_threshold(
        preds,
        squad_v2_raw_scores(truths, preds)[0],
        {"n1": 0, "n2": 1, "a1": 2},
        {"n1": False, "n2": False, "a1": True},
    ) == (pytest.approx(200 / 3), 0.0)


# ------------------------------------------------------------------------------------------------ reading


def _v2_file(path: Path) -> Path:
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "John was born in Paris.",
                        "qas": [
                            {
                                "id": "p0a",
                                "question": "where was john born",
                                "is_impossible": False,
                                "answers": [{"text": "Paris", "answer_start": 17}],
                            },
                            {
                                "id": "p0n",
                                "question": "where did mary die",
                                "is_impossible": True,
                                "answers": [],
                                "plausible_answers": [{"text": "Paris", "answer_start": 17}],
                            },
                        ],
                    },
                    {
                        "context": "Mary lived in London.",
                        "qas": [
                            {
                                "id": "p1a",
                                "question": "where did mary live",
                                "is_impossible": False,
                                "answers": [{"text": "London", "answer_start": 14}],
                            }
                        ],
                    },
                    {
                        "context": "The river is long.",
                        "qas": [{"id": "p2n", "question": "who owns the river", "is_impossible": True, "answers": []}],
                    },
                ],
            }
        ],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_reads_no_answer_questions_and_detects_the_version(tmp_path):
    path = str(_v2_file(tmp_path / "v2.json"))
    examples = read_squad(path)
    assert [(e.qas_id, e.is_impossible, len(e.answers)) for e in examples] == [
        ("p0a", False, 1),
        ("p0n", True, 0),
        ("p1a", False, 1),
        ("p2n", True, 0),
    ]
    # Read as v1.1, the no-answer question is an error that names the override.
    with pytest.raises(ValueError, match=r"qas\[1\]: no answers.*--squad-version 2.0"):
        read_squad(path, version="1.1")
    # A split by paragraph: disjoint passages.
    train = read_squad(path, paragraphs=slice(0, 2))
    held_out = read_squad(path, paragraphs=slice(2, None))
    assert [e.qas_id for e in train] == ["p0a", "p0n", "p1a"] and [e.qas_id for e in held_out] == ["p2n"]
    task = SquadTask()
    task.read(path)
    assert task.is_v2 and task.to_json()["version"] == "2.0"
    assert not SquadTask(version="1.1").is_v2
    with pytest.raises(ValueError, match="version must be one of"):
        SquadTask(version="3.0")


def test_no_answer_training_targets_point_at_cls(tmp_path):
    tokenizer = WordPieceTokenizer.from_vocab_file(str(VOCAB), do_lower_case=True)
    examples = read_squad(str(_v2_file(tmp_path / "v2.json")))
    features = SquadTask(max_seq_length=32, max_query_length=8).featurize(examples, tokenizer)
    by_id = {examples[f["example_index"]].qas_id: f for f in features}
    assert by_id["p0n"]["start_positions"] == by_id["p0n"]["end_positions"] == 0
    assert by_id["p2n"]["start_positions"] == 0
    f = by_id["p0a"]
    assert examples[0].context[f["offsets"][f["start_positions"]][0] : f["offsets"][f["end_positions"]][1]] == "Paris"


def _logits(feature: dict, null: float, span: tuple[int, int] | None, span_score: float) -> dict:
    n = len(feature["input_ids"])
    start, end = np.full(n, -10.0), np.full(n, -10.0)
    start[0] = end[0] = null / 2
    if span is not None:
        start[span[0]], end[span[1]] = span_score / 2, span_score / 2
    return {"start_logits": start, "end_logits": end}


def test_null_score_threshold_and_choice_of_tau(tmp_path):
    tokenizer = WordPieceTokenizer.from_vocab_file(str(VOCAB), do_lower_case=True)
    examples = read_squad(str(_v2_file(tmp_path / "v2.json")))
    task = SquadTask(max_seq_length=32, max_query_length=8, version="2.0", null_score_diff_threshold=0.0)
    features = task.featurize(examples, tokenizer, with_labels=False)

    def answer_span(k: int, word: str) -> tuple[int, int]:
        f = features[k]
        context = examples[f["example_index"]].context
        i = next(j for j, o in enumerate(f["offsets"]) if o and context[o[0] : o[1]].lower() == word)
        return i, i

    # s_null = S.C + E.C; s_best = best span's start + end. null odds = s_null - s_best.
    outputs = [
        _logits(features[0], 1.0, answer_span(0, "paris"), 4.0),  # odds -3: answer "Paris"
        _logits(features[1], 2.0, answer_span(1, "paris"), 1.0),  # odds +1: no answer (right)
        _logits(features[2], 0.0, answer_span(2, "london"), 0.5),  # odds -0.5: "London"
        _logits(features[3], 0.0, answer_span(3, "river"), 1.0),
    ]  # odds -1: "river" (wrong)
    answers = task.predictions(examples, features, outputs)
    assert [a.text for a in answers] == ["Paris", "", "London", "river"]
    assert [a.null_odds for a in answers] == pytest.approx([-3.0, 1.0, -0.5, -1.0])
    values = task.metric_values(examples, answers)
    assert values["exact"] == pytest.approx(75.0) and values["null_score_diff_threshold"] == 0.0
    # With tau = -2 only p0a keeps its answer: exact = p0a + p0n + p2n = 3/4 as well, London lost.
    task.null_score_diff_threshold = -2.0
    assert [a.text for a in task.predictions(examples, features, outputs)] == ["Paris", "", "", ""]
    # No tau set: chosen as best_f1_thresh over the non-null answers. Walk by odds: p0a (-3) +1 -> 3,
    # p2n (-1) -1 -> 2, p1a (-0.5) +1 -> 3 (not better), p0n (1) -1. Best 3 first reached at -3.
    task.null_score_diff_threshold = None
    answers = task.predictions(examples, features, outputs)
    assert task.threshold == -3.0 and task.to_json()["null_score_diff_threshold"] == -3.0
    assert [a.text for a in answers] == ["Paris", "", "", ""]
    out = tmp_path / "pred.json"
    task.write_predictions(str(out), examples, answers)
    ((path, write),) = task.extra_prediction_files(str(out), examples, answers).items()
    write(path)
    assert json.loads(out.read_text()) == {"p0a": "Paris", "p0n": "", "p1a": "", "p2n": ""}
    assert path == null_odds_path(str(out)) == str(tmp_path / "pred.null_odds.json")
    assert json.loads(Path(path).read_text()) == pytest.approx({"p0a": -3.0, "p0n": 1.0, "p1a": -0.5, "p2n": -1.0})


def test_v1_predictions_have_no_null_odds():
    example = SquadExample("q", "who", "John went home.", [{"text": "John", "answer_start": 0}], 0)
    assert SquadTask(version="1.1").extra_prediction_files("p.json", [example], ["John"]) == {}
    assert isinstance(SquadAnswer("x", 0.0), tuple)


# ------------------------------------------------------------------------------------------- end to end


def _tiny_checkpoint(run: Path) -> str:
    write_tiny_checkpoint(run)
    return str(run)


def _answerable_or_not(path: Path, n: int, seed: int) -> None:
    """'who said' is answered by the name in the passage; passages without a name have no answer."""
    rng = random.Random(seed)
    filler = "the a is was in of and to it this that he she they city river year one two three".split()
    articles = []
    for k in range(n):
        words = rng.sample(filler, 7)
        has_answer = rng.random() < 0.5
        name = rng.choice(["john", "mary"])
        if has_answer:
            words.insert(rng.randrange(8), name)
        context = " ".join(words)
        qa = {
            "id": f"q{k}",
            "question": "who said",
            "is_impossible": not has_answer,
            "answers": [{"text": name, "answer_start": context.index(name)}] if has_answer else [],
        }
        articles.append({"title": str(k), "paragraphs": [{"context": context, "qas": [qa]}]})
    path.write_text(json.dumps({"version": "v2.0", "data": articles}), encoding="utf-8")


@pytest.mark.slow
def test_finetune_learns_when_to_abstain_and_predict_reuses_tau(tmp_path):
    init = _tiny_checkpoint(tmp_path / "pretrain")
    _answerable_or_not(tmp_path / "train.json", 192, 0)
    _answerable_or_not(tmp_path / "dev.json", 48, 1)
    config = FinetuneConfig(
        train_file=str(tmp_path / "train.json"),
        eval_file=str(tmp_path / "dev.json"),
        output_dir=str(tmp_path / "run"),
        init_from=init,
        learning_rate=5e-3,
        batch_size=16,
        num_train_epochs=8,
        warmup_proportion=0.0,
        progress=False,
        seed=7,
    )
    result = finetune(config, make_task("squad", max_seq_length=24, doc_stride=8, max_query_length=4))
    m = result.best_metrics
    assert m["HasAns_exact"] >= 90.0 and m["NoAns_exact"] >= 90.0, m
    assert {"best_f1", "best_f1_thresh", "NoAns_total"} <= set(m)
    run = tmp_path / "run"
    assert set(json.loads((run / "eval_predictions.json").read_text()).values()) <= {"john", "mary", ""}
    assert len(json.loads((run / "eval_predictions.null_odds.json").read_text())) == 48
    recorded = json.loads((run / "best" / "finetune.json").read_text())
    assert recorded["version"] == "2.0" and recorded["null_score_diff_threshold"] == m["null_score_diff_threshold"]
    out = CliRunner().invoke(
        cli,
        predict_args(run, tmp_path / "dev.json", tmp_path / "p.json"),
    )
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "p.json").read_text()) == json.loads((run / "eval_predictions.json").read_text())
    assert (tmp_path / "p.null_odds.json").exists() and "HasAns_exact" in out.output
