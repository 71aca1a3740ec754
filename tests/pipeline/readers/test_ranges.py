"""Byte ranges (``readers.ranges``): the documents read from all ranges of a file, concatenated, are the
documents read from the whole file (same ids, text, line numbers) and the reader counters sum to the same
totals, for every format that splits, with tiny ranges forcing many of them."""

from __future__ import annotations

import bz2
import functools
import gzip
import json
import logging
import random
from pathlib import Path

import pytest

from bertprep.pipeline.readers import InputError, ReaderStats, files, read_documents
from bertprep.pipeline.readers.ranges import file_ranges, plan_ranges, read_ranges, wiki_index_of

#: Range sizes for the real files (about 1 MB): from hundreds of ranges to a few.
SPLITS = (4096, 40_000, 300_000)


def read_whole(path: Path, fmt: str, **kw) -> tuple[list, ReaderStats]:
    """The documents of ``path`` read whole, and the reader's counters."""
    whole_stats = ReaderStats()
    return list(read_documents(str(path), fmt, stats=whole_stats, **kw)), whole_stats


@functools.cache
def _read_shared_file_whole(path: Path, fmt: str) -> tuple[list, ReaderStats]:
    """:func:`read_whole` of a shared (read-only) data file, read once for the tests of its several range sizes."""
    return read_whole(path, fmt)


def whole_and_ranges(path: Path, fmt: str, split_bytes: int, shared: bool = False, **kw):
    """The whole read of ``path`` (``shared``: a shared data file, read once per test process), the range read
    with ``split_bytes``, their counters and the ranges."""
    range_stats = ReaderStats()
    whole, whole_stats = _read_shared_file_whole(path, fmt) if shared and not kw else read_whole(path, fmt, **kw)
    ranges = file_ranges(str(path), path.stat().st_size, split_bytes)
    parts = list(read_ranges(str(path), ranges, fmt, stats=range_stats, **kw))
    return whole, whole_stats, parts, range_stats, ranges


