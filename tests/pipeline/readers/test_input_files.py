"""Finding and opening the inputs (``readers/files.py``): expansion of paths, globs and directories,
decompression, the binary-file check, over-long and undecodable lines, block boundaries."""

from __future__ import annotations

import bz2
import gzip
import logging

import pytest

from bertprep.pipeline import readers
from bertprep.pipeline.readers import InputError, ReaderStats, expand_inputs, read_documents
from readers_factory import BERT_EDGE, read_all


def test_expand_inputs_orders_sorts_each_pattern_and_dedupes(tmp_path):
    for name in ["b.txt", "a.txt", "c.md", "z.txt"]:
        (tmp_path / name).write_text("x.\n")
    p = str(tmp_path)
    got = expand_inputs(f"{p}/z.txt,{p}/*.txt, {p}/c.md")
    assert got == [f"{p}/z.txt", f"{p}/a.txt", f"{p}/b.txt", f"{p}/c.md"]
    assert expand_inputs([f"{p}/z.txt,{p}/*.txt", f"{p}/c.md"]) == got


def test_expand_inputs_directory_is_recursive_sorted_and_skips_hidden_and_readme(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    for rel in [
        "b.txt",
        "a.txt",
        "sub/c.txt",
        "sub/deeper/d.txt",
        ".hidden.txt",
        ".git/config",
        "README.md",
        "sub/readme.txt",
    ]:
        (tmp_path / rel).write_text("A sentence.\n")
    got = expand_inputs(str(tmp_path))
    assert got == [str(tmp_path / rel) for rel in ["a.txt", "b.txt", "sub/c.txt", "sub/deeper/d.txt"]]


@pytest.mark.parametrize("place", ["here", "elsewhere/deeper"])
def test_input_keys_are_paths_relative_to_the_input_roots(tmp_path, place):
    """A document's key hashes these (not the full path): the same layout under any folder gives the same."""
    root = tmp_path / place / "corpus"
    for rel in ["wiki/a.txt", "wiki/b.txt", "books/c.txt", "top.txt"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x.\n")
    r = str(root)
    cases = {
        r: ["books/c.txt", "top.txt", "wiki/a.txt", "wiki/b.txt"],  # a folder, with or without its "/"
        r + "/": ["books/c.txt", "top.txt", "wiki/a.txt", "wiki/b.txt"],
        f"{r}/wiki/*.txt": ["a.txt", "b.txt"],  # a glob: relative to its fixed part's folder
        f"{r}/**/*.txt": ["books/c.txt", "wiki/a.txt", "wiki/b.txt"],
        f"{r}/wi*/a.txt": ["wiki/a.txt"],
        f"{r}/top.txt,{r}/wiki/": ["top.txt", "a.txt", "b.txt"],  # a file: relative to its folder
    }
    for patterns, keys in cases.items():
        assert readers.input_keys(patterns, expand_inputs(patterns)) == keys, patterns


def test_input_keys_tell_files_of_the_same_relative_path_apart(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.txt").write_text("x.\n")
    patterns = [str(tmp_path / "a" / "x.txt"), str(tmp_path / "b" / "x.txt")]
    assert readers.input_keys(patterns, expand_inputs(patterns)) == ["x.txt", "x.txt#2"]


def test_input_keys_of_object_store_paths():
    """Lexical: the roots of gs:// and s3:// inputs as make-shards lists their objects (no listing here)."""
    files = ["gs://b/corpus/wiki/a.txt", "gs://b/corpus/z.txt"]
    assert readers.input_keys("gs://b/corpus", files) == ["wiki/a.txt", "z.txt"]  # a prefix
    assert readers.input_keys("gs://b/corpus/**", files) == ["wiki/a.txt", "z.txt"]
    assert readers.input_keys("s3://b/corpus/z.txt", ["s3://b/corpus/z.txt"]) == ["z.txt"]


def test_glob_matching_nothing_names_the_pattern(tmp_path):
    with pytest.raises(InputError, match=r"'.*/nothing-\*\.txt' matches no file"):
        expand_inputs(str(tmp_path / "nothing-*.txt"))


def test_missing_input_names_the_file(tmp_path):
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(InputError, match=r"input file '.*missing\.txt' not found; check the path"):
        expand_inputs(missing)
    with pytest.raises(InputError, match=r"missing\.txt' not found"):
        list(read_documents(missing, "bert"))


def test_empty_files_are_counted_but_all_empty_is_an_error(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "full.txt").write_text("One sentence.\nTwo sentences.\n")
    files = expand_inputs(str(tmp_path / "*.txt"))
    assert len(files) == 2
    stats = ReaderStats()
    docs = [d for f in files for d in read_documents(f, stats=stats)]
    assert stats.empty_files == 1 and stats.files == 2 and len(docs) == 1
    with pytest.raises(InputError, match=r"all 1 input files are empty"):
        expand_inputs(str(tmp_path / "empty.txt"))


def test_reading_is_independent_of_block_boundaries(tmp_path, monkeypatch):
    # Multi-byte characters, \r\n pairs and line ends fall across block boundaries with tiny blocks.
    path = tmp_path / "blocks.txt"
    path.write_bytes((BERT_EDGE + "\nÜber café — 力加勝北区 😀.\n\nEnd.\n").encode("utf-8"))
    expected, _ = read_all(path, "bert")
    for block_size in (1, 2, 3, 7, 64):
        monkeypatch.setattr(readers.files, "BLOCK_SIZE", block_size)
        got, stats = read_all(path, "bert")
        assert got == expected, block_size
        assert stats.undecodable_lines == 0


def test_gzip_and_bz2_inputs_are_decompressed(tmp_path):
    text = "One sentence.\nAnother one.\n\nSecond document.\n"
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "b.txt.bz2").write_bytes(bz2.compress(text.encode()))
    for name in ["a.txt.gz", "b.txt.bz2"]:
        docs, stats = read_all(tmp_path / name)
        assert stats.formats == {"bert": 1}
        assert [d.sentences for d in docs] == [["One sentence.", "Another one."], ["Second document."]]
        assert stats.bytes == len(text)


def test_corrupt_compressed_file_names_the_file(tmp_path):
    path = tmp_path / "broken.txt.gz"
    path.write_bytes(b"this is not gzip data")
    with pytest.raises(
        InputError,
        match=r"broken\.txt\.gz is truncated or corrupt \(gzip: .*incorrect header check"
        r".*re-download it.*gzip -t broken\.txt\.gz",
    ):
        read_all(path, "bert")


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "image.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(InputError, match=r"image\.png: looks like a binary file \(NUL byte at offset 8\).*Remove it"):
        read_all(path)
    with pytest.raises(InputError, match=r"binary file"):
        read_all(path, "bert")


def test_over_long_lines_are_skipped_and_counted(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(readers.files, "BLOCK_SIZE", 16)  # the long lines span many blocks
    path = tmp_path / "long.txt"
    path.write_text("Short one.\n" + "x" * 500 + "\nShort two.\n" + "é" * 30 + "\nShort three.\n" + "y" * 300)
    with caplog.at_level(logging.WARNING, logger="bertprep.pipeline.readers"):
        docs, stats = read_all(path, "bert", max_line_chars=20)
    assert docs[0].sentences == ["Short one.", "Short two.", "Short three."]
    assert stats.skipped_lines == {"over_long_line": 3}
    assert any(
        "long.txt:2: line longer than 20 characters" in r.message and "--max-line-chars" in r.message
        for r in caplog.records
    )


def test_over_long_line_is_never_fully_buffered(tmp_path):
    import tracemalloc

    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:  # one 24 MB line without a newline, then a normal line
        for _ in range(24):
            f.write(b"a" * 1_000_000)
        f.write(b"\nkept.\n")
    tracemalloc.start()
    try:
        docs, stats = read_all(path, "bert", max_line_chars=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert docs[0].sentences == ["kept."]
    assert stats.skipped_lines == {"over_long_line": 1}
    assert peak < 8 * readers.files.BLOCK_SIZE  # a few blocks, not the 24 MB line


def test_latin1_byte_is_replaced_counted_and_warned(shared_data, caplog):
    path = shared_data / "gutenberg" / "shakespeare-caesar.txt"
    with caplog.at_level(logging.WARNING, logger="bertprep.pipeline.readers"):
        docs, stats = read_all(path)
    assert stats.undecodable_lines == 2  # lines 119 and 663 hold the Latin-1 byte 0xE6 ("C\u00e6sar")
    assert "\ufffd" in " ".join(docs[0].sentences)
    assert any("shakespeare-caesar.txt:119" in r.message and "--encoding latin-1" in r.message for r in caplog.records)
    docs, stats = read_all(path, encoding="latin-1")
    assert stats.undecodable_lines == 0
    assert "C\u00e6sar" in " ".join(docs[0].sentences)
