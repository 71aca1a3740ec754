"""bert_model/tasks/ner.py: CoNLL reading (boundaries, malformed lines), first-piece labels, seqeval F1."""

from __future__ import annotations

import numpy as np
import pytest

from bertprep.bert_model.tasks.ner import NerExample, NerTask, ner_metrics, read_conll
from bertprep.core.vocab_files import WordPieceTokenizer
from conftest import FIXTURES

FIXTURES = FIXTURES / "finetune"


@pytest.fixture(scope="module")
def tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab_file(str(FIXTURES / "vocab.txt"), do_lower_case=True)


def test_sentence_boundaries_include_whitespace_only_lines_and_docstart():
    examples = read_conll(str(FIXTURES / "ner_tiny.conll"))
    assert [e.words for e in examples] == [
        ["Token"],
        ["John", "lives", "in", "New", "York"],
        ["Apple", "said"],
        ["Mary", "ran"],
    ]
    assert examples[1].tags == ["B-person", "O", "O", "B-location", "I-location"]
    assert [e.line for e in examples] == [1, 3, 9, 14]
    assert len(read_conll(str(FIXTURES / "ner_tiny.conll"), limit=2)) == 2


@pytest.mark.parametrize(
    "content, message",
    [
        ("John\tB-person\nlives\n", r"x\.conll:2: no tag in 'lives'"),
        ("John\tB-person\n\tO\n", r"x\.conll:2: empty token"),
        ("John\tPER\n", r"x\.conll:1: tag 'PER' is not a BIO tag"),
        ("John\tB-person\nran\tE-person\n", r"x\.conll:2: tag 'E-person'"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, content, message):
    f = tmp_path / "x.conll"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_conll(str(f))


def test_space_separated_columns_and_unlabelled_files(tmp_path):
    conll2003 = tmp_path / "c.txt"
    conll2003.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n", encoding="utf-8")
    (e,) = read_conll(str(conll2003))
    assert e.words == ["EU", "rejects"] and e.tags == ["B-ORG", "O"]
    plain = tmp_path / "p.txt"
    plain.write_text("John\nran\n\nMary\n", encoding="utf-8")
    examples = read_conll(str(plain), with_labels=False)
    assert [e.words for e in examples] == [["John", "ran"], ["Mary"]] and examples[0].tags is None


def test_real_wnut17_files(shared_data):
    train = read_conll(str(shared_data / "wnut17" / "wnut17train.conll"))
    dev = read_conll(str(shared_data / "wnut17" / "emerging.dev.conll"))
    assert (len(train), len(dev)) == (3394, 1009)  # the data README's counts (TAB-only lines are boundaries)
    assert sum(len(e.words) for e in train) == 62730
    task = NerTask()
    task.prepare(train)
    assert len(task.labels) == 13 and task.labels[0] == "O"


def test_labels_sit_on_the_first_piece_only(tokenizer):
    task = NerTask(labels=["O", "B-person", "I-person", "B-location", "I-location"], max_seq_length=32)
    example = NerExample(["Mary", "running", "johns", "xq"], ["B-person", "O", "B-location", "O"], 1)
    (f,) = task.featurize([example], tokenizer)
    pieces = [tokenizer.tokens[i] for i in f["input_ids"]]
    assert pieces == ["[CLS]", "mary", "running", "john", "##s", "x", "##q", "[SEP]"]
    assert f["word_starts"] == [1, 2, 3, 5]
    assert f["labels"] == [-100, 1, 0, 3, -100, 0, -100, -100]


def test_truncated_words_are_predicted_o(tokenizer):
    task = NerTask(labels=["O", "B-person"], max_seq_length=5)  # room for 3 pieces
    example = NerExample(["Mary", "john", "cats", "dog"], ["B-person", "B-person", "O", "B-person"], 1)
    (f,) = task.featurize([example], tokenizer, with_labels=False)
    assert len(f["input_ids"]) == 5 and f["word_starts"] == [1, 2, 3, None]
    logits = np.zeros((5, 2))
    logits[1:4, 1] = 1.0  # B-person on every kept piece
    (tags,) = task.predictions([example], [f], [{"logits": logits}])
    assert tags == ["B-person", "B-person", "B-person", "O"]


def test_entity_f1_against_hand_computed_case():
    gold = [["B-person", "I-person", "O", "B-location"], ["B-group", "O"]]
    pred = [["B-person", "I-person", "O", "O"], ["B-group", "B-location"]]
    # Gold entities: person, location, group (3). Predicted: person, group, location (3); correct: 2.
    m = ner_metrics(gold, pred)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    # A boundary error is a miss at entity level: B-person alone vs B-person I-person.
    assert ner_metrics([["B-person", "I-person"]], [["B-person", "O"]])["f1"] == 0.0


def test_prediction_file_is_conll(tmp_path):
    examples = read_conll(str(FIXTURES / "ner_tiny.conll"), limit=2)
    NerTask().write_predictions(str(tmp_path / "p.conll"), examples, [["O"], ["B-person", "O", "O", "O", "O"]])
    assert (tmp_path / "p.conll").read_text() == "Token\tO\n\nJohn\tB-person\nlives\tO\nin\tO\nNew\tO\nYork\tO\n\n"
    assert read_conll(str(tmp_path / "p.conll"))[1].tags == ["B-person", "O", "O", "O", "O"]
