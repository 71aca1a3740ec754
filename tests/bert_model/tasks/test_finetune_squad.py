"""bert_model/tasks/squad.py: official EM/F1, SQuAD JSON reading, doc-stride windows, span selection."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertprep.bert_model.tasks.squad import SquadTask
from bertprep.bert_model.tasks.squad_data import SquadExample, parse_article_range, read_squad
from bertprep.bert_model.tasks.squad_eval import exact_match_score, f1_score, normalize_answer, squad_metrics
from bertprep.core.vocab_files import WordPieceTokenizer
from conftest import FIXTURES

FIXTURES = FIXTURES / "finetune"


@pytest.fixture(scope="module")
def tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab_file(str(FIXTURES / "vocab.txt"), do_lower_case=True)


# --------------------------------------------------------------------------------------------- EM and F1


def test_normalisation_is_the_official_one():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("Theatre") == "theatre"  # 'the' only as a whole word
    assert normalize_answer("U.S.-based") == "usbased"  # punctuation removed, not replaced by spaces
    assert normalize_answer("  A  ") == ""


def test_exact_match_and_f1_against_hand_computed_cases():
    assert exact_match_score("the Denver Broncos", "Denver Broncos.")
    assert not exact_match_score("Broncos", "Denver Broncos")
    # "broncos" vs "denver broncos": precision 1/1, recall 1/2 -> F1 2/3.
    assert f1_score("Broncos", "Denver Broncos") == pytest.approx(2 / 3)
    # "denver broncos won" vs "denver broncos": P 2/3, R 1 -> 0.8.
    assert f1_score("Denver Broncos won", "the Denver Broncos") == pytest.approx(0.8)
    assert f1_score("Paris", "London") == 0.0
    assert f1_score("the", "a") == 0.0  # both normalise to nothing: no common word


def test_metrics_take_the_best_ground_truth_and_count_missing_predictions():
    truths = {"q1": ["Denver Broncos", "The Denver Broncos"], "q2": ["1895"], "q3": ["Paris"], "q4": ["x y"]}
    predictions = {"q1": "Broncos", "q2": "1895", "q3": "London"}  # q4 missing: counts as 0
    m = squad_metrics(truths, predictions)
    assert m["exact_match"] == pytest.approx(100 * 1 / 4)
    assert m["f1"] == pytest.approx(100 * (2 / 3 + 1) / 4)


# ------------------------------------------------------------------------------------------------ reading


def test_reads_questions_with_article_ranges():
    path = str(FIXTURES / "squad_tiny.json")
    examples = read_squad(path)
    assert [e.qas_id for e in examples] == ["q1", "q2", "q3"]
    assert examples[0].context_index == examples[1].context_index != examples[2].context_index
    assert [e.qas_id for e in read_squad(path, articles=slice(1, None))] == ["q3"]
    assert len(read_squad(path, limit=2)) == 2
    assert parse_article_range("0:30") == slice(0, 30) and parse_article_range("30:") == slice(30, None)
    with pytest.raises(ValueError, match="START:END"):
        parse_article_range("first ten")


def test_malformed_json_gives_line_and_column(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [\n  {"title": "x",\n   "paragraphs": [}\n]}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json:3:\d+: invalid JSON"):
        read_squad(str(bad))


def test_missing_fields_give_their_json_path(tmp_path):
    data = json.loads((FIXTURES / "squad_tiny.json").read_text())
    del data["data"][1]["paragraphs"][0]["qas"][0]["question"]
    f = tmp_path / "x.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"data\[1\]\.paragraphs\[0\]\.qas\[0\]: missing field 'question'"):
        read_squad(str(f))
    data = json.loads((FIXTURES / "squad_tiny.json").read_text())
    data["data"][0]["paragraphs"][0]["qas"][1]["answers"] = []
    f.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"qas\[1\]: no answers"):
        read_squad(str(f))
    assert len(read_squad(str(f), with_labels=False)) == 3  # a test file needs no answers


def test_real_dev_file(shared_data):
    path = str(shared_data / "squad" / "dev-v1.1.json")
    assert len(read_squad(path)) == 10570
    train, held_out = read_squad(path, articles=slice(0, 30)), read_squad(path, articles=slice(30, None))
    assert len(train) + len(held_out) == 10570
    assert not {e.context for e in train} & {e.context for e in held_out}


# ----------------------------------------------------------------------------------------------- features


def _long_example() -> SquadExample:
    words = [f"w{i % 10}" for i in range(40)]
    words[31] = "paris"  # the answer, deep in the context
    context = " ".join(words)
    start = context.index("paris")
    return SquadExample("q", "what is the capital", context, [{"text": "paris", "answer_start": start}], 0)


def test_doc_stride_windows_and_answer_positions(tokenizer):
    task = SquadTask(max_seq_length=24, doc_stride=8, max_query_length=8)
    example = _long_example()
    features = task.featurize([example], tokenizer)
    # question "what is the capital" = 4 pieces; 24 - 4 - 3 = 17 context pieces per window; the context
    # has 39 words of 2 pieces (w + ##N) and "paris" = 79 pieces; windows start at 0, 8, ..., 64 (the
    # first whose 17 pieces reach the end).
    assert len(features) == 9
    found = 0
    for f in features:
        ids = f["input_ids"]
        assert len(ids) <= 24 and ids[0] == tokenizer.cls_token_id
        assert f["token_type_ids"][:6] == [0] * 6 and f["token_type_ids"][6] == 1
        if f["start_positions"]:
            s, e = f["start_positions"], f["end_positions"]
            assert example.context[f["offsets"][s][0] : f["offsets"][e][1]] == "paris"
            found += 1
        else:
            assert f["end_positions"] == 0  # answer not (wholly) in this window: both point at [CLS]
    assert found >= 1
    # Each context piece is the maximum-context piece of exactly one window.
    counts: dict[tuple[int, int], int] = {}
    for f in features:
        for offset, is_max in zip(f["offsets"], f["max_context"], strict=True):
            if offset is not None and is_max:
                counts[offset] = counts.get(offset, 0) + 1
    assert len(counts) == 79 and set(counts.values()) == {1}


def test_answer_offsets_map_pieces_of_an_answer_inside_a_word(tokenizer):
    task = SquadTask(max_seq_length=64, doc_stride=32, max_query_length=16)
    examples = read_squad(str(FIXTURES / "squad_tiny.json"))
    features = task.featurize(examples, tokenizer)
    for f in features:
        e = examples[f["example_index"]]
        s, t = f["start_positions"], f["end_positions"]
        assert e.context[f["offsets"][s][0] : f["offsets"][t][1]] == e.answers[0]["text"]


def test_best_span_obeys_max_answer_length_and_context(tokenizer):
    task = SquadTask(max_seq_length=64, doc_stride=32, max_query_length=16, max_answer_length=3)
    (example,) = read_squad(str(FIXTURES / "squad_tiny.json"), limit=1)
    (feature,) = task.featurize([example], tokenizer, with_labels=False)
    n = len(feature["input_ids"])
    start, end = np.zeros(n), np.zeros(n)
    start[0] = end[0] = 50.0  # [CLS] is never an answer in SQuAD v1.1
    first = feature["offsets"].index(next(o for o in feature["offsets"] if o is not None))
    start[first + 1], end[first + 2] = 5.0, 5.0  # "denver broncos": valid, score 10
    start[first + 3], end[first + 9] = 9.0, 9.0  # 7 pieces: longer than max_answer_length
    (prediction,) = task.predictions([example], [feature], [{"start_logits": start, "end_logits": end}])
    assert prediction == "Denver Broncos"
    assert task.metric_values([example], [prediction]) == {"exact_match": 100.0, "f1": 100.0}


def test_prediction_file_is_the_official_format(tmp_path):
    examples = read_squad(str(FIXTURES / "squad_tiny.json"))
    SquadTask().write_predictions(str(tmp_path / "p.json"), examples, ["Denver", "1895", ""])
    assert json.loads((tmp_path / "p.json").read_text()) == {"q1": "Denver", "q2": "1895", "q3": ""}


def test_settings_are_checked():
    with pytest.raises(ValueError, match="max_query_length"):
        SquadTask(max_seq_length=64, max_query_length=64)
    with pytest.raises(ValueError, match="doc_stride must be positive"):
        SquadTask(doc_stride=0)
