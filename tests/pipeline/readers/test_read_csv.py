"""The ``csv`` and ``tsv`` formats (``readers/delimited.py``): one document per row, the text in a named column,
quoted line breaks kept, read as ``jsonl``'s text is; bad rows named by file and line."""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import json
import logging
from pathlib import Path

import pytest

from bertprep.pipeline import readers
from bertprep.pipeline.readers import InputError, detect_format
from bertprep.pipeline.readers.ranges import file_ranges, plan_ranges, read_ranges
from readers_factory import read_all

#: Texts with what CSV must keep: a quoted line break (two paragraphs), the delimiters, doubled quotes, a tab,
#: non-ASCII, an empty text, a CRLF inside quotes.
TEXTS = [
    "Dr. Watson arrived at noon. He was late.\nA new paragraph starts here, with a comma.",
    'She said "stop!" and left.\tThen a tab.',
    "",
    "Café au lait, naïve résumé. Ünïcödé ends here.",
    "One sentence only.",
    "First line.\r\nSecond line; after a CRLF inside quotes.",
]


def write_rows(path: Path, texts, delimiter: str = ",", column: str = "body", bom: bool = False) -> Path:
    """A file with a header ``id,<column>,n`` and one row per text, written by Python's csv (RFC 4180 quoting)."""
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(["id", column, "n"])
    for i, text in enumerate(texts):
        writer.writerow([i, text, len(text)])
    path.write_text(("\ufeff" if bom else "") + out.getvalue(), encoding="utf-8", newline="")
    return path


def write_jsonl(path: Path, texts) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def test_rows_are_documents_read_as_jsonl_texts_are(tmp_path):
    path = write_rows(tmp_path / "c.csv", TEXTS, bom=True)
    docs, stats = read_all(path, "csv", text_field="body")
    jsonl_docs, _ = read_all(write_jsonl(tmp_path / "c.jsonl", TEXTS), "jsonl")
    assert [d.sentences for d in docs] == [d.sentences for d in jsonl_docs]
    assert docs[0].sentences == [
        "Dr. Watson arrived at noon.",
        "He was late.",
        "A new paragraph starts here, with a comma.",
    ]
    assert any('"stop!"' in sentence for sentence in docs[1].sentences)  # (doubled in the file, one here)
    # Line numbers: the header is line 1; the first text spans lines 2-3, the CRLF row starts on line 8.
    assert [d.line for d in docs] == [2, 4, 6, 7, 8]
    assert [d.ordinal for d in docs] == [0, 1, 2, 3, 4]
    assert stats.formats == {"csv": 1} and stats.skipped_documents == {"empty": 1}
    assert stats.documents == 5 and stats.bytes == path.stat().st_size


def test_tsv_and_the_text_column_option(tmp_path):
    csv_docs, _ = read_all(write_rows(tmp_path / "c.csv", TEXTS), "csv", text_field="body")
    path = write_rows(tmp_path / "c.tsv", TEXTS, delimiter="\t", column="content")
    docs, stats = read_all(path, "tsv", text_field="content")
    assert [d.sentences for d in docs] == [d.sentences for d in csv_docs]
    assert stats.formats == {"tsv": 1}
    # The header's names are compared without the spaces around them; blank lines are passed over.
    spaced = tmp_path / "spaced.csv"
    spaced.write_text('id, text ,n\n\n1,"Hello there. General Kenobi.",2\n\n', encoding="utf-8")
    docs, _ = read_all(spaced, "csv")
    assert [(d.line, d.sentences) for d in docs] == [(3, ["Hello there.", "General Kenobi."])]


def test_auto_detects_by_extension_and_compression_reads_the_same(tmp_path):
    path = write_rows(tmp_path / "c.csv", TEXTS, column="text")
    whole, _ = read_all(path)
    assert detect_format(str(path)) == "csv"
    for suffix, compress in ((".gz", lambda b: gzip.compress(b, mtime=0)), (".bz2", bz2.compress)):
        packed = tmp_path / f"c.csv{suffix}"
        packed.write_bytes(compress(path.read_bytes()))
        assert detect_format(str(packed)) == "csv"
        docs, stats = read_all(packed)
        assert [(d.line, d.sentences) for d in docs] == [(d.line, d.sentences) for d in whole]
        assert stats.formats == {"csv": 1}
    tsv = write_rows(tmp_path / "c.tsv", TEXTS, delimiter="\t", column="text")
    assert detect_format(str(tsv)) == "tsv"


