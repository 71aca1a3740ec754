"""The ``jsonl`` format (``readers/text.py`` ``read_jsonl``): a text field per line, paragraphs segmented into
sentences."""

from __future__ import annotations

import json

import pytest

from bertprep.pipeline.readers import InputError
from readers_factory import FIXTURES, read_all


def test_jsonl_segments_paragraphs_and_counts_empty_and_one_sentence_documents():
    docs, stats = read_all(FIXTURES / "docs.jsonl")
    assert stats.formats == {"jsonl": 1}
    assert [(d.line, d.sentences) for d in docs] == [
        (1, ["Dr. Watson arrived at noon.", "He was late.", "A new paragraph starts here."]),
        (4, ["One sentence only."]),
    ]
    assert [d.ordinal for d in docs] == [0, 1]
    assert stats.skipped_documents == {"empty": 1}
    assert stats.one_sentence_documents == 1


def test_jsonl_text_field_option(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"content": "Hello there. General Kenobi."}) + "\n")
    docs, _ = read_all(path, "jsonl", text_field="content")
    assert docs[0].sentences == ["Hello there.", "General Kenobi."]
    with pytest.raises(
        InputError, match=r"c\.jsonl:1: the JSON object has no field 'text' \(its fields: content\).*--text-field"
    ):
        read_all(path, "jsonl")


def test_jsonl_declared_on_prose_names_file_line_and_what_to_do(tmp_path):
    path = tmp_path / "prose.txt"
    path.write_text('{"text": "fine."}\nIt was a dark and stormy night.\n')
    with pytest.raises(InputError, match=r"prose\.txt:2: not a JSON object .*--input-format text .*or bert"):
        read_all(path, "jsonl")


def test_jsonl_non_object_and_non_string_text_are_errors(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(InputError, match=r"list\.jsonl:1: a JSON list, not an object"):
        read_all(path, "jsonl")
    path.write_text('{"text": 3}\n')
    with pytest.raises(InputError, match=r"list\.jsonl:1: field 'text' holds a int, not a string; .*--text-field"):
        read_all(path, "jsonl")
