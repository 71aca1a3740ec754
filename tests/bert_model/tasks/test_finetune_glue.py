"""bert_model/tasks/glue.py: GLUE TSV reading (presets, columns, malformed lines), features and GLUE metrics."""

from __future__ import annotations

import numpy as np
import pytest

from bertprep.bert_model.tasks.glue import GLUE_TASKS, GlueExample, GlueTask, glue_metrics, truncate_seq_pair
from bertprep.core.vocab_files import WordPieceTokenizer
from conftest import FIXTURES

FIXTURES = FIXTURES / "finetune"


@pytest.fixture(scope="module")
def tokenizer() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab_file(str(FIXTURES / "vocab.txt"), do_lower_case=True)


# ------------------------------------------------------------------------------------------------ reading


def test_mrpc_layout_with_bom_and_raw_quotes():
    task = GlueTask.from_preset("mrpc")
    examples = task.read(str(FIXTURES / "mrpc_like.tsv"))
    assert [e.label for e in examples] == ["1", "0", "1"]
    # The BOM does not hide the first column name, and quotes are text, not CSV quoting.
    assert examples[0].text_a == 'He said "the movie was good" .'
    assert examples[0].text_b == 'He says the film was "good" .'
    assert [e.line for e in examples] == [2, 3, 4] and [e.index for e in examples] == [0, 1, 2]


def test_columns_by_index_without_header():
    task = GlueTask.from_preset("cola")
    examples = task.read(str(FIXTURES / "cola_like.tsv"))
    assert [(e.text_a, e.label) for e in examples] == [
        ("The dog ran .", "1"),
        ("Dog the ran .", "0"),
        ("Mary said that John won .", "1"),
    ]
    assert examples[0].text_b is None
    # Explicit options give the same as the preset: any TSV works.
    custom = GlueTask(text_a_column="3", label_column="1", header=False)
    custom.prepare(custom.read(str(FIXTURES / "cola_like.tsv")))
    assert custom.labels == ["0", "1"]


def test_too_few_fields_names_file_and_line():
    task = GlueTask.from_preset("sst2")
    with pytest.raises(ValueError, match=r"bad_fields\.tsv:4: expected at least 2 tab-separated fields, found 1"):
        task.read(str(FIXTURES / "bad_fields.tsv"))
    # The lines before the bad one are fine (labels may repeat): a limit stops before it.
    assert len(task.read(str(FIXTURES / "bad_fields.tsv"), limit=2)) == 2


