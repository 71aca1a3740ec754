"""The one reader of the tasks' and retrieval's JSON-lines inputs: every object with its line, a bad line named."""

from __future__ import annotations

import pytest

from bertprep.bert_model.json_lines import read_json_lines


def test_objects_come_with_their_line_numbers_blank_lines_and_a_bom_skipped(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes('\ufeff{"_id": "d0"}\n\n  \n{"_id": 1, "text": "x"}'.encode())
    assert list(read_json_lines(str(path), ("_id",))) == [(1, {"_id": "d0"}), (4, {"_id": 1, "text": "x"})]


@pytest.mark.parametrize(
    ("line", "keys", "message"),
    [
        ('{"query": "q"', (), ":2: not JSON (Expecting ',' delimiter); expected one object per line"),
        ('["q", "p"]', (), ":2: expected a JSON object, got list"),
        ('{"query": "q"}', ("query", "positive"), ':2: expected a JSON object with "query" and "positive"'),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(tmp_path, line, keys, message):
    path = tmp_path / "b.jsonl"
    path.write_text('{"query": "q", "positive": "p"}\n' + line + "\n")
    with pytest.raises(ValueError) as err:
        list(read_json_lines(str(path), keys))
    assert str(err.value) == f"{path}{message}"
