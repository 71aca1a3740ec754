"""Format auto-detection (``readers/detect.py``): the format of each file, logged, and the hint for a structured
file read as text."""

from __future__ import annotations

import gzip
import logging

from bertprep.pipeline.readers import detect_format
from readers_factory import FIXTURES, read_all


def test_detect_format_on_the_shared_data(shared_data, caplog):
    expected = {}
    for path in sorted((shared_data / "gutenberg").iterdir()):
        expected[path] = "text"
    for path in sorted((shared_data / "wikipedia" / "wikiextractor-featured" / "AA").iterdir()):
        expected[path] = "wikiextractor"
    expected[shared_data / "wikipedia" / "wikiextractor-json" / "wiki_00"] = "wikiextractor-json"
    expected[shared_data / "samples" / "sample_text.txt"] = "bert"
    for path in sorted((shared_data / "golden").glob("*.txt")):
        expected[path] = "bert"
    assert {p: detect_format(str(p)) for p in expected} == expected


def test_detect_format_on_fixtures_and_extensions(tmp_path):
    assert detect_format(str(FIXTURES / "docs.jsonl")) == "jsonl"
    assert detect_format(str(FIXTURES / "wiki_docs.json")) == "wikiextractor-json"
    assert detect_format(str(FIXTURES / "wiki_docs.txt")) == "wikiextractor"
    assert detect_format(str(FIXTURES / "small_book.txt")) == "text"
    no_ext = tmp_path / "records"
    no_ext.write_text('{"body": "A text."}\n')
    assert detect_format(str(no_ext)) == "jsonl"
    gz = tmp_path / "records.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"text": "A text."}\n'))
    assert detect_format(str(gz)) == "jsonl"
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert detect_format(str(empty)) == "text"


def test_detected_format_is_logged_per_file(caplog):
    with caplog.at_level(logging.INFO, logger="bertprep.pipeline.readers"):
        read_all(FIXTURES / "docs.jsonl")
    assert any("docs.jsonl: input format jsonl (detected)" in r.message for r in caplog.records)


def test_structured_file_read_as_plain_text_gets_a_hint(caplog):
    with caplog.at_level(logging.WARNING, logger="bertprep.pipeline.readers"):
        read_all(FIXTURES / "docs.jsonl", "text")
    assert any("starts with '{'" in r.message and "--input-format jsonl" in r.message for r in caplog.records)