def assert_same(path: Path, fmt: str, split_bytes: int, shared: bool = False, **kw) -> int:
    whole, whole_stats, parts, range_stats, ranges = whole_and_ranges(path, fmt, split_bytes, shared, **kw)
    assert parts == whole  # Document: source, ordinal, line, sentences
    assert range_stats.to_dict() == whole_stats.to_dict()
    return len(ranges)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 5 bytes, so that lines, ranges and blocks cross each other everywhere."""
    monkeypatch.setattr(files, "BLOCK_SIZE", 5)


def _messy_bert_file(path: Path, seed: int) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(120):
        kind = rng.random()
        if kind < 0.25:
            lines.append(b"")
        elif kind < 0.3:
            lines.append(rng.choice([b"   ", b"\t", "\u00a0".encode(), b"\r"]))
        elif kind < 0.33:
            lines.append(b"x" * rng.randint(30, 80))  # over-long with max_line_chars=20
        elif kind < 0.36:
            lines.append(b"bad \xff\xfe bytes")
        else:
            lines.append(" ".join(rng.choice(["a", "bb", "ccc", "d\u00e9"]) for _ in range(rng.randint(1, 4))).encode())
    data = b"\n".join(lines)
    if seed % 2:
        data += b"\n"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("seed", range(6))
def test_bert_ranges_with_blank_runs_long_lines_and_bad_bytes(tmp_path, small_blocks, seed):
    path = _messy_bert_file(tmp_path / f"messy{seed}.txt", seed)
    for split_bytes in (1, 3, 7, 19, 64, 200):
        assert assert_same(path, "bert", split_bytes, max_line_chars=20) > 1


@pytest.mark.parametrize("seed", range(4))
def test_jsonl_ranges_with_blank_and_empty_documents(tmp_path, small_blocks, seed):
    rng = random.Random(seed)
    out = []
    for i in range(60):
        r = rng.random()
        if r < 0.1:
            out.append("")
        elif r < 0.2:
            out.append(json.dumps({"text": rng.choice(["", "  \n ", None])}))
        else:
            out.append(json.dumps({"text": f"Document {i} has text. It has two sentences.\nAnd a paragraph."}))
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(out) + ("\n" if seed % 2 else ""), encoding="utf-8")
    for split_bytes in (1, 5, 33, 100, 400):
        assert assert_same(path, "jsonl", split_bytes) > 1


@pytest.mark.parametrize("split_bytes", SPLITS)
@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_wikiextractor_ranges(shared_data, split_bytes):
    path = shared_data / "wikipedia" / "wikiextractor-featured" / "AA" / "wiki_01"
    assert assert_same(path, "wikiextractor", split_bytes, shared=True) > 1


def test_wikiextractor_ranges_with_empty_blocks_and_lines_outside_doc(tmp_path, small_blocks):
    text = (
        '<doc id="1" url="u" title="T1">\nT1\nFirst text.\n</doc>\nstray line\n'
        '<doc id="2" url="u" title="T2">\nT2\n</doc>\n\n'
        '<doc id="3" url="u" title="T3">\nT3\nThird text. More.\n</doc>\n'
        '<doc id="4" url="u" title="T4">\nT4\nUnclosed block.\n'
    )
    path = tmp_path / "wiki_00"
    path.write_text(text, encoding="utf-8")
    for split_bytes in (1, 4, 17, 50):
        assert assert_same(path, "wikiextractor", split_bytes) > 1


@pytest.mark.parametrize("split_bytes", SPLITS)
@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_wikiextractor_json_ranges(shared_data, split_bytes):
    path = shared_data / "wikipedia" / "wikiextractor-json" / "wiki_00"
    assert assert_same(path, "wikiextractor-json", split_bytes, shared=True) > 1


@pytest.mark.parametrize("split_bytes", (997, 4096))
def test_bert_ranges_of_real_text(shared_data, split_bytes):
    assert assert_same(shared_data / "golden" / "wiki8.txt", "bert", split_bytes, shared=True) > 1
    assert assert_same(shared_data / "golden" / "wiki8.txt", "auto", split_bytes, shared=True) > 1


def test_error_in_a_later_range_names_the_file_line(tmp_path):
    lines = [json.dumps({"text": f"Text {i}."}) for i in range(200)]
    lines[150] = "not json"
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:151: not a JSON object") as whole:
        list(read_documents(str(path), "jsonl"))
    with pytest.raises(InputError) as split:
        list(read_ranges(str(path), file_ranges(str(path), path.stat().st_size, 100), "jsonl"))
    assert str(split.value) == str(whole.value)


def test_warning_in_a_later_range_names_the_file_line(tmp_path, caplog):
    lines = ["A sentence."] * 300
    lines[250] = "x" * 50
    path = tmp_path / "long.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        list(read_ranges(str(path), file_ranges(str(path), path.stat().st_size, 64), "bert", max_line_chars=20))
    assert "long.txt:251: line longer than 20 characters" in caplog.text


def test_documents_of_a_range_can_leave_line_numbers_out(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("One.\n\nTwo.\n\nThree.\n", encoding="utf-8")
    docs = list(read_documents(str(path), "bert", byte_range=(1, 6, None), line_numbers=False))
    assert [(d.ordinal, d.line, d.sentences) for d in docs] == [(0, 0, ["Three."])]
    docs = list(read_documents(str(path), "bert", byte_range=(1, 6, None)))
    assert [(d.ordinal, d.line) for d in docs] == [(0, 5)]


def test_text_format_is_read_whole_by_the_first_range(shared_data):
    path = shared_data / "golden" / "books2.txt"
    assert assert_same(path, "text", 512) > 1


def _parquet(path: Path, texts: list[str | None], row_group_size: int) -> Path:
    import pyarrow as pa  # (a dependency of bertprep: no skip)
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), path, row_group_size=row_group_size)
    return path


@pytest.mark.parametrize("split_bytes", (1, 300, 2000))
def test_parquet_ranges_are_row_groups(tmp_path, split_bytes):
    texts = [f"Row {i} says hello. Then it ends." if i % 7 else "" for i in range(100)]
    texts[3] = None
    path = _parquet(tmp_path / "t.parquet", texts, row_group_size=9)
    assert assert_same(path, "parquet", split_bytes) > 1


def multistream_dump(source: Path, out_dir: Path, copies: int = 8, pages_per_stream: int = 3) -> tuple[Path, Path]:
    """A pages-articles-multistream dump made from ``source``'s pages repeated ``copies`` times (titles made
    unique), ``pages_per_stream`` pages per bz2 stream, and its index (``offset:id:title``), as Wikimedia
    publishes them: a first stream with the header and siteinfo, one with ``</mediawiki>`` last."""
    xml = bz2.decompress(source.read_bytes()).decode("utf-8")
    head, rest = xml.split("<page>", 1)
    pages_xml, _ = ("<page>" + rest).rsplit("</mediawiki>", 1)
    pages = ["<page>" + p for p in pages_xml.split("<page>")[1:]]
    all_pages = [p.replace("<title>", f"<title>{c} ", 1) for c in range(copies) for p in pages]
    dump = out_dir / "xxwiki-20240101-pages-articles-multistream.xml.bz2"
    index_lines = []
    data = bytearray(bz2.compress(head.encode("utf-8")))
    for i in range(0, len(all_pages), pages_per_stream):
        offset = len(data)
        for j, _page in enumerate(all_pages[i : i + pages_per_stream]):
            index_lines.append(f"{offset}:{i + j + 1}:Title {i + j}: with colon")
        data += bz2.compress("".join(all_pages[i : i + pages_per_stream]).encode("utf-8"))
    data += bz2.compress(b"</mediawiki>\n")
    dump.write_bytes(bytes(data))
    index = out_dir / "xxwiki-20240101-pages-articles-multistream-index.txt.bz2"
    index.write_bytes(bz2.compress(("\n".join(index_lines) + "\n").encode("utf-8")))
    return dump, index


@pytest.mark.slow  # ~10 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_multistream_dump_ranges_are_its_streams(shared_data, tmp_path):
    dump, index = multistream_dump(shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2", tmp_path, copies=3)
    size = dump.stat().st_size
    ranges = file_ranges(str(dump), size, 4096)
    assert len(ranges) > 3
    assert assert_same(dump, "auto", 4096) > 3
    index.unlink()  # without its index: read whole, and said so
    assert file_ranges(str(dump), size, 4096) == [(0, 0, None)]


@pytest.mark.slow  # ~8 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_multistream_dump_with_a_decompressed_index_is_cut_at_its_streams(shared_data, tmp_path, caplog):
    """The index decompressed to ``-index.txt`` (as its docstring promises) is used: before, the dump was read
    whole by one worker with a warning that its index was missing."""
    dump, index = multistream_dump(shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2", tmp_path, copies=3)
    size = dump.stat().st_size
    with_bz2_index = file_ranges(str(dump), size, 4096)
    text_index = tmp_path / index.name[: -len(".bz2")]
    text_index.write_bytes(bz2.decompress(index.read_bytes()))
    index.unlink()
    notes: dict[str, list[str]] = {}
    assert file_ranges(str(dump), size, 4096, notes) == with_bz2_index and len(with_bz2_index) > 3
    assert notes == {}
    assert assert_same(dump, "auto", 4096) > 3
    part = tmp_path / "xxwiki-20240101-pages-articles-multistream1.xml-p1p41242.bz2"
    part_index = tmp_path / "xxwiki-20240101-pages-articles-multistream-index1.txt-p1p41242"
    part_index.write_text("0:1:A\n")
    assert wiki_index_of(str(part)) == str(part_index)


def test_compressed_files_cannot_be_split_and_it_is_said_once(tmp_path, caplog):
    paths = []
    for i in range(3):
        path = tmp_path / f"part{i}.txt.gz"
        path.write_bytes(gzip.compress(("\n".join(f"Sentence {j} of {i}." for j in range(5000)) + "\n").encode()))
        paths.append(str(path))
    small = tmp_path / "small.txt.gz"
    small.write_bytes(gzip.compress(b"One.\n"))
    with caplog.at_level(logging.INFO):
        planned = plan_ranges(paths + [str(small)], 1024)
    assert [(r[0], r[2:]) for r in planned] == [(i, (0, 0, None)) for i in range(4)]
    warnings = [r for r in caplog.records if "cannot be split" in r.getMessage()]
    assert len(warnings) == 1 and "3 input file(s)" in warnings[0].getMessage() and "gzip" in warnings[0].getMessage()


def test_plan_ranges_keeps_small_files_whole_and_cuts_large_ones(tmp_path):
    small, large = tmp_path / "a.txt", tmp_path / "b.txt"
    small.write_text("One.\n")
    large.write_text("Sentence.\n" * 1000)
    planned = plan_ranges([str(small), str(large)], 4096)
    assert planned[0] == (0, str(small), 0, 0, None)
    assert [r[2:] for r in planned[1:]] == [(0, 0, 4096), (1, 4096, 8192), (2, 8192, None)]
    assert plan_ranges([str(large)], 0) == [(0, str(large), 0, 0, None)]
