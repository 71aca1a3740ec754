"""WikiExtractor output (``readers/text.py`` ``read_wikiextractor``, ``read_wikiextractor_json``): ``<doc>``
blocks and its JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertprep.pipeline.readers import InputError, ReaderStats, expand_inputs, read_documents
from readers_factory import FIXTURES, read_all


def test_wikiextractor_drops_titles_and_counts_empty_articles():
    docs, stats = read_all(FIXTURES / "wiki_docs.txt")
    assert stats.formats == {"wikiextractor": 1}
    assert [(d.line, d.sentences) for d in docs] == [
        (
            1,
            [
                "Tea and cakes are served at four.",
                "The custom is old.",
                "It spread to the U.S. in the 19th century.",
                "Many people enjoy it.",
            ],
        ),
        (12, ["A short article has one sentence."]),
    ]
    assert stats.skipped_documents == {"empty": 1}
    assert stats.one_sentence_documents == 1


def test_wikiextractor_declared_on_a_file_without_doc_blocks(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text("Just prose. No doc tags.\n")
    with pytest.raises(InputError, match=r"plain\.txt:1: expected a WikiExtractor '<doc \.\.\.>' line.*--input-format"):
        read_all(path, "wikiextractor")


def test_wikiextractor_json_drops_title_line():
    docs, stats = read_all(FIXTURES / "wiki_docs.json")
    assert stats.formats == {"wikiextractor-json": 1}
    assert [d.sentences for d in docs] == [
        ["Tea and cakes are served at four.", "The custom is old.", "It spread to the U.S. in the 19th century."]
    ]
    assert stats.skipped_documents == {"empty": 1}


def test_real_wikiextractor_files(shared_data):
    stats = ReaderStats()
    files = expand_inputs(str(shared_data / "wikipedia" / "wikiextractor-featured" / "AA"))
    n_blocks = 0
    for path in files:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        n_blocks += sum(line.startswith("<doc ") for line in lines)
        for doc in read_documents(path, stats=stats, segmenter="blingfire"):  # fast; the format is tested here
            title = lines[doc.line - 1].split('title="')[1].rsplit('"', 1)[0]
            block = lines[doc.line : lines.index("</doc>", doc.line)]
            assert block[0] == title
            # The title line after <doc> is dropped; a title repeated inside the text (it happens) stays.
            assert doc.sentences.count(title) == block[1:].count(title), (path, doc.line)
    assert stats.formats == {"wikiextractor": 10}
    assert n_blocks == 241
    assert stats.documents + sum(stats.skipped_documents.values()) == 241
    assert stats.sentences / stats.documents > 50  # featured articles are long


def test_real_wikiextractor_json_file(shared_data):
    path = shared_data / "wikipedia" / "wikiextractor-json" / "wiki_00"
    docs, stats = read_all(path, segmenter="blingfire")
    objects = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert stats.formats == {"wikiextractor-json": 1}
    assert stats.documents + stats.skipped_documents.get("empty", 0) == len(objects) == 424
    by_line = {d.line: d for d in docs}
    for lineno, obj in enumerate(objects, start=1):
        if lineno in by_line:
            assert by_line[lineno].sentences[0] != obj["title"]