def test_unknown_label_and_non_numeric_regression_label(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\nfine\t1\nfine\tpositive\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.tsv:3: label 'positive' is not one of \['0', '1'\]"):
        GlueTask.from_preset("sst2").read(str(bad))
    reg = tmp_path / "reg.tsv"
    reg.write_text("sentence1\tsentence2\tscore\na\tb\t3.5\na\tb\thigh\n", encoding="utf-8")
    task = GlueTask(
        text_a_column="sentence1",
        text_b_column="sentence2",
        label_column="score",
        is_regression=True,
        metrics=["pearson"],
    )
    with pytest.raises(ValueError, match=r"reg\.tsv:3: label 'high' is not a number"):
        task.read(str(reg))


def test_missing_named_column_lists_the_header(tmp_path):
    f = tmp_path / "x.tsv"
    f.write_text("text\ty\nhello\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no column 'sentence' in the header \(text, y\)"):
        GlueTask.from_preset("sst2").read(str(f))


def test_unlabelled_test_file_reads_without_labels(tmp_path):
    f = tmp_path / "test.tsv"
    f.write_text("index\tsentence\n0\tgood movie\n1\tbad film\n", encoding="utf-8")
    examples = GlueTask.from_preset("sst2").read(str(f), with_labels=False)
    assert [(e.text_a, e.label) for e in examples] == [("good movie", None), ("bad film", None)]
    with pytest.raises(ValueError, match="no column 'label'"):
        GlueTask.from_preset("sst2").read(str(f))


def test_presets_cover_every_glue_task():
    assert set(GLUE_TASKS) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"}
    assert GlueTask.from_preset("stsb").is_regression and GlueTask.from_preset("stsb").num_labels == 1
    assert GlueTask.from_preset("mnli").num_labels == 3
    assert GlueTask.from_preset("cola").metric_for_best == "matthews_corrcoef"
    assert GlueTask.from_preset("mrpc").metrics == ["f1", "accuracy"]
    with pytest.raises(ValueError, match="unknown GLUE task 'sst'"):
        GlueTask.from_preset("sst")
    with pytest.raises(ValueError, match="regression metrics"):
        GlueTask(text_a_column=0, metrics=["pearson"])


def test_real_glue_files(shared_data):
    mrpc = GlueTask.from_preset("mrpc")
    train = mrpc.read(str(shared_data / "glue" / "MRPC" / "train.tsv"))
    dev = mrpc.read(str(shared_data / "glue" / "MRPC" / "dev.tsv"))
    assert (len(train), len(dev)) == (3668, 408)
    assert any('"' in e.text_a or '"' in (e.text_b or "") for e in train)  # raw quotes survive
    sst2 = GlueTask.from_preset("sst2")
    assert len(sst2.read(str(shared_data / "glue" / "SST-2" / "dev.tsv"))) == 872
    assert {e.label for e in dev} == {"0", "1"}


# ----------------------------------------------------------------------------------------------- features


def test_pair_features_layout_and_truncation(tokenizer):
    task = GlueTask.from_preset("mrpc", max_seq_length=12)
    examples = [GlueExample("the cat ran", "the dog ran very red blue green one two three", "1", 2, 0)]
    (f,) = task.featurize(examples, tokenizer)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    ids = f["input_ids"]
    assert len(ids) == 12 and ids[0] == cls_id and ids.count(sep_id) == 2 and ids[-1] == sep_id
    first_sep = ids.index(sep_id)
    # The longer text lost pieces from its end; the shorter one is whole.
    assert tokenizer.tokenizer.decode(ids[1:first_sep]) == "the cat ran"
    assert f["token_type_ids"] == [0] * (first_sep + 1) + [1] * (12 - first_sep - 1)
    assert f["labels"] == 1


def test_truncate_seq_pair_removes_from_the_longer():
    a, b = list(range(7)), list(range(3))
    truncate_seq_pair(a, b, 6)
    assert (a, b) == ([0, 1, 2], [0, 1, 2])
    a, b = [1, 2], [3, 4, 5]
    truncate_seq_pair(a, b, 3)
    assert (a, b) == ([1, 2], [3])  # on a tie the second text loses a piece, as run_classifier.py


def test_single_sentence_regression_features(tokenizer):
    task = GlueTask(text_a_column=0, label_column=1, header=False, is_regression=True, metrics=["spearman"])
    (f,) = task.featurize([GlueExample("good movie", None, 4.25, 1, 0)], tokenizer)
    assert f["labels"] == 4.25 and set(f["token_type_ids"]) == {0}
    assert task.id2label == {0: "score"}


# ------------------------------------------------------------------------------------------------ metrics


def test_metrics_against_hand_computed_values():
    labels = np.array([1, 1, 1, 0, 0, 0, 1, 0])
    predictions = np.array([1, 1, 0, 0, 0, 1, 1, 1])
    # TP=3, FN=1, TN=2, FP=2: accuracy 5/8; precision 3/5, recall 3/4 -> F1 = 2/3;
    # MCC = (3*2 - 2*1) / sqrt(5 * 4 * 3 * 4) = 4 / sqrt(240).
    m = glue_metrics(["accuracy", "f1", "matthews_corrcoef"], predictions, labels)
    assert m["accuracy"] == pytest.approx(5 / 8)
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["matthews_corrcoef"] == pytest.approx(4 / np.sqrt(240))


def test_correlations_against_hand_computed_values():
    labels = np.array([1.0, 2.0, 3.0, 4.0])
    predictions = np.array([1.0, 3.0, 2.0, 5.0])
    # Pearson: deviations (-1.5,-.5,.5,1.5) and (-1.75,.25,-.75,2.25): cov sum 5.5, sqrt(5 * 8.75).
    # Spearman: ranks (1,2,3,4) vs (1,3,2,4): 1 - 6 * 2 / (4 * 15) = 0.8.
    m = glue_metrics(["pearson", "spearman"], predictions, labels)
    assert m["pearson"] == pytest.approx(5.5 / np.sqrt(5 * 8.75))
    assert m["spearman"] == pytest.approx(0.8)
    assert glue_metrics(["pearson"], np.ones(4), labels)["pearson"] == 0.0  # constant: defined as 0


def test_predictions_and_submission_file(tmp_path, tokenizer):
    task = GlueTask.from_preset("sst2")
    examples = [GlueExample("good", None, "1", 2, 0), GlueExample("bad", None, "0", 3, 1)]
    features = task.featurize(examples, tokenizer, with_labels=False)
    outputs = [{"logits": np.array([0.1, 2.0])}, {"logits": np.array([0.3, -1.0])}]
    predictions = task.predictions(examples, features, outputs)
    assert predictions == ["1", "0"]
    assert task.metric_values(examples, predictions) == {"accuracy": 1.0}
    task.write_predictions(str(tmp_path / "p.tsv"), examples, predictions)
    assert (tmp_path / "p.tsv").read_text() == "index\tprediction\n0\t1\n1\t0\n"