def test_a_file_is_read_whole_whatever_its_ranges(tmp_path, caplog):
    # A line start inside a quoted field looks like a row start: CSV files are never cut (readers.splittable).
    texts = [f"Row {i} starts.\nIts second paragraph, line {i}." for i in range(300)]
    path = write_rows(tmp_path / "big.csv", texts)
    size = path.stat().st_size
    assert not readers.splittable(str(path), "csv") and not readers.splittable(str(path), "tsv")
    notes: dict[str, list[str]] = {}
    assert file_ranges(str(path), size, split_bytes=1000, notes=notes) == [(0, 0, None)]
    assert list(notes.values()) == [[str(path)]]
    with caplog.at_level(logging.WARNING):
        assert plan_ranges([str(path)], 1000) == [(0, str(path), 0, 0, None)]
    assert "cannot be split (CSV/TSV: a quoted line break hides where rows start)" in caplog.text
    assert "split such a file into several" in caplog.text and "decompress" not in caplog.text
    # Ranges planned for it anyway (a CSV named .txt read with --input-format csv): the first reads it all.
    ranges = file_ranges(str(path.rename(tmp_path / "big.txt")), size, split_bytes=1000)
    assert len(ranges) > 5
    whole, whole_stats = read_all(tmp_path / "big.txt", "csv", text_field="body")
    stats = readers.ReaderStats()
    in_ranges = list(read_ranges(str(tmp_path / "big.txt"), ranges, "csv", stats=stats, text_field="body"))
    assert in_ranges == whole and len(whole) == 300
    assert stats.to_dict() == whole_stats.to_dict()


def test_a_header_without_the_column_names_the_file_and_its_columns(tmp_path):
    path = write_rows(tmp_path / "c.csv", TEXTS)
    with pytest.raises(
        InputError,
        match=r"c\.csv:1: the CSV header has no column 'text' \(its columns: 'id', 'body', 'n'\); .*--text-column",
    ):
        read_all(path, "csv")


def test_bad_utf8_row_is_named_by_file_and_line_and_nothing_else_is_lost(tmp_path, caplog):
    path = write_rows(tmp_path / "c.csv", TEXTS)
    data = path.read_bytes().replace("Café".encode(), b"Caf\xe9")  # a Latin-1 byte in the row on line 6
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING):
        docs, stats = read_all(path, "csv", text_field="body")
    good, _ = read_all(write_rows(tmp_path / "good.csv", TEXTS), "csv", text_field="body")
    assert stats.undecodable_lines == 1
    assert [r.getMessage() for r in caplog.records if "not valid utf-8" in r.getMessage()] == [
        f"{path}:6: bytes that are not valid utf-8 were replaced with U+FFFD (counted in undecodable_lines); "
        "if the file is Latin-1, pass --encoding latin-1"
    ]
    assert len(docs) == len(good)
    assert [d.sentences for d in docs if d.line != 6] == [d.sentences for d in good if d.line != 6]
    latin, latin_stats = read_all(path, "csv", text_field="body", encoding="latin-1")
    assert latin_stats.undecodable_lines == 0 and latin[2].sentences[0].startswith("Café au lait")


