"""The readers' entry points (``readers/__init__.py``, ``base.py``): option checks, ``ReaderStats``,
``iter_corpus_texts``, ``Document``."""

from __future__ import annotations

import json

import pytest

from bertprep.pipeline.readers import (
    INPUT_FORMATS,
    Document,
    InputError,
    ReaderStats,
    iter_corpus_texts,
    read_documents,
)
from readers_factory import FIXTURES


def test_bad_options_name_the_option():
    with pytest.raises(InputError, match=r"unknown input format 'xlsx' \(--input-format\)"):
        read_documents("x.txt", "xlsx")
    with pytest.raises(InputError, match=r"unknown segmenter 'punkt' \(--segmenter\)"):
        read_documents("x.txt", segmenter="punkt")
    with pytest.raises(InputError, match=r"encoding 'utf-16' \(--encoding\) is not supported"):
        read_documents("x.txt", encoding="utf-16")
    with pytest.raises(InputError, match=r"unknown encoding 'klingon'"):
        read_documents("x.txt", encoding="klingon")
    with pytest.raises(InputError, match=r"--max-line-chars"):
        read_documents("x.txt", max_line_chars=0)
    assert set(INPUT_FORMATS) >= {"auto", "bert", "jsonl", "text", "wikiextractor", "wikiextractor-json"}


def test_reader_stats_merge_and_json_round_trip():
    a = ReaderStats(
        files=1,
        documents=2,
        sentences=5,
        bytes=10,
        skipped_documents={"empty": 1},
        formats={"bert": 1},
        undecodable_lines=1,
    )
    b = ReaderStats(
        files=2,
        documents=3,
        sentences=7,
        bytes=20,
        skipped_documents={"empty": 2, "redirect": 1},
        skipped_lines={"over_long_line": 4},
        formats={"text": 2},
        one_sentence_documents=1,
        empty_files=1,
    )
    merged = ReaderStats().merge(a).merge(b)
    assert merged.to_dict() == {
        "files": 3,
        "documents": 5,
        "sentences": 12,
        "bytes": 30,
        "skipped_documents": {"empty": 3, "redirect": 1},
        "skipped_lines": {"over_long_line": 4},
        "undecodable_lines": 1,
        "one_sentence_documents": 1,
        "formats": {"bert": 1, "text": 2},
        "empty_files": 1,
    }
    assert ReaderStats.from_dict(json.loads(json.dumps(merged.to_dict()))) == merged
    assert a.to_dict()["skipped_documents"] == {"empty": 1}  # merge does not alias the inputs' dicts


def test_iter_corpus_texts_yields_every_sentence_in_order(tmp_path):
    (tmp_path / "a.txt").write_text("One.\nTwo.\n\nThree.\n")
    stats = ReaderStats()
    texts = list(iter_corpus_texts([str(tmp_path / "a.txt"), str(FIXTURES / "docs.jsonl")], stats=stats))
    assert texts == [
        "One.",
        "Two.",
        "Three.",
        "Dr. Watson arrived at noon.",
        "He was late.",
        "A new paragraph starts here.",
        "One sentence only.",
    ]
    assert stats.files == 2 and stats.sentences == 7


def test_iter_corpus_texts_with_no_text_is_an_error(tmp_path):
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    with pytest.raises(InputError, match=r"no text found in the 1 input file\(s\).*--input-format"):
        list(iter_corpus_texts(str(tmp_path / "blank.txt")))


def test_documents_are_picklable_values():
    import pickle

    doc = Document(source="a.txt", ordinal=0, line=1, sentences=["A."])
    assert pickle.loads(pickle.dumps(doc)) == doc