def test_bad_rows_stop_the_read_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,text\n1,fine.\n2,an unquoted, comma.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.csv:3: a CSV row of 3 fields, but the header \(line 1\) has 2"):
        read_all(path, "csv")
    # A TSV written without quoting (GLUE's MRPC): a field that opens a quote and closes it mid-field.
    path = tmp_path / "raw.tsv"
    path.write_text('id\ttext\n1\tfine.\n2\t"Stop," he said.\n3\tlast.\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"raw\.tsv:3: not valid TSV \(.*expected after.*RFC 4180"):
        read_all(path, "tsv")
    # A quote that is never closed: stopped at --max-line-chars, not read to the end of the file in memory.
    path = tmp_path / "open.csv"
    path.write_text('id,text\n1,"never closed\n' + "more text.\n" * 200, encoding="utf-8")
    with pytest.raises(InputError, match=r"open\.csv:2: a row longer than 500 characters \(--max-line-chars\)"):
        read_all(path, "csv", max_line_chars=500)
    with pytest.raises(InputError, match=r"open\.csv:202: not valid CSV \(unexpected end of data\)"):
        read_all(path, "csv")
    # The limit is the row's characters, line breaks inside it counted: a one-line row of exactly the limit is read.
    path = tmp_path / "long.csv"
    path.write_text("text\n" + "x" * 499 + ".\n" + '"two\nlines"\n', encoding="utf-8")
    docs, _ = read_all(path, "csv", max_line_chars=500)
    assert [len(" ".join(d.sentences)) for d in docs] == [500, 9]
    path.write_text('text\n"1234567"\n"two\nlines"\n', encoding="utf-8")  # rows of 9 and 11 characters
    with pytest.raises(InputError, match=r"long\.csv:3: a row longer than 9 characters"):
        read_all(path, "csv", max_line_chars=9)


def test_build_vocab_reads_csv_as_the_same_texts_in_jsonl(tmp_path):
    from bertprep.pipeline.text.vocab import VocabConfig, build_vocab

    texts = [f"Text number {i} says: the {w} sat on the mat.\nThen it left." for i, w in enumerate(["cat", "dog"] * 20)]
    config = VocabConfig(vocab_size=120, num_unused=2, show_progress=False)
    built = {}
    for name, path, fmt in (
        ("csv", write_rows(tmp_path / "t.csv", texts, column="text"), "csv"),
        ("jsonl", write_jsonl(tmp_path / "t.jsonl", texts), "jsonl"),
    ):
        result = build_vocab([str(path)], str(tmp_path / name), config, input_format=fmt)
        assert result.reader_stats.documents == 40
        built[name] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / name).iterdir()}
    assert built["csv"] == built["jsonl"] and "vocab.txt" in built["csv"]


@pytest.mark.slow  # ~3 s on 2 busy cores (two make-shards runs)
def test_make_shards_from_csv_gives_the_token_ids_of_the_same_texts_as_documents(tmp_path):
    from bertprep.core.schema import read_shard
    from pipeline_factory import FILES, make_shards

    # The fixture corpus's documents as texts: sentences joined, every third one after a line break (a quoted
    # line break in the CSV, a paragraph break in both).
    texts = []
    for path in FILES:
        for doc in readers.read_documents(path, "bert"):
            texts.append("".join(s + ("\n" if i % 3 == 2 else " ") for i, s in enumerate(doc.sentences)).strip())
    csv_path = write_rows(tmp_path / "corpus.csv", texts)
    jsonl_path = write_jsonl(tmp_path / "corpus.jsonl", texts)
    assert "\n" in texts[0]
    outputs = {}
    for name, extra in (
        ("csv", ("--input-format", "csv", "--text-column", "body")),
        ("jsonl", ("--input-format", "jsonl")),
    ):
        inputs = str(csv_path if name == "csv" else jsonl_path)
        result = make_shards(tmp_path / name, *extra, inputs=inputs, num_shards=1)
        assert result.exit_code == 0, result.output
        shards = sorted((tmp_path / name).glob("*.arrow"))
        assert shards
        outputs[name] = [read_shard(str(p)).read_all().to_pydict() for p in shards]
    assert outputs["csv"] == outputs["jsonl"]
    assert sum(len(o["input_ids"]) for o in outputs["csv"]) > 20


@pytest.mark.slow  # ~3.5 s on 2 busy cores (the readers run in the pipeline)
def test_make_shards_refuses_a_csv_without_the_column_in_one_line(tmp_path):
    from pipeline_factory import make_shards

    path = write_rows(tmp_path / "rows.csv", TEXTS, column="content")
    result = make_shards(tmp_path / "out", "--text-column", "body", inputs=str(path), num_shards=1)
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        f"Error: {path}:1: the CSV header has no column 'body' (its columns: 'id', 'content', 'n'); name the column "
        "that holds the document text with --text-column, and check that the file's first row is its header"
    ]
    assert not (tmp_path / "out" / "manifest.json").exists()
